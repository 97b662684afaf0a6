//! Every user action of the app: [`UiCommand`]s, which carry no data (their menu text, tooltip,
//! keyboard shortcut and whether they can run now live together here, so that a menu item, a
//! button, a shortcut and the command palette can never disagree about what an action is called
//! or when it is allowed), and [`AppEvent`]s, the actions that carry data (a snapshot to show, a
//! demo speed, a GPU of the fleet), which views send from what the user clicked.
//!
//! Views do not act on the app: they send through a [`CommandSender`], and the app runs
//! everything it received in one place (`VramscopeApp::run_command` and `handle_event`) once per
//! frame. The shape follows rerun's `re_ui` crate (`crates/viewer/re_ui/src/command.rs`,
//! github.com/rerun-io/rerun): a payload-free `UICommand` beside a `SystemCommand` for actions
//! with data.

use std::sync::mpsc::{Receiver, Sender, channel};

use egui::{Key, KeyboardShortcut, Modifiers};

use crate::export::TimelineExport;
use crate::nav::{AllocatorTabRequest, View};

/// One thing the user can ask the app to do, with no data attached: every command can be listed,
/// bound to a key and offered by the command palette.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UiCommand {
    /// Open a capture, snapshot or log (a dialog or the in-app path field asks which).
    Open,
    /// Open every new snapshot written to a folder (desktop only).
    WatchFolder,
    /// Stop watching the folder.
    StopWatching,
    /// Run a command as `vramscope run` does, with its output, timeline and proof shown live
    /// (desktop only).
    RunCommand,
    /// Write the shown capture to a new `.vramcap` file.
    SaveAs,
    /// Start recording the live source, or stop the running recording.
    ToggleRecording,
    /// Write the shown timeline as a review image.
    ExportTimelinePng,
    /// The same image at twice the pixels.
    ExportTimelinePng2x,
    /// Write the shown timeline as CSV tables.
    ExportTimelineCsv,
    /// Write the shown timeline as a Chrome/Perfetto trace.
    ExportTimelinePerfetto,
    /// Write the diagnosis report (HTML, Markdown or JSON by the file's extension).
    ExportReport,
    /// Close the window (asking first when notes would be lost).
    Quit,
    /// Show the memory timeline.
    ShowTimeline,
    /// Show the allocator view.
    ShowAllocator,
    /// Show two opened snapshots side by side in the allocator view.
    CompareSnapshots,
    /// Show the diagnosis wizards.
    ShowDiagnose,
    /// Show the hardware checks.
    ShowHardwareChecks,
    /// Open the settings window.
    ShowSettings,
    /// Add the note typed in the top bar to the shown capture.
    AddNote,
    /// Open the command palette: every command, searchable by name.
    CommandPalette,
}

/// An action with data, sent by a view from what the user clicked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppEvent {
    /// Show a snapshot's GPU in the Allocator tab (the Fragmentation wizard's figures ask this).
    ShowInAllocatorTab(AllocatorTabRequest),
    /// Play the simulated demo machine this many times faster than real time.
    SetDemoSpeed(u32),
    /// Open one GPU of the fleet shown (by device index) as a session of its own: its timeline,
    /// processes and devices panel (a click on its row in the fleet view asks this).
    OpenFleetGpu(u32),
}

/// What travels from the views to the app: a command or an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Command(UiCommand),
    Event(AppEvent),
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
    /// Allocator snapshots open (a comparison needs two).
    pub snapshots_open: usize,
    /// A command started with Run a command… is still running.
    pub command_running: bool,
}

/// Ctrl+`key` (Cmd+`key` on macOS).
const fn command_key(key: Key) -> KeyboardShortcut {
    KeyboardShortcut::new(Modifiers::COMMAND, key)
}

/// Ctrl+Shift+`key` (Cmd+Shift+`key` on macOS).
const fn command_shift_key(key: Key) -> KeyboardShortcut {
    KeyboardShortcut::new(
        Modifiers {
            alt: false,
            ctrl: false,
            shift: true,
            mac_cmd: false,
            command: true,
        },
        key,
    )
}

impl UiCommand {
    /// Every command, in the order the command palette lists them.
    pub const ALL: [UiCommand; 20] = [
        UiCommand::Open,
        UiCommand::RunCommand,
        UiCommand::SaveAs,
        UiCommand::ToggleRecording,
        UiCommand::ShowTimeline,
        UiCommand::ShowAllocator,
        UiCommand::CompareSnapshots,
        UiCommand::ShowDiagnose,
        UiCommand::ShowHardwareChecks,
        UiCommand::ExportTimelinePng,
        UiCommand::ExportTimelinePng2x,
        UiCommand::ExportTimelineCsv,
        UiCommand::ExportTimelinePerfetto,
        UiCommand::ExportReport,
        UiCommand::AddNote,
        UiCommand::WatchFolder,
        UiCommand::StopWatching,
        UiCommand::ShowSettings,
        UiCommand::CommandPalette,
        UiCommand::Quit,
    ];

