//! The leak rule: memory that keeps growing, in a capture (per process and per GPU), in the
//! figures a training log prints per step, and between allocator snapshots (by call site).
//!
//! Captures and logs are judged by [`super::growth::assess`]: the robust slope of the series'
//! floor, its fit, whether it levels off (a warm-up is not a leak) and, for captures, the time
//! until the GPU is full. A capture of any length from [`growth::CAPTURE_MIN_SPAN_MS`] on is
//! judged; a climb that fills the GPU within [`growth::FAST_FILL_SECONDS`] is critical however
//! short the recording, and slow growth in a recording shorter than
//! [`growth::CAPTURE_SURE_SPAN_MS`] is reported as not yet decidable. A recording too short to
//! judge at all says so (an `inconclusive` finding), never "healthy".
//!
//! A GPU's used memory is judged by the same rule as a process, whatever recorded it (a
//! `.vramcap` device track, nvidia-smi's `--query-gpu` log, a Prometheus range series): each
//! stretch while a job ran ([`growth::job_runs`]) with its start-up ramp left out, so that the
//! idle GPU around a job and the fall at its end do not hide growth while it ran. Where processes
//! growing on that GPU explain its growth ([`EXPLAINED_SHARE`]), the finding names them and the
//! GPU's growth is not reported again. Findings name a GPU as the fleet view does
//! ([`Capture::gpu_label`]: `node-a GPU 3` in a fleet).
//!
//! Snapshots are compared in time order (latest trace event, else the file's modification time),
//! and only neighbours that come from the same process, by [`same_process`]: a trace event (same
//! microsecond and address) recorded in both, or, when a trace cannot show it (one has no trace, or
//! the later one's ring buffer wrapped), a segment at the same address and size in both with the
//! same allocator settings. Anything else is not compared, and a low-severity note says why.

use super::finding::{Category, Evidence, EvidenceSource, Finding, Severity, Unit, Wizard};
use super::growth::{self, Growth, Shape, duration_text};
use super::log::{LogAnalysis, StepSeries};
use super::proof::ReplayEvidence;
use super::recommend::{self, MIN_LEAK_GROWTH_BYTES};
use super::trace_events::TraceEventSet;
use super::trajectory::Trajectory;
use std::sync::Arc;

use crate::analysis::oom::OomExplanation;
use crate::analysis::timetravel::AllocatorState;
use crate::model::allocator::AllocatorSettings;
use crate::model::capture::ProcessTrack;
use crate::model::{Capture, format_bytes};

/// The size of the GPU a log's training ran on, when another input says it, with where it comes
/// from (a capture's device total; the log's own OOM message is looked at first).
#[derive(Clone, Debug)]
pub struct KnownCapacity {
    pub total_bytes: u64,
    pub source: EvidenceSource,
}

/// The growth of a log's step series, when it grows (x = step).
fn step_growth(series: &StepSeries) -> Option<Growth> {
    let points: Vec<(f64, f64)> = series
        .points
        .iter()
        .map(|p| (p.step as f64, p.bytes as f64))
        .collect();
    match growth::assess(&points, 0.0) {
        Shape::Growing(g) => Some(g),
        _ => None,
    }
}

/// Steps needed before a per-step trend counts as sure.
const SURE_STEPS: f64 = 20.0;

