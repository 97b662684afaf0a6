//! The memory timeline: one plot per GPU with linked x axes, drawn from min/max pyramids so that a
//! day of samples costs the same per frame as a minute.
//!
//! Per frame and per plot, only the samples inside the visible x range are considered and at most
//! about two points per pixel are handed to egui_plot ([`data::LodSeries::points`]). Hover is a
//! binary search over the device's sample times ([`vramscope_core::analysis::lod::nearest_index`]); egui_plot's
//! own hover, which scans every point, is switched off.

pub mod data;

use egui::{Color32, Id, RichText, Stroke, Ui, Vec2b};
use egui_plot::{
    Corner, FilledArea, HLine, Legend, Line, LineStyle, MarkerShape, Plot, PlotBounds, PlotPoints,
    Points, Text, VLine,
};

use vramscope_core::analysis::lod::nearest_index;
use vramscope_core::analysis::threshold::{self, Crossing};
use vramscope_core::model::{Capture, EventKind, UnixMs, format_bytes};

use self::data::TimelineData;
use super::format::{format_elapsed_secs, format_utc_ms};
use super::settings::Settings;

/// Colours of the memory lines, shared with the device list.
pub const USED_COLOR: Color32 = Color32::from_rgb(0x4e, 0x9c, 0xf5);
/// Driver-reserved memory.
pub const RESERVED_COLOR: Color32 = Color32::from_rgb(0xb0, 0x7c, 0xf0);
/// Total memory.
pub const TOTAL_COLOR: Color32 = Color32::from_rgb(0x9a, 0x9a, 0x9a);
/// The threshold line and its crossings.
pub const THRESHOLD_COLOR: Color32 = Color32::from_rgb(0xf0, 0xa0, 0x30);
/// The outline of a process whose memory grows steadily (a leak finding).
pub const LEAK_COLOR: Color32 = Color32::from_rgb(0xe0, 0x30, 0x30);

/// The sample under the mouse, found by binary search.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimelineHover {
    pub device_index: u32,
    /// Index into the device's [`vramscope_core::model::DeviceSeries`].
    pub sample_index: usize,
    /// x of that sample (seconds since the timeline origin).
    pub x_secs: f64,
    /// Time of that sample.
    pub t_ms: UnixMs,
}

/// Threshold crossings per device, kept up to date as live samples arrive (only new samples are
/// scanned) and recomputed when the threshold changes or a capture is replaced.
#[derive(Clone, Debug, Default)]
struct CrossingsCache {
    per_device: Vec<threshold::CrossingScan>,
}

impl CrossingsCache {
    fn update(&mut self, capture: &Capture, threshold_fraction: f64) {
        self.per_device
            .resize_with(capture.series.len(), Default::default);
        for (scan, series) in self.per_device.iter_mut().zip(&capture.series) {
            if scan.threshold_fraction() != threshold_fraction || scan.samples_seen > series.len() {
                *scan = threshold::CrossingScan::new(threshold_fraction);
            }
            scan.extend(series.iter_from(scan.samples_seen));
        }
    }

    fn for_device(&self, position: usize) -> &[Crossing] {
        self.per_device
            .get(position)
            .map(|scan| scan.found.as_slice())
            .unwrap_or(&[])
    }
}

/// View state of the timeline (not persisted: it belongs to the capture being shown).
#[derive(Debug)]
pub struct TimelineState {
    /// Keep the newest samples in view (live sources only).
    pub following: bool,
    reset_requested: bool,
    /// An x range to show on the next frame (then the user's pan/zoom takes over again).
    requested_range: Option<(f64, f64)>,
    /// The sample under the mouse during the last frame.
    pub hover: Option<TimelineHover>,
    /// Time of the last sample that was hovered (kept after the mouse leaves the plots), where a
    /// note added to a file lands.
    pub last_hovered_t_ms: Option<UnixMs>,
    /// The x range (seconds since the timeline origin) the plots showed in the last frame.
    pub visible_x_range: Option<(f64, f64)>,
    crossings: CrossingsCache,
    /// Salt for plot ids, so that a newly opened capture starts with fresh plot memory.
    plot_generation: u64,
}

impl Default for TimelineState {
    fn default() -> Self {
        TimelineState {
            following: true,
            reset_requested: false,
            requested_range: None,
            hover: None,
            last_hovered_t_ms: None,
            visible_x_range: None,
            crossings: CrossingsCache::default(),
            plot_generation: 0,
        }
    }
}

impl TimelineState {
    /// Shows the whole capture again (and, for a live source, follows the newest samples).
    pub fn request_reset(&mut self) {
        self.reset_requested = true;
        self.following = true;
    }

