//! UI tests of the whole app with egui_kittest: opening captures (API, dialog shortcut, drag and
//! drop), both GPUs on screen, view toggles, hover readout, process table sorting, the SIMULATED
//! badge, errors for bad files, recording a live demo run, and snapshot images.
//!
//! Data is the demo machine's deterministic `generate_capture` with a fixed start, so snapshots
//! never depend on the wall clock. Snapshots are generated with `UPDATE_SNAPSHOTS=1` on the CI
//! machine class (lavapipe); tolerances are in `kittest.toml`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use egui::{Key, Modifiers, Vec2};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

use crate::support::ui::{DroppedBytes, app_harness, notice_texts};
use vramscope_app::dialogs::FileDialogs;
use vramscope_app::notices::NoticeLevel;
use vramscope_app::{AppOptions, VramscopeApp};
use vramscope_core::formats::vramcap;
use vramscope_core::model::{Capture, EventKind, SourceKind};
use vramscope_core::source::demo::{DemoConfig, generate_capture};

/// 2026-11-30 00:00:00 UTC: a fixed start, so every run draws the same thing.
const START_MS: i64 = 1_796_000_400_000;

/// One full 15-minute demo cycle at 1 s: model load, training peaks, the 90% crossing, the OOM,
/// the leak, the Xid 31 and the ECC bump.
fn demo_capture() -> Capture {
    generate_capture(&DemoConfig::default(), START_MS, 15 * 60 * 1000, 1000)
}

/// Dialogs that answer from a script and count how often they were asked.
#[derive(Clone, Default)]
struct ScriptedDialogs {
    open_answers: Arc<Mutex<Vec<PathBuf>>>,
    save_answers: Arc<Mutex<Vec<PathBuf>>>,
    asked: Arc<Mutex<Vec<&'static str>>>,
    /// Behave like a machine with no desktop portal and no zenity.
    unavailable: bool,
}

impl FileDialogs for ScriptedDialogs {
    fn available(&self) -> bool {
        !self.unavailable
    }
    fn pick_file_to_open(&mut self) -> Option<PathBuf> {
        self.asked.lock().ok()?.push("open");
        self.open_answers.lock().ok()?.pop()
    }
    fn pick_save_path(&mut self, _suggested_name: &str) -> Option<PathBuf> {
        self.asked.lock().ok()?.push("save");
        self.save_answers.lock().ok()?.pop()
    }
}

fn options(dialogs: &ScriptedDialogs) -> AppOptions {
    AppOptions {
        files: Vec::new(),
        live: None,
        dialogs: Box::new(dialogs.clone()),
        recordings_dir: None,
    }
}

/// A 1000×700 harness (the snapshot size) with the app showing `capture` (if any).
fn harness(dialogs: &ScriptedDialogs, capture: Option<Capture>) -> Harness<'static, VramscopeApp> {
    harness_with_step(dialogs, capture, 0.25)
}

/// [`harness`] with `step_dt` seconds per frame (see [`app_harness`]).
fn harness_with_step(
    dialogs: &ScriptedDialogs,
    capture: Option<Capture>,
    step_dt: f32,
) -> Harness<'static, VramscopeApp> {
    app_harness(Box::new(dialogs.clone()), Vec::new(), capture, step_dt)
}

