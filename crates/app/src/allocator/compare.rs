//! Two opened snapshots side by side in the Allocator tab (issue 33, "Compare"): their block maps
//! on one bytes-per-point scale, one time-travel control that moves both, the call sites whose
//! live bytes differ between the two moments shown (a click outlines that site's blocks in both
//! maps), each side's memory by category, and with more than two snapshots open, the rank table.
//!
//! The app only shows: `analysis::compare` measures (the same [`side`] and [`compare`] that
//! `vramscope compare` and its reports use, so the table here and the command line agree), and
//! `diagnose::compare` words the headline. Measuring a side walks every live block of its state,
//! which for a large snapshot is more than a frame: it runs as a job on the [`Runner`], one at a
//! time, and the table shows the last result (marked as updating) until the next is in.

use std::collections::HashMap;
use std::sync::Arc;

use egui::{Color32, Rect, RichText, Sense, Stroke, Ui, vec2};

use super::block_map::{BlockMapLayout, MapView, PaintedRect};
use super::{AllocatorView, MapContent, paint_block_map, panels};
use crate::runner::{Job, Poll, Runner};
use vramscope_core::analysis::categories::block_stack;
use vramscope_core::analysis::compare::{
    Comparison, Moment, RankRow, SiteDelta, category_rows, compare, rank_from_name, rank_table,
    side,
};
use vramscope_core::analysis::frames::user_call_site;
use vramscope_core::analysis::timetravel::{AllocatorState, BlockStatus, StateBlock, TimeTravel};
use vramscope_core::diagnose::compare::{CompareVerdict, judge, judge_ranks};
use vramscope_core::model::allocator::StackId;
use vramscope_core::model::format_bytes;

/// The colour that marks side A and side B in headings, bars and tables.
pub const SIDE_COLORS: [Color32; 2] = [
    Color32::from_rgb(0x4e, 0x9c, 0xf5),
    Color32::from_rgb(0xf0, 0x90, 0x30),
];
/// What the two sides are called on screen.
const SIDE_NAMES: [&str; 2] = ["A", "B"];
/// The outline of a block of the chosen call site: the Find field's highlight.
const HIGHLIGHT: Stroke = Stroke {
    width: 1.5,
    color: Color32::YELLOW,
};
/// Highlighted blocks outlined at most per map (all are counted).
const MAX_OUTLINES: usize = 5000;
/// Call sites the difference table lists at most.
const MAX_SITE_ROWS: usize = 200;
/// Steps of the linked slider when both sides move by their share of the trace.
const SHARE_STEPS: usize = 1000;
/// Default width of the panel with the difference table, in points.
const SIDE_PANEL_WIDTH: f32 = 430.0;
/// Room the linked slider leaves on its row for its value and text, in points.
const SLIDER_TEXT_WIDTH: f32 = 220.0;
/// The linked slider's smallest width, in points.
const MIN_SLIDER_WIDTH: f32 = 80.0;
/// Stack lines a call site's tooltip shows.
const TOOLTIP_STACK_LINES: usize = 12;

/// How the one time-travel control moves the two sides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Link {
    /// Both after the same number of trace events. Snapshots of one run (a snapshot every N
    /// steps) have traces that start together, so event n is the same moment of the run in
    /// both: the default.
    #[default]
    Event,
    /// Both at the same share of their own trace: for runs of different lengths, where event n
    /// of one has nothing to do with event n of the other.
    Share,
}

impl Link {
    const ALL: [Link; 2] = [Link::Event, Link::Share];

    fn label(self) -> &'static str {
        match self {
            Link::Event => "by event",
            Link::Share => "by share of trace",
        }
    }

    fn tooltip(self) -> &'static str {
        match self {
            Link::Event => {
                "Both maps show the state after the same number of trace events (a shorter \
                 trace stays at its end). Right for snapshots of one run, whose traces start \
                 together: event n is the same moment of the run in both."
            }
            Link::Share => {
                "Both maps show the same share of their own trace (half-way in one is half-way \
                 in the other). Right for runs of different lengths."
            }
        }
    }

    /// The slider's text, which also names it for screen readers.
    fn slider_text(self) -> &'static str {
        match self {
            Link::Event => "events applied (both)",
            Link::Share => "‰ of each trace (both)",
        }
    }

    /// The highest value of the linked control for traces of `lens` events.
    fn range(self, lens: [usize; 2]) -> usize {
        match self {
            Link::Event => lens[0].max(lens[1]),
            Link::Share => SHARE_STEPS,
        }
    }

    /// Events applied in a trace of `len` events when the linked control is at `value`.
    fn position(self, value: usize, len: usize) -> usize {
        match self {
            Link::Event => value.min(len),
            Link::Share => (value.min(SHARE_STEPS) * len + SHARE_STEPS / 2) / SHARE_STEPS,
        }
    }

    /// The linked control's value that shows `position` of a trace of `len` events.
    fn value_of(self, position: usize, len: usize) -> usize {
        match self {
            Link::Event => position,
            Link::Share if len == 0 => SHARE_STEPS,
            Link::Share => (position * SHARE_STEPS + len / 2) / len,
        }
    }
}

