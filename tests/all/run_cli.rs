//! `vramscope run` without a GPU: it behaves like the command (exit status, signals, output,
//! input), records a run folder with its manifest and log, says what it could not record,
//! diagnoses a failure from a fake job printing a real OOM message, and with `--prove` re-runs
//! the job under candidate changes until one works. The Python hook's own tests run here too.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::cli::text;

const VRAMSCOPE: &str = env!("CARGO_BIN_EXE_vramscope");

/// A real PyTorch out-of-memory message, as a job prints it when it dies.
const OOM_MESSAGE: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. \
GPU 0 has a total capacity of 79.19 GiB of which 1.02 GiB is free. Including non-PyTorch memory, \
this process has 78.15 GiB memory in use. Of the allocated memory 70.00 GiB is allocated by \
PyTorch, and 7.50 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory \
is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.";

fn run_in(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(VRAMSCOPE)
        .current_dir(dir)
        .arg("run")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run vramscope: {e}"))
}

/// The only run folder under `dir/vramscope-runs`.
fn run_folder(dir: &Path) -> PathBuf {
    let runs: Vec<PathBuf> = std::fs::read_dir(dir.join("vramscope-runs"))
        .expect("runs folder")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0].clone()
}

fn manifest(folder: &Path) -> Value {
    let text = std::fs::read_to_string(folder.join("run.json")).expect("run.json");
    serde_json::from_str(&text).expect("run.json is JSON")
}

