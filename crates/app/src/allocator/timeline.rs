//! Allocated-vs-reserved timeline over trace time. Clicking or dragging on it moves time travel
//! (and so the block map) to that event.
//!
//! A trace can hold millions of events, so the series is reduced once per plot width to one
//! min/max column per point ([`TimelineColumns`]); drawing is then O(width).

use egui::{Color32, Pos2, Rect, Sense, Stroke, Ui, pos2, vec2};

use vramscope_core::analysis::timetravel::TimeTravel;
use vramscope_core::model::format_bytes;
use vramscope_core::report::palette::BlockPaint;

/// Height of the timeline, in points.
pub const TIMELINE_HEIGHT: f32 = 86.0;

/// Allocated bytes, in the block map's colour for them.
const ALLOCATED_COLOR: Color32 = {
    let [r, g, b] = BlockPaint::Allocated.rgb();
    Color32::from_rgb(r, g, b)
};
const RESERVED_COLOR: Color32 = Color32::from_rgb(170, 170, 170);
const CURSOR_COLOR: Color32 = Color32::from_rgb(240, 200, 60);
const OOM_COLOR: Color32 = Color32::from_rgb(222, 60, 60);

/// One plot column: the event range it covers and the extremes of both series there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    /// Events `first_event..end_event` fall in this column (positions `first..=end`).
    pub first_event: usize,
    pub end_event: usize,
    pub allocated_min_bytes: u64,
    pub allocated_max_bytes: u64,
    pub reserved_max_bytes: u64,
}

/// The timeline reduced to `columns` columns of equal trace time (or of equal event counts when
/// the trace has no times).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimelineColumns {
    pub columns: Vec<Column>,
    /// Largest reserved value: the plot's vertical scale.
    pub peak_bytes: u64,
    /// True when columns are spaced by `time_us`, false when by event index.
    pub by_time: bool,
}

impl TimelineColumns {
    /// Reduces `travel`'s series to `width` columns.
    pub fn new(travel: &TimeTravel, width: usize) -> Self {
        let events = travel.len();
        let width = width.max(1);
        let times = &travel.trace().times_us;
        // Columns of equal trace time when the times allow it and show the trace, else columns
        // of equal event counts.
        let time_ends = if travel.times_are_monotonic() {
            time_column_ends(times, width).filter(|ends| time_columns_are_informative(ends))
        } else {
            None
        };
        let mut columns = Vec::with_capacity(width);
        let mut start = 0usize;
        for column in 0..width {
            let end = match &time_ends {
                Some(ends) => ends[column],
                None => (events * (column + 1)).div_ceil(width),
            };
            let end = if column + 1 == width {
                events
            } else {
                end.max(start)
            };
            // Positions start..=end: the state before the column's first event through the state
            // after its last one.
            let extremes = travel.series_extremes(start, end);
            columns.push(Column {
                first_event: start,
                end_event: end,
                allocated_min_bytes: extremes.allocated_min_bytes,
                allocated_max_bytes: extremes.allocated_max_bytes,
                reserved_max_bytes: extremes.reserved_max_bytes,
            });
            start = end;
        }
        TimelineColumns {
            peak_bytes: travel.series_extremes(0, events).reserved_max_bytes,
            columns,
            by_time: time_ends.is_some(),
        }
    }

    /// The position (events applied) a click at column `column` selects: the end of it.
    pub fn position_at(&self, column: usize) -> usize {
        self.columns
            .get(column.min(self.columns.len().saturating_sub(1)))
            .map_or(0, |c| c.end_event)
    }

    /// Column that shows position `position`.
    pub fn column_of(&self, position: usize) -> usize {
        self.columns
            .partition_point(|c| c.end_event < position)
            .min(self.columns.len().saturating_sub(1))
    }
}

