//! UI tests of File › Export timeline as … and File › Export report… (egui_kittest): the PNG is a
//! review image drawn from the data (1200 points wide, twice that at 2×, not a crop of the
//! window), the CSV and Perfetto exports write their files, names come from the input; the report
//! from the main view names the fragmentation case's cause in JSON and embeds a PNG in HTML; the
//! items are disabled, and their shortcuts ask nothing, while there is nothing to export.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use egui::{Key, Modifiers};
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT, Queryable};

use crate::support::cli::case;
use crate::support::ui::{app_harness, notice_texts, step_until};
use vramscope_app::VramscopeApp;
use vramscope_app::dialogs::FileDialogs;
use vramscope_app::export::TimelineExport;
use vramscope_app::notices::NoticeLevel;
use vramscope_core::model::Capture;
use vramscope_core::source::demo::{DemoConfig, generate_capture};

/// 2026-11-30 00:00:00 UTC: a fixed start, as in the other UI tests.
const START_MS: i64 = 1_796_000_400_000;

const CTRL_SHIFT: Modifiers = Modifiers {
    shift: true,
    ..Modifiers::COMMAND
};

fn demo_capture() -> Capture {
    generate_capture(&DemoConfig::default(), START_MS, 15 * 60 * 1000, 1000)
}

/// Dialogs that answer export paths from a script and record what was asked.
#[derive(Clone, Default)]
struct ScriptedDialogs {
    export_answers: Arc<Mutex<Vec<PathBuf>>>,
    report_answers: Arc<Mutex<Vec<PathBuf>>>,
    asked: Arc<Mutex<Vec<String>>>,
}

impl FileDialogs for ScriptedDialogs {
    fn pick_file_to_open(&mut self) -> Option<PathBuf> {
        None
    }
    fn pick_save_path(&mut self, _suggested_name: &str) -> Option<PathBuf> {
        None
    }
    fn pick_export_path(
        &mut self,
        export: TimelineExport,
        suggested_name: &str,
    ) -> Option<PathBuf> {
        self.asked
            .lock()
            .ok()?
            .push(format!("{export:?} {suggested_name}"));
        self.export_answers.lock().ok()?.pop()
    }
    fn pick_report_path(&mut self, suggested_name: &str) -> Option<PathBuf> {
        self.asked
            .lock()
            .ok()?
            .push(format!("report {suggested_name}"));
        self.report_answers.lock().ok()?.pop()
    }
}

fn asked(dialogs: &ScriptedDialogs) -> Vec<String> {
    dialogs.asked.lock().map(|a| a.clone()).unwrap_or_default()
}

/// A 1000×700 harness opening `files`, showing `capture` if given.
fn harness(
    dialogs: &ScriptedDialogs,
    files: Vec<PathBuf>,
    capture: Option<Capture>,
) -> Harness<'static, VramscopeApp> {
    app_harness(Box::new(dialogs.clone()), files, capture, 0.25)
}

fn exports_done(app: &VramscopeApp) -> bool {
    app.jobs_running() == 0
}

fn menu_item_disabled(harness: &Harness<'static, VramscopeApp>, label: &str) -> bool {
    harness
        .get_by_label_contains(label)
        .accesskit_node()
        .is_disabled()
}

fn decode_png(path: &Path) -> image::RgbaImage {
    let bytes = std::fs::read(path).expect("the PNG was written");
    image::load_from_memory_with_format(&bytes, image::ImageFormat::Png)
        .expect("a valid PNG")
        .to_rgba8()
}

#[test]
fn timeline_png_is_a_review_image_not_a_crop_of_the_window() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("review.png");
    let dialogs = ScriptedDialogs::default();
    dialogs
        .export_answers
        .lock()
        .expect("lock")
        .push(path.clone());
    let mut harness = harness(&dialogs, Vec::new(), Some(demo_capture()));
    harness.run_steps(4);

    harness.key_press_modifiers(Modifiers::COMMAND, Key::E);
    step_until(&mut harness, "the PNG export", exports_done);

    assert_eq!(asked(&dialogs), ["Png demo-day.timeline.png"]);
    assert!(
        notice_texts(&harness, NoticeLevel::Error).is_empty(),
        "{:?}",
        notice_texts(&harness, NoticeLevel::Error)
    );
    let info = notice_texts(&harness, NoticeLevel::Info);
    assert!(
        info.iter()
            .any(|n| n.contains("Exported") && n.contains("review.png")),
        "{info:?}"
    );
    let image = decode_png(&path);
    let (width, height) = image.dimensions();
    // Drawn for a review at its own size, whatever the window's (1000×700 here).
    assert_eq!(width, 1200, "{width}×{height}");
    assert!(
        height > 700,
        "one chart per GPU of the demo machine: {height}"
    );
    let first = image.get_pixel(0, 0);
    let differing = image.pixels().filter(|p| *p != first).count();
    assert!(
        differing > (width * height / 20) as usize,
        "the image is (nearly) one flat colour: {differing} differing pixels"
    );

    // The 2× entry of the File menu: the same image at twice the pixels.
    let path_2x = dir.path().join("review@2x.png");
    dialogs
        .export_answers
        .lock()
        .expect("lock")
        .push(path_2x.clone());
    harness.get_by_label("File").click();
    harness.run_steps(2);
    harness
        .get_by_label_contains("Export timeline as PNG (2× pixels)…")
        .click();
    step_until(&mut harness, "the 2× PNG export", exports_done);
    assert_eq!(asked(&dialogs)[1], "Png2x demo-day.timeline@2x.png");
    assert_eq!(decode_png(&path_2x).dimensions(), (2 * width, 2 * height));
}