    /// The commands that have a keyboard shortcut, in the order they are matched: shortcuts with
    /// Shift first, because egui also matches Ctrl+Shift+E against a plain Ctrl+E.
    pub fn with_shortcuts() -> impl Iterator<Item = UiCommand> {
        let (shifted, plain): (Vec<UiCommand>, Vec<UiCommand>) = UiCommand::ALL
            .into_iter()
            .filter(|command| command.shortcut().is_some())
            .partition(|command| {
                command
                    .shortcut()
                    .is_some_and(|shortcut| shortcut.modifiers.shift)
            });
        shifted.into_iter().chain(plain)
    }

    /// The command that shows `view`.
    pub fn show(view: View) -> UiCommand {
        match view {
            View::Timeline => UiCommand::ShowTimeline,
            View::Allocator => UiCommand::ShowAllocator,
            View::Diagnose => UiCommand::ShowDiagnose,
            View::HardwareChecks => UiCommand::ShowHardwareChecks,
        }
    }

    /// The view this command shows, if it shows one.
    pub fn view(self) -> Option<View> {
        match self {
            UiCommand::ShowTimeline => Some(View::Timeline),
            UiCommand::ShowAllocator => Some(View::Allocator),
            UiCommand::ShowDiagnose => Some(View::Diagnose),
            UiCommand::ShowHardwareChecks => Some(View::HardwareChecks),
            _ => None,
        }
    }

    /// The command that writes the timeline as `export`.
    pub fn export_timeline(export: TimelineExport) -> UiCommand {
        match export {
            TimelineExport::Png => UiCommand::ExportTimelinePng,
            TimelineExport::Png2x => UiCommand::ExportTimelinePng2x,
            TimelineExport::Csv => UiCommand::ExportTimelineCsv,
            TimelineExport::Perfetto => UiCommand::ExportTimelinePerfetto,
        }
    }

    /// The timeline export this command writes, if it writes one.
    pub fn timeline_export(self) -> Option<TimelineExport> {
        match self {
            UiCommand::ExportTimelinePng => Some(TimelineExport::Png),
            UiCommand::ExportTimelinePng2x => Some(TimelineExport::Png2x),
            UiCommand::ExportTimelineCsv => Some(TimelineExport::Csv),
            UiCommand::ExportTimelinePerfetto => Some(TimelineExport::Perfetto),
            _ => None,
        }
    }

