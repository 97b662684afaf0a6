//! UI tests of the wiring between the app and its views (egui_kittest): PyTorch snapshots opened
//! from the command line and by drop (routed by content) land in the Allocator tab; a slow
//! snapshot read can be cancelled; a watched folder picks up a snapshot written later; the
//! Diagnose tab walks from the fragmentation case's log and snapshot to a report naming
//! fragmentation; the Hardware checks tab (and the wizard's GPU checks) report the missing driver
//! on a machine without one; Ctrl+1..4 switch views.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use egui::{Key, Modifiers, Vec2};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

use crate::support::cli::case;
use crate::support::ui::{DroppedBytes, notice_texts, slow_snapshot_bytes, step_until};
use vramscope_app::dialogs::FileDialogs;
use vramscope_app::notices::NoticeLevel;
use vramscope_app::views::View;
use vramscope_app::wizard::Step;
use vramscope_app::{AppOptions, VramscopeApp};
use vramscope_core::diagnose::finding::Category;
use vramscope_core::report::{self, ReportFormat};

/// Dialogs that answer from a script.
#[derive(Clone, Default)]
struct ScriptedDialogs {
    open_answers: Arc<Mutex<Vec<PathBuf>>>,
    folder_answers: Arc<Mutex<Vec<PathBuf>>>,
}

impl FileDialogs for ScriptedDialogs {
    fn pick_file_to_open(&mut self) -> Option<PathBuf> {
        self.open_answers.lock().ok()?.pop()
    }
    fn pick_save_path(&mut self, _suggested_name: &str) -> Option<PathBuf> {
        None
    }
    fn pick_folder(&mut self) -> Option<PathBuf> {
        self.folder_answers.lock().ok()?.pop()
    }
}

/// A 1200×800 harness with the app opening `files` as if given on the command line.
fn harness(dialogs: &ScriptedDialogs, files: Vec<PathBuf>) -> Harness<'static, VramscopeApp> {
    let options = AppOptions {
        files,
        live: None,
        dialogs: Box::new(dialogs.clone()),
        recordings_dir: None,
    };
    Harness::builder()
        .with_size(Vec2::new(1200.0, 800.0))
        .with_step_dt(0.25)
        .wgpu()
        .build_eframe(move |cc| VramscopeApp::new(cc, options))
}

/// Waits for every read and for the allocator views' analyses.
fn wait_until_idle(harness: &mut Harness<'static, VramscopeApp>) {
    step_until(harness, "background jobs", |app| {
        // An allocator view's analysis is collected while it is shown.
        app.jobs_running() == 0
            && (app.view() != View::Allocator
                || app.active_allocator_view().is_none_or(|v| v.is_ready()))
    });
}

#[test]
fn snapshot_on_the_command_line_opens_in_the_allocator_tab() {
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(&dialogs, vec![case("fragmentation.pickle")]);
    wait_until_idle(&mut harness);
    let app = harness.state();
    assert_eq!(app.view(), View::Allocator);
    assert_eq!(app.allocator_views().len(), 1);
    let view = app.active_allocator_view().expect("an allocator view");
    assert_eq!(view.name(), "fragmentation.pickle");
    assert!(view.snapshot().event_count() > 0);
    assert!(
        app.wizard()
            .diagnosis()
            .inputs
            .iter()
            .any(|i| i.kind == "snapshot" && i.name == "fragmentation.pickle"),
        "{:?}",
        app.wizard().diagnosis().inputs
    );
    assert!(notice_texts(&harness, NoticeLevel::Error).is_empty());
    assert!(harness.query_by_label("fragmentation.pickle").is_some());
    assert!(view.block_map_rect().is_some(), "the block map is drawn");
}

#[test]
fn dropped_snapshot_bytes_are_routed_by_content() {
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(&dialogs, Vec::new());
    harness.run_steps(1);
    let bytes = std::fs::read(case("fragmentation.pickle")).expect("fixture");
    // No snapshot extension: the content says what it is.
    harness
        .input_mut()
        .dropped_files
        .push(Arc::new(DroppedBytes {
            path: PathBuf::from("/nonexistent-dir/oom-dump.bin"),
            bytes,
        }));
    wait_until_idle(&mut harness);
    let app = harness.state();
    assert_eq!(app.view(), View::Allocator);
    assert_eq!(
        app.active_allocator_view().map(|v| v.name()),
        Some("oom-dump.bin")
    );
    assert!(app.sessions().is_empty(), "not taken for a capture");
}