/// Steps until no background job is running (file reads happen on threads), or fails.
fn wait_for_jobs(harness: &mut Harness<'static, VramscopeApp>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    harness.step();
    while harness.state().jobs_running() > 0 {
        assert!(Instant::now() < deadline, "background job did not finish");
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
    harness.run_steps(3);
}

#[test]
fn opened_capture_shows_both_gpus_devices_and_processes() {
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(&dialogs, Some(demo_capture()));
    harness.run_steps(4);
    for gpu in 0..2 {
        let label = format!("GPU {gpu} · NVIDIA H200 (simulated)");
        // Once in the device list, once above the GPU's timeline.
        assert_eq!(harness.query_all_by_label(&label).count(), 2, "{label}");
    }
    // Health badges: GPU 1 had the Xid 31 and the ECC bump.
    assert!(harness.query_by_label("Xid ×1").is_some());
    assert!(harness.query_by_label("ECC 3/0").is_some());
    // Process table with the per-process memory caveat.
    assert!(harness.query_by_label_contains("Processes (").is_some());
    assert!(
        harness
            .query_by_label_contains("reserved memory plus its CUDA context")
            .is_some()
    );
    harness.snapshot("app_overview");
}

#[test]
fn simulated_data_is_labelled_in_badge_and_title() {
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(&dialogs, Some(demo_capture()));
    harness.run_steps(2);
    assert!(harness.query_by_label("SIMULATED").is_some());
    assert_eq!(
        harness.state().window_title(),
        "vramscope — demo-day.vramcap (simulated)"
    );

    // The same data claiming to be real has no badge.
    let mut real = demo_capture();
    real.meta.source = SourceKind::Live;
    for device in &mut real.devices {
        device.simulated = false;
    }
    let mut harness = self::harness(&dialogs, Some(real));
    harness.run_steps(2);
    assert!(harness.query_by_label("SIMULATED").is_none());
    assert_eq!(
        harness.state().window_title(),
        "vramscope — demo-day.vramcap"
    );
}

#[test]
fn stacked_process_view_toggles() {
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(&dialogs, Some(demo_capture()));
    harness.run_steps(2);
    assert!(!harness.state().settings.stacked_processes);
    harness.get_by_label("Stacked processes").click();
    harness.run_steps(3);
    assert!(harness.state().settings.stacked_processes);
    // The legend now names processes instead of used/reserved/total.
    assert!(harness.query_all_by_label_contains("train.py").count() > 0);
    assert_eq!(harness.query_all_by_label("used").count(), 0);
    harness.snapshot("app_stacked_processes");
    harness.get_by_label("Stacked processes").click();
    harness.run_steps(2);
    assert!(!harness.state().settings.stacked_processes);
    assert_eq!(
        harness.query_all_by_label("used").count(),
        2,
        "one legend entry per GPU"
    );
}

#[test]
fn hover_shows_exact_values_of_the_nearest_sample() {
    let dialogs = ScriptedDialogs::default();
    let capture = demo_capture();
    let mut harness = harness(&dialogs, Some(capture.clone()));
    harness.run_steps(2);
    // The second "GPU 0 · …" label is the timeline's title; its plot is right below it.
    let title_rect = harness
        .query_all_by_label("GPU 0 · NVIDIA H200 (simulated)")
        .map(|node| node.rect())
        .max_by(|a, b| a.left().total_cmp(&b.left()))
        .expect("timeline title");
    harness.hover_at(title_rect.left_bottom() + egui::vec2(300.0, 60.0));
    harness.run_steps(3);
    let hover = harness
        .state()
        .timeline_state()
        .hover
        .expect("a sample is hovered");
    assert_eq!(hover.device_index, 0);
    let sample = capture.series[0]
        .get(hover.sample_index)
        .expect("the hovered sample");
    let used = sample.memory.expect("memory").used_bytes;
    // The readout above the plots (and the same text in the plot's tooltip) has the exact bytes
    // of that sample and its absolute time.
    let exact = format!(
        "used {} ({used} B)",
        vramscope_core::model::format_bytes(used)
    );
    assert!(
        harness.query_all_by_label_contains(&exact).count() > 0,
        "no readout with {exact}"
    );
    let utc = vramscope_app::format::format_utc_ms(sample.t_ms);
    assert!(
        harness.query_all_by_label_contains(&utc).count() > 0,
        "no readout with {utc}"
    );
}

#[test]
fn process_table_sorts_by_clicked_header() {
    let dialogs = ScriptedDialogs::default();
    let capture = demo_capture();
    let mut harness = harness(&dialogs, Some(capture.clone()));
    harness.run_steps(2);
    let row_order = |harness: &Harness<'static, VramscopeApp>| -> Vec<u32> {
        let mut rows: Vec<(f32, u32)> = capture
            .processes
            .iter()
            .filter_map(|track| {
                let label = track.pid.to_string();
                let top = harness.query_by_label(&label)?.rect().top();
                Some((top, track.pid))
            })
            .collect();
        rows.sort_by(|a, b| a.0.total_cmp(&b.0));
        rows.into_iter().map(|(_, pid)| pid).collect()
    };
    let mut pids: Vec<u32> = capture.processes.iter().map(|t| t.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    assert!(
        pids.len() >= 3,
        "the demo day has several processes: {pids:?}"
    );

    harness.get_by_label("PID").click();
    harness.run_steps(2);
    assert_eq!(row_order(&harness), pids, "ascending by pid");
    harness.get_by_label("PID (asc)").click();
    harness.run_steps(2);
    let mut descending = pids.clone();
    descending.reverse();
    assert_eq!(row_order(&harness), descending, "clicking again reverses");
}

#[test]
fn ctrl_o_asks_the_dialog_and_opens_the_chosen_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("picked.vramcap");
    vramcap::write_file(&path, &demo_capture()).expect("fixture written");
    let dialogs = ScriptedDialogs::default();
    dialogs.open_answers.lock().expect("lock").push(path);
    let mut harness = harness(&dialogs, None);
    harness.run_steps(2);
    assert!(
        harness
            .query_by_label_contains("Open a .vramcap capture")
            .is_some()
    );
    harness.key_press_modifiers(Modifiers::COMMAND, Key::O);
    wait_for_jobs(&mut harness);
    assert_eq!(*dialogs.asked.lock().expect("lock"), vec!["open"]);
    assert_eq!(harness.state().sessions().len(), 1);
    assert!(harness.query_by_label("picked.vramcap").is_some());
    assert_eq!(
        harness
            .query_all_by_label("GPU 1 · NVIDIA H200 (simulated)")
            .count(),
        2
    );
}