/// Leak findings from memory figures a log prints per step (`step 12 allocated 4.06 GiB`): one
/// finding per log, for the series that grew most, with the number of steps until the GPU is full
/// when its size is known (from the log's OOM message, else `capacity`).
pub fn log_findings(log: &LogAnalysis, capacity: Option<&KnownCapacity>, out: &mut Vec<Finding>) {
    let mut leaking: Vec<(&StepSeries, Growth)> = log
        .step_series
        .iter()
        .filter_map(|series| step_growth(series).map(|g| (series, g)))
        .collect();
    // Live tensors ("allocated") say most about a leak; then the largest growth.
    leaking.sort_by(|a, b| {
        let live = |s: &StepSeries| s.label.contains("allocated");
        live(b.0)
            .cmp(&live(a.0))
            .then(b.1.growth_bytes().total_cmp(&a.1.growth_bytes()))
    });
    let Some((series, trend)) = leaking.first() else {
        return;
    };
    let (Some(first), Some(last)) = (series.points.first(), series.points.last()) else {
        return;
    };
    let line = |l: usize| EvidenceSource::LogLine {
        file: log.name.clone(),
        line: l,
    };
    let per_step = trend.slope().max(0.0) as u64;
    let mut evidence = vec![
        Evidence::number(
            format!("{} growth per step", series.label),
            trend.slope(),
            Unit::Bytes,
            format!("{}/step", format_bytes(per_step)),
            EvidenceSource::Derived,
        ),
        Evidence::bytes(
            format!("{} at step {}", series.label, first.step),
            first.bytes,
            line(first.line),
        ),
        Evidence::bytes(
            format!("{} at step {}", series.label, last.step),
            last.bytes,
            line(last.line),
        ),
        fit_evidence(trend.line.r_squared),
        confidence_evidence(trend, SURE_STEPS),
    ];
    for (other, t) in leaking.iter().skip(1) {
        evidence.push(Evidence::number(
            format!("{} growth per step", other.label),
            t.slope(),
            Unit::Bytes,
            format!("{}/step", format_bytes(t.slope().max(0.0) as u64)),
            EvidenceSource::Derived,
        ));
    }
    let capacity = log
        .best_oom()
        .and_then(|(m, n, _)| {
            n.total_bytes.map(|total_bytes| KnownCapacity {
                total_bytes,
                source: line(m.line),
            })
        })
        .or_else(|| capacity.cloned());
    // What the process holds at the end: the largest figure printed at the last step (reserved
    // memory when the log prints it).
    let held = log
        .step_series
        .iter()
        .filter_map(|s| s.points.last())
        .filter(|p| p.step == last.step)
        .max_by_key(|p| p.bytes)
        .copied()
        .unwrap_or(*last);
    let (until_full, full_title) = match &capacity {
        Some(capacity) if per_step > 0 => {
            let steps_left = capacity.total_bytes.saturating_sub(held.bytes) / per_step;
            evidence.push(Evidence::bytes(
                "device capacity",
                capacity.total_bytes,
                capacity.source.clone(),
            ));
            evidence.push(Evidence::bytes(
                format!("held at step {}", held.step),
                held.bytes,
                line(held.line),
            ));
            evidence.push(Evidence::number(
                "steps until the GPU is full",
                steps_left as f64,
                Unit::Count,
                format!("about {steps_left} steps"),
                EvidenceSource::Derived,
            ));
            (
                format!(
                    " At this rate the {} GPU is full in about {steps_left} steps after step {} ({} held then); the log prints no step times, so this cannot be given in hours.",
                    format_bytes(capacity.total_bytes),
                    held.step,
                    format_bytes(held.bytes)
                ),
                format!("; full in about {steps_left} steps"),
            )
        }
        _ => (
            " How many steps are left until the GPU is full is unknown: the log does not say how large the GPU is (no out-of-memory message with its total); add a capture (--capture, or record one while training) to estimate it.".to_owned(),
            String::new(),
        ),
    };
    out.push(Finding {
        category: Category::Leak,
        severity: Severity::Warning,
        title: format!(
            "{} memory grows by {} per step ({} → {} over {} steps){full_title}",
            series.label,
            format_bytes(per_step),
            format_bytes(first.bytes),
            format_bytes(last.bytes),
            last.step.saturating_sub(first.step)
        ),
        evidence,
        explanation: format!(
            "The log prints {} memory at every step and the level it returns to rises steadily (robust slope {}/step) instead of levelling off after the first steps: each step keeps about {} alive. A training loop that frees its activations stays flat. {}{until_full}",
            series.label,
            format_bytes(per_step),
            format_bytes(per_step),
            trend.confidence_text(SURE_STEPS, "step")
        ),
        recommendations: vec![recommend::find_leak(None), recommend::empty_cache()],
        wizard: Some(Wizard::Leak),
    });
}

/// What one process (or a GPU's used memory) in a capture does, for the leak rule and the
/// process table: the judgement of the stretch of its readings that matters most (see
/// [`growth::job_runs`]: the job's start-up ramp, its end and the idle GPU around it are not
/// judged as growth).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeriesGrowth {
    /// The judgement of the stretch.
    pub shape: Shape,
    /// Free memory on the device at the stretch's last reading, when read: what the growth has
    /// left to fill while the job ran (the memory a job gave back when it ended is not headroom
    /// it had).
    pub free_at_end_bytes: Option<u64>,
    /// First and last reading (Unix ms) of the stretch judged.
    pub run_start_ms: i64,
    pub run_end_ms: i64,
    /// The first reading after the stretch, `(Unix ms, bytes)`, when memory fell there below
    /// everything the job held (it ended, or some of its processes exited); `None` when the
    /// stretch runs to the last reading.
    pub fell_after: Option<(i64, u64)>,
}

impl SeriesGrowth {
    /// Whether this growth is a finding (a warning or worse): the process table and the
    /// timeline highlight such a process as leaking.
    pub fn is_leaking(&self) -> bool {
        self.severity().is_some_and(|s| s != Severity::Info)
    }

    /// The growth, when growing.
    pub fn growth(&self) -> Option<&Growth> {
        match &self.shape {
            Shape::Growing(g) => Some(g),
            _ => None,
        }
    }

    /// Bytes per minute, when growing.
    pub fn bytes_per_minute(&self) -> Option<f64> {
        self.growth().map(|g| g.slope() * 60.0)
    }

    /// Seconds until the device is full at the current rate, when growing and the free memory
    /// is known.
    pub fn seconds_until_full(&self) -> Option<f64> {
        self.growth()?.until_full(self.free_at_end_bytes?)
    }

    /// How serious the growth is, by the rules of the module comment: `None` when it is no
    /// finding (not growing), `Some(Info)` when slow growth in a short recording cannot yet be told
    /// from a warm-up.
    pub fn severity(&self) -> Option<Severity> {
        let g = self.growth()?;
        let until_full = self.seconds_until_full();
        let fast = until_full.is_some_and(|s| s < growth::FAST_FILL_SECONDS);
        let sure_span = growth::CAPTURE_SURE_SPAN_MS as f64 / 1000.0;
        Some(if fast && !g.decelerating {
            Severity::Critical
        } else if g.span() < sure_span && !fast {
            Severity::Info
        } else {
            Severity::Warning
        })
    }