#[test]
fn a_slow_snapshot_read_can_be_cancelled() {
    let dir = tempfile::tempdir().expect("temp dir");
    let slow = dir.path().join("slow.pickle");
    std::fs::write(&slow, slow_snapshot_bytes(48 << 20)).expect("written");
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(&dialogs, vec![slow]);
    harness.run_steps(2);
    assert_eq!(
        harness.state().reads().len(),
        1,
        "the read is in progress: {:?}",
        harness.state().notices.items()
    );
    assert!(
        harness
            .query_by_label_contains("Opening slow.pickle")
            .is_some()
    );
    harness.get_by_label("Cancel").click();
    harness.run_steps(1);
    assert!(harness.state().reads()[0].is_cancelled());
    wait_until_idle(&mut harness);
    assert!(harness.state().allocator_views().is_empty());
    assert!(harness.state().reads().is_empty());
    let infos = notice_texts(&harness, NoticeLevel::Info);
    assert!(
        infos
            .iter()
            .any(|n| n.contains("Cancelled opening slow.pickle")),
        "{infos:?}"
    );
    assert!(notice_texts(&harness, NoticeLevel::Error).is_empty());
}

#[test]
fn a_padded_snapshot_reads_whole_when_not_cancelled() {
    // The same kind of file as the cancel test, read to the end: the padding is valid.
    let dir = tempfile::tempdir().expect("temp dir");
    let padded = dir.path().join("padded.pickle");
    std::fs::write(&padded, slow_snapshot_bytes(1 << 20)).expect("written");
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(&dialogs, vec![padded]);
    wait_until_idle(&mut harness);
    assert!(notice_texts(&harness, NoticeLevel::Error).is_empty());
    assert_eq!(harness.state().allocator_views().len(), 1);
}

#[test]
fn watched_folder_picks_up_a_snapshot_written_later() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dialogs = ScriptedDialogs::default();
    dialogs
        .folder_answers
        .lock()
        .expect("lock")
        .push(dir.path().to_owned());
    let mut harness = harness(&dialogs, Vec::new());
    harness.run_steps(1);
    harness.get_by_label("File").click();
    harness.run_steps(2);
    harness.get_by_label("Watch folder…").click();
    harness.run_steps(2);
    assert_eq!(harness.state().watched_folder(), Some(dir.path()));
    assert!(
        harness
            .query_by_label_contains("for new snapshots")
            .is_some(),
        "the status line says which folder is watched"
    );
    // Written as the capture helper does: a temporary name, then a rename.
    let bytes = std::fs::read(case("fragmentation.pickle")).expect("fixture");
    let temp = dir.path().join(".step-12.tmp");
    std::fs::write(&temp, bytes).expect("written");
    std::fs::rename(&temp, dir.path().join("step-12.pickle")).expect("renamed");
    step_until(&mut harness, "the new snapshot", |app| {
        app.allocator_views().len() == 1 && app.jobs_running() == 0
    });
    let app = harness.state();
    assert_eq!(app.view(), View::Allocator);
    assert_eq!(
        app.active_allocator_view().map(|v| v.name()),
        Some("step-12.pickle")
    );
    harness.get_by_label("Stop").click();
    harness.run_steps(2);
    assert_eq!(harness.state().watched_folder(), None);
}

