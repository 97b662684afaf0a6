//! Opening a big PyTorch allocator snapshot: vramscope (read + exact totals) against CPython's
//! `pickle.load` of the same file, side by side in one run, each in its own process so that peak
//! memory (VmHWM) is measured the same way for both.
//!
//! `cargo bench --bench snapshot [-- PATH]`. Without PATH it builds `target/bench/big_snapshot.pickle`
//! (≥ 250 MB, a real H200 trace repeated with shifted times) with `scripts/make_big_snapshot.py`.
//! Under `cargo test` (no `--bench` argument) it only opens a small fixture once, as a smoke test.
#![allow(
    clippy::unwrap_used,
    clippy::too_many_lines,
    reason = "test and bench code: a panic is the failure report, and a test reads best as one story"
)]

#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use vramscope_core::analysis::deadline::Step;
use vramscope_core::analysis::fragmentation;
use vramscope_core::analysis::timetravel::TimeTravel;
use vramscope_core::analysis::totals::device_totals;
use vramscope_core::diagnose::oom::judged_ooms;
use vramscope_core::diagnose::trajectory;
use vramscope_core::formats::pytorch::read_file;

#[path = "support/big_snapshot.rs"]
mod big_snapshot;

const CHILD_ENV: &str = "VRAMSCOPE_BENCH_SNAPSHOT_CHILD";
const MODE_ENV: &str = "VRAMSCOPE_BENCH_SNAPSHOT_MODE";
const MODE_OPEN: &str = "open";
const MODE_FULL: &str = "full";
const RUNS: usize = 3;

const PYTHON_LOAD: &str = "import pickle, sys, time
t = time.perf_counter()
with open(sys.argv[1], 'rb') as f:
    data = pickle.load(f)
seconds = time.perf_counter() - t
hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0]
print(f'seconds={seconds} peak_rss_kib={hwm}')";

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Opens the snapshot and computes the totals (`MODE_OPEN`), or also the full analysis the
/// Allocator tab makes: time travel over the whole trace, fragmentation of the final state and
/// every OOM explained and judged (`MODE_FULL`); the live set's history over the whole trace
/// (what the diagnosis adds) is timed apart. Prints what the parent parses.
fn child(path: &Path, mode: &str) -> Result<(), String> {
    let started = Instant::now();
    let snapshot = Arc::new(read_file(path, &|_| true).map_err(|e| e.to_string())?);
    let totals = device_totals(&snapshot);
    let reserved: u64 = totals.iter().map(|t| t.all.reserved_bytes).sum();
    let mut oom_count = 0;
    let mut stranded_bytes = 0;
    let mut travels = Vec::new();
    if mode == MODE_FULL {
        for device in &snapshot.devices {
            let travel = TimeTravel::new(Arc::clone(&snapshot), device.device);
            let report = fragmentation::analyze(&travel.state_at(travel.len()));
            stranded_bytes += report.device.stranded_bytes;
            let expandable = snapshot
                .settings
                .as_ref()
                .and_then(|s| s.expandable_segments);
            oom_count += judged_ooms(&travel, expandable).len();
            travels.push(travel);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    // Time travel stops its forward replay at the first event that does not fit; the bench's
    // repeated trace stops early. This is what a whole forward replay costs on top, i.e. the
    // time a trace of this length that does replay exactly would add.
    let replay_started = Instant::now();
    let replayed_blocks: usize = travels
        .iter()
        .map(|t| t.replay_forward(t.len()).block_count())
        .sum();
    let whole_replay_seconds = replay_started.elapsed().as_secs_f64();
    let trajectory_started = Instant::now();
    let iterations: usize = travels
        .iter()
        .filter_map(|t| trajectory::of_trace(t, None))
        .map(|t| t.iterations.len())
        .sum();
    let trajectory_seconds = trajectory_started.elapsed().as_secs_f64();
    let history_step_ms = longest_history_step_ms(&travels);
    println!(
        "seconds={seconds} peak_rss_kib={} events={} reserved_bytes={reserved} \
         stranded_bytes={stranded_bytes} ooms={oom_count} \
         whole_replay_seconds={whole_replay_seconds} replayed_blocks={replayed_blocks} \
         trajectory_seconds={trajectory_seconds} iterations={iterations} \
         longest_history_step_ms={history_step_ms:.1}",
        common::peak_rss_kib().unwrap_or(0),
        snapshot.event_count()
    );
    Ok(())
}

/// The history made as the web page makes it, a range of events per step between two frames:
/// the longest step (milliseconds, native; the browser's wasm takes longer), which is what the
/// page's single thread can be kept from drawing by.
fn longest_history_step_ms(travels: &[TimeTravel]) -> f64 {
    let mut longest_ms = 0.0f64;
    for travel in travels {
        let mut build = trajectory::TrajectoryBuild::new(None, trajectory::HISTORY_EVENTS_PER_STEP);
        loop {
            let started = Instant::now();
            let step = build.step(travel);
            longest_ms = longest_ms.max(started.elapsed().as_secs_f64() * 1e3);
            match step {
                Step::Done(_) => break,
                Step::Pending(more) => build = more,
            }
        }
    }
    longest_ms
}

struct Measure {
    seconds: f64,
    peak_rss_kib: u64,
    /// A whole forward replay of every trace, timed apart (full analysis only; 0 otherwise).
    whole_replay_seconds: f64,
    /// The live set's history over every trace, timed apart (full analysis only; 0 otherwise).
    trajectory_seconds: f64,
    /// The longest step of the history made as the web page does (full analysis only).
    longest_history_step_ms: f64,
    line: String,
}

fn run_measured(command: &mut Command) -> Result<Measure, String> {
    let output = command.output().map_err(|e| format!("cannot run: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(format!(
            "failed: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let line = stdout
        .lines()
        .find(|l| l.starts_with("seconds="))
        .ok_or_else(|| format!("no measurement in {stdout:?}"))?
        .to_owned();
    let field = |key: &str| -> Option<String> {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key).map(str::to_owned))
    };
    Ok(Measure {
        seconds: field("seconds=")
            .and_then(|v| v.parse().ok())
            .ok_or("bad seconds")?,
        peak_rss_kib: field("peak_rss_kib=")
            .and_then(|v| v.parse().ok())
            .ok_or("bad rss")?,
        whole_replay_seconds: field("whole_replay_seconds=")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0),
        trajectory_seconds: field("trajectory_seconds=")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0),
        longest_history_step_ms: field("longest_history_step_ms=")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0),
        line,
    })
}