    /// The menu or button text.
    pub fn label(self) -> &'static str {
        if let Some(view) = self.view() {
            return view.label();
        }
        if let Some(export) = self.timeline_export() {
            return export.menu_label();
        }
        match self {
            UiCommand::Open => "Open…",
            UiCommand::WatchFolder => "Watch folder…",
            UiCommand::StopWatching => "Stop watching folder",
            UiCommand::SaveAs => "Save recording as…",
            UiCommand::ToggleRecording => "Record",
            UiCommand::ExportReport => "Export report…",
            UiCommand::Quit => "Quit",
            UiCommand::ShowSettings => "Settings…",
            UiCommand::AddNote => "Add note",
            UiCommand::CommandPalette => "Command palette…",
            UiCommand::CompareSnapshots => "Compare snapshots",
            UiCommand::RunCommand => "Run a command…",
            _ => "",
        }
    }

    /// What the command does, for tooltips and the command palette.
    pub fn tooltip(self) -> &'static str {
        if let Some(view) = self.view() {
            return view.description();
        }
        if let Some(export) = self.timeline_export() {
            return export.menu_hint();
        }
        match self {
            UiCommand::Open => "Open a .vramcap capture, a PyTorch snapshot or a log",
            UiCommand::WatchFolder => {
                "Open every new PyTorch snapshot written to a folder, as it appears"
            }
            UiCommand::StopWatching => "Stop opening new snapshots from the watched folder",
            UiCommand::SaveAs => "Write the shown capture to a new .vramcap file",
            UiCommand::ToggleRecording => "Start recording to a new .vramcap file",
            UiCommand::ExportReport => {
                "The diagnosis of every opened file as HTML, Markdown or JSON (by the file's \
                 extension)"
            }
            UiCommand::Quit => "Close vramscope (asks first when notes are not saved)",
            UiCommand::ShowSettings => "Threshold, sampling interval, follow window and theme",
            UiCommand::AddNote => {
                "Add the note at the current time (live) or the last hovered time"
            }
            UiCommand::CommandPalette => "Find any command by name and run it",
            UiCommand::CompareSnapshots => {
                "Two opened snapshots side by side: block maps on one scale, linked time travel, \
                 the call sites whose memory changed"
            }
            UiCommand::RunCommand => {
                "Run a training job or any command as vramscope run does: its output, GPU \
                 timeline and allocator history recorded with no code change, a fix proven by \
                 re-running it when it runs out of memory"
            }
            _ => "",
        }
    }

    /// The keyboard shortcut, if the command has one.
    pub fn shortcut(self) -> Option<KeyboardShortcut> {
        match self {
            UiCommand::Open => Some(command_key(Key::O)),
            UiCommand::SaveAs => Some(command_key(Key::S)),
            UiCommand::ToggleRecording => Some(command_key(Key::R)),
            UiCommand::ExportTimelinePng => Some(command_key(Key::E)),
            UiCommand::ExportReport => Some(command_shift_key(Key::E)),
            UiCommand::Quit => Some(command_key(Key::Q)),
            UiCommand::ShowTimeline => Some(command_key(Key::Num1)),
            UiCommand::ShowAllocator => Some(command_key(Key::Num2)),
            UiCommand::ShowDiagnose => Some(command_key(Key::Num3)),
            UiCommand::ShowHardwareChecks => Some(command_key(Key::Num4)),
            UiCommand::ShowSettings => Some(command_key(Key::Comma)),
            UiCommand::CommandPalette => Some(command_shift_key(Key::P)),
            UiCommand::RunCommand => Some(command_shift_key(Key::R)),
            UiCommand::ExportTimelinePng2x
            | UiCommand::ExportTimelineCsv
            | UiCommand::ExportTimelinePerfetto
            | UiCommand::WatchFolder
            | UiCommand::StopWatching
            | UiCommand::AddNote
            | UiCommand::CompareSnapshots => None,
        }
    }

    /// Whether the command can run in `context`. Commands that are always offered but have
    /// nothing to act on (Save with nothing open) stay enabled and explain in a notice instead.
    pub fn availability(self, context: &CommandContext) -> Availability {
        match self {
            _ if self.timeline_export().is_some()
                && (context.view != View::Timeline || !context.has_session) =>
            {
                Availability::Disabled("Show a capture in the Timeline view first")
            }
            UiCommand::ExportReport if !context.has_report_evidence => {
                Availability::Disabled("Open a capture, snapshot or log first")
            }
            UiCommand::WatchFolder | UiCommand::StopWatching if !context.native => {
                Availability::Disabled("Watching a folder needs the desktop app")
            }
            UiCommand::RunCommand if !context.native => {
                Availability::Disabled("Running a command needs the desktop app")
            }
            UiCommand::RunCommand if context.command_running => {
                Availability::Disabled("A command is running: stop it or wait for its end first")
            }
            UiCommand::StopWatching if !context.watching => {
                Availability::Disabled("No folder is being watched")
            }
            UiCommand::AddNote if !context.has_session => {
                Availability::Disabled("Open a capture or start a live source first")
            }
            UiCommand::CompareSnapshots if context.snapshots_open < 2 => {
                Availability::Disabled("Open two or more snapshots first")
            }
            _ => Availability::Enabled,
        }
    }

    /// The shortcut as the user's platform writes it ("Ctrl+O", "⌘O"), if there is one.
    pub fn shortcut_text(self, ctx: &egui::Context) -> Option<String> {
        self.shortcut()
            .map(|shortcut| ctx.format_shortcut(&shortcut))
    }

    /// The tooltip with the shortcut added, e.g. "Open a capture… (Ctrl+O)".
    pub fn tooltip_with_shortcut(self, ctx: &egui::Context) -> String {
        match self.shortcut_text(ctx) {
            Some(shortcut) => format!("{} ({shortcut})", self.tooltip()),
            None => self.tooltip().to_owned(),
        }
    }

    /// The commands whose shortcuts were pressed this frame (the key presses are consumed so
    /// that no widget also acts on them).
    pub fn pressed(ctx: &egui::Context) -> Vec<UiCommand> {
        ctx.input_mut(|input| {
            UiCommand::with_shortcuts()
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

/// Where views send commands and events; cheap to clone, one per view that needs it.
#[derive(Clone, Debug)]
pub struct CommandSender(Sender<Action>);

impl CommandSender {
    /// Queues `command` for the app to run at the end of this frame.
    pub fn send(&self, command: UiCommand) {
        // The receiver lives as long as the app; once it is gone nobody runs commands any more.
        let _ = self.0.send(Action::Command(command));
    }

    /// Queues `event` for the app to handle at the end of this frame.
    pub fn send_event(&self, event: AppEvent) {
        let _ = self.0.send(Action::Event(event));
    }
}

/// The app's end of the command queue.
#[derive(Debug)]
pub struct CommandQueue {
    sender: CommandSender,
    receiver: Receiver<Action>,
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

    /// The next command or event sent and not run yet. Never blocks.
    pub fn next(&self) -> Option<Action> {
        self.receiver.try_recv().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_commands_share_a_shortcut() {
        let shortcuts: Vec<KeyboardShortcut> =
            UiCommand::ALL.iter().filter_map(|c| c.shortcut()).collect();
        for (i, a) in shortcuts.iter().enumerate() {
            for b in &shortcuts[i + 1..] {
                assert_ne!(a, b, "two commands use {a:?}");
            }
        }
        assert_eq!(shortcuts.len(), UiCommand::with_shortcuts().count());
    }

    #[test]
    fn every_command_is_listed_once_with_words() {
        for (i, command) in UiCommand::ALL.iter().enumerate() {
            assert!(
                !UiCommand::ALL[i + 1..].contains(command),
                "{command:?} twice"
            );
            assert!(!command.label().is_empty(), "{command:?} has no label");
            assert!(!command.tooltip().is_empty(), "{command:?} has no tooltip");
        }
    }

    #[test]
    fn shift_shortcuts_are_matched_before_their_plain_twins() {
        let order: Vec<UiCommand> = UiCommand::with_shortcuts().collect();
        let position = |command: UiCommand| order.iter().position(|c| *c == command);
        assert!(position(UiCommand::ExportReport) < position(UiCommand::ExportTimelinePng));
        assert!(position(UiCommand::CommandPalette).is_some());
        assert!(position(UiCommand::RunCommand) < position(UiCommand::ToggleRecording));
    }

    #[test]
    fn every_view_has_its_own_numbered_shortcut() {
        for view in View::ALL {
            let command = UiCommand::show(view);
            assert_eq!(command.view(), Some(view));
            assert!(command.shortcut().is_some(), "{view:?}");
            assert_eq!(command.label(), view.label());
        }
        for export in TimelineExport::ALL {
            assert_eq!(
                UiCommand::export_timeline(export).timeline_export(),
                Some(export)
            );
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
            UiCommand::ExportTimelinePng.availability(&empty),
            Availability::Disabled("Show a capture in the Timeline view first")
        );
        assert!(!UiCommand::ExportReport.availability(&empty).is_enabled());
        assert!(!UiCommand::AddNote.availability(&empty).is_enabled());
        assert_eq!(
            UiCommand::CompareSnapshots.availability(&empty),
            Availability::Disabled("Open two or more snapshots first")
        );
        let two = CommandContext {
            snapshots_open: 2,
            ..empty
        };
        assert!(UiCommand::CompareSnapshots.availability(&two).is_enabled());
        let shown = CommandContext {
            has_session: true,
            has_report_evidence: true,
            ..empty
        };
        assert!(
            UiCommand::ExportTimelineCsv
                .availability(&shown)
                .is_enabled()
        );
        assert!(UiCommand::ExportReport.availability(&shown).is_enabled());
        let elsewhere = CommandContext {
            view: View::Allocator,
            ..shown
        };
        assert!(
            !UiCommand::ExportTimelinePng
                .availability(&elsewhere)
                .is_enabled()
        );
        // Always offered: they explain in a notice when there is nothing to act on.
        for command in [UiCommand::Open, UiCommand::SaveAs, UiCommand::Quit] {
            assert!(command.availability(&empty).is_enabled(), "{command:?}");
        }
        let web = CommandContext {
            native: false,
            ..shown
        };
        assert!(!UiCommand::WatchFolder.availability(&web).is_enabled());
        assert!(!UiCommand::RunCommand.availability(&web).is_enabled());
        assert!(UiCommand::RunCommand.availability(&shown).is_enabled());
        let running = CommandContext {
            command_running: true,
            ..shown
        };
        assert!(!UiCommand::RunCommand.availability(&running).is_enabled());
    }

    #[test]
    fn sent_commands_and_events_come_out_in_order() {
        let queue = CommandQueue::default();
        let sender = queue.sender();
        sender.send(UiCommand::Open);
        queue.sender().send_event(AppEvent::SetDemoSpeed(60));
        queue.sender().send(UiCommand::ShowDiagnose);
        assert_eq!(queue.next(), Some(Action::Command(UiCommand::Open)));
        assert_eq!(
            queue.next(),
            Some(Action::Event(AppEvent::SetDemoSpeed(60)))
        );
        assert_eq!(queue.next(), Some(Action::Command(UiCommand::ShowDiagnose)));
        assert_eq!(queue.next(), None);
    }
}
