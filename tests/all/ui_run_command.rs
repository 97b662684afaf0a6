//! File › Run a command… in the real app, with fake jobs (no GPU needed): the dialog (menu,
//! shortcut, palette; Enter runs, Escape cancels, bad fields are named inline), the run panel
//! (the job's output as it comes, its exit status, Stop as Ctrl+C, a command that is not found,
//! the proof table row by row), the run folder opened as a session when the job ends, and a run
//! folder opened later diagnosed with what its re-runs proved.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use egui::{Key, Modifiers};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

use crate::support::ui::{app_harness, notice_texts, step_until};
use vramscope_app::VramscopeApp;
use vramscope_app::command::UiCommand;
use vramscope_app::dialogs::FileDialogs;
use vramscope_app::notices::NoticeLevel;
use vramscope_app::palette::SEARCH_LABEL;
use vramscope_app::run_command::dialog::Field;
use vramscope_app::views::View;

/// Dialogs that answer nothing (the run dialog asks for no file).
struct NoDialogs;

impl FileDialogs for NoDialogs {
    fn pick_file_to_open(&mut self) -> Option<PathBuf> {
        None
    }
    fn pick_save_path(&mut self, _suggested_name: &str) -> Option<PathBuf> {
        None
    }
}

/// The app with its run folders going to `runs_dir`.
fn harness(runs_dir: &Path) -> Harness<'static, VramscopeApp> {
    let mut harness = app_harness(Box::new(NoDialogs), Vec::new(), None, 0.25);
    harness.state_mut().set_runs_dir(runs_dir);
    harness.run_steps(2);
    harness
}

/// Opens the dialog from the File menu and types `command` into its command line.
fn type_command(harness: &mut Harness<'static, VramscopeApp>, command: &str) {
    harness.get_by_label("File").click();
    harness.run_steps(2);
    let shortcut = UiCommand::RunCommand
        .shortcut_text(&harness.ctx)
        .expect("a shortcut");
    harness
        .get_by_label(&format!("{} {shortcut}", UiCommand::RunCommand.label()))
        .click();
    harness.run_steps(2);
    assert!(harness.state().run_dialog().is_open());
    harness.get_by_label("Command line").focus();
    harness.get_by_label("Command line").type_text(command);
    harness.run_steps(1);
}

/// Steps in real time until the run has ended and what it opened is read.
fn wait_for_the_end(harness: &mut Harness<'static, VramscopeApp>) {
    step_until(harness, "the run's end", |app| {
        app.command_run().is_some_and(|run| !run.is_running()) && app.jobs_running() == 0
    });
}

/// Steps in real time until a label `text` shows (at most 30 s).
fn step_until_shown(harness: &mut Harness<'static, VramscopeApp>, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while harness.query_by_label(text).is_none() {
        assert!(Instant::now() < deadline, "timed out waiting for {text:?}");
        std::thread::sleep(Duration::from_millis(20));
        harness.step();
    }
}

/// The only run folder in `dir`.
fn run_folder(dir: &Path) -> PathBuf {
    let runs: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("runs folder")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0].clone()
}

#[test]
fn a_command_run_from_the_app_shows_its_output_and_exit_and_opens_its_folder() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut harness = harness(dir.path());
    type_command(
        &mut harness,
        "sh -c 'echo hello from the job; echo \"to stderr\" >&2; exit 3'",
    );
    harness.key_press(Key::Enter);
    harness.run_steps(1);
    assert!(!harness.state().run_dialog().is_open(), "Enter runs");
    assert_eq!(harness.state().view(), View::Timeline);
    wait_for_the_end(&mut harness);

    // The panel: the output as it came, both streams, and the exit status.
    assert!(harness.query_by_label("hello from the job").is_some());
    assert!(harness.query_by_label("to stderr").is_some());
    assert!(
        harness.query_by_label_contains("exit status 3").is_some(),
        "the exit status is shown"
    );
    let run = harness.state().command_run().expect("the panel stays");
    assert_eq!(run.exit_status(), Some(3));
    assert!(
        UiCommand::RunCommand
            .availability(&harness.state().command_context())
            .is_enabled(),
        "another run may start once this one ended"
    );

    // The run folder: recorded as vramscope run records it, diagnosed, and opened here.
    let folder = run_folder(dir.path());
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("run.json")).expect("run.json"))
            .expect("JSON");
    assert_eq!(manifest["exit"]["status"], 3);
    assert_eq!(
        manifest["command"][2],
        "echo hello from the job; echo \"to stderr\" >&2; exit 3"
    );
    assert!(
        folder.join("report.json").is_file(),
        "a failed run is diagnosed"
    );
    let log_name = format!(
        "{}/output.log",
        folder.file_name().expect("name").to_string_lossy()
    );
    let inputs: Vec<String> = harness
        .state()
        .wizard()
        .diagnosis()
        .inputs
        .iter()
        .map(|i| i.name.clone())
        .collect();
    assert!(inputs.contains(&log_name), "{inputs:?}");
    assert!(
        notice_texts(&harness, NoticeLevel::Info)
            .iter()
            .any(|n| n.contains(&log_name)),
        "{:?}",
        notice_texts(&harness, NoticeLevel::Info)
    );

    // Close hides the panel.
    harness.get_by_label("Close").click();
    harness.run_steps(2);
    assert!(harness.state().command_run().is_none());
}

