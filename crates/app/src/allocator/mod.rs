//! The allocator view: block map, fragmentation summary, OOM explainer and time travel over one
//! PyTorch allocator snapshot.
//!
//! [`AllocatorView`] is self-contained: the app shell creates one per opened snapshot and calls
//! [`AllocatorView::ui`] each frame. The analysis (time travel for every device, OOM
//! explanations) runs as a job on the UI's [`Runner`], a device per step (on a thread natively,
//! between frames in the web viewer), from the first frame the view is drawn.

pub mod block_map;

pub mod compare;
pub mod panels;
pub mod tabs;
pub mod timeline;
#[cfg(feature = "native")]
pub mod watcher;
pub mod whatif;

use std::collections::HashMap;
use std::sync::Arc;

use egui::{Color32, Key, Rect, RichText, Sense, Stroke, StrokeKind, Ui, pos2, vec2};

use self::block_map::{BlockMapLayout, BlockPaint, MapRow, MapView, PaintedRect, ROW_HEIGHT};
use self::timeline::TimelineCache;
use crate::runner::{Job, Poll, Runner, Step, job_progress_ui};
use vramscope_core::analysis::categories::MemoryBreakdown;
use vramscope_core::analysis::deadline::{self, Deadline};
use vramscope_core::analysis::fragmentation::{self, FragmentationReport};
use vramscope_core::analysis::oom::OomExplanation;
use vramscope_core::analysis::snapshot_analysis::{
    DeviceAnalysis, SnapshotAnalysisBuild, snapshot_devices,
};
use vramscope_core::analysis::timetravel::{AllocatorState, BlockStatus, TimeTravel};
use vramscope_core::diagnose::oom::{JudgedOom, LastFailureEvidence, judge_all_with};
use vramscope_core::model::allocator::{AllocatorSnapshot, StackId};
#[cfg(feature = "native")]
pub use watcher::SnapshotWatcher;

/// Width of the side panel, in points.
const SIDE_PANEL_WIDTH: f32 = 380.0;
/// Where a segment's label starts in the block map's label column.
const SEGMENT_LABEL_INDENT: f32 = 28.0;
/// Search results highlighted at most (the count is still reported).
const MAX_HIGHLIGHTS: usize = 5000;

/// How long one step of the analysis runs: the job sees Cancel and reports progress between
/// steps (and in the web viewer the browser gets its turn).
const ANALYSIS_STEP: web_time::Duration = web_time::Duration::from_millis(40);

/// One device's analysis with the diagnosis's verdict on each of its OOMs (what the view shows).
pub struct JudgedDevice {
    pub analysis: DeviceAnalysis,
    /// The diagnosis's verdict on each of `analysis.ooms`, in the same order.
    pub judged: Vec<JudgedOom>,
    /// Where the live memory went at the last OOM (the one the diagnosis judges), for the
    /// explainer's bars; `None` without an OOM.
    pub breakdown: Option<Arc<MemoryBreakdown>>,
}

impl JudgedDevice {
    /// Judges the OOMs of `analysis`, a device of `snapshot`, with the last failure's history,
    /// replay and categories from `last_failure` where the doctor's facts already have them
    /// (else worked out here).
    pub fn new(
        snapshot: &AllocatorSnapshot,
        analysis: DeviceAnalysis,
        last_failure: Option<LastFailureEvidence>,
    ) -> Self {
        let expandable = snapshot
            .settings
            .as_ref()
            .and_then(|s| s.expandable_segments);
        let last_failure = last_failure.or_else(|| {
            let last = analysis.ooms.last()?;
            Some(LastFailureEvidence::of(&analysis.travel, last.event_index))
        });
        let breakdown = last_failure
            .as_ref()
            .and_then(|evidence| evidence.breakdown.clone());
        let judged = judge_all_with(&analysis.travel, &analysis.ooms, expandable, last_failure);
        JudgedDevice {
            analysis,
            judged,
            breakdown,
        }
    }
}

/// Analyses every device of `snapshot` on `runner` in steps that stop at a deadline, reporting
/// the share of devices done, then judges their OOMs; a cancelled job stops between steps with
/// the devices analysed so far.
fn spawn_analysis(
    runner: &Runner,
    snapshot: Arc<AllocatorSnapshot>,
    name: &str,
) -> Job<Vec<JudgedDevice>> {
    fn judge(devices: Vec<DeviceAnalysis>, snapshot: &AllocatorSnapshot) -> Vec<JudgedDevice> {
        devices
            .into_iter()
            .map(|d| JudgedDevice::new(snapshot, d, None))
            .collect()
    }
    let mut build = Some(SnapshotAnalysisBuild::new(Arc::clone(&snapshot)));
    runner.spawn_stepped(&format!("analysing {name}"), move |progress| {
        let Some(current) = build.take() else {
            return Step::Done(Vec::new());
        };
        if progress.is_cancelled() {
            return Step::Done(judge(current.into_done(), &snapshot));
        }
        match current.run(Deadline::after(ANALYSIS_STEP)) {
            deadline::Step::Done(devices) => Step::Done(judge(devices, &snapshot)),
            deadline::Step::Pending(more) => {
                let (done, total) = more.devices_done();
                progress.set_fraction(done as f32 / total.max(1) as f32);
                build = Some(more);
                Step::Pending
            }
        }
    })
}
/// Which side tab is open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SideTab {
    Summary,
    Oom,
    Events,
    Block,
    WhatIf,
}