fn drop_file(harness: &mut Harness<'static, VramscopeApp>, name: &str, bytes: Vec<u8>) {
    harness
        .input_mut()
        .dropped_files
        .push(Arc::new(DroppedBytes {
            path: PathBuf::from(format!("/nonexistent-dir/{name}")),
            bytes,
        }));
    wait_for_jobs(harness);
}

#[test]
fn dropped_capture_opens() {
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(&dialogs, None);
    harness.run_steps(1);
    drop_file(
        &mut harness,
        "dropped.vramcap",
        vramcap::write_bytes(&demo_capture()),
    );
    assert!(harness.query_by_label("dropped.vramcap").is_some());
    let session = harness.state().active_session().expect("a session");
    assert_eq!(session.capture.sample_count(), 2 * 900);
    assert!(notice_texts(&harness, NoticeLevel::Error).is_empty());
}

#[test]
fn bad_and_damaged_files_are_reported_by_name() {
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(&dialogs, None);
    harness.run_steps(1);
    drop_file(
        &mut harness,
        "holiday.png",
        b"\x89PNG\r\n\x1a\nnot a capture at all".to_vec(),
    );
    let errors = notice_texts(&harness, NoticeLevel::Error);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("holiday.png") && errors[0].contains("not a vramscope capture"),
        "{errors:?}"
    );
    assert!(
        harness.query_by_label_contains("holiday.png").is_some(),
        "the error is on screen"
    );
    assert!(harness.state().sessions().is_empty());

    // A capture cut short (as by a crash) opens with a warning saying what was recovered.
    let mut bytes = vramcap::write_bytes(&demo_capture());
    bytes.truncate(bytes.len() * 2 / 3);
    drop_file(&mut harness, "crashed.vramcap", bytes);
    let warnings = notice_texts(&harness, NoticeLevel::Warning);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("crashed.vramcap") && w.contains("damaged")),
        "{warnings:?}"
    );
    assert_eq!(harness.state().sessions().len(), 1);
    harness.snapshot("app_damaged_file_notices");

    // A cut snapshot: the error names the file once and says where it ends.
    let mut pickle = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/pytorch/oom.pickle"
    ))
    .expect("fixture");
    pickle.truncate(4000);
    drop_file(&mut harness, "cut.pickle", pickle);
    let errors = notice_texts(&harness, NoticeLevel::Error);
    let cut = errors
        .iter()
        .find(|e| e.contains("cut.pickle"))
        .unwrap_or_else(|| panic!("{errors:?}"));
    assert!(cut.contains("truncated"), "{cut}");
    assert_eq!(cut.matches("cut.pickle").count(), 1, "{cut}");
}

