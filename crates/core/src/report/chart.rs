//! Memory timeline images: one GPU's chart for the HTML report, and the whole timeline as an image
//! made for a review (title with file, host and GPUs, the UTC time range, labelled axes, legends
//! and labelled event markers, no widgets). Both draw panels the same way ([`draw_panel`]) with
//! axes from [`super::axis`].

use tiny_skia::Mask;

use super::axis::{Tick, byte_ticks, format_duration_ms, time_ticks};
use super::figure::{Align, Area, Canvas, FigureError, Rgb, Weight};
pub use super::palette::{
    CAPACITY_COLOR, HARDWARE_COLOR, NOTE_COLOR, OOM_COLOR, SERIES_COLORS, THRESHOLD_COLOR,
    XID_COLOR,
};
use super::{MarkerKind, Timeline, TimelinePanel, iso8601_utc};
use crate::model::{UnixMs, UtcDateTime, format_bytes};

const TEXT: Rgb = [29, 29, 31];
const MUTED: Rgb = [95, 95, 100];
const GRID: Rgb = [228, 228, 232];
const FRAME: Rgb = [200, 200, 206];
/// How strongly the area under the used-memory line is tinted.
const USED_AREA_ALPHA: f32 = 0.16;

/// Label sizes in points (readable at 100 % zoom).
const TITLE_PT: f32 = 20.0;
const SUBTITLE_PT: f32 = 13.0;
const PANEL_TITLE_PT: f32 = 14.0;
const LABEL_PT: f32 = 12.0;
const TICK_PT: f32 = 11.5;

/// The colour of series `i` as `#rrggbb`.
pub fn color_hex(i: usize) -> String {
    hex(SERIES_COLORS[i % SERIES_COLORS.len()])
}

