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

/// (change, outcome) of every `--prove` re-run in the folder's manifest, in order.
fn proof_rows(folder: &Path) -> Vec<(String, String)> {
    manifest(folder)["proof"]
        .as_array()
        .expect("proof runs")
        .iter()
        .map(|p| {
            (
                p["change"].as_str().unwrap_or_default().to_owned(),
                p["outcome"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
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
    let outcomes = proof_rows(&folder);
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

/// A job under a per-process cap of a quarter of the card that runs out while the GPU has 60 GiB
/// free, and runs through once its cap is raised to half or more: it writes the hook's records
/// itself (a fraction it set, an OOM with the device's free memory), as the hook would under
/// PyTorch, and prints PyTorch's message for a cap.
const CAPPED_JOB: &str = r#"import json, os, sys
run = os.environ["VRAMSCOPE_RUN_DIR"]
os.makedirs(os.path.join(run, "progress"), exist_ok=True)
name = os.path.join(run, "progress", "pid%d" % os.getpid())
with open(name + ".json", "w") as f:
    json.dump({"num_allocs": 100, "memory_fraction": 0.25, "time_unix_ms": 1}, f)
if float(os.environ.get("VRAMSCOPE_RUN_MEMORY_FRACTION", "0")) >= 0.5:
    print("finished", flush=True)
    sys.exit(0)
with open(name + ".oom.json", "w") as f:
    json.dump({"num_allocs": 90, "alloc_bytes": 300 << 20, "device_free": 60 << 30}, f)
print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 300.00 MiB. GPU 0 has a "
      "total capacity of 79.19 GiB of which 60.00 GiB is free. Including non-PyTorch memory, this "
      "process has 19.50 GiB memory in use. 19.79 GiB allowed; Of the allocated memory 19.00 GiB "
      "is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated.",
      file=sys.stderr, flush=True)
sys.exit(1)
"#;

#[test]
fn a_cap_that_refused_while_the_gpu_had_room_is_raised_and_the_raise_proven() {
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("capped.py");
    std::fs::write(&script, CAPPED_JOB).expect("script");
    let out = run_in(
        dir.path(),
        &["--prove", "--", "python3", script.to_str().expect("utf-8")],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let folder = run_folder(dir.path());
    let rows = proof_rows(&folder);
    // Twice the job's fraction is tried, and it works, so the search ends there.
    assert_eq!(
        rows.last(),
        Some(&(
            "VRAMSCOPE_RUN_MEMORY_FRACTION=0.5".to_owned(),
            "removed".to_owned()
        )),
        "{rows:?}"
    );
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(folder.join("report.json")).expect("report.json"),
    )
    .expect("JSON");
    let first = &report["findings"][0]["recommendations"][0];
    assert_eq!(first["verification"]["status"], "proven-by-run", "{first}");
    // Recommended as the job's own cap, not as an export that would do nothing outside vramscope.
    assert!(
        first["action"]
            .as_str()
            .is_some_and(|a| a.starts_with("torch.cuda.set_per_process_memory_fraction(0.5)")),
        "{first}"
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

/// A run folder as `vramscope run --prove` leaves it, made by hand: the job's log with a real
/// OOM message, and a manifest whose re-runs say that expandable segments removed the failure.
pub(crate) fn proven_run_folder(dir: &Path) -> PathBuf {
    let folder = dir.join("20261206T235300Z-python3-train");
    std::fs::create_dir_all(&folder).expect("folder");
    std::fs::write(
        folder.join("output.log"),
        format!("step 0\n{OOM_MESSAGE}\n"),
    )
    .expect("log");
    let row = |change: &str, outcome: &str| {
        serde_json::json!({
            "change": change,
            "outcome": outcome,
            "ran_out_at_allocation": null,
            "peak_reserved_bytes": 60u64 << 30,
            "missing_bytes": null,
            "relative_speed": 0.97,
            "seconds": 3.0,
            "folder": format!("proof/{change}"),
            "replay_prediction": null,
        })
    };
    let manifest = serde_json::json!({
        "schema": "vramscope.run/1",
        "command": ["python3", "train.py"],
        "exit": {"code": 1, "signal": null, "status": 1},
        "files": ["output.log"],
        "proof": [
            row("UNRELATED=1", "ran_out"),
            row("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "removed"),
        ],
    });
    std::fs::write(folder.join("run.json"), manifest.to_string()).expect("manifest");
    folder
}

/// The title of the finding a proven run folder ([`proven_run_folder`]) leads with.
pub(crate) const PROVEN_TITLE: &str = "Proven by a real run: \
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True removes the out-of-memory error";

#[test]
fn diagnosing_a_run_folder_later_leads_with_what_its_re_runs_proved() {
    let dir = tempfile::tempdir().expect("temp dir");
    let folder = proven_run_folder(dir.path());
    let out = Command::new(VRAMSCOPE)
        .arg("diagnose")
        .arg(&folder)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("1. [INFO] fragmentation: ")
            && stdout
                .lines()
                .next()
                .is_some_and(|l| l.ends_with(PROVEN_TITLE)),
        "{stdout}"
    );
    assert!(
        stdout.contains("Run with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True [proven-by-run] (proven by a real run)"),
        "{stdout}"
    );
    // The files' own finding follows.
    assert!(
        stdout.contains("\n2. [CRITICAL] fragmentation: "),
        "{stdout}"
    );
    let out = Command::new(VRAMSCOPE)
        .args(["diagnose", "--json"])
        .arg(&folder)
        .output()
        .expect("runs");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["findings"][0]["title"], PROVEN_TITLE, "{doc}");
    assert_eq!(
        doc["findings"][0]["recommendations"][0]["verification"]["status"],
        "proven-by-run"
    );
    assert!(
        doc["inputs"].to_string().contains("vramscope run --prove"),
        "{}",
        doc["inputs"]
    );
}

/// A job that echoes its arguments and runs out of memory unless it was given `--optimizer sgd`.
const ARGS_JOB: &str = r#"import sys
print("args:", " ".join(sys.argv[2:]), flush=True)
if "--optimizer" in sys.argv and sys.argv[sys.argv.index("--optimizer") + 1] == "sgd":
    sys.exit(0)
print(open(sys.argv[1]).read(), file=sys.stderr, flush=True)
sys.exit(1)
"#;

#[test]
fn vary_arg_appends_a_flag_the_command_does_not_pass_and_says_so() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, message) = fake_job(dir.path());
    let script = dir.path().join("args_job.py");
    std::fs::write(&script, ARGS_JOB).expect("script");
    let out = run_in(
        dir.path(),
        &[
            "--prove",
            "--vary-arg",
            "--optimizer=adam,sgd",
            "--",
            "python3",
            script.to_str().expect("utf-8"),
            message.to_str().expect("utf-8"),
            "--batch-size",
            "8",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let notes: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("does not pass --optimizer"))
        .collect();
    assert_eq!(
        notes,
        [
            "vramscope: --vary-arg --optimizer: the command does not pass --optimizer, so \
          `--optimizer VALUE` is appended at its end"
        ],
        "{stderr}"
    );
    let folder = run_folder(dir.path());
    let proof = manifest(&folder)["proof"].clone();
    let rows: Vec<(&str, &str, &str)> = proof
        .as_array()
        .expect("proof runs")
        .iter()
        .filter(|p| {
            p["change"]
                .as_str()
                .is_some_and(|c| c.starts_with("--optimizer"))
        })
        .map(|p| {
            (
                p["change"].as_str().unwrap_or_default(),
                p["outcome"].as_str().unwrap_or_default(),
                p["replay_prediction"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    let said = "appended: the command did not pass --optimizer";
    assert_eq!(
        rows,
        [
            ("--optimizer adam", "ran_out", said),
            ("--optimizer sgd", "removed", said)
        ],
        "{proof}"
    );
    // The re-run's command had the flag at its end, after the job's own arguments.
    let sgd = proof
        .as_array()
        .and_then(|rows| rows.iter().find(|p| p["change"] == "--optimizer sgd"))
        .and_then(|p| p["folder"].as_str())
        .expect("the re-run's folder");
    let log = std::fs::read_to_string(folder.join(sgd).join("output.log")).expect("log");
    assert!(
        log.starts_with("args: --batch-size 8 --optimizer sgd\n"),
        "{log}"
    );
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(folder.join("report.json")).expect("report.json"),
    )
    .expect("JSON");
    assert_eq!(
        report["findings"][0]["recommendations"][0]["title"],
        "Run with --optimizer sgd"
    );
}

/// A small tmpfs mounted at a mount point of its own under a temporary folder, unmounted when
/// dropped, whatever the test did before.
struct SmallDisk {
    mount_point: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallDisk {
    /// Mounts `size_kib` KiB of tmpfs; `Err(why)` where mounting is not permitted.
    fn mount(size_kib: u64) -> Result<SmallDisk, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("no temp dir: {e}"))?;
        let mount_point = dir.path().join("disk");
        std::fs::create_dir(&mount_point).map_err(|e| format!("no mount point: {e}"))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_kib}k")])
            .arg("vramscope-test")
            .arg(&mount_point)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs is not permitted here ({})",
                text(&out.stderr).trim()
            ));
        }
        Ok(SmallDisk {
            mount_point,
            _dir: dir,
        })
    }

    /// Fills the disk, leaving `free_kib` KiB free: a reserve of that size is written first,
    /// the rest filled until the disk is full, then the reserve is removed.
    fn fill_leaving(&self, free_kib: usize) {
        let reserve = self.mount_point.join("reserve");
        std::fs::write(&reserve, vec![1u8; free_kib * 1024]).expect("reserve");
        let mut filler = std::fs::File::create(self.mount_point.join("filler")).expect("filler");
        let chunk = vec![0u8; 4096];
        loop {
            match filler.write_all(&chunk).and_then(|()| filler.flush()) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(e) => panic!("filling the disk: {e}"),
            }
        }
        std::fs::remove_file(reserve).expect("reserve removed");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let unmounted = Command::new("umount")
            .arg(&self.mount_point)
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            // Still busy (a process left in it): detach it now, gone when it is free.
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&self.mount_point)
                .status();
        }
    }
}

