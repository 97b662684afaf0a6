//! The eframe app: top bar and menus, view tabs (timeline, allocator, diagnose, hardware checks),
//! device list, timeline, process table, notices; opening captures, PyTorch snapshots and logs
//! (dialog, drag and drop, command line, a watched folder), recording, annotations and settings.
//!
//! Every opened file is also evidence for the diagnosis wizards: captures, snapshot facts and
//! logs go to the [`WizardView`], and so does the live session's capture when Diagnose is opened.
//!
//! Every user action is a [`UiCommand`] or an [`AppEvent`]: the menus, the shortcuts, the view tabs and the views
//! themselves send commands, and [`VramscopeApp::run_command`] is the one place that carries them
//! out. Quitting ([`QuitState`]) and asking for paths ([`PathAsker`]) are small state machines of
//! their own.
//!
//! The app holds one [`Session`] per source being shown (the live machine and any opened files)
//! and shows one at a time. Everything slow happens elsewhere: sampling on the sampler thread,
//! reading and writing files in [`Jobs`] (on the one job [`Runner`](super::runner::Runner)),
//! recording on the recorder's writer thread. The UI is
//! repainted when one of those delivers something, never in a loop, so an idle app costs nothing.

use std::path::PathBuf;
use std::sync::Arc;

use egui::{Color32, Key, RichText, Ui};

use vramscope_core::diagnose::NamedCapture;
use vramscope_core::model::{Capture, UnixMs};

use super::allocator::AllocatorView;
use super::allocator::tabs::AllocatorTabs;
pub use super::allocator::tabs::MAX_ALLOCATOR_VIEWS;
use super::command::{Action, AppEvent, CommandContext, CommandQueue, CommandSender, UiCommand};
use super::devices::device_list_ui;
use super::export::TimelineExport;
use super::jobs::{JobResult, Jobs, OpenOutcome, OpenedSnapshot};
use super::nav::AllocatorTabRequest;
use super::notices::{NoticeLevel, Notices};
use super::palette::CommandPalette;
use super::path_prompt::{PathAction, PathAsker, PromptAnswer};
use super::processes::{ProcessTableState, process_table_ui};
use super::quit::{QuitChoice, QuitState, UnsavedNotes, quit_question_ui};
use super::runner::job_progress_ui;
use super::session::{PreparedCapture, Session, SessionOrigin};
use super::settings::{SAMPLING_INTERVAL_RANGE_MS, Settings};
use super::timeline::{TimelineInput, TimelineState, timeline_ui};
use super::views::{View, central_panel, top_panel, view_tabs_ui};
use super::wizard::WizardView;

/// The paces View › Demo speed offers (scenario seconds per second).
const DEMO_SPEEDS: [u32; 4] = [1, 10, 60, 600];

/// A save in progress, so that its notes count as saved once the write succeeds.
struct PendingSave {
    /// The file being written.
    path: PathBuf,
    /// Index of the session saved.
    session_index: usize,
    /// How many of the session's unsaved notes the save holds.
    notes: usize,
}

/// A live source to start with: the source and, for the demo machine, why it is shown.
#[cfg(feature = "native")]
pub struct LiveStart {
    pub source: Box<dyn vramscope_core::source::Source>,
    pub demo_notice: Option<String>,
}

/// How the app starts.
pub struct AppOptions {
    /// Files to open (read in the background).
    pub files: Vec<PathBuf>,
    /// The live source to sample, if any.
    #[cfg(feature = "native")]
    pub live: Option<LiveStart>,
    /// Where "Open…" and "Save as…" get their paths.
    pub dialogs: Box<dyn super::dialogs::FileDialogs>,
    /// Directory for new recordings (`None`: the app's data directory).
    #[cfg(feature = "native")]
    pub recordings_dir: Option<PathBuf>,
}

/// The app.
pub struct VramscopeApp {
    pub settings: Settings,
    sessions: Vec<Session>,
    active: Option<usize>,
    timeline: TimelineState,
    process_table: ProcessTableState,
    /// The fleet view, for sessions of many GPUs (a Prometheus fleet).
    fleet: super::fleet::FleetView,
    jobs: Jobs,
    pub notices: Notices,
    /// File dialogs, or the in-app path field where none can appear.
    paths: PathAsker,
    #[cfg(feature = "native")]
    recordings_dir: Option<PathBuf>,
    annotation_draft: String,
    show_settings: bool,
    /// The command palette (Ctrl+Shift+P).
    palette: CommandPalette,
    /// Title last sent to the window, so it is only sent when it changes.
    sent_title: String,
    /// Where quitting stands (the unsaved-notes question, a save before quitting, closing).
    quit: QuitState,
    /// Saves in progress.
    pending_saves: Vec<PendingSave>,
    /// Settings last applied to the sampler and the theme.
    applied: Option<Settings>,
    /// The view the central area shows.
    view: View,
    /// One allocator view per opened snapshot.
    allocators: AllocatorTabs,
    /// The Timeline view's overlay of the open captures ("Compare captures").
    capture_compare: super::capture_compare::CaptureCompare,
    /// The diagnosis wizards, fed with every opened file.
    wizard: WizardView,
    /// Commands sent by the menus, shortcuts and views, run once per frame.
    commands: CommandQueue,
    /// The hardware checks panel, made when its tab is first shown.
    #[cfg(feature = "native")]
    hardware: Option<super::hardware::HardwarePanel>,
    /// File › Watch folder…: new snapshots in this folder are opened as they are written.
    #[cfg(feature = "native")]
    watcher: Option<super::allocator::SnapshotWatcher>,
    /// File › Run a command…: its dialog.
    #[cfg(feature = "native")]
    run_dialog: super::run_command::dialog::RunDialog,
    /// The command run from the app, while it runs and until its panel is closed.
    #[cfg(feature = "native")]
    command_run: Option<super::run_command::CommandRun>,
    /// Live GPU alerts: notices, system notifications, the snooze.
    pub alerting: super::alerting::DesktopAlerts,
}

impl VramscopeApp {
    /// Restores the settings, starts the live source (if any) and begins opening `files`.
    pub fn new(cc: &eframe::CreationContext<'_>, options: AppOptions) -> Self {
        let settings: Settings = cc
            .storage
            .and_then(|storage| eframe::get_value(storage, eframe::APP_KEY))
            .unwrap_or_default();
        let commands = CommandQueue::default();
        let mut wizard = WizardView::new();
        wizard.connect(commands.sender());
        let mut app = VramscopeApp {
            settings: settings.sanitized(),
            sessions: Vec::new(),
            active: None,
            timeline: TimelineState::default(),
            process_table: ProcessTableState::default(),
            fleet: super::fleet::FleetView::default(),
            jobs: Jobs::new(cc.egui_ctx.clone()),
            notices: Notices::default(),
            paths: PathAsker::new(options.dialogs),
            #[cfg(feature = "native")]
            recordings_dir: options.recordings_dir,
            annotation_draft: String::new(),
            show_settings: false,
            palette: CommandPalette::default(),
            sent_title: String::new(),
            quit: QuitState::Running,
            pending_saves: Vec::new(),
            applied: None,
            view: View::Timeline,
            allocators: AllocatorTabs::default(),
            capture_compare: super::capture_compare::CaptureCompare::default(),
            wizard,
            #[cfg(feature = "native")]
            hardware: None,
            #[cfg(feature = "native")]
            watcher: None,
            #[cfg(feature = "native")]
            run_dialog: super::run_command::dialog::RunDialog::default(),
            #[cfg(feature = "native")]
            command_run: None,
            alerting: super::alerting::DesktopAlerts::default(),
            commands,
        };
        #[cfg(feature = "native")]
        if let Some(live) = options.live {
            let ctx = cc.egui_ctx.clone();
            let session = Session::live(
                live.source,
                live.demo_notice.clone(),
                app.settings.sampling_interval_ms,
                Box::new(move || ctx.request_repaint()),
            );
            if let Some(notice) = live.demo_notice {
                app.notices.push(NoticeLevel::Warning, notice);
            }
            app.add_session(session);
        }
        for path in options.files {
            app.open_path(path);
        }
        app
    }

