//! Every user action of the app as one [`Command`]: its menu text, tooltip, keyboard shortcut and
//! whether it can run now live together here, so a menu item, a button in a view and a shortcut
//! can never disagree about what an action is called or when it is allowed.
//!
//! Views do not act on the app: they send commands through a [`CommandSender`], and the app runs
//! everything it received in one place (`VramscopeApp::run_command`) once per frame. The shape
//! follows rerun's `re_ui` crate (`crates/viewer/re_ui/src/command.rs`, github.com/rerun-io/rerun):
//! one enum of user actions with text, tooltip and shortcut together.

use std::sync::mpsc::{Receiver, Sender, channel};

use egui::{Key, KeyboardShortcut, Modifiers};

use super::export::TimelineExport;
use super::views::View;
use super::wizard::AllocatorTabRequest;

/// One thing the user can ask the app to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Open a capture, snapshot or log (a dialog or the in-app path field asks which).
    Open,
    /// Open every new snapshot written to a folder (desktop only).
    WatchFolder,
    /// Stop watching the folder.
    StopWatching,
    /// Write the shown capture to a new `.vramcap` file.
    SaveAs,
    /// Start recording the live source, or stop the running recording.
    ToggleRecording,
    /// Write the shown timeline as a review image, CSV tables or a Perfetto trace.
    ExportTimeline(TimelineExport),
    /// Write the diagnosis report (HTML, Markdown or JSON by the file's extension).
    ExportReport,
    /// Close the window (asking first when notes would be lost).
    Quit,
    /// Show one of the main views.
    ShowView(View),
    /// Open the settings window.
    ShowSettings,
    /// Add the note typed in the top bar to the shown capture.
    AddNote,
    /// Show a snapshot's GPU in the Allocator tab (the Fragmentation wizard's figures ask this).
    ShowInAllocatorTab(AllocatorTabRequest),
    /// Play the simulated demo machine this many times faster than real time.
    SetDemoSpeed(u32),
    /// Open one GPU of the fleet shown (by device index) as a session of its own: its timeline,
    /// processes and devices panel (a click on its row in the fleet view asks this).
    OpenFleetGpu(u32),
}

/// Whether a command can run now, and if not, why (shown as the disabled item's tooltip).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Availability {
    Enabled,
    Disabled(&'static str),
}

impl Availability {
    /// Whether the command can run.
    pub fn is_enabled(self) -> bool {
        self == Availability::Enabled
    }
}

/// What the commands' enabled checks look at, gathered from the app once per frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommandContext {
    /// The view the central area shows.
    pub view: View,
    /// A capture or the live machine is open (something to save or draw).
    pub has_session: bool,
    /// The diagnosis has evidence, or a live capture has samples.
    pub has_report_evidence: bool,
    /// A folder is being watched.
    pub watching: bool,
    /// The simulated demo machine is being sampled live.
    pub demo_running: bool,
    /// The build has a file system, threads and dialogs (not the web viewer).
    pub native: bool,
}

/// Ctrl+`key` (Cmd+`key` on macOS).
const fn command_key(key: Key) -> KeyboardShortcut {
    KeyboardShortcut::new(Modifiers::COMMAND, key)
}

impl Command {
    /// The commands that have a keyboard shortcut, in the order they are matched: shortcuts with
    /// Shift first, because egui also matches Ctrl+Shift+E against a plain Ctrl+E.
    pub const WITH_SHORTCUTS: [Command; 11] = [
        Command::ExportReport,
        Command::Open,
        Command::SaveAs,
        Command::ToggleRecording,
        Command::ExportTimeline(TimelineExport::Png),
        Command::Quit,
        Command::ShowView(View::Timeline),
        Command::ShowView(View::Allocator),
        Command::ShowView(View::Diagnose),
        Command::ShowView(View::HardwareChecks),
        Command::ShowSettings,
    ];