#[test]
fn save_as_writes_the_shown_capture_with_notes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("saved.vramcap");
    let dialogs = ScriptedDialogs::default();
    dialogs
        .save_answers
        .lock()
        .expect("lock")
        .push(path.clone());
    let mut harness = harness(&dialogs, Some(demo_capture()));
    harness.run_steps(2);
    // A note on a file lands at the last hovered moment.
    let title_rect = harness
        .query_all_by_label("GPU 0 · NVIDIA H200 (simulated)")
        .map(|node| node.rect())
        .max_by(|a, b| a.left().total_cmp(&b.left()))
        .expect("timeline title");
    harness.hover_at(title_rect.left_bottom() + egui::vec2(250.0, 60.0));
    harness.run_steps(2);
    let hovered_t_ms = harness
        .state()
        .timeline_state()
        .hover
        .expect("hovered")
        .t_ms;
    harness.hover_at(egui::pos2(5.0, 690.0));
    harness.run_steps(2);
    assert!(harness.state().timeline_state().hover.is_none());
    harness
        .state_mut()
        .set_annotation_draft("learning rate lowered");
    harness.get_by_label("Add note").click();
    harness.run_steps(2);
    harness.key_press_modifiers(Modifiers::COMMAND, Key::S);
    wait_for_jobs(&mut harness);
    assert_eq!(*dialogs.asked.lock().expect("lock"), vec!["save"]);
    let saved = vramcap::read_file(&path).expect("saved file opens");
    let shown = &harness.state().active_session().expect("session").capture;
    assert_eq!(&saved, shown);
    assert!(saved.events.iter().any(|e| e.t_ms == hovered_t_ms
        && e.kind
            == EventKind::Annotation {
                text: "learning rate lowered".to_owned()
            }));
    // Saved: quitting asks nothing.
    assert_eq!(harness.state().unsaved_notes(), 0);
    harness.key_press_modifiers(Modifiers::COMMAND, Key::Q);
    harness.step();
    assert!(harness.state().quit_requested());
}

#[test]
fn quitting_with_unsaved_notes_asks_first() {
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(&dialogs, Some(demo_capture()));
    harness.run_steps(2);
    harness.state_mut().set_annotation_draft("before the spike");
    harness.get_by_label("Add note").click();
    harness.run_steps(2);
    assert_eq!(harness.state().unsaved_notes(), 1);
    harness.key_press_modifiers(Modifiers::COMMAND, Key::Q);
    harness.run_steps(2);
    assert!(!harness.state().quit_requested(), "a note would be lost");
    assert!(harness.state().quit_confirm_open());
    assert!(
        harness
            .query_by_label_contains("are not in any file yet")
            .is_some()
    );
    // Cancel keeps the app open and the note.
    harness.get_by_label("Cancel").click();
    harness.run_steps(2);
    assert!(!harness.state().quit_confirm_open() && !harness.state().quit_requested());
    // Asked again, the user quits without saving.
    harness.key_press_modifiers(Modifiers::COMMAND, Key::Q);
    harness.run_steps(2);
    harness.get_by_label("Quit without saving").click();
    harness.run_steps(2);
    assert!(harness.state().quit_requested());
}

#[test]
fn saving_from_the_quit_question_saves_then_quits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("with-note.vramcap");
    let dialogs = ScriptedDialogs::default();
    dialogs
        .save_answers
        .lock()
        .expect("lock")
        .push(path.clone());
    let mut harness = harness(&dialogs, Some(demo_capture()));
    harness.run_steps(2);
    harness.state_mut().set_annotation_draft("keep me");
    harness.get_by_label("Add note").click();
    harness.run_steps(2);
    harness.key_press_modifiers(Modifiers::COMMAND, Key::Q);
    harness.run_steps(2);
    harness.get_by_label("Save as…").click();
    harness.run_steps(1);
    wait_for_jobs(&mut harness);
    harness.run_steps(1);
    assert_eq!(harness.state().unsaved_notes(), 0);
    assert!(
        harness.state().quit_requested(),
        "quits once the notes are saved"
    );
    let saved = vramcap::read_file(&path).expect("saved");
    assert!(saved.events.iter().any(|e| e.kind
        == EventKind::Annotation {
            text: "keep me".to_owned()
        }));
}

