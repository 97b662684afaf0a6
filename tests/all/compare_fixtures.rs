//! `vramscope compare` against the truth of real H100 runs made for it
//! (`tests/fixtures/compare/README.md`): the leaking line and its bytes per step from periodic
//! snapshots, the same model at two batch sizes (weights, gradients and optimizer state equal to
//! the program's own sizes; activations following the batch), a before/after pair of a real fix,
//! and the heaviest of three ranks.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use crate::support::cli::{text, vramscope};
use vramscope_core::analysis::categories::{MemoryCategory, attribute};
use vramscope_core::analysis::timetravel::TimeTravel;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/compare")
        .join(name)
}

fn truth(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture(name)).expect("truth file");
    serde_json::from_str(&text).expect("truth is JSON")
}

fn compare_json(args: &[&str]) -> Value {
    let paths: Vec<String> = args
        .iter()
        .map(|a| {
            if a.ends_with(".pickle") {
                fixture(a).display().to_string()
            } else {
                (*a).to_owned()
            }
        })
        .collect();
    let mut all = vec!["compare", "--json"];
    all.extend(paths.iter().map(String::as_str));
    let out = vramscope(&all);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// Within `fraction` of `expected`.
fn near(actual: f64, expected: f64, fraction: f64) -> bool {
    (actual - expected).abs() <= fraction * expected.abs()
}

#[test]
fn periodic_snapshots_name_the_leaking_line_with_its_bytes_per_step() {
    let truth = truth("leak.truth.json");
    let doc = compare_json(&[
        "--growth",
        "leak_step2.pickle",
        "leak_step4.pickle",
        "leak_step6.pickle",
        "leak_step8.pickle",
    ]);
    let top = &doc["growth"][0];
    let expected_site = format!(
        "{}:{} {}",
        truth["leak_file"].as_str().expect("file"),
        truth["leak_line"],
        truth["leak_function"].as_str().expect("function")
    );
    assert_eq!(top["site"], expected_site.as_str(), "{top}");
    let per_step = top["bytes_per_step"].as_f64().expect("steps counted");
    let expected = truth["bytes_per_step"].as_f64().expect("truth");
    assert!(
        near(per_step, expected, 0.01),
        "{per_step} against {expected}"
    );
    // Steps between snapshots were counted from the trace: two each.
    assert_eq!(top["steps"], serde_json::json!([2, 2, 2]), "{top}");
    assert_eq!(
        doc["growth"].as_array().map(Vec::len),
        Some(1),
        "only the leak grows"
    );
}

/// The largest activation bytes of any state of the snapshot's trace.
fn peak_activations(name: &str) -> u64 {
    let path = fixture(name);
    let snapshot =
        Arc::new(vramscope_core::formats::pytorch::read_file(&path, &|_| true).expect("snapshot"));
    let travel = TimeTravel::new(Arc::clone(&snapshot), 0);
    (0..=travel.len())
        .map(|i| {
            attribute(&travel, &travel.state_at(i))
                .1
                .bytes(MemoryCategory::Activations)
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn two_batch_sizes_keep_the_model_and_scale_the_activations() {
    let doc = compare_json(&["batch64.pickle", "batch256.pickle"]);
    for (side, truth_file) in doc["snapshots"]
        .as_array()
        .expect("sides")
        .iter()
        .zip(["batch64.truth.json", "batch256.truth.json"])
    {
        let truth = truth(truth_file);
        for (category, key) in [
            ("parameters", "parameter_bytes"),
            ("gradients", "gradient_bytes"),
            ("optimizer_state", "optimizer_state_bytes"),
        ] {
            let got = side["categories"][category].as_f64().expect("bytes");
            let expected = truth[key].as_f64().expect("truth");
            assert!(
                near(got, expected, 0.05),
                "{truth_file} {category}: {got} against {expected}"
            );
        }
    }
    let findings = doc["verdict"]["findings"].to_string();
    assert!(
        findings.contains("Parameters, gradients and optimizer state are the same"),
        "{findings}"
    );
    // Activations at their highest: four times the batch, about four times the bytes (the
    // model's own buffers make it a little less).
    let (small, large) = (
        peak_activations("batch64.pickle"),
        peak_activations("batch256.pickle"),
    );
    let ratio = large as f64 / small as f64;
    assert!((3.0..=4.2).contains(&ratio), "{large} / {small} = {ratio}");
}

#[test]
fn the_fix_removes_the_activations_each_step_kept() {
    let doc = compare_json(&["--at", "end", "fix_after.pickle", "fix_before.pickle"]);
    let sides = doc["snapshots"].as_array().expect("sides");
    let activations = |i: usize| sides[i]["categories"]["activations"].as_u64().unwrap_or(0);
    assert!(
        activations(1) > 4 * activations(0),
        "before {} after {}",
        activations(1),
        activations(0)
    );
    assert_eq!(
        sides[0]["categories"]["parameters"],
        sides[1]["categories"]["parameters"]
    );
    let top = &doc["call_sites"][0];
    assert!(top["delta_bytes"].as_i64().is_some_and(|d| d > 0), "{top}");
    assert!(
        top["site"]
            .as_str()
            .is_some_and(|s| s.starts_with("workloads.py:")),
        "{top}"
    );
}

#[test]
fn the_rank_table_names_the_rank_with_the_most_work() {
    let heaviest = (0..3)
        .max_by_key(|r| truth(&format!("rank{r}.truth.json"))["batch"].as_u64())
        .expect("ranks");
    let doc = compare_json(&["rank0.pickle", "rank1.pickle", "rank2.pickle"]);
    assert_eq!(doc["kind"], "ranks");
    let headline = doc["verdict"]["headline"].as_str().unwrap_or_default();
    assert!(
        headline.starts_with(&format!("Rank {heaviest} is the heaviest")),
        "{headline}"
    );
    let rows = doc["ranks"].as_array().expect("rank rows");
    assert_eq!(rows.len(), 3);
    let peak = |r: usize| rows[r]["peak_allocated_bytes"].as_u64().unwrap_or(0);
    assert!(peak(heaviest) > peak(0) && peak(heaviest) > peak(2));
}