/// Everything the view shows for one device.
struct DeviceView {
    /// Shared with the "What if…" tab's replays, which walk the same trace.
    travel: Arc<TimeTravel>,
    ooms: Vec<OomExplanation>,
    judged: Vec<JudgedOom>,
    /// Where the live memory went at the last OOM (see [`JudgedDevice::breakdown`]).
    breakdown: Option<Arc<MemoryBreakdown>>,
    /// Events applied: the state shown is the one after `position` events.
    position: usize,
    state: AllocatorState,
    layout: BlockMapLayout,
    report: FragmentationReport,
    map: MapView,
    /// Address of the pinned block (kept while scrubbing as long as a block starts there).
    pinned: Option<u64>,
    search_text: String,
    search_message: String,
    /// Addresses of blocks that match the search.
    search_matches: Vec<u64>,
    /// Whether each stack matched the frame query `.0`: scrubbing re-runs the search on every
    /// state, and the same stacks come back again and again.
    stack_matches: (String, HashMap<StackId, bool>),
    timeline_cache: TimelineCache,
    rects: Vec<PaintedRect>,
    map_rect: Rect,
    /// Row and byte offset to bring into view on the next frame.
    reveal: Option<(usize, u64)>,
    /// The event list should scroll to the current position on the next frame.
    scroll_events: bool,
    /// The "What if…" tab: settings typed and the last replay of this device's trace.
    whatif: whatif::WhatIfPanel,
}

impl DeviceView {
    fn new(
        JudgedDevice {
            analysis,
            judged,
            breakdown,
        }: JudgedDevice,
    ) -> Self {
        let position = analysis.travel.len();
        let state = analysis.travel.state_at(position);
        let layout = BlockMapLayout::new(&state);
        let report = fragmentation::analyze(&state);
        DeviceView {
            travel: Arc::new(analysis.travel),
            ooms: analysis.ooms,
            judged,
            breakdown,
            position,
            state,
            layout,
            report,
            map: MapView::default(),
            pinned: None,
            search_text: String::new(),
            search_message: String::new(),
            search_matches: Vec::new(),
            stack_matches: (String::new(), HashMap::new()),
            timeline_cache: TimelineCache::default(),
            rects: Vec::new(),
            map_rect: Rect::NOTHING,
            reveal: None,
            scroll_events: false,
            whatif: whatif::WhatIfPanel::default(),
        }
    }

    /// Moves time travel to `position` and recomputes what depends on the state.
    fn seek(&mut self, position: usize) {
        let position = position.min(self.travel.len());
        if position == self.position {
            return;
        }
        self.travel
            .move_state(&mut self.state, self.position, position);
        self.position = position;
        self.layout = BlockMapLayout::new(&self.state);
        self.report = fragmentation::analyze(&self.state);
        self.scroll_events = true;
        if !self.search_text.is_empty() {
            self.run_search(false);
        }
    }

    /// Finds blocks by hex address or by frame text; pins and reveals the first match when
    /// `reveal` is set.
    fn run_search(&mut self, reveal: bool) {
        self.search_matches.clear();
        let query = self.search_text.trim().to_string();
        if query.is_empty() {
            self.search_message.clear();
            return;
        }
        if let Some(address) = parse_address(&query) {
            match self.state.block_containing(address) {
                Some((segment, block)) => {
                    let found = &self.state.segments[segment].blocks[block];
                    self.search_matches.push(found.address);
                    self.search_message = format!(
                        "{address:#x} is in block {:#x} of segment {:#x}",
                        found.address, self.state.segments[segment].address
                    );
                }
                None => {
                    self.search_message = format!("no segment holds {address:#x} at this event");
                }
            }
        } else {
            let needle = query.to_lowercase();
            if self.stack_matches.0 != needle {
                self.stack_matches = (needle.clone(), HashMap::new());
            }
            for segment in &self.state.segments {
                for block in &segment.blocks {
                    if block.status == BlockStatus::Free {
                        continue;
                    }
                    let snapshot = self.travel.snapshot();
                    let (stack, _) = panels::block_stack(snapshot, &self.travel, block);
                    let matches = *self.stack_matches.1.entry(stack).or_insert_with(|| {
                        vramscope_core::analysis::frames::stack_mentions(snapshot, stack, &needle)
                    });
                    if matches {
                        self.search_matches.push(block.address);
                    }
                }
            }
            self.search_message = format!(
                "{} blocks allocated from frames matching {query:?}",
                self.search_matches.len()
            );
        }
        if reveal && let Some(&first) = self.search_matches.first() {
            self.pinned = Some(first);
            self.reveal_address(first);
        }
    }

