//! The Run dialog (File › Run a command…): what `vramscope run` takes as arguments, as fields.
//! The fields are checked when the user presses Run (Enter); what is wrong is said under the
//! field it concerns, and nothing starts until every field reads.

use std::path::{Path, PathBuf};
use std::time::Duration;

use egui::{Key, RichText};
use vramscope_gpu::run::prove::parse_vary;
use vramscope_gpu::run::{
    DEFAULT_INTERVAL_MS, DEFAULT_LOG_LINES, HookOptions, ProveOptions, RunOptions, Stacks,
};

use super::command_line::{NOT_SUPPORTED, split_command_line};

/// The output folder's default, as `vramscope run --out`'s: inside the working directory.
pub const DEFAULT_RUNS_DIR: &str = "vramscope-runs";

/// The dialog's fields, to say which one an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Command,
    WorkingDir,
    RunsDir,
    Vary,
    VaryArg,
    Budget,
}

/// A run the dialog asked for: the command line as typed (the panel's title), and what to run.
#[derive(Clone, Debug)]
pub struct RunRequest {
    pub command_line: String,
    pub options: RunOptions,
    pub prove: ProveOptions,
}

/// What the dialog's user did this frame.
#[derive(Debug)]
pub enum DialogAnswer {
    Run(Box<RunRequest>),
    Cancelled,
}

/// The dialog: closed, or open with its fields as typed.
#[derive(Debug)]
pub struct RunDialog {
    open: bool,
    /// The command field takes the keyboard focus once, when the dialog opens.
    focus_pending: bool,
    pub command_line: String,
    /// Empty: the app's current directory.
    pub working_dir: String,
    /// Relative paths are inside the working directory.
    pub runs_dir: String,
    pub prove: bool,
    /// Try every candidate instead of stopping at the first that works (`--try-all`).
    pub try_all: bool,
    /// `NAME=V1,V2` entries separated by blanks.
    pub vary: String,
    /// `FLAG=V1,V2` entries separated by blanks.
    pub vary_arg: String,
    /// Seconds; empty for the default (twice the failed run's time).
    pub budget_s: String,
    pub stacks: Stacks,
    errors: Vec<(Field, String)>,
}

impl Default for RunDialog {
    fn default() -> Self {
        RunDialog {
            open: false,
            focus_pending: false,
            command_line: String::new(),
            working_dir: String::new(),
            runs_dir: DEFAULT_RUNS_DIR.to_owned(),
            prove: false,
            try_all: false,
            vary: String::new(),
            vary_arg: String::new(),
            budget_s: String::new(),
            stacks: Stacks::Python,
            errors: Vec::new(),
        }
    }
}

/// The `NAME=V1,V2` entries of a vary field (blank-separated).
fn parse_vary_field(text: &str) -> Result<Vec<(String, Vec<String>)>, String> {
    text.split_whitespace().map(parse_vary).collect()
}

impl RunDialog {
    /// Opens the dialog, keeping what was typed last time; the working directory starts as the
    /// app's current one.
    pub fn open(&mut self) {
        self.open = true;
        self.focus_pending = true;
        self.errors.clear();
        if self.working_dir.trim().is_empty() {
            self.working_dir = std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default();
        }
    }

    /// Whether the dialog is showing.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// The errors of the last Run press, by field.
    pub fn errors(&self) -> &[(Field, String)] {
        &self.errors
    }

    /// The run the fields describe, or what is wrong with them, field by field.
    pub fn request(&self) -> Result<RunRequest, Vec<(Field, String)>> {
        let mut errors = Vec::new();
        let line = split_command_line(&self.command_line)
            .map_err(|e| errors.push((Field::Command, e)))
            .ok();
        let working_dir = crate::dialogs::expand_home(self.working_dir.trim());
        if !working_dir.is_dir() {
            errors.push((
                Field::WorkingDir,
                format!("{} is not a folder", working_dir.display()),
            ));
        }
        let runs_dir = match self.runs_dir.trim() {
            "" => {
                errors.push((Field::RunsDir, "Say where run folders go".to_owned()));
                PathBuf::new()
            }
            dir => working_dir.join(crate::dialogs::expand_home(dir)),
        };
        let mut field = |field: Field, text: &str| {
            if !self.prove {
                return Vec::new();
            }
            parse_vary_field(text).unwrap_or_else(|e| {
                errors.push((field, e));
                Vec::new()
            })
        };
        let vary = field(Field::Vary, &self.vary);
        let vary_arg = field(Field::VaryArg, &self.vary_arg);
        let budget = match self.budget_s.trim() {
            "" => None,
            text => match text.parse::<u64>() {
                Ok(secs) if secs > 0 => Some(Duration::from_secs(secs)),
                _ => {
                    errors.push((
                        Field::Budget,
                        format!("'{text}' is not a number of seconds above 0"),
                    ));
                    None
                }
            },
        };
        let Some(line) = line.filter(|_| errors.is_empty()) else {
            return Err(errors);
        };
        Ok(RunRequest {
            command_line: self.command_line.trim().to_owned(),
            options: run_options(line, working_dir, runs_dir, self.stacks),
            prove: ProveOptions {
                enabled: self.prove,
                try_all: self.prove && self.try_all,
                vary,
                vary_arg,
                budget,
            },
        })
    }

