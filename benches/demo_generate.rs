//! How fast the demo machine produces data: one poll of 8 GPUs, a full 24-hour capture of 8 GPUs at
//! 250 ms (2.76 M device samples, the size the timeline and file benchmarks use), and threshold
//! crossings over one GPU of it.
//!
//! Run: `cargo bench --bench demo_generate`. Under `cargo test --all-targets` (no `--bench`
//! argument) it runs a smoke test instead: 1,000 polls and one hour of capture, each once.
#![allow(
    clippy::unwrap_used,
    clippy::too_many_lines,
    reason = "test and bench code: a panic is the failure report, and a test reads best as one story"
)]

#[path = "common/mod.rs"]
mod common;

use std::hint::black_box;
use std::time::Duration;

use vramscope_core::analysis::threshold::crossings;
use vramscope_core::model::DeviceSample;
use vramscope_core::source::demo::{DemoConfig, DemoSource, generate_capture};
use vramscope_core::source::{Source, Tiers};

const START_MS: i64 = 1_780_000_000_000;
const DAY_MS: u64 = 24 * 60 * 60 * 1000;
const HOUR_MS: u64 = 60 * 60 * 1000;

/// What one run measures: the full benchmark, or the quick smoke run `cargo test` does.
struct Workload {
    polls: i64,
    capture_span_ms: u64,
    /// Timed runs per measurement (the median is reported).
    runs: usize,
}

/// Median of `runs` timings of `f`, and its last result.
fn median_of<T>(runs: usize, f: impl FnMut() -> T) -> (Duration, T) {
    let (times, last) = common::time_runs(runs, f);
    (times.median(), last)
}

fn main() {
    // `cargo test --all-targets` runs this binary without `--bench`: a smoke run then.
    let workload = if common::measuring() {
        Workload {
            polls: 100_000,
            capture_span_ms: DAY_MS,
            runs: 5,
        }
    } else {
        Workload {
            polls: 1_000,
            capture_span_ms: HOUR_MS,
            runs: 1,
        }
    };
    let eight = DemoConfig {
        device_count: 8,
        ..Default::default()
    };

    let polls = workload.polls;
    let (elapsed, _) = median_of(workload.runs, || {
        let mut source = DemoSource::with_config(START_MS, eight.clone());
        for i in 0..polls {
            black_box(source.poll(
                START_MS + i * 250,
                Tiers {
                    fast: true,
                    slow: i % 20 == 0,
                },
            ));
        }
    });
    println!(
        "poll, 8 GPUs (fast tier, slow every 20th): {:.2} µs per poll",
        elapsed.as_secs_f64() * 1e6 / polls as f64
    );

    let (elapsed, capture) = median_of(workload.runs.min(3), || {
        generate_capture(&eight, START_MS, workload.capture_span_ms, 250)
    });
    let samples = capture.sample_count();
    let process_samples: usize = capture.processes.iter().map(|p| p.t_ms.len()).sum();
    println!(
        "generate_capture {:.0} h x 8 GPUs x 250 ms: {:.2} s for {samples} device samples, \
         {process_samples} process samples, {} events ({:.0} ns per device sample)",
        workload.capture_span_ms as f64 / HOUR_MS as f64,
        elapsed.as_secs_f64(),
        capture.events.len(),
        elapsed.as_secs_f64() * 1e9 / samples as f64
    );
    println!(
        "  size_of::<DeviceSample>() = {} B; peak RSS so far {} MiB",
        std::mem::size_of::<DeviceSample>(),
        common::peak_rss_kib().map_or_else(|| "unknown".to_owned(), |k| (k / 1024).to_string())
    );

    let gpu0 = &capture.series[0];
    let (elapsed, found) = median_of(workload.runs, || crossings(black_box(gpu0).iter(), 0.9));
    println!(
        "crossings over {} samples (one GPU, whole capture): {:.2} ms, {} crossings",
        gpu0.len(),
        elapsed.as_secs_f64() * 1e3,
        found.len()
    );
}