/// One side of the comparison: a snapshot's shown device at its own moment, as a block map.
struct CompareSide {
    /// Index of the snapshot's view in the Allocator tab.
    view: usize,
    name: String,
    travel: Arc<TimeTravel>,
    /// Events applied.
    position: usize,
    state: AllocatorState,
    layout: BlockMapLayout,
    /// The largest segment of this state: the larger of the two sides' sets the shared scale.
    own_largest_bytes: u64,
    map: MapView,
    rects: Vec<PaintedRect>,
    map_rect: Rect,
    reveal: Option<(usize, u64)>,
    /// Addresses of the blocks of the chosen call site.
    highlights: Vec<u64>,
    /// Call site of each stack seen: scrubbing meets the same stacks again and again.
    sites: HashMap<StackId, String>,
}

impl CompareSide {
    /// The side of `travel` (view `view`, named `name`) at its peak, where `vramscope compare`
    /// looks by default.
    fn new(view: usize, name: String, travel: Arc<TimeTravel>) -> Self {
        let position = Moment::Peak.events_applied(&travel);
        let state = travel.state_at(position);
        let layout = BlockMapLayout::new(&state);
        CompareSide {
            view,
            name,
            own_largest_bytes: layout.largest_segment_bytes,
            travel,
            position,
            state,
            layout,
            map: MapView::default(),
            rects: Vec::new(),
            map_rect: Rect::NOTHING,
            reveal: None,
            highlights: Vec::new(),
            sites: HashMap::new(),
        }
    }

    fn len(&self) -> usize {
        self.travel.len()
    }

    /// Moves to `position` events applied; false when it was there already.
    fn seek(&mut self, position: usize) -> bool {
        let position = position.min(self.len());
        if position == self.position {
            return false;
        }
        self.travel
            .move_state(&mut self.state, self.position, position);
        self.position = position;
        self.layout = BlockMapLayout::new(&self.state);
        self.own_largest_bytes = self.layout.largest_segment_bytes;
        true
    }

    /// The call site of `block`, as the comparison names it (the innermost frame of user code).
    fn site_of(
        sites: &mut HashMap<StackId, String>,
        travel: &TimeTravel,
        block: &StateBlock,
    ) -> String {
        let stack = block_stack(travel, block);
        sites
            .entry(stack)
            .or_insert_with(|| user_call_site(travel.snapshot(), stack))
            .clone()
    }

    /// Outlines the live blocks allocated at `site` (none for `None`); brings the first into
    /// view when `reveal` is set.
    fn highlight(&mut self, site: Option<&str>, reveal: bool) {
        self.highlights.clear();
        let Some(site) = site else {
            return;
        };
        for segment in &self.state.segments {
            for block in &segment.blocks {
                if block.status == BlockStatus::Allocated
                    && Self::site_of(&mut self.sites, &self.travel, block) == site
                {
                    self.highlights.push(block.address);
                }
            }
        }
        if reveal
            && let Some(&first) = self.highlights.first()
            && let Some((segment, _)) = self.state.block_containing(first)
        {
            let offset = first - self.state.segments[segment].address;
            self.reveal = Some((self.layout.segment_rows[segment], offset));
        }
    }

    /// The call site of the allocated block `(segment, block)`, if it is one.
    fn site_at(&mut self, (segment, block): (usize, usize)) -> Option<String> {
        let block = self.state.segments.get(segment)?.blocks.get(block)?;
        (block.status == BlockStatus::Allocated)
            .then(|| Self::site_of(&mut self.sites, &self.travel, block))
    }

    /// Screen rectangle of the first highlighted block in the last frame's map, if visible.
    fn first_highlight_rect(&self) -> Option<Rect> {
        let first = *self.highlights.first()?;
        let (segment, block) = self.state.block_containing(first)?;
        super::block_map::block_rect(
            &self.layout,
            &self.state,
            &self.map,
            self.map_rect,
            segment,
            block,
        )
        .filter(|rect| self.map_rect.intersects(*rect))
    }
}

/// What the difference table is computed for: which pair of sides, at which moments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PairKey {
    /// Counts changes of the sides (another snapshot picked).
    generation: u64,
    positions: [usize; 2],
}

/// The two sides measured and compared at the moments of `key`.
struct PairResult {
    key: PairKey,
    comparison: Comparison,
    verdict: CompareVerdict,
}

