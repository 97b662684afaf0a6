//! Memory-test throughput against the GPU's own device-to-device copy bandwidth, both measured
//! in the same run. Target: the test runs at least at half the copy bandwidth (both counted as
//! bytes read plus written).
//!
//! `cargo bench --bench gpu_memtest` (share of free memory: `VRAMSCOPE_BENCH_SHARE`, default 90).
//! Without an NVIDIA driver it says so and exits 0, so that `cargo test --all-targets` passes on
//! CI machines. Under `cargo test --all-targets` (no `--bench` argument) on a machine with a GPU
//! it runs a smoke test instead: 1 % of free memory, and only the error count is checked (the
//! bandwidth ratio needs the full-size run to mean anything).
#![allow(
    clippy::unwrap_used,
    clippy::too_many_lines,
    reason = "test and bench code: a panic is the failure report, and a test reads best as one story"
)]

#[path = "common/mod.rs"]
mod common;

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

#[path = "../tests/support/skip.rs"]
mod skip;

use vramscope_gpu::cuda::{CheckOptions, MemtestConfig, driver_library_present, run_checks};

fn main() -> ExitCode {
    if !driver_library_present() {
        skip::skipped("bench gpu_memtest", "no NVIDIA driver on this machine");
        return ExitCode::SUCCESS;
    }
    let benchmarking = common::measuring();
    let share_of_free_percent = if benchmarking {
        std::env::var("VRAMSCOPE_BENCH_SHARE")
            .ok()
            .and_then(|text| text.parse().ok())
            .unwrap_or(90)
    } else {
        1
    };
    let options = CheckOptions {
        memtest: Some(MemtestConfig {
            share_of_free_percent,
            ..MemtestConfig::default()
        }),
        ..CheckOptions::default()
    };
    let report = match run_checks(&options, &AtomicBool::new(false), &mut |_| {}) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("gpu_memtest: {error}");
            return ExitCode::FAILURE;
        }
    };
    let Some(memtest) = report.memtest else {
        eprintln!("gpu_memtest: the memory test did not run");
        return ExitCode::FAILURE;
    };
    let device = report
        .devices
        .get(report.tested_device)
        .map(|device| device.cuda.name.clone())
        .unwrap_or_default();
    println!(
        "gpu_memtest: {device}, {:.2} GiB tested ({share_of_free_percent} % of free) in {} chunks, {} errors",
        memtest.tested_bytes as f64 / vramscope_core::model::GIB as f64,
        memtest.chunk_count,
        memtest.total_errors
    );
    for test in &memtest.tests {
        println!(
            "  {:<20} {:>9.1} ms {:>7.0} GB/s",
            test.label, test.elapsed_ms, test.throughput_gb_per_s
        );
    }
    let copy = memtest.copy_bandwidth_gb_per_s.unwrap_or(0.0);
    let ratio = if copy > 0.0 {
        memtest.throughput_gb_per_s / copy
    } else {
        0.0
    };
    println!(
        "  all tests           {:>9.1} ms {:>7.0} GB/s; cuMemcpyDtoD {copy:.0} GB/s; ratio {ratio:.2} (target >= 0.50)",
        memtest
            .tests
            .iter()
            .map(|test| test.elapsed_ms)
            .sum::<f64>(),
        memtest.throughput_gb_per_s
    );
    let bandwidth_ok = ratio >= 0.5 || !benchmarking;
    if bandwidth_ok && memtest.total_errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