    /// The session being shown.
    pub fn active_session(&self) -> Option<&Session> {
        self.active.and_then(|i| self.sessions.get(i))
    }

    fn active_session_mut(&mut self) -> Option<&mut Session> {
        self.active.and_then(|i| self.sessions.get_mut(i))
    }

    /// All sessions (live and opened files).
    pub fn sessions(&self) -> &[Session] {
        &self.sessions
    }

    /// The timeline's view state (hover, follow-live).
    pub fn timeline_state(&self) -> &TimelineState {
        &self.timeline
    }

    /// Number of background jobs (file reads and writes) still running.
    pub fn jobs_running(&self) -> usize {
        self.jobs.running()
    }

    /// File reads in progress, with their progress and cancel flag.
    pub fn reads(&self) -> &[super::jobs::ReadStatus] {
        self.jobs.reads()
    }

    /// The view the central area shows.
    pub fn view(&self) -> View {
        self.view
    }

    /// Shows `view` (the tabs and Ctrl+1..4 send [`UiCommand::ShowTimeline`] and its siblings). Opening Diagnose offers
    /// the live session's capture so far to the wizards.
    fn set_view(&mut self, view: View) {
        if view == View::Diagnose && self.view != View::Diagnose {
            self.offer_live_capture();
        }
        self.view = view;
    }

    /// The allocator views of the opened snapshots, oldest first.
    pub fn allocator_views(&self) -> &[AllocatorView] {
        self.allocators.views()
    }

    /// The comparison of two snapshots, while the Allocator tab shows it.
    pub fn allocator_compare(&self) -> Option<&super::allocator::compare::CompareView> {
        self.allocators.compare()
    }

    /// The overlay of the open captures in the Timeline view.
    pub fn capture_compare(&self) -> &super::capture_compare::CaptureCompare {
        &self.capture_compare
    }

    /// The allocator view shown in the Allocator tab.
    pub fn active_allocator_view(&self) -> Option<&AllocatorView> {
        self.allocators.active()
    }

    /// The diagnosis wizards.
    pub fn wizard(&self) -> &WizardView {
        &self.wizard
    }

    /// The folder being watched for new snapshots.
    #[cfg(feature = "native")]
    pub fn watched_folder(&self) -> Option<&std::path::Path> {
        self.watcher.as_ref().map(|w| w.folder())
    }

    /// Starts watching `folder`: every snapshot completed there from now on is opened and shown;
    /// the newest one already there is opened now.
    #[cfg(feature = "native")]
    pub fn watch_folder(&mut self, folder: PathBuf) {
        let ctx = self.jobs.ctx().clone();
        match super::allocator::SnapshotWatcher::new(&folder, move || ctx.request_repaint()) {
            Ok(mut watcher) => {
                match watcher.existing() {
                    Ok(existing) => {
                        if let Some(newest) = existing.into_iter().last() {
                            self.jobs.open_path(newest);
                        }
                    }
                    Err(err) => self.notices.push(NoticeLevel::Warning, err.to_string()),
                }
                self.watcher = Some(watcher);
            }
            Err(err) => self.notices.push(NoticeLevel::Error, err.to_string()),
        }
    }

    /// Stops watching the folder.
    #[cfg(feature = "native")]
    pub fn stop_watching(&mut self) {
        self.watcher = None;
    }

    /// Where File › Run a command… puts run folders unless the user types another (relative:
    /// inside the job's working directory; `vramscope-runs` by default, as `vramscope run`).
    #[cfg(feature = "native")]
    pub fn set_runs_dir(&mut self, dir: &std::path::Path) {
        self.run_dialog.runs_dir = dir.display().to_string();
    }

    /// The Run dialog, to see what it says.
    #[cfg(feature = "native")]
    pub fn run_dialog(&self) -> &super::run_command::dialog::RunDialog {
        &self.run_dialog
    }

    /// The command run from the app, while it runs and until its panel is closed.
    #[cfg(feature = "native")]
    pub fn command_run(&self) -> Option<&super::run_command::CommandRun> {
        self.command_run.as_ref()
    }

    /// Starts the run the dialog asked for: the Timeline shows the live GPUs while it runs
    /// (when the app samples them), the run panel its output and proof.
    #[cfg(feature = "native")]
    fn start_command_run(&mut self, request: super::run_command::dialog::RunRequest) {
        let live = self.sessions.iter().position(Session::is_live);
        if let Some(index) = live {
            self.select_session(index);
        }
        self.set_view(View::Timeline);
        self.command_run = Some(super::run_command::CommandRun::start(
            self.jobs.runner(),
            request,
            live.is_some(),
        ));
    }

    /// The Run dialog, while open; Run starts the run.
    fn run_dialog_ui(&mut self, ctx: &egui::Context) {
        #[cfg(feature = "native")]
        if let Some(super::run_command::dialog::DialogAnswer::Run(request)) =
            self.run_dialog.ui(ctx)
        {
            self.start_command_run(*request);
        }
        #[cfg(not(feature = "native"))]
        let _ = ctx;
    }

    /// The run panel, while there is a run to show.
    fn command_run_ui(&mut self, ui: &mut Ui) {
        #[cfg(feature = "native")]
        if let Some(run) = &mut self.command_run {
            let mut action = super::run_command::PanelAction::None;
            egui::Panel::bottom("command_run")
                .resizable(true)
                .min_size(140.0)
                .default_size(280.0)
                .show(ui, |ui| action = run.ui(ui));
            if action == super::run_command::PanelAction::Close {
                self.command_run = None;
            }
        }
        #[cfg(not(feature = "native"))]
        let _ = ui;
    }

    /// File › Watch folder…: asks for a folder and watches it.
    fn watch_folder_with_dialog(&mut self) {
        #[cfg(feature = "native")]
        if let Some(folder) = self.pick_path(PathAction::WatchFolder, "") {
            self.finish_path_action(PathAction::WatchFolder, folder);
        }
        #[cfg(not(feature = "native"))]
        self.notices.push(
            NoticeLevel::Warning,
            "Watching a folder needs the desktop app.",
        );
    }

    /// Gives the live session's capture so far to the wizards (replacing the one given before).
    fn offer_live_capture(&mut self) {
        let live = self
            .sessions
            .iter()
            .find(|s| s.is_live() && s.capture.sample_count() > 0);
        if let Some(session) = live {
            self.wizard.set_capture(NamedCapture {
                name: session.label(),
                capture: session.capture.clone(),
            });
        }
    }

    /// The window title: the source, and "(simulated)" whenever the data is simulated.
    pub fn window_title(&self) -> String {
        match self.active_session() {
            None => "vramscope".to_owned(),
            Some(session) if session.is_simulated() => {
                format!("vramscope — {} (simulated)", session.label())
            }
            Some(session) => format!("vramscope — {}", session.label()),
        }
    }

    /// Shows a capture that is already in memory (used for tests, benchmarks and screenshots;
    /// files normally arrive through [`Self::open_path`]).
    pub fn show_capture(&mut self, file_name: &str, capture: Capture) {
        self.opened(
            file_name.to_owned(),
            Ok(Box::new(PreparedCapture::new(capture))),
        );
    }

    /// Starts reading a file in the background. A run folder (`vramscope run`, File › Run a
    /// command…) opens as one session: its log, its timeline and its snapshots, all offered to
    /// the diagnosis together with what its `--prove` re-runs proved.
    pub fn open_path(&mut self, path: PathBuf) {
        #[cfg(feature = "native")]
        match vramscope_core::evidence::run_folder(&path) {
            Some(run) => {
                if let Some(why) = run.problem {
                    self.notices.push(
                        NoticeLevel::Warning,
                        format!("{why}; its proof is left out"),
                    );
                }
                if !run.proof.is_empty() || !run.job_pids.is_empty() {
                    self.wizard.add_run(&run.proof, &run.job_pids);
                }
                if run.files.is_empty() {
                    self.notices.push(
                        NoticeLevel::Warning,
                        format!(
                            "{}: the run recorded nothing to open (no log, timeline or snapshot)",
                            path.display()
                        ),
                    );
                }
                let folder = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                for (file, kind) in run.files {
                    let inside = file.strip_prefix(&path).unwrap_or(&file).display();
                    let name = format!("{folder}/{inside}");
                    self.jobs.open_path_named(file, name, kind);
                }
            }
            None => self.jobs.open_path(path),
        }
        #[cfg(not(feature = "native"))]
        self.notices.push(
            NoticeLevel::Error,
            format!(
                "{}: files can only be opened by dropping them on the page",
                path.display()
            ),
        );
    }

