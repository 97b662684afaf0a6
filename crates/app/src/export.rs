//! File › Export timeline…: the shown capture as a review image (1× or 2× pixel density), CSV
//! tables or a Chrome/Perfetto trace. The image is drawn from the data (`report::chart`), not cut
//! out of the window, so it has a title, the UTC range and readable axes and no widgets; it
//! shows the time range and threshold the timeline shows. Files are made and written off the UI
//! thread by [`super::jobs::Jobs`].

use std::path::PathBuf;

use vramscope_core::model::{Capture, UnixMs};
use vramscope_core::report::TimelineOptions;
use vramscope_core::report::export::{ExportKind, default_file_name};

/// What File › Export timeline… writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimelineExport {
    /// The review image at 100 % (Ctrl+E).
    Png,
    /// The review image at twice the pixel density.
    Png2x,
    /// CSV tables of GPU and process readings.
    Csv,
    /// A Chrome/Perfetto trace.
    Perfetto,
}

impl TimelineExport {
    /// Every export, in menu order.
    pub const ALL: [TimelineExport; 4] = [
        TimelineExport::Png,
        TimelineExport::Png2x,
        TimelineExport::Csv,
        TimelineExport::Perfetto,
    ];

    /// The file kind made.
    pub fn kind(self) -> ExportKind {
        match self {
            TimelineExport::Png => ExportKind::Png { scale: 1.0 },
            TimelineExport::Png2x => ExportKind::Png { scale: 2.0 },
            TimelineExport::Csv => ExportKind::Csv,
            TimelineExport::Perfetto => ExportKind::Perfetto,
        }
    }

    /// The File menu's words.
    pub fn menu_label(self) -> &'static str {
        match self {
            TimelineExport::Png => "Export timeline as PNG…",
            TimelineExport::Png2x => "Export timeline as PNG (2× pixels)…",
            TimelineExport::Csv => "Export timeline as CSV…",
            TimelineExport::Perfetto => "Export timeline as Perfetto trace…",
        }
    }

    /// The File menu's explanation.
    pub fn menu_hint(self) -> &'static str {
        match self {
            TimelineExport::Png => {
                "An image for a review or a bug report: title, UTC time range, labelled axes, \
                 legend and events, for the time range shown"
            }
            TimelineExport::Png2x => {
                "The same image at twice the pixels: sharp on high-density screens and when zoomed"
            }
            TimelineExport::Csv => {
                "GPU readings (one row per GPU per sample) and, beside them, process readings"
            }
            TimelineExport::Perfetto => {
                "Counter tracks per GPU and per process: open it in ui.perfetto.dev or \
                 chrome://tracing, next to a PyTorch profiler trace"
            }
        }
    }

    /// The save dialog's title and file type.
    pub fn dialog(self) -> (&'static str, &'static str, &'static [&'static str]) {
        match self {
            TimelineExport::Png | TimelineExport::Png2x => {
                ("Export the timeline as PNG", "PNG image", &["png"])
            }
            TimelineExport::Csv => ("Export the timeline as CSV", "CSV table", &["csv"]),
            TimelineExport::Perfetto => (
                "Export the timeline as a Perfetto trace",
                "Chrome/Perfetto trace",
                &["json"],
            ),
        }
    }

    /// The file name offered: the input's name with the export's ending.
    pub fn suggested_name(self, input_name: &str) -> String {
        default_file_name(input_name, self.kind())
    }
}

/// Everything a background job needs to make and write an export.
pub struct TimelineExportJob {
    pub capture: Capture,
    /// The capture's file or source name (titles the image, names the trace).
    pub input_name: String,
    pub export: TimelineExport,
    /// The threshold and time range the timeline shows.
    pub options: TimelineOptions,
    pub path: PathBuf,
    pub generated_at_ms: UnixMs,
}

/// Makes the export's files and writes them (each through a temporary file and a rename).
/// Returns the paths written; the error names the file.
#[cfg(feature = "native")]
pub fn write_timeline_export(job: &TimelineExportJob) -> Result<Vec<PathBuf>, String> {
    let files = vramscope_core::report::export::export_files(
        &job.capture,
        &job.input_name,
        job.export.kind(),
        &job.options,
        &job.path,
        job.generated_at_ms,
    )
    .map_err(|problem| format!("{}: {problem}", job.path.display()))?;
    let mut written = Vec::with_capacity(files.len());
    for (path, bytes) in files {
        vramscope_core::formats::write_atomically(&path, &bytes)
            .map_err(|err| format!("{}: cannot write the file: {err}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(all(test, feature = "native"))]
mod tests {
    use super::*;
    use vramscope_core::source::demo::{DemoConfig, generate_capture};

    fn job(dir: &std::path::Path, export: TimelineExport, name: &str) -> TimelineExportJob {
        TimelineExportJob {
            capture: generate_capture(&DemoConfig::default(), 1_796_000_400_000, 60_000, 1000),
            input_name: "demo-day.vramcap".into(),
            export,
            options: TimelineOptions::default(),
            path: dir.join(name),
            generated_at_ms: 0,
        }
    }

    #[test]
    fn each_export_writes_its_files() {
        let dir = tempfile::tempdir().expect("temp dir");
        let written =
            write_timeline_export(&job(dir.path(), TimelineExport::Csv, "d.csv")).expect("csv");
        assert_eq!(
            written,
            vec![dir.path().join("d.csv"), dir.path().join("d.processes.csv")]
        );
        let png =
            write_timeline_export(&job(dir.path(), TimelineExport::Png2x, "d.png")).expect("png");
        let image = image::open(&png[0]).expect("a PNG");
        assert_eq!(image.width(), 2400, "2× of 1200 points");
        assert_eq!(
            TimelineExport::Perfetto.suggested_name("runs/day1.vramcap"),
            "day1.trace.json"
        );
    }

    #[test]
    fn write_errors_name_the_file() {
        let dir = std::env::temp_dir().join("vramscope-no-such-dir-for-export");
        let err = write_timeline_export(&job(&dir, TimelineExport::Perfetto, "t.json"))
            .expect_err("no directory");
        assert!(
            err.contains("t.json") && err.contains("cannot write"),
            "{err}"
        );
    }
}
