//! The JSON report, schema `vramscope.report/1` (documented in `docs/report-schema.md`).
//!
//! The schema name carries a major version: fields may be added within a version, never removed
//! or changed in meaning. `vramscope diagnose --json` prints exactly this document.

use serde::Serialize;

use super::whatif::{JsonReport, PREDICTION_NOTE, json_document};
use super::{Report, iso8601_utc};
use crate::diagnose::finding::{Finding, InputSummary};

/// The schema identifier written in every JSON report.
pub const SCHEMA: &str = "vramscope.report/1";

#[derive(Serialize)]
struct Document<'a> {
    schema: &'static str,
    generator: String,
    generated_at: String,
    title: &'a str,
    simulated: bool,
    inputs: &'a [InputSummary],
    /// Primary cause first.
    findings: &'a [Finding],
    /// What-if replays of the snapshots with an allocation history: each a
    /// `vramscope.whatif/1` document, marked `"kind": "replay prediction"`.
    what_if: Vec<WhatIfEntry>,
    /// Where the live memory went, by category, in each snapshot device: at the failure and at
    /// the peak before it (`super::categories::json_entry`).
    memory_categories: Vec<serde_json::Value>,
}

/// One snapshot device's what-if replay in the report.
#[derive(Serialize)]
struct WhatIfEntry {
    /// Always "replay prediction": the numbers are the allocator model's, not measured.
    kind: &'static str,
    note: &'static str,
    #[serde(flatten)]
    replay: JsonReport,
}

/// Renders the report as pretty-printed JSON.
pub fn render(report: &Report) -> String {
    let document = Document {
        schema: SCHEMA,
        generator: format!("vramscope {}", env!("CARGO_PKG_VERSION")),
        generated_at: iso8601_utc(report.generated_at_ms),
        title: &report.title,
        simulated: report.diagnosis.simulated,
        inputs: &report.diagnosis.inputs,
        findings: &report.diagnosis.findings,
        what_if: report
            .diagnosis
            .what_if
            .iter()
            .map(|named| WhatIfEntry {
                kind: "replay prediction",
                note: PREDICTION_NOTE,
                replay: json_document(&named.report, &named.snapshot),
            })
            .collect(),
        memory_categories: report
            .diagnosis
            .memory_categories
            .iter()
            .map(super::categories::json_entry)
            .collect(),
    };
    // Serializing plain structs of strings and numbers cannot fail.
    serde_json::to_string_pretty(&document)
        .unwrap_or_else(|e| format!("{{\"schema\":\"{SCHEMA}\",\"error\":\"{e}\"}}"))
}