    fn add_session(&mut self, session: Session) {
        self.sessions.push(session);
        self.select_session(self.sessions.len() - 1);
    }

    /// Opens one GPU of the fleet shown as a session of its own (its timeline, processes and
    /// devices panel), named after the GPU and the fleet.
    fn open_fleet_gpu(&mut self, device_index: u32) {
        let Some(fleet) = self.active_session() else {
            return;
        };
        let file_name = format!(
            "{} of {}",
            fleet.capture.gpu_label(device_index),
            fleet.label()
        );
        let prepared = PreparedCapture::new(fleet.capture.only_device(device_index));
        self.add_session(Session::from_prepared(
            SessionOrigin::File { file_name },
            prepared,
        ));
    }

    fn select_session(&mut self, index: usize) {
        if self.active != Some(index) {
            self.active = Some(index);
            self.timeline.new_capture();
            // The selection is an index into the previous capture's processes.
            self.process_table.selected = None;
        }
    }

    /// The open file session that `capture` joins as the other nvidia-smi log of the same run
    /// (a `--query-compute-apps` log and a `--query-gpu` log, in either order); `None` unless
    /// exactly one session fits.
    fn nvidia_smi_partner(&self, capture: &Capture) -> Option<usize> {
        use vramscope_core::formats::nvidia_smi::{is_process_log, same_run};
        let mut partners = self.sessions.iter().enumerate().filter(|(_, session)| {
            matches!(session.origin, SessionOrigin::File { .. })
                && if is_process_log(capture) {
                    same_run(&session.capture, capture)
                } else {
                    same_run(capture, &session.capture)
                }
        });
        let (index, _) = partners.next()?;
        partners.next().is_none().then_some(index)
    }

    /// Joins the nvidia-smi log just opened with the session at `partner` (its other log of the
    /// same run): the session shows one capture with the GPU tracks and the per-process tracks,
    /// named after both files, and the wizards get that capture instead of the first log.
    fn join_nvidia_smi_logs(&mut self, partner: usize, file_name: String, opened: PreparedCapture) {
        use vramscope_core::formats::nvidia_smi::{combine, is_process_log};
        let Some(session) = self.sessions.get(partner) else {
            return;
        };
        let partner_name = session.label();
        let (name, joined) = if is_process_log(&opened.capture) {
            (
                format!("{partner_name} + {file_name}"),
                combine(session.capture.clone(), &opened.capture),
            )
        } else {
            (
                format!("{file_name} + {partner_name}"),
                combine(opened.capture, &session.capture),
            )
        };
        let unsaved_notes = session.unsaved_notes;
        self.wizard.replace_capture(
            &partner_name,
            NamedCapture {
                name: name.clone(),
                capture: joined.clone(),
            },
        );
        let mut session = Session::from_prepared(
            SessionOrigin::File {
                file_name: name.clone(),
            },
            PreparedCapture::new(joined),
        );
        session.unsaved_notes = unsaved_notes;
        self.sessions[partner] = session;
        // Shown afresh: the timeline's state belonged to the capture it replaces.
        self.active = None;
        self.select_session(partner);
        self.view = View::Timeline;
        self.notices.push(
            NoticeLevel::Info,
            format!(
                "Joined {file_name} with {partner_name} (nvidia-smi logs of the same run): {name}"
            ),
        );
    }

    /// Takes in a finished read: a capture becomes a session, a snapshot an allocator view, and
    /// all of them evidence for the wizards.
    fn open_finished(&mut self, file_name: String, outcome: OpenOutcome) {
        match outcome {
            OpenOutcome::Capture { prepared, evidence } => {
                match self.nvidia_smi_partner(&prepared.capture) {
                    Some(partner) => self.join_nvidia_smi_logs(partner, file_name, *prepared),
                    None => {
                        self.wizard.add_capture(*evidence);
                        self.opened(file_name, Ok(prepared));
                    }
                }
            }
            OpenOutcome::Snapshot(opened) => self.snapshot_opened(file_name, *opened),
            OpenOutcome::Log(log) => {
                let summary = log.recognised_summary();
                self.wizard.add_log(*log);
                self.notices.push(
                    NoticeLevel::Info,
                    format!("Read the log {file_name}: {summary}, added to Diagnose."),
                );
                // Shown in Diagnose; go there unless something else was opened to look at.
                if self.view == View::Timeline && self.sessions.is_empty() {
                    self.set_view(View::Diagnose);
                }
            }
            OpenOutcome::Cancelled => self
                .notices
                .push(NoticeLevel::Info, format!("Cancelled opening {file_name}.")),
            OpenOutcome::Failed(message) => self.opened(file_name, Err(message)),
        }
    }

    /// Shows a snapshot that is already in memory (tests and screenshots; files normally arrive
    /// through [`Self::open_path`]). Its facts go to the wizards too.
    pub fn show_snapshot(
        &mut self,
        file_name: &str,
        snapshot: vramscope_core::model::allocator::AllocatorSnapshot,
    ) {
        let snapshot = Arc::new(snapshot);
        let analysis = vramscope_core::analysis::snapshot_analysis::analyze(&snapshot);
        // Named like the view, as files opened through the reader are.
        let opened = OpenedSnapshot::new(snapshot, analysis, file_name);
        self.snapshot_opened(file_name.to_owned(), opened);
    }

    /// Switches to the Allocator tab on the newest view of the requested snapshot and device
    /// (the wizard's snapshot facts carry the view's name: see `jobs` and [`Self::show_snapshot`]).
    fn show_in_allocator_tab(&mut self, request: &AllocatorTabRequest) {
        if self.allocators.show(request) {
            self.view = View::Allocator;
        } else {
            self.notices.push(
                NoticeLevel::Info,
                format!(
                    "{} is no longer open in the Allocator tab; open the file again to see it.",
                    request.snapshot_name
                ),
            );
        }
    }

    fn snapshot_opened(&mut self, file_name: String, opened: OpenedSnapshot) {
        if opened.snapshot.devices.is_empty() {
            self.notices.push(
                NoticeLevel::Warning,
                format!("{file_name} holds no allocator segments and no trace."),
            );
        }
        self.wizard.add_snapshot_facts(opened.facts);
        let view = AllocatorView::with_analysis(opened.snapshot, file_name, opened.analysis);
        if let Some(closed) = self.allocators.open(view) {
            self.notices.push(
                NoticeLevel::Info,
                format!(
                    "Closed the allocator view of {closed} to keep at most {MAX_ALLOCATOR_VIEWS} open."
                ),
            );
        }
        self.view = View::Allocator;
    }

    fn opened(&mut self, file_name: String, result: Result<Box<PreparedCapture>, String>) {
        match result {
            Ok(prepared) => {
                if let Some(recovery) = &prepared.capture.recovery {
                    self.notices.push(
                        NoticeLevel::Warning,
                        format!(
                            "{file_name} was damaged and only partly opened: {}. Recovered {} chunk(s); \
                             ignored the last {} byte(s).",
                            recovery.problem, recovery.chunks_recovered, recovery.bytes_discarded
                        ),
                    );
                }
                if prepared.capture.sample_count() == 0 {
                    self.notices.push(
                        NoticeLevel::Warning,
                        format!("{file_name} holds no samples."),
                    );
                }
                let session = Session::from_prepared(SessionOrigin::File { file_name }, *prepared);
                self.add_session(session);
                self.view = View::Timeline;
            }
            Err(message) => {
                self.notices
                    .push(NoticeLevel::Error, format!("Could not open {message}"));
            }
        }
    }