    /// Shows `[x_min, x_max]` (seconds since the timeline origin) on the next frame and stops
    /// following live data.
    pub fn request_x_range(&mut self, x_min: f64, x_max: f64) {
        if x_min.is_finite() && x_max.is_finite() && x_min < x_max {
            self.requested_range = Some((x_min, x_max));
            self.following = false;
        }
    }

    /// Forget everything about the previous capture (a new one is being shown).
    pub fn new_capture(&mut self) {
        self.hover = None;
        self.last_hovered_t_ms = None;
        self.crossings = CrossingsCache::default();
        self.following = true;
        self.reset_requested = false;
        self.requested_range = None;
        self.plot_generation += 1;
    }
}

/// What the timeline needs from the session.
pub struct TimelineInput<'a> {
    pub capture: &'a Capture,
    pub data: &'a TimelineData,
    /// Whether samples are still arriving (follow-live applies).
    pub live: bool,
    /// The process selected in the process table (index into `Capture::processes`): its memory
    /// is drawn over its GPU's lines, or its band stands out in the stacked view.
    pub selected_process: Option<usize>,
}

/// Draws the toolbar, the hover readout and one plot per GPU.
pub fn timeline_ui(
    ui: &mut Ui,
    input: &TimelineInput<'_>,
    settings: &mut Settings,
    state: &mut TimelineState,
) {
    state
        .crossings
        .update(input.capture, settings.threshold_fraction());
    toolbar_ui(ui, input, settings, state);
    hover_readout_ui(ui, input, settings, state);
    let growths = crate::processes::process_growths(ui, input.capture);
    let leaking: Vec<bool> = growths
        .iter()
        .map(|g| {
            g.as_ref()
                .is_some_and(vramscope_core::diagnose::leak::SeriesGrowth::is_leaking)
        })
        .collect();
    growing_processes_ui(ui, input.capture, &growths, &leaking);
    ui.separator();

    let Some((span_start, span_end)) = input.data.x_span() else {
        if input.capture.sample_count() == 0 && !input.capture.processes.is_empty() {
            ui.label(
                "This capture holds process memory only (an nvidia-smi --query-compute-apps \
                 log): the process table below lists it. For the GPUs' memory over time, open \
                 it together with the --query-gpu log of the same run (vramscope inspect, \
                 diagnose and export join the two).",
            );
        } else {
            ui.label("No samples yet.");
        }
        return;
    };
    let device_count = input.data.devices.len().max(1);
    let plot_height = ((ui.available_height() - 8.0) / device_count as f32 - 28.0).max(110.0);
    let link_group = Id::unique(("vramscope-timeline", state.plot_generation));

    // The x range to show when the view is reset or follows live data. Following shows the
    // newest `follow_window_secs`, but never time before the first sample: a capture shorter
    // than the window fills the plot instead of sitting in its right-hand corner.
    let full_range = (span_start, span_end.max(span_start + 1.0));
    let follow_start = (span_end - settings.follow_window_secs).max(span_start);
    let follow_end = span_end.max(follow_start + 1.0);
    let follow_range = (
        follow_start,
        follow_end + (follow_end - follow_start) * 0.02,
    );
    let forced_range = if let Some(range) = state.requested_range.take() {
        Some(range)
    } else if state.reset_requested {
        // Reset shows everything; live, it then keeps following if everything still fits the
        // follow window, and stops following otherwise (so the whole capture stays in view).
        if input.live && span_end - span_start > settings.follow_window_secs {
            state.following = false;
        }
        Some(full_range)
    } else if input.live && state.following {
        Some(follow_range)
    } else {
        None
    };
    let initial_range = if input.live { follow_range } else { full_range };

    let mut hover = None;
    let mut user_moved_view = false;
    let mut reset_clicked = false;
    let mut visible_x_range = None;
    egui::ScrollArea::vertical()
        .auto_shrink(false)
        .show(ui, |ui| {
            for (position, device) in input.data.devices.iter().enumerate() {
                // A GPU scrolled out of view costs only its space (8 GPUs do not fit at once).
                let block_height = plot_height
                    + ui.text_style_height(&egui::TextStyle::Body)
                    + 2.0 * ui.spacing().item_spacing.y;
                let block = egui::Rect::from_min_size(
                    ui.cursor().min,
                    egui::vec2(ui.available_width(), block_height),
                );
                if !ui.is_rect_visible(block) {
                    ui.allocate_space(block.size());
                    continue;
                }
                let facts = input
                    .capture
                    .devices
                    .iter()
                    .find(|d| d.index == device.device_index);
                let name = facts.map(|f| f.name.as_str()).unwrap_or("unknown device");
                ui.label(RichText::new(format!("GPU {} · {name}", device.device_index)).strong());
                let outcome = device_plot_ui(
                    ui,
                    DevicePlot {
                        input,
                        position,
                        settings,
                        crossings: state.crossings.for_device(position),
                        link_group,
                        generation: state.plot_generation,
                        height: plot_height,
                        initial_range,
                        forced_range,
                        hover: state.hover,
                        leaking: &leaking,
                    },
                );
                hover = hover.or(outcome.hover);
                visible_x_range = visible_x_range.or(Some(outcome.shown_range));
                user_moved_view |= outcome.user_moved_view;
                reset_clicked |= outcome.double_clicked;
            }
        });
    state.hover = hover;
    if let Some(hover) = hover {
        state.last_hovered_t_ms = Some(hover.t_ms);
    }
    state.visible_x_range = visible_x_range;
    state.reset_requested = false;
    if reset_clicked {
        state.request_reset();
        ui.ctx().request_repaint();
        return;
    }
    if user_moved_view && input.live {
        state.following = false;
    }
}

