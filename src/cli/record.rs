//! `vramscope record`: headless recording to a `.vramcap` file, for servers without a display.
//!
//! The sampler polls on its own thread, this thread moves batches to the [`Recorder`] (which
//! writes on a third), and prints progress. Ctrl+C, SIGTERM and `--duration` all end the
//! recording the same way: the last batches are written and the file is closed cleanly.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vramscope_core::formats::vramcap::{Recorder, RecorderStatus, VramcapError};
use vramscope_core::model::format_bytes;
use vramscope_core::source::Source;
use vramscope_gpu::sampler::{MAX_FAST_INTERVAL_MS, MIN_FAST_INTERVAL_MS, Sampler, SamplerConfig};
use vramscope_gpu::{open_demo, open_real_or_demo};

#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// Capture file to write (conventionally *.vramcap).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub out: PathBuf,
    /// Fast-tier sampling interval in milliseconds (20 to 60000).
    #[arg(
        long,
        value_name = "MS",
        default_value_t = SamplerConfig::default().fast_interval_ms,
        value_parser = clap::value_parser!(u32).range(i64::from(MIN_FAST_INTERVAL_MS)..=i64::from(MAX_FAST_INTERVAL_MS)),
    )]
    pub interval_ms: u32,
    /// Stop by itself after this many seconds (fractions allowed); default: until Ctrl+C or SIGTERM.
    #[arg(long, value_name = "SECS", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Record the built-in simulated machine instead of real GPUs.
    #[arg(long)]
    pub demo: bool,
    /// Play the simulated machine N times faster than real time (time-lapse, up to 8640: a day in
    /// 10 s): each poll records every tick the simulated clock passed, at --interval-ms of
    /// simulated time. For soak tests.
    #[arg(long, value_name = "N", requires = "demo", value_parser = parse_speed)]
    pub demo_speed: Option<f64>,
    /// Number of simulated GPUs (1 to 64, default 2).
    #[arg(long, value_name = "N", requires = "demo", value_parser = clap::value_parser!(u32).range(1..=i64::from(vramscope_core::source::demo::MAX_DEMO_DEVICES)))]
    pub demo_gpus: Option<u32>,
    /// Replace FILE if it already exists.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub alerts: super::alerts::AlertHookArgs,
}

/// Longest `--duration` accepted: a year, far beyond any real recording, small enough that
/// `Instant` arithmetic cannot overflow.
const MAX_DURATION_SECS: f64 = 366.0 * 24.0 * 3600.0;