/// The end (exclusive event index) of each of `width` columns of equal trace time, or `None`
/// when the times span no time. One binary search per column boundary, not a pass over millions
/// of events; the last column is closed on the right. `times` must be sorted.
fn time_column_ends(times: &[i64], width: usize) -> Option<Vec<usize>> {
    let (Some(&t0), Some(&t1)) = (times.first(), times.last()) else {
        return None;
    };
    if t1 <= t0 || width == 0 {
        return None;
    }
    let span = (t1 - t0) as f64;
    Some(
        (0..width)
            .map(|column| {
                if column + 1 == width {
                    times.len()
                } else {
                    let limit = t0 as f64 + span * (column + 1) as f64 / width as f64;
                    times.partition_point(|&t| (t as f64) < limit)
                }
            })
            .collect(),
    )
}

/// Whether columns of equal trace time (their `ends`, see [`time_column_ends`]) show the
/// trace: not when most of them would be empty (events in bursts with long pauses between
/// them, e.g. a job that allocated everything in its first second and then hit an OOM minutes
/// later), where equal event counts show more.
fn time_columns_are_informative(ends: &[usize]) -> bool {
    let mut occupied = 0usize;
    let mut start = 0usize;
    for &end in ends {
        if end > start {
            occupied += 1;
        }
        start = end;
    }
    // At least half the columns hold events, or every event has a column of its own.
    occupied * 2 >= ends.len() || occupied == start
}

/// The height in `rect` of `bytes` on the plot's scale (the peak near the top).
fn y_of(data: &TimelineColumns, rect: Rect, bytes: u64) -> f32 {
    let peak = data.peak_bytes.max(1) as f32;
    rect.bottom() - 4.0 - (rect.height() - 8.0) * bytes as f32 / peak
}

/// The allocated bytes of every column as a picture, one texel wide per column and
/// `height_px` texels tall over the plot's `height` points: a pale bar from the bottom up to the
/// column's least, a solid one from its least to its most, clear above. A texel takes a colour
/// when its centre lies inside a bar, as a rasteriser fills a pixel.
///
/// Drawn as one textured rectangle: with software WebGL each triangle costs, and the columns as
/// quads were 5,150 of the Allocator view's 10,806 triangles at 1280 points wide (its first
/// visible frame in the browser was 52–74 ms with them, under 50 without).
fn columns_image(data: &TimelineColumns, height: f32, height_px: usize) -> egui::ColorImage {
    let width = data.columns.len().max(1);
    let height_px = height_px.max(1);
    let mut pixels = vec![Color32::TRANSPARENT; width * height_px];
    let plot = Rect::from_min_size(Pos2::ZERO, vec2(width as f32, height));
    let bottom = plot.bottom() - 4.0;
    let points_per_texel = height / height_px as f32;
    let pale = ALLOCATED_COLOR.gamma_multiply(0.55);
    for (x, column) in data.columns.iter().enumerate() {
        let y_min = y_of(data, plot, column.allocated_min_bytes);
        let y_max = y_of(data, plot, column.allocated_max_bytes);
        for row in 0..height_px {
            let y = (row as f32 + 0.5) * points_per_texel;
            let color = if y >= y_min && y < bottom {
                pale
            } else if y >= y_max && y < y_min {
                ALLOCATED_COLOR
            } else {
                continue;
            };
            pixels[row * width + x] = color;
        }
    }
    egui::ColorImage::new([width, height_px], pixels)
}

/// The columns for the last plot width, and their picture as a texture for the last height in
/// texels: the picture is made and uploaded again only when either changes.
#[derive(Default)]
pub struct TimelineCache {
    columns: Option<TimelineColumns>,
    /// The picture and the height in texels it was made for.
    picture: Option<(usize, egui::TextureHandle)>,
}