#[test]
fn a_command_that_is_not_found_says_so_with_the_shells_status() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut harness = harness(dir.path());
    type_command(&mut harness, "no-such-command-vramscope --flag");
    harness.key_press(Key::Enter);
    wait_for_the_end(&mut harness);
    assert!(
        harness
            .query_by_label("command not found: no-such-command-vramscope (exit status 127)")
            .is_some()
    );
    let run = harness.state().command_run().expect("the panel stays");
    assert_eq!(run.exit_status(), Some(127));
    assert!(harness.state().sessions().is_empty(), "nothing to open");
}

#[test]
fn the_dialog_names_what_it_cannot_run_and_escape_cancels() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut harness = harness(dir.path());
    // The shortcut opens it, as the menu does.
    harness.key_press_modifiers(Modifiers::COMMAND | Modifiers::SHIFT, Key::R);
    harness.run_steps(2);
    assert!(harness.state().run_dialog().is_open());
    harness.get_by_label("Command line").focus();
    harness
        .get_by_label("Command line")
        .type_text("python train.py | tee log");
    harness
        .get_by_label("Prove a fix if it runs out of memory")
        .click();
    harness.run_steps(1);
    harness.get_by_label("Vary environment").focus();
    harness.get_by_label("Vary environment").type_text("BATCH");
    harness.run_steps(1);
    harness.get_by_label("Run").click();
    harness.run_steps(2);
    assert!(harness.state().run_dialog().is_open(), "nothing ran");
    let fields: Vec<Field> = harness
        .state()
        .run_dialog()
        .errors()
        .iter()
        .map(|(f, _)| *f)
        .collect();
    assert_eq!(fields, [Field::Command, Field::Vary]);
    assert!(
        harness
            .query_by_label_contains("pipes and redirections need a shell")
            .is_some()
    );
    assert!(
        harness
            .query_by_label("'BATCH' is not NAME=V1,V2,…")
            .is_some()
    );
    harness.key_press(Key::Escape);
    harness.run_steps(2);
    assert!(!harness.state().run_dialog().is_open(), "Escape cancels");
    assert!(harness.state().command_run().is_none());
    assert!(std::fs::read_dir(dir.path()).expect("dir").next().is_none());

    // The palette finds it too.
    harness.key_press_modifiers(Modifiers::COMMAND | Modifiers::SHIFT, Key::P);
    harness.run_steps(2);
    harness
        .get_by_label(SEARCH_LABEL)
        .type_text("run a command");
    harness.run_steps(1);
    harness.key_press(Key::Enter);
    harness.run_steps(2);
    assert!(harness.state().run_dialog().is_open());
}

#[test]
fn stop_is_ctrl_c_for_the_jobs_process_group() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut harness = harness(dir.path());
    type_command(
        &mut harness,
        "sh -c 'trap \"echo got INT; exit 9\" INT; echo ready; sleep 30; echo not stopped'",
    );
    harness.key_press(Key::Enter);
    step_until_shown(&mut harness, "ready");
    assert!(
        !UiCommand::RunCommand
            .availability(&harness.state().command_context())
            .is_enabled(),
        "one run at a time"
    );
    let started = Instant::now();
    harness.get_by_label("Stop").click();
    wait_for_the_end(&mut harness);
    assert!(started.elapsed() < Duration::from_secs(15), "it stopped");
    assert!(harness.query_by_label("got INT").is_some());
    assert!(harness.query_by_label("not stopped").is_none());
    assert_eq!(
        harness.state().command_run().and_then(|r| r.exit_status()),
        Some(9)
    );
    assert!(
        harness
            .query_by_label_contains("stopped · exit status 9")
            .is_some()
    );
    // Stopped by the user: not diagnosed, but its folder opens.
    assert!(!run_folder(dir.path()).join("report.json").exists());
}

