//! `vramscope compare` on real H200 snapshots: the leak between two snapshots of one run named
//! with its line and bytes per step, a file compared with itself, an unreadable file among
//! readable ones, the JSON schema, the reports, and captures side by side.

use serde_json::Value;

use crate::support::cli::{case, run_command, text, vramscope};

/// `tests/fixtures/cases/leak*.pickle`: one real run (scripts/cases/make_cases.py, case
/// "leak") that keeps every step's 256 MiB output (`out = model(x)`, line 28 of its script)
/// alive; snapshotted after step 10 and after step 40.
const LEAK_BYTES_PER_STEP: f64 = 256.0 * 1024.0 * 1024.0;

fn json_of(args: &[&str]) -> Value {
    let out = vramscope(args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)))
}

#[test]
fn growth_between_snapshots_of_one_run_names_the_leaking_line_and_bytes_per_step() {
    let (early, late) = (case("leak_step10.pickle"), case("leak.pickle"));
    let doc = json_of(&[
        "compare",
        "--growth",
        "--json",
        // Given in the wrong order: the comparison orders them by their traces' times.
        late.to_str().expect("utf-8"),
        early.to_str().expect("utf-8"),
    ]);
    assert_eq!(doc["schema"], "vramscope.compare/1");
    assert_eq!(doc["kind"], "growth");
    let top = &doc["growth"][0];
    assert_eq!(top["site"], "_leak.py:28 <module>", "{top}");
    let per_step = top["bytes_per_step"].as_f64().expect("steps were counted");
    assert!(
        (per_step - LEAK_BYTES_PER_STEP).abs() <= 0.01 * LEAK_BYTES_PER_STEP,
        "{per_step} bytes per step"
    );
    let headline = doc["verdict"]["headline"].as_str().unwrap_or_default();
    assert!(headline.starts_with("Leak: _leak.py:28"), "{headline}");
    assert!(headline.contains("256 MiB per step"), "{headline}");
    // Only the leaking site grows in every interval.
    assert_eq!(
        doc["growth"].as_array().map(Vec::len),
        Some(1),
        "{}",
        doc["growth"]
    );
}

#[test]
fn a_pair_ranks_call_sites_by_change_and_keeps_the_weights_apart() {
    let (early, late) = (case("leak_step10.pickle"), case("leak.pickle"));
    let doc = json_of(&[
        "compare",
        "--json",
        early.to_str().expect("utf-8"),
        late.to_str().expect("utf-8"),
    ]);
    assert_eq!(doc["kind"], "pair");
    assert_eq!(doc["call_sites"][0]["site"], "_leak.py:28 <module>");
    // 30 more steps of 256 MiB outputs.
    assert_eq!(
        doc["call_sites"][0]["delta_bytes"].as_i64(),
        Some(30 * (256 << 20))
    );
    let snapshots = doc["snapshots"].as_array().expect("snapshots");
    assert_eq!(snapshots.len(), 2);
    // The model, one 8192×8192 Linear (fp32 weight and bias), is the same in both.
    let parameter_bytes = 8192 * 8192 * 4 + 8192 * 4;
    for s in snapshots {
        assert_eq!(
            s["categories"]["parameters"].as_u64(),
            Some(parameter_bytes),
            "{s}"
        );
    }
    let findings = doc["verdict"]["findings"].to_string();
    assert!(
        findings.contains("Parameters, gradients and optimizer state are the same"),
        "{findings}"
    );
}

#[test]
fn a_file_compared_with_itself_shows_no_difference() {
    let file = case("fragmentation.pickle");
    let (code, stdout, stderr) = run_command("compare", &[file.as_os_str(), file.as_os_str()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("No difference"), "{stdout}");
    assert!(stdout.contains("(none changed)"), "{stdout}");
}

#[test]
fn an_unreadable_file_is_named_and_the_rest_still_compare() {
    let dir = tempfile::tempdir().expect("temp dir");
    let broken = dir.path().join("broken.pickle");
    std::fs::write(&broken, b"\x80\x04\x95 cut short").expect("written");
    let (a, b) = (case("leak_step10.pickle"), case("leak.pickle"));
    let (code, stdout, stderr) = run_command(
        "compare",
        &[a.as_os_str(), broken.as_os_str(), b.as_os_str()],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("broken.pickle"), "{stderr}");
    assert!(
        stdout.contains("not compared:") && stdout.contains("broken.pickle"),
        "{stdout}"
    );
    assert!(stdout.contains("_leak.py:28"), "{stdout}");
    // With only one readable file left there is nothing to compare.
    let (code, _, stderr) = run_command("compare", &[a.as_os_str(), broken.as_os_str()]);
    assert_eq!(code, 1);
    assert!(stderr.contains("at least two"), "{stderr}");
}

#[test]
fn reports_in_every_format_show_the_comparison() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (a, b) = (case("leak_step10.pickle"), case("leak.pickle"));
    for name in ["cmp.md", "cmp.html", "cmp.json"] {
        let out = dir.path().join(name);
        let args = [
            "compare",
            a.to_str().expect("utf-8"),
            b.to_str().expect("utf-8"),
            "--report",
            out.to_str().expect("utf-8"),
        ];
        let run = vramscope(&args);
        assert!(run.status.success(), "{}", text(&run.stderr));
        let written = std::fs::read_to_string(&out).expect("report written");
        assert!(written.contains("_leak.py:28"), "{name}");
        if name.ends_with(".html") {
            assert!(
                written.contains("class=\"bar\""),
                "category bars side by side"
            );
            assert!(written.contains("activations"));
        }
        if name.ends_with(".json") {
            let doc: Value = serde_json::from_str(&written).expect("JSON");
            assert_eq!(doc["schema"], "vramscope.compare/1");
        }
    }
}

#[test]
fn captures_compare_per_gpu_with_peak_floor_growth_and_time_above() {
    let capture = case("live_leak.vramcap");
    let doc = json_of(&[
        "compare",
        "--json",
        "--threshold",
        "50",
        capture.to_str().expect("utf-8"),
        capture.to_str().expect("utf-8"),
    ]);
    let captures = doc["captures"].as_array().expect("captures");
    assert_eq!(captures.len(), 2);
    let gpu = &captures[0]["gpus"][0];
    assert!(
        gpu["peak_bytes"].as_u64() > gpu["floor_bytes"].as_u64(),
        "{gpu}"
    );
    assert!(
        gpu["growth_bytes_per_min"]
            .as_f64()
            .is_some_and(|g| g > 0.0),
        "a leak grows: {gpu}"
    );
    assert_eq!(captures[0], captures[1], "a capture compared with itself");
    let bad = vramscope(&[
        "compare",
        "--threshold",
        "150",
        capture.to_str().expect("utf-8"),
        capture.to_str().expect("utf-8"),
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("1 to 100"));
}