/// Every opened snapshot at its peak, measured against the median one.
struct RankResult {
    /// The time travels measured (by address): the table is redone when the set changes.
    key: Vec<usize>,
    rows: Vec<RankRow>,
    verdict: CompareVerdict,
}

/// The comparison shown in the Allocator tab while "Compare" is on.
pub struct CompareView {
    /// Indices of the views shown as A and B.
    chosen: [usize; 2],
    sides: [Option<CompareSide>; 2],
    generation: u64,
    link: Link,
    /// The linked control's value (see [`Link`]).
    linked: usize,
    pair_job: Option<Job<PairResult>>,
    pair: Option<PairResult>,
    rank_job: Option<Job<RankResult>>,
    ranks: Option<RankResult>,
    /// The call site whose blocks are outlined in both maps.
    selected_site: Option<String>,
}

impl CompareView {
    /// A comparison of the first of `views` open (A, the baseline) with the last (B), as
    /// `vramscope compare` compares the first file given with the last.
    pub fn new(views: usize) -> Self {
        CompareView {
            chosen: [0, views.saturating_sub(1)],
            sides: [None, None],
            generation: 0,
            link: Link::default(),
            linked: 0,
            pair_job: None,
            pair: None,
            rank_job: None,
            ranks: None,
            selected_site: None,
        }
    }

    /// Keeps A and B on their snapshots when the view at `index` was closed (the views after
    /// it move down one place).
    pub fn view_removed(&mut self, index: usize) {
        for k in 0..2 {
            if self.chosen[k] > index {
                self.chosen[k] -= 1;
            }
            if let Some(side) = &mut self.sides[k] {
                if side.view > index {
                    side.view -= 1;
                } else if side.view == index {
                    self.sides[k] = None;
                }
            }
        }
    }

    /// Events applied on each side (`None` until both analyses are done).
    pub fn positions(&self) -> Option<[usize; 2]> {
        Some([
            self.sides[0].as_ref()?.position,
            self.sides[1].as_ref()?.position,
        ])
    }

    /// Trace events of each side.
    pub fn trace_lengths(&self) -> Option<[usize; 2]> {
        Some([self.sides[0].as_ref()?.len(), self.sides[1].as_ref()?.len()])
    }

    /// The names of the snapshots shown as A and B.
    pub fn names(&self) -> Option<[&str; 2]> {
        Some([
            self.sides[0].as_ref()?.name.as_str(),
            self.sides[1].as_ref()?.name.as_str(),
        ])
    }

    /// True once the difference table is measured at the moments both maps show.
    pub fn is_up_to_date(&self) -> bool {
        self.pair
            .as_ref()
            .is_some_and(|p| Some(p.key) == self.wanted_key())
    }

    /// The call sites of the difference table with their change in live bytes (B − A).
    pub fn site_changes(&self) -> Vec<(String, i64)> {
        self.pair.as_ref().map_or_else(Vec::new, |p| {
            p.comparison
                .sites
                .iter()
                .map(|d| (d.site.clone(), d.delta_bytes))
                .collect()
        })
    }

    /// The comparison's headline, once measured.
    pub fn headline(&self) -> Option<&str> {
        self.pair.as_ref().map(|p| p.verdict.headline.as_str())
    }

    /// The call site whose blocks are outlined.
    pub fn selected_site(&self) -> Option<&str> {
        self.selected_site.as_deref()
    }

    /// How many blocks are outlined in A's and B's map.
    pub fn highlighted_blocks(&self) -> [usize; 2] {
        [0, 1].map(|k| self.sides[k].as_ref().map_or(0, |s| s.highlights.len()))
    }

    /// Where the first outlined block of side `k` (0 = A, 1 = B) was drawn in the last frame,
    /// if it is in view.
    pub fn highlight_screen_rect(&self, k: usize) -> Option<Rect> {
        self.sides.get(k)?.as_ref()?.first_highlight_rect()
    }

    /// Where each map was drawn in the last frame.
    pub fn map_rects(&self) -> [Option<Rect>; 2] {
        [0, 1].map(|k| {
            self.sides[k]
                .as_ref()
                .map(|s| s.map_rect)
                .filter(|r| r.is_positive())
        })
    }

    /// Points per byte of each map as last drawn: equal, since both share one scale.
    pub fn points_per_byte(&self) -> Option<[f64; 2]> {
        let scale = |s: &CompareSide| {
            s.map.points_per_byte(
                &s.layout,
                s.map_rect.width() - super::block_map::LABEL_WIDTH,
            )
        };
        Some([
            scale(self.sides[0].as_ref()?),
            scale(self.sides[1].as_ref()?),
        ])
    }

    /// The rank table (more than two snapshots open), once measured.
    pub fn rank_rows(&self) -> &[RankRow] {
        self.ranks.as_ref().map_or(&[], |r| r.rows.as_slice())
    }

