//! A case recorded for real on an H200 (see `tests/fixtures/cases/README.md`): a training job with
//! the live-capture helper leaked 128 MiB per step while `vramscope record` ran, then an
//! allocation of 200 GiB (more than the whole card) failed. The diagnosis over its log, capture
//! and OOM snapshot must put that failure first as capacity (fixing the leak would not have
//! avoided it) and find the leak too, with the leak fix as its first recommendation.

use crate::support::cli::case;

use std::process::Command;

#[test]
fn live_leak_case_is_diagnosed_as_a_leak_from_log_capture_and_snapshot() {
    let output = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .arg("diagnose")
        .arg("--log")
        .arg(case("live_leak.log"))
        .arg("--capture")
        .arg(case("live_leak.vramcap"))
        .arg("--snapshot")
        .arg(case("live_leak.oom.pickle"))
        .arg("--json")
        .output()
        .expect("vramscope runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("diagnose --json printed no JSON ({e}): {stdout}"));
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(case("live_leak.expected.json")).expect("expected.json"),
    )
    .expect("expected.json parses");
    let primary = &report["findings"][0];
    assert_eq!(primary["category"], expected["category"], "{stdout}");
    assert_eq!(
        primary["recommendations"][0]["id"], expected["first_recommendation"],
        "{stdout}"
    );
    assert_eq!(report["simulated"], false);
    // the OOM behind it is explained too, from the real PyTorch message
    let categories: Vec<&str> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| f["category"].as_str())
        .collect();
    assert!(categories.contains(&"capacity"), "{categories:?}");
    let leak = report["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["category"] == "leak"))
        .unwrap_or_else(|| panic!("no leak finding: {stdout}"));
    assert_eq!(leak["recommendations"][0]["id"], "fix-leak", "{stdout}");
}

#[test]
fn live_capture_of_the_helper_opens_with_its_process() {
    let output = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["inspect", "--json"])
        .arg(case("live_leak.vramcap"))
        .output()
        .expect("vramscope runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let inspect: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("inspect --json is JSON");
    let text = inspect.to_string();
    assert!(text.contains("python3"), "{text}");
    assert!(text.contains("NVIDIA H200"), "{text}");
}
