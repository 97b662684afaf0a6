//! The leak rule: steady growth of a process's (or a device's) memory over a capture, with the
//! slope and the time until the GPU is full; and growth between allocator snapshots, by call site.
//!
//! Growth is judged with a least-squares line through the samples: a leak is a good fit
//! (R² ≥ 0.8), a total rise of at least [`MIN_LEAK_GROWTH_BYTES`], still rising in the second half
//! of the capture (so a warm-up that levels off is not a leak), and at least three separate rises
//! (so one big allocation is not a leak). A capture's readings must also span at least
//! [`thresholds::LEAK_MIN_OBSERVATION_MS`]; the first [`thresholds::LEAK_WARM_UP_FRACTION`] of the
//! span (the model load) is skipped, and the floor (lowest reading) of each of
//! [`thresholds::LEAK_FLOOR_WINDOWS`] windows of the rest must rise, so a start-up ramp or a
//! sawtooth of steps is not a leak.
//!
//! Snapshots are compared in time order (latest trace event, else the file's modification time),
//! and only neighbours that come from the same process, by [`same_process`]: a trace event (same
//! microsecond and address) recorded in both, or, when a trace cannot show it (one has no trace, or
//! the later one's ring buffer wrapped), a segment at the same address and size in both with the
//! same allocator settings. Anything else is not compared, and a low-severity note says why.

use super::finding::{Category, Evidence, EvidenceSource, Finding, Severity, Unit, Wizard};
use super::log::{LogAnalysis, StepSeries};
use super::recommend::{self, MIN_LEAK_GROWTH_BYTES};
use super::thresholds;
use std::sync::Arc;

use crate::analysis::timetravel::AllocatorState;
use crate::model::allocator::AllocatorSettings;
use crate::model::{Capture, format_bytes};

/// Minimum number of readings for a slope.
const MIN_POINTS: usize = 8;
/// Minimum goodness of fit of the line.
const MIN_R_SQUARED: f64 = 0.8;

/// A fitted line through (seconds, bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Trend {
    pub bytes_per_second: f64,
    pub r_squared: f64,
    /// Fitted rise over the whole span.
    pub growth_bytes: f64,
    pub span_seconds: f64,
}

/// Least-squares fit; `None` with fewer than two distinct times.
pub fn fit(points: &[(f64, f64)]) -> Option<Trend> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let syy: f64 = points.iter().map(|p| (p.1 - mean_y).powi(2)).sum();
    if sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let r_squared = if syy <= 0.0 {
        0.0
    } else {
        (sxy * sxy) / (sxx * syy)
    };
    let span = points.last()?.0 - points.first()?.0;
    Some(Trend {
        bytes_per_second: slope,
        r_squared,
        growth_bytes: slope * span,
        span_seconds: span,
    })
}

/// Whether a series of (t_ms, bytes) readings, oldest first, is a leak by the rules in the module
/// comment: long enough, judged after the start-up ramp, with a rising floor and a steady line.
/// The trend describes the judged span (after the ramp).
pub fn leak_trend(readings: &[(i64, u64)]) -> Option<Trend> {
    let first_ms = readings.first()?.0;
    let span_ms = readings.last()?.0.saturating_sub(first_ms);
    if span_ms < thresholds::LEAK_MIN_OBSERVATION_MS {
        return None;
    }
    let ramp_end_ms = first_ms + (span_ms as f64 * thresholds::LEAK_WARM_UP_FRACTION) as i64;
    let judged: Vec<(i64, u64)> = readings
        .iter()
        .copied()
        .filter(|r| r.0 >= ramp_end_ms)
        .collect();
    if !floor_rises(&judged) {
        return None;
    }
    let t0 = judged.first()?.0;
    let points: Vec<(f64, f64)> = judged
        .iter()
        .map(|&(t, b)| ((t - t0) as f64 / 1000.0, b as f64))
        .collect();
    growth_trend(&points)
}