    /// Moves both sides with the linked control set to `value` (see [`Link`]).
    pub fn seek_linked(&mut self, value: usize) {
        self.linked = value;
        let link = self.link;
        let site = self.selected_site.clone();
        for side in self.sides.iter_mut().flatten() {
            if side.seek(link.position(value, side.len())) {
                side.highlight(site.as_deref(), false);
            }
        }
    }

    /// Moves each side to its own `moment` (both peaks, both ends) and the linked control to
    /// where A is.
    fn seek_each(&mut self, moment: Moment) {
        let site = self.selected_site.clone();
        for side in self.sides.iter_mut().flatten() {
            if side.seek(moment.events_applied(&side.travel)) {
                side.highlight(site.as_deref(), false);
            }
        }
        self.sync_linked_value();
    }

    /// Moves each side one event on (or back), wherever it is.
    fn step_each(&mut self, forward: bool) {
        let site = self.selected_site.clone();
        for side in self.sides.iter_mut().flatten() {
            let position = if forward {
                side.position + 1
            } else {
                side.position.saturating_sub(1)
            };
            if side.seek(position) {
                side.highlight(site.as_deref(), false);
            }
        }
        self.sync_linked_value();
    }

    /// Sets the linked control to show where the sides are (A's place; with links by event,
    /// the further of the two).
    fn sync_linked_value(&mut self) {
        let [Some(a), Some(b)] = &self.sides else {
            return;
        };
        self.linked = match self.link {
            Link::Event => a.position.max(b.position),
            Link::Share => self.link.value_of(a.position, a.len()),
        };
    }

    /// Outlines `site`'s blocks in both maps (or none) and brings them into view.
    fn select_site(&mut self, site: Option<String>) {
        self.selected_site = site;
        for side in self.sides.iter_mut().flatten() {
            side.highlight(self.selected_site.as_deref(), true);
        }
    }

    fn wanted_key(&self) -> Option<PairKey> {
        Some(PairKey {
            generation: self.generation,
            positions: self.positions()?,
        })
    }

    /// Takes the sides from the chosen views (once their analysis is done), rebuilding a side
    /// whose view now shows another snapshot or device.
    fn sync_sides(&mut self, ui: &Ui, views: &mut [AllocatorView]) {
        let last = views.len().saturating_sub(1);
        for k in 0..2 {
            let index = self.chosen[k].min(last);
            self.chosen[k] = index;
            let Some(view) = views.get_mut(index) else {
                self.sides[k] = None;
                continue;
            };
            view.poll_analysis(ui);
            let travel = view.shown_travel().cloned();
            let current = self.sides[k].as_ref().is_some_and(|s| {
                s.view == index && travel.as_ref().is_some_and(|t| Arc::ptr_eq(t, &s.travel))
            });
            if current {
                continue;
            }
            self.generation += 1;
            self.sides[k] = travel.map(|travel| {
                let mut side = CompareSide::new(index, view.name().to_owned(), travel);
                side.highlight(self.selected_site.as_deref(), false);
                side
            });
            self.sync_linked_value();
        }
    }

    /// Takes in finished measurements and starts the next: the pair at the moments shown, the
    /// rank table when more than two snapshots are open.
    fn poll_jobs(&mut self, ui: &Ui, views: &mut [AllocatorView]) {
        if let Some(job) = &mut self.pair_job {
            match job.poll() {
                Poll::Running => {}
                Poll::Done(result) => {
                    self.pair = Some(result);
                    self.pair_job = None;
                }
                Poll::Lost(message) => {
                    log::error!("{message}");
                    self.pair_job = None;
                }
            }
        }
        if self.pair_job.is_none()
            && let Some(key) = self.wanted_key()
            && self.pair.as_ref().is_none_or(|p| p.key != key)
            && let [Some(a), Some(b)] = &self.sides
        {
            self.pair_job = Some(spawn_pair(ui, key, a, b));
        }
        if let Some(job) = &mut self.rank_job {
            match job.poll() {
                Poll::Running => {}
                Poll::Done(result) => {
                    self.ranks = Some(result);
                    self.rank_job = None;
                }
                Poll::Lost(message) => {
                    log::error!("{message}");
                    self.rank_job = None;
                }
            }
        }
        if views.len() > 2 && self.rank_job.is_none() {
            for view in views.iter_mut() {
                view.poll_analysis(ui);
            }
            let travels: Vec<(String, Arc<TimeTravel>)> = views
                .iter()
                .filter_map(|v| Some((v.name().to_owned(), Arc::clone(v.shown_travel()?))))
                .collect();
            let key: Vec<usize> = travels
                .iter()
                .map(|(_, t)| Arc::as_ptr(t) as usize)
                .collect();
            if travels.len() == views.len() && self.ranks.as_ref().is_none_or(|r| r.key != key) {
                self.rank_job = Some(spawn_ranks(ui, key, travels));
            }
        }
    }