impl TimelineCache {
    /// Reduces `travel` to `columns` columns and makes their picture `height_px` texels tall,
    /// unless that was done for the same width and height already.
    fn prepare(
        &mut self,
        ctx: &egui::Context,
        travel: &TimeTravel,
        columns: usize,
        height_px: usize,
    ) {
        if self
            .columns
            .as_ref()
            .is_none_or(|c| c.columns.len() != columns)
        {
            self.columns = Some(TimelineColumns::new(travel, columns));
            self.picture = None;
        }
        let Some(data) = &self.columns else {
            return;
        };
        if self
            .picture
            .as_ref()
            .is_none_or(|(made_for, _)| *made_for != height_px)
        {
            let image = columns_image(data, TIMELINE_HEIGHT, height_px);
            let texture =
                ctx.load_texture("allocator timeline", image, egui::TextureOptions::NEAREST);
            self.picture = Some((height_px, texture));
        }
    }
}

/// The reserved bytes' line through the columns' middles, without the points inside a level
/// stretch (reserved memory moves in steps, so most points lie on a flat line): the same line
/// with a fraction of the points to tessellate.
fn reserved_line(data: &TimelineColumns, rect: Rect) -> Vec<Pos2> {
    let points: Vec<Pos2> = data
        .columns
        .iter()
        .enumerate()
        .map(|(i, column)| {
            pos2(
                rect.left() + i as f32 + 0.5,
                y_of(data, rect, column.reserved_max_bytes),
            )
        })
        .collect();
    let mut line: Vec<Pos2> = Vec::with_capacity(points.len());
    for (i, &point) in points.iter().enumerate() {
        let level_before = i > 0 && points[i - 1].y == point.y;
        let level_after = points.get(i + 1).is_some_and(|next| next.y == point.y);
        if !(level_before && level_after) {
            line.push(point);
        }
    }
    line
}

/// Draws the timeline and returns the position the user clicked or dragged to, if any.
///
/// `cache` holds the columns for the last width; `oom_positions` are drawn as red ticks.
pub fn timeline_ui(
    ui: &mut Ui,
    travel: &TimeTravel,
    cache: &mut TimelineCache,
    position: usize,
    oom_positions: &[usize],
) -> Option<usize> {
    let width = ui.available_width().max(50.0);
    let columns = width.round() as usize;
    let height_px = (TIMELINE_HEIGHT * ui.ctx().pixels_per_point()).round() as usize;
    cache.prepare(ui.ctx(), travel, columns, height_px);
    let data = cache.columns.as_ref()?;
    // The caption sits above the plot, not on it.
    ui.label(
        egui::RichText::new(format!(
            "reserved (grey) vs allocated (blue), peak {} — {}",
            format_bytes(data.peak_bytes),
            if data.by_time {
                "x: trace time"
            } else {
                "x: event index (events are evenly spaced, not their times)"
            }
        ))
        .small()
        .weak(),
    );
    let (response, painter) =
        ui.allocate_painter(vec2(width, TIMELINE_HEIGHT), Sense::click_and_drag());
    response.widget_info(|| {
        egui::WidgetInfo::labeled(egui::Role::Canvas, true, "Allocated vs reserved timeline")
    });
    let rect = response.rect;
    painter.rect_filled(rect, 2.0, ui.visuals().extreme_bg_color);
    if let Some((_, texture)) = &cache.picture {
        painter.image(
            texture.id(),
            Rect::from_min_size(rect.min, vec2(columns as f32, rect.height())),
            Rect::from_min_max(pos2(0.0, 0.0), pos2(1.0, 1.0)),
            Color32::WHITE,
        );
    }
    painter.add(egui::Shape::line(
        reserved_line(data, rect),
        Stroke::new(1.5, RESERVED_COLOR),
    ));
    for &oom in oom_positions {
        let x = rect.left() + data.column_of(oom) as f32 + 0.5;
        painter.line_segment(
            [pos2(x, rect.top()), pos2(x, rect.top() + 10.0)],
            Stroke::new(2.0, OOM_COLOR),
        );
    }
    let cursor_x = rect.left() + data.column_of(position) as f32 + 0.5;
    painter.line_segment(
        [pos2(cursor_x, rect.top()), pos2(cursor_x, rect.bottom())],
        Stroke::new(1.5, CURSOR_COLOR),
    );
    let clicked = (response.clicked() || response.dragged())
        .then(|| response.interact_pointer_pos())
        .flatten()
        .filter(|p| Rect::everything_right_of(rect.left()).contains(*p))
        .map(|p| data.position_at(((p.x - rect.left()).max(0.0)) as usize));
    response.on_hover_text("Click or drag to move the block map to that moment");
    clicked
}

