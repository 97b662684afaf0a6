//! `vramscope exporter` under scrapes: CPU time of the exporter process (from
//! `/proc/PID/stat`) with no scrapes, at 100 scrapes per second over one kept-alive connection
//! (as Prometheus scrapes), and with scrapes as fast as one client can send them; plus scrape
//! latency. The exporter runs the simulated machine (`--demo`, 2 GPUs) read every 250 ms.
//!
//! Run: `cargo bench --bench exporter` (numbers in `docs/benchmarks.md`). Under `cargo test
//! --all-targets` (no `--bench` argument) it runs a smoke test: 20 scrapes.
#![allow(
    clippy::unwrap_used,
    clippy::too_many_lines,
    reason = "test and bench code: a panic is the failure report, and a test reads best as one story"
)]

#[path = "common/mod.rs"]
mod common;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Workload {
    /// Seconds per phase.
    phase: Duration,
}

impl Workload {
    const BENCH: Self = Self {
        phase: Duration::from_secs(20),
    };
    const SMOKE: Self = Self {
        phase: Duration::from_millis(200),
    };
}

struct Exporter(Child);

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// utime + stime of a process, in seconds.
fn process_cpu_secs(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return f64::NAN;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // SAFETY: sysconf only reads a configuration value.
    let ticks_per_sec = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    // utime and stime are fields 14 and 15 of stat, i.e. 11 and 12 after the state field.
    (ticks(11) + ticks(12)) / ticks_per_sec
}

/// Milliseconds at `fraction` of the sorted latencies; NaN (printed as such) when there are none.
fn percentile_ms(sorted: &[Duration], fraction: f64) -> f64 {
    common::percentile(sorted, fraction).map_or(f64::NAN, common::ms)
}

/// Scrapes `url` for `phase`, at `per_second` (None: as fast as possible). Returns latencies and
/// failures.
fn scrape(
    agent: &ureq::Agent,
    url: &str,
    phase: Duration,
    per_second: Option<u32>,
) -> (Vec<Duration>, usize, usize) {
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut failures = 0;
    let mut bytes = 0;
    let mut n: u32 = 0;
    while started.elapsed() < phase {
        if let Some(rate) = per_second {
            let due = Duration::from_secs_f64(f64::from(n) / f64::from(rate));
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        n += 1;
        let t = Instant::now();
        match agent
            .get(url)
            .call()
            .and_then(|mut r| r.body_mut().read_to_string())
        {
            Ok(body) if body.contains("vramscope_gpu_memory_used_bytes{") => {
                bytes = body.len();
                latencies.push(t.elapsed());
            }
            _ => failures += 1,
        }
    }
    latencies.sort();
    (latencies, failures, bytes)
}

fn main() {
    let workload = if common::measuring() {
        Workload::BENCH
    } else {
        Workload::SMOKE
    };
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(10_640);
    let child = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["exporter", "--demo", "--interval-ms", "250", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let exporter = match child {
        Ok(child) => Exporter(child),
        Err(err) => panic!("cannot start the exporter: {err}"),
    };
    let pid = exporter.0.id();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into();
    let started = Instant::now();
    while agent
        .get(&url)
        .call()
        .and_then(|mut r| r.body_mut().read_to_string())
        .map_or(true, |b| !b.contains("vramscope_gpu_memory_used_bytes{"))
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the exporter did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    println!(
        "| phase | scrapes | failed | exporter CPU (share of one core) | latency p50 | p99 | max | page |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, rate) in [
        ("no scrapes (sampling only)", Some(0)),
        ("100 scrapes/s", Some(100)),
        ("as fast as one client can", None),
    ] {
        let cpu_before = process_cpu_secs(pid);
        let wall = Instant::now();
        let (latencies, failures, bytes) = if rate == Some(0) {
            std::thread::sleep(workload.phase);
            (Vec::new(), 0, 0)
        } else {
            scrape(&agent, &url, workload.phase, rate)
        };
        let cpu_share = (process_cpu_secs(pid) - cpu_before) / wall.elapsed().as_secs_f64();
        println!(
            "| {name} | {} | {failures} | {:.1}% | {:.2} ms | {:.2} ms | {:.2} ms | {} B |",
            latencies.len(),
            cpu_share * 100.0,
            percentile_ms(&latencies, 0.5),
            percentile_ms(&latencies, 0.99),
            percentile_ms(&latencies, 1.0),
            bytes
        );
        if rate == Some(100) {
            assert_eq!(failures, 0, "every scrape at 100/s is answered");
        }
    }
}