    /// Draws the comparison over the whole tab: the rank table along the bottom (more than two
    /// snapshots), the difference table and categories on the right, the two maps in the middle.
    pub fn ui(&mut self, ui: &mut Ui, views: &mut [AllocatorView]) {
        self.sync_sides(ui, views);
        self.poll_jobs(ui, views);
        if views.len() > 2 {
            egui::Panel::bottom("compare_ranks")
                .resizable(true)
                .default_size(170.0)
                .show(ui, |ui| self.rank_panel_ui(ui, views.len()));
        }
        // At most 40 % of the window, so that the two maps keep the larger part.
        let side_max_width = (ui.available_width() * 0.4).max(300.0);
        egui::Panel::right("compare_side_panel")
            .resizable(true)
            .default_size(SIDE_PANEL_WIDTH.min(side_max_width))
            .max_size(side_max_width)
            .show(ui, |ui| self.difference_panel_ui(ui));
        crate::views::central_panel(ui).show(ui, |ui| {
            let names: Vec<String> = views.iter().map(|v| v.name().to_owned()).collect();
            self.pickers_ui(ui, &names);
            if self.sides.iter().any(Option::is_none) {
                ui.label("Waiting for the analysis of the chosen snapshots…");
                ui.ctx()
                    .request_repaint_after(std::time::Duration::from_millis(100));
                return;
            }
            self.time_travel_ui(ui);
            self.maps_ui(ui);
        });
    }

    /// The A and B pickers.
    fn pickers_ui(&mut self, ui: &mut Ui, names: &[String]) {
        ui.horizontal_wrapped(|ui| {
            for (k, side_name) in SIDE_NAMES.into_iter().enumerate() {
                side_badge_ui(ui, k);
                let mut chosen = self.chosen[k];
                egui::ComboBox::from_id_salt(("compare_pick", k))
                    .selected_text(names.get(chosen).map_or("", String::as_str))
                    .show_ui(ui, |ui| {
                        for (i, name) in names.iter().enumerate() {
                            ui.selectable_value(&mut chosen, i, name);
                        }
                    })
                    .response
                    .widget_info(|| {
                        egui::WidgetInfo::labeled(
                            egui::Role::ComboBox,
                            true,
                            format!("Snapshot {side_name}"),
                        )
                    });
                self.chosen[k] = chosen;
                if k == 0 {
                    ui.label("against");
                }
            }
            if ui
                .button("Swap")
                .on_hover_text("Make B the baseline: changes are counted from A to B")
                .clicked()
            {
                self.chosen.swap(0, 1);
            }
        });
    }

    /// The linked time-travel control and where each side is.
    fn time_travel_ui(&mut self, ui: &mut Ui) {
        let [Some(a), Some(b)] = &self.sides else {
            return;
        };
        let lens = [a.len(), b.len()];
        let mut link = self.link;
        let mut linked = self.linked;
        let mut moment = None;
        let mut step = None;
        ui.horizontal_wrapped(|ui| {
            ui.label("Time travel, linked");
            egui::ComboBox::from_id_salt("compare_link")
                .selected_text(link.label())
                .show_ui(ui, |ui| {
                    for option in Link::ALL {
                        ui.selectable_value(&mut link, option, option.label())
                            .on_hover_text(option.tooltip());
                    }
                })
                .response
                .on_hover_text(link.tooltip())
                .widget_info(|| {
                    egui::WidgetInfo::labeled(egui::Role::ComboBox, true, "Link time travel")
                });
            if ui
                .button("< Prev")
                .on_hover_text("Each side one event back")
                .clicked()
            {
                step = Some(false);
            }
            if ui
                .button("Next >")
                .on_hover_text("Each side one event on")
                .clicked()
            {
                step = Some(true);
            }
            if ui
                .button("Peaks")
                .on_hover_text("Each at its own peak (the most allocated)")
                .clicked()
            {
                moment = Some(Moment::Peak);
            }
            if ui
                .button("Ends")
                .on_hover_text("Each at the end of its trace")
                .clicked()
            {
                moment = Some(Moment::End);
            }
        });
        ui.horizontal(|ui| {
            // The slider takes the row's width but its value and text, so that the row never
            // grows past the maps' area (a row too wide widens the maps' columns under the
            // side panel).
            ui.spacing_mut().slider_width =
                (ui.available_width() - SLIDER_TEXT_WIDTH).max(MIN_SLIDER_WIDTH);
            ui.add(egui::Slider::new(&mut linked, 0..=link.range(lens)).text(link.slider_text()))
                .on_hover_text(link.tooltip());
        });
        if link != self.link {
            self.link = link;
            self.sync_linked_value();
        } else if let Some(moment) = moment {
            self.seek_each(moment);
        } else if let Some(forward) = step {
            self.step_each(forward);
        } else if linked != self.linked {
            self.seek_linked(linked);
        }
        if let Some(pair) = &self.pair {
            let stale = !self.is_up_to_date();
            let mut headline = RichText::new(&pair.verdict.headline).strong();
            if stale {
                headline = headline.weak();
            }
            ui.label(headline);
        }
    }