    /// Collects finished background jobs and new live samples.
    fn poll_background(&mut self) {
        for result in self.jobs.poll() {
            match result {
                JobResult::Opened { file_name, outcome } => {
                    self.open_finished(file_name, outcome);
                }
                JobResult::Saved { path, result } => self.save_finished(&path, result),
                JobResult::Exported { path: _, result } => match result {
                    Ok(written) => self.notices.push(
                        NoticeLevel::Info,
                        format!(
                            "Exported {}",
                            written
                                .iter()
                                .map(|p| p.display().to_string())
                                .collect::<Vec<_>>()
                                .join(" and ")
                        ),
                    ),
                    Err(message) => self
                        .notices
                        .push(NoticeLevel::Error, format!("Could not export: {message}")),
                },
            }
        }
        for session in &mut self.sessions {
            session.set_alert_threshold(self.settings.threshold_fraction());
            session.poll();
            let changes = session.take_alert_changes();
            let now_ms = super::alerting::wall_ms();
            if let Some(line) = self.alerting.handle(&changes, &self.settings, now_ms) {
                self.notices.push(NoticeLevel::Info, line);
            }
        }
        #[cfg(feature = "native")]
        if let Some(folder) = self.command_run.as_mut().and_then(|run| run.poll()) {
            self.open_path(folder);
        }
        #[cfg(feature = "native")]
        if let Some(watcher) = &mut self.watcher {
            let complete = watcher.poll();
            if watcher.is_settling() {
                self.jobs
                    .ctx()
                    .request_repaint_after(super::allocator::watcher::SETTLE);
            }
            for path in complete {
                self.jobs.open_path(path);
            }
        }
    }

    /// Takes in a finished save: its notes count as saved, and a quit that waited for it goes
    /// ahead.
    fn save_finished(&mut self, path: &std::path::Path, result: Result<(), String>) {
        let pending = self.pending_saves.iter().position(|p| p.path == path);
        let pending = pending.map(|i| self.pending_saves.remove(i));
        match result {
            Ok(()) => {
                if let Some(save) = pending
                    && let Some(session) = self.sessions.get_mut(save.session_index)
                {
                    session.unsaved_notes = session.unsaved_notes.saturating_sub(save.notes);
                }
                self.notices
                    .push(NoticeLevel::Info, format!("Saved {}", path.display()));
                if self.quit.save_succeeded(self.unsaved_notes()) {
                    self.close_window();
                }
            }
            Err(message) => {
                self.quit.save_abandoned();
                self.notices
                    .push(NoticeLevel::Error, format!("Could not save: {message}"));
            }
        }
    }

    /// Whether Quit was asked for (and the window told to close).
    pub fn quit_requested(&self) -> bool {
        self.quit.is_closing()
    }

    /// File › Quit and Ctrl+Q: closes the window (sessions stop in `on_exit`), after asking
    /// when notes would be lost.
    fn quit(&mut self) {
        if self.quit.request(self.unsaved_notes()) {
            self.close_window();
        }
    }

    fn close_window(&self) {
        self.jobs
            .ctx()
            .send_viewport_cmd(egui::ViewportCommand::Close);
    }

    /// Notes that no file holds yet, over all sessions.
    pub fn unsaved_notes(&self) -> usize {
        self.sessions.iter().map(|s| s.unsaved_notes).sum()
    }

    /// Whether the "unsaved notes" question is shown.
    pub fn quit_confirm_open(&self) -> bool {
        self.quit == QuitState::Asking
    }

    /// The window's close button: held back, like Quit, while notes are unsaved.
    fn hold_close_for_unsaved_notes(&mut self, ctx: &egui::Context) {
        let close_requested = ctx.input(|i| i.viewport().close_requested());
        if close_requested && self.quit.hold_window_close(self.unsaved_notes()) {
            ctx.send_viewport_cmd(egui::ViewportCommand::CancelClose);
        }
    }

    /// Asks what to do with unsaved notes: save, quit anyway, or stay.
    fn quit_question(&mut self, ctx: &egui::Context) {
        if self.quit != QuitState::Asking {
            return;
        }
        let unsaved: Vec<UnsavedNotes> = self
            .sessions
            .iter()
            .filter(|s| s.unsaved_notes > 0)
            .map(|s| UnsavedNotes {
                source: match &s.origin {
                    SessionOrigin::File { file_name } => file_name.clone(),
                    SessionOrigin::Live { .. } => "the live session".to_owned(),
                },
                notes: s.unsaved_notes,
            })
            .collect();
        let Some(choice) = quit_question_ui(ctx, &unsaved) else {
            return;
        };
        if self.quit.answer(choice) {
            self.close_window();
        }
        if choice == QuitChoice::Save {
            // Save the first session that has notes.
            if let Some(index) = self.sessions.iter().position(|s| s.unsaved_notes > 0) {
                self.select_session(index);
                self.set_view(View::Timeline);
            }
            self.save_with_dialog();
        }
    }

    /// File › Open… and Ctrl+O.
    fn open_with_dialog(&mut self) {
        if let Some(path) = self.pick_path(PathAction::Open, "") {
            self.finish_path_action(PathAction::Open, path);
        }
    }

    /// Asks for a path (a dialog, or the in-app path field whose answer arrives later through
    /// [`Self::path_prompt`]).
    fn pick_path(&mut self, action: PathAction, suggested_name: &str) -> Option<PathBuf> {
        self.paths.ask(action, suggested_name, &mut self.notices)
    }

    /// Carries out `action` on the chosen `path`.
    fn finish_path_action(&mut self, action: PathAction, path: PathBuf) {
        match action {
            PathAction::Open => self.open_path(path),
            PathAction::Save => self.save_to(path),
            PathAction::WatchFolder => {
                #[cfg(feature = "native")]
                self.watch_folder(path);
            }
            PathAction::ExportTimeline(export) => self.export_timeline_to(export, path),
            PathAction::ExportReport => self.jobs.write_report(path, self.wizard.report()),
        }
    }

    /// The in-app path field used when no file dialog can be shown.
    fn path_prompt(&mut self, ctx: &egui::Context) {
        match self.paths.prompt_ui(ctx) {
            Some(PromptAnswer::Chosen(action, path)) => self.finish_path_action(action, path),
            // A cancelled save from the quit question must not quit later.
            Some(PromptAnswer::Cancelled(_)) => self.quit.save_abandoned(),
            None => {}
        }
    }

    /// Whether the in-app path field is shown.
    pub fn path_prompt_open(&self) -> bool {
        self.paths.prompt_open()
    }

    /// File › Save as… and Ctrl+S: writes the shown capture in the background.
    fn save_with_dialog(&mut self) {
        if self.view == View::Allocator {
            self.notices.push(
                NoticeLevel::Info,
                "Save as… writes a capture (the Timeline tab); an allocator snapshot on screen is \
                 already a file of its own.",
            );
            return;
        }
        let Some(session) = self.active_session() else {
            self.notices.push(
                NoticeLevel::Warning,
                "Nothing to save yet: open a file or start a live source.",
            );
            return;
        };
        let suggested = match &session.origin {
            SessionOrigin::File { file_name } => file_name.clone(),
            SessionOrigin::Live { .. } => {
                default_recording_name(session.capture.meta.started_ms, session.is_simulated())
            }
        };
        if let Some(path) = self.pick_path(PathAction::Save, &suggested) {
            self.finish_path_action(PathAction::Save, path);
        } else if !self.paths.prompt_open() {
            // Cancelled: a later Save as must not quit the app.
            self.quit.save_abandoned();
        }
    }

    /// Writes the shown capture to `path` in the background.
    fn save_to(&mut self, path: PathBuf) {
        let Some(session) = self.active_session() else {
            return;
        };
        let capture = session.capture.clone();
        let notes = session.unsaved_notes;
        let index = self.active.unwrap_or_default();
        self.pending_saves.push(PendingSave {
            path: path.clone(),
            session_index: index,
            notes,
        });
        #[cfg(feature = "native")]
        self.jobs.save(path, capture);
        #[cfg(not(feature = "native"))]
        {
            let _ = capture;
            self.notices.push(
                NoticeLevel::Error,
                format!(
                    "{}: saving is not available in the web viewer",
                    path.display()
                ),
            );
        }
    }

    /// Whether File › Export timeline… can run: the Timeline view shows a capture.
    pub fn can_export_timeline(&self) -> bool {
        self.view == View::Timeline && self.active_session().is_some()
    }