    fn reveal_address(&mut self, address: u64) {
        if let Some((segment, _)) = self.state.block_containing(address) {
            let row = self.layout.segment_rows[segment];
            let offset = address - self.state.segments[segment].address;
            self.reveal = Some((row, offset));
        }
    }

    fn oom_positions(&self) -> Vec<usize> {
        self.ooms.iter().map(|e| e.event_index).collect()
    }
}

/// Parses `0x…` or a long bare hex number as an address.
fn parse_address(query: &str) -> Option<u64> {
    if let Some(hex) = query
        .strip_prefix("0x")
        .or_else(|| query.strip_prefix("0X"))
    {
        return u64::from_str_radix(hex, 16).ok();
    }
    if query.len() >= 8 && query.chars().all(|c| c.is_ascii_hexdigit()) {
        return u64::from_str_radix(query, 16).ok();
    }
    None
}

/// Where the analysis is.
enum Analysis {
    /// Not started: it starts on the first frame, with the UI's context to wake.
    Waiting,
    Running(Job<Vec<JudgedDevice>>),
    /// Done; `cancelled` when the user stopped it (only the devices analysed by then are shown).
    Ready {
        cancelled: bool,
    },
}

/// The allocator view of one snapshot.
pub struct AllocatorView {
    snapshot: Arc<AllocatorSnapshot>,
    name: String,
    analysis: Analysis,
    devices: Vec<DeviceView>,
    selected_device: usize,
    tab: SideTab,
    /// While the view is first laid out unseen, part by part ([`AllocatorView::lay_out_in_parts`]):
    /// how many of its [`VIEW_PARTS`] parts the frames so far laid out, and the number of the
    /// frame that laid out the last of them (a frame can run the UI in more than one pass).
    parts_laid_out: Option<(u8, u64)>,
}

/// The parts a view is first laid out in, one more per frame: the header and timeline, the side
/// panel, the block map.
const VIEW_PARTS: u8 = 3;

impl AllocatorView {
    /// Starts analysing `snapshot` (in the background on native builds). `name` is shown as the
    /// title, usually the file name.
    pub fn new(snapshot: Arc<AllocatorSnapshot>, name: String) -> Self {
        AllocatorView {
            snapshot,
            name,
            analysis: Analysis::Waiting,
            devices: Vec::new(),
            selected_device: 0,
            tab: SideTab::Summary,
            parts_laid_out: None,
        }
    }

    /// A view of `snapshot` with its analysis already made (by the reader that opened the file,
    /// which also took the doctor's facts from it), one per device in
    /// [`snapshot_devices`] order.
    pub fn with_analysis(
        snapshot: Arc<AllocatorSnapshot>,
        name: String,
        analysis: Vec<JudgedDevice>,
    ) -> Self {
        AllocatorView {
            snapshot,
            name,
            analysis: Analysis::Ready { cancelled: false },
            devices: analysis.into_iter().map(DeviceView::new).collect(),
            selected_device: 0,
            tab: SideTab::Summary,
            parts_laid_out: None,
        }
    }

    /// Lays the view out over the next frames, one more part in each (the header and timeline,
    /// then the side panel, then the block map), while [`AllocatorView::laying_out`] tells the
    /// caller to hide it. The first frame of a view lays out all its text, rasterises its
    /// glyphs and reduces the timeline; in a browser that was one 90-110 ms frame at 264.5 MB,
    /// in parts each frame does a third of it (docs/benchmarks.md, issue 14).
    pub fn lay_out_in_parts(&mut self) {
        self.parts_laid_out = Some((0, u64::MAX));
    }

    /// True while the view, its data ready, is being laid out part by part
    /// ([`AllocatorView::lay_out_in_parts`]): this frame of `ctx` lays out one more part (or
    /// the last), and the view should not be shown. False while the analysis runs, whose
    /// progress is shown.
    pub fn laying_out(&self, ctx: &egui::Context) -> bool {
        self.parts_laid_out
            .is_some_and(|(done, frame)| done < VIEW_PARTS || frame == ctx.cumulative_frame_nr())
            && matches!(self.analysis, Analysis::Ready { .. })
            && self.devices.get(self.selected_device).is_some()
    }