#[test]
fn exit_status_and_signals_are_the_commands() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run_in(dir.path(), &["--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3));
    let out = run_in(dir.path(), &["--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.code(), Some(128 + 15), "{}", text(&out.stderr));
    let out = run_in(dir.path(), &["--", "no-such-command-vramscope"]);
    assert_eq!(out.status.code(), Some(127));
    assert!(text(&out.stderr).contains("command not found: no-such-command-vramscope"));
    let out = run_in(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(2), "a command is required");
}

#[test]
fn output_streams_through_input_is_passed_on_and_the_log_keeps_the_tail() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(VRAMSCOPE)
        .current_dir(dir.path())
        .args([
            "run",
            "--",
            "sh",
            "-c",
            "read line; echo \"got $line\"; echo oops >&2",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vramscope starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"hello\n")
        .expect("written");
    let out = child.wait_with_output().expect("ends");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "got hello\n");
    assert!(
        text(&out.stderr).starts_with("oops\n"),
        "{}",
        text(&out.stderr)
    );
    let folder = run_folder(dir.path());
    let log = std::fs::read_to_string(folder.join("output.log")).expect("log");
    assert!(log.contains("got hello") && log.contains("oops"), "{log}");
    let manifest = manifest(&folder);
    assert_eq!(manifest["schema"], "vramscope.run/1");
    assert_eq!(manifest["exit"]["status"], 0);
    assert_eq!(manifest["command"][0], "sh");
    assert_eq!(manifest["torch_seen"], false);
    let not_recorded = manifest["not_recorded"].to_string();
    assert!(
        not_recorded.contains("no process of the job imported torch"),
        "{not_recorded}"
    );
    // Without a driver the job still runs, and the manifest says what is missing.
    if !folder.join("timeline.vramcap").exists() {
        assert!(
            not_recorded.contains("no timeline was recorded"),
            "{not_recorded}"
        );
    }
}

#[test]
fn sigterm_reaches_the_jobs_process_group() {
    let dir = tempfile::tempdir().expect("temp dir");
    let child = Command::new(VRAMSCOPE)
        .current_dir(dir.path())
        .args([
            "run",
            "--",
            "sh",
            "-c",
            "trap 'echo got TERM; exit 7' TERM; echo ready; sleep 30 & wait",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("vramscope starts");
    // Wait until the job runs (its log line), then stop vramscope as a scheduler would.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dir.path().join("vramscope-runs").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let started = Instant::now();
    let out = child.wait_with_output().expect("ends");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the job did not stop"
    );
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("got TERM"));
}

/// A job that prints a real OOM message and dies, unless expandable segments are on.
const FAKE_JOB: &str = r#"import os, sys
print("step 0", flush=True)
if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
    print("finished", flush=True)
    sys.exit(0)
print(open(sys.argv[1]).read(), file=sys.stderr, flush=True)
sys.exit(1)
"#;

/// [`FAKE_JOB`] as `dir/train.py` and the message it prints as `dir/oom.txt`.
pub(crate) fn fake_job(dir: &Path) -> (PathBuf, PathBuf) {
    let script = dir.join("train.py");
    std::fs::write(&script, FAKE_JOB).expect("script");
    let message = dir.join("oom.txt");
    std::fs::write(&message, OOM_MESSAGE).expect("message");
    (script, message)
}

#[test]
fn a_failed_job_is_diagnosed_into_reports_in_its_folder() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (script, message) = fake_job(dir.path());
    let out = run_in(
        dir.path(),
        &[
            "--",
            "python3",
            script.to_str().expect("utf-8"),
            message.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("vramscope: diagnosis:"), "{stderr}");
    assert!(stderr.contains("7.50 GiB cached"), "{stderr}");
    let folder = run_folder(dir.path());
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(folder.join("report.json")).expect("report.json"),
    )
    .expect("JSON");
    assert_eq!(
        report["findings"][0]["category"], "fragmentation",
        "{report}"
    );
    assert!(folder.join("report.html").exists());
    let files = manifest(&folder)["files"].to_string();
    assert!(
        files.contains("report.html") && files.contains("output.log"),
        "{files}"
    );
}

#[test]
fn prove_reruns_the_job_and_recommends_the_change_that_worked() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (script, message) = fake_job(dir.path());
    let out = run_in(
        dir.path(),
        &[
            "--prove",
            "--try-all",
            "--vary",
            "UNRELATED=1",
            "--",
            "python3",
            script.to_str().expect("utf-8"),
            message.to_str().expect("utf-8"),
        ],
    );
    // vramscope exits as the original job did.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let folder = run_folder(dir.path());
    let proof = manifest(&folder)["proof"].clone();
    let outcomes: Vec<(String, String)> = proof
        .as_array()
        .expect("proof runs")
        .iter()
        .map(|p| {
            (
                p["change"].as_str().unwrap_or_default().to_owned(),
                p["outcome"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert!(
        outcomes.contains(&(
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True".to_owned(),
            "removed".to_owned()
        )),
        "{outcomes:?}"
    );
    assert!(
        outcomes.contains(&("UNRELATED=1".to_owned(), "ran_out".to_owned())),
        "{outcomes:?}"
    );
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(folder.join("report.json")).expect("report.json"),
    )
    .expect("JSON");
    let first = &report["findings"][0]["recommendations"][0];
    assert_eq!(first["verification"]["status"], "proven-by-run", "{first}");
    assert!(
        first["title"]
            .as_str()
            .is_some_and(|t| t.contains("expandable_segments:True")),
        "{first}"
    );
    // Each re-run left its own folder.
    assert!(
        folder
            .join("proof")
            .read_dir()
            .expect("proof folder")
            .count()
            >= 2
    );
}

#[test]
fn the_python_hooks_own_tests_pass() {
    let hook = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/python/vramscope_run");
    let out = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s"])
        .arg(&hook)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(text(&out.stderr).contains("OK"), "{}", text(&out.stderr));
}

/// The hook's files from a real run on an H100 (`scripts/compare/run_gpu.sh`: a training job
/// under a 2 % memory cap, with no vramscope code in it, ran out of memory at its 862nd
/// allocation): a run folder made of them is diagnosed from the OOM snapshot the hook wrote.
#[test]
fn a_run_folder_with_the_hooks_real_oom_snapshot_is_diagnosed() {
    let real = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/run/hook_oom");
    let dir = tempfile::tempdir().expect("temp dir");
    let folder = dir.path().join("20261206T235300Z-python3-oom_job");
    for sub in ["snapshots", "progress"] {
        std::fs::create_dir_all(folder.join(sub)).expect("folder");
        for entry in std::fs::read_dir(real.join(sub)).expect("fixture") {
            let entry = entry.expect("entry");
            std::fs::copy(entry.path(), folder.join(sub).join(entry.file_name())).expect("copied");
        }
    }
    std::fs::write(folder.join("run.json"), r#"{"schema": "vramscope.run/1"}"#).expect("manifest");
    let records = vramscope_gpu::run::prove::hook_records(&folder);
    assert_eq!(records.oom_at_allocation, Some(862));
    assert_eq!(records.oom_missing_bytes, None, "a cap, not a full device");
    let out = Command::new(VRAMSCOPE)
        .args(["diagnose", "--json"])
        .arg(&folder)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let inputs = doc["inputs"].to_string();
    assert!(inputs.contains("rank3-pid668-oom-1.pickle"), "{inputs}");
    let findings = doc["findings"].to_string();
    assert!(
        findings.contains("out of memory") || findings.contains("cap"),
        "{findings}"
    );
}