    /// Whether File › Export report… has anything to report: an opened file, the GPU checks, or a
    /// live capture with samples.
    pub fn can_export_report(&self) -> bool {
        !self.wizard.diagnosis().inputs.is_empty()
            || self
                .sessions
                .iter()
                .any(|s| s.is_live() && s.capture.sample_count() > 0)
    }

    /// File › Export timeline as … and Ctrl+E (the PNG): asks where to write it, offering a
    /// name taken from the shown capture's.
    fn export_timeline_with_dialog(&mut self, export: TimelineExport) {
        if !self.can_export_timeline() {
            self.notices.push(
                NoticeLevel::Warning,
                "Nothing to export: show a capture or the live source in the Timeline view.",
            );
            return;
        }
        let suggested = export.suggested_name(&self.active_input_name());
        if let Some(path) = self.pick_path(PathAction::ExportTimeline(export), &suggested) {
            self.finish_path_action(PathAction::ExportTimeline(export), path);
        }
    }

    /// The shown capture's file name, or a name for the live source.
    fn active_input_name(&self) -> String {
        match self.active_session() {
            Some(Session {
                origin: SessionOrigin::File { file_name },
                ..
            }) => file_name.clone(),
            Some(session) => {
                default_recording_name(session.capture.meta.started_ms, session.is_simulated())
            }
            None => String::new(),
        }
    }

    /// Makes and writes the export in the background, with the threshold and the time range the
    /// timeline shows.
    fn export_timeline_to(&mut self, export: TimelineExport, path: PathBuf) {
        let Some(session) = self.active_session() else {
            return;
        };
        let view_ms = self
            .timeline
            .visible_x_range
            .map(|(x_min, x_max)| (session.timeline.t_of(x_min), session.timeline.t_of(x_max)));
        let job = super::export::TimelineExportJob {
            capture: session.capture.clone(),
            input_name: self.active_input_name(),
            export,
            options: vramscope_core::report::TimelineOptions {
                threshold_fraction: self.settings.threshold_fraction(),
                view_ms,
            },
            path,
            generated_at_ms: vramscope_core::model::now_unix_ms(),
        };
        #[cfg(feature = "native")]
        self.jobs.export_timeline(job);
        #[cfg(not(feature = "native"))]
        drop(job);
    }

    /// File › Export report… and Ctrl+Shift+E: the diagnosis over all the evidence the app holds
    /// (the Diagnose wizard's, with the live capture so far), written in the background in the
    /// format the chosen file's extension names.
    fn export_report_with_dialog(&mut self) {
        self.offer_live_capture();
        if !self.can_export_report() {
            self.notices.push(
                NoticeLevel::Warning,
                "Nothing to report yet: open a capture, snapshot or log, or start a live source.",
            );
            return;
        }
        // Named after the shown capture, else the first file the diagnosis looked at.
        let input = match self.active_session() {
            Some(_) => self.active_input_name(),
            None => self
                .wizard
                .diagnosis()
                .inputs
                .first()
                .map(|i| i.name.clone())
                .unwrap_or_default(),
        };
        let suggested = format!(
            "{}.report.html",
            vramscope_core::report::export::input_stem(&input)
        );
        if let Some(path) = self.pick_path(PathAction::ExportReport, &suggested) {
            self.finish_path_action(PathAction::ExportReport, path);
        }
    }

    /// Record button and Ctrl+R: starts recording the live source to a new file in the recordings
    /// directory, or stops the running recording.
    fn toggle_recording(&mut self) {
        #[cfg(feature = "native")]
        {
            let recordings_dir = self.recordings_dir.clone().or_else(default_recordings_dir);
            let Some(session) = self.active_session_mut() else {
                return;
            };
            if let Some((path, result)) = session.stop_recording() {
                match result {
                    Ok(status) => self.notices.push(
                        NoticeLevel::Info,
                        format!(
                            "Recorded {} samples to {} ({})",
                            status.samples_written,
                            path.display(),
                            vramscope_core::model::format_bytes(status.bytes_written)
                        ),
                    ),
                    Err(message) => self.notices.push(NoticeLevel::Error, message),
                }
                return;
            }
            if !session.is_live() {
                self.notices.push(
                    NoticeLevel::Warning,
                    "Only a live source can be recorded. Use File › Save as… to write this capture to a new file.",
                );
                return;
            }
            let Some(dir) = recordings_dir else {
                self.notices.push(
                    NoticeLevel::Error,
                    "Cannot record: no directory for recordings was found.",
                );
                return;
            };
            if let Err(err) = std::fs::create_dir_all(&dir) {
                self.notices.push(
                    NoticeLevel::Error,
                    format!("{}: cannot create the directory: {err}", dir.display()),
                );
                return;
            }
            let name = default_recording_name(
                vramscope_core::model::now_unix_ms(),
                session.is_simulated(),
            );
            let path = dir.join(name);
            if let Err(message) = session.start_recording(&path) {
                self.notices.push(NoticeLevel::Error, message);
            }
        }
        #[cfg(not(feature = "native"))]
        self.notices
            .push(NoticeLevel::Warning, "Recording needs the desktop app.");
    }

    /// Adds the note being typed at "now": the current time for a live source; for a file, the
    /// last hovered moment, or else the end of the capture.
    fn add_annotation(&mut self) {
        let text = std::mem::take(&mut self.annotation_draft);
        let hovered_t = self.timeline.last_hovered_t_ms;
        let Some(session) = self.active_session_mut() else {
            return;
        };
        let t_ms = annotation_time(session, hovered_t);
        session.add_annotation(&text, t_ms);
    }

    /// Sets the text of the note to add (the note field in the top bar).
    pub fn set_annotation_draft(&mut self, text: &str) {
        text.clone_into(&mut self.annotation_draft);
    }

    /// What the commands' enabled checks look at, as things stand now.
    pub fn command_context(&self) -> CommandContext {
        #[cfg(feature = "native")]
        let (watching, command_running) = (
            self.watcher.is_some(),
            self.command_run
                .as_ref()
                .is_some_and(super::run_command::CommandRun::is_running),
        );
        #[cfg(not(feature = "native"))]
        let (watching, command_running) = (false, false);
        CommandContext {
            view: self.view,
            has_session: self.active_session().is_some(),
            has_report_evidence: self.can_export_report(),
            watching,
            demo_running: self.demo_speed().is_some(),
            native: cfg!(feature = "native"),
            snapshots_open: self.allocators.views().len(),
            command_running,
        }
    }

    /// Queues the commands whose shortcuts were pressed this frame (those that cannot run now
    /// are ignored, as their greyed-out menu items would be).
    fn handle_shortcuts(&mut self, ctx: &egui::Context) {
        let context = self.command_context();
        let sender = self.commands.sender();
        for command in UiCommand::pressed(ctx) {
            if command.availability(&context).is_enabled() {
                sender.send(command);
            }
        }
    }

    /// Runs every command and event sent since the last call; returns whether any ran.
    fn run_queued_commands(&mut self) -> bool {
        let mut ran = false;
        while let Some(action) = self.commands.next() {
            match action {
                Action::Command(command) => self.run_command(command),
                Action::Event(event) => self.handle_event(event),
            }
            ran = true;
        }
        ran
    }

