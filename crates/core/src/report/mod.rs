//! Report writers: Markdown, a self-contained HTML page (inline CSS, the timeline and the block
//! map of every snapshot's final allocator state as embedded PNGs, works offline) and JSON with a
//! versioned schema (`docs/report-schema.md`).
//!
//! All three render the same [`Report`]: the ordered findings of a diagnosis, what was looked at,
//! and optionally a memory timeline from a capture. Every string that came from a file or a log
//! (log lines, file names, process names) is escaped for the target format.

pub mod alert_rules;
pub mod axis;
pub mod blockmap;
pub mod categories;
pub mod chart;
pub mod compare;
pub mod export;
pub mod figure;
pub mod html;
pub mod json;
pub mod markdown;
pub mod palette;
pub mod whatif;

use std::path::Path;

use crate::diagnose::Diagnosis;
use crate::model::{Capture, EventKind, UnixMs};

/// Everything a report shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Heading, e.g. "vramscope diagnosis".
    pub title: String,
    /// When the report was made (Unix ms, UTC).
    pub generated_at_ms: UnixMs,
    pub diagnosis: Diagnosis,
    /// Memory over time, when a capture or live recording was given.
    pub timeline: Option<Timeline>,
}

/// Memory over time on every GPU of a capture, one panel per GPU (small multiples on one shared
/// time axis), for the charts and the review image.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    /// Where it came from (the file name, and SIMULATED for the demo machine), for the caption.
    pub caption: String,
    /// The sampled machine's host name; empty when unknown.
    pub host: String,
    /// True when any of the data is simulated.
    pub simulated: bool,
    /// Sampling interval in milliseconds (0 when unknown).
    pub interval_ms: u32,
    /// The threshold drawn on every panel, as a fraction of the capacity.
    pub threshold_fraction: f64,
    /// The time range shown, when narrower than the data (a zoomed view); `None`: all of it.
    pub view_ms: Option<(UnixMs, UnixMs)>,
    /// One panel per GPU, in device order (at most [`MAX_TIMELINE_PANELS`]).
    pub panels: Vec<TimelinePanel>,
    /// GPUs left out beyond [`MAX_TIMELINE_PANELS`].
    pub panels_left_out: usize,
}

/// One GPU's memory over time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimelinePanel {
    pub device_index: u32,
    /// How the report names the GPU: [`Capture::gpu_label`], as findings and the fleet view do
    /// (`GPU 0`, or `node-a GPU 3` in a fleet).
    pub gpu_label: String,
    /// Marketing name, e.g. "NVIDIA H200"; empty when unknown.
    pub device_name: String,
    /// Device capacity (the last reading's total).
    pub total_bytes: u64,
    /// The GPU's used memory first, then its largest processes.
    pub series: Vec<TimelineSeries>,
    /// Out-of-memory, Xid and other hardware events and notes on this GPU (machine-wide notes
    /// too), and when used memory first crossed the threshold.
    pub markers: Vec<TimelineMarker>,
}

/// One line of the chart.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimelineSeries {
    pub label: String,
    /// (time, bytes) in time order.
    pub points: Vec<(UnixMs, u64)>,
}

/// A moment marked on a panel with a vertical line.
#[derive(Clone, Debug, PartialEq)]
pub struct TimelineMarker {
    pub t_ms: UnixMs,
    pub kind: MarkerKind,
    /// What happened, e.g. "Xid 79" or "out of memory (PID 4242)".
    pub label: String,
}

/// What a marker marks (each has its own colour in the chart and the legend).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerKind {
    OutOfMemory,
    Xid,
    /// Another hardware event: an NVML critical event, an ECC increase, a lost GPU.
    Hardware,
    /// A user's note.
    Note,
    /// Used memory first reached the threshold.
    NearFull,
}

/// Which part of a capture a [`Timeline`] shows.
#[derive(Clone, Debug, PartialEq)]
pub struct TimelineOptions {
    /// The threshold line, as a fraction of each GPU's capacity.
    pub threshold_fraction: f64,
    /// Only this time range (a zoomed view); `None`: everything.
    pub view_ms: Option<(UnixMs, UnixMs)>,
}

impl Default for TimelineOptions {
    fn default() -> Self {
        TimelineOptions {
            threshold_fraction: NEAR_FULL_FRACTION,
            view_ms: None,
        }
    }
}

/// The fraction of a GPU's memory above which the chart draws its threshold line and marks the
/// first crossing: past it a fragmented allocator starts failing large requests.
pub const NEAR_FULL_FRACTION: f64 = 0.9;

/// How many GPUs a timeline shows at most (an 8-GPU node fits; the image stays a sane size).
pub const MAX_TIMELINE_PANELS: usize = 8;