    /// How much this judgement weighs against another of the same series: the most severe
    /// growth first, then any judged shape before "too short", then the longer stretch.
    fn weight(&self) -> (u8, bool, i64) {
        let severity = match self.severity() {
            Some(Severity::Critical) => 4,
            Some(Severity::Warning) => 3,
            Some(Severity::Info) => 2,
            None => 1,
        };
        let judged = !matches!(self.shape, Shape::TooShort { .. });
        (severity, judged, self.run_end_ms - self.run_start_ms)
    }
}

/// `(t_ms, bytes)` readings as `(seconds from the first, bytes)`.
fn seconds_points(readings: &[(i64, u64)]) -> Vec<(f64, f64)> {
    let t0 = readings.first().map_or(0, |r| r.0);
    readings
        .iter()
        .map(|&(t, b)| ((t - t0) as f64 / 1000.0, b as f64))
        .collect()
}

/// A process track's readings as `(t_ms, bytes)`, the ticks the driver reported no memory left
/// out.
fn track_readings(track: &ProcessTrack) -> Vec<(i64, u64)> {
    track
        .t_ms
        .iter()
        .zip(&track.used_bytes)
        .filter_map(|(&t, b)| b.map(|b| (t, b)))
        .collect()
}

/// A GPU's used-memory readings as `(t_ms, bytes)`, whatever recorded them: a `.vramcap`
/// device track, nvidia-smi's `--query-gpu` log, a Prometheus range series.
fn device_readings(capture: &Capture, device: u32) -> Vec<(i64, u64)> {
    capture
        .series(device)
        .map(|series| {
            series
                .iter()
                .filter_map(|s| s.memory.map(|m| (s.t_ms, m.used_bytes)))
                .collect()
        })
        .unwrap_or_default()
}

/// The growth judgement of one process's readings (`pid` on `device`) in a capture; `None` when
/// the capture has no such process.
pub fn process_growth(capture: &Capture, device: u32, pid: u32) -> Option<SeriesGrowth> {
    let track = capture
        .processes
        .iter()
        .find(|p| p.device_index == device && p.pid == pid)?;
    judge_readings(capture, device, &track_readings(track))
}

/// The growth judgement of a GPU's used memory in a capture, by the same rule as a process's
/// (the fleet view's growth per hour and the GPU-level leak finding); `None` when the capture
/// has no memory readings of `device`.
pub fn gpu_growth(capture: &Capture, device: u32) -> Option<SeriesGrowth> {
    judge_readings(capture, device, &device_readings(capture, device))
}

/// Judges every stretch of `readings` while a job ran ([`growth::job_runs`]) and keeps the one
/// that weighs most ([`SeriesGrowth::weight`]); `None` without readings.
fn judge_readings(capture: &Capture, device: u32, readings: &[(i64, u64)]) -> Option<SeriesGrowth> {
    let min_span_s = growth::CAPTURE_MIN_SPAN_MS as f64 / 1000.0;
    growth::job_runs(readings)
        .into_iter()
        .filter_map(|run| {
            let (first, last) = (run.first()?, run.last()?);
            let after = readings.partition_point(|r| r.0 <= last.0);
            Some(SeriesGrowth {
                shape: growth::assess_with(
                    &seconds_points(run),
                    min_span_s,
                    growth::CAPTURE_MIN_POINTS,
                    growth::MIN_GROWTH_BYTES,
                ),
                free_at_end_bytes: free_at(capture, device, last.0),
                run_start_ms: first.0,
                run_end_ms: last.0,
                fell_after: readings.get(after).copied(),
            })
        })
        .max_by_key(SeriesGrowth::weight)
}

/// Free memory on `device` at the last reading at or before `t_ms`.
fn free_at(capture: &Capture, device: u32, t_ms: i64) -> Option<u64> {
    let series = capture.series(device)?;
    let upto = series.times().partition_point(|t| *t <= t_ms);
    (0..upto)
        .rev()
        .find_map(|i| series.memory(i))
        .map(|m| m.free_bytes)
}

/// The processes of a capture whose memory grows enough for a finding (warning or critical),
/// as `(device, pid)`: what the Leak wizard and the timeline highlight.
pub fn leaking_processes(capture: &Capture) -> Vec<(u32, u32)> {
    capture
        .processes
        .iter()
        .filter(|p| {
            process_growth(capture, p.device_index, p.pid)
                .and_then(|g| g.severity())
                .is_some_and(|s| s != Severity::Info)
        })
        .map(|p| (p.device_index, p.pid))
        .collect()
}

/// Processes growing on a GPU explain its growth when together they grow at least this share of
/// its rate: the finding names them, and the GPU's own growth is not reported again.
pub const EXPLAINED_SHARE: f64 = 0.5;

