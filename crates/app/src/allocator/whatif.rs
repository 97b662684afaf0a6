//! The "What if…" side tab of the Allocator view: replays the shown device's trace under other
//! `PYTORCH_CUDA_ALLOC_CONF` settings and a cap ([`vramscope_core::analysis::replay`]) in the background,
//! with progress and Cancel, and shows the predicted peak and outcome of each setting next to
//! the recorded run's. Everything it says comes from the replay's report
//! ([`vramscope_core::report::whatif`] words it, as the CLI does).
//!
//! "Show peak" / "Show failure" moves the recorded block map to that moment of the program and
//! draws the replay's own state there (its blocks and segments under the setting) beside it,
//! with the same block-map drawing, so the two can be compared block by block.

use std::sync::Arc;

use egui::{RichText, Ui};

use super::block_map::{BlockMapLayout, MapView, PaintedRect};
use super::{MapContent, paint_block_map};
use crate::runner::{Job, Poll, Runner, job_progress_ui};
#[cfg(any(target_arch = "wasm32", test))]
use crate::runner::{Progress, Step};
#[cfg(any(not(target_arch = "wasm32"), test))]
use vramscope_core::analysis::replay::what_if;
use vramscope_core::analysis::replay::{
    AllocConf, LimitsUsed, SettingOutcome, WhatIfReport, WhatIfRequest, replay_state_at,
};
#[cfg(any(target_arch = "wasm32", test))]
use vramscope_core::analysis::replay::{ReplayError, WhatIfSteps};
use vramscope_core::analysis::timetravel::{AllocatorState, TimeTravel};
use vramscope_core::diagnose::size::parse_size;
use vramscope_core::model::allocator::AllocatorSnapshot;
use vramscope_core::model::format_bytes;
use vramscope_core::report::whatif::{outcome_words, self_check_line};

/// The moment of a replay that the compared block map shows.
#[derive(Clone, Debug, PartialEq)]
struct Moment {
    /// The setting replayed, as the report names it.
    setting: String,
    /// Events applied before the state shown (the recorded map moves to the same position).
    events_applied: usize,
    /// What the moment is, for the label: "its predicted peak" or "right before its
    /// out-of-memory error".
    what: String,
    /// The replay's self-check failed: the state is not to be trusted.
    unreliable: bool,
}

impl Moment {
    /// The moment to show for `outcome`: right before its failing request, else right after
    /// the event at which its reserved memory peaked.
    fn of(outcome: &SettingOutcome, reliable: bool) -> Moment {
        let (events_applied, what) = match outcome.oom {
            Some(oom) => (
                oom.event_index,
                format!(
                    "right before its out-of-memory error ({} request at event {})",
                    format_bytes(oom.request_bytes),
                    oom.event_index
                ),
            ),
            None => (
                outcome.peak_event + 1,
                format!(
                    "its predicted peak ({} reserved, at event {})",
                    format_bytes(outcome.peak_reserved_bytes),
                    outcome.peak_event
                ),
            ),
        };
        Moment {
            setting: outcome.conf.clone(),
            events_applied,
            what,
            unreliable: !reliable,
        }
    }

    /// The heading over the replayed map: which setting, which moment, and that it is a
    /// prediction.
    fn heading(&self) -> String {
        format!(
            "Replayed under {} · after {} events: {}",
            self.setting, self.events_applied, self.what
        )
    }
}

/// The replay's state at a moment, drawn as a block map.
struct ComparedMap {
    moment: Moment,
    state: AllocatorState,
    layout: BlockMapLayout,
    map: MapView,
    rects: Vec<PaintedRect>,
}

/// The block map beside the recorded one.
enum Compared {
    None,
    Computing(Moment, Job<Result<AllocatorState, String>>),
    Ready(Box<ComparedMap>),
    Failed(Moment, String),
}

/// What the tab is doing.
enum Replay {
    Idle,
    Running(Job<Result<WhatIfReport, String>>),
    Done(Box<WhatIfReport>),
    Failed(String),
}

/// The tab's state for one device: the settings typed, the cap, and the last replay.
pub struct WhatIfPanel {
    /// One setting per line in PyTorch's syntax; empty lines are skipped, no setting at all runs
    /// the sweep of candidates.
    settings_text: String,
    /// Per-process cap (`4GiB`, `512MiB`, bytes); empty for none (or the one the trace shows).
    cap_text: String,
    replay: Replay,
    /// The replay's block map shown beside the recorded one, if any.
    compared: Compared,
}