    /// The two block maps in columns, on one scale; zooming or panning one moves the other.
    fn maps_ui(&mut self, ui: &mut Ui) {
        let common = self
            .sides
            .iter()
            .flatten()
            .map(|s| s.own_largest_bytes)
            .max()
            .unwrap_or(0);
        for side in self.sides.iter_mut().flatten() {
            side.layout.largest_segment_bytes = common;
        }
        let before: Vec<(f32, f32)> = self
            .sides
            .iter()
            .flatten()
            .map(|s| (s.map.zoom, s.map.pan_x))
            .collect();
        let mut clicked_site = None;
        ui.columns(2, |columns| {
            for (k, column) in columns.iter_mut().enumerate() {
                if let Some(side) = &mut self.sides[k] {
                    // Columns lay out justified, which stretches the words of a wrapped heading.
                    column.with_layout(egui::Layout::top_down(egui::Align::Min), |ui| {
                        if let Some(site) = side_map_ui(ui, k, side) {
                            clicked_site = Some(site);
                        }
                    });
                }
            }
        });
        // One scale: the map the user zoomed or panned leads, the other follows.
        if let [Some(a), Some(b)] = &mut self.sides
            && before.len() == 2
        {
            if (a.map.zoom, a.map.pan_x) != before[0] {
                (b.map.zoom, b.map.pan_x) = (a.map.zoom, a.map.pan_x);
            } else if (b.map.zoom, b.map.pan_x) != before[1] {
                (a.map.zoom, a.map.pan_x) = (b.map.zoom, b.map.pan_x);
            }
        }
        if let Some(site) = clicked_site {
            let again = self.selected_site.as_deref() == Some(site.as_str());
            self.select_site((!again).then_some(site));
        }
    }

    /// The difference table and the categories, side by side in numbers and bars.
    fn difference_panel_ui(&mut self, ui: &mut Ui) {
        let Some(pair) = &self.pair else {
            ui.set_min_width(ui.available_width());
            ui.label("Measuring both snapshots…");
            return;
        };
        let stale = !self.is_up_to_date();
        let mut clicked = None;
        // Both ways: a long call site scrolls inside the panel rather than widening it.
        // Not shrunk to its content: the panel keeps the width it was given (or dragged to).
        egui::ScrollArea::both().auto_shrink(false).show(ui, |ui| {
            ui.horizontal(|ui| {
                ui.strong("Call sites by change in live bytes from A to B");
                if stale {
                    ui.label(RichText::new("updating…").weak());
                }
            });
            ui.label(
                RichText::new("Click a row to outline its blocks in both maps.")
                    .weak()
                    .small(),
            );
            clicked = site_table_ui(ui, &pair.comparison, self.selected_site.as_deref());
            ui.add_space(10.0);
            ui.strong("By category");
            category_bars_ui(ui, &pair.comparison);
            for finding in &pair.verdict.findings {
                ui.label(RichText::new(format!("• {finding}")).small());
            }
            for caveat in &pair.verdict.caveats {
                ui.label(
                    RichText::new(format!("! {caveat}"))
                        .small()
                        .color(ui.visuals().warn_fg_color),
                );
            }
        });
        if let Some(site) = clicked {
            let again = self.selected_site.as_deref() == Some(site.as_str());
            self.select_site((!again).then_some(site));
        }
    }

    /// The rank table of every opened snapshot, each at its peak.
    fn rank_panel_ui(&mut self, ui: &mut Ui, views: usize) {
        let Some(ranks) = &self.ranks else {
            ui.label(format!("Measuring the {views} snapshots at their peaks…"));
            return;
        };
        ui.horizontal(|ui| {
            ui.strong(format!("All {views} snapshots at their peaks"));
            ui.label(RichText::new(&ranks.verdict.headline).weak());
        });
        egui::ScrollArea::both()
            .auto_shrink(false)
            .show(ui, |ui| rank_table_ui(ui, &ranks.rows));
    }
}

/// Starts measuring sides `a` and `b` at the moments of `key` and comparing them.
fn spawn_pair(ui: &Ui, key: PairKey, a: &CompareSide, b: &CompareSide) -> Job<PairResult> {
    let runner = Runner::new(ui.ctx().clone());
    let inputs = [
        (Arc::clone(&a.travel), a.name.clone()),
        (Arc::clone(&b.travel), b.name.clone()),
    ];
    runner.spawn("comparing two snapshots", move |_| {
        let sides = inputs
            .iter()
            .zip(key.positions)
            .map(|((travel, name), position)| side(travel, name, Moment::Event(position)))
            .collect();
        let comparison = compare(sides);
        let verdict = judge(&comparison);
        PairResult {
            key,
            comparison,
            verdict,
        }
    })
}