/// A colour as `#rrggbb`.
pub fn hex([r, g, b]: Rgb) -> String {
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// The colour a marker is drawn in.
pub fn marker_color(kind: MarkerKind) -> Rgb {
    match kind {
        MarkerKind::OutOfMemory => OOM_COLOR,
        MarkerKind::Xid => XID_COLOR,
        MarkerKind::Hardware => HARDWARE_COLOR,
        MarkerKind::Note => NOTE_COLOR,
        MarkerKind::NearFull => THRESHOLD_COLOR,
    }
}

/// The largest value the y axis must show: the device capacity, or the highest point if larger.
pub fn y_max(panel: &TimelinePanel) -> u64 {
    panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .max()
        .unwrap_or(0)
        .max(panel.total_bytes)
        .max(1)
}

/// The words a marker is labelled with on the chart (short; the list under the chart or the
/// report has the whole text).
fn marker_text(kind: MarkerKind, label: &str) -> String {
    let short = match kind {
        MarkerKind::OutOfMemory => label.replace("out of memory", "OOM"),
        MarkerKind::NearFull => "threshold reached".to_owned(),
        _ => label.to_owned(),
    };
    let mut chars = short.chars();
    let cut: String = chars.by_ref().take(28).collect();
    if chars.next().is_some() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// Draws one GPU's chart into `area`: the y axis labelled in round binary units, the time axis
/// in UTC clock times (labels only when `x_labels`), grid, capacity and threshold lines, the
/// used memory as a tinted area, the processes on top, and the markers with their labels.
pub fn draw_panel(
    canvas: &mut Canvas,
    panel: &TimelinePanel,
    area: Area,
    (t_min, t_max): (UnixMs, UnixMs),
    threshold_fraction: f64,
    x_labels: bool,
) {
    let y_ticks = byte_ticks(y_max(panel), ((area.height / 38.0) as usize).clamp(2, 8));
    let space = PlotSpace::new(canvas, &y_ticks, area, (t_min, t_max), x_labels);
    draw_grid(canvas, space, &y_ticks, (t_min, t_max), x_labels);
    let mask = canvas.clip_mask(space.plot);
    let mask = mask.as_ref();
    draw_capacity_lines(canvas, panel, space, threshold_fraction, mask);
    draw_series(canvas, panel, space, (t_min, t_max), mask);
    draw_markers(canvas, panel, space, (t_min, t_max), mask);
    draw_frame(canvas, space.plot);
}

/// Where a panel's plot lies in the image, and how its times and bytes map to points.
#[derive(Clone, Copy)]
struct PlotSpace {
    plot: Area,
    t_min: UnixMs,
    /// The time range's length in ms (at least 1).
    t_span: f64,
    /// The bytes at the plot's top: the y axis's last tick.
    y_top: f64,
}

impl PlotSpace {
    /// The plot inside a panel's `area`: right of the widest y tick label, below half a tick
    /// label's height, above the time labels (when `x_labels`).
    fn new(
        canvas: &Canvas,
        y_ticks: &[Tick<u64>],
        area: Area,
        (t_min, t_max): (UnixMs, UnixMs),
        x_labels: bool,
    ) -> Self {
        let y_top = y_ticks.last().map_or(1, |t| t.value).max(1) as f64;
        let label_width = y_ticks
            .iter()
            .map(|t| canvas.text_width(&t.label, TICK_PT))
            .fold(0.0, f32::max);
        let plot = Area {
            x: area.x + label_width + 8.0,
            y: area.y + TICK_PT * 0.6,
            width: (area.width - label_width - 8.0 - 6.0).max(10.0),
            height: (area.height - TICK_PT * 0.6 - if x_labels { 20.0 } else { 4.0 }).max(10.0),
        };
        let t_span = (t_max - t_min).max(1) as f64;
        PlotSpace {
            plot,
            t_min,
            t_span,
            y_top,
        }
    }

    /// The x of time `t`.
    fn x_of(&self, t: UnixMs) -> f32 {
        self.plot.x + ((t - self.t_min) as f64 / self.t_span * f64::from(self.plot.width)) as f32
    }

    /// The y of `bytes`.
    fn y_of(&self, bytes: u64) -> f32 {
        self.plot.bottom() - (bytes as f64 / self.y_top * f64::from(self.plot.height)) as f32
    }
}

/// The grid and axes: a line and a label per y tick, a line and a tick mark per time tick
/// (labelled when `x_labels`). Drawn first, under everything else.
fn draw_grid(
    canvas: &mut Canvas,
    space: PlotSpace,
    y_ticks: &[Tick<u64>],
    (t_min, t_max): (UnixMs, UnixMs),
    x_labels: bool,
) {
    let plot = space.plot;
    for tick in y_ticks {
        let y = space.y_of(tick.value);
        canvas.polyline(&[(plot.x, y), (plot.right(), y)], GRID, 1.0, None, None);
        canvas.text(
            &tick.label,
            (plot.x - 6.0, y + TICK_PT * 0.35),
            TICK_PT,
            MUTED,
            Weight::Regular,
            Align::Right,
        );
    }
    let x_ticks = time_ticks(t_min, t_max, ((plot.width / 95.0) as usize).max(2));
    for tick in &x_ticks {
        let x = space.x_of(tick.value);
        canvas.polyline(&[(x, plot.y), (x, plot.bottom())], GRID, 1.0, None, None);
        canvas.polyline(
            &[(x, plot.bottom()), (x, plot.bottom() + 4.0)],
            FRAME,
            1.0,
            None,
            None,
        );
        if x_labels {
            canvas.text(
                &tick.label,
                (x, plot.bottom() + 5.0 + TICK_PT),
                TICK_PT,
                MUTED,
                Weight::Regular,
                Align::Center,
            );
        }
    }
}

/// The device's capacity and the threshold (a `threshold_fraction` of it, dashed), when the
/// capacity is known.
fn draw_capacity_lines(
    canvas: &mut Canvas,
    panel: &TimelinePanel,
    space: PlotSpace,
    threshold_fraction: f64,
    mask: Option<&Mask>,
) {
    if panel.total_bytes > 0 {
        let plot = space.plot;
        let y = space.y_of(panel.total_bytes);
        canvas.polyline(
            &[(plot.x, y), (plot.right(), y)],
            CAPACITY_COLOR,
            1.2,
            None,
            mask,
        );
        let y = space.y_of((panel.total_bytes as f64 * threshold_fraction) as u64);
        canvas.polyline(
            &[(plot.x, y), (plot.right(), y)],
            THRESHOLD_COLOR,
            1.2,
            Some([6.0, 4.0]),
            mask,
        );
    }
}

/// The used memory as a line over a tinted area, then the processes' lines on top, each
/// decimated to the plot's pixel columns.
fn draw_series(
    canvas: &mut Canvas,
    panel: &TimelinePanel,
    space: PlotSpace,
    (t_min, t_max): (UnixMs, UnixMs),
    mask: Option<&Mask>,
) {
    let plot = space.plot;
    let px_per_point = canvas.scale();
    let columns = (plot.width * px_per_point).max(1.0) as usize;
    let to_screen = |points: &[(UnixMs, u64)]| -> Vec<(f32, f32)> {
        decimate(points, (t_min, t_max), columns)
            .into_iter()
            .map(|(t, b)| (space.x_of(t), space.y_of(b)))
            .collect()
    };
    if let Some(used) = panel.series.first() {
        let line = to_screen(&used.points);
        if let (Some(first), Some(last)) = (line.first(), line.last()) {
            let mut area_points = line.clone();
            area_points.push((last.0, plot.bottom()));
            area_points.push((first.0, plot.bottom()));
            canvas.fill_polygon(&area_points, SERIES_COLORS[0], USED_AREA_ALPHA, mask);
        }
        canvas.polyline(&line, SERIES_COLORS[0], 1.6, None, mask);
    }
    // Processes on top, wider, so one that holds all the memory is not hidden by the GPU line.
    for (i, series) in panel.series.iter().enumerate().skip(1) {
        let line = to_screen(&series.points);
        canvas.polyline(
            &line,
            SERIES_COLORS[i % SERIES_COLORS.len()],
            2.0,
            None,
            mask,
        );
    }
}

/// The markers inside the time range: a line each, and a label in the first of three rows
/// where it does not overlap (left out where none is free). All lines first, then the labels,
/// so that no line crosses another marker's label.
fn draw_markers(
    canvas: &mut Canvas,
    panel: &TimelinePanel,
    space: PlotSpace,
    (t_min, t_max): (UnixMs, UnixMs),
    mask: Option<&Mask>,
) {
    let plot = space.plot;
    let visible: Vec<_> = panel
        .markers
        .iter()
        .filter(|m| m.t_ms >= t_min && m.t_ms <= t_max)
        .collect();
    for marker in &visible {
        let x = space.x_of(marker.t_ms);
        let dash =
            matches!(marker.kind, MarkerKind::NearFull | MarkerKind::Note).then_some([5.0, 3.0]);
        let color = marker_color(marker.kind);
        canvas.polyline(&[(x, plot.y), (x, plot.bottom())], color, 1.5, dash, mask);
    }
    let mut rows: [Vec<(f32, f32)>; 3] = Default::default();
    for marker in visible {
        let x = space.x_of(marker.t_ms);
        let color = marker_color(marker.kind);
        let text = marker_text(marker.kind, &marker.label);
        let width = canvas.text_width(&text, LABEL_PT) + 8.0;
        // Labels sit right of their line, or left of it near the right edge.
        let left = if x + width + 2.0 > plot.right() {
            x - width - 2.0
        } else {
            x + 3.0
        };
        let span = (left, left + width);
        let Some(row) = rows
            .iter()
            .position(|taken| taken.iter().all(|&(a, b)| span.1 < a || span.0 > b))
        else {
            continue;
        };
        rows[row].push(span);
        let top = plot.y + 3.0 + row as f32 * (LABEL_PT + 6.0);
        let label_box = Area {
            x: left,
            y: top,
            width,
            height: LABEL_PT + 4.0,
        };
        canvas.fill_rect(label_box, [255, 255, 255], 0.92);
        canvas.text(
            &text,
            (left + 4.0, top + LABEL_PT),
            LABEL_PT,
            color,
            Weight::Bold,
            Align::Left,
        );
    }
}

/// The frame around the plot: drawn last, over everything that reached the edges.
fn draw_frame(canvas: &mut Canvas, plot: Area) {
    canvas.polyline(
        &[
            (plot.x, plot.y),
            (plot.right(), plot.y),
            (plot.right(), plot.bottom()),
            (plot.x, plot.bottom()),
            (plot.x, plot.y),
        ],
        FRAME,
        1.0,
        None,
        None,
    );
}

/// The points to draw for `points` over `[t_min, t_max]` at `columns` pixel columns: inside the
/// range, the first, lowest, highest and last point of each column (so short peaks survive), plus
/// the neighbours just outside it, so the line reaches the edges.
fn decimate(
    points: &[(UnixMs, u64)],
    (t_min, t_max): (UnixMs, UnixMs),
    columns: usize,
) -> Vec<(UnixMs, u64)> {
    let start = points.partition_point(|p| p.0 < t_min).saturating_sub(1);
    let end = (points.partition_point(|p| p.0 <= t_max) + 1).min(points.len());
    let visible = &points[start..end];
    if visible.len() <= columns * 4 {
        return visible.to_vec();
    }
    let span = (t_max - t_min).max(1) as f64;
    let column_of = |t: UnixMs| ((t - t_min) as f64 / span * columns as f64).floor() as i64;
    let mut out = Vec::with_capacity(columns * 4);
    let mut i = 0;
    while i < visible.len() {
        let column = column_of(visible[i].0);
        let mut j = i;
        let (mut low, mut high) = (i, i);
        while j < visible.len() && column_of(visible[j].0) == column {
            if visible[j].1 < visible[low].1 {
                low = j;
            }
            if visible[j].1 > visible[high].1 {
                high = j;
            }
            j += 1;
        }
        let mut picks = [i, low, high, j - 1];
        picks.sort_unstable();
        let mut previous = None;
        for pick in picks {
            if previous != Some(pick) {
                out.push(visible[pick]);
                previous = Some(pick);
            }
        }
        i = j;
    }
    out
}

/// One GPU's chart for the HTML report, `width` × `height` points at `scale` pixels per point,
/// with its axes labelled. Returns PNG bytes.
pub fn render_png(
    panel: &TimelinePanel,
    time_range: (UnixMs, UnixMs),
    threshold_fraction: f64,
    (width, height): (f32, f32),
    scale: f32,
) -> Result<Vec<u8>, FigureError> {
    let mut canvas = Canvas::new(width, height, scale)?;
    let area = Area {
        x: 4.0,
        y: 4.0,
        width: width - 8.0,
        height: height - 6.0,
    };
    draw_panel(
        &mut canvas,
        panel,
        area,
        time_range,
        threshold_fraction,
        true,
    );
    canvas.encode_png()
}

/// How a review image is made.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReviewImageOptions {
    /// Width in points (the image is `width × scale` pixels wide).
    pub width: f32,
    /// Pixel density: 1 for 100 % zoom, 2 for high-density screens and zooming in.
    pub scale: f32,
    /// When the image was made (Unix ms), for its footer.
    pub generated_at_ms: UnixMs,
}

impl Default for ReviewImageOptions {
    fn default() -> Self {
        ReviewImageOptions {
            width: 1200.0,
            scale: 1.0,
            generated_at_ms: 0,
        }
    }
}

/// `2026-11-30 08:43:28 UTC`.
fn utc_seconds(t_ms: UnixMs) -> String {
    let utc = UtcDateTime::from_unix_ms(t_ms);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second
    )
}

