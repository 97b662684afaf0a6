//! UI tests of the command path: menu items, shortcuts, the command palette and views all send
//! `UiCommand`s that the app runs in one place; items that cannot run are greyed out with the reason, shortcuts for them do
//! nothing.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use egui::{Key, Modifiers, Vec2};
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT as _, Queryable};

use crate::support::ui::{app_harness, slow_snapshot_bytes};
use vramscope_app::command::{AppEvent, UiCommand};
use vramscope_app::dialogs::FileDialogs;
use vramscope_app::export::TimelineExport;
use vramscope_app::palette::SEARCH_LABEL;
use vramscope_app::views::View;
use vramscope_app::{AppOptions, VramscopeApp};
use vramscope_core::model::Capture;
use vramscope_core::source::demo::{DemoConfig, generate_capture};

/// 2026-11-30 00:00:00 UTC, so every run draws the same thing.
const START_MS: i64 = 1_796_000_400_000;

fn demo_capture() -> Capture {
    generate_capture(&DemoConfig::default(), START_MS, 5 * 60 * 1000, 1000)
}

/// Dialogs that record which were asked for and answer nothing.
#[derive(Clone, Default)]
struct CountingDialogs {
    asked: Arc<Mutex<Vec<&'static str>>>,
}

impl FileDialogs for CountingDialogs {
    fn pick_file_to_open(&mut self) -> Option<PathBuf> {
        self.asked.lock().ok()?.push("open");
        None
    }
    fn pick_save_path(&mut self, _suggested_name: &str) -> Option<PathBuf> {
        self.asked.lock().ok()?.push("save");
        None
    }
    fn pick_export_path(
        &mut self,
        export: TimelineExport,
        _suggested_name: &str,
    ) -> Option<PathBuf> {
        self.asked.lock().ok()?.push(match export {
            TimelineExport::Png => "png",
            TimelineExport::Png2x => "png2x",
            TimelineExport::Csv => "csv",
            TimelineExport::Perfetto => "perfetto",
        });
        None
    }
}

fn harness(dialogs: &CountingDialogs, capture: Option<Capture>) -> Harness<'static, VramscopeApp> {
    app_harness(Box::new(dialogs.clone()), Vec::new(), capture, 0.25)
}

fn asked(dialogs: &CountingDialogs) -> Vec<&'static str> {
    dialogs.asked.lock().map(|a| a.clone()).unwrap_or_default()
}

/// A menu item's label: the command's text and its shortcut ("Export timeline as PNG… Ctrl+E").
fn menu_label(harness: &Harness<'static, VramscopeApp>, command: &UiCommand) -> String {
    match command.shortcut_text(&harness.ctx) {
        Some(shortcut) => format!("{} {shortcut}", command.label()),
        None => command.label().to_owned(),
    }
}

/// Opens the File menu and returns whether the item of `command` is enabled.
fn file_item_enabled(harness: &mut Harness<'static, VramscopeApp>, command: &UiCommand) -> bool {
    harness.get_by_label("File").click();
    harness.run_steps(2);
    let label = menu_label(harness, command);
    let enabled = !harness.get_by_label(&label).accesskit_node().is_disabled();
    harness.key_press(Key::Escape);
    harness.run_steps(2);
    enabled
}

#[test]
fn an_export_that_cannot_run_is_greyed_out_and_its_shortcut_does_nothing() {
    let dialogs = CountingDialogs::default();
    let mut harness = harness(&dialogs, None);
    harness.run_steps(2);
    let png = UiCommand::ExportTimelinePng;
    assert!(
        !file_item_enabled(&mut harness, &png),
        "nothing to export yet"
    );
    harness.key_press_modifiers(Modifiers::COMMAND, Key::E);
    harness.run_steps(2);
    assert!(asked(&dialogs).is_empty(), "the shortcut asked for nothing");

    let dialogs = CountingDialogs::default();
    let mut harness = self::harness(&dialogs, Some(demo_capture()));
    harness.run_steps(2);
    assert!(file_item_enabled(&mut harness, &png));
    harness.key_press_modifiers(Modifiers::COMMAND, Key::E);
    harness.run_steps(2);
    assert_eq!(
        asked(&dialogs),
        vec!["png"],
        "the same command as the menu item"
    );
}