    /// The menu or button text.
    pub fn label(&self) -> &'static str {
        match self {
            Command::Open => "Open…",
            Command::WatchFolder => "Watch folder…",
            Command::StopWatching => "Stop watching folder",
            Command::SaveAs => "Save recording as…",
            Command::ToggleRecording => "Record",
            Command::ExportTimeline(export) => export.menu_label(),
            Command::ExportReport => "Export report…",
            Command::Quit => "Quit",
            Command::ShowView(view) => view.label(),
            Command::ShowSettings => "Settings…",
            Command::AddNote => "Add note",
            Command::ShowInAllocatorTab(_) => "Open in Allocator tab",
            Command::SetDemoSpeed(_) => "Demo speed",
            Command::OpenFleetGpu(_) => "Open this GPU",
        }
    }

    /// What the command does, for tooltips.
    pub fn tooltip(&self) -> &'static str {
        match self {
            Command::Open => "Open a .vramcap capture, a PyTorch snapshot or a log",
            Command::WatchFolder => {
                "Open every new PyTorch snapshot written to a folder, as it appears"
            }
            Command::StopWatching => "Stop opening new snapshots from the watched folder",
            Command::SaveAs => "Write the shown capture to a new .vramcap file",
            Command::ToggleRecording => "Start recording to a new .vramcap file",
            Command::ExportTimeline(export) => export.menu_hint(),
            Command::ExportReport => {
                "The diagnosis of every opened file as HTML, Markdown or JSON (by the file's \
                 extension)"
            }
            Command::Quit => "Close vramscope (asks first when notes are not saved)",
            Command::ShowView(view) => view.description(),
            Command::ShowSettings => "Threshold, sampling interval, follow window and theme",
            Command::AddNote => "Add the note at the current time (live) or the last hovered time",
            Command::ShowInAllocatorTab(_) => {
                "Time travel, OOM details and block details of this snapshot"
            }
            Command::SetDemoSpeed(_) => {
                "Play the simulated machine's day faster than real time (its OOM comes 8 minutes \
                 in at 1×)"
            }
            Command::OpenFleetGpu(_) => {
                "Show this GPU's timeline, processes and devices panel as a source of its own"
            }
        }
    }

    /// The keyboard shortcut, if the command has one.
    pub fn shortcut(&self) -> Option<KeyboardShortcut> {
        match self {
            Command::Open => Some(command_key(Key::O)),
            Command::SaveAs => Some(command_key(Key::S)),
            Command::ToggleRecording => Some(command_key(Key::R)),
            Command::ExportTimeline(TimelineExport::Png) => Some(command_key(Key::E)),
            Command::ExportReport => Some(KeyboardShortcut::new(
                Modifiers {
                    shift: true,
                    ..Modifiers::COMMAND
                },
                Key::E,
            )),
            Command::Quit => Some(command_key(Key::Q)),
            Command::ShowView(view) => Some(command_key(match view {
                View::Timeline => Key::Num1,
                View::Allocator => Key::Num2,
                View::Diagnose => Key::Num3,
                View::HardwareChecks => Key::Num4,
            })),
            Command::ShowSettings => Some(command_key(Key::Comma)),
            Command::ExportTimeline(_)
            | Command::WatchFolder
            | Command::StopWatching
            | Command::AddNote
            | Command::ShowInAllocatorTab(_)
            | Command::SetDemoSpeed(_)
            | Command::OpenFleetGpu(_) => None,
        }
    }

    /// Whether the command can run in `context`. Commands that are always offered but have
    /// nothing to act on (Save with nothing open) stay enabled and explain in a notice instead.
    pub fn availability(&self, context: &CommandContext) -> Availability {
        match self {
            Command::ExportTimeline(_)
                if context.view != View::Timeline || !context.has_session =>
            {
                Availability::Disabled("Show a capture in the Timeline view first")
            }
            Command::ExportReport if !context.has_report_evidence => {
                Availability::Disabled("Open a capture, snapshot or log first")
            }
            Command::WatchFolder | Command::StopWatching if !context.native => {
                Availability::Disabled("Watching a folder needs the desktop app")
            }
            Command::StopWatching if !context.watching => {
                Availability::Disabled("No folder is being watched")
            }
            Command::AddNote if !context.has_session => {
                Availability::Disabled("Open a capture or start a live source first")
            }
            Command::SetDemoSpeed(_) if !context.demo_running => {
                Availability::Disabled("Only the simulated demo machine runs at a chosen speed")
            }
            _ => Availability::Enabled,
        }
    }

    /// The shortcut as the user's platform writes it ("Ctrl+O", "⌘O"), if there is one.
    pub fn shortcut_text(&self, ctx: &egui::Context) -> Option<String> {
        self.shortcut()
            .map(|shortcut| ctx.format_shortcut(&shortcut))
    }

    /// The tooltip with the shortcut added, e.g. "Open a capture… (Ctrl+O)".
    pub fn tooltip_with_shortcut(&self, ctx: &egui::Context) -> String {
        match self.shortcut_text(ctx) {
            Some(shortcut) => format!("{} ({shortcut})", self.tooltip()),
            None => self.tooltip().to_owned(),
        }
    }

    /// The commands whose shortcuts were pressed this frame (the key presses are consumed so
    /// that no widget also acts on them).
    pub fn pressed(ctx: &egui::Context) -> Vec<Command> {
        ctx.input_mut(|input| {
            Command::WITH_SHORTCUTS
                .into_iter()
                .filter(|command| {
                    command
                        .shortcut()
                        .is_some_and(|shortcut| input.consume_shortcut(&shortcut))
                })
                .collect()
        })
    }

    /// A menu item for this command: its label and shortcut, greyed out with the reason when it
    /// cannot run; a click sends it and closes the menu.
    pub fn menu_item_ui(
        self,
        ui: &mut egui::Ui,
        context: &CommandContext,
        sender: &CommandSender,
    ) -> egui::Response {
        let mut button = egui::Button::new(self.label());
        if let Some(shortcut) = self.shortcut_text(ui.ctx()) {
            button = button.shortcut_text(shortcut);
        }
        let availability = self.availability(context);
        let mut response = ui
            .add_enabled(availability.is_enabled(), button)
            .on_hover_text(self.tooltip());
        if let Availability::Disabled(why) = availability {
            response = response.on_disabled_hover_text(why);
        }
        if response.clicked() {
            ui.close();
            sender.send(self);
        }
        response
    }
}