#[test]
fn live_demo_source_is_sampled_recorded_and_says_simulated() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dialogs = ScriptedDialogs::default();
    let mut options = options(&dialogs);
    options.live = Some(vramscope_app::app::LiveStart {
        source: Box::new(vramscope_core::source::demo::DemoSource::new(START_MS)),
        demo_notice: Some("no NVIDIA GPU could be opened: showing a simulated machine".to_owned()),
    });
    options.recordings_dir = Some(dir.path().to_owned());
    let mut harness = Harness::builder()
        .with_size(Vec2::new(1000.0, 700.0))
        .build_eframe(move |cc| VramscopeApp::new(cc, options));
    harness.step();
    assert_eq!(
        harness.state().window_title(),
        "vramscope — demo machine (simulated)"
    );
    assert!(
        harness
            .query_by_label_contains("showing a simulated machine")
            .is_some()
    );
    assert!(harness.query_by_label("SIMULATED").is_some());

    harness.key_press_modifiers(Modifiers::COMMAND, Key::R);
    let deadline = Instant::now() + Duration::from_secs(20);
    let samples = |h: &Harness<'static, VramscopeApp>| {
        h.state()
            .active_session()
            .map_or(0, |s| s.capture.sample_count())
    };
    while samples(&harness) < 8 {
        assert!(Instant::now() < deadline, "live samples did not arrive");
        std::thread::sleep(Duration::from_millis(50));
        harness.step();
    }
    assert!(harness.query_by_label("Stop recording").is_some());
    // Following live data: the newest sample is in view.
    harness.run_steps(2);
    let shown = harness
        .state()
        .timeline_state()
        .visible_x_range
        .expect("plots shown");
    let (first, newest) = harness
        .state()
        .active_session()
        .and_then(|s| s.timeline.x_span())
        .expect("samples");
    assert!(
        shown.0 < newest && newest <= shown.1,
        "{newest} not in {shown:?}"
    );
    // A capture shorter than the follow window fills the plot: no empty time before its start.
    let width = shown.1 - shown.0;
    assert!(
        shown.0 >= first - width * 0.01 && shown.0 <= first + width * 0.01,
        "view {shown:?} should start at the first sample {first}"
    );
    // Reset view shows everything and keeps following.
    harness.get_by_label("Reset view").click();
    harness.run_steps(2);
    let reset = harness
        .state()
        .timeline_state()
        .visible_x_range
        .expect("plots shown");
    assert!(
        reset.0 <= first + 1e-9 && reset.1 >= newest,
        "reset {reset:?} should hold {first}..{newest}"
    );
    assert!(harness.state().timeline_state().following);
    harness.key_press_modifiers(Modifiers::COMMAND, Key::R);
    harness.step();
    let infos = notice_texts(&harness, NoticeLevel::Info);
    assert!(
        infos.iter().any(|i| i.starts_with("Recorded ")),
        "{infos:?}"
    );
    let recorded: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .expect("recordings dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    let name = recorded[0]
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    assert!(name.ends_with("-simulated.vramcap"), "{name}");
    let capture = vramcap::read_file(&recorded[0]).expect("recording opens");
    assert!(capture.is_simulated() && capture.sample_count() > 0);
}

#[test]
fn zoom_pan_and_double_click_reset_act_on_all_linked_plots() {
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness_with_step(&dialogs, Some(demo_capture()), 0.05);
    harness.run_steps(3);
    let visible = |h: &Harness<'static, VramscopeApp>| {
        h.state()
            .timeline_state()
            .visible_x_range
            .expect("plots shown")
    };
    let full = visible(&harness);
    assert!(
        full.0 <= 0.0 && full.1 >= 899.0,
        "whole capture in view: {full:?}"
    );

    let title_rect = harness
        .query_all_by_label("GPU 1 · NVIDIA H200 (simulated)")
        .map(|node| node.rect())
        .max_by(|a, b| a.left().total_cmp(&b.left()))
        .expect("timeline title");
    let inside_plot = title_rect.left_bottom() + egui::vec2(400.0, 60.0);
    let zoom_in = |harness: &mut Harness<'static, VramscopeApp>| {
        harness.hover_at(inside_plot);
        harness.event(egui::Event::Zoom(4.0));
        harness.run_steps(3);
    };
    zoom_in(&mut harness);
    let zoomed = visible(&harness);
    assert!(
        zoomed.1 - zoomed.0 < (full.1 - full.0) / 3.0,
        "zoomed in: {full:?} -> {zoomed:?}"
    );

    // A double click shows everything again.
    for pressed in [true, false, true, false] {
        harness.event(egui::Event::PointerButton {
            pos: inside_plot,
            button: egui::PointerButton::Primary,
            pressed,
            modifiers: Modifiers::NONE,
        });
    }
    harness.run_steps(4);
    let reset = visible(&harness);
    assert!(
        (reset.0 - full.0).abs() < 1e-6 && (reset.1 - full.1).abs() < 1e-6,
        "{reset:?} != {full:?}"
    );

    // Dragging pans along x and keeps the zoom.
    zoom_in(&mut harness);
    let zoomed = visible(&harness);
    harness.drag_at(inside_plot);
    harness.step();
    harness.hover_at(inside_plot + egui::vec2(150.0, 0.0));
    harness.step();
    harness.drop_at(inside_plot + egui::vec2(150.0, 0.0));
    harness.run_steps(3);
    let panned = visible(&harness);
    assert!(
        panned.0 < zoomed.0,
        "dragged right shows earlier times: {zoomed:?} -> {panned:?}"
    );
    assert!(
        ((panned.1 - panned.0) - (zoomed.1 - zoomed.0)).abs() < 1e-6,
        "same width"
    );

    // "Reset view" does the same as a double click.
    harness.get_by_label("Reset view").click();
    harness.run_steps(4);
    let reset = visible(&harness);
    assert!(
        (reset.0 - full.0).abs() < 1e-6 && (reset.1 - full.1).abs() < 1e-6,
        "{reset:?} != {full:?}"
    );
}