    /// Draws the dialog when it is open; returns the user's answer once given.
    pub fn ui(&mut self, ctx: &egui::Context) -> Option<DialogAnswer> {
        if !self.open {
            return None;
        }
        let mut answer = None;
        egui::Modal::new(egui::Id::unique("vramscope-run-dialog")).show(ctx, |ui| {
            ui.set_width(620.0);
            ui.heading("Run a command");
            ui.label(
                "Runs it as vramscope run does: its output, the GPUs' timeline and, for \
                 PyTorch, the allocator's history are recorded in a run folder with no change \
                 to its code; the folder opens here when it ends.",
            );
            ui.add_space(6.0);
            self.fields_ui(ui);
            ui.add_space(6.0);
            let (enter, escape) =
                ui.input(|i| (i.key_pressed(Key::Enter), i.key_pressed(Key::Escape)));
            ui.horizontal(|ui| {
                if ui.button("Run").clicked() || enter {
                    answer = Some(true);
                }
                if ui.button("Cancel").clicked() || escape {
                    answer = Some(false);
                }
            });
        });
        match answer? {
            true => match self.request() {
                Ok(request) => {
                    self.open = false;
                    self.errors.clear();
                    Some(DialogAnswer::Run(Box::new(request)))
                }
                Err(errors) => {
                    self.errors = errors;
                    None
                }
            },
            false => {
                self.open = false;
                Some(DialogAnswer::Cancelled)
            }
        }
    }

    /// The fields, each with its error of the last Run press under it.
    fn fields_ui(&mut self, ui: &mut egui::Ui) {
        let errors = self.errors.clone();
        let error_ui = |ui: &mut egui::Ui, field: Field| {
            for (_, error) in errors.iter().filter(|(f, _)| *f == field) {
                ui.label(RichText::new(error).color(ui.visuals().error_fg_color));
            }
        };
        let command = text_field(
            ui,
            "Command line",
            &mut self.command_line,
            "python train.py --batch-size 32",
        );
        if self.focus_pending {
            command.request_focus();
            self.focus_pending = false;
        }
        error_ui(ui, Field::Command);
        ui.label(RichText::new(NOT_SUPPORTED).weak().small());
        text_field(
            ui,
            "Working directory",
            &mut self.working_dir,
            "the folder the job starts in",
        );
        error_ui(ui, Field::WorkingDir);
        text_field(
            ui,
            "Output folder",
            &mut self.runs_dir,
            "where run folders go (inside the working directory unless absolute)",
        );
        error_ui(ui, Field::RunsDir);
        ui.horizontal(|ui| {
            ui.label("Allocator stacks");
            for (stacks, label, hint) in [
                (
                    Stacks::Python,
                    "Python",
                    "Python frames of every allocation (the default)",
                ),
                (
                    Stacks::All,
                    "Python and C++",
                    "Adds C++ frames: the costliest recording",
                ),
                (
                    Stacks::None,
                    "None",
                    "Every allocation and free without frames: the cheapest",
                ),
            ] {
                ui.radio_value(&mut self.stacks, stacks, label)
                    .on_hover_text(hint);
            }
        });
        ui.checkbox(&mut self.prove, "Prove a fix if it runs out of memory")
            .on_hover_text(
                "Re-run the job under the diagnosis's candidate fixes and the changes below, \
                 until one removes the failure (vramscope run --prove)",
            );
        ui.add_enabled_ui(self.prove, |ui| {
            ui.checkbox(&mut self.try_all, "Try every candidate")
                .on_hover_text("Go on after the first change that works, to compare them all");
            text_field(
                ui,
                "Vary environment",
                &mut self.vary,
                "NAME=V1,V2 (several: separate by blanks)",
            );
            error_ui(ui, Field::Vary);
            text_field(
                ui,
                "Vary argument",
                &mut self.vary_arg,
                "--batch-size=16,8 (replaces the value the command passes)",
            );
            error_ui(ui, Field::VaryArg);
            text_field(
                ui,
                "Budget per re-run (s)",
                &mut self.budget_s,
                "default: twice the failed run's time",
            );
            error_ui(ui, Field::Budget);
        });
    }
}