#[test]
fn the_menu_the_shortcut_and_run_command_do_the_same() {
    let dialogs = CountingDialogs::default();
    let mut harness = harness(&dialogs, None);
    harness.run_steps(2);
    // The menu item…
    harness.get_by_label("File").click();
    harness.run_steps(2);
    let open = menu_label(&harness, &UiCommand::Open);
    harness.get_by_label(&open).click();
    harness.run_steps(2);
    // …the shortcut…
    harness.key_press_modifiers(Modifiers::COMMAND, Key::O);
    harness.run_steps(2);
    // …and the command sent directly all ask for a file.
    harness.state_mut().run_command(UiCommand::Open);
    harness.run_steps(1);
    assert_eq!(asked(&dialogs), vec!["open", "open", "open"]);
}

#[test]
fn ctrl_comma_opens_the_settings_and_views_switch_by_command() {
    let dialogs = CountingDialogs::default();
    let mut harness = harness(&dialogs, None);
    harness.run_steps(2);
    assert!(harness.query_by_label("Sampling interval").is_none());
    harness.key_press_modifiers(Modifiers::COMMAND, Key::Comma);
    harness.run_steps(2);
    assert!(
        harness.query_by_label("Sampling interval").is_some(),
        "the Settings window is open"
    );
    harness
        .state_mut()
        .run_command(UiCommand::ShowHardwareChecks);
    harness.run_steps(1);
    assert_eq!(harness.state().view(), View::HardwareChecks);
    // The tab's tooltip is the command's, with its shortcut.
    let tooltip = UiCommand::show(View::Diagnose).tooltip();
    assert!(tooltip.contains("Guided diagnosis"), "{tooltip}");
}

#[test]
fn a_long_read_repaints_only_when_its_progress_moves() {
    let dir = tempfile::tempdir().expect("temp dir");
    let slow = dir.path().join("slow.pickle");
    std::fs::write(&slow, slow_snapshot_bytes(48 << 20)).expect("written");
    let dialogs = CountingDialogs::default();
    let mut harness = harness(&dialogs, None);
    harness.state_mut().open_path(slow);
    harness.run_steps(2);
    assert_eq!(harness.state().reads().len(), 1, "the read is in progress");
    // The reader reports progress continuously; the UI must still come to rest between the
    // throttled repaints (an immediate repaint per report, or an animation, would keep it busy
    // past the step limit).
    let steps = harness
        .try_run()
        .unwrap_or_else(|err| panic!("the UI kept repainting while the read ran: {err}"));
    assert!(steps <= 3, "{steps} frames to come to rest");
    assert_eq!(harness.state().reads().len(), 1, "still reading");
    harness.get_by_label("Cancel").click();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while harness.state().jobs_running() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the read did not stop"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
        harness.step();
    }
}

#[test]
fn clicking_a_process_row_selects_it_and_highlights_it_in_the_timeline() {
    let dialogs = CountingDialogs::default();
    let capture = demo_capture();
    let (track_index, track) = capture
        .processes
        .iter()
        .enumerate()
        .max_by_key(|(_, track)| track.peak_used_bytes())
        .expect("the demo has processes");
    let pid = track.pid.to_string();
    let legend = format!("selected: pid {} {}", track.pid, track.name);
    let mut harness = harness(&dialogs, Some(capture.clone()));
    harness.run_steps(3);
    assert_eq!(harness.state().selected_process(), None);
    assert!(harness.query_by_label(&legend).is_none());
    harness.get_by_label(&pid).click();
    harness.run_steps(3);
    assert_eq!(harness.state().selected_process(), Some(track_index));
    assert!(
        harness.query_by_label(&legend).is_some(),
        "the timeline names the selected process"
    );
    harness.snapshot("commands_process_selected");
    // In the stacked view its band is the one named "selected".
    harness.get_by_label("Stacked processes").click();
    harness.run_steps(3);
    assert!(harness.query_by_label(&legend).is_some());
    // A second click clears the selection.
    harness.get_by_label(&pid).click();
    harness.run_steps(3);
    assert_eq!(harness.state().selected_process(), None);
    assert!(harness.query_by_label(&legend).is_none());
}