/// The review image's title: the file or source, the GPUs, the host.
pub fn review_title(timeline: &Timeline) -> String {
    let mut names: Vec<(String, usize)> = Vec::new();
    for panel in &timeline.panels {
        let name = if panel.device_name.is_empty() {
            "GPU".to_owned()
        } else {
            panel.device_name.clone()
        };
        match names.iter_mut().find(|(n, _)| *n == name) {
            Some((_, count)) => *count += 1,
            None => names.push((name, 1)),
        }
    }
    let gpus: Vec<String> = names
        .into_iter()
        .map(|(name, count)| format!("{count} × {name}"))
        .collect();
    // File names without their folders; the banner under the title says SIMULATED.
    let caption = timeline
        .caption
        .strip_suffix(" (SIMULATED)")
        .unwrap_or(&timeline.caption);
    let source = caption
        .split(" + ")
        .map(|part| {
            std::path::Path::new(part)
                .file_name()
                .map_or(part.to_owned(), |n| n.to_string_lossy().into_owned())
        })
        .collect::<Vec<_>>()
        .join(" + ");
    let mut title = format!("{source} — {}", gpus.join(", "));
    if timeline.panels_left_out > 0 {
        title.push_str(&format!(" (+{} more GPUs)", timeline.panels_left_out));
    }
    if !timeline.host.is_empty() {
        title.push_str(&format!(" on {}", timeline.host));
    }
    title
}

