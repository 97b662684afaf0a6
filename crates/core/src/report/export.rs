//! Timeline exports as files: CSV tables, a Chrome/Perfetto trace and the review image. The
//! command line (`vramscope export`) and the app's File menu both make their files here, so both
//! name them the same way and write the same bytes.

use std::path::{Path, PathBuf};

use super::chart::{ReviewImageOptions, render_review_png};
use super::{Timeline, TimelineOptions};
use crate::formats::{perfetto, timeline_csv};
use crate::model::Capture;

/// What to export.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ExportKind {
    /// Two CSV tables: GPU readings, and (beside it) process readings.
    Csv,
    /// A Chrome/Perfetto trace (JSON Trace Event Format).
    Perfetto,
    /// The review image at a pixel density (1 or 2).
    Png { scale: f32 },
}

impl ExportKind {
    /// What the export is, for menus and messages.
    pub fn describe(self) -> &'static str {
        match self {
            ExportKind::Csv => "CSV tables",
            ExportKind::Perfetto => "Perfetto trace",
            ExportKind::Png { .. } => "PNG image",
        }
    }

    /// The file name ending of this export (`timeline.csv`, `trace.json`, `timeline@2x.png`).
    fn suffix(self) -> &'static str {
        match self {
            ExportKind::Csv => "timeline.csv",
            ExportKind::Perfetto => "trace.json",
            ExportKind::Png { scale } if scale > 1.5 => "timeline@2x.png",
            ExportKind::Png { .. } => "timeline.png",
        }
    }
}

/// The stem of an input's file name: `runs/day1.vramcap` → `day1`; for joined inputs
/// (`gpu.csv + apps.csv`) the first; `vramscope` when there is no name (the live source).
pub fn input_stem(input_name: &str) -> String {
    let first = input_name.split(" + ").next().unwrap_or(input_name);
    let first = first.strip_suffix(" (SIMULATED)").unwrap_or(first).trim();
    Path::new(first)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "vramscope".to_owned())
}

/// The default file name of an export of `input_name`: `day1.timeline.png`, `day1.trace.json`.
pub fn default_file_name(input_name: &str, kind: ExportKind) -> String {
    format!("{}.{}", input_stem(input_name), kind.suffix())
}

/// Where the process table of a CSV export at `out` goes: `x.csv` → `x.processes.csv`.
pub fn processes_csv_path(out: &Path) -> PathBuf {
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    out.with_file_name(format!("{stem}.processes.csv"))
}

/// Every file an export writes, with its bytes. A CSV export of a capture without processes
/// writes only the GPU table; one without GPU readings (an nvidia-smi process log) only the
/// process table.
pub fn export_files(
    capture: &Capture,
    input_name: &str,
    kind: ExportKind,
    timeline_options: &TimelineOptions,
    out: &Path,
    generated_at_ms: crate::model::UnixMs,
) -> Result<Vec<(PathBuf, Vec<u8>)>, String> {
    match kind {
        ExportKind::Csv => {
            let mut files = Vec::new();
            if capture.sample_count() > 0 || capture.processes.is_empty() {
                files.push((
                    out.to_path_buf(),
                    timeline_csv::gpu_table(capture).into_bytes(),
                ));
            }
            if !capture.processes.is_empty() {
                let path = if files.is_empty() {
                    out.to_path_buf()
                } else {
                    processes_csv_path(out)
                };
                files.push((path, timeline_csv::process_table(capture).into_bytes()));
            }
            Ok(files)
        }
        ExportKind::Perfetto => Ok(vec![(
            out.to_path_buf(),
            perfetto::trace_json(capture, input_name).into_bytes(),
        )]),
        ExportKind::Png { scale } => {
            let timeline = Timeline::from_capture_with(input_name, capture, timeline_options)
                .ok_or_else(|| {
                    "the capture has no GPU memory readings to draw (an nvidia-smi process log \
                     alone has none: give the --query-gpu log of the same run too, or export \
                     --csv or --perfetto)"
                        .to_owned()
                })?;
            let png = render_review_png(
                &timeline,
                &ReviewImageOptions {
                    scale,
                    generated_at_ms,
                    ..Default::default()
                },
            )
            .map_err(|e| e.to_string())?;
            Ok(vec![(out.to_path_buf(), png)])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_input() {
        assert_eq!(
            default_file_name("runs/day1.vramcap", ExportKind::Png { scale: 2.0 }),
            "day1.timeline@2x.png"
        );
        assert_eq!(
            default_file_name("gpu.csv + apps.csv", ExportKind::Perfetto),
            "gpu.trace.json"
        );
        assert_eq!(
            default_file_name("demo (SIMULATED)", ExportKind::Csv),
            "demo.timeline.csv"
        );
        assert_eq!(
            default_file_name("", ExportKind::Csv),
            "vramscope.timeline.csv"
        );
        assert_eq!(
            processes_csv_path(Path::new("out/day1.timeline.csv")),
            Path::new("out/day1.timeline.processes.csv")
        );
        assert_eq!(
            processes_csv_path(Path::new("x.csv")),
            Path::new("x.processes.csv")
        );
    }
}