/// Starts measuring every snapshot at its peak for the rank table; a snapshot's rank is the
/// number in its file name (`rank3.pickle`), else its place among the open ones.
fn spawn_ranks(
    ui: &Ui,
    key: Vec<usize>,
    travels: Vec<(String, Arc<TimeTravel>)>,
) -> Job<RankResult> {
    let runner = Runner::new(ui.ctx().clone());
    runner.spawn("ranking snapshots", move |progress| {
        let mut ranked = Vec::with_capacity(travels.len());
        for (i, (name, travel)) in travels.iter().enumerate() {
            let rank = rank_from_name(name).unwrap_or(i as u32);
            ranked.push((rank, side(travel, name, Moment::Peak)));
            progress.set_fraction((i + 1) as f32 / travels.len() as f32);
        }
        let rows = rank_table(&ranked);
        let verdict = judge_ranks(&rows);
        RankResult { key, rows, verdict }
    })
}

/// A small coloured "A" or "B".
fn side_badge_ui(ui: &mut Ui, k: usize) {
    let text = RichText::new(format!(" {} ", SIDE_NAMES[k]))
        .strong()
        .color(Color32::BLACK)
        .background_color(SIDE_COLORS[k]);
    ui.label(text);
}

/// One side's heading and block map; returns the call site of a block the user clicked.
fn side_map_ui(ui: &mut Ui, k: usize, side: &mut CompareSide) -> Option<String> {
    ui.horizontal(|ui| {
        side_badge_ui(ui, k);
        ui.label(RichText::new(format!("{} · cuda:{}", side.name, side.travel.device())).strong());
    });
    let event = if side.position == 0 {
        "start of the trace".to_owned()
    } else {
        format!(
            "last event applied: {}",
            panels::event_text(&side.travel, side.position - 1)
        )
    };
    let outlined = if side.highlights.is_empty() {
        String::new()
    } else {
        format!(" · {} blocks outlined", side.highlights.len())
    };
    ui.label(format!(
        "after {} of {} events · {} allocated · {} reserved{outlined}",
        side.position,
        side.len(),
        format_bytes(side.state.allocated_bytes),
        format_bytes(side.state.reserved_bytes),
    ))
    .on_hover_text(event);
    let outlines: Vec<(u64, Stroke)> = side
        .highlights
        .iter()
        .take(MAX_OUTLINES)
        .map(|&address| (address, HIGHLIGHT))
        .collect();
    let name = format!("Block map {}", SIDE_NAMES[k]);
    let content = MapContent {
        accessible_name: &name,
        snapshot: side.travel.snapshot(),
        travel: &side.travel,
        state: &side.state,
        layout: &side.layout,
        reveal: side.reveal.take(),
        outlines: &outlines,
    };
    let painted = paint_block_map(ui, content, &mut side.map, &mut side.rects);
    side.map_rect = painted.area;
    if painted.response.clicked() {
        return side.site_at(painted.hovered?);
    }
    None
}

/// "+7.50 GiB", "−256 MiB".
fn signed_bytes(delta: i64) -> String {
    let sign = if delta < 0 { "−" } else { "+" };
    format!("{sign}{}", format_bytes(delta.unsigned_abs()))
}

/// The call sites whose live bytes differ, largest change first; returns the site clicked.
fn site_table_ui(ui: &mut Ui, comparison: &Comparison, selected: Option<&str>) -> Option<String> {
    if comparison.sites.is_empty() {
        ui.label("No call site holds different memory at these two moments.");
        return None;
    }
    let mut clicked = None;
    egui::Grid::new("compare_sites")
        .striped(true)
        .num_columns(4)
        .spacing(vec2(10.0, 3.0))
        .show(ui, |ui| {
            ui.label(RichText::new("call site").weak());
            ui.label(RichText::new("change").weak());
            ui.label(RichText::new("A").color(SIDE_COLORS[0]));
            ui.label(RichText::new("B").color(SIDE_COLORS[1]));
            ui.end_row();
            for delta in comparison.sites.iter().take(MAX_SITE_ROWS) {
                if site_row_ui(ui, delta, selected == Some(delta.site.as_str())) {
                    clicked = Some(delta.site.clone());
                }
                ui.end_row();
            }
        });
    if comparison.sites.len() > MAX_SITE_ROWS {
        ui.label(
            RichText::new(format!(
                "… and {} more call sites with smaller changes",
                comparison.sites.len() - MAX_SITE_ROWS
            ))
            .weak(),
        );
    }
    clicked
}