/// The review image's second line: the absolute UTC time range, its length, the sampling
/// interval and the threshold.
pub fn review_subtitle(timeline: &Timeline, (t_min, t_max): (UnixMs, UnixMs)) -> String {
    let same_day = t_min.div_euclid(86_400_000) == t_max.div_euclid(86_400_000);
    let end = if same_day {
        utc_seconds(t_max)[11..].to_owned()
    } else {
        utc_seconds(t_max)
    };
    let mut text = format!(
        "{} – {end} UTC ({})",
        utc_seconds(t_min),
        format_duration_ms(t_max - t_min)
    );
    if timeline.interval_ms > 0 {
        text.push_str(&format!(
            " · sampled every {}",
            format_duration_ms(i64::from(timeline.interval_ms))
        ));
    }
    text.push_str(&format!(
        " · threshold {:.0} % of capacity",
        timeline.threshold_fraction * 100.0
    ));
    text
}

/// The margin around a review image's contents, in points.
const REVIEW_MARGIN: f32 = 28.0;
/// The height of a review image's key to the lines and markers.
const REVIEW_KEY_HEIGHT: f32 = 30.0;
/// The height of a review image's footer.
const REVIEW_FOOTER_HEIGHT: f32 = 26.0;

/// The whole timeline as an image for a review: title, UTC range, one labelled chart per GPU
/// with its legend, a key to the lines and markers, and a footer. Returns PNG bytes.
pub fn render_review_png(
    timeline: &Timeline,
    options: &ReviewImageOptions,
) -> Result<Vec<u8>, FigureError> {
    let Some(range) = review_range(timeline) else {
        return Err(FigureError::Size {
            width: 0,
            height: 0,
        });
    };
    let width = options.width.clamp(480.0, 4000.0);
    let margin = REVIEW_MARGIN;
    let inner = width - 2.0 * margin;
    let plot_height = review_plot_height(timeline.panels.len().max(1));
    let measure = Canvas::new(1.0, 1.0, 1.0)?;
    let legend_rows = review_legends(timeline, range);
    let height = review_height(timeline, &legend_rows, plot_height, (&measure, inner));
    let mut canvas = Canvas::new(width, height, options.scale)?;

    let mut y = draw_review_header(&mut canvas, timeline, range);
    for (i, (panel, entries)) in timeline.panels.iter().zip(&legend_rows).enumerate() {
        let x_labels = review_x_labels(timeline, i);
        y = draw_review_panel_title(&mut canvas, panel, range, y);
        y = draw_legend(&mut canvas, entries, inner, y);
        let chart_height = plot_height + if x_labels { 26.0 } else { 10.0 };
        draw_panel(
            &mut canvas,
            panel,
            Area {
                x: margin,
                y,
                width: inner,
                height: chart_height,
            },
            range,
            timeline.threshold_fraction,
            x_labels,
        );
        y += chart_height + 8.0;
    }
    y += 4.0;
    draw_review_key(&mut canvas, timeline, y);
    y += REVIEW_KEY_HEIGHT;
    draw_review_footer(&mut canvas, timeline, options, y);
    canvas.encode_png()
}