fn parse_speed(text: &str) -> Result<f64, String> {
    let speed: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a number"))?;
    let max = vramscope_core::source::demo::MAX_DEMO_SPEED;
    if !(1.0..=max).contains(&speed) {
        return Err(format!("must be from 1 to {max}"));
    }
    Ok(speed)
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= MAX_DURATION_SECS) {
        return Err(format!(
            "must be more than 0 and at most {MAX_DURATION_SECS} seconds"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// How often the progress line is redrawn on a terminal, and printed when output is a file or pipe.
const PROGRESS_TTY: Duration = Duration::from_millis(250);
const PROGRESS_PLAIN: Duration = Duration::from_secs(5);

pub fn run(args: RecordArgs) -> ExitCode {
    if let Some(refused) = super::refuse_output(&args.out, args.force, "recording.vramcap") {
        return refused;
    }
    let stop_requested = match super::stop_on_ctrl_c() {
        Ok(flag) => flag,
        Err(code) => return code,
    };
    // Without --demo, a machine with no usable driver is an error, as in `info`: a scripted
    // recording on a server must never produce hours of simulated data and report success.
    let opened = if args.demo_speed.is_some() || args.demo_gpus.is_some() {
        Ok(open_demo(
            args.demo_gpus,
            args.demo_speed.map(|speed| (speed, args.interval_ms)),
        ))
    } else {
        open_real_or_demo(args.demo)
    };
    let (source, demo_reason) = match opened {
        Ok(opened) => opened,
        Err(err) => {
            return super::fail(format_args!(
                "{err}; nothing was recorded (pass --demo to record the simulated machine)"
            ));
        }
    };
    match record(source, demo_reason.as_deref(), &args, &stop_requested) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(problem) => super::fail(problem),
    }
}

/// Records `source` to `args.out` until `stop_requested`, `--duration`, a write error or the end of
/// the sampling thread. Returns the summary line, or the problem; whatever was recorded before a
/// problem stays in the file, which is closed cleanly whenever the disk allows it.
fn record(
    source: Box<dyn Source>,
    demo_reason: Option<&str>,
    args: &RecordArgs,
    stop_requested: &AtomicBool,
) -> Result<String, String> {
    let config = SamplerConfig {
        fast_interval_ms: args.interval_ms,
        ..SamplerConfig::default()
    };
    let sampler = Sampler::spawn(source, config, Box::new(|| {}));
    let mut meta = sampler.description().meta.clone();
    if meta.writer.is_empty() {
        meta.writer = format!("vramscope {}", env!("CARGO_PKG_VERSION"));
    }
    let devices = sampler.description().devices.clone();
    let mut hooks = super::alerts::LiveHooks::new(
        &args.alerts,
        &meta.host,
        &devices,
        &format!("vramscope diagnose {}", args.out.display()),
    )?;
    let recorder = Recorder::create(&args.out, &meta, &devices).map_err(|err| err.to_string())?;
    if demo_reason.is_some() {
        eprintln!("vramscope: recording the SIMULATED demo machine (--demo), not real GPUs");
    }
    eprintln!(
        "vramscope: recording {} GPU(s) every {} ms to {}{}; press Ctrl+C to stop",
        devices.len(),
        args.interval_ms,
        args.out.display(),
        args.duration
            .map(|d| format!(" for {:.1} s", d.as_secs_f64()))
            .unwrap_or_default()
    );

    let started = Instant::now();
    let tty = std::io::stderr().is_terminal();
    let progress_every = if tty { PROGRESS_TTY } else { PROGRESS_PLAIN };
    let mut last_progress = Instant::now();
    let reached_duration = || args.duration.is_some_and(|d| started.elapsed() >= d);
    let mut write_error = None;
    let mut sampler_ended = false;
    while !stop_requested.load(Ordering::SeqCst) && !reached_duration() {
        let wait = Duration::from_millis(100);
        match sampler.recv_timeout(wait) {
            Some(batch) => {
                recorder.push(&batch);
                hooks.apply(&batch);
            }
            // Nothing queued and the thread is gone: no batch will ever come again.
            None if !sampler.is_running() => {
                sampler_ended = true;
                break;
            }
            None => {}
        }
        let status = recorder.status();
        if let Some(problem) = &status.last_error {
            write_error = Some(problem.clone());
            break;
        }
        if last_progress.elapsed() >= progress_every {
            last_progress = Instant::now();
            print_progress(&status, started.elapsed(), tty);
        }
    }
    let remaining = sampler.drain();
    let dropped_by_sampler = sampler.dropped_batches();
    sampler.stop();
    for batch in &remaining {
        recorder.push(batch);
    }
    if tty {
        eprintln!();
    }
    let elapsed = started.elapsed();
    let mut recorder = recorder;
    recorder.close();
    let kept_samples = recorder.status().samples_written;
    let status = match (recorder.finish(), write_error) {
        (Ok(status), None) => status,
        (Err(VramcapError::Recording { problem, .. }), None) | (_, Some(problem)) => {
            return Err(format!(
                "{problem}; recording stopped after {}: the {kept_samples} samples written until \
                 then are kept in {}, which opens normally",
                format_elapsed(elapsed),
                args.out.display()
            ));
        }
        (Err(err), None) => return Err(err.to_string()),
    };
    if sampler_ended {
        return Err(format!(
            "sampling stopped unexpectedly after {} (the data source failed; see the message above); \
             the {} samples recorded until then are kept in {}, which opens normally",
            format_elapsed(elapsed),
            status.samples_written,
            args.out.display()
        ));
    }
    if status.batches_dropped + dropped_by_sampler > 0 {
        eprintln!(
            "vramscope: warning: {} batches were dropped because writing fell behind",
            status.batches_dropped + dropped_by_sampler
        );
    }
    Ok(format!(
        "recorded {} samples of {} GPU(s) over {} to {} ({}){}",
        status.samples_written,
        devices.len(),
        format_elapsed(elapsed),
        args.out.display(),
        format_bytes(status.bytes_written),
        if demo_reason.is_some() {
            " — simulated data"
        } else {
            ""
        }
    ))
}

fn print_progress(status: &RecorderStatus, elapsed: Duration, tty: bool) {
    let line = format!(
        "recording: {} samples, {}, {} written",
        status.samples_written,
        format_elapsed(elapsed),
        format_bytes(status.bytes_written)
    );
    let mut err = std::io::stderr().lock();
    // Progress is best effort: a closed stderr must not stop the recording.
    let _ = if tty {
        write!(err, "\r\x1b[2K{line}").and_then(|()| err.flush())
    } else {
        writeln!(err, "{line}")
    };
}

/// `h:mm:ss` for progress lines.
fn format_elapsed(elapsed: Duration) -> String {
    let secs = elapsed.as_secs();
    format!("{}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_core::model::{CaptureMeta, DeviceFacts, DeviceSample, GIB, SampleBatch, UnixMs};
    use vramscope_core::source::{SourceDescription, Tiers};

    /// One GPU whose source panics on poll `panic_on_poll` (counting from 1), like a driver
    /// binding that hits a bug.
    struct PanickingSource {
        polls: usize,
        panic_on_poll: usize,
    }

    impl Source for PanickingSource {
        fn describe(&self) -> SourceDescription {
            SourceDescription {
                meta: CaptureMeta::default(),
                devices: vec![DeviceFacts {
                    index: 0,
                    name: "test GPU".to_owned(),
                    memory_total_bytes: 80 * GIB,
                    ..Default::default()
                }],
            }
        }

        fn poll(&mut self, now_ms: UnixMs, _tiers: Tiers) -> SampleBatch {
            self.polls += 1;
            assert_ne!(
                self.polls, self.panic_on_poll,
                "simulated failure inside a source"
            );
            SampleBatch {
                devices: vec![DeviceSample {
                    t_ms: now_ms,
                    device_index: 0,
                    ..Default::default()
                }],
                ..Default::default()
            }
        }
    }

    #[test]
    fn a_dying_sampler_stops_the_recording_with_an_error_and_keeps_the_file() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let out = dir.path().join("died.vramcap");
        let args = RecordArgs {
            out: out.clone(),
            interval_ms: 20,
            duration: Some(Duration::from_secs(60)),
            demo: false,
            demo_speed: None,
            demo_gpus: None,
            force: false,
            alerts: Default::default(),
        };
        let source = PanickingSource {
            polls: 0,
            panic_on_poll: 4,
        };
        let started = Instant::now();
        let problem = record(Box::new(source), None, &args, &AtomicBool::new(false))
            .expect_err("a dead sampler is an error");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "stopped by itself"
        );
        assert!(
            problem.contains("sampling stopped unexpectedly"),
            "{problem}"
        );
        assert!(problem.contains("the 3 samples"), "{problem}");
        assert!(problem.contains("died.vramcap"), "{problem}");
        let capture = vramscope_core::formats::vramcap::read_file(&out).expect("the file opens");
        assert_eq!(capture.recovery, None, "closed cleanly");
        assert_eq!(capture.sample_count(), 3);
    }

    #[test]
    fn durations_are_validated() {
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration(" 2 "), Ok(Duration::from_secs(2)));
        for bad in ["0", "-1", "NaN", "inf", "1e30", "soon", ""] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn elapsed_is_hours_minutes_seconds() {
        assert_eq!(
            format_elapsed(Duration::from_secs(3 * 3600 + 62)),
            "3:01:02"
        );
        assert_eq!(format_elapsed(Duration::from_millis(999)), "0:00:00");
    }
}