/// A labelled one-line field the width of the dialog.
fn text_field(ui: &mut egui::Ui, label: &str, text: &mut String, hint: &str) -> egui::Response {
    ui.horizontal(|ui| {
        let label = ui.add_sized([150.0, 20.0], egui::Label::new(label));
        ui.add(
            egui::TextEdit::singleline(text)
                .hint_text(hint)
                .desired_width(f32::INFINITY),
        )
        .labelled_by(label.id)
    })
    .inner
}

/// The options of a run from the dialog: `vramscope run`'s defaults but for the fields.
fn run_options(
    line: super::command_line::CommandLine,
    working_dir: PathBuf,
    runs_dir: PathBuf,
    stacks: Stacks,
) -> RunOptions {
    RunOptions {
        command: line.command,
        runs_dir: absolute(&runs_dir),
        name: None,
        hook: HookOptions {
            stacks,
            ..HookOptions::default()
        },
        interval_ms: DEFAULT_INTERVAL_MS,
        log_lines: DEFAULT_LOG_LINES,
        extra_env: line.env,
        // The app has no terminal: the output goes to the run panel.
        echo: false,
        budget: None,
        working_dir: Some(absolute(&working_dir)),
        output: None,
    }
}

/// `path` made absolute against the app's current directory (unchanged if that fails).
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dialog() -> RunDialog {
        let mut dialog = RunDialog::default();
        dialog.open();
        dialog
    }

    #[test]
    fn the_fields_make_the_run_vramscope_run_would_make() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut dialog = dialog();
        dialog.command_line = "CUDA_VISIBLE_DEVICES=1 python train.py --batch-size 32".to_owned();
        dialog.working_dir = dir.path().display().to_string();
        dialog.prove = true;
        dialog.vary = "A=1,2  B=x".to_owned();
        dialog.vary_arg = "--batch-size=16,8".to_owned();
        dialog.budget_s = "90".to_owned();
        dialog.stacks = Stacks::None;
        let request = dialog.request().expect("valid");
        assert_eq!(
            request.options.command,
            ["python", "train.py", "--batch-size", "32"]
        );
        assert_eq!(
            request.options.extra_env,
            [("CUDA_VISIBLE_DEVICES".to_owned(), "1".to_owned())]
        );
        assert_eq!(request.options.working_dir.as_deref(), Some(dir.path()));
        assert_eq!(request.options.runs_dir, dir.path().join(DEFAULT_RUNS_DIR));
        assert_eq!(request.options.hook.stacks, Stacks::None);
        assert!(!request.options.echo);
        assert_eq!(request.prove.vary.len(), 2);
        assert_eq!(
            request.prove.vary_arg,
            [(
                "--batch-size".to_owned(),
                vec!["16".to_owned(), "8".to_owned()]
            )]
        );
        assert_eq!(request.prove.budget, Some(Duration::from_secs(90)));
        // Without the proof, its fields are not read (they are greyed out).
        dialog.prove = false;
        dialog.vary = "not a vary".to_owned();
        let request = dialog.request().expect("valid without proof");
        assert!(!request.prove.enabled && request.prove.vary.is_empty());
    }

    #[test]
    fn every_bad_field_is_named_with_its_problem() {
        let mut dialog = dialog();
        dialog.command_line = "python train.py | tee log".to_owned();
        dialog.working_dir = "/no/such/folder/vramscope".to_owned();
        dialog.runs_dir = " ".to_owned();
        dialog.prove = true;
        dialog.vary = "A=1 NOVALUES".to_owned();
        dialog.vary_arg = "=3".to_owned();
        dialog.budget_s = "0".to_owned();
        let errors = dialog.request().expect_err("nothing reads");
        let fields: Vec<Field> = errors.iter().map(|(f, _)| *f).collect();
        assert_eq!(
            fields,
            [
                Field::Command,
                Field::WorkingDir,
                Field::RunsDir,
                Field::Vary,
                Field::VaryArg,
                Field::Budget
            ]
        );
        assert!(errors[0].1.contains("pipes"), "{errors:?}");
        assert!(errors[3].1.contains("NOVALUES"), "{errors:?}");
    }
}