/// How many process lines a panel shows at most (the largest by peak).
const MAX_PROCESS_SERIES: usize = 6;

impl Timeline {
    /// Every GPU of the capture that has memory readings: its used memory, its largest
    /// processes, its events and its first crossing of the [`NEAR_FULL_FRACTION`] threshold.
    pub fn from_capture(name: &str, capture: &Capture) -> Option<Timeline> {
        Self::from_capture_with(name, capture, &TimelineOptions::default())
    }

    /// As [`Self::from_capture`], with the threshold and time range of `options` (the app's
    /// threshold setting and zoomed view).
    pub fn from_capture_with(
        name: &str,
        capture: &Capture,
        options: &TimelineOptions,
    ) -> Option<Timeline> {
        let mut devices: Vec<_> = capture
            .series
            .iter()
            .filter(|s| s.iter().any(|sample| sample.memory.is_some()))
            .collect();
        devices.sort_by_key(|s| s.device_index);
        if devices.is_empty() {
            return None;
        }
        let panels_left_out = devices.len().saturating_sub(MAX_TIMELINE_PANELS);
        let panels = devices
            .into_iter()
            .take(MAX_TIMELINE_PANELS)
            .map(|series| panel(capture, series, options))
            .collect();
        Some(Timeline {
            caption: format!(
                "{name}{}",
                if capture.is_simulated() {
                    " (SIMULATED)"
                } else {
                    ""
                }
            ),
            host: capture.meta.host.clone(),
            simulated: capture.is_simulated(),
            interval_ms: capture.meta.interval_ms,
            threshold_fraction: options.threshold_fraction,
            view_ms: options.view_ms.filter(|(start, end)| start < end),
            panels,
            panels_left_out,
        })
    }

    /// The time axis: the view's range when one was chosen, else the first and last time of any
    /// point of any panel.
    pub fn time_range(&self) -> Option<(UnixMs, UnixMs)> {
        if self.view_ms.is_some() {
            return self.view_ms;
        }
        self.panels
            .iter()
            .flat_map(|p| p.series.iter())
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .fold(None, |range, t| match range {
                None => Some((t, t)),
                Some((lo, hi)) => Some((t.min(lo), t.max(hi))),
            })
    }
}

impl TimelinePanel {
    /// The highest used memory of the GPU.
    pub fn peak_bytes(&self) -> u64 {
        self.series
            .first()
            .and_then(|s| s.points.iter().map(|p| p.1).max())
            .unwrap_or(0)
    }

    /// The highest used memory of the GPU within `[start, end]`.
    pub fn peak_bytes_in(&self, (start, end): (UnixMs, UnixMs)) -> u64 {
        self.series
            .first()
            .and_then(|s| {
                s.points
                    .iter()
                    .filter(|p| p.0 >= start && p.0 <= end)
                    .map(|p| p.1)
                    .max()
            })
            .unwrap_or(0)
    }
}

/// The marker of an event.
fn marker_of(event: &crate::model::Event) -> TimelineMarker {
    let (kind, label) = match &event.kind {
        EventKind::OutOfMemory { pid, .. } => (
            MarkerKind::OutOfMemory,
            match pid {
                Some(pid) => format!("out of memory (PID {pid})"),
                None => "out of memory".to_owned(),
            },
        ),
        EventKind::Xid { code, .. } => (MarkerKind::Xid, format!("Xid {code}")),
        EventKind::Annotation { text } => (MarkerKind::Note, text.clone()),
        other => (MarkerKind::Hardware, other.short_label()),
    };
    TimelineMarker {
        t_ms: event.t_ms,
        kind,
        label,
    }
}

