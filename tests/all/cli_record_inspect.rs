//! `vramscope record` and `vramscope inspect` as a user runs them: real processes, real signals.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::cli::text;
use vramscope_core::formats::vramcap;
use vramscope_core::model::Capture;
use vramscope_core::model::now_unix_ms;

fn vramscope() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vramscope"))
}

fn run(args: &[&str]) -> Output {
    vramscope().args(args).output().expect("runs the binary")
}

fn spawn_record(path: &Path, interval_ms: &str) -> Child {
    vramscope()
        .args(["record", "--demo", "--interval-ms", interval_ms, "--out"])
        .arg(path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starts record")
}

/// Waits until the file being recorded holds at least `samples` device samples.
fn wait_for_samples(path: &Path, samples: usize) -> Capture {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(capture) = vramcap::read_file(path)
            && capture.sample_count() >= samples
        {
            return capture;
        }
        assert!(
            Instant::now() < deadline,
            "recording never reached {samples} samples"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn signal(child: &Child, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).expect("pid fits");
    // SAFETY: kill(2) on a child we spawned and have not yet waited for.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0, "kill failed");
}

#[test]
fn duration_stops_by_itself_and_inspect_describes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.vramcap");
    let path_text = path.to_str().unwrap();
    let started = Instant::now();
    let output = run(&[
        "record",
        "--demo",
        "--interval-ms",
        "50",
        "--duration",
        "1.5",
        "--out",
        path_text,
    ]);
    let elapsed = started.elapsed();
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        elapsed < Duration::from_secs(10),
        "stopped after {elapsed:?}"
    );
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("SIMULATED"),
        "says it records the simulated machine: {stderr}"
    );
    assert!(
        text(&output.stdout).contains("recorded"),
        "{}",
        text(&output.stdout)
    );

    let capture = vramcap::read_file(&path).expect("opens");
    assert_eq!(capture.recovery, None, "a clean stop needs no recovery");
    assert!(capture.is_simulated());
    assert_eq!(capture.devices.len(), 2);
    let ticks = capture.series[0].len();
    assert!(
        (20..=32).contains(&ticks),
        "1.5 s at 50 ms gave {ticks} ticks"
    );
    assert!(!capture.processes.is_empty());

    let inspect = run(&["inspect", path_text]);
    assert!(inspect.status.success(), "{}", text(&inspect.stderr));
    let out = text(&inspect.stdout);
    for expected in [
        "SIMULATED",
        "GPU 0",
        "GPU 1",
        "not needed",
        &format!("samples      {}", capture.sample_count()),
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }

    let inspect = run(&["inspect", "--json", path_text]);
    assert!(inspect.status.success(), "{}", text(&inspect.stderr));
    let json: serde_json::Value = serde_json::from_slice(&inspect.stdout).expect("valid JSON");
    assert_eq!(json["simulated"], true);
    assert_eq!(json["source"], "demo");
    assert_eq!(json["sample_count"], capture.sample_count());
    assert_eq!(json["recovery"], serde_json::Value::Null);
    assert_eq!(json["devices"].as_array().map(Vec::len), Some(2));
    let peak = capture.series[1].peak_used().expect("memory readings");
    assert_eq!(json["devices"][1]["peak_used_bytes"], peak.1);
    assert_eq!(json["devices"][1]["peak_used_ms"], peak.0);
    assert_eq!(
        json["processes"].as_array().map(Vec::len),
        Some(capture.processes.len())
    );
    assert_eq!(json["interval_ms"], 50);
}

#[test]
fn sigterm_and_ctrl_c_stop_with_a_clean_file() {
    for (name, sig) in [("sigterm", libc::SIGTERM), ("sigint", libc::SIGINT)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{name}.vramcap"));
        let child = spawn_record(&path, "50");
        wait_for_samples(&path, 4);
        signal(&child, sig);
        let output = child.wait_with_output().expect("waits");
        assert!(
            output.status.success(),
            "{name}: {:?} {}",
            output.status,
            text(&output.stderr)
        );
        let capture = vramcap::read_file(&path).expect("opens");
        assert_eq!(capture.recovery, None, "{name}: clean stop");
        assert!(capture.sample_count() >= 4);
    }
}

