//! Reports of a snapshot with an allocation history carry the what-if table: the self-check and,
//! per setting, the predicted peak reserved, the outcome and where it runs out, marked as replay
//! predictions, in Markdown, HTML and JSON alike; a snapshot without history has no table.
//!
//! Data is the real `frag_oom` fixture (an H200 run that ran out of memory at a recorded event).

use std::path::PathBuf;
use std::sync::Arc;

use vramscope_core::analysis::replay::{WhatIfRequest, what_if_snapshot};
use vramscope_core::diagnose::engine::{DiagnosisInput, diagnose};
use vramscope_core::formats::pytorch;
use vramscope_core::model::allocator::{AllocatorSnapshot, TraceAction};
use vramscope_core::model::format_bytes;
use vramscope_core::report::{Report, ReportFormat, render};

fn open(name: &str) -> Arc<AllocatorSnapshot> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pytorch")
        .join(name);
    Arc::new(pytorch::read_file(&path, &|_| true).unwrap_or_else(|e| panic!("{name}: {e}")))
}

fn report_of(snapshot: &Arc<AllocatorSnapshot>) -> Report {
    let input = DiagnosisInput {
        snapshots: vramscope_core::diagnose::snapshot::facts(snapshot),
        ..Default::default()
    };
    Report {
        title: "what-if report test".to_owned(),
        generated_at_ms: 0,
        diagnosis: diagnose(&input),
        timeline: None,
    }
}

#[test]
fn every_format_carries_the_self_check_and_each_settings_prediction() {
    let snapshot = open("frag_oom.pickle");
    let report = report_of(&snapshot);
    let named = report
        .diagnosis
        .what_if
        .first()
        .unwrap_or_else(|| panic!("frag_oom has a history: the diagnosis carries its replay"));
    // The sweep the report shows is the one `vramscope whatif` makes without --setting.
    let direct = what_if_snapshot(
        Arc::clone(&snapshot),
        &WhatIfRequest {
            device: 0,
            candidates: Vec::new(),
            cap_bytes: None,
            device_memory_bytes: None,
        },
        &|_| true,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(*named.report, direct);
    assert!(direct.self_check.reliable, "{:?}", direct.self_check);
    assert!(
        direct.results.len() >= 4,
        "{} settings",
        direct.results.len()
    );
    let real_oom = snapshot.traces[0]
        .actions
        .iter()
        .position(|&a| a == TraceAction::Oom)
        .unwrap_or_else(|| panic!("frag_oom records its OOM"));

    let markdown = render(&report, ReportFormat::Markdown);
    let html = render(&report, ReportFormat::Html);
    for (format, text) in [("markdown", &markdown), ("html", &html)] {
        assert!(
            text.contains("What-if replay (predictions)"),
            "{format}: {text}"
        );
        assert!(
            text.contains("Replay predictions, not measurements"),
            "{format}"
        );
        assert!(text.contains("self-check OK"), "{format}");
        assert!(text.contains("(recorded)"), "{format}");
        // The recorded run fails where the real one did, and the table says where.
        assert!(
            text.contains(&format!("event {real_oom}: ")),
            "{format} names the failing event {real_oom}"
        );
        for outcome in &direct.results {
            let row = text
                .lines()
                .find(|l| {
                    l.contains(&format!(">{}<", outcome.conf))
                        || l.contains(&format!("`{}`", outcome.conf))
                })
                .unwrap_or_else(|| panic!("{format}: no row for {}", outcome.conf));
            assert!(
                row.contains(&format_bytes(outcome.peak_reserved_bytes)),
                "{format}: {row}"
            );
            let verdict = if outcome.oom.is_some() {
                "OUT OF MEMORY"
            } else {
                "runs"
            };
            assert!(row.contains(verdict), "{format}: {row}");
        }
    }

    let json: serde_json::Value = serde_json::from_str(&render(&report, ReportFormat::Json))
        .unwrap_or_else(|e| panic!("{e}"));
    let entries = json["what_if"]
        .as_array()
        .unwrap_or_else(|| panic!("no what_if in {json}"));
    assert_eq!(entries.len(), 1);
    let entry = &entries[0];
    assert_eq!(entry["kind"], "replay prediction");
    assert_eq!(entry["schema"], "vramscope.whatif/1");
    assert_eq!(entry["self_check"]["reliable"], true);
    assert_eq!(entry["recorded"]["oom"], true);
    assert_eq!(entry["recorded"]["oom_event"], real_oom);
    let results = entry["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results"));
    assert_eq!(results.len(), direct.results.len());
    for (row, outcome) in results.iter().zip(&direct.results) {
        assert_eq!(row["setting"], outcome.conf.as_str());
        assert_eq!(row["peak_reserved_bytes"], outcome.peak_reserved_bytes);
        assert_eq!(row["oom"], outcome.oom.is_some());
    }
}

#[test]
fn a_snapshot_without_history_has_no_table() {
    let snapshot = open("frag_oom.v-bare.pickle");
    assert!(
        snapshot.traces.iter().all(|t| t.is_empty()),
        "the bare fixture has no trace"
    );
    let report = report_of(&snapshot);
    assert!(report.diagnosis.what_if.is_empty());
    assert!(!render(&report, ReportFormat::Markdown).contains("What-if replay"));
    assert!(!render(&report, ReportFormat::Html).contains("What-if replay"));
    let json: serde_json::Value = serde_json::from_str(&render(&report, ReportFormat::Json))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json["what_if"], serde_json::json!([]));
}
