//! One verdict (issues 10 and 13): the Allocator tab's OOM explainer, `vramscope analyze` and
//! `vramscope diagnose` classify the same snapshot with the same code, the device badges judge
//! like the diagnosis, and recordings are judged however short. One test per contradiction the
//! issues list.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use crate::support::cli::case;
use vramscope_core::analysis::oom;
use vramscope_core::analysis::timetravel::TimeTravel;
use vramscope_core::diagnose::oom::judge_explanation;
use vramscope_core::diagnose::{
    Category, DiagnosisInput, NamedCapture, Severity, diagnose, snapshot, trajectory,
};
use vramscope_core::formats::pytorch;
use vramscope_core::model::{
    Capture, CaptureMeta, DeviceFacts, DeviceSample, GIB, MIB, MemoryReading, ProcessSample,
    SampleBatch,
};

/// The verdict the Allocator tab shows for the last OOM of `path` (the explainer's heading).
fn allocator_tab_verdict(path: &Path) -> Category {
    let snapshot = Arc::new(pytorch::read_file(path, &|_| true).unwrap_or_else(|e| panic!("{e}")));
    let travel = TimeTravel::new(Arc::clone(&snapshot), 0);
    let explanations = oom::explain_all(&travel);
    let e = explanations
        .last()
        .unwrap_or_else(|| panic!("{}: no OOM", path.display()));
    judge_explanation(
        e,
        &snapshot.name,
        snapshot
            .settings
            .as_ref()
            .and_then(|s| s.expandable_segments),
        trajectory::of_trace(&travel, Some(e.event_index)),
        vramscope_core::diagnose::proof::replay_trace(&travel, 0).ok(),
    )
    .category
}