#[test]
fn diagnose_walks_from_log_and_snapshot_to_a_fragmentation_report() {
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(
        &dialogs,
        vec![case("fragmentation.log"), case("fragmentation.pickle")],
    );
    wait_until_idle(&mut harness);
    harness.key_press_modifiers(Modifiers::COMMAND, Key::Num3);
    harness.run_steps(1);
    assert_eq!(harness.state().view(), View::Diagnose);
    harness.get_by_label("Fragmentation").click();
    harness.run_steps(2);
    harness.get_by_label("Next").click();
    harness.run_steps(2);
    assert_eq!(harness.state().wizard().step(), Step::Evidence);
    assert!(
        harness
            .query_all_by_label_contains("log fragmentation.log")
            .next()
            .is_some()
    );
    assert!(
        harness
            .query_all_by_label_contains("snapshot fragmentation.pickle")
            .next()
            .is_some()
    );
    harness.get_by_label("Next").click();
    harness.run_steps(2);
    harness.get_by_label("Next").click();
    harness.run_steps(2);
    let wizard = harness.state().wizard();
    assert_eq!(wizard.step(), Step::Report);
    let primary = wizard.diagnosis().primary().expect("a finding");
    assert_eq!(primary.category, Category::Fragmentation);
    let markdown = report::render(&wizard.report(), ReportFormat::Markdown);
    assert!(
        markdown.contains("**Primary finding:** ")
            && markdown.contains("(fragmentation, critical)"),
        "{markdown}"
    );
    // File names are code spans, so nothing in them needs escaping.
    assert!(markdown.contains("`fragmentation.pickle`"), "{markdown}");
    assert!(markdown.contains("`fragmentation.log`"), "{markdown}");
    assert!(
        harness
            .query_all_by_label_contains("(fragmentation)")
            .next()
            .is_some(),
        "the wizard's footer names the primary cause"
    );
    // Back at the findings, the snapshot's allocator state opens in the Allocator tab.
    harness.get_by_label("Back").click();
    harness.run_steps(2);
    assert!(
        harness
            .query_all_by_label_contains("Allocator at the failure: fragmentation.pickle, GPU 0")
            .next()
            .is_some()
    );
    harness.get_by_label("Open in Allocator tab").click();
    harness.run_steps(2);
    assert_eq!(
        harness.state().view(),
        View::Allocator,
        "{:?}",
        harness.state().notices.items()
    );
    let shown = harness.state().active_allocator_view().map(|v| v.name());
    assert_eq!(shown, Some("fragmentation.pickle"));
    wait_until_idle(&mut harness);
    let device = harness
        .state()
        .active_allocator_view()
        .and_then(|v| v.selected_device());
    assert_eq!(device, Some(0), "the wizard's GPU is shown");
}

#[test]
fn hardware_checks_say_whether_there_is_a_driver() {
    let driver = vramscope_gpu::cuda::driver_library_present();
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(&dialogs, Vec::new());
    harness.run_steps(1);
    harness.key_press_modifiers(Modifiers::COMMAND, Key::Num4);
    harness.run_steps(1);
    assert_eq!(harness.state().view(), View::HardwareChecks);
    assert_eq!(
        harness
            .query_by_label_contains("No NVIDIA driver found on this machine")
            .is_some(),
        !driver
    );
    if driver {
        return crate::support::skip::skipped(
            "ui_integration::hardware_checks_say_whether_there_is_a_driver",
            "this machine has an NVIDIA driver: the no-driver finding cannot show",
        );
    }
    // The Hardware and driver wizard runs the same checks and turns the result into a finding.
    harness.key_press_modifiers(Modifiers::COMMAND, Key::Num3);
    harness.run_steps(1);
    harness.get_by_label("Hardware and driver").click();
    harness.run_steps(2);
    harness.get_by_label("Next").click();
    harness.run_steps(2);
    harness.get_by_label("Run GPU checks").click();
    step_until(&mut harness, "the GPU checks", |app| {
        !app.wizard().is_checking()
    });
    let diagnosis = harness.state().wizard().diagnosis();
    assert!(
        diagnosis
            .findings
            .iter()
            .any(|f| f.title.contains("No NVIDIA driver on this machine")),
        "{:?}",
        diagnosis.findings
    );
    assert!(
        diagnosis
            .inputs
            .iter()
            .any(|i| i.kind == "gpu checks" && i.summary == "no NVIDIA driver found")
    );
    let markdown = report::render(&harness.state().wizard().report(), ReportFormat::Markdown);
    assert!(markdown.contains("No NVIDIA driver"), "{markdown}");
}

