//! The leak rule: steady growth of a process's (or a device's) memory over a capture, with the
//! slope and the time until the GPU is full; and growth between allocator snapshots, by call site.
//!
//! Growth is judged with a least-squares line through the samples: a leak is a good fit
//! (R² ≥ 0.8), a total rise of at least [`MIN_LEAK_GROWTH_BYTES`], still rising in the second half
//! of the capture (so a warm-up that levels off is not a leak), and at least three separate rises
//! (so one big allocation is not a leak).

use super::finding::{Category, Evidence, EvidenceSource, Finding, Severity, Unit, Wizard};
use super::log::{LogAnalysis, StepSeries};
use super::recommend::{self, MIN_LEAK_GROWTH_BYTES};
use std::sync::Arc;

use crate::analysis::timetravel::AllocatorState;
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

/// Whether a series of (t_ms, bytes) readings is a leak by the rules in the module comment.
pub fn leak_trend(readings: &[(i64, u64)]) -> Option<Trend> {
    let t0 = readings.first()?.0;
    let points: Vec<(f64, f64)> = readings
        .iter()
        .map(|&(t, b)| ((t - t0) as f64 / 1000.0, b as f64))
        .collect();
    growth_trend(&points)
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

/// Leak findings from memory figures a log prints per step (`step 12 allocated 4.06 GiB`): one
/// finding per log, for the series that grew most.
pub fn log_findings(log: &LogAnalysis, out: &mut Vec<Finding>) {
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
    out.push(Finding {
        category: Category::Leak,
        severity: Severity::Warning,
        title: format!(
            "{} memory grows by {} per step ({} → {} over {} steps)",
            series.label,
            format_bytes(per_step),
            format_bytes(first.bytes),
            format_bytes(last.bytes),
            last.step.saturating_sub(first.step)
        ),
        evidence,
        explanation: format!(
            "The log prints {} memory at every step and it rises along a straight line (R² {:.2}) instead of levelling off after the first steps: each step keeps about {} alive. A training loop that frees its activations stays flat.",
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
        let latest = series.samples.iter().rev().find_map(|s| s.memory);
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
                .samples
                .iter()
                .filter_map(|s| s.memory.map(|m| (s.t_ms, m.used_bytes)))
                .collect();
            candidates.push((format!("GPU {d} used memory"), readings));
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
                    "capture span",
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
                    "{label} on GPU {d} grows steadily by {}/h{}",
                    format_bytes(per_hour as u64),
                    exhaustion.map(|s| format!("; the GPU is full in about {}", duration_text(s))).unwrap_or_default()
                ),
                evidence,
                explanation: format!(
                    "Memory rose by {} over {} along a straight line (R² {:.2}) and was still rising at the end, in {} separate steps: something keeps allocations alive from step to step. NVML shows the allocator's reserved memory, so take two snapshots to see which tensors grow.",
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

/// Leak findings from two or more snapshots of the same device, in the order given.
pub fn snapshot_findings(snapshots: &[SnapshotFacts], out: &mut Vec<Finding>) {
    let mut devices: Vec<u32> = snapshots.iter().map(|s| s.device_index).collect();
    devices.sort_unstable();
    devices.dedup();
    for d in devices {
        let series: Vec<&SnapshotFacts> =
            snapshots.iter().filter(|s| s.device_index == d).collect();
        let (Some(first), Some(last)) = (series.first(), series.last()) else {
            continue;
        };
        if series.len() < 2 {
            continue;
        }
        let growth = last.allocated_bytes.saturating_sub(first.allocated_bytes);
        let monotonic = series
            .windows(2)
            .all(|w| w[1].allocated_bytes >= w[0].allocated_bytes);
        if growth < MIN_LEAK_GROWTH_BYTES || !monotonic {
            continue;
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
        let top = sites
            .first()
            .map(|(s, _)| format!("; most at {s}"))
            .unwrap_or_default();
        out.push(Finding {
            category: Category::Leak,
            severity: Severity::Warning,
            title: format!("Allocated memory on GPU {d} grew by {} across {} snapshots{top}", format_bytes(growth), series.len()),
            evidence,
            explanation: "Live tensors grew between every pair of snapshots; the call sites that grew most are listed. Tensors kept in Python lists, accumulated losses with their graph, or caches that never evict are the usual causes.".into(),
            recommendations: vec![recommend::find_leak(None)],
            wizard: Some(Wizard::Leak),
        });
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

    #[test]
    fn steady_growth_is_a_leak_but_warm_up_and_one_jump_are_not() {
        let steady: Vec<(i64, u64)> = (0..20)
            .map(|i| (i * 1000, GIB + i as u64 * 100 * MIB))
            .collect();
        assert!(leak_trend(&steady).is_some());
        let warm_up: Vec<(i64, u64)> = (0..20)
            .map(|i| (i * 1000, GIB + (i.min(5) as u64) * 500 * MIB))
            .collect();
        assert!(leak_trend(&warm_up).is_none(), "levels off after 5 s");
        let one_jump: Vec<(i64, u64)> = (0..20)
            .map(|i| (i * 1000, if i < 10 { GIB } else { 5 * GIB }))
            .collect();
        assert!(leak_trend(&one_jump).is_none());
        let small: Vec<(i64, u64)> = (0..20).map(|i| (i * 1000, GIB + i as u64 * MIB)).collect();
        assert!(leak_trend(&small).is_none(), "20 MiB is noise");
    }
}