impl Default for WhatIfPanel {
    fn default() -> Self {
        WhatIfPanel {
            settings_text: String::new(),
            cap_text: String::new(),
            replay: Replay::Idle,
            compared: Compared::None,
        }
    }
}

/// The request the typed settings and cap make, or what is wrong with them (naming the line).
fn request_from(settings_text: &str, cap_text: &str, device: u32) -> Result<WhatIfRequest, String> {
    let mut candidates = Vec::new();
    for line in settings_text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
    {
        candidates.push(AllocConf::parse(line).map_err(|e| format!("'{line}': {e}"))?);
    }
    let cap_text = cap_text.trim();
    let cap_bytes = if cap_text.is_empty() {
        None
    } else {
        Some(parse_size(cap_text).ok_or_else(|| {
            format!("cap '{cap_text}' is not a size: write e.g. 4GiB, 512MiB or bytes")
        })?)
    };
    Ok(WhatIfRequest {
        device,
        candidates,
        cap_bytes,
        device_memory_bytes: None,
    })
}

impl WhatIfPanel {
    /// Draws the tab for the device `travel` walks. Returns the position (events applied) to
    /// move the recorded block map to when the user asks to see a setting's peak or failure;
    /// the replay's own state at that moment is then computed and drawn beside it
    /// ([`Self::compared_map_ui`]).
    pub fn ui(
        &mut self,
        ui: &mut Ui,
        snapshot: &Arc<AllocatorSnapshot>,
        travel: &Arc<TimeTravel>,
    ) -> Option<usize> {
        self.poll();
        ui.label(
            "Replays this trace through a model of PyTorch's caching allocator under other \
             settings. One setting per line, PyTorch's syntax (e.g. expandable_segments:True); \
             none: a sweep of candidates.",
        );
        let running = matches!(self.replay, Replay::Running(_));
        ui.add_enabled(
            !running,
            egui::TextEdit::multiline(&mut self.settings_text)
                .hint_text("expandable_segments:True\nmax_split_size_mb:128")
                .desired_rows(3)
                .desired_width(f32::INFINITY),
        );
        ui.horizontal(|ui| {
            ui.label("Cap:");
            ui.add_enabled(
                !running,
                egui::TextEdit::singleline(&mut self.cap_text)
                    .hint_text("none (e.g. 4GiB)")
                    .desired_width(100.0),
            );
            let replay = ui
                .add_enabled(!running, egui::Button::new("Replay"))
                .on_hover_text("Replay the trace under these settings (Ctrl+Enter)");
            let shortcut = ui.input(|i| i.key_pressed(egui::Key::Enter) && i.modifiers.command);
            if (replay.clicked() || shortcut) && !running {
                self.start(ui, travel);
            }
        });
        let mut shown = None;
        match &mut self.replay {
            Replay::Idle => {}
            Replay::Running(job) => {
                job_progress_ui(ui, "Replaying…", job.progress());
            }
            Replay::Failed(message) => {
                ui.label(RichText::new(message.as_str()).color(ui.visuals().error_fg_color));
            }
            Replay::Done(report) => {
                if let Some(outcome) = report_ui(ui, report) {
                    let moment = Moment::of(outcome, report.self_check.reliable);
                    let conf = if outcome.recorded {
                        Ok(AllocConf::recorded(snapshot.settings.as_ref()))
                    } else {
                        AllocConf::parse(&outcome.conf).map_err(|e| e.to_string())
                    };
                    shown = Some((moment, conf, report.limits));
                }
            }
        }
        let (moment, conf, limits) = shown?;
        let events_applied = moment.events_applied;
        self.compare(ui, travel, moment, conf, limits);
        Some(events_applied)
    }