/// Leak findings from a capture: per process, and per GPU where the growing processes do not
/// explain its growth ([`EXPLAINED_SHARE`]: processes the driver does not list, or no
/// per-process readings at all, as in nvidia-smi's `--query-gpu` log or a Prometheus GPU series);
/// an `inconclusive` finding when the recording is too short to judge. A single reading
/// (`diagnose --live`) is no recording: it says nothing about growth either way.
pub fn capture_findings(name: &str, capture: &Capture, out: &mut Vec<Finding>) {
    let Some((first_ms, last_ms)) = recording_span_ms(capture) else {
        return;
    };
    let span_ms = last_ms - first_ms;
    if span_ms == 0 {
        return;
    }
    if span_ms < growth::CAPTURE_MIN_SPAN_MS {
        out.push(too_short(name, span_ms));
        return;
    }
    for series in &capture.series {
        let d = series.device_index;
        let gpu = capture.gpu_label(d);
        let mut explained_bytes_per_s = 0.0;
        let mut growing_processes = Vec::new();
        for track in capture.processes.iter().filter(|p| p.device_index == d) {
            let process = if track.name.is_empty() {
                format!("process {}", track.pid)
            } else {
                format!("process {} ({})", track.pid, track.name)
            };
            let Some(judged) = judge_readings(capture, d, &track_readings(track)) else {
                continue;
            };
            if let Some(g) = judged.growth() {
                explained_bytes_per_s += g.slope().max(0.0);
                growing_processes.push(process.clone());
            }
            let subject = format!("{process} on {gpu}");
            if let Some(finding) = capture_growth_finding(name, capture, d, &subject, &judged) {
                out.push(finding);
            }
        }
        let Some(judged) = gpu_growth(capture, d) else {
            continue;
        };
        let gpu_bytes_per_s = judged.growth().map_or(0.0, |g| g.slope());
        if explained_bytes_per_s >= EXPLAINED_SHARE * gpu_bytes_per_s {
            continue;
        }
        let subject = format!("Used memory of {gpu}");
        if let Some(mut finding) = capture_growth_finding(name, capture, d, &subject, &judged) {
            finding.explanation.push_str(&unexplained_text(
                capture,
                &growing_processes,
                explained_bytes_per_s,
            ));
            out.push(finding);
        }
    }
}

/// What a GPU-level leak finding says about the processes behind it: none are recorded, or those
/// that grow account for only part of it.
fn unexplained_text(capture: &Capture, growing: &[String], explained_bytes_per_s: f64) -> String {
    if capture.processes.is_empty() {
        return " The readings are the GPU's alone (no per-process readings, as from nvidia-smi --query-gpu or a Prometheus GPU series): which process grows is not recorded; record with vramscope record, or log nvidia-smi --query-compute-apps beside it, to name it.".to_owned();
    }
    if growing.is_empty() {
        return " None of the processes the driver lists grows: memory is held by processes it does not list (another container or user), or by processes that keep starting.".to_owned();
    }
    format!(
        " The processes that grow ({}) account for only {}/min of it: the rest is held by processes the driver does not list, or by processes that keep starting.",
        growing.join(", "),
        format_bytes((explained_bytes_per_s * 60.0) as u64)
    )
}

/// First and last time (Unix ms) of any reading in the capture: device samples or process
/// readings (an nvidia-smi `--query-compute-apps` log has only the latter).
fn recording_span_ms(capture: &Capture) -> Option<(i64, i64)> {
    let firsts = capture
        .series
        .iter()
        .filter_map(|s| s.times().first().copied())
        .chain(
            capture
                .processes
                .iter()
                .filter_map(|p| p.t_ms.first().copied()),
        );
    let lasts = capture
        .series
        .iter()
        .filter_map(|s| s.times().last().copied())
        .chain(
            capture
                .processes
                .iter()
                .filter_map(|p| p.t_ms.last().copied()),
        );
    Some((firsts.min()?, lasts.max()?))
}

/// The finding that a capture is too short for its growth to be judged.
fn too_short(name: &str, span_ms: i64) -> Finding {
    let span_s = span_ms as f64 / 1000.0;
    let needed_s = growth::CAPTURE_MIN_SPAN_MS as f64 / 1000.0;
    Finding {
        category: Category::Inconclusive,
        severity: Severity::Info,
        title: format!(
            "Too short to judge memory growth: {} of readings, at least {} needed",
            duration_text(span_s),
            duration_text(needed_s)
        ),
        evidence: vec![Evidence::number(
            "span of the readings",
            span_s,
            Unit::Seconds,
            duration_text(span_s),
            EvidenceSource::Capture {
                file: name.to_owned(),
                device_index: None,
                t_ms: None,
                gpu: None,
            },
        )],
        explanation: format!(
            "Over {} a model load or the first training steps look exactly like a leak, so whether memory grows cannot be told: this is not a clean bill of health. Record at least {}, better {} (vramscope record), and diagnose again.",
            duration_text(span_s),
            duration_text(needed_s),
            duration_text(growth::CAPTURE_SURE_SPAN_MS as f64 / 1000.0)
        ),
        recommendations: Vec::new(),
        wizard: Some(Wizard::Leak),
    }
}