/// Whether the lowest reading of every one of [`thresholds::LEAK_FLOOR_WINDOWS`] equal time
/// windows is higher than that of the window before (an empty window fails).
fn floor_rises(readings: &[(i64, u64)]) -> bool {
    let (Some(first), Some(last)) = (readings.first(), readings.last()) else {
        return false;
    };
    let windows = thresholds::LEAK_FLOOR_WINDOWS as i64;
    let width_ms = (last.0 - first.0) / windows;
    if width_ms <= 0 {
        return false;
    }
    let mut floors = [u64::MAX; thresholds::LEAK_FLOOR_WINDOWS];
    for &(t, bytes) in readings {
        let window = (((t - first.0) / width_ms).min(windows - 1)) as usize;
        if let Some(floor) = floors.get_mut(window) {
            *floor = (*floor).min(bytes);
        }
    }
    floors.iter().all(|&f| f != u64::MAX) && floors.windows(2).all(|w| w[1] > w[0])
}

/// The leak test on (x, bytes) points, x in seconds or steps; the slope is then per x.
fn growth_trend(points: &[(f64, f64)]) -> Option<Trend> {
    if points.len() < MIN_POINTS {
        return None;
    }
    let trend = fit(points)?;
    if trend.bytes_per_second <= 0.0
        || trend.r_squared < MIN_R_SQUARED
        || trend.growth_bytes < MIN_LEAK_GROWTH_BYTES as f64
    {
        return None;
    }
    let second_half = fit(&points[points.len() / 2..])?;
    if second_half.bytes_per_second < 0.5 * trend.bytes_per_second {
        return None;
    }
    let rises = points.windows(2).filter(|w| w[1].1 > w[0].1).count();
    if rises < 3 {
        return None;
    }
    Some(trend)
}

/// The size of the GPU a log's training ran on, when another input says it, with where it comes
/// from (a capture's device total; the log's own OOM message is looked at first).
#[derive(Clone, Debug)]
pub struct KnownCapacity {
    pub total_bytes: u64,
    pub source: EvidenceSource,
}