    fn start(&mut self, ui: &Ui, travel: &Arc<TimeTravel>) {
        let request = match request_from(&self.settings_text, &self.cap_text, travel.device()) {
            Ok(request) => request,
            Err(message) => {
                self.replay = Replay::Failed(message);
                return;
            }
        };
        let runner = Runner::new(ui.ctx().clone());
        let travel = Arc::clone(travel);
        // The desktop replays the settings side by side on a thread; the web page has one
        // thread, so it replays a range of events per step and draws (and answers Cancel)
        // between.
        #[cfg(not(target_arch = "wasm32"))]
        let job = runner.spawn("what-if replay", move |progress| {
            what_if(&travel, &request, &|fraction| {
                progress.set_fraction(fraction)
            })
            .map_err(|e| e.to_string())
        });
        #[cfg(target_arch = "wasm32")]
        let job = {
            let mut steps = WhatIfSteps::new(request);
            runner.spawn_stepped("what-if replay", move |progress| {
                replay_step(&mut steps, &travel, progress)
            })
        };
        self.replay = Replay::Running(job);
        self.compared = Compared::None;
    }

    /// Starts computing the replay's state at `moment` under `conf`, for the map beside the
    /// recorded one.
    fn compare(
        &mut self,
        ui: &Ui,
        travel: &Arc<TimeTravel>,
        moment: Moment,
        conf: Result<AllocConf, String>,
        limits: LimitsUsed,
    ) {
        let conf = match conf {
            Ok(conf) => conf,
            Err(message) => {
                self.compared = Compared::Failed(moment, message);
                return;
            }
        };
        let runner = Runner::new(ui.ctx().clone());
        let travel = Arc::clone(travel);
        let stop_at = moment.events_applied;
        let job = runner.spawn("what-if block map", move |_| {
            replay_state_at(&travel, &conf, &limits, stop_at).map_err(|e| e.to_string())
        });
        self.compared = Compared::Computing(moment, job);
    }

    /// True while a replayed block map is shown (or being computed) beside the recorded one.
    pub fn comparing(&self) -> bool {
        !matches!(self.compared, Compared::None)
    }

    /// Draws the replayed block map (its heading says which setting and moment, and that it
    /// is a prediction), or its progress; a Close button goes back to the recorded map alone.
    pub fn compared_map_ui(
        &mut self,
        ui: &mut Ui,
        snapshot: &AllocatorSnapshot,
        travel: &TimeTravel,
    ) {
        self.poll_compared();
        let mut close = false;
        match &mut self.compared {
            Compared::None => {}
            Compared::Computing(moment, job) => {
                close = heading_ui(ui, moment);
                job_progress_ui(ui, "Replaying to this moment…", job.progress());
            }
            Compared::Failed(moment, message) => {
                close = heading_ui(ui, moment);
                ui.label(RichText::new(message.as_str()).color(ui.visuals().error_fg_color));
            }
            Compared::Ready(compared) => {
                close = heading_ui(ui, &compared.moment);
                ui.label(format!(
                    "prediction: {} reserved, {} allocated, {} segments",
                    format_bytes(compared.state.reserved_bytes),
                    format_bytes(compared.state.allocated_bytes),
                    compared.state.segments.len()
                ));
                let content = MapContent {
                    accessible_name: "Replayed block map",
                    snapshot,
                    travel,
                    state: &compared.state,
                    layout: &compared.layout,
                    reveal: None,
                    outlines: &[],
                };
                paint_block_map(ui, content, &mut compared.map, &mut compared.rects);
            }
        }
        if close {
            self.compared = Compared::None;
        }
    }

    fn poll_compared(&mut self) {
        let Compared::Computing(moment, job) = &mut self.compared else {
            return;
        };
        self.compared = match job.poll() {
            Poll::Running => return,
            Poll::Done(Ok(state)) => Compared::Ready(Box::new(ComparedMap {
                moment: moment.clone(),
                layout: BlockMapLayout::new(&state),
                state,
                map: MapView::default(),
                rects: Vec::new(),
            })),
            Poll::Done(Err(message)) | Poll::Lost(message) => {
                Compared::Failed(moment.clone(), message)
            }
        };
    }

    fn poll(&mut self) {
        let Replay::Running(job) = &mut self.replay else {
            return;
        };
        self.replay = match job.poll() {
            Poll::Running => return,
            Poll::Done(Ok(report)) => Replay::Done(Box::new(report)),
            Poll::Done(Err(message)) => Replay::Failed(message),
            Poll::Lost(message) => Replay::Failed(message),
        };
    }
}