/// The time range a review image shows: the timeline's, widened to a second around its one
/// moment when it has no length. None for a timeline without samples.
fn review_range(timeline: &Timeline) -> Option<(UnixMs, UnixMs)> {
    let range = timeline.time_range()?;
    Some(if range.1 > range.0 {
        range
    } else {
        (range.0 - 500, range.0 + 500)
    })
}

/// The height of each GPU's plot in a review image of `panels` GPUs: the fewer, the taller.
fn review_plot_height(panels: usize) -> f32 {
    match panels {
        1 => 320.0,
        2 => 230.0,
        n => (660.0 / n as f32).max(130.0),
    }
}

/// Whether the review image labels panel `i`'s time axis: the last panel's, or every panel's
/// when there are only two.
fn review_x_labels(timeline: &Timeline, i: usize) -> bool {
    i + 1 == timeline.panels.len() || timeline.panels.len() <= 2
}

/// Each panel's legend: a label and colour per line, the used memory first, each with its peak
/// inside `range`.
fn review_legends(timeline: &Timeline, range: (UnixMs, UnixMs)) -> Vec<Vec<(String, Rgb)>> {
    timeline
        .panels
        .iter()
        .map(|panel| {
            panel
                .series
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let peak = s
                        .points
                        .iter()
                        .filter(|p| p.0 >= range.0 && p.0 <= range.1)
                        .map(|p| p.1)
                        .max()
                        .unwrap_or(0);
                    let label = if i == 0 {
                        format!("used (peak {})", format_bytes(peak))
                    } else {
                        format!("{} (peak {})", s.label, format_bytes(peak))
                    };
                    (label, SERIES_COLORS[i % SERIES_COLORS.len()])
                })
                .collect()
        })
        .collect()
}