fn toolbar_ui(
    ui: &mut Ui,
    input: &TimelineInput<'_>,
    settings: &mut Settings,
    state: &mut TimelineState,
) {
    ui.horizontal(|ui| {
        ui.checkbox(&mut settings.stacked_processes, "Stacked processes")
            .on_hover_text("Show each process's memory stacked, instead of the device's used/reserved/total lines");
        ui.checkbox(&mut settings.show_reserved, "Reserved")
            .on_hover_text("Memory the driver reserves for itself (NVML v2 'reserved')");
        ui.checkbox(&mut settings.show_total, "Total");
        ui.checkbox(&mut settings.show_events, "Events")
            .on_hover_text("Xid errors, out-of-memory, ECC increases, lost GPUs and notes");
        ui.add(
            egui::DragValue::new(&mut settings.threshold_pct)
                .range(super::settings::THRESHOLD_RANGE_PCT)
                .speed(0.5)
                .suffix(" % threshold"),
        )
        .on_hover_text("The threshold line drawn on every GPU; crossings are marked with triangles");
        if input.live {
            let follow = ui
                .selectable_label(state.following, "Follow live")
                .on_hover_text("Keep the newest samples in view; panning or zooming turns this off");
            if follow.clicked() {
                state.following = !state.following;
            }
        }
        if ui
            .button("Reset view")
            .on_hover_text("Show the whole capture (double-click a plot does the same)")
            .clicked()
        {
            state.request_reset();
        }
        if settings.stacked_processes {
            ui.label(RichText::new("(?) per-process memory").weak()).on_hover_text(
                "NVML reports each process's whole footprint on the GPU: its allocator's reserved \
                 memory plus the CUDA context. That is more than the live tensors PyTorch's \
                 memory_allocated() shows.",
            );
        }
    });
}

/// One line of exact values for the hovered sample (also shown as a tooltip on the plot).
fn hover_readout_ui(
    ui: &mut Ui,
    input: &TimelineInput<'_>,
    settings: &Settings,
    state: &TimelineState,
) {
    let text = match state
        .hover
        .and_then(|hover| hover_text(input, settings, hover))
    {
        Some(text) => text,
        None => {
            "Hover a timeline for exact values · drag to pan · scroll or pinch to zoom".to_owned()
        }
    };
    ui.label(RichText::new(text).monospace());
}

/// Exact values at the hovered sample: memory in bytes and binary units, and (in the stacked view)
/// each process at that moment.
pub fn hover_text(
    input: &TimelineInput<'_>,
    settings: &Settings,
    hover: TimelineHover,
) -> Option<String> {
    let series = input.capture.series(hover.device_index)?;
    let sample = series.get(hover.sample_index)?;
    let memory = sample.memory?;
    let mut text = format!(
        "GPU {} at {} ({}): used {} ({} B) · reserved {} · free {} · total {}",
        hover.device_index,
        format_elapsed_secs(hover.x_secs),
        format_utc_ms(sample.t_ms),
        format_bytes(memory.used_bytes),
        memory.used_bytes,
        format_bytes(memory.reserved_bytes),
        format_bytes(memory.free_bytes),
        format_bytes(memory.total_bytes),
    );
    if settings.stacked_processes {
        let processes: Vec<String> = input
            .capture
            .processes
            .iter()
            .filter(|track| track.device_index == hover.device_index)
            .filter_map(|track| {
                let i = track.t_ms.partition_point(|&t| t < sample.t_ms);
                let t = *track.t_ms.get(i)?;
                // Process ticks can be stamped a little apart from device samples; accept the
                // nearest one within half a second.
                ((t - sample.t_ms).abs() <= 500).then(|| {
                    let used = track.used_bytes[i]
                        .map(format_bytes)
                        .unwrap_or_else(|| "n/a".to_owned());
                    format!("pid {} {}: {used}", track.pid, track.name)
                })
            })
            .collect();
        if !processes.is_empty() {
            text.push_str("\n  processes: ");
            text.push_str(&processes.join(" · "));
        }
    }
    Some(text)
}