/// One step of the panel's replay on the web page: a range of events (see [`WhatIfSteps`]).
#[cfg(any(target_arch = "wasm32", test))]
fn replay_step(
    steps: &mut WhatIfSteps,
    travel: &TimeTravel,
    progress: &Progress,
) -> Step<Result<WhatIfReport, String>> {
    if progress.is_cancelled() {
        return Step::Done(Err(ReplayError::Cancelled.to_string()));
    }
    match steps.step(travel) {
        Ok(Some(report)) => Step::Done(Ok(report)),
        Ok(None) => {
            progress.set_fraction(steps.fraction_done());
            Step::Pending
        }
        Err(error) => Step::Done(Err(error.to_string())),
    }
}

/// The predicted peak reserved, with the range over the GPU timings and placements replayed
/// when it depends on them ("294.0 MiB (230.0 MiB – 294.0 MiB)").
fn peak_text(outcome: &SettingOutcome) -> String {
    match outcome.peak_range_bytes() {
        Some((low, high)) if low != high => format!(
            "{} ({} – {})",
            format_bytes(outcome.peak_reserved_bytes),
            format_bytes(low),
            format_bytes(high)
        ),
        _ => format_bytes(outcome.peak_reserved_bytes),
    }
}

/// Why the peak is a range, for its tooltip (`None` when it is one number).
fn range_explanation(outcome: &SettingOutcome) -> Option<String> {
    let mut why = Vec::new();
    if outcome.peak_reserved_range_bytes.is_some() {
        why.push(
            "Some frees in this trace waited for work on other streams. When the GPU finishes \
             that work changes from run to run, so the replay ran twice: as the trace recorded \
             it (the first number) and with every such use finished by the allocator's next call."
                .to_string(),
        );
    }
    if let Some(spread) = outcome.placement.filter(|_| outcome.placement_uncertain()) {
        why.push(format!(
            "Where the driver puts a new segment decides which of two equal free blocks a \
             request gets, and it changes from process to process. Replayed with segments in {} \
             other orders, {} ran out: whether this setting fits depends on the order a real \
             run gets.",
            spread.drawn, spread.ran_out
        ));
    }
    (!why.is_empty()).then(|| format!("{} Real runs can lie anywhere in the range.", why.join(" ")))
}

/// The replayed map's heading, in the warning colour when the self-check failed; returns true
/// when Close was clicked.
fn heading_ui(ui: &mut Ui, moment: &Moment) -> bool {
    // The button on a line of its own: the heading is long and wraps in a half-width column.
    let close = ui
        .small_button("Close")
        .on_hover_text("Show the recorded block map alone")
        .clicked();
    ui.label(RichText::new(moment.heading()).strong());
    if moment.unreliable {
        ui.label(
            RichText::new("self-check failed: this replay does not reproduce the real run")
                .color(ui.visuals().warn_fg_color),
        );
    }
    close
}

