//! Soak: a day of 8 GPUs sampled every 250 ms (2.76 million device samples), played in
//! time-lapse by the demo source, followed live by the GUI (which records it too) and recorded by
//! `vramscope record` in a process of its own. Resident memory (VmRSS) of both is reported at the
//! start, the middle and the end of the simulated day: it must stay bounded (the capture's device
//! series take at most 40 bytes a sample; everything else is per process, event or pixel).
//!
//! `cargo bench --bench soak [-- HOURS SPEED]` (default 24 h at 288×: 5 minutes of wall time per
//! part). Under `cargo test` (no `--bench` argument) it plays one hour of 2 GPUs quickly, as a
//! smoke run. The GUI runs through egui_kittest without a renderer: the app's state, timeline
//! pyramids and recording are the real ones; a window's textures would add a constant.
#![allow(
    clippy::unwrap_used,
    clippy::too_many_lines,
    reason = "test and bench code: a panic is the failure report, and a test reads best as one story"
)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use egui::Vec2;
use egui_kittest::Harness;
use vramscope_app::dialogs::NoDialogs;
use vramscope_app::{AppOptions, VramscopeApp};
use vramscope_core::model::now_unix_ms;
use vramscope_core::source::demo::{Accelerated, DemoConfig, DemoSource};

const INTERVAL_MS: u32 = 250;

/// VmRSS of a process in MiB, from `/proc/PID/status` (`self` for this one).
fn rss_mib(pid: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

fn format_rss(rss: Option<f64>) -> String {
    rss.map_or_else(|| "unknown".to_owned(), |m| format!("{m:.0} MiB"))
}

/// The GUI following the time-lapse machine, recording it. Returns the three RSS readings.
fn gui(dir: &Path, gpus: u32, hours: f64, speed: f64) -> Result<(), String> {
    let config = DemoConfig {
        device_count: gpus,
        ..DemoConfig::default()
    };
    let source = Accelerated::new(
        DemoSource::with_config(now_unix_ms(), config),
        speed,
        INTERVAL_MS,
    );
    let options = AppOptions {
        files: Vec::new(),
        live: Some(vramscope_app::app::LiveStart {
            source: Box::new(source),
            demo_notice: Some("soak: the simulated machine in time-lapse".to_owned()),
        }),
        dialogs: Box::new(NoDialogs),
        recordings_dir: Some(dir.to_owned()),
    };
    let mut harness = Harness::builder()
        .with_size(Vec2::new(1400.0, 900.0))
        .build_eframe(move |cc| VramscopeApp::new(cc, options));
    harness.step();
    harness
        .state_mut()
        .run_command(vramscope_app::command::UiCommand::ToggleRecording);
    let day_ms = (hours * 3_600_000.0) as i64;
    let checkpoints = [day_ms / 48, day_ms / 2, day_ms];
    let mut next = 0;
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(hours * 3600.0 / speed * 3.0 + 120.0);
    while next < checkpoints.len() {
        harness.step();
        std::thread::sleep(Duration::from_millis(50));
        let Some(session) = harness.state().active_session() else {
            return Err("no live session".to_owned());
        };
        let capture = &session.capture;
        let played_ms = capture
            .time_span_ms()
            .map_or(0, |(first, last)| last - first);
        if played_ms >= checkpoints[next] {
            let series_bytes: usize = capture.series.iter().map(|s| s.heap_bytes()).sum();
            let samples = capture.sample_count();
            println!(
                "GUI at {:5.1} simulated hours ({:4.0} s wall): {samples} device samples, \
                 device series {:.1} bytes/sample, VmRSS {}",
                played_ms as f64 / 3_600_000.0,
                started.elapsed().as_secs_f64(),
                series_bytes as f64 / samples.max(1) as f64,
                format_rss(rss_mib("self")),
            );
            next += 1;
        }
        if Instant::now() > deadline {
            return Err("the GUI fell too far behind the time-lapse".to_owned());
        }
    }
    harness
        .state_mut()
        .run_command(vramscope_app::command::UiCommand::ToggleRecording);
    harness.run_steps(2);
    Ok(())
}

/// `vramscope record` of the same time-lapse in a child process; its RSS read from outside.
fn record(dir: &Path, gpus: u32, hours: f64, speed: f64) -> Result<(), String> {
    let wall_secs = hours * 3600.0 / speed;
    let path = dir.join("soak-record.vramcap");
    let mut child = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["record", "--demo", "--force"])
        .args(["--demo-gpus", &gpus.to_string()])
        .args(["--demo-speed", &speed.to_string()])
        .args(["--interval-ms", &INTERVAL_MS.to_string()])
        .args(["--duration", &format!("{wall_secs:.1}")])
        .arg("-o")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("start record: {e}"))?;
    let pid = child.id().to_string();
    let started = Instant::now();
    for fraction in [1.0 / 48.0, 0.5, 0.98] {
        let at = Duration::from_secs_f64(wall_secs * fraction);
        if let Some(wait) = at.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
        println!(
            "record at {:5.1} simulated hours: VmRSS {}, file {:.0} MB",
            hours * fraction,
            format_rss(rss_mib(&pid)),
            std::fs::metadata(&path).map_or(0, |m| m.len()) as f64 / 1e6
        );
    }
    let status = child.wait().map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("record exited with {status}"));
    }
    let capture = vramscope_core::formats::vramcap::read_file(&path).map_err(|e| e.to_string())?;
    println!(
        "record: {} device samples in {:.0} MB",
        capture.sample_count(),
        std::fs::metadata(&path).map_or(0, |m| m.len()) as f64 / 1e6
    );
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench = args.iter().any(|a| a == "--bench");
    let numbers: Vec<f64> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let (gpus, hours, speed) = if bench {
        (
            8,
            numbers.first().copied().unwrap_or(24.0),
            numbers.get(1).copied().unwrap_or(288.0),
        )
    } else {
        (2, 1.0, 1800.0)
    };
    let result = tempfile::tempdir()
        .map_err(|e| e.to_string())
        .and_then(|dir| {
            println!("soak: {hours} h of {gpus} GPUs at {INTERVAL_MS} ms, {speed}x real time");
            gui(dir.path(), gpus, hours, speed)?;
            record(dir.path(), gpus, hours, speed)
        });
    if let Err(message) = result {
        eprintln!("soak bench: {message}");
        std::process::exit(1);
    }
}