fn median(values: Vec<f64>) -> f64 {
    common::Samples::from_values(values).median()
}

fn bench(path: &Path) -> Result<(), String> {
    let size_mb = std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len() as f64
        / 1e6;
    println!("snapshot: {} ({size_mb:.1} MB)", path.display());
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut open = Vec::new();
    let mut full = Vec::new();
    let mut python = Vec::new();
    for run in 0..RUNS {
        let measure = run_measured(
            Command::new(&exe)
                .env(CHILD_ENV, path)
                .env(MODE_ENV, MODE_OPEN),
        )?;
        println!("  run {run} vramscope open + totals:   {}", measure.line);
        open.push(measure);
        let measure = run_measured(
            Command::new(&exe)
                .env(CHILD_ENV, path)
                .env(MODE_ENV, MODE_FULL),
        )?;
        println!("  run {run} vramscope full analysis:   {}", measure.line);
        full.push(measure);
        let measure = run_measured(Command::new("python3").args(["-c", PYTHON_LOAD]).arg(path))?;
        println!("  run {run} CPython pickle.load:       {}", measure.line);
        python.push(measure);
    }
    let seconds = |m: &[Measure]| median(m.iter().map(|m| m.seconds).collect());
    let mib = |m: &[Measure]| median(m.iter().map(|m| m.peak_rss_kib as f64 / 1024.0).collect());
    let py_s = seconds(&python);
    let py_mb = mib(&python);
    println!("median of {RUNS} runs:");
    println!("  CPython pickle.load: {py_s:.2} s, peak RSS {py_mb:.0} MiB");
    for (name, measures) in [
        ("open + totals", &open),
        (
            "open + full analysis (time travel, fragmentation, OOMs)",
            &full,
        ),
    ] {
        let our_s = seconds(measures);
        let our_mb = mib(measures);
        let speedup = py_s / our_s;
        let memory_ratio = our_mb / py_mb;
        println!("  vramscope {name}: {our_s:.2} s, peak RSS {our_mb:.0} MiB");
        println!(
            "    speed-up {speedup:.1}x (target >= 5x): {}; peak memory {:.0}% of CPython's \
             (target <= 50%): {}",
            if speedup >= 5.0 { "PASS" } else { "FAIL" },
            memory_ratio * 100.0,
            if memory_ratio <= 0.5 { "PASS" } else { "FAIL" }
        );
    }
    let worst_s = median(
        full.iter()
            .map(|m| m.seconds + m.whole_replay_seconds)
            .collect(),
    );
    println!(
        "  as if the trace replayed exactly (full analysis + a whole forward replay timed apart): \
         {worst_s:.2} s, speed-up {:.1}x",
        py_s / worst_s
    );
    let trajectory_s = median(full.iter().map(|m| m.trajectory_seconds).collect());
    println!(
        "  the live set's history over the whole trace (diagnosis, timed apart): {trajectory_s:.2} s"
    );
    let longest_step_ms = full
        .iter()
        .map(|m| m.longest_history_step_ms)
        .fold(0.0, f64::max);
    println!(
        "  the same history in the web page's steps: longest step {longest_step_ms:.1} ms \
         (the longest of {RUNS} runs, native)"
    );
    Ok(())
}

fn main() {
    let result = if let Some(path) = std::env::var_os(CHILD_ENV) {
        let mode = std::env::var(MODE_ENV).unwrap_or_else(|_| MODE_OPEN.to_owned());
        child(Path::new(&path), &mode)
    } else {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if common::measuring() {
            let explicit = args.iter().find(|a| !a.starts_with('-')).map(PathBuf::from);
            explicit
                .map(Ok)
                .unwrap_or_else(|| big_snapshot::big_snapshot("big_snapshot.pickle", 260))
                .and_then(|path| bench(&path))
        } else {
            // `cargo test --all-targets`: a quick smoke run on a fixture.
            child(
                &manifest_dir().join("tests/fixtures/pytorch/frag_oom.pickle"),
                MODE_FULL,
            )
        }
    };
    if let Err(message) = result {
        eprintln!("snapshot bench: {message}");
        std::process::exit(1);
    }
}
