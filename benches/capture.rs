//! `.vramcap` size and speed: bytes per device sample, and the time to open a 24-hour capture of
//! 8 GPUs sampled every 250 ms (2.76 M device samples, with processes).
//!
//! Run: `cargo bench --bench capture` (release build). The data comes from the deterministic demo
//! machine, polled as the sampler would (slow tier every 5 s), and is written by the real
//! [`Recorder`] (batches) and by [`vramcap::write_bytes`] (a saved capture).
#![allow(
    clippy::unwrap_used,
    clippy::too_many_lines,
    reason = "test and bench code: a panic is the failure report, and a test reads best as one story"
)]

#[path = "common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use vramscope_core::formats::vramcap::{self, Recorder};
use vramscope_core::model::{Capture, format_bytes};
use vramscope_core::source::demo::{DemoConfig, DemoSource, GENERATED_SLOW_INTERVAL_MS};
use vramscope_core::source::{Source, Tiers};

const START_MS: i64 = 1_767_225_600_000;

/// Records `hours` of a demo machine with `gpus` GPUs through a real `Recorder`; returns the file
/// bytes. Pushing waits whenever the writer is 3000 batches behind, as a sampler at this rate
/// never would be, so that no batch is dropped.
fn record(dir: &std::path::Path, gpus: u32, hours: u64, interval_ms: u32) -> Vec<u8> {
    let path = dir.join(format!("bench-{gpus}x{hours}h.vramcap"));
    let mut source = DemoSource::with_config(
        START_MS,
        DemoConfig {
            device_count: gpus,
            ..DemoConfig::default()
        },
    );
    let mut description = source.describe();
    description.meta.started_ms = START_MS;
    description.meta.interval_ms = interval_ms;
    let recorder = Recorder::create(&path, &description.meta, &description.devices)
        .expect("create bench file");
    let ticks = hours * 3_600_000 / u64::from(interval_ms);
    let mut next_slow_ms = START_MS;
    for tick in 0..ticks {
        let t_ms = START_MS + (tick * u64::from(interval_ms)) as i64;
        let slow = t_ms >= next_slow_ms;
        if slow {
            next_slow_ms = t_ms + i64::from(GENERATED_SLOW_INTERVAL_MS);
        }
        recorder.push(&source.poll(t_ms, Tiers { fast: true, slow }));
        while tick + 1 - recorder.status().batches_written >= 3000 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let status = recorder.finish().expect("finish bench file");
    assert_eq!(
        status.batches_dropped, 0,
        "no batch may be dropped in the benchmark"
    );
    std::fs::read(&path).expect("read bench file back")
}

/// Runs `f` `runs` times and returns the fastest and median wall times and the last result.
fn time<T>(runs: usize, f: impl FnMut() -> T) -> (Duration, Duration, T) {
    let (times, result) = common::time_runs(runs, f);
    (times.min(), times.median(), result)
}

fn per_sample(bytes: usize, capture: &Capture) -> f64 {
    bytes as f64 / capture.sample_count() as f64
}

fn main() {
    let dir = tempfile::tempdir().expect("temporary directory");
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs this binary without it, and
    // then a small smoke run checks that the benchmark still works without taking minutes.
    if !common::measuring() {
        let recorded = record(dir.path(), 2, 1, 60_000);
        let capture = vramcap::read_bytes(&recorded, "smoke").expect("read recorded");
        assert_eq!(capture.sample_count(), 2 * 60, "2 GPUs x 60 ticks");
        assert_eq!(
            vramcap::read_bytes(&vramcap::write_bytes(&capture), "smoke").expect("read saved"),
            capture
        );
        println!("smoke run passed (run `cargo bench --bench capture` for the measurements)");
        return;
    }

    println!("== bytes per device sample (demo machine, 250 ms, slow tier every 5 s)");
    for (gpus, hours) in [(2, 1), (8, 1)] {
        let recorded = record(dir.path(), gpus, hours, 250);
        let capture = vramcap::read_bytes(&recorded, "bench").expect("read recorded");
        let saved = vramcap::write_bytes(&capture);
        let process_samples: usize = capture.processes.iter().map(|p| p.t_ms.len()).sum();
        println!(
            "{gpus} GPUs x {hours} h: {} device samples, {process_samples} process samples; recorded {} = {:.1} B/sample; saved {} = {:.1} B/sample",
            capture.sample_count(),
            format_bytes(recorded.len() as u64),
            per_sample(recorded.len(), &capture),
            format_bytes(saved.len() as u64),
            per_sample(saved.len(), &capture),
        );
    }

    println!("== 24 h x 8 GPUs at 250 ms");
    let started = Instant::now();
    let recorded = record(dir.path(), 8, 24, 250);
    println!(
        "recorded in {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        format_bytes(recorded.len() as u64)
    );
    let (fastest, median, capture) = time(3, || {
        vramcap::read_bytes(&recorded, "bench").expect("read recorded")
    });
    let process_samples: usize = capture.processes.iter().map(|p| p.t_ms.len()).sum();
    println!(
        "open recorded file (decode + Capture::ingest): fastest {:.3} s, median {:.3} s; {} device samples, {process_samples} process samples, {:.1} B/sample",
        fastest.as_secs_f64(),
        median.as_secs_f64(),
        capture.sample_count(),
        per_sample(recorded.len(), &capture),
    );
    drop(recorded);
    let series_bytes: usize = capture.series.iter().map(|s| s.heap_bytes()).sum();
    let track_bytes: usize = capture
        .processes
        .iter()
        .map(|p| {
            p.t_ms.capacity() * std::mem::size_of::<i64>()
                + p.used_bytes.capacity() * std::mem::size_of::<Option<u64>>()
        })
        .sum();
    println!(
        "in memory: device series {} = {:.1} B per device sample (columns; a DeviceSample struct \
         is {} B); process tracks {} = {:.1} B per process sample",
        format_bytes(series_bytes as u64),
        series_bytes as f64 / capture.sample_count() as f64,
        std::mem::size_of::<vramscope_core::model::DeviceSample>(),
        format_bytes(track_bytes as u64),
        track_bytes as f64 / process_samples.max(1) as f64,
    );
    let (fastest, median, saved) = time(3, || vramcap::write_bytes(&capture));
    println!(
        "save (write_bytes): fastest {:.3} s, median {:.3} s; {} = {:.1} B/sample",
        fastest.as_secs_f64(),
        median.as_secs_f64(),
        format_bytes(saved.len() as u64),
        per_sample(saved.len(), &capture),
    );
    drop(capture);
    let (fastest, median, reopened) = time(3, || {
        vramcap::read_bytes(&saved, "bench").expect("read saved")
    });
    println!(
        "open saved file (columns): fastest {:.3} s, median {:.3} s; {} device samples",
        fastest.as_secs_f64(),
        median.as_secs_f64(),
        reopened.sample_count(),
    );
}