#[test]
fn ctrl_1_to_4_switch_views_and_tabs_are_clickable() {
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(&dialogs, Vec::new());
    harness.run_steps(1);
    for (key, view) in [
        (Key::Num2, View::Allocator),
        (Key::Num3, View::Diagnose),
        (Key::Num4, View::HardwareChecks),
        (Key::Num1, View::Timeline),
    ] {
        harness.key_press_modifiers(Modifiers::COMMAND, key);
        harness.run_steps(1);
        assert_eq!(harness.state().view(), view);
    }
    harness.get_by_label("Allocator").click();
    harness.run_steps(2);
    assert_eq!(harness.state().view(), View::Allocator);
    assert!(
        harness
            .query_by_label_contains("Open a PyTorch memory snapshot")
            .is_some()
    );
}

#[test]
fn at_most_a_few_allocator_views_stay_open() {
    use vramscope_app::app::MAX_ALLOCATOR_VIEWS;
    let path = case("fragmentation.pickle");
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(&dialogs, Vec::new());
    harness.run_steps(1);
    for i in 0..=MAX_ALLOCATOR_VIEWS {
        let snapshot =
            vramscope_core::formats::pytorch::read_file(&path, &|_| true).expect("fixture reads");
        harness
            .state_mut()
            .show_snapshot(&format!("step-{i}.pickle"), snapshot);
    }
    let app = harness.state();
    assert_eq!(app.allocator_views().len(), MAX_ALLOCATOR_VIEWS);
    assert_eq!(app.allocator_views()[0].name(), "step-1.pickle");
    assert_eq!(
        app.active_allocator_view().map(|v| v.name()),
        Some(format!("step-{MAX_ALLOCATOR_VIEWS}.pickle").as_str())
    );
    assert!(
        notice_texts(&harness, NoticeLevel::Info)
            .iter()
            .any(|n| n.contains("Closed the allocator view of step-0.pickle"))
    );
}

#[test]
fn the_live_capture_is_offered_to_diagnose() {
    use vramscope_app::app::LiveStart;
    use vramscope_core::source::demo::DemoSource;
    let options = AppOptions {
        files: Vec::new(),
        live: Some(LiveStart {
            source: Box::new(DemoSource::new(1_000_000)),
            demo_notice: Some("test: the demo machine".to_owned()),
        }),
        dialogs: Box::new(ScriptedDialogs::default()),
        recordings_dir: None,
    };
    let mut harness = Harness::builder()
        .with_size(Vec2::new(1200.0, 800.0))
        .wgpu()
        .build_eframe(move |cc| VramscopeApp::new(cc, options));
    step_until(&mut harness, "live samples", |app| {
        app.active_session()
            .is_some_and(|s| s.capture.sample_count() > 0)
    });
    harness.key_press_modifiers(Modifiers::COMMAND, Key::Num3);
    harness.run_steps(2);
    let diagnosis = harness.state().wizard().diagnosis();
    assert!(
        diagnosis
            .inputs
            .iter()
            .any(|i| i.kind == "capture" && i.name == "demo machine"),
        "{:?}",
        diagnosis.inputs
    );
    assert!(diagnosis.simulated, "the demo machine's data is marked");
}

#[test]
fn the_wizard_opens_a_log_as_evidence() {
    let dialogs = ScriptedDialogs::default();
    dialogs
        .open_answers
        .lock()
        .expect("lock")
        .push(case("fragmentation.log"));
    let mut harness = harness(&dialogs, Vec::new());
    harness.run_steps(1);
    harness.key_press_modifiers(Modifiers::COMMAND, Key::Num3);
    harness.run_steps(1);
    harness.get_by_label("Log analyzer").click();
    harness.run_steps(2);
    harness.get_by_label("Next").click();
    harness.run_steps(2);
    harness
        .get_by_label("Open a capture, snapshot or log…")
        .click();
    wait_until_idle(&mut harness);
    assert_eq!(
        harness.state().view(),
        View::Diagnose,
        "stays in the wizard"
    );
    assert!(
        harness
            .query_all_by_label_contains("log fragmentation.log")
            .next()
            .is_some()
    );
}
