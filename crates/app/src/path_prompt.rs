//! Asking for a path: the native file dialog, or an in-app path field where no dialog can appear
//! (no desktop portal or zenity, e.g. over `ssh -X`) or the dialog came back at once without the
//! user seeing it. The web viewer has no file system and says so instead.

use std::path::PathBuf;

use egui::Key;

use super::dialogs::{FileDialogs, expand_home, path_in_home};
use super::export::TimelineExport;
use super::notices::{NoticeLevel, Notices};

/// A native dialog that returns "nothing chosen" faster than this never reached the screen (a
/// person cannot cancel a dialog that quickly): the in-app path field asks instead.
const DIALOG_FAILED_WITHIN: std::time::Duration = std::time::Duration::from_millis(150);

/// What a path is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathAction {
    Open,
    Save,
    /// Only the desktop app watches folders (the web viewer has no file system).
    #[cfg_attr(not(feature = "native"), allow(dead_code))]
    WatchFolder,
    ExportTimeline(TimelineExport),
    ExportReport,
}

impl PathAction {
    fn title(self) -> &'static str {
        match self {
            PathAction::Open => "Open a file",
            PathAction::Save => "Save the capture as",
            PathAction::WatchFolder => "Watch a folder for new snapshots",
            PathAction::ExportTimeline(export) => export.dialog().0,
            PathAction::ExportReport => "Export the diagnosis report",
        }
    }

    /// Whether the action writes the chosen file (and so must ask before replacing one).
    fn writes(self) -> bool {
        matches!(
            self,
            PathAction::Save | PathAction::ExportTimeline(_) | PathAction::ExportReport
        )
    }

    fn hint(self) -> &'static str {
        match self {
            PathAction::Open => "path of a .vramcap capture, a snapshot (.pickle, .json) or a log",
            PathAction::Save => "path of the .vramcap file to write",
            PathAction::WatchFolder => "path of the folder",
            PathAction::ExportTimeline(TimelineExport::Csv) => "path of the .csv file to write",
            PathAction::ExportTimeline(TimelineExport::Perfetto) => {
                "path of the .json trace to write"
            }
            PathAction::ExportTimeline(_) => "path of the .png file to write",
            PathAction::ExportReport => "path ending in .html, .md or .json",
        }
    }
}

/// The in-app path field's state.
struct PathPrompt {
    action: PathAction,
    text: String,
    why: String,
    /// Not shown yet: the first frame focuses the field and selects the suggested path, so
    /// typing replaces it.
    fresh: bool,
    /// An existing file the user was asked about: OK on the same path replaces it.
    replace: Option<PathBuf>,
}

/// What the in-app path field was answered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PromptAnswer {
    /// A path was typed for `action`.
    Chosen(PathAction, PathBuf),
    /// The field was cancelled.
    Cancelled(PathAction),
}

/// The file dialogs and, when they cannot be used, the in-app path field.
pub struct PathAsker {
    dialogs: Box<dyn FileDialogs>,
    prompt: Option<PathPrompt>,
}

impl PathAsker {
    /// Asks through `dialogs` when they can appear.
    pub fn new(dialogs: Box<dyn FileDialogs>) -> Self {
        PathAsker {
            dialogs,
            prompt: None,
        }
    }

    /// Whether the in-app path field is shown.
    pub fn prompt_open(&self) -> bool {
        self.prompt.is_some()
    }

    /// Asks for a path with the native dialog and returns it. Where no dialog can appear, or it
    /// came back at once, the in-app field asks instead (its answer comes from
    /// [`Self::prompt_ui`]) and this returns `None`, as it does when the user cancels.
    pub fn ask(
        &mut self,
        action: PathAction,
        suggested_name: &str,
        notices: &mut Notices,
    ) -> Option<PathBuf> {
        if !cfg!(feature = "native") {
            // The web viewer has no file system: files come in by drag and drop, and saving or
            // exporting to a file needs the desktop app.
            notices.push(
                NoticeLevel::Info,
                match action {
                    PathAction::Open => "Drop the file on the page to open it in the web viewer.",
                    _ => "Writing files needs the desktop app; the web viewer only shows files.",
                },
            );
            return None;
        }
        let prompt = |why: &str| PathPrompt {
            action,
            text: path_in_home(suggested_name),
            why: why.to_owned(),
            fresh: true,
            replace: None,
        };
        if !self.dialogs.available() {
            self.prompt = Some(prompt(
                "No file dialog is available here (no desktop portal or zenity), so type the path.",
            ));
            return None;
        }
        let asked = web_time::Instant::now();
        let picked = match action {
            PathAction::Open => self.dialogs.pick_file_to_open(),
            PathAction::Save => self.dialogs.pick_save_path(suggested_name),
            PathAction::WatchFolder => self.dialogs.pick_folder(),
            PathAction::ExportTimeline(export) => {
                self.dialogs.pick_export_path(export, suggested_name)
            }
            PathAction::ExportReport => self.dialogs.pick_report_path(suggested_name),
        };
        if picked.is_none()
            && self.dialogs.instant_none_means_failure()
            && asked.elapsed() < DIALOG_FAILED_WITHIN
        {
            self.prompt = Some(prompt(
                "The file dialog did not open (it returned at once), so type the path.",
            ));
        }
        picked
    }

    /// Draws the in-app path field, if shown; returns its answer once given.
    pub fn prompt_ui(&mut self, ctx: &egui::Context) -> Option<PromptAnswer> {
        let prompt = self.prompt.as_mut()?;
        let mut submitted = None;
        egui::Modal::new(egui::Id::unique("vramscope-path-prompt")).show(ctx, |ui| {
            ui.heading(prompt.action.title());
            ui.label(&prompt.why);
            let field = ui.add(
                egui::TextEdit::singleline(&mut prompt.text)
                    .hint_text(prompt.action.hint())
                    .desired_width(480.0),
            );
            if prompt.fresh {
                prompt.fresh = false;
                field.request_focus();
                if let Some(mut state) = egui::TextEdit::load_state(ui.ctx(), field.id) {
                    state
                        .cursor
                        .set_char_range(Some(egui::text::CCursorRange::select_all_str(
                            &prompt.text,
                        )));
                    state.store(ui.ctx(), field.id);
                }
            }
            // Enter submits whether or not the field still has the focus (a single-line field
            // gives it up on Enter).
            let entered = ui.input(|i| i.key_pressed(Key::Enter));
            ui.horizontal(|ui| {
                if ui.button("OK").clicked() || entered {
                    submitted = Some(true);
                }
                if ui.button("Cancel").clicked() || ui.input(|i| i.key_pressed(Key::Escape)) {
                    submitted = Some(false);
                }
            });
        });
        match submitted? {
            true => {
                let text = prompt.text.trim();
                if text.is_empty() {
                    return None;
                }
                let path = expand_home(text);
                // A typed path that names an existing file is replaced only on a second OK.
                if prompt.action.writes()
                    && path.is_file()
                    && prompt.replace.as_ref() != Some(&path)
                {
                    prompt.why = format!(
                        "{} exists. Press OK again to replace it, or change the name.",
                        path.display()
                    );
                    prompt.replace = Some(path);
                    return None;
                }
                let answer = PromptAnswer::Chosen(prompt.action, path);
                self.prompt = None;
                Some(answer)
            }
            false => {
                let action = prompt.action;
                self.prompt = None;
                Some(PromptAnswer::Cancelled(action))
            }
        }
    }
}