#[test]
fn csv_and_perfetto_exports_write_their_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let csv = dir.path().join("day.csv");
    let trace = dir.path().join("day.json");
    let dialogs = ScriptedDialogs::default();
    // Popped: CSV first, then the trace.
    dialogs
        .export_answers
        .lock()
        .expect("lock")
        .extend([trace.clone(), csv.clone()]);
    let mut harness = harness(&dialogs, Vec::new(), Some(demo_capture()));
    harness.run_steps(4);
    let mut confirmations = Vec::new();
    for label in [
        "Export timeline as CSV…",
        "Export timeline as Perfetto trace…",
    ] {
        harness.get_by_label("File").click();
        harness.run_steps(2);
        harness.get_by_label_contains(label).click();
        step_until(&mut harness, label, exports_done);
        confirmations.extend(notice_texts(&harness, NoticeLevel::Info));
    }
    assert_eq!(
        asked(&dialogs),
        ["Csv demo-day.timeline.csv", "Perfetto demo-day.trace.json"]
    );
    let gpus = std::fs::read_to_string(&csv).expect("the GPU table");
    assert!(
        gpus.starts_with("timestamp_utc,unix_ms,gpu,used_bytes"),
        "{}",
        &gpus[..80]
    );
    let processes =
        std::fs::read_to_string(dir.path().join("day.processes.csv")).expect("the process table");
    assert!(processes.starts_with("timestamp_utc,unix_ms,gpu,pid,process_name,used_bytes"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).expect("the trace")).expect("JSON");
    assert!(
        json["traceEvents"]
            .as_array()
            .is_some_and(|e| !e.is_empty())
    );
    assert!(
        confirmations
            .iter()
            .any(|n| n.contains("day.csv and ") && n.contains("day.processes.csv")),
        "both CSV files are named: {confirmations:?}"
    );
}

#[test]
fn report_from_the_main_view_in_json_and_html() {
    let dir = tempfile::tempdir().expect("temp dir");
    let json_path = dir.path().join("report.json");
    let html_path = dir.path().join("report.html");
    let dialogs = ScriptedDialogs::default();
    // Answers are popped: JSON first (shortcut), then HTML (menu).
    dialogs
        .report_answers
        .lock()
        .expect("lock")
        .extend([html_path.clone(), json_path.clone()]);
    let mut harness = harness(
        &dialogs,
        vec![case("fragmentation.log"), case("fragmentation.pickle")],
        None,
    );
    step_until(&mut harness, "the files to open", |app| {
        app.jobs_running() == 0 && app.wizard().diagnosis().inputs.len() >= 2
    });
    // Only snapshots and logs: no timeline to export, but a report.
    assert!(!harness.state().can_export_timeline());

    harness.key_press_modifiers(CTRL_SHIFT, Key::E);
    step_until(&mut harness, "the JSON report", exports_done);
    harness.get_by_label("File").click();
    harness.run_steps(2);
    harness.get_by_label_contains("Export report").click();
    step_until(&mut harness, "the HTML report", exports_done);

    assert_eq!(
        asked(&dialogs),
        [
            "report fragmentation.report.html",
            "report fragmentation.report.html"
        ]
    );
    assert!(
        notice_texts(&harness, NoticeLevel::Error).is_empty(),
        "{:?}",
        notice_texts(&harness, NoticeLevel::Error)
    );
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&json_path).expect("the JSON report was written"),
    )
    .expect("valid JSON");
    assert_eq!(json["schema"], "vramscope.report/1");
    assert_eq!(json["findings"][0]["category"], "fragmentation", "{json:#}");
    let inputs = json["inputs"].as_array().expect("inputs");
    assert!(inputs.iter().any(|i| i["name"] == "fragmentation.log"));
    assert!(inputs.iter().any(|i| i["name"] == "fragmentation.pickle"));

    let html = std::fs::read_to_string(&html_path).expect("the HTML report was written");
    assert!(html.contains("<title>vramscope diagnosis"), "no title");
    assert!(
        html.contains("src=\"data:image/png;base64,"),
        "no embedded PNG"
    );
    // The newest confirmation replaces the one before it.
    let info = notice_texts(&harness, NoticeLevel::Info);
    assert_eq!(info.len(), 1, "{info:?}");
    assert!(
        info[0].starts_with("Exported ") && info[0].contains("report."),
        "{info:?}"
    );
}

#[test]
fn nothing_to_export_disables_both_items_and_their_shortcuts() {
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(&dialogs, Vec::new(), None);
    harness.run_steps(2);
    harness.key_press_modifiers(Modifiers::COMMAND, Key::E);
    harness.key_press_modifiers(CTRL_SHIFT, Key::E);
    harness.run_steps(2);
    assert!(asked(&dialogs).is_empty(), "{:?}", asked(&dialogs));

    harness.get_by_label("File").click();
    harness.run_steps(2);
    for export in TimelineExport::ALL {
        assert!(menu_item_disabled(&harness, export.menu_label()));
    }
    assert!(menu_item_disabled(&harness, "Export report"));
    harness.key_press(Key::Escape);
    harness.run_steps(2);

    // A capture on the Timeline enables the PNG export.
    harness
        .state_mut()
        .show_capture("demo-day.vramcap", demo_capture());
    harness.run_steps(2);
    harness.get_by_label("File").click();
    harness.run_steps(2);
    assert!(!menu_item_disabled(&harness, "Export timeline as PNG…"));
    harness
        .get_by_label_contains("Export timeline as PNG…")
        .click();
    harness.run_steps(2);
    assert_eq!(asked(&dialogs), ["Png demo-day.timeline.png"]);
}