/// How many lines a legend of `entries` takes in `inner` points (as [`draw_legend`] wraps
/// them), measured on `measure`.
fn legend_line_count(measure: &Canvas, entries: &[(String, Rgb)], inner: f32) -> usize {
    let mut lines = 1;
    let mut x = 0.0;
    for (label, _) in entries {
        let w = 18.0 + measure.text_width(label, LABEL_PT) + 16.0;
        if x + w > inner && x > 0.0 {
            lines += 1;
            x = 0.0;
        }
        x += w;
    }
    lines
}

/// The review image's height, laid out before it is drawn: margin, header, each panel (its
/// title line, its legend's lines as wide as `inner` on `measure`, its chart), key and footer.
fn review_height(
    timeline: &Timeline,
    legend_rows: &[Vec<(String, Rgb)>],
    plot_height: f32,
    (measure, inner): (&Canvas, f32),
) -> f32 {
    let header_height = 36.0 + 24.0 + if timeline.simulated { 22.0 } else { 0.0 } + 10.0;
    let panel_heights: Vec<f32> = legend_rows
        .iter()
        .enumerate()
        .map(|(i, entries)| {
            let x_labels = review_x_labels(timeline, i);
            24.0 + legend_line_count(measure, entries, inner) as f32 * 18.0
                + 4.0
                + plot_height
                + if x_labels { 20.0 } else { 4.0 }
                + 14.0
        })
        .collect();
    REVIEW_MARGIN
        + header_height
        + panel_heights.iter().sum::<f32>()
        + REVIEW_KEY_HEIGHT
        + REVIEW_FOOTER_HEIGHT
}

/// The review image's header: title, time range and, for the demo's data, the SIMULATED
/// banner. Returns the y below it.
fn draw_review_header(canvas: &mut Canvas, timeline: &Timeline, range: (UnixMs, UnixMs)) -> f32 {
    let margin = REVIEW_MARGIN;
    let mut y = margin;
    canvas.text(
        &review_title(timeline),
        (margin, y + TITLE_PT),
        TITLE_PT,
        TEXT,
        Weight::Bold,
        Align::Left,
    );
    y += 36.0;
    canvas.text(
        &review_subtitle(timeline, range),
        (margin, y + SUBTITLE_PT),
        SUBTITLE_PT,
        MUTED,
        Weight::Regular,
        Align::Left,
    );
    y += 24.0;
    if timeline.simulated {
        let text = "SIMULATED DATA: vramscope's built-in demo machine, not a real GPU";
        let w = canvas.text_width(text, LABEL_PT) + 12.0;
        canvas.fill_rect(
            Area {
                x: margin,
                y,
                width: w,
                height: 18.0,
            },
            [255, 243, 205],
            1.0,
        );
        canvas.text(
            text,
            (margin + 6.0, y + 13.5),
            LABEL_PT,
            [120, 80, 0],
            Weight::Bold,
            Align::Left,
        );
        y += 22.0;
    }
    y + 10.0
}