struct DevicePlot<'a> {
    input: &'a TimelineInput<'a>,
    /// Position of the device in `TimelineData::devices` (and `Capture::series`).
    position: usize,
    settings: &'a Settings,
    crossings: &'a [Crossing],
    link_group: Id,
    generation: u64,
    height: f32,
    initial_range: (f64, f64),
    forced_range: Option<(f64, f64)>,
    hover: Option<TimelineHover>,
    /// Per process track: its growth is a finding (highlighted).
    leaking: &'a [bool],
}

struct DevicePlotOutcome {
    hover: Option<TimelineHover>,
    shown_range: (f64, f64),
    user_moved_view: bool,
    /// A double click asks for the whole capture, as "Reset view" does.
    double_clicked: bool,
}

fn device_plot_ui(ui: &mut Ui, plot: DevicePlot<'_>) -> DevicePlotOutcome {
    let device = &plot.input.data.devices[plot.position];
    let y_max = device
        .total
        .max_value
        .max(device.stack.total.max_value)
        .max(device.used.max_value)
        .max(1.0)
        * 1.08;
    let mut lod_range = None;
    let response = memory_plot(&plot, device.device_index, y_max).show(ui, |plot_ui| {
        let range = plot_x_range(plot_ui, plot.forced_range, y_max);
        lod_range = Some(range);
        add_device_layers(plot_ui, &plot, range, y_max);
        hovered_sample(plot_ui, plot.input.data, device)
    });
    let settings = plot.settings;

    let hover = response.inner;
    let shown: &PlotBounds = response.transform.bounds();
    let (shown_min, shown_max) = (shown.min()[0], shown.max()[0]);
    // The points were chosen for the range known when the plot was built; if the user panned or
    // zoomed in this frame the range moved: draw once more with the new range.
    let mut user_moved_view = false;
    if let Some((x_min, x_max)) = lod_range {
        let tolerance = (x_max - x_min).abs() * 1e-9;
        if (shown_min - x_min).abs() > tolerance || (shown_max - x_max).abs() > tolerance {
            ui.ctx().request_repaint();
            user_moved_view = plot.forced_range.is_none()
                || response.response.dragged()
                || response.response.hovered();
        }
    }
    let double_clicked = response.response.double_clicked();
    if let Some(hover) = hover
        && let Some(text) = hover_text(plot.input, settings, hover)
    {
        response.response.on_hover_text_at_pointer(text);
    }
    DevicePlotOutcome {
        hover,
        shown_range: (shown_min, shown_max),
        user_moved_view,
        double_clicked,
    }
}

