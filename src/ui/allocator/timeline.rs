//! Allocated-vs-reserved timeline over trace time. Clicking or dragging on it moves time travel
//! (and so the block map) to that event.
//!
//! A trace can hold millions of events, so the series is reduced once per plot width to one
//! min/max column per point ([`TimelineColumns`]); drawing is then O(width).

use egui::{Color32, Pos2, Rect, Sense, Stroke, Ui, pos2, vec2};

use crate::analysis::timetravel::TimeTravel;
use crate::model::format_bytes;

/// Height of the timeline, in points.
pub const TIMELINE_HEIGHT: f32 = 86.0;

const ALLOCATED_COLOR: Color32 = Color32::from_rgb(66, 133, 214);
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

/// The allocated bytes of every column, as one mesh of plain quads: a pale bar from the bottom
/// up to the column's least, a solid one from its least to its most. Neighbouring columns of
/// the same heights share their quads. With software WebGL each triangle costs (a thousand
/// columns drawn as two feathered line segments each were ~15,000 triangles of the Allocator
/// view's first frame); a column is one point wide, so the picture is the same.
fn columns_mesh(data: &TimelineColumns, rect: Rect) -> egui::Mesh {
    let mut mesh = egui::Mesh::default();
    let bottom = rect.bottom() - 4.0;
    let mut run: Option<(usize, usize, f32, f32)> = None;
    let add_run = |mesh: &mut egui::Mesh, (first, end, y_min, y_max): (usize, usize, f32, f32)| {
        let (x0, x1) = (rect.left() + first as f32, rect.left() + end as f32);
        if y_min < bottom {
            mesh.add_colored_rect(
                Rect::from_x_y_ranges(x0..=x1, y_min..=bottom),
                ALLOCATED_COLOR.gamma_multiply(0.55),
            );
        }
        if y_max < y_min {
            mesh.add_colored_rect(
                Rect::from_x_y_ranges(x0..=x1, y_max..=y_min),
                ALLOCATED_COLOR,
            );
        }
    };
    for (i, column) in data.columns.iter().enumerate() {
        let y_min = y_of(data, rect, column.allocated_min_bytes);
        let y_max = y_of(data, rect, column.allocated_max_bytes);
        run = match run {
            Some((first, _, a, b)) if a == y_min && b == y_max => Some((first, i + 1, a, b)),
            Some(done) => {
                add_run(&mut mesh, done);
                Some((i, i + 1, y_min, y_max))
            }
            None => Some((i, i + 1, y_min, y_max)),
        };
    }
    if let Some(done) = run {
        add_run(&mut mesh, done);
    }
    mesh
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
    cache: &mut Option<TimelineColumns>,
    position: usize,
    oom_positions: &[usize],
) -> Option<usize> {
    let width = ui.available_width().max(50.0);
    let columns = width.round() as usize;
    if cache.as_ref().is_none_or(|c| c.columns.len() != columns) {
        *cache = Some(TimelineColumns::new(travel, columns));
    }
    let data = cache.as_ref()?;
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
    painter.add(columns_mesh(data, rect));
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
    use super::{time_column_ends, time_columns_are_informative};

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
}