#[test]
fn without_a_file_dialog_the_app_asks_for_the_path_itself() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("typed.vramcap");
    std::fs::write(&path, vramcap::write_bytes(&demo_capture())).expect("writes");
    let dialogs = ScriptedDialogs {
        unavailable: true,
        ..Default::default()
    };
    let mut harness = harness(&dialogs, None);
    harness.run_steps(1);
    harness.key_press_modifiers(Modifiers::COMMAND, Key::O);
    harness.run_steps(2);
    assert!(harness.state().path_prompt_open());
    assert!(
        dialogs.asked.lock().expect("lock").is_empty(),
        "no dialog tried"
    );
    assert!(
        harness
            .query_by_label_contains("No file dialog is available here")
            .is_some()
    );
    // The suggested path is selected, so typing replaces it; Enter submits.
    harness
        .get_by_role(egui::accesskit::Role::TextInput)
        .type_text(path.to_str().expect("utf-8 path"));
    harness.run_steps(1);
    harness.key_press(Key::Enter);
    harness.run_steps(2);
    wait_for_jobs(&mut harness);
    assert!(!harness.state().path_prompt_open());
    assert!(harness.query_by_label("typed.vramcap").is_some());
    assert_eq!(harness.state().sessions().len(), 1);
}

#[test]
fn ctrl_q_quits() {
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(&dialogs, None);
    harness.run_steps(1);
    assert!(!harness.state().quit_requested());
    harness.key_press_modifiers(Modifiers::COMMAND, Key::Q);
    harness.step();
    assert!(harness.state().quit_requested());
}

/// eframe storage in memory, as the real app has in `app.ron`.
#[derive(Default)]
struct MemoryStorage(std::collections::HashMap<String, String>);

impl eframe::Storage for MemoryStorage {
    fn get_string(&self, key: &str) -> Option<String> {
        self.0.get(key).cloned()
    }
    fn set_string(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
    fn remove_string(&mut self, key: &str) {
        self.0.remove(key);
    }
    fn flush(&mut self) {}
}

#[test]
fn settings_persist_between_runs() {
    use eframe::App as _;
    let dialogs = ScriptedDialogs::default();
    let mut harness = harness(&dialogs, Some(demo_capture()));
    harness.run_steps(2);
    harness.get_by_label("Stacked processes").click();
    harness.run_steps(2);
    harness.state_mut().settings.threshold_pct = 75.0;
    harness.state_mut().settings.sampling_interval_ms = 1000;
    let mut storage = MemoryStorage::default();
    harness.state_mut().save(&mut storage);

    // The next run starts from the stored settings. The storage must outlive the harness.
    let storage: &'static MemoryStorage = Box::leak(Box::new(storage));
    let options = options(&dialogs);
    let harness = Harness::builder().build_eframe(move |cc| {
        cc.storage = Some(storage);
        VramscopeApp::new(cc, options)
    });
    let settings = &harness.state().settings;
    assert!(settings.stacked_processes);
    assert_eq!(settings.threshold_pct, 75.0);
    assert_eq!(settings.sampling_interval_ms, 1000);
}