    /// Runs `command` now. Menus, shortcuts and views send commands, and they all end up here.
    /// A command that cannot run now explains why in a notice (the menus grey such commands out
    /// and shortcuts skip them, so this only happens when called directly).
    pub fn run_command(&mut self, command: UiCommand) {
        if let Some(view) = command.view() {
            self.set_view(view);
            return;
        }
        if let Some(export) = command.timeline_export() {
            self.export_timeline_with_dialog(export);
            return;
        }
        match command {
            UiCommand::Open => self.open_with_dialog(),
            UiCommand::WatchFolder => self.watch_folder_with_dialog(),
            UiCommand::StopWatching => {
                #[cfg(feature = "native")]
                self.stop_watching();
            }
            UiCommand::SaveAs => self.save_with_dialog(),
            UiCommand::ToggleRecording => self.toggle_recording(),
            UiCommand::ExportReport => self.export_report_with_dialog(),
            UiCommand::Quit => self.quit(),
            UiCommand::ShowSettings => self.show_settings = true,
            UiCommand::AddNote => self.add_annotation(),
            UiCommand::CommandPalette => self.palette.open(),
            UiCommand::RunCommand => {
                #[cfg(feature = "native")]
                if self.command_run.as_ref().is_some_and(|r| r.is_running()) {
                    self.notices.push(
                        NoticeLevel::Info,
                        "A command is running: stop it or wait for its end before starting another.",
                    );
                } else {
                    self.run_dialog.open();
                }
                #[cfg(not(feature = "native"))]
                self.notices.push(
                    NoticeLevel::Warning,
                    "Running a command needs the desktop app.",
                );
            }
            UiCommand::CompareSnapshots => {
                if self.allocators.set_comparing(true) {
                    self.set_view(View::Allocator);
                } else {
                    self.notices.push(
                        NoticeLevel::Info,
                        "Open two or more snapshots first: Compare shows two of them side by side.",
                    );
                }
            }
            // Shown above: views and timeline exports.
            UiCommand::ShowTimeline
            | UiCommand::ShowAllocator
            | UiCommand::ShowDiagnose
            | UiCommand::ShowHardwareChecks
            | UiCommand::ExportTimelinePng
            | UiCommand::ExportTimelinePng2x
            | UiCommand::ExportTimelineCsv
            | UiCommand::ExportTimelinePerfetto => {}
        }
    }

    /// Handles `event`, an action with data that a view sent.
    pub fn handle_event(&mut self, event: AppEvent) {
        match event {
            AppEvent::ShowInAllocatorTab(request) => self.show_in_allocator_tab(&request),
            AppEvent::SetDemoSpeed(speed) => self.set_demo_speed(speed),
            AppEvent::OpenFleetGpu(device_index) => self.open_fleet_gpu(device_index),
        }
    }

    /// The speed of the simulated demo machine sampled live, if one is.
    pub fn demo_speed(&self) -> Option<u32> {
        #[cfg(feature = "native")]
        {
            self.sessions
                .iter()
                .find_map(|s| s.demo_pace())
                .map(|pace| pace.speed())
        }
        #[cfg(not(feature = "native"))]
        {
            None
        }
    }

    /// Plays the live demo machine `speed` times faster than real time.
    fn set_demo_speed(&mut self, speed: u32) {
        #[cfg(feature = "native")]
        if let Some(pace) = self.sessions.iter().find_map(|s| s.demo_pace()) {
            pace.set_speed(speed);
            self.notices.push(
                NoticeLevel::Info,
                format!("The demo machine now runs at {}× real time.", pace.speed()),
            );
            return;
        }
        let _ = speed;
        self.notices.push(
            NoticeLevel::Warning,
            "Only the simulated demo machine runs at a chosen speed.",
        );
    }

    /// The process selected in the process table (index into the shown capture's processes),
    /// which the timeline highlights.
    pub fn selected_process(&self) -> Option<usize> {
        self.process_table.selected
    }

    fn handle_dropped_files(&mut self, ctx: &egui::Context) {
        let dropped = ctx.input_mut(|input| std::mem::take(&mut input.raw.dropped_files));
        for file in dropped {
            self.jobs.open_dropped(file);
        }
    }

    /// Applies changed settings to the theme and the sampler.
    fn apply_settings(&mut self, ctx: &egui::Context) {
        if self.applied.as_ref() == Some(&self.settings) {
            return;
        }
        let previous = self.applied.replace(self.settings.clone());
        if previous.as_ref().map(|p| p.theme) != Some(self.settings.theme) {
            ctx.set_theme(self.settings.theme.preference());
        }
        #[cfg(feature = "native")]
        if previous.as_ref().map(|p| p.sampling_interval_ms)
            != Some(self.settings.sampling_interval_ms)
        {
            for session in &self.sessions {
                session.set_sampling_interval(self.settings.sampling_interval_ms);
            }
        }
    }

    fn update_title(&mut self, ctx: &egui::Context) {
        let title = self.window_title();
        if title != self.sent_title {
            ctx.send_viewport_cmd(egui::ViewportCommand::Title(title.clone()));
            self.sent_title = title;
        }
    }

    fn top_bar_ui(&mut self, ui: &mut Ui) {
        egui::MenuBar::new().ui(ui, |ui| {
            let context = self.command_context();
            let commands = self.commands.sender();
            ui.menu_button("File", |ui| {
                UiCommand::Open.menu_item_ui(ui, &context, &commands);
                if context.native {
                    let watch = if context.watching {
                        UiCommand::StopWatching
                    } else {
                        UiCommand::WatchFolder
                    };
                    watch.menu_item_ui(ui, &context, &commands);
                    UiCommand::RunCommand.menu_item_ui(ui, &context, &commands);
                }
                UiCommand::SaveAs.menu_item_ui(ui, &context, &commands);
                ui.separator();
                for export in TimelineExport::ALL {
                    UiCommand::export_timeline(export).menu_item_ui(ui, &context, &commands);
                }
                UiCommand::ExportReport.menu_item_ui(ui, &context, &commands);
                ui.separator();
                UiCommand::Quit.menu_item_ui(ui, &context, &commands);
            });
            ui.menu_button("View", |ui| {
                ui.checkbox(&mut self.settings.stacked_processes, "Stacked processes");
                ui.checkbox(&mut self.settings.show_reserved, "Reserved memory");
                ui.checkbox(&mut self.settings.show_total, "Total memory");
                ui.checkbox(&mut self.settings.show_events, "Event markers");
                if let Some(current) = self.demo_speed() {
                    ui.separator();
                    demo_speed_ui(ui, current, &commands);
                }
                ui.separator();
                UiCommand::CompareSnapshots.menu_item_ui(ui, &context, &commands);
                ui.separator();
                UiCommand::ShowSettings.menu_item_ui(ui, &context, &commands);
                UiCommand::CommandPalette.menu_item_ui(ui, &context, &commands);
            });
            if self.active.is_some() || self.view == View::Timeline {
                ui.separator();
                self.source_ui(ui);
            }
            if self.active_session().is_some_and(Session::is_live) {
                ui.separator();
                self.recording_ui(ui);
            }
            if let Some(session) = self.active_session() {
                let hint = if session.is_live() {
                    "note at the current time"
                } else {
                    "note at the last hovered time"
                };
                ui.separator();
                let field = ui.add(
                    egui::TextEdit::singleline(&mut self.annotation_draft)
                        .hint_text(hint)
                        .desired_width(180.0),
                );
                let entered = field.lost_focus() && ui.input(|i| i.key_pressed(Key::Enter));
                let add = ui
                    .button(UiCommand::AddNote.label())
                    .on_hover_text(UiCommand::AddNote.tooltip());
                if (add.clicked() || entered) && !self.annotation_draft.trim().is_empty() {
                    self.commands.sender().send(UiCommand::AddNote);
                }
            }
            let saving = self.jobs.writes_running();
            if saving > 0 {
                ui.separator();
                ui.label(format!("saving {saving} file(s)…"));
            }
        });
    }

    /// Reads in progress (a bar and Cancel each) and the watched folder (with Stop).
    fn status_ui(&mut self, ui: &mut Ui) {
        for read in self.jobs.reads() {
            job_progress_ui(
                ui,
                &format!("Opening {}", read.file_name()),
                read.progress(),
            );
        }
        #[cfg(feature = "native")]
        if let Some(folder) = self.watched_folder().map(|f| f.display().to_string()) {
            ui.horizontal(|ui| {
                ui.label(format!("Watching {folder} for new snapshots"));
                if ui.button("Stop").clicked() {
                    self.stop_watching();
                }
            });
        }
    }

    fn has_status(&self) -> bool {
        #[cfg(feature = "native")]
        if self.watcher.is_some() {
            return true;
        }
        !self.jobs.reads().is_empty()
    }