/// Where views send commands; cheap to clone, one per view that needs it.
#[derive(Clone, Debug)]
pub struct CommandSender(Sender<Command>);

impl CommandSender {
    /// Queues `command` for the app to run at the end of this frame.
    pub fn send(&self, command: Command) {
        // The receiver lives as long as the app; once it is gone nobody runs commands any more.
        let _ = self.0.send(command);
    }
}

/// The app's end of the command queue.
#[derive(Debug)]
pub struct CommandQueue {
    sender: CommandSender,
    receiver: Receiver<Command>,
}

impl Default for CommandQueue {
    fn default() -> Self {
        let (sender, receiver) = channel();
        CommandQueue {
            sender: CommandSender(sender),
            receiver,
        }
    }
}

impl CommandQueue {
    /// A sender for a view.
    pub fn sender(&self) -> CommandSender {
        self.sender.clone()
    }

    /// The next command sent and not run yet. Never blocks.
    pub fn next(&self) -> Option<Command> {
        self.receiver.try_recv().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_commands_share_a_shortcut() {
        let shortcuts: Vec<KeyboardShortcut> = Command::WITH_SHORTCUTS
            .iter()
            .filter_map(Command::shortcut)
            .collect();
        for (i, a) in shortcuts.iter().enumerate() {
            for b in &shortcuts[i + 1..] {
                assert_ne!(a, b, "two commands use {a:?}");
            }
        }
        assert_eq!(shortcuts.len(), Command::WITH_SHORTCUTS.len());
    }

    #[test]
    fn shift_shortcuts_are_matched_before_their_plain_twins() {
        let position = |command: Command| {
            Command::WITH_SHORTCUTS
                .iter()
                .position(|c| *c == command)
                .unwrap_or(usize::MAX)
        };
        assert!(
            position(Command::ExportReport)
                < position(Command::ExportTimeline(TimelineExport::Png))
        );
    }

    #[test]
    fn every_view_has_its_own_numbered_shortcut() {
        for view in View::ALL {
            let command = Command::ShowView(view);
            assert!(Command::WITH_SHORTCUTS.contains(&command), "{view:?}");
            assert_eq!(command.label(), view.label());
        }
    }

    #[test]
    fn exports_are_disabled_until_there_is_something_to_export() {
        let empty = CommandContext {
            view: View::Timeline,
            native: true,
            ..Default::default()
        };
        assert_eq!(
            Command::ExportTimeline(TimelineExport::Png).availability(&empty),
            Availability::Disabled("Show a capture in the Timeline view first")
        );
        assert!(!Command::ExportReport.availability(&empty).is_enabled());
        assert!(!Command::AddNote.availability(&empty).is_enabled());
        let shown = CommandContext {
            has_session: true,
            has_report_evidence: true,
            ..empty
        };
        assert!(
            Command::ExportTimeline(TimelineExport::Png)
                .availability(&shown)
                .is_enabled()
        );
        assert!(Command::ExportReport.availability(&shown).is_enabled());
        let elsewhere = CommandContext {
            view: View::Allocator,
            ..shown
        };
        assert!(
            !Command::ExportTimeline(TimelineExport::Png)
                .availability(&elsewhere)
                .is_enabled()
        );
        // Always offered: they explain in a notice when there is nothing to act on.
        for command in [Command::Open, Command::SaveAs, Command::Quit] {
            assert!(command.availability(&empty).is_enabled(), "{command:?}");
        }
        let web = CommandContext {
            native: false,
            ..shown
        };
        assert!(!Command::WatchFolder.availability(&web).is_enabled());
        assert!(!Command::SetDemoSpeed(60).availability(&shown).is_enabled());
        let demo = CommandContext {
            demo_running: true,
            ..shown
        };
        assert!(Command::SetDemoSpeed(60).availability(&demo).is_enabled());
    }

    #[test]
    fn sent_commands_come_out_in_order() {
        let queue = CommandQueue::default();
        let sender = queue.sender();
        sender.send(Command::Open);
        queue.sender().send(Command::ShowView(View::Diagnose));
        assert_eq!(queue.next(), Some(Command::Open));
        assert_eq!(queue.next(), Some(Command::ShowView(View::Diagnose)));
        assert_eq!(queue.next(), None);
    }
}