fn panel(
    capture: &Capture,
    series: &crate::model::DeviceSeries,
    options: &TimelineOptions,
) -> TimelinePanel {
    let device = series.device_index;
    let total_bytes = series
        .iter()
        .rev()
        .find_map(|s| s.memory.map(|m| m.total_bytes))
        .unwrap_or(0);
    let used: Vec<(UnixMs, u64)> = series
        .iter()
        .filter_map(|s| s.memory.map(|m| (s.t_ms, m.used_bytes)))
        .collect();
    let in_view = |t: UnixMs| {
        options
            .view_ms
            .is_none_or(|(start, end)| t >= start && t <= end)
    };
    let mut markers: Vec<TimelineMarker> = capture
        .events
        .iter()
        .filter(|e| e.device_index.is_none_or(|d| d == device))
        // Machine-wide events are notes only (driver-wide errors have no place on one GPU).
        .filter(|e| e.device_index.is_some() || matches!(e.kind, EventKind::Annotation { .. }))
        .filter(|e| in_view(e.t_ms))
        .map(marker_of)
        .collect();
    let threshold_bytes = (total_bytes as f64 * options.threshold_fraction) as u64;
    if total_bytes > 0
        && let Some(&(t_ms, _)) = used
            .iter()
            .find(|(t, bytes)| *bytes >= threshold_bytes && in_view(*t))
    {
        markers.push(TimelineMarker {
            t_ms,
            kind: MarkerKind::NearFull,
            label: format!(
                "used memory first reached {:.0}% of {}",
                options.threshold_fraction * 100.0,
                crate::model::format_bytes(total_bytes)
            ),
        });
    }
    markers.sort_by_key(|m| m.t_ms);
    let gpu_label = capture.gpu_label(device);
    let mut lines = vec![TimelineSeries {
        label: format!("{gpu_label} used"),
        points: used,
    }];
    let mut tracks: Vec<_> = capture
        .processes
        .iter()
        .filter(|p| p.device_index == device)
        .filter(|p| {
            options.view_ms.is_none_or(|(start, end)| {
                p.first_seen_ms().is_some_and(|first| first <= end)
                    && p.last_seen_ms().is_some_and(|last| last >= start)
            })
        })
        .collect();
    tracks.sort_by_key(|p| std::cmp::Reverse(p.peak_used_bytes()));
    for track in tracks.into_iter().take(MAX_PROCESS_SERIES) {
        lines.push(TimelineSeries {
            label: if track.name.is_empty() {
                format!("PID {}", track.pid)
            } else {
                format!("PID {} {}", track.pid, track.name)
            },
            points: track
                .t_ms
                .iter()
                .zip(&track.used_bytes)
                .filter_map(|(&t, b)| b.map(|b| (t, b)))
                .collect(),
        });
    }
    TimelinePanel {
        device_index: device,
        gpu_label,
        device_name: capture
            .devices
            .iter()
            .find(|d| d.index == device)
            .map(|d| d.name.clone())
            .unwrap_or_default(),
        total_bytes,
        series: lines,
        markers,
    }
}

/// Output formats, chosen by the file extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportFormat {
    Markdown,
    Html,
    Json,
}

impl ReportFormat {
    /// `.md`/`.markdown`, `.html`/`.htm` or `.json`; `None` for anything else.
    pub fn from_path(path: &Path) -> Option<Self> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "md" | "markdown" => Some(ReportFormat::Markdown),
            "html" | "htm" => Some(ReportFormat::Html),
            "json" => Some(ReportFormat::Json),
            _ => None,
        }
    }
}

/// Errors from writing a report.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot tell the report format of {file}: use a name ending in .html, .md or .json")]
    UnknownFormat { file: String },
    #[error("cannot write report {file}: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
}

/// Renders the report in the given format.
pub fn render(report: &Report, format: ReportFormat) -> String {
    match format {
        ReportFormat::Markdown => markdown::render(report),
        ReportFormat::Html => html::render(report),
        ReportFormat::Json => json::render(report),
    }
}

/// Writes the report to `path` in the format its extension names (via a temporary file and a
/// rename, so a failed write never leaves half a report).
pub fn write(report: &Report, path: &Path) -> Result<(), ReportError> {
    let file = path.display().to_string();
    let format = ReportFormat::from_path(path)
        .ok_or_else(|| ReportError::UnknownFormat { file: file.clone() })?;
    let text = render(report, format);
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension()
            .and_then(|e| e.to_str())
            .unwrap_or("report")
    ));
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|source| {
            let _ = std::fs::remove_file(&tmp);
            ReportError::Io { file, source }
        })
}

/// Formats Unix milliseconds as an ISO-8601 UTC timestamp (`2026-11-30T08:30:00Z`).
pub fn iso8601_utc(t_ms: UnixMs) -> String {
    crate::diagnose::finding::format_utc_ms(t_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_timestamps() {
        assert_eq!(iso8601_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601_utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(iso8601_utc(1_795_941_000_123), "2026-11-29T08:30:00Z");
    }

    #[test]
    fn format_follows_the_extension() {
        assert_eq!(
            ReportFormat::from_path(Path::new("a/r.HTML")),
            Some(ReportFormat::Html)
        );
        assert_eq!(
            ReportFormat::from_path(Path::new("r.md")),
            Some(ReportFormat::Markdown)
        );
        assert_eq!(
            ReportFormat::from_path(Path::new("r.json")),
            Some(ReportFormat::Json)
        );
        assert_eq!(ReportFormat::from_path(Path::new("r.pdf")), None);
    }
}