    /// The Timeline view: devices, plots and processes of the active session.
    fn timeline_view_ui(&mut self, ui: &mut Ui) {
        if self.sessions.len() > 1 {
            top_panel(ui, "capture_compare_bar").show(ui, |ui| self.capture_compare.toggle_ui(ui));
            if self.capture_compare.on {
                central_panel(ui).show(ui, |ui| self.capture_compare.ui(ui, &self.sessions));
                return;
            }
        }
        let Some(session) = self.active.and_then(|i| self.sessions.get(i)) else {
            let elsewhere = self.open_elsewhere();
            let commands = self.commands.sender();
            let opening = self.jobs.running() > 0;
            central_panel(ui).show(ui, |ui| {
                if !elsewhere.is_empty() {
                    open_elsewhere_ui(ui, &elsewhere, &commands);
                    return;
                }
                ui.centered_and_justified(|ui| {
                    let text = if opening {
                        "Opening…"
                    } else if cfg!(feature = "native") {
                        "Open a .vramcap capture, a PyTorch snapshot or a log with File › Open… \
                         (Ctrl+O) or drop it on this window."
                    } else {
                        "Drop a .vramcap capture, a PyTorch snapshot or a log on this page to \
                         view it (nothing leaves your browser)."
                    };
                    ui.label(RichText::new(text).size(18.0));
                });
            });
            return;
        };
        if super::fleet::is_fleet(&session.capture) {
            let threshold = self.settings.threshold_fraction();
            let commands = self.commands.sender();
            central_panel(ui).show(ui, |ui| {
                self.fleet.ui(ui, &session.capture, threshold, &commands);
            });
            return;
        }
        egui::Panel::left("devices")
            .resizable(true)
            .default_size(250.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical().show(ui, |ui| device_list_ui(ui, &session.capture));
            });
        egui::Panel::bottom("processes")
            .resizable(true)
            .default_size(190.0)
            .show(ui, |ui| {
                process_table_ui(
                    ui,
                    &session.capture,
                    &session.timeline,
                    &mut self.process_table,
                );
            });
        central_panel(ui).show(ui, |ui| {
            let input = TimelineInput {
                capture: &session.capture,
                data: &session.timeline,
                live: session.is_live(),
                selected_process: self.process_table.selected,
            };
            timeline_ui(ui, &input, &mut self.settings, &mut self.timeline);
        });
    }

    /// What is open but shown in another view than the Timeline: snapshots (Allocator) and logs
    /// (Diagnose), with how many of each.
    fn open_elsewhere(&self) -> Vec<OpenElsewhere> {
        let mut elsewhere = Vec::new();
        let snapshots = self.allocators.views().len();
        if snapshots > 0 {
            elsewhere.push(OpenElsewhere {
                view: View::Allocator,
                what: counted(snapshots, "snapshot"),
            });
        }
        let logs = self
            .wizard
            .diagnosis()
            .inputs
            .iter()
            .filter(|input| input.kind == "log")
            .count();
        if logs > 0 {
            elsewhere.push(OpenElsewhere {
                view: View::Diagnose,
                what: counted(logs, "log"),
            });
        }
        elsewhere
    }

    /// The Hardware checks view (desktop only).
    fn hardware_view_ui(&mut self, ui: &mut Ui) {
        central_panel(ui).show(ui, |ui| {
            #[cfg(feature = "native")]
            self.hardware
                .get_or_insert_with(super::hardware::HardwarePanel::new)
                .ui(ui);
            #[cfg(not(feature = "native"))]
            {
                ui.heading("Hardware checks");
                ui.label(
                    "Checking GPUs needs the desktop app: the web viewer cannot reach the driver. \
                     Run vramscope on the GPU machine (or vramscope check in a terminal).",
                );
            }
        });
    }

    fn source_ui(&mut self, ui: &mut Ui) {
        let Some(active) = self.active else {
            if self.view == View::Timeline {
                let elsewhere = self.open_elsewhere();
                ui.label(if !elsewhere.is_empty() {
                    format!(
                        "No capture open · {}",
                        elsewhere_summary(&elsewhere, ui.ctx())
                    )
                } else if cfg!(feature = "native") {
                    "No capture open: open one (Ctrl+O) or drop it here".to_owned()
                } else {
                    "No capture open: drop a capture, snapshot or log on the page".to_owned()
                });
            }
            return;
        };
        let labels: Vec<String> = self.sessions.iter().map(Session::label).collect();
        if labels.len() > 1 {
            let mut selected = active;
            egui::ComboBox::from_id_salt("source")
                .selected_text(&labels[active])
                .show_ui(ui, |ui| {
                    for (i, label) in labels.iter().enumerate() {
                        ui.selectable_value(&mut selected, i, label);
                    }
                })
                .response
                // Named for screen readers (it has no visible label: the choice is the name).
                .widget_info(|| {
                    egui::WidgetInfo::labeled(egui::Role::ComboBox, true, "Source shown")
                });
            self.select_session(selected);
        } else {
            ui.label(RichText::new(&labels[active]).strong());
        }
        if let Some(session) = self.active_session() {
            if session.is_simulated() {
                let badge = egui::Frame::new()
                    .fill(Color32::from_rgb(0xc0, 0x50, 0x10))
                    .corner_radius(3.0)
                    .inner_margin(egui::Margin::symmetric(6, 1))
                    .show(ui, |ui| {
                        ui.label(RichText::new("SIMULATED").strong().color(Color32::WHITE));
                    });
                badge.response.on_hover_text(
                    "This is the built-in demo machine (or a capture of it): simulated GPUs, not real \
                     measurements.",
                );
            }
            if session.is_live() {
                ui.label(
                    RichText::new("LIVE")
                        .strong()
                        .color(Color32::from_rgb(0x4a, 0xb0, 0x5a)),
                );
            }
        }
    }

    fn recording_ui(&mut self, ui: &mut Ui) {
        #[cfg(feature = "native")]
        {
            let Some(session) = self.active_session() else {
                return;
            };
            if !session.is_live() {
                return;
            }
            let shortcut = UiCommand::ToggleRecording
                .shortcut_text(ui.ctx())
                .unwrap_or_default();
            let status = session
                .recording_status()
                .map(|(path, status)| (path.to_owned(), status));
            match status {
                Some((path, status)) => {
                    let button = ui
                        .button(
                            RichText::new("Stop recording")
                                .color(Color32::from_rgb(0xe0, 0x4a, 0x4a)),
                        )
                        .on_hover_text(format!("Recording to {} ({shortcut})", path.display()));
                    ui.label(format!(
                        "REC {} · {} samples",
                        vramscope_core::model::format_bytes(status.bytes_written),
                        status.samples_written
                    ));
                    if let Some(error) = status.last_error {
                        ui.label(
                            RichText::new(format!("write error: {error}"))
                                .color(Color32::from_rgb(0xe0, 0x4a, 0x4a)),
                        );
                    }
                    if button.clicked() {
                        self.commands.sender().send(UiCommand::ToggleRecording);
                    }
                }
                None => {
                    let record = UiCommand::ToggleRecording;
                    if ui
                        .button(record.label())
                        .on_hover_text(record.tooltip_with_shortcut(ui.ctx()))
                        .clicked()
                    {
                        self.commands.sender().send(record);
                    }
                }
            }
        }
        #[cfg(not(feature = "native"))]
        let _ = ui;
    }

    fn settings_window(&mut self, ctx: &egui::Context) {
        let mut open = self.show_settings;
        egui::Window::new("Settings")
            .open(&mut open)
            .resizable(false)
            .collapsible(false)
            .show(ctx, |ui| {
                egui::Grid::new("settings").num_columns(2).show(ui, |ui| {
                    ui.label("Threshold");
                    ui.add(
                        egui::Slider::new(
                            &mut self.settings.threshold_pct,
                            super::settings::THRESHOLD_RANGE_PCT,
                        )
                        .suffix(" %"),
                    );
                    ui.end_row();
                    ui.label("Sampling interval");
                    ui.add(
                        egui::Slider::new(
                            &mut self.settings.sampling_interval_ms,
                            SAMPLING_INTERVAL_RANGE_MS,
                        )
                        .logarithmic(true)
                        .suffix(" ms"),
                    );
                    ui.end_row();
                    ui.label("Follow-live window");
                    ui.add(
                        egui::Slider::new(&mut self.settings.follow_window_secs, 10.0..=86_400.0)
                            .logarithmic(true)
                            .suffix(" s"),
                    );
                    ui.end_row();
                    ui.label("Theme");
                    ui.horizontal(|ui| {
                        use super::settings::ThemeChoice;
                        ui.selectable_value(
                            &mut self.settings.theme,
                            ThemeChoice::System,
                            "System",
                        );
                        ui.selectable_value(&mut self.settings.theme, ThemeChoice::Dark, "Dark");
                        ui.selectable_value(&mut self.settings.theme, ThemeChoice::Light, "Light");
                    });
                    ui.end_row();
                    let now_ms = super::alerting::wall_ms();
                    self.alerting.settings_ui(ui, &mut self.settings, now_ms);
                });
            });
        self.show_settings = open;
    }

    fn drop_preview(&self, ctx: &egui::Context) {
        let hovering = ctx.input(|i| !i.raw.hovered_files.is_empty());
        if !hovering {
            return;
        }
        let painter = ctx.layer_painter(egui::LayerId::new(
            egui::Order::Foreground,
            egui::Id::unique("file_drop_target"),
        ));
        let rect = ctx.content_rect();
        painter.rect_filled(rect, 0.0, Color32::from_black_alpha(180));
        painter.text(
            rect.center(),
            egui::Align2::CENTER_CENTER,
            "Drop to open",
            egui::FontId::proportional(28.0),
            Color32::WHITE,
        );
    }
}