#[test]
fn the_proof_table_fills_in_as_re_runs_end() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (script, message) = crate::run_cli::fake_job(dir.path());
    let runs = dir.path().join("runs");
    let mut harness = harness(&runs);
    type_command(
        &mut harness,
        &format!("python3 {} {}", script.display(), message.display()),
    );
    harness
        .get_by_label("Prove a fix if it runs out of memory")
        .click();
    harness.run_steps(1);
    harness.get_by_label("Try every candidate").click();
    harness.get_by_label("Vary environment").focus();
    harness
        .get_by_label("Vary environment")
        .type_text("UNRELATED=1");
    harness.run_steps(1);
    harness.key_press(Key::Enter);
    wait_for_the_end(&mut harness);
    let proof: Vec<(String, String)> = harness
        .state()
        .command_run()
        .expect("the panel")
        .proof()
        .into_iter()
        .map(|run| (run.change, run.outcome))
        .collect();
    // The diagnosis's allocator settings first, then the declared change; every one tried.
    for row in [
        (
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
            "removed",
        ),
        ("UNRELATED=1", "ran_out"),
    ] {
        assert!(
            proof.contains(&(row.0.to_owned(), row.1.to_owned())),
            "{proof:?}"
        );
    }
    assert_eq!(
        proof.last().map(|(change, _)| change.as_str()),
        Some("UNRELATED=1")
    );
    for (change, _) in &proof {
        assert!(
            harness.query_by_label(change).is_some(),
            "a row for {change}"
        );
    }
    assert!(harness.query_by_label("removed the failure").is_some());
    assert!(
        !harness
            .query_all_by_label("ran out")
            .collect::<Vec<_>>()
            .is_empty()
    );
    assert!(harness.query_by_label("Replay's prediction").is_some());
    assert!(
        harness
            .query_by_label_contains("proven by a real run")
            .is_some(),
        "the diagnosis puts the proven change first"
    );
    let manifest = std::fs::read_to_string(run_folder(&runs).join("run.json")).expect("run.json");
    assert!(manifest.contains("\"proof\""), "{manifest}");
    // The run folder opened after the run: the Diagnose tab leads with the proof too.
    let primary = harness
        .state()
        .wizard()
        .diagnosis()
        .primary()
        .map(|f| f.title.clone())
        .unwrap_or_default();
    assert!(
        primary
            .starts_with("Proven by a real run: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
        "{primary}"
    );
}

#[test]
fn an_opened_run_folder_is_diagnosed_with_what_its_re_runs_proved() {
    let dir = tempfile::tempdir().expect("temp dir");
    let folder = crate::run_cli::proven_run_folder(dir.path());
    let log_name = format!(
        "{}/output.log",
        folder.file_name().expect("name").to_string_lossy()
    );
    let mut harness = harness(&dir.path().join("runs"));
    harness.state_mut().open_path(folder);
    step_until(&mut harness, "the run folder's log", |app| {
        app.wizard()
            .diagnosis()
            .inputs
            .iter()
            .any(|i| i.name == log_name)
    });
    harness.key_press_modifiers(Modifiers::COMMAND, Key::Num3);
    harness.run_steps(2);
    assert_eq!(harness.state().view(), View::Diagnose);
    assert!(
        harness
            .query_by_label_contains(&format!("So far: {}", crate::run_cli::PROVEN_TITLE))
            .is_some(),
        "the Diagnose tab leads with the proven fix"
    );
    // Out of memory → the evidence names the re-runs → the findings show the proven fix first.
    harness.get_by_label("Out of memory").click();
    harness.run_steps(2);
    harness.get_by_label("Next").click();
    harness.run_steps(2);
    assert!(
        harness
            .query_by_label_contains("proof vramscope run --prove: 2 re-run(s)")
            .is_some()
    );
    harness.get_by_label("Next").click();
    harness.run_steps(2);
    assert!(
        harness
            .query_by_label(&format!("1. {}", crate::run_cli::PROVEN_TITLE))
            .is_some()
    );
    assert!(harness.query_by_label("proven by a real run").is_some());
}