/// One row of the difference table; true when its call site was clicked.
fn site_row_ui(ui: &mut Ui, delta: &SiteDelta, selected: bool) -> bool {
    let stack: Vec<&str> = delta
        .stack
        .iter()
        .take(TOOLTIP_STACK_LINES)
        .map(String::as_str)
        .collect();
    let clicked = ui
        .selectable_label(selected, &delta.site)
        .on_hover_text(if stack.is_empty() {
            "no stack recorded".to_owned()
        } else {
            stack.join("\n")
        })
        .clicked();
    let color = if delta.delta_bytes > 0 {
        ui.visuals().error_fg_color
    } else {
        Color32::from_rgb(0x50, 0xc0, 0x70)
    };
    ui.label(RichText::new(signed_bytes(delta.delta_bytes)).color(color));
    for (blocks, bytes) in delta.per_side.iter().take(2) {
        ui.label(format!("{blocks}× {}", format_bytes(*bytes)));
    }
    clicked
}

/// Each category's bytes in A and B as two bars on one scale.
fn category_bars_ui(ui: &mut Ui, comparison: &Comparison) {
    let rows = category_rows(&comparison.sides);
    if rows.is_empty() {
        ui.label("Nothing is allocated at these moments.");
        return;
    }
    let largest = rows
        .iter()
        .flat_map(|(_, bytes)| bytes.iter().copied())
        .max()
        .unwrap_or(0)
        .max(1);
    egui::Grid::new("compare_categories")
        .num_columns(3)
        .spacing(vec2(8.0, 4.0))
        .show(ui, |ui| {
            for (category, bytes) in &rows {
                ui.label(category.label());
                let (rect, _) = ui.allocate_exact_size(vec2(80.0, 14.0), Sense::hover());
                let painter = ui.painter();
                painter.rect_filled(rect, 0.0, ui.visuals().extreme_bg_color);
                for (k, value) in bytes.iter().take(2).enumerate() {
                    let width = rect.width() * (*value as f32 / largest as f32);
                    let top = rect.top() + k as f32 * rect.height() / 2.0;
                    let bar = Rect::from_min_size(
                        egui::pos2(rect.left(), top),
                        vec2(
                            width.max(if *value > 0 { 1.0 } else { 0.0 }),
                            rect.height() / 2.0 - 1.0,
                        ),
                    );
                    painter.rect_filled(bar, 0.0, SIDE_COLORS[k]);
                }
                // Each value in its side's colour, as its bar.
                ui.horizontal(|ui| {
                    for (k, value) in bytes.iter().take(2).enumerate() {
                        ui.label(RichText::new(format_bytes(*value)).color(SIDE_COLORS[k]));
                    }
                });
                ui.end_row();
            }
        });
}

/// One row per snapshot: its peak, reserved, distance from the median and what differs most.
fn rank_table_ui(ui: &mut Ui, rows: &[RankRow]) {
    egui::Grid::new("compare_ranks_table")
        .striped(true)
        .num_columns(7)
        .spacing(vec2(12.0, 3.0))
        .show(ui, |ui| {
            for title in [
                "rank",
                "snapshot",
                "peak allocated",
                "reserved",
                "vs median",
                "OOMs",
                "differs most at",
            ] {
                ui.label(RichText::new(title).weak());
            }
            ui.end_row();
            for row in rows {
                ui.label(row.rank.to_string());
                ui.label(&row.name);
                ui.label(format_bytes(row.peak_allocated_bytes));
                ui.label(format_bytes(row.peak_reserved_bytes));
                ui.label(format!("{:+.1} %", row.imbalance_percent));
                ui.label(row.ooms.to_string());
                ui.label(row.site_differences.first().map_or_else(
                    String::new,
                    |(site, bytes, median)| {
                        format!(
                            "{site}: {} against {} (median)",
                            format_bytes(*bytes),
                            format_bytes(*median)
                        )
                    },
                ));
                ui.end_row();
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_linked_control_maps_to_each_trace() {
        // By event: the same event in both, a shorter trace stays at its end.
        assert_eq!(Link::Event.position(300, 447), 300);
        assert_eq!(Link::Event.position(900, 447), 447);
        assert_eq!(Link::Event.range([447, 1768]), 1768);
        // By share: the same share of each.
        assert_eq!(Link::Share.position(500, 1768), 884);
        assert_eq!(Link::Share.position(500, 447), 224);
        assert_eq!(Link::Share.position(SHARE_STEPS, 447), 447);
        assert_eq!(Link::Share.value_of(884, 1768), 500);
        assert_eq!(Link::Share.value_of(0, 0), SHARE_STEPS);
        assert_eq!(signed_bytes(-(256 << 20)), "−256 MiB");
    }
}