/// Leak findings from memory figures a log prints per step (`step 12 allocated 4.06 GiB`): one
/// finding per log, for the series that grew most, with the number of steps until the GPU is full
/// when its size is known (from the log's OOM message, else `capacity`).
pub fn log_findings(log: &LogAnalysis, capacity: Option<&KnownCapacity>, out: &mut Vec<Finding>) {
    let mut leaking: Vec<(&StepSeries, Trend)> = log
        .step_series
        .iter()
        .filter_map(|series| {
            let points: Vec<(f64, f64)> = series
                .points
                .iter()
                .map(|p| (p.step as f64, p.bytes as f64))
                .collect();
            growth_trend(&points).map(|t| (series, t))
        })
        .collect();
    // Live tensors ("allocated") say most about a leak; then the largest growth.
    leaking.sort_by(|a, b| {
        let live = |s: &StepSeries| s.label.contains("allocated");
        live(b.0)
            .cmp(&live(a.0))
            .then(b.1.growth_bytes.total_cmp(&a.1.growth_bytes))
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
    let per_step = trend.bytes_per_second.max(0.0) as u64;
    let mut evidence = vec![
        Evidence::number(
            format!("{} growth per step", series.label),
            trend.bytes_per_second,
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
        fit_evidence(trend.r_squared),
    ];
    for (other, t) in leaking.iter().skip(1) {
        evidence.push(Evidence::number(
            format!("{} growth per step", other.label),
            t.bytes_per_second,
            Unit::Bytes,
            format!("{}/step", format_bytes(t.bytes_per_second.max(0.0) as u64)),
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
            "The log prints {} memory at every step and it rises along a straight line (R² {:.2}) instead of levelling off after the first steps: each step keeps about {} alive. A training loop that frees its activations stays flat.{until_full}",
            series.label,
            trend.r_squared,
            format_bytes(per_step)
        ),
        recommendations: vec![recommend::find_leak(None), recommend::empty_cache()],
        wizard: Some(Wizard::Leak),
    });
}

fn duration_text(seconds: f64) -> String {
    if seconds < 120.0 {
        format!("{seconds:.0} s")
    } else if seconds < 7200.0 {
        format!("{:.0} min", seconds / 60.0)
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}

/// Leak findings from a capture's process tracks (or, for devices without visible processes, the
/// device's used memory).
pub fn capture_findings(name: &str, capture: &Capture, out: &mut Vec<Finding>) {
    for series in &capture.series {
        let d = series.device_index;
        let latest = series.iter().rev().find_map(|s| s.memory);
        let headroom = latest.map(|m| m.free_bytes);
        let tracks: Vec<_> = capture
            .processes
            .iter()
            .filter(|p| p.device_index == d)
            .collect();
        let mut candidates: Vec<(String, Vec<(i64, u64)>)> = tracks
            .iter()
            .map(|t| {
                let label = if t.name.is_empty() {
                    format!("process {}", t.pid)
                } else {
                    format!("process {} ({})", t.pid, t.name)
                };
                let readings = t
                    .t_ms
                    .iter()
                    .zip(&t.used_bytes)
                    .filter_map(|(&t, b)| b.map(|b| (t, b)))
                    .collect();
                (label, readings)
            })
            .collect();
        if tracks.is_empty() {
            let readings = series
                .iter()
                .filter_map(|s| s.memory.map(|m| (s.t_ms, m.used_bytes)))
                .collect();
            candidates.push(("used memory".to_owned(), readings));
        }
        for (label, readings) in candidates {
            let Some(trend) = leak_trend(&readings) else {
                continue;
            };
            let first_t = readings.first().map(|r| r.0);
            let last_t = readings.last().map(|r| r.0);
            let per_hour = trend.bytes_per_second * 3600.0;
            let source = |t| EvidenceSource::Capture {
                file: name.to_owned(),
                device_index: Some(d),
                t_ms: t,
            };
            let mut evidence = vec![
                Evidence::number(
                    "growth rate",
                    trend.bytes_per_second,
                    Unit::BytesPerSecond,
                    format!("{}/h", format_bytes(per_hour as u64)),
                    EvidenceSource::Derived,
                ),
                Evidence::bytes(
                    "growth over the capture",
                    trend.growth_bytes as u64,
                    source(first_t),
                ),
                Evidence::number(
                    "span judged, after the start-up ramp",
                    trend.span_seconds,
                    Unit::Seconds,
                    duration_text(trend.span_seconds),
                    source(last_t),
                ),
                fit_evidence(trend.r_squared),
            ];
            let exhaustion = headroom.map(|h| h as f64 / trend.bytes_per_second);
            if let (Some(h), Some(secs)) = (headroom, exhaustion) {
                evidence.push(Evidence::bytes("free at the end", h, source(last_t)));
                evidence.push(Evidence::number(
                    "time until the GPU is full",
                    secs,
                    Unit::Seconds,
                    duration_text(secs),
                    EvidenceSource::Derived,
                ));
            }
            out.push(Finding {
                category: Category::Leak,
                severity: if exhaustion.is_some_and(|s| s < 3600.0) { Severity::Critical } else { Severity::Warning },
                title: format!(
                    "{label} on {} grows steadily by {}/h{}",
                    capture.gpu_label(d),
                    format_bytes(per_hour as u64),
                    exhaustion.map(|s| format!("; the GPU is full in about {}", duration_text(s))).unwrap_or_default()
                ),
                evidence,
                explanation: format!(
                    "After the start-up ramp, memory rose by {} over {} along a straight line (R² {:.2}), its floor rose in every part of that span and it was still rising at the end, in {} separate steps: something keeps allocations alive from step to step. NVML shows the allocator's reserved memory, so take two snapshots to see which tensors grow.",
                    format_bytes(trend.growth_bytes as u64),
                    duration_text(trend.span_seconds),
                    trend.r_squared,
                    readings.windows(2).filter(|w| w[1].1 > w[0].1).count()
                ),
                recommendations: vec![recommend::find_leak(Some(per_hour as u64)), recommend::empty_cache()],
                wizard: Some(Wizard::Leak),
            });
        }
    }
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
    /// `(time µs, address)` of the device's trace events with a time, sorted: one event in two
    /// snapshots proves one process recorded both.
    pub trace_events: Vec<(i64, u64)>,
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
    let shared_events = count_shared(&a.trace_events, &b.trace_events);
    if shared_events > 0 {
        return Some(SameProcess::SharedTraceEvents(shared_events));
    }
    let trace_can_tell =
        !a.trace_events.is_empty() && !b.trace_events.is_empty() && !b.trace_wrapped;
    if trace_can_tell || a.settings != b.settings {
        return None;
    }
    let shared_segments = count_shared(&a.segments, &b.segments);
    (shared_segments > 0).then_some(SameProcess::SharedSegments(shared_segments))
}

/// Number of items in both sorted lists.
fn count_shared<T: Ord>(a: &[T], b: &[T]) -> usize {
    let (mut i, mut j, mut shared) = (0, 0, 0);
    while let (Some(x), Some(y)) = (a.get(i), b.get(j)) {
        match x.cmp(y) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
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

/// An out-of-memory event in a snapshot's trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotOom {
    /// The segment size the allocator asked cudaMalloc for ("Tried to allocate").
    pub requested_bytes: u64,
    /// `cudaMemGetInfo` free memory at the OOM.
    pub device_free_bytes: Option<u64>,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    /// Largest cached free block in the request's pool and stream.
    pub largest_usable_free_bytes: u64,
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
    use crate::model::{GIB, MIB};

    #[test]
    fn fits_a_line_exactly() {
        let t = fit(&[(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)]).unwrap_or_else(|| panic!("no fit"));
        assert!((t.bytes_per_second - 2.0).abs() < 1e-9);
        assert!((t.r_squared - 1.0).abs() < 1e-9);
        assert!(fit(&[(1.0, 1.0), (1.0, 2.0)]).is_none());
    }

    /// Readings every 10 s for `minutes`, of `bytes(t_s)`.
    fn readings(minutes: i64, bytes: impl Fn(i64) -> u64) -> Vec<(i64, u64)> {
        (0..=minutes * 6)
            .map(|i| (i * 10_000, bytes(i * 10)))
            .collect()
    }

    #[test]
    fn steady_growth_is_a_leak_but_warm_up_and_one_jump_are_not() {
        let steady = readings(20, |t| GIB + t as u64 * MIB);
        assert!(leak_trend(&steady).is_some());
        let warm_up = readings(20, |t| GIB + (t.min(300) as u64) * 50 * MIB);
        assert!(leak_trend(&warm_up).is_none(), "levels off after 5 min");
        let one_jump = readings(20, |t| if t < 600 { GIB } else { 5 * GIB });
        assert!(leak_trend(&one_jump).is_none());
        let small = readings(20, |t| GIB + t as u64 * 1024);
        assert!(leak_trend(&small).is_none(), "1.2 MiB is noise");
    }

    #[test]
    fn a_short_start_up_ramp_is_not_a_leak() {
        // 20 s of a model load at 2 GiB/s: steep and steady, but far too short to tell.
        let ramp: Vec<(i64, u64)> = (0..=20).map(|s| (s * 1000, s as u64 * 2 * GIB)).collect();
        assert!(leak_trend(&ramp).is_none());
        // Nine minutes of steady growth is still too short.
        assert!(leak_trend(&readings(9, |t| GIB + t as u64 * MIB)).is_none());
    }

    #[test]
    fn a_sawtooth_of_growing_teeth_on_a_flat_floor_is_not_a_leak() {
        // Steps every 60 s fall back to 10 GiB; the peaks grow (longer sequences), the floor not.
        let steps = readings(30, |t| {
            let in_step = (t % 60) as u64;
            10 * GIB + in_step * (t as u64 / 60 + 1) * 20 * MIB
        });
        assert!(leak_trend(&steps).is_none());
        // Small teeth on a floor that rises 50 MiB a step is a leak.
        let leaking = readings(30, |t| {
            let in_step = (t % 60) as u64;
            10 * GIB + (t as u64 / 60) * 50 * MIB + in_step * 2 * MIB
        });
        assert!(leak_trend(&leaking).is_some());
    }

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
            trace_events: events.to_vec(),
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
        traced_a.identity.trace_events = vec![(1, 0x100)];
        let mut traced_b = b.clone();
        traced_b.identity.trace_events = vec![(9, 0x100)];
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
