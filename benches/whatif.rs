//! What-if replay speed and memory: single-setting throughput (trace events per second on one
//! core) and a 7-setting sweep (`what_if`, two worker threads on the 2-core machine) of a
//! 263 MB / 3.4 M-event snapshot, with the memory the replays add on top of the opened snapshot.
//!
//! `cargo bench --bench whatif [-- PATH]`. Without PATH it builds
//! `target/bench/big_consistent.pickle`: the real H200 trace of `train.pickle` repeated to
//! ≥ 260 MB by `scripts/make_big_snapshot.py --consistent` (each repetition in its own address
//! range and ending in an `empty_cache()`, so that the whole trace replays and the self-check
//! passes). Under `cargo test` it replays a small fixture once, as a smoke test.
#![allow(
    clippy::unwrap_used,
    clippy::too_many_lines,
    reason = "test and bench code: a panic is the failure report, and a test reads best as one story"
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

#[path = "common/mod.rs"]
mod common;

use vramscope_core::analysis::replay::{AllocConf, WhatIfRequest, replay_setting, what_if};
use vramscope_core::analysis::timetravel::TimeTravel;
use vramscope_core::formats::pytorch::read_file;

/// The validation's seven settings (docs/whatif-validation.md).
const SWEEP: [&str; 7] = [
    "default",
    "expandable_segments:True",
    "max_split_size_mb:64",
    "max_split_size_mb:512",
    "garbage_collection_threshold:0.6",
    "roundup_power2_divisions:4",
    "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]",
];
const RUNS: usize = 3;

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Resident memory of this process now, in KiB (`VmRSS` in `/proc/self/status`; Linux).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn confs() -> Result<Vec<AllocConf>, String> {
    SWEEP
        .iter()
        .map(|text| AllocConf::parse(text).map_err(|e| e.to_string()))
        .collect()
}

fn bench(path: &Path, smoke: bool) -> Result<(), String> {
    let started = Instant::now();
    let snapshot = Arc::new(read_file(path, &|_| true).map_err(|e| e.to_string())?);
    let open_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let travel = TimeTravel::new(Arc::clone(&snapshot), 0);
    let travel_s = started.elapsed().as_secs_f64();
    let events = travel.len();
    let rss_before_kib = rss_kib();
    println!(
        "{}: {events} events; open {open_s:.2} s, time travel {travel_s:.2} s, RSS {} MiB",
        path.display(),
        rss_before_kib / 1024
    );
    let confs = confs()?;
    let runs = if smoke { 1 } else { RUNS };
    // The sweep: self-check + recorded + 7 settings, on the machine's cores.
    let mut sweep_s = Vec::new();
    let mut report = None;
    for _ in 0..runs {
        let request = WhatIfRequest {
            device: 0,
            candidates: confs.clone(),
            cap_bytes: None,
            device_memory_bytes: None,
        };
        let started = Instant::now();
        let result = what_if(&travel, &request, &|_| true).map_err(|e| e.to_string())?;
        sweep_s.push(started.elapsed().as_secs_f64());
        report = Some(result);
    }
    let report = report.ok_or("no run")?;
    let extra_peak_mib = common::peak_rss_kib()
        .unwrap_or(0)
        .saturating_sub(rss_before_kib)
        / 1024;
    println!(
        "  7-setting sweep (self-check + recorded + 7, {} threads): median {:.2} s of {runs}; \
         self-check reliable: {}; peak memory added: {extra_peak_mib} MiB",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        common::Samples::from_values(sweep_s.clone()).median(),
        report.self_check.reliable
    );
    if !report.self_check.reliable {
        println!("  self-check problem: {:?}", report.self_check.problem);
    }
    // One setting on one thread: throughput.
    for text in ["default", "expandable_segments:True"] {
        let conf = AllocConf::parse(text).map_err(|e| e.to_string())?;
        let mut seconds = Vec::new();
        let mut replayed = 0;
        for _ in 0..runs {
            let started = Instant::now();
            let outcome = replay_setting(&travel, &conf, &report.limits, &|_| true)
                .map_err(|e| e.to_string())?;
            seconds.push(started.elapsed().as_secs_f64());
            replayed = outcome.events_replayed;
        }
        let s = common::Samples::from_values(seconds).median();
        println!(
            "  one setting ({text}), one thread: {replayed} events in {s:.3} s = {:.1} M events/s",
            replayed as f64 / s / 1e6
        );
    }
    Ok(())
}

fn default_big_snapshot() -> Result<PathBuf, String> {
    let path = manifest_dir().join("target/bench/big_consistent.pickle");
    if path.exists() {
        return Ok(path);
    }
    std::fs::create_dir_all(path.parent().unwrap_or(Path::new("."))).map_err(|e| e.to_string())?;
    println!("building {} ...", path.display());
    let status = Command::new("python3")
        .arg(manifest_dir().join("scripts/make_big_snapshot.py"))
        .arg(manifest_dir().join("tests/fixtures/pytorch/train.pickle"))
        .arg(&path)
        .arg("260")
        .arg("--consistent")
        .status()
        .map_err(|e| format!("python3: {e}"))?;
    if !status.success() {
        return Err("make_big_snapshot.py failed".to_owned());
    }
    Ok(path)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = if common::measuring() {
        let explicit = args.iter().find(|a| !a.starts_with('-')).map(PathBuf::from);
        explicit
            .map(Ok)
            .unwrap_or_else(default_big_snapshot)
            .and_then(|path| bench(&path, false))
    } else {
        bench(
            &manifest_dir().join("tests/fixtures/pytorch/frag_oom.pickle"),
            true,
        )
    };
    if let Err(message) = result {
        eprintln!("whatif bench: {message}");
        std::process::exit(1);
    }
}