    /// How many parts of the view this frame lays out (all of them once it was laid out in
    /// parts), counting the frame as laying out one more than the last frame did.
    fn parts_to_lay_out(&mut self, ctx: &egui::Context) -> u8 {
        let frame = ctx.cumulative_frame_nr();
        let parts = match self.parts_laid_out {
            None => return VIEW_PARTS,
            // Another pass of the same frame.
            Some((done, at)) if at == frame => done,
            Some((done, _)) if done >= VIEW_PARTS => {
                self.parts_laid_out = None;
                return VIEW_PARTS;
            }
            Some((done, _)) => done + 1,
        };
        self.parts_laid_out = Some((parts, frame));
        parts
    }

    /// True once the analysis has finished and the views show data.
    pub fn is_ready(&self) -> bool {
        matches!(self.analysis, Analysis::Ready { .. })
    }

    /// The title shown, usually the file name (the app's snapshot picker lists it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The snapshot shown.
    pub fn snapshot(&self) -> &Arc<AllocatorSnapshot> {
        &self.snapshot
    }

    /// Shows GPU `device` (the Diagnose wizard's "Open in Allocator tab"); false when the
    /// snapshot has no such device.
    pub fn select_device(&mut self, device: u32) -> bool {
        match snapshot_devices(&self.snapshot)
            .iter()
            .position(|&d| d == device)
        {
            Some(index) => {
                self.selected_device = index;
                true
            }
            None => false,
        }
    }

    /// The GPU shown (once the analysis has finished).
    pub fn selected_device(&self) -> Option<u32> {
        self.devices
            .get(self.selected_device)
            .map(|d| d.travel.device())
    }

    /// Where the block map was drawn in the last frame (for tests and screenshots).
    pub fn block_map_rect(&self) -> Option<Rect> {
        self.devices
            .get(self.selected_device)
            .map(|d| d.map_rect)
            .filter(|r| r.is_positive())
    }

    /// Screen rectangle of the first block at `address` in the last frame's map, if visible.
    pub fn block_screen_rect(&self, address: u64) -> Option<Rect> {
        device_block_rect(self.devices.get(self.selected_device)?, address)
    }

    /// Moves time travel of the shown device to `position` events applied.
    pub fn seek(&mut self, position: usize) {
        if let Some(device) = self.devices.get_mut(self.selected_device) {
            device.seek(position);
        }
    }

    /// Events applied in the shown state (`None` before the analysis is done).
    pub fn position(&self) -> Option<usize> {
        self.devices.get(self.selected_device).map(|d| d.position)
    }

    /// Address of the pinned block, if any.
    pub fn pinned_address(&self) -> Option<u64> {
        self.devices
            .get(self.selected_device)
            .and_then(|d| d.pinned)
    }

    /// The time travel of the shown device, once the analysis is done (the comparison of two
    /// snapshots walks it too).
    pub(crate) fn shown_travel(&self) -> Option<&Arc<TimeTravel>> {
        self.devices.get(self.selected_device).map(|d| &d.travel)
    }

    /// Starts the analysis on the first frame; takes its result in when it is done. The
    /// comparison calls it too, for snapshots it shows that were never drawn on their own.
    pub(crate) fn poll_analysis(&mut self, ui: &Ui) {
        if matches!(self.analysis, Analysis::Waiting) {
            let runner = Runner::new(ui.ctx().clone());
            let job = spawn_analysis(&runner, Arc::clone(&self.snapshot), &self.name);
            self.analysis = Analysis::Running(job);
        }
        let Analysis::Running(job) = &mut self.analysis else {
            return;
        };
        match job.poll() {
            Poll::Running => {}
            Poll::Done(devices) => {
                let cancelled = job.progress().is_cancelled();
                self.devices = devices.into_iter().map(DeviceView::new).collect();
                self.analysis = Analysis::Ready { cancelled };
            }
            Poll::Lost(message) => {
                // The analysis failed: show the snapshot without time travel rather than
                // nothing.
                log::error!("{message}");
                self.devices = Vec::new();
                self.analysis = Analysis::Ready { cancelled: false };
            }
        }
    }