/// A panel's title line at `y`: the GPU's label and name, then its peak inside `range` (and
/// what share of the capacity that is). Returns the y below it.
fn draw_review_panel_title(
    canvas: &mut Canvas,
    panel: &TimelinePanel,
    range: (UnixMs, UnixMs),
    y: f32,
) -> f32 {
    let margin = REVIEW_MARGIN;
    let mut title = panel.gpu_label.clone();
    if !panel.device_name.is_empty() {
        title.push_str(&format!(" · {}", panel.device_name));
    }
    let title_width = canvas.text(
        &title,
        (margin, y + PANEL_TITLE_PT),
        PANEL_TITLE_PT,
        TEXT,
        Weight::Bold,
        Align::Left,
    );
    let peak = panel.peak_bytes_in(range);
    let summary = if panel.total_bytes > 0 {
        format!(
            "peak {} of {} ({:.0} %)",
            format_bytes(peak),
            format_bytes(panel.total_bytes),
            peak as f64 / panel.total_bytes as f64 * 100.0
        )
    } else {
        format!("peak {}", format_bytes(peak))
    };
    canvas.text(
        &summary,
        (margin + title_width + 12.0, y + PANEL_TITLE_PT),
        LABEL_PT + 1.0,
        MUTED,
        Weight::Regular,
        Align::Left,
    );
    y + 24.0
}

/// A panel's legend from `y`: a colour swatch and label per entry, wrapped at `inner` points.
/// Returns the y below it.
fn draw_legend(canvas: &mut Canvas, entries: &[(String, Rgb)], inner: f32, mut y: f32) -> f32 {
    let margin = REVIEW_MARGIN;
    let mut x = margin;
    for (label, color) in entries {
        let w = 18.0 + canvas.text_width(label, LABEL_PT) + 16.0;
        if x + w > margin + inner && x > margin {
            x = margin;
            y += 18.0;
        }
        canvas.fill_rect(
            Area {
                x,
                y: y + 2.0,
                width: 12.0,
                height: 12.0,
            },
            *color,
            1.0,
        );
        canvas.text(
            label,
            (x + 18.0, y + 12.5),
            LABEL_PT,
            TEXT,
            Weight::Regular,
            Align::Left,
        );
        x += w;
    }
    y + 22.0
}

/// The key to the lines and markers at `y`: capacity and threshold always, each kind of
/// marker only where some panel has one.
fn draw_review_key(canvas: &mut Canvas, timeline: &Timeline, y: f32) {
    let mut x = REVIEW_MARGIN;
    let threshold_label = format!("{:.0} % threshold", timeline.threshold_fraction * 100.0);
    let present = |kind: MarkerKind| {
        timeline
            .panels
            .iter()
            .any(|p| p.markers.iter().any(|m| m.kind == kind))
    };
    let key: Vec<(&str, Rgb, bool)> = [
        ("capacity", CAPACITY_COLOR, false, true),
        (threshold_label.as_str(), THRESHOLD_COLOR, true, true),
        (
            "out of memory",
            OOM_COLOR,
            false,
            present(MarkerKind::OutOfMemory),
        ),
        ("Xid error", XID_COLOR, false, present(MarkerKind::Xid)),
        (
            "other hardware event",
            HARDWARE_COLOR,
            false,
            present(MarkerKind::Hardware),
        ),
        ("note", NOTE_COLOR, true, present(MarkerKind::Note)),
    ]
    .into_iter()
    .filter(|entry| entry.3)
    .map(|(label, color, dashed, _)| (label, color, dashed))
    .collect();
    for (label, color, dashed) in key {
        canvas.polyline(
            &[(x, y + 8.0), (x + 22.0, y + 8.0)],
            color,
            2.0,
            dashed.then_some([5.0, 3.0]),
            None,
        );
        let w = canvas.text(
            label,
            (x + 28.0, y + 12.5),
            LABEL_PT,
            TEXT,
            Weight::Regular,
            Align::Left,
        );
        x += 28.0 + w + 22.0;
    }
}