#[cfg(test)]
mod tests {
    use super::{
        ALLOCATED_COLOR, Column, TimelineColumns, columns_image, time_column_ends,
        time_columns_are_informative,
    };
    use egui::Color32;

    fn time_axis_is_informative(times: &[i64], width: usize) -> bool {
        time_column_ends(times, width).is_some_and(|ends| time_columns_are_informative(&ends))
    }

    #[test]
    fn bursts_with_long_pauses_are_drawn_by_event_index() {
        // Steady events every 10 ms: time is a fine axis.
        let steady: Vec<i64> = (0..10_000).map(|i| i * 10_000).collect();
        assert!(time_axis_is_informative(&steady, 800));
        // 10,000 events in the first second, then one OOM ten minutes later.
        let mut burst: Vec<i64> = (0..10_000).map(|i| i * 100).collect();
        burst.push(600_000_000);
        assert!(!time_axis_is_informative(&burst, 800));
        // Few events, each in its own column: time is fine even with gaps.
        assert!(time_axis_is_informative(&[0, 500_000, 1_000_000], 800));
        assert!(!time_axis_is_informative(&[], 800));
        assert!(!time_axis_is_informative(&[7, 7, 7], 800));
    }

    /// The picture holds each column's bars where a rasteriser would fill them: pale from the
    /// bottom margin up to the least, solid from the least to the most, clear elsewhere; at twice
    /// the pixels per point each bar is twice as many texels tall.
    #[test]
    fn the_columns_picture_fills_each_columns_bars() {
        let column = |min: u64, max: u64| Column {
            first_event: 0,
            end_event: 1,
            allocated_min_bytes: min,
            allocated_max_bytes: max,
            reserved_max_bytes: 100,
        };
        let data = TimelineColumns {
            columns: vec![column(0, 0), column(50, 100), column(100, 100)],
            peak_bytes: 100,
            by_time: false,
        };
        let pale = ALLOCATED_COLOR.gamma_multiply(0.55);
        let texels_of = |image: &egui::ColorImage, x: usize, color: Color32| {
            (0..image.size[1])
                .filter(|&y| image.pixels[y * image.size[0] + x] == color)
                .count()
        };
        // 86 points tall: bars span y 4..82; 50 bytes of 100 lie at y 43.
        let image = columns_image(&data, 86.0, 86);
        assert_eq!(image.size, [3, 86]);
        assert_eq!(texels_of(&image, 0, Color32::TRANSPARENT), 86);
        assert_eq!(texels_of(&image, 1, pale), 82 - 43);
        assert_eq!(texels_of(&image, 1, ALLOCATED_COLOR), 43 - 4);
        assert_eq!(texels_of(&image, 1, Color32::TRANSPARENT), 4 + 4);
        assert_eq!(image.pixels[50 * 3 + 1], pale);
        assert_eq!(image.pixels[20 * 3 + 1], ALLOCATED_COLOR);
        assert_eq!(texels_of(&image, 2, pale), 82 - 4);
        assert_eq!(texels_of(&image, 2, ALLOCATED_COLOR), 0);
        let sharp = columns_image(&data, 86.0, 172);
        assert_eq!(sharp.size, [3, 172]);
        assert_eq!(texels_of(&sharp, 1, pale), 2 * (82 - 43));
        assert_eq!(texels_of(&sharp, 1, ALLOCATED_COLOR), 2 * (43 - 4));
    }
}
