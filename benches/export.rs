//! Timeline exports of a day on a full node: 24 h × 8 GPUs sampled every second (691,200 GPU
//! samples, with processes) as CSV tables, a Chrome/Perfetto trace and the review image at 1×
//! and 2×: time to make each and its size. The trace size matters: browsers fail on very large
//! JSON traces (google/perfetto#99), which is why counters are written only when they change.
//! Also reading a day of nvidia-smi `--query-gpu` CSV (8 GPUs at 1 s) as a capture.
//!
//! Run: `cargo bench --bench export` (release build).
#![allow(
    clippy::unwrap_used,
    clippy::too_many_lines,
    reason = "test and bench code: a panic is the failure report, and a test reads best as one story"
)]

use std::time::{Duration, Instant};

use vramscope_core::formats::capture::read_bytes;
use vramscope_core::formats::nvidia_smi::SmiReadOptions;
use vramscope_core::formats::{perfetto, timeline_csv};
use vramscope_core::model::{Capture, MIB, UtcDateTime, format_bytes};
use vramscope_core::report::chart::{ReviewImageOptions, render_review_png};
use vramscope_core::report::{Timeline, TimelineOptions};
use vramscope_core::source::demo::{DemoConfig, generate_capture};

const START_MS: i64 = 1_767_225_600_000;

/// Runs `f` `runs` times; the fastest and median wall times and the last result.
fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, Duration, T) {
    let mut times = Vec::new();
    let mut result = None;
    for _ in 0..runs {
        drop(result.take());
        let started = Instant::now();
        result = Some(f());
        times.push(started.elapsed());
    }
    times.sort();
    (times[0], times[runs / 2], result.expect("at least one run"))
}

/// The capture's GPU samples as an nvidia-smi `--query-gpu=timestamp,index,memory.used,
/// memory.reserved,memory.total --format=csv` log.
fn as_smi_log(capture: &Capture) -> String {
    let mut rows: Vec<vramscope_core::model::DeviceSample> =
        capture.series.iter().flat_map(|s| s.iter()).collect();
    rows.sort_by_key(|s| (s.t_ms, s.device_index));
    let mut out = String::from(
        "timestamp, index, memory.used [MiB], memory.reserved [MiB], memory.total [MiB]\n",
    );
    for s in rows {
        let Some(m) = s.memory else { continue };
        let t = UtcDateTime::from_unix_ms(s.t_ms);
        out.push_str(&format!(
            "{:04}/{:02}/{:02} {:02}:{:02}:{:02}.{:03}, {}, {} MiB, {} MiB, {} MiB\n",
            t.year,
            t.month,
            t.day,
            t.hour,
            t.minute,
            t.second,
            t.millisecond,
            s.device_index,
            m.used_bytes / MIB,
            m.reserved_bytes / MIB,
            m.total_bytes / MIB
        ));
    }
    out
}

/// `run(…)` with `out`: also writes the review images there, to be looked at.
fn run(gpus: u32, hours: u64, interval_ms: u32, runs: usize, out: Option<&std::path::Path>) {
    let capture = generate_capture(
        &DemoConfig {
            device_count: gpus,
            ..DemoConfig::default()
        },
        START_MS,
        hours * 3_600_000,
        interval_ms,
    );
    let process_samples: usize = capture.processes.iter().map(|p| p.t_ms.len()).sum();
    println!(
        "{gpus} GPUs × {hours} h at {interval_ms} ms: {} GPU samples, {process_samples} process samples",
        capture.sample_count()
    );
    let (fast, median, gpu_csv) = time(runs, || timeline_csv::gpu_table(&capture));
    let (p_fast, p_median, process_csv) = time(runs, || timeline_csv::process_table(&capture));
    println!(
        "  CSV: GPU table {} in {fast:.2?} (median {median:.2?}); process table {} in {p_fast:.2?} (median {p_median:.2?})",
        format_bytes(gpu_csv.len() as u64),
        format_bytes(process_csv.len() as u64)
    );
    let (fast, median, trace) = time(runs, || perfetto::trace_json(&capture, "bench"));
    let events = trace.matches("\"ph\"").count();
    println!(
        "  Perfetto: {} ({events} events) in {fast:.2?} (median {median:.2?})",
        format_bytes(trace.len() as u64)
    );
    let timeline =
        Timeline::from_capture_with("bench.vramcap", &capture, &TimelineOptions::default())
            .expect("a timeline");
    for scale in [1.0, 2.0] {
        let (fast, median, png) = time(runs, || {
            render_review_png(
                &timeline,
                &ReviewImageOptions {
                    scale,
                    ..Default::default()
                },
            )
            .expect("renders")
        });
        println!(
            "  review PNG {scale}×: {} in {fast:.2?} (median {median:.2?})",
            format_bytes(png.len() as u64)
        );
        if let Some(dir) = out {
            let path = dir.join(format!("review-{gpus}gpu-{hours}h-{scale}x.png"));
            std::fs::write(&path, &png).expect("write the image");
            println!("  wrote {}", path.display());
        }
    }
    let log = as_smi_log(&capture);
    let options = SmiReadOptions::default();
    let (fast, median, read) = time(runs, || read_bytes(log.as_bytes(), "bench.csv", options));
    let read = read.expect("the log reads");
    assert_eq!(read.sample_count(), capture.sample_count());
    println!(
        "  reading it as an nvidia-smi CSV log ({}): {fast:.2?} (median {median:.2?})",
        format_bytes(log.len() as u64)
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs a small smoke run.
    // `--out DIR` also writes the review images to DIR.
    let args: Vec<String> = std::env::args().collect();
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .map(std::path::PathBuf::from);
    if args.iter().any(|arg| arg == "--bench") {
        run(8, 24, 1000, 3, out.as_deref());
    } else {
        run(2, 1, 60_000, 1, out.as_deref());
    }
}
