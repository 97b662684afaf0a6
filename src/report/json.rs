//! The JSON report, schema `vramscope.report/1` (documented in `docs/report-schema.md`).
//!
//! The schema name carries a major version: fields may be added within a version, never removed
//! or changed in meaning. `vramscope diagnose --json` prints exactly this document.

use serde::Serialize;

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
    };
    // Serializing plain structs of strings and numbers cannot fail.
    serde_json::to_string_pretty(&document)
        .unwrap_or_else(|e| format!("{{\"schema\":\"{SCHEMA}\",\"error\":\"{e}\"}}"))
}