#[test]
fn with_only_a_snapshot_open_the_timeline_says_where_it_is() {
    let dialogs = CountingDialogs::default();
    let mut harness = harness(&dialogs, None);
    let snapshot = vramscope_core::formats::pytorch::read_file(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pytorch/frag_oom.pickle"),
        &|_| true,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    harness
        .state_mut()
        .show_snapshot("frag_oom.pickle", snapshot);
    harness.run_steps(2);
    assert_eq!(harness.state().view(), View::Allocator);
    harness.key_press_modifiers(Modifiers::COMMAND, Key::Num1);
    harness.run_steps(2);
    assert!(
        harness
            .query_by_label_contains("No capture open · 1 snapshot in Allocator")
            .is_some(),
        "the top bar says what is open and where"
    );
    assert!(harness.query_by_label_contains("No source").is_none());
    assert!(
        harness
            .query_by_label("1 snapshot open, shown in Allocator.")
            .is_some()
    );
    harness.snapshot("commands_timeline_with_only_a_snapshot");
    harness.get_by_label("Show Allocator").click();
    harness.run_steps(2);
    assert_eq!(harness.state().view(), View::Allocator);
}

#[test]
fn the_demo_machine_speed_is_chosen_in_the_view_menu() {
    use vramscope_core::source::Source as _;
    use vramscope_core::source::demo::DemoSource;
    let source = DemoSource::new(START_MS);
    let pace = source.demo_pace().expect("the demo has a pace");
    let dialogs = CountingDialogs::default();
    let options = AppOptions {
        files: Vec::new(),
        live: Some(vramscope_app::app::LiveStart {
            source: Box::new(source),
            demo_notice: Some("test: showing a simulated machine".to_owned()),
        }),
        dialogs: Box::new(dialogs.clone()),
        recordings_dir: None,
    };
    let mut harness = Harness::builder()
        .with_size(Vec2::new(1000.0, 700.0))
        .build_eframe(move |cc| VramscopeApp::new(cc, options));
    harness.run_steps(2);
    assert_eq!(harness.state().demo_speed(), Some(1));
    harness.get_by_label("View").click();
    harness.run_steps(2);
    harness.get_by_label("60×").click();
    harness.run_steps(2);
    assert_eq!(
        pace.speed(),
        60,
        "the sampler's source runs at the chosen pace"
    );
    assert_eq!(harness.state().demo_speed(), Some(60));
    // Without a demo machine the request is refused with the reason.
    let dialogs = CountingDialogs::default();
    let mut harness = self::harness(&dialogs, Some(demo_capture()));
    harness.run_steps(1);
    assert_eq!(harness.state().demo_speed(), None);
    harness.state_mut().handle_event(AppEvent::SetDemoSpeed(60));
    harness.run_steps(1);
    assert_eq!(harness.state().demo_speed(), None);
    assert!(
        harness
            .query_by_label_contains("Only the simulated demo machine runs at a chosen speed")
            .is_some()
    );
}

#[test]
fn ctrl_shift_p_finds_a_command_by_name_and_enter_runs_it() {
    let dialogs = CountingDialogs::default();
    let mut harness = harness(&dialogs, Some(demo_capture()));
    harness.run_steps(2);
    harness.key_press_modifiers(
        Modifiers {
            shift: true,
            ..Modifiers::COMMAND
        },
        Key::P,
    );
    harness.run_steps(2);
    assert!(
        harness.query_by_label(SEARCH_LABEL).is_some(),
        "the palette is open with its search field"
    );
    harness.get_by_label(SEARCH_LABEL).type_text("csv");
    harness.run_steps(2);
    assert!(harness.query_by_label("Export timeline as CSV…").is_some());
    assert!(
        harness.query_by_label("Quit").is_none(),
        "only matching commands are listed"
    );
    harness.key_press(Key::Enter);
    harness.run_steps(2);
    assert_eq!(asked(&dialogs), vec!["csv"], "Enter ran the first match");
    assert!(
        harness.query_by_label(SEARCH_LABEL).is_none(),
        "the palette closed"
    );
    // Escape closes it without running anything.
    harness.state_mut().run_command(UiCommand::CommandPalette);
    harness.run_steps(2);
    harness.key_press(Key::Escape);
    harness.run_steps(2);
    assert!(harness.query_by_label(SEARCH_LABEL).is_none());
    assert_eq!(asked(&dialogs), vec!["csv"]);
}
