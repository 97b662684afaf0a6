//! GUI responsiveness while a 1 GB allocator snapshot loads and the live (demo) sampler runs:
//! the app's frames are driven at 60 Hz and each frame's time on the UI thread is measured
//! from the moment the file is opened until its allocator view is shown. Target: p99 under 50 ms.
//!
//! `cargo bench --bench responsiveness [-- PATH]`. Without PATH it builds
//! `target/bench/snapshot_1gb.pickle` (a real H200 trace repeated with shifted times, ≥ 1000 MB)
//! with `scripts/make_big_snapshot.py`. Frames run through egui_kittest without a renderer: what is
//! measured is the app's own work per frame (input, layout, every panel, the live timeline), the
//! part a slow load could block; drawing the triangles is the GPU's. Under `cargo test` (no
//! `--bench` argument) it loads a small fixture as a smoke run.
#![allow(
    clippy::unwrap_used,
    clippy::too_many_lines,
    reason = "test and bench code: a panic is the failure report, and a test reads best as one story"
)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use egui::Vec2;
use egui_kittest::Harness;
use vramscope_app::dialogs::NoDialogs;
use vramscope_app::{AppOptions, VramscopeApp};
use vramscope_core::model::now_unix_ms;
use vramscope_core::source::demo::DemoSource;

#[path = "support/big_snapshot.rs"]
mod big_snapshot;
#[path = "common/mod.rs"]
mod common;

use common::ms;

/// 60 Hz.
const FRAME_PERIOD: Duration = Duration::from_micros(16_667);
/// The target.
const P99_LIMIT: Duration = Duration::from_millis(50);

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Opens `path` in an app that samples the live demo machine, and measures every frame until the
/// snapshot is shown. Returns whether p99 met the target.
fn measure(path: &Path) -> Result<bool, String> {
    let options = AppOptions {
        files: Vec::new(),
        live: Some(vramscope_app::app::LiveStart {
            source: Box::new(DemoSource::new(now_unix_ms())),
            demo_notice: Some("benchmark: the simulated machine, sampled live".to_owned()),
        }),
        dialogs: Box::new(NoDialogs),
        recordings_dir: None,
    };
    let mut harness = Harness::builder()
        .with_size(Vec2::new(1400.0, 900.0))
        .build_eframe(move |cc| VramscopeApp::new(cc, options));
    // A few seconds of live sampling first, so the timeline has data to lay out.
    let warm_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < warm_until {
        harness.step();
        std::thread::sleep(FRAME_PERIOD);
    }
    let samples_before = harness
        .state()
        .active_session()
        .map_or(0, |s| s.capture.sample_count());

    let size_mb = std::fs::metadata(path).map_err(|e| e.to_string())?.len() as f64 / 1e6;
    let opened = Instant::now();
    harness.state_mut().open_path(path.to_owned());
    let mut frames = Vec::new();
    let deadline = opened + Duration::from_secs(600);
    loop {
        let frame_start = Instant::now();
        harness.step();
        frames.push(frame_start.elapsed());
        let done = harness.state().jobs_running() == 0;
        if done {
            break;
        }
        if Instant::now() > deadline {
            return Err("the snapshot did not open within 10 minutes".to_owned());
        }
        if let Some(rest) = FRAME_PERIOD.checked_sub(frame_start.elapsed()) {
            std::thread::sleep(rest);
        }
    }
    let load = opened.elapsed();
    let views = harness.state().allocator_views().len();
    let errors: Vec<String> = harness
        .state()
        .notices
        .items()
        .iter()
        .filter(|n| n.level == vramscope_app::notices::NoticeLevel::Error)
        .map(|n| n.text.clone())
        .collect();
    if views == 0 {
        return Err(format!("the snapshot was not shown: {errors:?}"));
    }
    let samples_after = harness
        .state()
        .active_session()
        .map_or(0, |s| s.capture.sample_count());
    let frames = common::Samples::from_durations(frames);
    let p50 = frames.median();
    let p99 = frames.percentile(0.99);
    let max = frames.max();
    let met = p99 < P99_LIMIT;
    println!(
        "opened {} ({size_mb:.0} MB) in {:.1} s while sampling live: {} frames, frame time p50 \
         {:.1} ms, p99 {:.1} ms, max {:.1} ms; {} live samples arrived meanwhile; p99 < {} ms: {}",
        path.display(),
        load.as_secs_f64(),
        frames.len(),
        ms(p50),
        ms(p99),
        ms(max),
        samples_after.saturating_sub(samples_before),
        P99_LIMIT.as_millis(),
        if met { "met" } else { "NOT met" }
    );
    Ok(met)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = if common::measuring() {
        let explicit = args.iter().find(|a| !a.starts_with('-')).map(PathBuf::from);
        explicit
            .map(Ok)
            .unwrap_or_else(|| big_snapshot::big_snapshot("snapshot_1gb.pickle", 1000))
            .and_then(|path| measure(&path))
            .map(|_| ())
    } else {
        // `cargo test --all-targets`: the same path on a fixture, without the target.
        measure(&manifest_dir().join("tests/fixtures/pytorch/train.pickle")).map(|_| ())
    };
    if let Err(message) = result {
        eprintln!("responsiveness bench: {message}");
        std::process::exit(1);
    }
}