/// Files open in a view other than the Timeline.
struct OpenElsewhere {
    view: View,
    /// "2 snapshots", "1 log".
    what: String,
}

/// `n thing` or `n things`.
fn counted(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// "2 snapshots in Allocator (Ctrl+2) · 1 log in Diagnose (Ctrl+3)".
fn elsewhere_summary(elsewhere: &[OpenElsewhere], ctx: &egui::Context) -> String {
    elsewhere
        .iter()
        .map(|open| {
            let shortcut = UiCommand::show(open.view)
                .shortcut_text(ctx)
                .unwrap_or_default();
            format!("{} in {} ({shortcut})", open.what, open.view.label())
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

/// The Timeline's empty state when files are open elsewhere: what is open, where it is shown, a
/// button to go there, and how a timeline comes (a capture, or a live source).
fn open_elsewhere_ui(ui: &mut Ui, elsewhere: &[OpenElsewhere], commands: &CommandSender) {
    ui.add_space(ui.available_height() * 0.3);
    ui.vertical_centered(|ui| {
        ui.label(RichText::new("No capture is open, so there is no timeline to show.").size(18.0));
        ui.add_space(8.0);
        for open in elsewhere {
            ui.label(format!(
                "{} open, shown in {}.",
                open.what,
                open.view.label()
            ));
            let command = UiCommand::show(open.view);
            if ui
                .button(format!("Show {}", open.view.label()))
                .on_hover_text(command.tooltip_with_shortcut(ui.ctx()))
                .clicked()
            {
                commands.send(command);
            }
        }
        ui.add_space(8.0);
        ui.label(
            "A timeline comes from a .vramcap capture (File › Open…, Ctrl+O) or a live source \
             (vramscope without files).",
        );
    });
}

/// View › Demo speed: the paces to pick from, the current one selected.
fn demo_speed_ui(ui: &mut Ui, current: u32, commands: &CommandSender) {
    ui.label("Demo speed").on_hover_text(
        "Play the simulated machine's day faster than real time (its OOM comes 8 minutes in at 1×)",
    );
    ui.horizontal(|ui| {
        for speed in DEMO_SPEEDS {
            if ui
                .selectable_label(current == speed, format!("{speed}×"))
                .clicked()
            {
                commands.send_event(AppEvent::SetDemoSpeed(speed));
            }
        }
    });
}

/// When a note added now lands: the current time for a live source; for a file, the last hovered
/// moment if there is one, else the end of the capture.
fn annotation_time(session: &Session, hovered_t_ms: Option<UnixMs>) -> UnixMs {
    if session.is_live() {
        return vramscope_core::model::now_unix_ms();
    }
    hovered_t_ms
        .or_else(|| session.capture.time_span_ms().map(|(_, last)| last))
        .unwrap_or(session.capture.meta.started_ms)
}

/// `vramscope-YYYYMMDD-HHMMSS[-simulated].vramcap` (UTC).
fn default_recording_name(started_ms: UnixMs, simulated: bool) -> String {
    let stamp: String = super::format::format_utc_ms(started_ms)
        .chars()
        .take(19)
        .filter(char::is_ascii_digit)
        .collect();
    let (date, time) = stamp.split_at(stamp.len().min(8));
    let suffix = if simulated { "-simulated" } else { "" };
    format!("vramscope-{date}-{time}{suffix}.vramcap")
}

/// `<data dir>/vramscope/recordings` (on Linux `~/.local/share/vramscope/recordings`).
#[cfg(feature = "native")]
fn default_recordings_dir() -> Option<PathBuf> {
    eframe::storage_dir("vramscope").map(|dir| dir.join("recordings"))
}

impl eframe::App for VramscopeApp {
    fn ui(&mut self, ui: &mut Ui, _frame: &mut eframe::Frame) {
        let ctx = ui.ctx().clone();
        self.hold_close_for_unsaved_notes(&ctx);
        self.poll_background();
        self.handle_shortcuts(&ctx);
        self.handle_dropped_files(&ctx);
        self.apply_settings(&ctx);
        self.update_title(&ctx);

        top_panel(ui, "top_bar").show(ui, |ui| self.top_bar_ui(ui));
        let commands = self.commands.sender();
        top_panel(ui, "view_tabs").show(ui, |ui| view_tabs_ui(ui, self.view, &commands));
        // Shortcuts, menus and tabs act before the central area is drawn, so it shows their
        // effect in this frame.
        self.run_queued_commands();
        if self.has_status() {
            top_panel(ui, "status").show(ui, |ui| self.status_ui(ui));
        }
        if !self.notices.is_empty() {
            top_panel(ui, "notices").show(ui, |ui| self.notices.ui(ui));
        }
        if !self.alerting.shown().is_empty() {
            let now_ms = super::alerting::wall_ms();
            top_panel(ui, "alerts").show(ui, |ui| self.alerting.ui(ui, now_ms));
        }
        self.command_run_ui(ui);
        match self.view {
            View::Timeline => self.timeline_view_ui(ui),
            View::Allocator => self.allocators.ui(ui),
            View::Diagnose => {
                central_panel(ui).show(ui, |ui| self.wizard.ui(ui));
            }
            View::HardwareChecks => self.hardware_view_ui(ui),
        }
        self.settings_window(&ctx);
        let context = self.command_context();
        self.palette.ui(&ctx, &context, &self.commands.sender());
        self.drop_preview(&ctx);
        self.quit_question(&ctx);
        self.path_prompt(&ctx);
        self.run_dialog_ui(&ctx);
        // What the central area and the dialogs sent; the next frame shows the result.
        if self.run_queued_commands() {
            ctx.request_repaint();
        }
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, eframe::APP_KEY, &self.settings);
    }

    /// The panels' colour, so that a panel the web viewer leaves unfilled
    /// ([`super::views::central_panel`]) looks like a filled one.
    fn clear_color(&self, visuals: &egui::Visuals) -> [f32; 4] {
        visuals.panel_fill.to_normalized_gamma_f32()
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn on_exit(&mut self) {
        self.shut_down_sessions();
    }

    /// The web build paints with glow (`src/web.rs`), and with eframe's `glow` feature `on_exit`
    /// also receives the GL context, which nothing here needs.
    #[cfg(target_arch = "wasm32")]
    fn on_exit(&mut self, _gl: Option<&eframe::glow::Context>) {
        self.shut_down_sessions();
    }
}

impl VramscopeApp {
    /// Stops every session's sampling and logs what could not be stopped cleanly.
    fn shut_down_sessions(&mut self) {
        // The job of a run started here stops with the window, as a terminal's would.
        #[cfg(feature = "native")]
        if let Some(run) = &mut self.command_run {
            run.shut_down();
        }
        for session in &mut self.sessions {
            if let Some(problem) = session.shutdown() {
                log::error!("{problem}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recording_names_carry_the_utc_time_and_say_simulated() {
        assert_eq!(
            default_recording_name(1_796_026_801_250, false),
            "vramscope-20261130-082001.vramcap"
        );
        assert_eq!(
            default_recording_name(0, true),
            "vramscope-19700101-000000-simulated.vramcap"
        );
    }
}