    /// Draws the whole view.
    pub fn ui(&mut self, ui: &mut Ui) {
        self.poll_analysis(ui);
        ui.horizontal(|ui| {
            ui.heading(&self.name);
            if self.devices.len() > 1 {
                egui::ComboBox::from_id_salt("allocator_device")
                    .selected_text(format!(
                        "cuda:{}",
                        self.devices[self.selected_device].travel.device()
                    ))
                    .show_ui(ui, |ui| {
                        for (i, d) in self.devices.iter().enumerate() {
                            ui.selectable_value(
                                &mut self.selected_device,
                                i,
                                format!("cuda:{}", d.travel.device()),
                            );
                        }
                    });
            }
        });
        if let Analysis::Running(job) = &self.analysis {
            let title = format!("Analysing {} trace events…", self.snapshot.event_count());
            job_progress_ui(ui, &title, job.progress());
            return;
        }
        if matches!(self.analysis, Analysis::Ready { cancelled: true }) {
            ui.label(format!(
                "Analysis cancelled: {} of {} GPUs analysed. Open the file again to analyse it all.",
                self.devices.len(),
                snapshot_devices(&self.snapshot).len()
            ));
        }
        let parts = self.parts_to_lay_out(ui.ctx());
        let Some(device) = self.devices.get_mut(self.selected_device) else {
            if !matches!(self.analysis, Analysis::Ready { cancelled: true }) {
                ui.label("This snapshot has no segments and no trace.");
            }
            return;
        };
        // The diagnosis of the failure the snapshot ends in: what Diagnose says for it.
        if let Some(judged) = device.judged.last() {
            ui.horizontal_wrapped(|ui| {
                ui.label("Diagnosis of the last out-of-memory error:");
                panels::verdict_ui(ui, judged);
            });
        }
        ui.label(
            RichText::new(vramscope_core::diagnose::fragmentation::summarize(
                &device.report.device,
            ))
            .strong(),
        );
        let check = device.travel.check();
        if !check.matches_final_state
            && let Some(problem) = &check.first_problem
        {
            ui.label(
                RichText::new(format!("Time travel is approximate: {problem}"))
                    .color(ui.visuals().warn_fg_color),
            );
        }
        time_travel_ui(ui, device);
        if parts < 2 {
            return;
        }
        let snapshot = Arc::clone(&self.snapshot);
        // At most half the window, so a long line in a side tab (the What-if table) wraps
        // instead of pushing the panel over the block maps.
        let side_max_width = (ui.available_width() * 0.5).max(SIDE_PANEL_WIDTH);
        // Both panels lie on the tab's central panel, which is filled already: painting their
        // fill again costs a software rasteriser a screenful of pixels a frame and shows nothing.
        let side_frame = egui::Frame::side_top_panel(ui.style()).fill(Color32::TRANSPARENT);
        let central_frame = egui::Frame::central_panel(ui.style()).fill(Color32::TRANSPARENT);
        egui::Panel::right("allocator_side_panel")
            .frame(side_frame)
            .resizable(true)
            .default_size(SIDE_PANEL_WIDTH)
            .max_size(side_max_width)
            .show(ui, |ui| side_panel_ui(ui, &snapshot, device, &mut self.tab));
        if parts < 3 {
            return;
        }
        egui::CentralPanel::default()
            .frame(central_frame)
            .show(ui, |ui| {
                search_bar_ui(ui, device);
                legend_ui(ui);
                if !device.whatif.comparing() {
                    if block_map_ui(ui, &snapshot, device) {
                        self.tab = SideTab::Block;
                    }
                    return;
                }
                // The replay's state beside the recorded one, each under its own label.
                ui.columns(2, |columns| {
                    let [recorded, replayed] = columns else {
                        return;
                    };
                    // Columns lay out justified, which stretches the words of a wrapped heading.
                    let layout = egui::Layout::top_down(egui::Align::Min);
                    recorded.with_layout(layout, |ui| {
                        ui.label(
                            RichText::new(format!(
                                "Recorded run · after {} of {} events",
                                device.position,
                                device.travel.len()
                            ))
                            .strong(),
                        );
                        if block_map_ui(ui, &snapshot, device) {
                            self.tab = SideTab::Block;
                        }
                    });
                    replayed.with_layout(layout, |ui| {
                        device.whatif.compared_map_ui(ui, &snapshot, &device.travel);
                    });
                });
            });
    }
}

/// Slider, step buttons, current event and the timeline.
fn time_travel_ui(ui: &mut Ui, device: &mut DeviceView) {
    let len = device.travel.len();
    let mut position = device.position;
    ui.horizontal(|ui| {
        if ui
            .button("< Prev")
            .on_hover_text("Previous event (shift+left)")
            .clicked()
        {
            position = position.saturating_sub(1);
        }
        if ui
            .button("Next >")
            .on_hover_text("Next event (shift+right)")
            .clicked()
        {
            position = (position + 1).min(len);
        }
        let slider = egui::Slider::new(&mut position, 0..=len).text("events applied");
        ui.add_enabled(len > 0, slider);
        let label = if position == 0 {
            "start of the trace".to_string()
        } else {
            panels::event_text(&device.travel, position - 1)
        };
        ui.label(label);
    });
    if ui.ui_contains_pointer() || ui.memory(|m| m.focused().is_none()) {
        ui.input(|i| {
            if i.key_pressed(Key::ArrowLeft) && i.modifiers.shift {
                position = position.saturating_sub(1);
            }
            if i.key_pressed(Key::ArrowRight) && i.modifiers.shift {
                position = (position + 1).min(len);
            }
        });
    }
    let oom_positions = device.oom_positions();
    if let Some(clicked) = timeline::timeline_ui(
        ui,
        &device.travel,
        &mut device.timeline_cache,
        position,
        &oom_positions,
    ) {
        position = clicked;
    }
    device.seek(position);
}