/// The leak finding for one series of a capture (`subject`: the process on its GPU, or the GPU's
/// used memory), when it grows.
fn capture_growth_finding(
    name: &str,
    capture: &Capture,
    d: u32,
    subject: &str,
    judged: &SeriesGrowth,
) -> Option<Finding> {
    let trend = judged.growth()?;
    let severity = judged.severity()?;
    let judged_from_ms = judged.run_start_ms + (trend.judged_from * 1000.0) as i64;
    let last_t = Some(judged.run_end_ms);
    let per_second = trend.slope();
    let per_minute = per_second * 60.0;
    let per_hour = per_second * 3600.0;
    let source = |t| EvidenceSource::capture(name, capture, Some(d), t);
    let sure_span = growth::CAPTURE_SURE_SPAN_MS as f64 / 1000.0;
    let mut evidence = vec![
        Evidence::number(
            "growth rate",
            per_second,
            Unit::BytesPerSecond,
            format!(
                "{}/min ({}/h)",
                format_bytes(per_minute.max(0.0) as u64),
                format_bytes(per_hour.max(0.0) as u64)
            ),
            EvidenceSource::Derived,
        ),
        Evidence::bytes(
            "growth over the span judged",
            trend.growth_bytes().max(0.0) as u64,
            source(Some(judged_from_ms)),
        ),
        Evidence::number(
            "span judged, after the start-up ramp",
            trend.span(),
            Unit::Seconds,
            duration_text(trend.span()),
            source(last_t),
        ),
        fit_evidence(trend.line.r_squared),
        confidence_evidence(trend, sure_span),
    ];
    let until_full = judged.seconds_until_full();
    if let (Some(free), Some(secs)) = (judged.free_at_end_bytes, until_full) {
        evidence.push(Evidence::bytes("free at the end", free, source(last_t)));
        evidence.push(Evidence::number(
            "time until the GPU is full",
            secs,
            Unit::Seconds,
            duration_text(secs),
            EvidenceSource::Derived,
        ));
    }
    let ended_text = match judged.fell_after {
        Some((t, bytes)) => {
            evidence.push(Evidence::bytes(
                "memory fell to, after the span judged",
                bytes,
                source(Some(t)),
            ));
            format!(
                " The span judged ends where memory fell to {}, below everything held since the start-up: the job ended or some of its processes exited, which is no step falling back.",
                format_bytes(bytes)
            )
        }
        None => String::new(),
    };
    let full_text = until_full
        .map(|s| format!("; the GPU is full in about {}", duration_text(s)))
        .unwrap_or_default();
    let (title, explanation) = if severity == Severity::Info {
        (
            format!(
                "{subject} grew by {}/min over the {} recorded: too short to tell a leak from a long warm-up",
                format_bytes(per_minute.max(0.0) as u64),
                duration_text(trend.span())
            ),
            format!(
                "Memory rose by {} over {} along a steady line, but a recording this short cannot tell a leak from a start-up that levels off later, and at this rate the GPU is not full for a while{full_text}. Record at least {} and diagnose again.{ended_text} {}",
                format_bytes(trend.growth_bytes().max(0.0) as u64),
                duration_text(trend.span()),
                duration_text(sure_span),
                trend.confidence_text(sure_span, "s")
            ),
        )
    } else {
        (
            format!(
                "{subject} grows steadily by {}/min{full_text}",
                format_bytes(per_minute.max(0.0) as u64)
            ),
            format!(
                "After the start-up ramp, the memory the readings fall back to rose by {} over {} and was still rising at the end{}: something keeps allocations alive.{ended_text} {} NVML shows the allocator's reserved memory, so take two snapshots to see which tensors grow.",
                format_bytes(trend.growth_bytes().max(0.0) as u64),
                duration_text(trend.span()),
                if trend.decelerating {
                    ", although more slowly"
                } else {
                    ""
                },
                trend.confidence_text(sure_span, "s")
            ),
        )
    };
    Some(Finding {
        category: Category::Leak,
        severity,
        title,
        evidence,
        explanation,
        recommendations: vec![
            recommend::find_leak(Some(per_hour.max(0.0) as u64)),
            recommend::empty_cache(),
        ],
        wizard: Some(Wizard::Leak),
    })
}

/// How sure a growth is, as evidence.
fn confidence_evidence(trend: &Growth, sure_span: f64) -> Evidence {
    let confidence = trend.confidence(sure_span);
    Evidence::text("confidence", confidence.as_str(), EvidenceSource::Derived)
}

/// Allocator facts from one snapshot that the rules need, per device; made from a PyTorch
/// snapshot by `diagnose::snapshot::facts`, and plain data so tests and other sources can fill it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SnapshotFacts {
    /// File name.
    pub name: String,
    pub device_index: u32,
    /// Bytes reserved by the allocator (segments) at the end of the snapshot.
    pub reserved_bytes: u64,
    /// Bytes in allocated blocks at the end of the snapshot.
    pub allocated_bytes: u64,
    /// Largest cached free block at the end of the snapshot.
    pub largest_free_block_bytes: u64,
    /// The last OOM in the trace, with the allocator's numbers at that moment.
    pub oom: Option<SnapshotOom>,
    /// `expandable_segments` from the allocator settings, when recorded.
    pub expandable_segments: Option<bool>,
    /// Allocated bytes per call site (innermost user frame), largest first.
    pub allocated_by_call_site: Vec<(String, u64)>,
    /// The device's allocator state at the end of the snapshot (segments and blocks), which
    /// reports draw as a block map; `None` when the facts did not come from a snapshot file.
    pub final_state: Option<Arc<AllocatorState>>,
    /// When the snapshot was taken and what shows which process it came from.
    pub identity: SnapshotIdentity,
    /// How the live set moved up to the last OOM (or the end of the trace), when the snapshot
    /// has a trace.
    pub trajectory: Option<Trajectory>,
    /// A what-if replay of the trace under other allocator settings, when one was run.
    pub replay: Option<ReplayEvidence>,
    /// The sweep of candidate settings replayed over the trace (for reports), when the
    /// snapshot has an allocation history.
    pub what_if: Option<super::finding::NamedWhatIf>,
    /// Where the live memory went, by category, at the last OOM and at the peak before it (at
    /// the trace's peak without an OOM), when the facts came from a snapshot file.
    pub breakdown: Option<Arc<crate::analysis::categories::MemoryBreakdown>>,
}