/// What `vramscope analyze --json` says about the last OOM of `path`.
fn analyze_verdict(path: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["analyze", "--json"])
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("vramscope analyze: {e}"));
    let reports: serde_json::Value =
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("analyze --json: {e}"));
    reports[0]["devices"][0]["ooms"]
        .as_array()
        .and_then(|ooms| ooms.last())
        .and_then(|oom| oom["verdict"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// The primary category `diagnose` gives the snapshot alone.
fn diagnose_verdict(path: &Path) -> Category {
    let snapshot = Arc::new(pytorch::read_file(path, &|_| true).unwrap_or_else(|e| panic!("{e}")));
    let d = diagnose(&DiagnosisInput {
        snapshots: snapshot::facts(&snapshot),
        ..Default::default()
    });
    d.primary().unwrap_or_else(|| panic!("no finding")).category
}

#[test]
fn the_allocator_tab_analyze_and_diagnose_agree_on_every_real_oom_snapshot() {
    for name in [
        "batch_too_large.pickle",
        "fragmentation.pickle",
        "memory_cap.pickle",
        "other_process.pickle",
    ] {
        let path = case(name);
        let tab = allocator_tab_verdict(&path);
        assert_eq!(
            tab,
            diagnose_verdict(&path),
            "{name}: Allocator tab vs Diagnose"
        );
        assert_eq!(
            tab.as_str(),
            analyze_verdict(&path),
            "{name}: Allocator tab vs analyze"
        );
    }
}

#[test]
fn a_snapshot_refused_by_a_per_process_cap_is_named_a_cap_everywhere() {
    // set_per_process_memory_fraction(0.1): the explainer named the cap and Diagnose did not.
    let path = case("memory_cap.pickle");
    assert_eq!(allocator_tab_verdict(&path), Category::MemoryCap);
    assert_eq!(diagnose_verdict(&path), Category::MemoryCap);
    assert_eq!(analyze_verdict(&path), "memory-cap");
}

#[test]
fn a_batch_that_fills_the_card_is_capacity_in_the_tab_and_in_diagnose() {
    // "98.6 % in use by tensors" and "capacity" in the Allocator tab, never "fragmentation" in
    // Diagnose for the same snapshot.
    let path = case("batch_too_large.pickle");
    assert_eq!(allocator_tab_verdict(&path), Category::Capacity);
    assert_eq!(diagnose_verdict(&path), Category::Capacity);
}

/// A 140 GiB GPU read every 250 ms for `seconds`, with `procs(t_ms)` as (pid, bytes).
fn capture(seconds: i64, procs: impl Fn(i64) -> Vec<(u32, u64)>) -> NamedCapture {
    let total = 140 * GIB;
    let mut c = Capture::new(
        CaptureMeta::default(),
        vec![DeviceFacts {
            index: 0,
            name: "NVIDIA H200".into(),
            memory_total_bytes: total,
            ..Default::default()
        }],
    );
    for tick in 0..=seconds * 4 {
        let t = tick * 250;
        let ps = procs(t);
        let used: u64 = ps.iter().map(|p| p.1).sum::<u64>().min(total);
        c.ingest(&SampleBatch {
            devices: vec![DeviceSample {
                t_ms: t,
                device_index: 0,
                memory: Some(MemoryReading {
                    used_bytes: used,
                    reserved_bytes: 0,
                    free_bytes: total - used,
                    total_bytes: total,
                }),
                ..Default::default()
            }],
            processes: Some(
                ps.iter()
                    .map(|&(pid, bytes)| ProcessSample {
                        t_ms: t,
                        device_index: 0,
                        pid,
                        name: format!("python{pid}"),
                        used_bytes: Some(bytes),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        });
    }
    NamedCapture {
        name: "run.vramcap".into(),
        capture: c,
    }
}

#[test]
fn a_four_minute_fast_climb_next_to_a_steady_process_is_a_critical_leak() {
    // One process grows by 256 MiB every second (to 58 GiB) next to a steady 20 GiB one: it was
    // "No problem found" because of a silent 10-minute minimum.
    let c = capture(228, |t| {
        vec![(100, 20 * GIB), (200, GIB + (t as u64 / 1000) * 256 * MIB)]
    });
    let d = diagnose(&DiagnosisInput {
        captures: vec![c.clone()],
        ..Default::default()
    });
    let f = d.primary().unwrap_or_else(|| panic!("no finding"));
    assert_eq!(f.category, Category::Leak, "{:?}", d.findings);
    assert_eq!(f.severity, Severity::Critical);
    assert!(f.title.contains("process 200"), "{}", f.title);
    assert!(
        d.findings.iter().all(|f| !f.title.contains("process 100")),
        "the steady process is not a leak"
    );
    // The process table's and the Leak wizard's growth is the same judgement.
    let leaking = vramscope_core::diagnose::leak::leaking_processes(&c.capture);
    assert_eq!(leaking, vec![(0, 200)]);
}

#[test]
fn a_recording_too_short_to_judge_says_so_and_is_never_healthy() {
    let c = capture(40, |_| vec![(100, 30 * GIB)]);
    let d = diagnose(&DiagnosisInput {
        captures: vec![c],
        ..Default::default()
    });
    let f = d.primary().unwrap_or_else(|| panic!("no finding"));
    assert_eq!(f.category, Category::Inconclusive, "{:?}", d.findings);
    assert!(f.title.starts_with("Too short to judge"), "{}", f.title);
    assert!(d.findings.iter().all(|f| f.category != Category::Healthy));
}

#[test]
fn a_gpu_at_136_of_140_gib_in_a_capture_is_a_warning_not_healthy() {
    let c = capture(120, |_| vec![(100, 136 * GIB)]);
    let d = diagnose(&DiagnosisInput {
        captures: vec![c],
        ..Default::default()
    });
    let f = d.primary().unwrap_or_else(|| panic!("no finding"));
    assert_eq!(
        (f.category, f.severity),
        (Category::Capacity, Severity::Warning),
        "{:?}",
        d.findings
    );
    assert!(f.title.contains("ran near full: 97.1%"), "{}", f.title);
}