fn side_panel_ui(
    ui: &mut Ui,
    snapshot: &Arc<AllocatorSnapshot>,
    device: &mut DeviceView,
    tab: &mut SideTab,
) {
    ui.horizontal(|ui| {
        ui.selectable_value(tab, SideTab::Summary, "Fragmentation");
        ui.selectable_value(tab, SideTab::Oom, format!("OOM ({})", device.ooms.len()));
        ui.selectable_value(tab, SideTab::Events, "Events");
        ui.selectable_value(tab, SideTab::Block, "Pinned block");
        ui.selectable_value(tab, SideTab::WhatIf, "What if…");
    });
    ui.separator();
    match tab {
        SideTab::WhatIf => {
            if let Some(event) = device.whatif.ui(ui, snapshot, &device.travel) {
                device.seek(event);
            }
        }
        SideTab::Summary => {
            egui::ScrollArea::vertical()
                .show(ui, |ui| panels::fragmentation_ui(ui, &device.report));
        }
        SideTab::Oom => {
            let go_to = egui::ScrollArea::vertical()
                .show(ui, |ui| {
                    panels::oom_ui(
                        ui,
                        &device.ooms,
                        &device.judged,
                        device.breakdown.as_deref(),
                    )
                })
                .inner;
            if let Some(event) = go_to {
                device.seek(event);
            }
        }
        SideTab::Events => {
            let scroll_to = device
                .scroll_events
                .then(|| device.position.saturating_sub(1));
            device.scroll_events = false;
            if let Some(position) =
                panels::event_list_ui(ui, &device.travel, device.position, scroll_to)
            {
                device.seek(position);
            }
        }
        SideTab::Block => {
            let pinned = device.pinned.and_then(|a| device.state.block_containing(a));
            match pinned {
                Some((segment, block)) => {
                    let s = &device.state.segments[segment];
                    egui::ScrollArea::vertical().show(ui, |ui| {
                        panels::block_details_ui(
                            ui,
                            snapshot,
                            &device.travel,
                            s,
                            &s.blocks[block],
                            usize::MAX,
                        );
                    });
                }
                None => {
                    ui.label("Click a block in the map to pin it here.");
                }
            }
        }
    }
}

/// The search field, the fit button and the search result line.
fn search_bar_ui(ui: &mut Ui, device: &mut DeviceView) {
    ui.horizontal(|ui| {
        let label = ui.label("Find:");
        let edit = egui::TextEdit::singleline(&mut device.search_text)
            .hint_text("0x7fc6… address or frame text")
            .desired_width(260.0);
        let response = ui.add(edit).labelled_by(label.id);
        let entered = response.lost_focus() && ui.input(|i| i.key_pressed(Key::Enter));
        if ui.button("Search").clicked() || entered {
            device.run_search(true);
        }
        if ui
            .button("Fit")
            .on_hover_text("Zoom out to show whole segments")
            .clicked()
        {
            device.map = MapView::default();
        }
        if !device.search_message.is_empty() {
            ui.label(&device.search_message);
        }
    });
}

fn legend_ui(ui: &mut Ui) {
    ui.horizontal(|ui| {
        for paint in BlockPaint::ALL {
            let (rect, _) = ui.allocate_exact_size(block_map::SWATCH, Sense::hover());
            ui.painter()
                .rect_filled(rect, 2.0, block_map::paint_color(paint));
            ui.label(paint.label());
            ui.add_space(8.0);
        }
        ui.label(
            RichText::new("scroll: rows · shift+scroll or drag: pan · ctrl+scroll: zoom").weak(),
        );
    });
}

/// One block map as drawn this frame.
pub(crate) struct PaintedMap {
    pub(crate) response: egui::Response,
    /// Where the map was drawn.
    pub(crate) area: Rect,
    /// `(segment, block)` under the pointer.
    pub(crate) hovered: Option<(usize, usize)>,
}

/// What a block map draws: a state of `travel`'s device and its layout.
pub(crate) struct MapContent<'a> {
    /// Names the canvas for screen readers and tests.
    pub(crate) accessible_name: &'a str,
    /// The snapshot and trace the blocks' stacks come from (for the hover details).
    pub(crate) snapshot: &'a AllocatorSnapshot,
    pub(crate) travel: &'a TimeTravel,
    pub(crate) state: &'a AllocatorState,
    pub(crate) layout: &'a BlockMapLayout,
    /// Row and byte offset to bring into view.
    pub(crate) reveal: Option<(usize, u64)>,
    /// Blocks (by address) outlined in order, under the hovered block's outline.
    pub(crate) outlines: &'a [(u64, Stroke)],
}