/// The footer at `y`: what the lines measure, the version, when the image was made, and how
/// many GPUs were left out.
fn draw_review_footer(
    canvas: &mut Canvas,
    timeline: &Timeline,
    options: &ReviewImageOptions,
    y: f32,
) {
    let mut footer = format!(
        "Memory used per GPU (NVML v2 'used': without the driver's reserve) and per process \
         (its whole footprint). vramscope {}",
        env!("CARGO_PKG_VERSION")
    );
    if options.generated_at_ms > 0 {
        footer.push_str(&format!(", {}", iso8601_utc(options.generated_at_ms)));
    }
    if timeline.panels_left_out > 0 {
        footer.push_str(&format!(
            " · {} more GPUs are not drawn",
            timeline.panels_left_out
        ));
    }
    canvas.text(
        &footer,
        (REVIEW_MARGIN, y + 12.0),
        TICK_PT,
        MUTED,
        Weight::Regular,
        Align::Left,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{TimelineMarker, TimelineSeries};

    fn decode(png: &[u8]) -> image::RgbImage {
        image::load_from_memory(png)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_rgb8()
    }

    fn panel() -> TimelinePanel {
        TimelinePanel {
            device_index: 0,
            gpu_label: "GPU 0".into(),
            device_name: "NVIDIA H200".into(),
            total_bytes: 100 << 30,
            series: vec![
                TimelineSeries {
                    label: "GPU 0 used".into(),
                    points: vec![(0, 10 << 30), (60_000, 95 << 30)],
                },
                TimelineSeries {
                    label: "PID 7 python3".into(),
                    points: vec![(0, 50 << 30), (60_000, 50 << 30)],
                },
            ],
            markers: vec![TimelineMarker {
                t_ms: 30_000,
                kind: MarkerKind::Xid,
                label: "Xid 79".into(),
            }],
        }
    }

    #[test]
    fn decimation_keeps_peaks_and_the_edges() {
        let points: Vec<(UnixMs, u64)> = (0..10_000)
            .map(|t| (t, if t == 5_001 { 99 } else { 1 }))
            .collect();
        let kept = decimate(&points, (100, 9_000), 100);
        assert!(kept.len() <= 400, "{}", kept.len());
        assert!(kept.contains(&(5_001, 99)), "a one-sample peak survives");
        assert_eq!(kept.first(), Some(&(99, 1)), "the point before the range");
        assert_eq!(kept.last(), Some(&(9_001, 1)), "the point after the range");
    }

    #[test]
    fn panel_chart_has_its_lines_and_labels() {
        let png = render_png(&panel(), (0, 60_000), 0.9, (900.0, 260.0), 1.0).expect("renders");
        let img = decode(&png);
        assert_eq!(img.dimensions(), (900, 260));
        let count = |color: Rgb| img.pixels().filter(|p| p.0 == color).count();
        assert!(count(SERIES_COLORS[1]) > 300, "the process line");
        assert!(count(XID_COLOR) > 100, "the Xid marker and its label");
        // Tick labels are dark-grey ink left of the plot.
        let ink_left = (0..40)
            .flat_map(|x| (0..240).map(move |y| (x, y)))
            .filter(|&(x, y)| img.get_pixel(x, y).0[0] < 150)
            .count();
        assert!(ink_left > 50, "y tick labels: {ink_left}");
    }

    #[test]
    fn review_image_scales_and_names_what_it_shows() {
        let timeline = Timeline {
            caption: "run.vramcap".into(),
            host: "gpu-node-7".into(),
            interval_ms: 250,
            threshold_fraction: 0.9,
            panels: vec![
                panel(),
                TimelinePanel {
                    device_index: 1,
                    gpu_label: "GPU 1".into(),
                    ..panel()
                },
            ],
            ..Default::default()
        };
        assert_eq!(
            review_title(&timeline),
            "run.vramcap — 2 × NVIDIA H200 on gpu-node-7"
        );
        let joined = Timeline {
            caption: "/tmp/a/gpu.csv + /tmp/a/apps.csv (SIMULATED)".into(),
            host: String::new(),
            ..timeline.clone()
        };
        assert_eq!(
            review_title(&joined),
            "gpu.csv + apps.csv — 2 × NVIDIA H200"
        );
        assert_eq!(
            review_subtitle(&timeline, (1_796_028_208_733, 1_796_028_248_983)),
            "2026-11-30 08:43:28 – 08:44:08 UTC (40 s) · sampled every 250 ms · threshold 90 % of capacity"
        );
        let one =
            decode(&render_review_png(&timeline, &ReviewImageOptions::default()).expect("1×"));
        let two = decode(
            &render_review_png(
                &timeline,
                &ReviewImageOptions {
                    scale: 2.0,
                    ..Default::default()
                },
            )
            .expect("2×"),
        );
        assert_eq!(one.width(), 1200);
        assert_eq!(
            (two.width(), two.height()),
            (2 * one.width(), 2 * one.height())
        );
    }
}