/// The plot of one device, before anything is drawn in it: linked time axis, fixed memory axis
/// up to `y_max` GiB, round grid steps, legend.
fn memory_plot(plot: &DevicePlot<'_>, device_index: u32, y_max: f64) -> Plot<'static> {
    Plot::new(("memory", device_index, plot.generation))
        .height(plot.height)
        .link_axis(plot.link_group, Vec2b::new(true, false))
        .link_cursor(plot.link_group, Vec2b::new(true, false))
        .default_x_bounds(plot.initial_range.0, plot.initial_range.1)
        .default_y_bounds(-0.02 * y_max, y_max)
        .auto_bounds(Vec2b::FALSE)
        .allow_zoom(Vec2b::new(true, false))
        .allow_drag(Vec2b::new(true, false))
        .allow_scroll(Vec2b::new(true, false))
        .allow_double_click_reset(false)
        .show_x(false)
        .show_y(false)
        .y_axis_min_width(48.0)
        .x_grid_spacer(egui_plot::uniform_grid_spacer(time_grid_steps))
        .x_axis_formatter(|mark, _| format_elapsed_secs(mark.value))
        // Round steps from the report's axis logic: 0, 25, 50 … 150 GiB on an H200 rather than
        // egui_plot's powers of ten (which labelled only 0 and 100 GiB).
        .y_grid_spacer(egui_plot::uniform_grid_spacer(|input| {
            let span = (input.bounds.1 - input.bounds.0).abs();
            let coarse = vramscope_core::report::axis::round_step(span, 6, input.base_step_size);
            let fine = vramscope_core::report::axis::round_step(span, 30, input.base_step_size);
            [fine.min(coarse), coarse, coarse]
        }))
        .y_axis_formatter(|mark, _| format!("{} GiB", (mark.value * 100.0).round() / 100.0))
        .legend(
            Legend::default()
                .position(Corner::LeftTop)
                .background_alpha(0.75)
                .text_style(egui::TextStyle::Small)
                .follow_insertion_order(true),
        )
}

/// The time range to draw: the one forced on the plot (follow-live, reset, a linked change),
/// else where the user left it; the memory axis stays fixed.
fn plot_x_range(
    plot_ui: &mut egui_plot::PlotUi<'_>,
    forced_range: Option<(f64, f64)>,
    y_max: f64,
) -> (f64, f64) {
    let last_bounds = plot_ui.plot_bounds();
    let range = match forced_range {
        Some(range) => {
            plot_ui.set_plot_bounds_x(range.0..=range.1);
            range
        }
        None => (last_bounds.min()[0], last_bounds.max()[0]),
    };
    plot_ui.set_plot_bounds_y(-0.02 * y_max..=y_max);
    range
}

/// Everything drawn in a device's plot over `(x_min, x_max)`: memory lines or stacked process
/// bands, the selected process, the threshold, event markers and the hovered-sample line.
fn add_device_layers(
    plot_ui: &mut egui_plot::PlotUi<'_>,
    plot: &DevicePlot<'_>,
    (x_min, x_max): (f64, f64),
    y_max: f64,
) {
    let settings = plot.settings;
    let device = &plot.input.data.devices[plot.position];
    let max_buckets = (plot_ui.transform().frame().width().max(1.0)) as usize;
    if settings.stacked_processes {
        add_stacked_layers(
            plot_ui,
            plot.input,
            plot.leaking,
            plot.position,
            x_min,
            x_max,
            max_buckets,
        );
    } else {
        add_memory_lines(plot_ui, device, settings, x_min, x_max, max_buckets);
        add_selected_process_line(
            plot_ui,
            plot.input,
            plot.position,
            x_min,
            x_max,
            max_buckets,
        );
    }
    add_threshold(
        plot_ui,
        plot.input,
        plot.position,
        settings,
        plot.crossings,
        x_min,
        x_max,
    );
    if settings.show_events {
        add_event_markers(
            plot_ui,
            plot.input.capture,
            plot.input.data,
            device.device_index,
            x_min,
            x_max,
            y_max,
        );
    }
    if let Some(hover) = plot.hover {
        plot_ui.vline(
            VLine::new("", hover.x_secs)
                .id("hovered sample")
                .color(Color32::from_gray(160))
                .width(1.0)
                .allow_hover(false),
        );
    }
}

/// The device's used, driver-reserved and total memory lines (the view without stacking).
fn add_memory_lines(
    plot_ui: &mut egui_plot::PlotUi<'_>,
    device: &data::DeviceTimeline,
    settings: &Settings,
    x_min: f64,
    x_max: f64,
    max_buckets: usize,
) {
    let range = device.visible_range(x_min, x_max);
    if settings.show_total {
        plot_ui.line(
            Line::new(
                "total",
                device
                    .total
                    .points(&device.x_secs, range.clone(), max_buckets),
            )
            .color(TOTAL_COLOR)
            .width(1.0)
            .allow_hover(false),
        );
    }
    if settings.show_reserved {
        plot_ui.line(
            Line::new(
                "driver-reserved",
                device
                    .reserved
                    .points(&device.x_secs, range.clone(), max_buckets),
            )
            .color(RESERVED_COLOR)
            .allow_hover(false),
        );
    }
    plot_ui.line(
        Line::new(
            "used",
            device.used.points(&device.x_secs, range, max_buckets),
        )
        .color(USED_COLOR)
        .width(2.0)
        .allow_hover(false),
    );
}

/// The sample of `device` nearest the pointer (our own hover: a binary search over the sample
/// times, where egui_plot's own would scan every point), when the pointer is near the data.
fn hovered_sample(
    plot_ui: &egui_plot::PlotUi<'_>,
    data: &TimelineData,
    device: &data::DeviceTimeline,
) -> Option<TimelineHover> {
    let pointer = plot_ui
        .response()
        .hovered()
        .then(|| plot_ui.pointer_coordinate())
        .flatten()?;
    // Only near the data: far before the first or after the last sample there is nothing to
    // read out.
    let bounds = plot_ui.plot_bounds();
    let tolerance = (bounds.max()[0] - bounds.min()[0]) * 0.01;
    let (first, last) = (*device.x_secs.first()?, *device.x_secs.last()?);
    if pointer.x < first - tolerance || pointer.x > last + tolerance {
        return None;
    }
    let nearest = nearest_index(&device.x_secs, pointer.x)?;
    Some(TimelineHover {
        device_index: device.device_index,
        sample_index: *device.sample_index.get(nearest)? as usize,
        x_secs: device.x_secs[nearest],
        t_ms: data.t_of(device.x_secs[nearest]),
    })
}

/// The selected process's memory over time, drawn over its GPU's lines in the process's colour
/// (from the stacked layers' bands, so it costs what a band costs at any zoom).
fn add_selected_process_line(
    plot_ui: &mut egui_plot::PlotUi<'_>,
    input: &TimelineInput<'_>,
    position: usize,
    x_min: f64,
    x_max: f64,
    max_buckets: usize,
) {
    let Some(track_index) = input.selected_process else {
        return;
    };
    let Some(track) = input.capture.processes.get(track_index) else {
        return;
    };
    let stack = &input.data.devices[position].stack;
    let ticks = stack.visible_ticks(x_min, x_max, max_buckets);
    let color = process_color(track.pid);
    let mut named = false;
    for (layer_index, polygon) in stack.layer_polygons(&ticks) {
        if stack.layers[layer_index].track_index != track_index {
            continue;
        }
        let points: Vec<[f64; 2]> = polygon
            .xs
            .iter()
            .zip(polygon.tops.iter().zip(&polygon.bottoms))
            .map(|(&x, (top, bottom))| [x, top - bottom])
            .collect();
        // One legend entry, however many times the process came and went.
        let name = if named {
            String::new()
        } else {
            named = true;
            selected_process_name(track)
        };
        plot_ui.line(
            // Dashed: where the process is all of its GPU's memory, the used line shows through.
            Line::new(name, PlotPoints::from(points))
                .color(color)
                .width(2.5)
                .style(LineStyle::dashed_loose())
                .id(("selected process", layer_index))
                .allow_hover(false),
        );
    }
}

/// One highlighted line per process whose growth is a finding: the diagnosis's rate and when the
/// GPU is full, in the error colour, above the plots.
fn growing_processes_ui(
    ui: &mut Ui,
    capture: &Capture,
    growths: &[Option<vramscope_core::diagnose::leak::SeriesGrowth>],
    leaking: &[bool],
) {
    for ((track, growth), _) in capture
        .processes
        .iter()
        .zip(growths)
        .zip(leaking)
        .filter(|(_, leaking)| **leaking)
    {
        let Some(growth) = growth else {
            continue;
        };
        let rate = growth
            .bytes_per_minute()
            .map(|b| format_bytes(b.max(0.0) as u64))
            .unwrap_or_default();
        let full = growth
            .seconds_until_full()
            .map(|s| {
                format!(
                    "; GPU full in {}",
                    vramscope_core::diagnose::growth::duration_text(s)
                )
            })
            .unwrap_or_default();
        ui.colored_label(
            ui.visuals().error_fg_color,
            format!(
                "Growing: pid {} {} on GPU {} grows by {rate}/min{full} (highlighted in stacked view; see Diagnose > Leak)",
                track.pid, track.name, track.device_index
            ),
        );
    }
}

/// The legend name of the selected process.
fn selected_process_name(track: &vramscope_core::model::capture::ProcessTrack) -> String {
    format!("selected: pid {} {}", track.pid, track.name)
}

fn add_stacked_layers(
    plot_ui: &mut egui_plot::PlotUi<'_>,
    input: &TimelineInput<'_>,
    leaking: &[bool],
    position: usize,
    x_min: f64,
    x_max: f64,
    max_buckets: usize,
) {
    let stack = &input.data.devices[position].stack;
    let ticks = stack.visible_ticks(x_min, x_max, max_buckets);
    let polygons = stack.layer_polygons(&ticks);
    // Only the biggest layers in view get a legend entry: a day can hold hundreds of short-lived
    // processes, and a legend that long would hide the plot (and cost more than the plot itself).
    let mut by_size: Vec<(usize, f64)> = polygons
        .iter()
        .enumerate()
        .map(|(i, (_, polygon))| {
            let height = polygon
                .tops
                .iter()
                .zip(&polygon.bottoms)
                .map(|(top, bottom)| top - bottom)
                .fold(0.0, f64::max);
            (i, height)
        })
        .collect();
    by_size.sort_by(|a, b| b.1.total_cmp(&a.1));
    let mut named = vec![false; polygons.len()];
    for &(i, _) in by_size.iter().take(LEGEND_LAYERS) {
        named[i] = true;
    }
    let mut selected_named = false;
    for ((layer_index, polygon), named) in polygons.into_iter().zip(named) {
        let layer = &stack.layers[layer_index];
        let Some(track) = input.capture.processes.get(layer.track_index) else {
            continue;
        };
        let color = process_color(track.pid);
        // With a process selected, its band stands out and the others fade; a growing
        // process (a leak finding) is outlined in the leak colour.
        let selected = input.selected_process.map(|s| s == layer.track_index);
        let growing = leaking.get(layer.track_index).copied().unwrap_or(false);
        let name = if selected == Some(true) && !selected_named {
            selected_named = true;
            selected_process_name(track)
        } else if growing && selected != Some(true) {
            format!("pid {} {} (growing)", track.pid, track.name)
        } else if named && selected != Some(true) {
            format!("pid {} {}", track.pid, track.name)
        } else {
            String::new()
        };
        let (fill, stroke) = match selected {
            None => (color.gamma_multiply(0.55), Stroke::new(1.0, color)),
            Some(true) => (color.gamma_multiply(0.85), Stroke::new(2.5, color)),
            Some(false) => (
                color.gamma_multiply(0.2),
                Stroke::new(0.5, color.gamma_multiply(0.5)),
            ),
        };
        let stroke = if growing {
            Stroke::new(3.0, LEAK_COLOR)
        } else {
            stroke
        };
        plot_ui.add(
            FilledArea::new(name, &polygon.xs, &polygon.bottoms, &polygon.tops)
                .fill_color(fill)
                .stroke(stroke)
                .id(("layer", layer_index))
                .allow_hover(false),
        );
    }
}

/// Processes named in a stacked plot's legend (the largest in view).
const LEGEND_LAYERS: usize = 6;

/// A stable colour per process id, so a process keeps its colour across frames and plots.
pub fn process_color(pid: u32) -> Color32 {
    const PALETTE: [Color32; 8] = [
        Color32::from_rgb(0x4e, 0x9c, 0xf5),
        Color32::from_rgb(0xf5, 0x8b, 0x4e),
        Color32::from_rgb(0x5c, 0xc8, 0x7a),
        Color32::from_rgb(0xd0, 0x6c, 0xc8),
        Color32::from_rgb(0xe8, 0xc9, 0x4a),
        Color32::from_rgb(0x4e, 0xc8, 0xc8),
        Color32::from_rgb(0xe0, 0x5a, 0x5a),
        Color32::from_rgb(0x9a, 0x8c, 0xf0),
    ];
    let mixed = pid.wrapping_mul(0x9e37_79b9) >> 29;
    PALETTE[mixed as usize % PALETTE.len()]
}

fn add_threshold(
    plot_ui: &mut egui_plot::PlotUi<'_>,
    input: &TimelineInput<'_>,
    position: usize,
    settings: &Settings,
    crossings: &[Crossing],
    x_min: f64,
    x_max: f64,
) {
    let device = &input.data.devices[position];
    let Some(&total) = device.total.values.last() else {
        return;
    };
    let threshold_gib = total * settings.threshold_fraction();
    plot_ui.hline(
        HLine::new(
            format!("{:.0}% threshold", settings.threshold_pct),
            threshold_gib,
        )
        .color(THRESHOLD_COLOR)
        .style(LineStyle::dashed_dense())
        .allow_hover(false),
    );
    let visible = crossings
        .iter()
        .map(|c| (input.data.x_of(c.t_ms), c.rising))
        .filter(|&(x, _)| x >= x_min && x <= x_max);
    let (mut rising, mut falling) = (Vec::new(), Vec::new());
    for (x, is_rising) in visible.take(2000) {
        if is_rising {
            rising.push([x, threshold_gib]);
        } else {
            falling.push([x, threshold_gib]);
        }
    }
    if !rising.is_empty() {
        plot_ui.points(
            Points::new("", PlotPoints::from(rising))
                .id("crossed above threshold")
                .shape(MarkerShape::Up)
                .filled(true)
                .radius(6.0)
                .color(Color32::from_rgb(0xe0, 0x4a, 0x4a))
                .allow_hover(false),
        );
    }
    if !falling.is_empty() {
        plot_ui.points(
            Points::new("", PlotPoints::from(falling))
                .id("back below threshold")
                .shape(MarkerShape::Down)
                .filled(true)
                .radius(6.0)
                .color(Color32::from_rgb(0x4a, 0xb0, 0x5a))
                .allow_hover(false),
        );
    }
}

/// Event markers drawn with a label; beyond this many in view, markers are plain lines.
const MAX_LABELLED_EVENTS: usize = 40;

/// Colour of a marker of this kind.
fn event_color(kind: &EventKind) -> Color32 {
    match kind {
        EventKind::Xid { .. } | EventKind::Critical { .. } | EventKind::DeviceLost { .. } => {
            Color32::from_rgb(0xe0, 0x40, 0x40)
        }
        EventKind::OutOfMemory { .. } => Color32::from_rgb(0xff, 0x70, 0x20),
        EventKind::EccIncrease { .. } => Color32::from_rgb(0xd0, 0xb0, 0x30),
        EventKind::DeviceReturned => Color32::from_rgb(0x40, 0xb0, 0x60),
        EventKind::Annotation { .. } => Color32::from_rgb(0x40, 0xa0, 0xe0),
    }
}

fn add_event_markers(
    plot_ui: &mut egui_plot::PlotUi<'_>,
    capture: &Capture,
    data: &TimelineData,
    device_index: u32,
    x_min: f64,
    x_max: f64,
    y_max: f64,
) {
    // Events are few (they are discrete incidents), but a long capture could still hold
    // thousands: draw only those in view, and at most a few hundred.
    let visible = capture
        .events
        .iter()
        .filter(|event| event.device_index.is_none_or(|d| d == device_index))
        .map(|event| (data.x_of(event.t_ms), event))
        .filter(|&(x, _)| x >= x_min && x <= x_max)
        .take(300);
    let visible: Vec<(f64, &vramscope_core::model::Event)> = visible.collect();
    // With many markers in view, labels would pile up into an unreadable (and slow) smear: draw
    // plain thin lines then, and zoom in for the labels.
    let labelled = visible.len() <= MAX_LABELLED_EVENTS;
    for (i, (x, event)) in visible.into_iter().enumerate() {
        let color = event_color(&event.kind);
        let line = VLine::new("", x)
            .color(color)
            .id(("event", i))
            .allow_hover(false);
        if !labelled {
            plot_ui.vline(line.width(1.0));
            continue;
        }
        plot_ui.vline(line.width(1.5).style(LineStyle::dashed_dense()));
        plot_ui.text(
            Text::new(
                "",
                egui_plot::PlotPoint::new(x, y_max * 0.97),
                RichText::new(event.kind.short_label()).color(color).small(),
            )
            .anchor(egui::Align2::LEFT_TOP)
            .id(("event label", i))
            .allow_hover(false),
        );
    }
}

/// Clock-friendly grid steps for the time axis, in seconds (the default log-10 grid labels a
/// 20-second capture only at 0:00 and 0:10, and a day at odd multiples of 10,000 s).
const TIME_GRID_STEPS_SECS: [f64; 22] = [
    0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0,
    3600.0, 7200.0, 10800.0, 21600.0, 43200.0, 86400.0, 172800.0,
];

/// The three grid levels (fine, medium, coarse) for a time axis: the coarse step gives about
/// eight labelled lines across the visible range; each finer level is the largest clock-friendly
/// step that divides the one above, so the lines nest (labels 0:00, 0:05, 0:10, not 0:04, 0:05,
/// 0:06), and none is finer than `input.base_step_size`, the smallest step the plot can show.
fn time_grid_steps(input: egui_plot::GridInput) -> [f64; 3] {
    let last = TIME_GRID_STEPS_SECS.len() - 1;
    let range = (input.bounds.1 - input.bounds.0).abs();
    let index_of = |at_least: f64| {
        TIME_GRID_STEPS_SECS
            .iter()
            .position(|&step| step >= at_least)
            .unwrap_or(last)
    };
    // Labels show whole seconds, so no step is finer than one (half-second lines would repeat
    // "0:01 0:01").
    let finest = index_of(input.base_step_size.max(1.0));
    let coarse = index_of(range / 8.0).max(finest);
    let divides = |small: f64, big: f64| {
        let ratio = big / small;
        (ratio - ratio.round()).abs() < 1e-6
    };
    let finer = |index: usize| {
        (finest..index)
            .rev()
            .find(|&i| divides(TIME_GRID_STEPS_SECS[i], TIME_GRID_STEPS_SECS[index]))
            .unwrap_or(index)
    };
    let medium = finer(coarse);
    let fine = finer(medium);
    [
        TIME_GRID_STEPS_SECS[fine],
        TIME_GRID_STEPS_SECS[medium],
        TIME_GRID_STEPS_SECS[coarse],
    ]
}

#[cfg(test)]
mod grid_tests {
    use super::*;

    #[test]
    fn time_grid_steps_are_clock_friendly() {
        let steps = |range: f64, base_step_size| {
            time_grid_steps(egui_plot::GridInput {
                bounds: (0.0, range),
                base_step_size,
            })
        };
        // 20 s: labels every 5 s, lines every second.
        assert_eq!(steps(20.0, 0.05), [1.0, 1.0, 5.0]);
        // The first seconds of a live run: whole seconds only.
        assert_eq!(steps(4.0, 0.01), [1.0, 1.0, 1.0]);
        // A day: labels every 3 h, lines every hour and half hour.
        assert_eq!(steps(86_400.0, 30.0), [1800.0, 3600.0, 10800.0]);
        // 15 minutes: labels every 2 minutes.
        assert_eq!(steps(900.0, 1.0), [30.0, 60.0, 120.0]);
        // Never finer than the plot can draw.
        assert_eq!(steps(20.0, 3.0), [5.0, 5.0, 5.0]);
    }
}