#[test]
fn sigkill_loses_at_most_about_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.vramcap");
    let mut child = spawn_record(&path, "50");
    // Let several chunks reach the file, then kill without warning.
    wait_for_samples(&path, 40);
    std::thread::sleep(Duration::from_millis(1300));
    let killed_at_ms = now_unix_ms();
    signal(&child, libc::SIGKILL);
    let status = child.wait().expect("waits");
    assert!(!status.success());

    let capture = vramcap::read_file(&path).expect("a killed recording still opens");
    let recovery = capture
        .recovery
        .clone()
        .expect("the missing end marker is noted");
    assert!(
        recovery.problem.contains("not closed"),
        "{}",
        recovery.problem
    );
    let (_, last_ms) = capture.time_span_ms().expect("samples");
    let lost_ms = killed_at_ms - last_ms;
    // One flush interval (1 s) plus one sampling interval plus scheduling slack on a busy machine.
    assert!(lost_ms <= 1_500, "the last {lost_ms} ms were lost");
    for series in &capture.series {
        assert!(
            series.times().windows(2).all(|w| w[0] < w[1]),
            "samples in order"
        );
    }

    let inspect = run(&["inspect", path.to_str().unwrap()]);
    assert!(inspect.status.success(), "{}", text(&inspect.stderr));
    assert!(text(&inspect.stdout).contains("recovery     NEEDED: the recording was not closed"));
    let inspect = run(&["inspect", "--json", path.to_str().unwrap()]);
    let json: serde_json::Value = serde_json::from_slice(&inspect.stdout).expect("valid JSON");
    assert_eq!(
        json["recovery"]["chunks_recovered"],
        recovery.chunks_recovered
    );
}

#[test]
fn record_refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("existing.vramcap");
    std::fs::write(&path, b"keep me").unwrap();
    let path_text = path.to_str().unwrap();
    let output = run(&["record", "--demo", "--duration", "0.3", "--out", path_text]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with("vramscope: error: ")
            && stderr.contains("already exists")
            && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"keep me");

    let output = run(&[
        "record",
        "--demo",
        "--duration",
        "0.3",
        "--force",
        "--out",
        path_text,
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(vramcap::read_file(&path).expect("replaced").recovery, None);
}

#[test]
fn record_validates_its_arguments() {
    for args in [
        vec![
            "record",
            "--demo",
            "--out",
            "x.vramcap",
            "--interval-ms",
            "5",
        ],
        vec![
            "record",
            "--demo",
            "--out",
            "x.vramcap",
            "--interval-ms",
            "60001",
        ],
        vec!["record", "--demo", "--out", "x.vramcap", "--duration", "-2"],
        vec!["record", "--demo"],
    ] {
        let output = run(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: usage error");
        assert!(!text(&output.stderr).is_empty());
    }
    assert!(!Path::new("x.vramcap").exists());
    let output = run(&[
        "record",
        "--demo",
        "--out",
        "/nonexistent-dir/x.vramcap",
        "--duration",
        "1",
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stderr).contains("/nonexistent-dir/x.vramcap"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn inspect_names_missing_and_foreign_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.vramcap");
    let output = run(&["inspect", missing.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.starts_with("vramscope: error: ") && stderr.contains("missing.vramcap"),
        "{stderr}"
    );

    let png = dir.path().join("picture.png");
    std::fs::write(&png, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    let output = run(&["inspect", "--json", png.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("picture.png") && stderr.contains("PNG"),
        "{stderr}"
    );
}

#[test]
fn record_without_a_driver_fails_unless_demo_is_given() {
    // Only meaningful where no NVIDIA driver can be opened (CI, most laptops): `info` says so.
    if run(&["info"]).status.success() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fake.vramcap");
    let output = run(&[
        "record",
        "--duration",
        "0.3",
        "--out",
        path.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("nothing was recorded") && stderr.contains("--demo"),
        "{stderr}"
    );
    assert!(!path.exists(), "no simulated file may be written");
}

#[test]
fn record_into_a_directory_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let output = run(&[
        "record",
        "--demo",
        "--force",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stderr).contains("is a directory"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn record_to_a_file_that_cannot_be_synced_still_succeeds() {
    // /dev/null takes the bytes but refuses fsync (EINVAL): nothing is lost, so no error.
    let output = run(&[
        "record",
        "--demo",
        "--force",
        "--duration",
        "0.3",
        "--out",
        "/dev/null",
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
}

#[test]
fn watch_needs_an_existing_folder() {
    let output = run(&["--watch", "/nonexistent-vramscope-folder"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stderr).contains("--watch /nonexistent-vramscope-folder: no such folder"),
        "{}",
        text(&output.stderr)
    );
}