impl SnapshotFacts {
    /// When the snapshot was taken (Unix ms): its latest trace event, else the file's
    /// modification time; `None` when neither is known.
    pub fn taken_at_ms(&self) -> Option<i64> {
        self.identity
            .last_trace_time_us
            .map(|t| t.div_euclid(1000))
            .or(self.identity.file_modified_ms)
    }
}

/// What orders snapshots in time and tells whether two come from the same process; filled from
/// the snapshot by `diagnose::snapshot::facts`, the file time by whoever read the file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SnapshotIdentity {
    /// Time of the device's latest trace event (Unix µs), when the trace recorded times.
    pub last_trace_time_us: Option<i64>,
    /// The file's modification time (Unix ms), the order of last resort.
    pub file_modified_ms: Option<i64>,
    /// `(time µs, address)` of the device's trace events with a time: one event in two
    /// snapshots proves one process recorded both.
    pub trace_events: TraceEventSet,
    /// Whether the trace ring buffer was full or wrapped, so that older events are lost.
    pub trace_wrapped: bool,
    /// `(address, bytes)` of the device's segments, sorted.
    pub segments: Vec<(u64, u64)>,
    /// The allocator settings recorded in the snapshot.
    pub settings: Option<AllocatorSettings>,
}

/// Why two snapshots, in time order, are taken to come from the same process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SameProcess {
    /// Both traces hold this many of the same events (time and address).
    SharedTraceEvents(usize),
    /// Both hold this many segments at the same address and size, with the same allocator
    /// settings, and no trace can tell more.
    SharedSegments(usize),
}

/// Whether `later` (taken after `earlier`) comes from the same process, by the rule in the module
/// comment; `None` when nothing shows it.
pub fn same_process(earlier: &SnapshotFacts, later: &SnapshotFacts) -> Option<SameProcess> {
    let (a, b) = (&earlier.identity, &later.identity);
    let shared_events = count_shared(a.trace_events.iter(), b.trace_events.iter());
    if shared_events > 0 {
        return Some(SameProcess::SharedTraceEvents(shared_events));
    }
    let trace_can_tell =
        !a.trace_events.is_empty() && !b.trace_events.is_empty() && !b.trace_wrapped;
    if trace_can_tell || a.settings != b.settings {
        return None;
    }
    let shared_segments = count_shared(a.segments.iter(), b.segments.iter());
    (shared_segments > 0).then_some(SameProcess::SharedSegments(shared_segments))
}

/// Number of items in both sorted lists.
fn count_shared<T: Ord>(a: impl Iterator<Item = T>, b: impl Iterator<Item = T>) -> usize {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    let mut shared = 0;
    while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
        match x.cmp(y) {
            std::cmp::Ordering::Less => {
                a.next();
            }
            std::cmp::Ordering::Greater => {
                b.next();
            }
            std::cmp::Ordering::Equal => {
                shared += 1;
                a.next();
                b.next();
            }
        }
    }
    shared
}

/// The snapshots in the order they were taken ([`SnapshotFacts::taken_at_ms`]); those without a
/// time keep their given order, after the others.
pub fn in_time_order(snapshots: &[SnapshotFacts]) -> Vec<&SnapshotFacts> {
    let mut ordered: Vec<&SnapshotFacts> = snapshots.iter().collect();
    ordered.sort_by_key(|s| (s.taken_at_ms().is_none(), s.taken_at_ms()));
    ordered
}

/// An out-of-memory event in a snapshot's trace, with the allocator's numbers at that moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotOom {
    /// Index of the `oom` event in the device's trace.
    pub event_index: usize,
    /// The segment size the allocator asked cudaMalloc for ("Tried to allocate").
    pub requested_bytes: u64,
    /// `cudaMemGetInfo` free memory at the OOM.
    pub device_free_bytes: Option<u64>,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    /// Cached free bytes in the request's pool and stream that the request could use.
    pub usable_free_bytes: u64,
    /// Largest cached free block in the request's pool and stream.
    pub largest_usable_free_bytes: u64,
    /// Free blocks the reconstruction says would have fit (more than 0: the reconstructed state
    /// is not the allocator's).
    pub fitting_blocks: u64,
}

