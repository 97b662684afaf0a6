//! Quitting without losing notes: one small state machine instead of a set of flags.
//!
//! Notes added to a capture that no file holds yet would be lost when the window closes, so a
//! quit (File › Quit, Ctrl+Q or the window's close button) is held back and the user is asked:
//! save them first, quit anyway, or stay. [`QuitState`] says where that conversation is; the app
//! asks it what to do and sends the window the close command when it says so.

use egui::Key;

/// Where quitting stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QuitState {
    /// Nobody asked to quit.
    #[default]
    Running,
    /// A quit was held back: the "unsaved notes" question is shown.
    Asking,
    /// "Save as…" was chosen in the question: quit once the save succeeds.
    SavingThenQuit,
    /// The window is closing; `notes_discarded` when the user chose to drop unsaved notes (the
    /// close that follows must then not ask again).
    Closing { notes_discarded: bool },
}

/// The answer to the "unsaved notes" question.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuitChoice {
    /// Save the capture first, then quit.
    Save,
    /// Quit and lose the notes.
    Discard,
    /// Do not quit.
    Stay,
}

impl QuitState {
    /// Whether closing now would drop notes the user has not chosen to discard.
    pub fn would_lose_notes(self, unsaved_notes: usize) -> bool {
        unsaved_notes > 0
            && self
                != QuitState::Closing {
                    notes_discarded: true,
                }
    }

    /// Quit was asked for. Returns true when the window should close now; false when the
    /// question is shown instead.
    pub fn request(&mut self, unsaved_notes: usize) -> bool {
        if self.would_lose_notes(unsaved_notes) {
            *self = QuitState::Asking;
            return false;
        }
        let notes_discarded = *self
            == QuitState::Closing {
                notes_discarded: true,
            };
        *self = QuitState::Closing { notes_discarded };
        true
    }

    /// The window's close button was pressed. Returns true when the close must be cancelled
    /// (notes would be lost; the question is shown instead).
    pub fn hold_window_close(&mut self, unsaved_notes: usize) -> bool {
        if self.would_lose_notes(unsaved_notes) {
            *self = QuitState::Asking;
            return true;
        }
        false
    }

    /// The question was answered. Returns true when the window should close now.
    pub fn answer(&mut self, choice: QuitChoice) -> bool {
        match choice {
            QuitChoice::Save => {
                *self = QuitState::SavingThenQuit;
                false
            }
            QuitChoice::Discard => {
                *self = QuitState::Closing {
                    notes_discarded: true,
                };
                true
            }
            QuitChoice::Stay => {
                *self = QuitState::Running;
                false
            }
        }
    }

    /// A save finished successfully and `unsaved_notes` remain. Returns true when the window
    /// should close now (the save was the one the question asked for and every note is saved).
    pub fn save_succeeded(&mut self, unsaved_notes: usize) -> bool {
        *self == QuitState::SavingThenQuit && unsaved_notes == 0 && self.request(unsaved_notes)
    }

    /// The save chosen in the question failed or was cancelled: stay open (a later save must
    /// not quit the app).
    pub fn save_abandoned(&mut self) {
        if *self == QuitState::SavingThenQuit {
            *self = QuitState::Running;
        }
    }

    /// Whether the window was told to close.
    pub fn is_closing(self) -> bool {
        matches!(self, QuitState::Closing { .. })
    }
}

/// Unsaved notes of one session, for the question.
pub struct UnsavedNotes {
    /// Where the notes were added ("run.vramcap", "the live session").
    pub source: String,
    pub notes: usize,
}

/// Draws the "unsaved notes" question; returns the answer once given.
pub fn quit_question_ui(ctx: &egui::Context, waiting: &[UnsavedNotes]) -> Option<QuitChoice> {
    let mut choice = None;
    egui::Modal::new(egui::Id::unique("vramscope-unsaved-notes")).show(ctx, |ui| {
        ui.heading("Unsaved notes");
        for unsaved in waiting {
            ui.label(format!(
                "{} note(s) added to {} are not in any file yet.",
                unsaved.notes, unsaved.source
            ));
        }
        ui.label("Save the capture with File › Save as… to keep them.");
        ui.horizontal(|ui| {
            if ui.button("Save as…").clicked() {
                choice = Some(QuitChoice::Save);
            }
            if ui.button("Quit without saving").clicked() {
                choice = Some(QuitChoice::Discard);
            }
            if ui.button("Cancel").clicked() || ui.input(|i| i.key_pressed(Key::Escape)) {
                choice = Some(QuitChoice::Stay);
            }
        });
    });
    choice
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quitting_with_nothing_unsaved_closes_at_once() {
        let mut state = QuitState::Running;
        assert!(state.request(0));
        assert!(state.is_closing());
    }

    #[test]
    fn unsaved_notes_hold_the_quit_until_answered() {
        let mut state = QuitState::Running;
        assert!(!state.request(2));
        assert_eq!(state, QuitState::Asking);
        assert!(!state.answer(QuitChoice::Stay));
        assert_eq!(state, QuitState::Running);
        // The window's close button asks too.
        assert!(state.hold_window_close(2));
        assert_eq!(state, QuitState::Asking);
        assert!(state.answer(QuitChoice::Discard));
        // The close that follows is not held again.
        assert!(!state.hold_window_close(2));
        assert!(state.request(2));
        assert!(state.is_closing());
    }

    #[test]
    fn save_from_the_question_quits_only_once_everything_is_saved() {
        let mut state = QuitState::Asking;
        assert!(!state.answer(QuitChoice::Save));
        assert!(!state.save_succeeded(1), "another session still has notes");
        assert_eq!(state, QuitState::SavingThenQuit);
        assert!(state.save_succeeded(0));
        assert!(state.is_closing());
    }

    #[test]
    fn a_failed_or_cancelled_save_keeps_the_app_open() {
        let mut state = QuitState::SavingThenQuit;
        state.save_abandoned();
        assert_eq!(state, QuitState::Running);
        // An ordinary save later does not quit.
        assert!(!state.save_succeeded(0));
        assert_eq!(state, QuitState::Running);
    }
}
