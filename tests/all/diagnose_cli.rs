//! `vramscope diagnose` end to end: inputs from files and the demo machine, --json on stdout,
//! --report files, and clear errors for bad input.

use std::path::PathBuf;
use std::process::Output;

use crate::support::cli::vramscope;
use serde_json::Value;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/logs")
        .join(name)
        .display()
        .to_string()
}

fn json_of(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

#[test]
fn json_puts_the_primary_cause_first() {
    let out = vramscope(&[
        "diagnose",
        "--log",
        &fixture("pytorch_frag_under_cap.log"),
        "--json",
    ]);
    let doc = json_of(&out);
    assert_eq!(doc["schema"], "vramscope.report/1");
    let first = &doc["findings"][0];
    assert_eq!(first["category"], "fragmentation");
    assert_eq!(first["severity"], "critical");
    assert_eq!(first["recommendations"][0]["id"], "expandable-segments");
    assert!(first["evidence"].as_array().is_some_and(|e| !e.is_empty()));
    assert_eq!(doc["findings"][1]["category"], "memory-cap");
}

#[test]
fn several_logs_after_one_flag_and_text_output() {
    let out = vramscope(&[
        "diagnose",
        "--log",
        &fixture("pytorch_other_process.log"),
        &fixture("dmesg_xid.log"),
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("1. [CRITICAL] other-process:"), "{text}");
    assert!(text.contains("xid"), "{text}");
    assert!(text.contains("[free-other-process]"), "{text}");
}

#[test]
fn demo_machine_is_labelled_simulated_and_shows_its_leak_and_oom() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let html = dir.path().join("report.html");
    let out = vramscope(&[
        "diagnose",
        "--live",
        "--demo",
        "--json",
        "--report",
        &html.display().to_string(),
    ]);
    let doc = json_of(&out);
    assert_eq!(doc["simulated"], true);
    let categories: Vec<&str> = doc["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["category"].as_str())
        .collect();
    assert_eq!(categories.first(), Some(&"capacity"), "{categories:?}");
    assert!(categories.contains(&"leak"), "{categories:?}");
    // The simulated card is visibly full at the reading before its OOM.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("between two samples"), "{stdout}");
    let page = std::fs::read_to_string(&html).unwrap_or_else(|e| panic!("{e}"));
    assert!(page.contains("SIMULATED DATA"));
    assert!(page.contains("data:image/png;base64,"));
}

#[test]
fn a_recorded_capture_file_is_diagnosed() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("day.vramcap");
    let capture = vramscope_core::source::demo::generate_capture(
        &vramscope_core::source::demo::DemoConfig::default(),
        1_795_941_000_000,
        9 * 60 * 1000,
        1000,
    );
    vramscope_core::formats::vramcap::write_file(&path, &capture).unwrap_or_else(|e| panic!("{e}"));
    let md = dir.path().join("report.md");
    let out = vramscope(&[
        "diagnose",
        "--capture",
        &path.display().to_string(),
        "--report",
        &md.display().to_string(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&md).unwrap_or_else(|e| panic!("{e}"));
    assert!(text.contains("### 1. CRITICAL [capacity]"), "{text}");
    assert!(
        text.contains("day.vramcap`"),
        "file names are cited, as code spans: {text}"
    );
    assert!(!text.contains("\\."), "no needless escapes: {text}");
}

#[test]
fn a_run_folder_is_diagnosed_on_the_gpus_its_job_used() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let folder = dir.path().join("20261208T000000Z-train");
    std::fs::create_dir_all(&folder).unwrap_or_else(|e| panic!("{e}"));
    let timeline = folder.join("timeline.vramcap");
    // Someone else's job fills GPU 0; the run's job (pid 100) used GPU 1.
    let machine = crate::diagnose_cases::shared_machine().capture;
    vramscope_core::formats::vramcap::write_file(&timeline, &machine)
        .unwrap_or_else(|e| panic!("{e}"));
    let titles = |args: &[&str]| -> Vec<String> {
        let doc = json_of(&vramscope(args));
        doc["findings"]
            .as_array()
            .unwrap_or_else(|| panic!("findings: {doc}"))
            .iter()
            .map(|f| f["title"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let path = timeline.display().to_string();
    let machines = titles(&["diagnose", "--capture", &path, "--json"]);
    assert!(
        machines
            .iter()
            .any(|t| t.starts_with("GPU 0 ran near full")),
        "the machine's timeline alone: {machines:?}"
    );
    std::fs::write(
        folder.join(vramscope_core::model::run::MANIFEST_FILE),
        r#"{"schema": "vramscope.run/1", "pids": [100, 101]}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let runs = titles(&["diagnose", &folder.display().to_string(), "--json"]);
    assert!(
        !runs.iter().any(|t| t.contains("GPU 0")),
        "the run's job used GPU 1 only: {runs:?}"
    );
}

#[test]
fn bad_input_fails_with_a_message_naming_the_problem() {
    // Nothing to diagnose is a usage error (exit 2), which names the inputs it takes.
    let out = vramscope(&["diagnose"]);
    assert_eq!(out.status.code(), Some(2), "usage error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for input in ["--live", "--capture", "--snapshot", "--log"] {
        assert!(stderr.contains(input), "{input} missing from: {stderr}");
    }

    let out = vramscope(&["diagnose", "--log", "/nonexistent/train.log"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/train.log"));

    let out = vramscope(&[
        "diagnose",
        "--log",
        &fixture("jax.log"),
        "--report",
        "out.pdf",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("out.pdf"));

    let out = vramscope(&["diagnose", "--log", &fixture("jax.log"), "--cuda", "twelve"]);
    assert_eq!(out.status.code(), Some(2), "usage error");

    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let not_a_capture = dir.path().join("x.vramcap");
    std::fs::write(&not_a_capture, b"hello").unwrap_or_else(|e| panic!("{e}"));
    let out = vramscope(&[
        "diagnose",
        "--capture",
        &not_a_capture.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("x.vramcap"));

    // A log given as a capture: the error says to pass it with --log (as a pickle's says
    // `analyze`).
    let out = vramscope(&["diagnose", "--capture", &fixture("jax.log")]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("jax.log") && stderr.contains("diagnose --log"),
        "{stderr}"
    );
}

#[test]
fn cuda_version_from_the_user_is_checked_against_the_log_driver() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let log = dir.path().join("smi.txt");
    std::fs::write(
        &log,
        "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2 |\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let out = vramscope(&[
        "diagnose",
        "--log",
        &log.display().to_string(),
        "--cuda",
        "13.0",
        "--json",
    ]);
    let doc = json_of(&out);
    assert_eq!(doc["findings"][0]["category"], "driver-mismatch");
    let kinds: Vec<&str> = doc["findings"][0]["evidence"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["source"]["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        vec!["user", "log-line"],
        "the user's CUDA against the driver's CUDA from nvidia-smi"
    );
    assert!(
        doc["findings"][0]["title"]
            .as_str()
            .unwrap_or_default()
            .contains("supports CUDA 12.2")
    );
}

#[test]
fn snapshots_after_one_flag_and_a_bad_snapshot() {
    let cases = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cases");
    let p = |name: &str| cases.join(name).display().to_string();
    let out = vramscope(&[
        "diagnose",
        "--log",
        &p("leak.log"),
        "--snapshot",
        &p("leak_step10.pickle"),
        &p("leak.pickle"),
        "--json",
    ]);
    let doc = json_of(&out);
    assert_eq!(doc["findings"][0]["category"], "leak");
    assert_eq!(doc["findings"][0]["recommendations"][0]["id"], "fix-leak");
    let kinds: Vec<&str> = doc["inputs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["kind"].as_str())
        .collect();
    assert_eq!(kinds, vec!["log", "snapshot", "snapshot"]);

    let out = vramscope(&["diagnose", "--snapshot", &p("leak.log")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("leak.log"));
}

/// `(category, severity, title)` of every finding of a `--json` report.
fn findings_of(doc: &Value) -> Vec<(String, String, String)> {
    doc["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            let text = |key: &str| f[key].as_str().unwrap_or_default().to_owned();
            (text("category"), text("severity"), text("title"))
        })
        .collect()
}

fn snapshot_fixture(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path)
        .display()
        .to_string()
}

#[test]
fn snapshots_of_unrelated_jobs_are_no_leak_and_each_keeps_its_oom() {
    let oom = snapshot_fixture("pytorch/oom.pickle");
    let fragmentation = snapshot_fixture("cases/fragmentation.pickle");
    let streams = snapshot_fixture("pytorch/streams.pickle");
    let out = vramscope(&["diagnose", "--snapshot", &oom, &fragmentation, "--json"]);
    let findings = findings_of(&json_of(&out));
    assert!(
        findings
            .iter()
            .all(|(category, severity, _)| category != "leak" || severity == "info"),
        "two jobs' snapshots are no leak: {findings:?}"
    );
    assert!(
        findings
            .iter()
            .any(|(category, _, title)| category == "leak" && title.contains("not compared")),
        "the note says why they were not compared: {findings:?}"
    );

    let out = vramscope(&[
        "diagnose",
        "--snapshot",
        &oom,
        "--snapshot",
        &fragmentation,
        "--snapshot",
        &streams,
        "--json",
    ]);
    let findings = findings_of(&json_of(&out));
    let cause_of = |file: &str| {
        findings
            .iter()
            .find(|(category, severity, title)| {
                category != "leak" && severity == "critical" && title.contains(file)
            })
            .map(|(category, _, _)| category.clone())
    };
    assert_eq!(
        cause_of("oom.pickle").as_deref(),
        Some("memory-cap"),
        "{findings:?}"
    );
    assert_eq!(
        cause_of("fragmentation.pickle").as_deref(),
        Some("fragmentation"),
        "{findings:?}"
    );
    assert!(
        findings
            .iter()
            .all(|(category, severity, _)| category != "leak" || severity == "info"),
        "{findings:?}"
    );
}

#[test]
fn a_twenty_second_demo_recording_is_no_leak() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = dir.path().join("demo20.vramcap");
    let capture = vramscope_core::source::demo::generate_capture(
        &vramscope_core::source::demo::DemoConfig::default(),
        1_795_941_000_000,
        20 * 1000,
        1000,
    );
    vramscope_core::formats::vramcap::write_file(&path, &capture).unwrap_or_else(|e| panic!("{e}"));
    let out = vramscope(&[
        "diagnose",
        "--capture",
        &path.display().to_string(),
        "--json",
    ]);
    let findings = findings_of(&json_of(&out));
    assert!(
        findings.iter().all(|(category, _, _)| category != "leak"),
        "a start-up is no leak: {findings:?}"
    );
}

#[test]
fn a_snapshot_given_as_a_log_is_refused_not_called_healthy() {
    let pickle = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/cases/leak.pickle")
        .display()
        .to_string();
    let out = vramscope(&["diagnose", "--log", &pickle]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("leak.pickle"), "{stderr}");
    assert!(stderr.contains("not a text log"), "{stderr}");
    assert!(stderr.contains("--snapshot"), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("healthy"));
}

#[test]
fn live_without_a_gpu_does_not_claim_to_show_a_simulated_machine() {
    let out = vramscope(&["diagnose", "--live"]);
    // With a GPU (a developer's machine) this diagnoses it; without one (CI) it must say so.
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("no NVIDIA GPU could be opened ("),
            "{stderr}"
        );
        assert!(
            stderr.contains("add --demo to diagnose the simulated machine"),
            "{stderr}"
        );
        assert!(!stderr.contains("showing a simulated machine"), "{stderr}");
    }
}

#[test]
fn fragmentation_split_limit_makes_the_failing_request_oversize() {
    let case = |name: &str| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/cases")
            .join(name)
            .display()
            .to_string()
    };
    let recommendations = |args: &[&str]| {
        let doc = json_of(&vramscope(args));
        doc["findings"][0]["recommendations"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    // The log alone: the setting is named, marked unverified.
    let from_log = recommendations(&["diagnose", "--log", &case("fragmentation.log"), "--json"]);
    let split = from_log
        .iter()
        .find(|r| r["id"] == "max-split-size")
        .cloned()
        .unwrap_or_default();
    // 1.5 GiB request: a limit of 1024 MiB, below it, not 2048.
    assert_eq!(
        split["action"],
        "export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:1024"
    );
    assert_eq!(split["verification"]["status"], "unverified");
    // With the allocation history (the snapshot), a setting is recommended only as the what-if
    // replay of that history proves it, with the replayed peak against what is allowed.
    let with_history = recommendations(&[
        "diagnose",
        "--log",
        &case("fragmentation.log"),
        "--snapshot",
        &case("fragmentation.pickle"),
        "--json",
    ]);
    let ids: Vec<&str> = with_history
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert!(!ids.contains(&"replay-settings"), "{with_history:?}");
    let settings: Vec<&serde_json::Value> = with_history
        .iter()
        .filter(|r| {
            r["action"]
                .as_str()
                .is_some_and(|a| a.contains("PYTORCH_CUDA_ALLOC_CONF"))
        })
        .collect();
    assert!(!settings.is_empty(), "{with_history:?}");
    for setting in settings {
        // The snapshot was taken at the failure: its trace ends inside the step that failed,
        // so the replay shows the failing request served, not the rest of the step.
        assert_eq!(
            setting["verification"]["status"], "passes-failing-request",
            "{setting}"
        );
        let detail = setting["verification"]["detail"]
            .as_str()
            .unwrap_or_default();
        assert!(detail.starts_with("replayed: peak"), "{setting}");
    }
}

/// Files given without a flag are told apart by their content and diagnosed as if each had its
/// flag: the same findings, the same inputs.
#[test]
fn files_without_flags_are_sniffed_and_give_the_flagged_diagnosis() {
    let cases = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cases");
    let p = |name: &str| cases.join(name).display().to_string();
    let flagged = json_of(&vramscope(&[
        "diagnose",
        "--log",
        &p("leak.log"),
        "--snapshot",
        &p("leak_step10.pickle"),
        &p("leak.pickle"),
        "--json",
    ]));
    let sniffed = json_of(&vramscope(&[
        "diagnose",
        &p("leak.log"),
        &p("leak_step10.pickle"),
        &p("leak.pickle"),
        "--json",
    ]));
    assert_eq!(findings_of(&sniffed), findings_of(&flagged));
    assert_eq!(sniffed["inputs"], flagged["inputs"]);
    assert_eq!(sniffed["findings"][0]["category"], "leak");
}