/// Draws a state as a block map filling the space left in `ui`: segment rows with their
/// labels, every visible block, the outlines, and the hovered block's details in a tooltip;
/// scrolled, panned and zoomed by the pointer on `map`. Both the recorded state and a
/// replayed one are drawn with it, so the two read the same way.
pub(crate) fn paint_block_map(
    ui: &mut Ui,
    content: MapContent<'_>,
    map: &mut MapView,
    rects: &mut Vec<PaintedRect>,
) -> PaintedMap {
    let MapContent {
        accessible_name,
        snapshot,
        travel,
        state,
        layout,
        reveal,
        outlines,
    } = content;
    let size = ui.available_size().max(vec2(200.0, 100.0));
    let (response, painter) = ui.allocate_painter(size, Sense::click_and_drag());
    let name = accessible_name.to_string();
    response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Canvas, true, &name));
    let area = response.rect;
    if let Some((row, offset)) = reveal {
        map.reveal(layout, area, row, offset);
    }
    if response.hovered() {
        let (scroll, zoom, pointer) =
            ui.input(|i| (i.smooth_scroll_delta, i.zoom_delta(), i.pointer.hover_pos()));
        if zoom != 1.0 {
            map.zoom_around(zoom, pointer.map_or(area.center().x, |p| p.x), area);
        } else {
            map.scroll_y -= scroll.y;
            map.pan_x -= scroll.x;
        }
    }
    if response.dragged() {
        let delta = response.drag_delta();
        map.pan_x -= delta.x;
        map.scroll_y -= delta.y;
    }
    map.clamp(layout, area);

    let visuals = ui.visuals();
    painter.rect_filled(area, 0.0, visuals.extreme_bg_color);
    let label_color = visuals.text_color();
    let weak = visuals.weak_text_color();
    let font = egui::FontId::monospace(11.0);
    for row in block_map::visible_rows(layout, map, area) {
        let origin = block_map::row_origin(map, area, row);
        let y = origin.y + ROW_HEIGHT / 2.0;
        match &layout.rows[row] {
            MapRow::Header { text, depth } => {
                let x = area.left() + 4.0 + f32::from(*depth) * 12.0;
                painter.text(
                    pos2(x, y),
                    egui::Align2::LEFT_CENTER,
                    text,
                    egui::FontId::proportional(12.0),
                    weak,
                );
            }
            MapRow::Segment { index } => {
                // A long label (a 16-digit address, an expandable segment's tag) is drawn
                // smaller to fit the label column rather than running under the bars.
                let label = block_map::segment_label(state, *index);
                let room = block_map::LABEL_WIDTH - SEGMENT_LABEL_INDENT - 4.0;
                let mut galley = painter.layout_no_wrap(label.clone(), font.clone(), label_color);
                if galley.size().x > room {
                    let size = block_map::shrunk_label_size(font.size, galley.size().x, room);
                    galley =
                        painter.layout_no_wrap(label, egui::FontId::monospace(size), label_color);
                }
                let top_left = pos2(
                    area.left() + SEGMENT_LABEL_INDENT,
                    y - galley.size().y / 2.0,
                );
                painter.galley(top_left, galley, label_color);
            }
        }
    }
    block_map::visible_rects(layout, state, map, area, rects);
    let bars = painter.with_clip_rect(Rect::from_min_max(
        pos2(area.left() + block_map::LABEL_WIDTH, area.top()),
        area.max,
    ));
    bars.add(block_map::bars_mesh(rects));
    for &(address, stroke) in outlines {
        if let Some((segment, block)) = state.block_containing(address)
            && let Some(rect) = block_map::block_rect(layout, state, map, area, segment, block)
        {
            bars.rect_stroke(rect, 0.0, stroke, StrokeKind::Outside);
        }
    }
    let hovered = response
        .hover_pos()
        .and_then(|pos| block_map::hit_test(layout, state, map, area, pos));
    let mut response = response;
    if let Some((segment, block)) = hovered {
        if let Some(rect) = block_map::block_rect(layout, state, map, area, segment, block) {
            bars.rect_stroke(
                rect,
                0.0,
                Stroke::new(1.0, label_color),
                StrokeKind::Outside,
            );
        }
        let s = &state.segments[segment];
        let b = &s.blocks[block];
        response = response.on_hover_ui_at_pointer(|ui| {
            panels::block_details_ui(ui, snapshot, travel, s, b, panels::TOOLTIP_STACK_LINES);
        });
    }
    PaintedMap {
        response,
        area,
        hovered,
    }
}