impl SnapshotOom {
    /// The numbers of an explained `oom` event.
    pub fn from_explanation(e: &OomExplanation) -> Self {
        SnapshotOom {
            event_index: e.event_index,
            requested_bytes: e.needed_bytes(),
            device_free_bytes: e.device_free_bytes,
            allocated_bytes: e.allocated_bytes,
            reserved_bytes: e.reserved_bytes,
            usable_free_bytes: e.usable_free_bytes,
            largest_usable_free_bytes: e.usable_largest_free_bytes,
            fitting_blocks: e.fitting_blocks,
        }
    }
}

/// Leak findings from two or more snapshots of one device: per run of neighbours (in time order)
/// that come from the same process, growth in every step; a low-severity note for neighbours that
/// were not compared.
pub fn snapshot_findings(snapshots: &[SnapshotFacts], out: &mut Vec<Finding>) {
    let ordered = in_time_order(snapshots);
    let mut devices: Vec<u32> = ordered.iter().map(|s| s.device_index).collect();
    devices.sort_unstable();
    devices.dedup();
    for d in devices {
        let series: Vec<&SnapshotFacts> = ordered
            .iter()
            .copied()
            .filter(|s| s.device_index == d)
            .collect();
        let mut run: Vec<&SnapshotFacts> = Vec::new();
        let mut links: Vec<SameProcess> = Vec::new();
        let mut not_compared: Vec<(&SnapshotFacts, &SnapshotFacts)> = Vec::new();
        for s in series {
            let link = run.last().and_then(|prev| {
                prev.taken_at_ms()
                    .zip(s.taken_at_ms())
                    .and_then(|_| same_process(prev, s))
            });
            match (run.last().copied(), link) {
                (Some(_), Some(link)) => links.push(link),
                (Some(prev), None) => {
                    not_compared.push((prev, s));
                    growth_finding(d, &run, &links, out);
                    run.clear();
                    links.clear();
                }
                (None, _) => {}
            }
            run.push(s);
        }
        growth_finding(d, &run, &links, out);
        if !not_compared.is_empty() {
            out.push(not_compared_note(d, &not_compared));
        }
    }
}

/// The leak finding for one run of snapshots of the same process, if allocated memory grew in
/// every step by at least [`MIN_LEAK_GROWTH_BYTES`] in all.
fn growth_finding(d: u32, run: &[&SnapshotFacts], links: &[SameProcess], out: &mut Vec<Finding>) {
    let (Some(first), Some(last)) = (run.first(), run.last()) else {
        return;
    };
    if run.len() < 2 {
        return;
    }
    let growth = last.allocated_bytes.saturating_sub(first.allocated_bytes);
    let monotonic = run
        .windows(2)
        .all(|w| w[1].allocated_bytes >= w[0].allocated_bytes);
    if growth < MIN_LEAK_GROWTH_BYTES || !monotonic {
        return;
    }
    let mut sites: Vec<(String, i128)> = last
        .allocated_by_call_site
        .iter()
        .map(|(site, bytes)| {
            let before = first
                .allocated_by_call_site
                .iter()
                .find(|(s, _)| s == site)
                .map(|(_, b)| *b)
                .unwrap_or(0);
            (site.clone(), *bytes as i128 - before as i128)
        })
        .filter(|(_, delta)| *delta > 0)
        .collect();
    sites.sort_by_key(|site| std::cmp::Reverse(site.1));
    let mut evidence = vec![
        Evidence::bytes(
            "allocated in the first snapshot",
            first.allocated_bytes,
            EvidenceSource::Snapshot {
                file: first.name.clone(),
                device_index: Some(d),
            },
        ),
        Evidence::bytes(
            "allocated in the last snapshot",
            last.allocated_bytes,
            EvidenceSource::Snapshot {
                file: last.name.clone(),
                device_index: Some(d),
            },
        ),
    ];
    for (site, delta) in sites.iter().take(5) {
        evidence.push(Evidence::bytes(
            format!("growth at {site}"),
            *delta as u64,
            EvidenceSource::Derived,
        ));
    }
    let weakest_link = links
        .iter()
        .find(|l| matches!(l, SameProcess::SharedSegments(_)))
        .or(links.first());
    let same_process_text = match weakest_link {
        Some(SameProcess::SharedSegments(n)) => format!(
            " They are taken to come from one process because they share {n} segment(s) at the same address and size with the same allocator settings (no trace could confirm it)."
        ),
        Some(SameProcess::SharedTraceEvents(n)) => {
            format!(" Their traces share {n} recorded event(s), so one process took them.")
        }
        None => String::new(),
    };
    let top = sites
        .first()
        .map(|(s, _)| format!("; most at {s}"))
        .unwrap_or_default();
    out.push(Finding {
        category: Category::Leak,
        severity: Severity::Warning,
        title: format!(
            "Allocated memory on GPU {d} grew by {} across {} snapshots{top}",
            format_bytes(growth),
            run.len()
        ),
        evidence,
        explanation: format!(
            "Live tensors grew between every pair of snapshots, in the order they were taken; the call sites that grew most are listed.{same_process_text} Tensors kept in Python lists, accumulated losses with their graph, or caches that never evict are the usual causes."
        ),
        recommendations: vec![recommend::find_leak(None)],
        wizard: Some(Wizard::Leak),
    });
}