/// The self-check, then one row per setting: the recorded run first, then the replays. Returns
/// the setting whose peak or failure the user asked to see.
fn report_ui<'a>(ui: &mut Ui, report: &'a WhatIfReport) -> Option<&'a SettingOutcome> {
    let check = self_check_line(&report.self_check);
    let colour = if report.self_check.reliable {
        ui.visuals().text_color()
    } else {
        ui.visuals().warn_fg_color
    };
    ui.label(RichText::new(check).color(colour));
    let mut show_event = None;
    egui::ScrollArea::vertical().show(ui, |ui| {
        // One block per setting: name and button on a line, the peak and the outcome (often a
        // long sentence) wrapped beneath at the panel's width, so the panel never grows with it.
        for outcome in std::iter::once(&report.recorded).chain(&report.results) {
            ui.separator();
            ui.horizontal(|ui| {
                let name = if outcome.recorded {
                    format!("{} (recorded)", outcome.conf)
                } else {
                    outcome.conf.clone()
                };
                ui.strong(name);
                let what = if outcome.oom.is_some() {
                    "Show failure"
                } else {
                    "Show peak"
                };
                ui.with_layout(egui::Layout::right_to_left(egui::Align::Center), |ui| {
                    if ui
                        .small_button(what)
                        .on_hover_text(
                            "Move the recorded block map to this moment and draw the \
                             replay's block map beside it",
                        )
                        .clicked()
                    {
                        show_event = Some(outcome);
                    }
                });
            });
            // The peak on a line of its own: with a range it is too long to share the name's.
            let peak =
                ui.add(egui::Label::new(format!("peak {} reserved", peak_text(outcome))).wrap());
            if let Some(why) = range_explanation(outcome) {
                peak.on_hover_text(why);
            }
            ui.add(egui::Label::new(outcome_words(outcome, report)).wrap());
        }
        ui.separator();
        for note in &report.notes {
            ui.label(RichText::new(note).small());
        }
    });
    show_event
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_settings_and_cap_become_a_request() {
        let request = request_from(
            "expandable_segments:True\n\n max_split_size_mb:128 ",
            "4GiB",
            1,
        )
        .expect("valid");
        assert_eq!(request.device, 1);
        assert_eq!(request.candidates.len(), 2);
        assert_eq!(request.candidates[1].text, "max_split_size_mb:128");
        assert_eq!(request.cap_bytes, Some(4 << 30));
        let sweep = request_from("", "", 0).expect("valid");
        assert!(sweep.candidates.is_empty());
        assert_eq!(sweep.cap_bytes, None);
    }

    #[test]
    fn a_peak_that_depends_on_gpu_timing_shows_its_range() {
        // A real two-stream trace (H200): its frees wait for the other stream's work.
        let path = vramscope_core::test_fixtures::fixture_path("whatif/two_streams.pickle");
        let snapshot = vramscope_core::formats::pytorch::read_file(&path, &|_| true)
            .unwrap_or_else(|e| panic!("{e}"));
        let travel = TimeTravel::new(Arc::new(snapshot), 0);
        let request = request_from("default", "", 0).expect("valid");
        let report = what_if(&travel, &request, &|_| true).unwrap_or_else(|e| panic!("{e}"));
        let outcome = &report.results[0];
        let (low, high) = outcome
            .peak_reserved_range_bytes
            .unwrap_or_else(|| panic!("a range"));
        assert_eq!(
            peak_text(outcome),
            format!(
                "{} ({} – {})",
                format_bytes(outcome.peak_reserved_bytes),
                format_bytes(low),
                format_bytes(high)
            )
        );
        assert!(low < high);
        let single = SettingOutcome {
            peak_reserved_range_bytes: None,
            ..outcome.clone()
        };
        assert_eq!(
            peak_text(&single),
            format_bytes(outcome.peak_reserved_bytes)
        );
    }

    #[test]
    fn the_web_pages_replay_goes_a_range_of_events_per_step_to_the_same_report() {
        let snapshot = vramscope_core::test_fixtures::pytorch_snapshot("frag_oom.pickle");
        let travel = TimeTravel::new(Arc::new(snapshot), 0);
        let request =
            request_from("expandable_segments:True\nmax_split_size_mb:32", "", 0).expect("valid");
        let expected = what_if(&travel, &request, &|_| true).unwrap_or_else(|e| panic!("{e}"));
        let progress = Progress::new(egui::Context::default());
        let mut steps = WhatIfSteps::new(request.clone());
        let mut pending = 0;
        let report = loop {
            match replay_step(&mut steps, &travel, &progress) {
                Step::Pending => pending += 1,
                Step::Done(result) => break result.unwrap_or_else(|e| panic!("{e}")),
            }
            assert!(pending < 10_000, "never done");
        };
        // The plan, the self-check, the recorded settings, the first setting, each at least
        // one step; the second setting ends it.
        assert!(pending >= 4, "{pending} steps");
        assert_eq!(report, expected);
        assert!(progress.fraction().is_some_and(|f| f > 0.5 && f < 1.0));
        // Cancel between steps ends the replay with the replay's own message.
        let cancelled = Progress::new(egui::Context::default());
        let mut steps = WhatIfSteps::new(request);
        assert!(matches!(
            replay_step(&mut steps, &travel, &cancelled),
            Step::Pending
        ));
        cancelled.cancel();
        match replay_step(&mut steps, &travel, &cancelled) {
            Step::Done(Err(message)) => assert_eq!(message, ReplayError::Cancelled.to_string()),
            _ => panic!("a cancelled replay goes on"),
        }
    }

    #[test]
    fn a_bad_setting_or_cap_is_named() {
        let error = request_from("expandable_segment:True", "", 0).expect_err("unknown key");
        assert!(error.contains("expandable_segment:True"), "{error}");
        let error = request_from("", "lots", 0).expect_err("bad cap");
        assert!(error.contains("lots"), "{error}");
    }
}