/// Draws the recorded state's block map with the search matches and the pinned block; returns
/// true when a block was clicked (pinned).
fn block_map_ui(ui: &mut Ui, snapshot: &AllocatorSnapshot, device: &mut DeviceView) -> bool {
    let outlines: Vec<(u64, Stroke)> = device
        .search_matches
        .iter()
        .take(MAX_HIGHLIGHTS)
        .map(|&address| (address, Stroke::new(1.5, Color32::YELLOW)))
        .chain(
            device
                .pinned
                .map(|address| (address, Stroke::new(2.0, Color32::WHITE))),
        )
        .collect();
    let content = MapContent {
        accessible_name: "Block map",
        snapshot,
        travel: &device.travel,
        state: &device.state,
        layout: &device.layout,
        reveal: device.reveal.take(),
        outlines: &outlines,
    };
    let painted = paint_block_map(ui, content, &mut device.map, &mut device.rects);
    device.map_rect = painted.area;
    if !painted.response.clicked() {
        return false;
    }
    device.pinned = painted
        .hovered
        .map(|(s, b)| device.state.segments[s].blocks[b].address);
    device.pinned.is_some()
}

fn device_block_rect(device: &DeviceView, address: u64) -> Option<Rect> {
    let (segment, block) = device.state.block_containing(address)?;
    block_map::block_rect(
        &device.layout,
        &device.state,
        &device.map,
        device.map_rect,
        segment,
        block,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frag_oom_view() -> AllocatorView {
        let snapshot = vramscope_core::test_fixtures::pytorch_snapshot("frag_oom.pickle");
        AllocatorView::new(Arc::new(snapshot), "frag_oom.pickle".to_owned())
    }

    /// Runs frames of `view` in a `size` window until its analysis is done.
    fn run_until_ready(ctx: &egui::Context, view: &mut AllocatorView, size: egui::Vec2) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !view.is_ready() {
            assert!(std::time::Instant::now() < deadline, "analysis not done");
            std::thread::sleep(std::time::Duration::from_millis(10));
            run_frame(ctx, view, size);
        }
    }

    /// One frame of `view` in a `size` window (its texture changes dropped: no renderer here).
    fn run_frame(
        ctx: &egui::Context,
        view: &mut AllocatorView,
        size: egui::Vec2,
    ) -> egui::FullOutput {
        let input = egui::RawInput {
            screen_rect: Some(Rect::from_min_size(egui::Pos2::ZERO, size)),
            ..Default::default()
        };
        let mut output = ctx.run_ui(input, |ui| view.ui(ui));
        output.textures_delta.clear();
        output
    }

    /// Laid out in parts, a view lays out the header and timeline in the first frame, adds the
    /// side panel in the second and the block map in the third, and is whole from then on.
    #[test]
    fn a_view_laid_out_in_parts_adds_one_part_a_frame() {
        // Made ready in one context, laid out in a fresh one, as a view opened in the browser.
        let size = vec2(1000.0, 700.0);
        let mut view = frag_oom_view();
        run_until_ready(&egui::Context::default(), &mut view, size);
        view.lay_out_in_parts();
        view.devices[0].map_rect = Rect::NOTHING;
        let ctx = egui::Context::default();
        let map_drawn = |view: &AllocatorView| view.devices[0].map_rect != Rect::NOTHING;
        for frame in 1..=VIEW_PARTS {
            assert!(view.laying_out(&ctx), "before frame {frame}");
            run_frame(&ctx, &mut view, size);
            assert_eq!(map_drawn(&view), frame == VIEW_PARTS, "frame {frame}");
        }
        assert!(!view.laying_out(&ctx));
        run_frame(&ctx, &mut view, size);
        assert!(map_drawn(&view));
        assert!(!view.laying_out(&ctx));
    }

    /// Triangles the last frame of `view` at 1280×800 gives the GPU, once its analysis is done.
    fn triangles_of_a_frame(view: &mut AllocatorView) -> usize {
        let ctx = egui::Context::default();
        let size = vec2(1280.0, 800.0);
        run_until_ready(&ctx, view, size);
        // A few frames, as the view settles; the last one is counted.
        run_frame(&ctx, view, size);
        run_frame(&ctx, view, size);
        let output = run_frame(&ctx, view, size);
        ctx.tessellate(output.shapes, output.pixels_per_point)
            .iter()
            .map(|clipped| match &clipped.primitive {
                egui::epaint::Primitive::Mesh(mesh) => mesh.indices.len() / 3,
                egui::epaint::Primitive::Callback(_) => 0,
            })
            .sum()
    }

    /// The Allocator view's frame stays cheap for a software rasteriser (the web viewer in a
    /// browser without a GPU): the block map's blocks are plain quads, not feathered rectangles,
    /// and the timeline's columns are one picture (as feathered line segments and rectangles
    /// they made ~38,000 triangles of the first frame of a 66 MB snapshot's view in the browser).
    #[test]
    fn the_allocator_view_draws_its_columns_and_blocks_with_few_triangles() {
        let mut view = frag_oom_view();
        let triangles = triangles_of_a_frame(&mut view);
        assert!(triangles > 0);
        // 39,050 with feathered line segments and rectangles, 11,076 as quads, 7,142 with the
        // timeline's columns as a picture.
        assert!(triangles < 8_000, "{triangles} triangles");
    }
}