/// The note that neighbouring snapshots were not compared for a leak, and why.
fn not_compared_note(d: u32, pairs: &[(&SnapshotFacts, &SnapshotFacts)]) -> Finding {
    let mut evidence = Vec::new();
    let mut unordered = false;
    for (a, b) in pairs {
        unordered |= a.taken_at_ms().is_none() || b.taken_at_ms().is_none();
        for s in [a, b] {
            evidence.push(Evidence::bytes(
                "allocated",
                s.allocated_bytes,
                EvidenceSource::Snapshot {
                    file: s.name.clone(),
                    device_index: Some(d),
                },
            ));
        }
    }
    let names: Vec<String> = pairs
        .iter()
        .map(|(a, b)| format!("{} and {}", a.name, b.name))
        .collect();
    let why = if unordered {
        "When a snapshot was taken is not known (no trace times, no file time), or"
    } else {
        "In time order,"
    };
    Finding {
        category: Category::Leak,
        severity: Severity::Info,
        title: format!(
            "Snapshots on GPU {d} not compared for a leak: {}",
            names.join("; ")
        ),
        evidence,
        explanation: format!(
            "{why} nothing shows these snapshots come from the same process: their traces share no event and they share no segment at the same address and size with the same allocator settings. Growth between snapshots of different jobs or runs says nothing about a leak; take two snapshots of the same process a few steps apart."
        ),
        recommendations: Vec::new(),
        wizard: Some(Wizard::Leak),
    }
}

/// How well a straight line fits the growth (R², 0 to 1), shown with every leak finding so that a
/// reader can judge how steady the growth is.
fn fit_evidence(r_squared: f64) -> Evidence {
    Evidence::number(
        "fit (R²)",
        r_squared,
        Unit::Count,
        format!("{r_squared:.2}"),
        EvidenceSource::Derived,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GIB;

    fn facts(name: &str, allocated: u64, identity: SnapshotIdentity) -> SnapshotFacts {
        SnapshotFacts {
            name: name.into(),
            allocated_bytes: allocated,
            identity,
            ..Default::default()
        }
    }

    fn traced(events: &[(i64, u64)]) -> SnapshotIdentity {
        SnapshotIdentity {
            last_trace_time_us: events.iter().map(|e| e.0).max(),
            trace_events: TraceEventSet::from_events(events),
            ..Default::default()
        }
    }

    #[test]
    fn same_process_needs_a_shared_event_or_a_shared_segment_without_a_trace() {
        let early = facts("a", GIB, traced(&[(1, 0x10), (2, 0x20)]));
        let later = facts("b", 2 * GIB, traced(&[(2, 0x20), (3, 0x30)]));
        assert_eq!(
            same_process(&early, &later),
            Some(SameProcess::SharedTraceEvents(1))
        );
        let other = facts("c", 2 * GIB, traced(&[(5, 0x20), (6, 0x30)]));
        assert_eq!(
            same_process(&early, &other),
            None,
            "same address, other time"
        );

        let untraced = |segments: &[(u64, u64)]| SnapshotIdentity {
            file_modified_ms: Some(1),
            segments: segments.to_vec(),
            ..Default::default()
        };
        let a = facts("a", GIB, untraced(&[(0x100, GIB), (0x200, GIB)]));
        let b = facts("b", 2 * GIB, untraced(&[(0x100, GIB), (0x300, GIB)]));
        assert_eq!(same_process(&a, &b), Some(SameProcess::SharedSegments(1)));
        let mut other_settings = b.clone();
        other_settings.identity.settings = Some(AllocatorSettings {
            expandable_segments: Some(true),
            ..Default::default()
        });
        assert_eq!(same_process(&a, &other_settings), None);
        // Both traced, no shared event, no wrap: the traces say they are different processes.
        let mut traced_a = a.clone();
        traced_a.identity.trace_events = TraceEventSet::from_events(&[(1, 0x100)]);
        let mut traced_b = b.clone();
        traced_b.identity.trace_events = TraceEventSet::from_events(&[(9, 0x100)]);
        assert_eq!(same_process(&traced_a, &traced_b), None);
        traced_b.identity.trace_wrapped = true;
        assert_eq!(
            same_process(&traced_a, &traced_b),
            Some(SameProcess::SharedSegments(1))
        );
    }

    #[test]
    fn snapshots_are_compared_in_time_order_and_only_within_one_process() {
        // Given latest first; in time order the process grew from 1 to 3 GiB.
        let step1 = facts("step1", GIB, traced(&[(1_000, 0x10)]));
        let step2 = facts("step2", 3 * GIB, traced(&[(1_000, 0x10), (2_000, 0x20)]));
        let mut out = Vec::new();
        snapshot_findings(&[step2.clone(), step1.clone()], &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].severity, Severity::Warning);
        assert!(
            out[0].title.contains("grew by 2.00 GiB"),
            "{}",
            out[0].title
        );

        // Another job's snapshot in between: no leak, a note instead.
        let stranger = facts("other", 2 * GIB, traced(&[(1_500, 0x99)]));
        let mut out = Vec::new();
        snapshot_findings(&[step1, stranger, step2], &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].severity, Severity::Info);
        assert!(out[0].title.contains("not compared"), "{}", out[0].title);
    }
}
