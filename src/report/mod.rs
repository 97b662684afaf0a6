//! Report writers: Markdown, a self-contained HTML page (inline CSS, the timeline and the block
//! map of every snapshot's final allocator state as embedded PNGs, works offline) and JSON with a
//! versioned schema (`docs/report-schema.md`).
//!
//! All three render the same [`Report`]: the ordered findings of a diagnosis, what was looked at,
//! and optionally a memory timeline from a capture. Every string that came from a file or a log
//! (log lines, file names, process names) is escaped for the target format.

pub mod blockmap;
pub mod chart;
pub mod html;
pub mod json;
pub mod markdown;

use std::path::Path;

use crate::diagnose::Diagnosis;
use crate::model::{Capture, UnixMs};

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

/// Memory over time on one device, for the chart.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    /// Where it came from (file name and device), for the caption.
    pub caption: String,
    pub total_bytes: u64,
    pub series: Vec<TimelineSeries>,
}

/// One line of the chart.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimelineSeries {
    pub label: String,
    /// (time, bytes) in time order.
    pub points: Vec<(UnixMs, u64)>,
}

/// How many process lines a timeline shows at most (the largest by peak).
const MAX_PROCESS_SERIES: usize = 6;

impl Timeline {
    /// The device's used memory plus its largest processes, for the device with the highest peak.
    pub fn from_capture(name: &str, capture: &Capture) -> Option<Timeline> {
        let series = capture
            .series
            .iter()
            .filter(|s| s.peak_used().is_some())
            .max_by_key(|s| s.peak_used().map(|(_, used)| used))?;
        let device = series.device_index;
        let total_bytes = series
            .samples
            .iter()
            .rev()
            .find_map(|s| s.memory.map(|m| m.total_bytes))
            .unwrap_or(0);
        let mut lines = vec![TimelineSeries {
            label: format!("GPU {device} used"),
            points: series
                .samples
                .iter()
                .filter_map(|s| s.memory.map(|m| (s.t_ms, m.used_bytes)))
                .collect(),
        }];
        let mut tracks: Vec<_> = capture
            .processes
            .iter()
            .filter(|p| p.device_index == device)
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
        Some(Timeline {
            caption: format!(
                "{name}, GPU {device}{}",
                if capture.is_simulated() {
                    " (SIMULATED)"
                } else {
                    ""
                }
            ),
            total_bytes,
            series: lines,
        })
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
