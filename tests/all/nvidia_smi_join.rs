//! The two nvidia-smi logs of one run (a `--query-gpu` log and a `--query-compute-apps` log, from
//! the real H200 run 1 in docs/gpu-verification/h200-run1) open together as one capture with the
//! GPU track and the per-process tracks: in `inspect`, in `diagnose --capture` and in the GUI, in
//! either order; a process log of another time stays a capture of its own in the GUI.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use egui::Vec2;
use egui_kittest::Harness;

use vramscope_app::dialogs::NoDialogs;
use vramscope_app::{AppOptions, VramscopeApp};

const GPU_LOG: &str = "docs/gpu-verification/h200-run1/smi-memory.csv";
const APPS_LOG: &str = "docs/gpu-verification/h200-run1/smi-apps.csv";
/// The process log of another run (two GPUs, a day later or earlier than run 1).
const OTHER_APPS_LOG: &str = "docs/gpu-verification/h200x2-run2/smi-apps.csv";

fn vramscope(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(args)
        .output()
        .expect("vramscope runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn inspect_joins_both_logs_in_either_order() {
    for files in [[GPU_LOG, APPS_LOG], [APPS_LOG, GPU_LOG]] {
        let (ok, stdout, stderr) = vramscope(&["inspect", "--json", files[0], files[1]]);
        assert!(ok, "inspect failed: {stderr}");
        let summary: serde_json::Value = serde_json::from_str(&stdout).expect("inspect JSON");
        let devices = summary["devices"].as_array().expect("devices");
        assert_eq!(devices.len(), 1, "{stdout}");
        assert_eq!(devices[0]["sample_count"], 161, "the GPU log's samples");
        let processes = summary["processes"].as_array().expect("processes");
        assert_eq!(processes.len(), 1, "{stdout}");
        assert_eq!(processes[0]["pid"], 511);
        assert_eq!(processes[0]["name"], "python3");
        assert_eq!(processes[0]["device_index"], 0);
    }
}

#[test]
fn diagnose_reads_both_logs_as_one_capture() {
    let (ok, stdout, stderr) = vramscope(&[
        "diagnose",
        "--capture",
        APPS_LOG,
        "--capture",
        GPU_LOG,
        "--json",
    ]);
    assert!(ok, "diagnose failed: {stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("report JSON");
    let inputs = report["inputs"].as_array().expect("inputs");
    assert_eq!(inputs.len(), 1, "one capture, not one per file: {stdout}");
    let name = inputs[0]["name"].as_str().expect("a name");
    assert!(
        name.ends_with("smi-memory.csv + docs/gpu-verification/h200-run1/smi-apps.csv"),
        "{name}"
    );
    assert_eq!(
        inputs[0]["summary"],
        "1 device(s), 161 samples over 40 s, 1 process track(s), 0 event(s)"
    );
}

fn harness(files: &[&str]) -> Harness<'static, VramscopeApp> {
    let options = AppOptions {
        files: files.iter().map(PathBuf::from).collect(),
        live: None,
        dialogs: Box::new(NoDialogs),
        recordings_dir: None,
    };
    let mut harness = Harness::builder()
        .with_size(Vec2::new(1000.0, 700.0))
        .build_eframe(move |cc| VramscopeApp::new(cc, options));
    let deadline = Instant::now() + Duration::from_secs(60);
    harness.step();
    while harness.state().jobs_running() > 0 {
        assert!(Instant::now() < deadline, "the files did not open in time");
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
    harness.run_steps(3);
    harness
}

fn file_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[test]
fn the_gui_joins_the_logs_of_one_run_in_either_order() {
    for (files, label) in [
        ([GPU_LOG, APPS_LOG], "smi-memory.csv + smi-apps.csv"),
        ([APPS_LOG, GPU_LOG], "smi-memory.csv + smi-apps.csv"),
    ] {
        let harness = harness(&files);
        let app = harness.state();
        assert_eq!(
            app.sessions().len(),
            1,
            "{files:?}: one session, not one per file"
        );
        let session = app.active_session().expect("a session is shown");
        assert_eq!(session.label(), label);
        assert_eq!(session.capture.sample_count(), 161);
        assert_eq!(session.capture.processes.len(), 1);
        let python = &session.capture.processes[0];
        assert_eq!((python.device_index, python.pid), (0, 511));
        assert!(
            app.notices
                .items()
                .iter()
                .any(|n| n.text.contains("Joined") && n.text.contains(&file_name(files[1]))),
            "the join is announced"
        );
    }
}

#[test]
fn the_gui_keeps_a_process_log_of_another_run_apart() {
    let harness = harness(&[GPU_LOG, OTHER_APPS_LOG]);
    let app = harness.state();
    assert_eq!(app.sessions().len(), 2, "two runs, two sessions");
    assert!(app.sessions()[0].capture.processes.is_empty());
}