/// A job that prints 3000 numbered lines and exits 3, and what it prints.
fn chatty_job() -> (&'static str, String) {
    let script = "i=0; while [ $i -lt 3000 ]; do echo \"line $i of the job's output\"; \
                  i=$((i+1)); done; exit 3";
    let expected: String = (0..3000)
        .map(|i| format!("line {i} of the job's output\n"))
        .collect();
    (script, expected)
}

/// Runs [`chatty_job`] with its run folder on `disk`: the job's output comes through whole and
/// vramscope exits with its status. Returns vramscope's stderr.
fn run_chatty_job_on(disk: &SmallDisk) -> String {
    let (script, expected) = chatty_job();
    let out = Command::new(VRAMSCOPE)
        .args(["run", "--out"])
        .arg(disk.mount_point.join("runs"))
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .expect("vramscope runs");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        text(&out.stdout) == expected,
        "the job's output was not passed on whole\n{stderr}"
    );
    stderr
}

#[test]
fn a_full_disk_does_not_disturb_the_job_and_the_manifest_says_what_was_lost() {
    let disk = match SmallDisk::mount(512) {
        Ok(disk) => disk,
        Err(why) => {
            return crate::support::skip::skipped(
                "run_cli::a_full_disk_does_not_disturb_the_job_and_the_manifest_says_what_was_lost",
                &why,
            );
        }
    };
    // Room for the manifest, not for the hook or the job's log.
    disk.fill_leaving(12);
    let stderr = run_chatty_job_on(&disk);
    let runs = disk.mount_point.join("runs");
    let folders: Vec<PathBuf> = std::fs::read_dir(&runs)
        .expect("runs folder")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    assert_eq!(folders.len(), 1, "{folders:?}");
    let folder = &folders[0];
    let manifest = manifest(folder);
    assert_eq!(manifest["exit"]["status"], 3, "{manifest}");
    let not_recorded = manifest["not_recorded"].to_string();
    for lost in [
        "the output log could not be written",
        "the allocator hook could not be installed",
    ] {
        assert!(
            not_recorded.contains(lost),
            "{lost}: {not_recorded}\n{stderr}"
        );
    }
    assert!(
        not_recorded.contains("No space left on device"),
        "{not_recorded}"
    );
    // The manifest claims only files that are there, whole; nothing half-written is left.
    for file in manifest["files"].as_array().expect("files") {
        let path = folder.join(file.as_str().expect("a name"));
        assert!(path.is_file(), "{} is claimed but missing", path.display());
    }
    assert!(
        !folder.join("output.log").exists(),
        "a partial log was left"
    );
    assert!(!folder.join(".hook").exists(), "a partial hook was left");
    // Without the hook nothing could tell whether the job used torch: no claim that it did not.
    assert!(!not_recorded.contains("imported torch"), "{not_recorded}");
    // A failed job with nothing readable is not called healthy.
    assert!(!stderr.contains("healthy"), "{stderr}");
}

#[test]
fn a_disk_too_full_for_the_manifest_is_said_on_stderr() {
    let disk = match SmallDisk::mount(256) {
        Ok(disk) => disk,
        Err(why) => {
            return crate::support::skip::skipped(
                "run_cli::a_disk_too_full_for_the_manifest_is_said_on_stderr",
                &why,
            );
        }
    };
    disk.fill_leaving(0);
    let stderr = run_chatty_job_on(&disk);
    assert!(
        stderr.contains(
            "vramscope: warning: the manifest could not be written (No space left on device"
        ),
        "{stderr}"
    );
}
