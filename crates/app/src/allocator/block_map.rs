//! The block map: every segment of an allocator state as a bar, its blocks drawn to scale.
//!
//! Segments are listed in address order under headers that group them by pool (private pool
//! id), small/large pool and stream, the units within which the allocator can reuse memory.
//! One bar per segment; every bar uses the same bytes-per-point scale so that sizes compare at a
//! glance, and blocks narrower than [`MIN_BLOCK_WIDTH`] are merged into slivers of that width so
//! that nothing disappears. Only visible rows and the visible address range of each row are
//! visited per frame ([`visible_rects`]), which keeps huge states at 60 fps.

use egui::{Color32, Pos2, Rect, Vec2, pos2, vec2};

use vramscope_core::analysis::timetravel::{AllocatorState, BlockStatus};
use vramscope_core::model::allocator::PoolId;
use vramscope_core::model::format_bytes;

/// Height of one row (segment or header), in points.
pub const ROW_HEIGHT: f32 = 18.0;
/// Width of the address/size labels left of the bars, in points.
pub const LABEL_WIDTH: f32 = 190.0;
/// Blocks narrower than this are merged into a sliver of this width, in points.
pub const MIN_BLOCK_WIDTH: f32 = 2.0;
/// Highest zoom factor (1 = the largest segment fills the width).
pub const MAX_ZOOM: f32 = 1.0e6;

pub use vramscope_core::report::palette::BlockPaint;

/// The fill colour of `paint` on screen: the palette's, as in the reports.
pub fn paint_color(paint: BlockPaint) -> Color32 {
    let [r, g, b] = paint.rgb();
    Color32::from_rgb(r, g, b)
}

/// One row of the map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapRow {
    /// A group heading; `depth` 0 = pool, 1 = small/large, 2 = stream.
    Header { text: String, depth: u8 },
    /// A segment, by index into the state's segments.
    Segment { index: usize },
}

/// The rows of a state's map; rebuilt whenever the state changes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BlockMapLayout {
    pub rows: Vec<MapRow>,
    /// Row of each segment (by segment index).
    pub segment_rows: Vec<usize>,
    /// Size of the largest segment: at zoom 1 it fills the bar area.
    pub largest_segment_bytes: u64,
}

impl BlockMapLayout {
    /// Groups the segments of `state` by pool id, pool and stream, each group in address order.
    pub fn new(state: &AllocatorState) -> Self {
        let mut order: Vec<usize> = (0..state.segments.len()).collect();
        order.sort_by_key(|&i| {
            let s = &state.segments[i];
            (s.pool_id, s.pool, s.stream, s.address)
        });
        let mut rows = Vec::with_capacity(order.len() + 8);
        let mut segment_rows = vec![0; state.segments.len()];
        let mut current: Option<(PoolId, vramscope_core::model::allocator::PoolKind, u64)> = None;
        for index in order {
            let s = &state.segments[index];
            let key = (s.pool_id, s.pool, s.stream);
            let new_pool = current.is_none_or(|c| c.0 != key.0);
            let new_kind = new_pool || current.is_some_and(|c| c.1 != key.1);
            let new_stream = new_kind || current.is_some_and(|c| c.2 != key.2);
            if new_pool {
                let text = if s.pool_id.is_default() {
                    "default pool".to_string()
                } else {
                    format!("private pool ({}, {})", s.pool_id.0, s.pool_id.1)
                };
                rows.push(MapRow::Header { text, depth: 0 });
            }
            if new_kind {
                rows.push(MapRow::Header {
                    text: format!("{} blocks", s.pool.as_str()),
                    depth: 1,
                });
            }
            if new_stream {
                rows.push(MapRow::Header {
                    text: format!("stream {:#x}", s.stream),
                    depth: 2,
                });
            }
            current = Some(key);
            segment_rows[index] = rows.len();
            rows.push(MapRow::Segment { index });
        }
        BlockMapLayout {
            rows,
            segment_rows,
            largest_segment_bytes: state
                .segments
                .iter()
                .map(|s| s.size_bytes)
                .max()
                .unwrap_or(0),
        }
    }

    /// Height of all rows, in points.
    pub fn content_height(&self) -> f32 {
        self.rows.len() as f32 * ROW_HEIGHT
    }
}

/// Zoom and pan of the map.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MapView {
    /// 1 = the largest segment fills the bar area.
    pub zoom: f32,
    /// Horizontal pan of the bars, in points.
    pub pan_x: f32,
    /// Vertical scroll of the rows, in points.
    pub scroll_y: f32,
}

impl Default for MapView {
    fn default() -> Self {
        MapView {
            zoom: 1.0,
            pan_x: 0.0,
            scroll_y: 0.0,
        }
    }
}

impl MapView {
    /// Points per byte for a bar area of `bar_width` points.
    pub fn points_per_byte(&self, layout: &BlockMapLayout, bar_width: f32) -> f64 {
        let largest = layout.largest_segment_bytes.max(1) as f64;
        f64::from(bar_width.max(1.0)) * f64::from(self.zoom) / largest
    }

    /// Keeps the view inside the content.
    pub fn clamp(&mut self, layout: &BlockMapLayout, area: Rect) {
        self.zoom = self.zoom.clamp(1.0, MAX_ZOOM);
        let bar_width = (area.width() - LABEL_WIDTH).max(1.0);
        let content_width = bar_width * self.zoom;
        self.pan_x = self.pan_x.clamp(0.0, (content_width - bar_width).max(0.0));
        let max_scroll = (layout.content_height() - area.height()).max(0.0);
        self.scroll_y = self.scroll_y.clamp(0.0, max_scroll);
    }

    /// Zooms by `factor` keeping the bytes under `anchor_x` (screen x) in place.
    pub fn zoom_around(&mut self, factor: f32, anchor_x: f32, area: Rect) {
        let bar_left = area.left() + LABEL_WIDTH;
        let offset = (anchor_x - bar_left).max(0.0) + self.pan_x;
        let new_zoom = (self.zoom * factor).clamp(1.0, MAX_ZOOM);
        let applied = new_zoom / self.zoom;
        self.zoom = new_zoom;
        self.pan_x = offset * applied - (anchor_x - bar_left).max(0.0);
    }

    /// Scrolls and pans so that `row` and the byte `offset_bytes` into it are visible.
    pub fn reveal(&mut self, layout: &BlockMapLayout, area: Rect, row: usize, offset_bytes: u64) {
        let row_top = row as f32 * ROW_HEIGHT;
        if row_top < self.scroll_y || row_top + ROW_HEIGHT > self.scroll_y + area.height() {
            self.scroll_y = row_top - area.height() / 3.0;
        }
        let bar_width = (area.width() - LABEL_WIDTH).max(1.0);
        let x = (offset_bytes as f64 * self.points_per_byte(layout, bar_width)) as f32;
        if x < self.pan_x || x > self.pan_x + bar_width {
            self.pan_x = x - bar_width / 3.0;
        }
        self.clamp(layout, area);
    }
}

/// A rectangle to paint.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PaintedRect {
    pub rect: Rect,
    pub paint: BlockPaint,
}

/// Rows visible in `area` with this view.
pub fn visible_rows(layout: &BlockMapLayout, view: &MapView, area: Rect) -> std::ops::Range<usize> {
    let first = (view.scroll_y / ROW_HEIGHT).floor().max(0.0) as usize;
    let count = (area.height() / ROW_HEIGHT).ceil() as usize + 1;
    first.min(layout.rows.len())..(first + count).min(layout.rows.len())
}

/// Top-left corner of a row's bar (the point where its segment's first byte is drawn).
pub fn row_origin(view: &MapView, area: Rect, row: usize) -> Pos2 {
    pos2(
        area.left() + LABEL_WIDTH - view.pan_x,
        area.top() + row as f32 * ROW_HEIGHT - view.scroll_y,
    )
}

/// Screen rectangle of block `block` of segment `segment` (before sliver merging).
pub fn block_rect(
    layout: &BlockMapLayout,
    state: &AllocatorState,
    view: &MapView,
    area: Rect,
    segment: usize,
    block: usize,
) -> Option<Rect> {
    let s = state.segments.get(segment)?;
    let b = s.blocks.get(block)?;
    let row = *layout.segment_rows.get(segment)?;
    let scale = view.points_per_byte(layout, area.width() - LABEL_WIDTH);
    let origin = row_origin(view, area, row);
    let x0 = origin.x + ((b.address - s.address) as f64 * scale) as f32;
    let width = ((b.size_bytes as f64 * scale) as f32).max(MIN_BLOCK_WIDTH);
    Some(Rect::from_min_size(
        pos2(x0, origin.y + 2.0),
        vec2(width, ROW_HEIGHT - 4.0),
    ))
}

/// Appends the rectangles of every visible block to `out` (cleared first). This is the whole
/// per-frame cost of the map: O(visible rows × visible blocks per row).
pub fn visible_rects(
    layout: &BlockMapLayout,
    state: &AllocatorState,
    view: &MapView,
    area: Rect,
    out: &mut Vec<PaintedRect>,
) {
    out.clear();
    let bar_left = area.left() + LABEL_WIDTH;
    let scale = view.points_per_byte(layout, area.width() - LABEL_WIDTH);
    for row in visible_rows(layout, view, area) {
        let MapRow::Segment { index } = layout.rows[row] else {
            continue;
        };
        let segment = &state.segments[index];
        let origin = row_origin(view, area, row);
        let (top, bottom) = (origin.y + 2.0, origin.y + ROW_HEIGHT - 2.0);
        // First block that reaches into the visible x range.
        let visible_from_bytes = ((bar_left - origin.x).max(0.0) as f64 / scale) as u64;
        let first_visible = segment
            .blocks
            .partition_point(|b| b.end_address() - segment.address <= visible_from_bytes);
        let mut sliver: Option<(f32, f32, BlockPaint)> = None;
        let emit = |x0: f32, x1: f32, paint: BlockPaint, out: &mut Vec<PaintedRect>| {
            let x0 = x0.max(bar_left);
            if x1 > x0 {
                out.push(PaintedRect {
                    rect: Rect::from_x_y_ranges(x0..=x1, top..=bottom),
                    paint,
                });
            }
        };
        for block in &segment.blocks[first_visible..] {
            let x0 = origin.x + ((block.address - segment.address) as f64 * scale) as f32;
            if x0 > area.right() {
                break;
            }
            let x1 = (x0 + (block.size_bytes as f64 * scale) as f32).min(area.right());
            let paint = match block.status {
                BlockStatus::Allocated => BlockPaint::Allocated,
                BlockStatus::PendingFree => BlockPaint::PendingFree,
                BlockStatus::Free => BlockPaint::Free,
            };
            if x1 - x0 >= MIN_BLOCK_WIDTH {
                if let Some((s0, s1, p)) = sliver.take() {
                    emit(s0, s1.min(x0), p, out);
                }
                // A one-point gap separates neighbouring blocks that are wide enough.
                let x1 = if x1 - x0 > 4.0 * MIN_BLOCK_WIDTH {
                    x1 - 1.0
                } else {
                    x1
                };
                if block.status == BlockStatus::Allocated
                    && block.requested_bytes < block.size_bytes
                {
                    let xr = x0 + (block.requested_bytes as f64 * scale) as f32;
                    emit(x0, xr, BlockPaint::Allocated, out);
                    // Rounding waste stays visible even when it is a sliver.
                    emit(xr.min(x1 - 1.0), x1, BlockPaint::RoundingWaste, out);
                } else {
                    emit(x0, x1, paint, out);
                }
                continue;
            }
            sliver = match sliver {
                Some((s0, s1, p)) if x0 < s0 + MIN_BLOCK_WIDTH => {
                    let winner = if paint.priority() > p.priority() {
                        paint
                    } else {
                        p
                    };
                    Some((s0, s1.max(x1), winner))
                }
                Some((s0, s1, p)) => {
                    emit(s0, s1, p, out);
                    Some((x0, x0 + MIN_BLOCK_WIDTH, paint))
                }
                None => Some((x0, x0 + MIN_BLOCK_WIDTH, paint)),
            };
        }
        if let Some((s0, s1, p)) = sliver {
            emit(s0, s1.min(area.right()), p, out);
        }
    }
}

/// The blocks' rectangles as one mesh of plain quads, two triangles each. A filled rectangle
/// drawn on its own is feathered at its edges into ten triangles; with software WebGL the
/// triangles of thousands of blocks cost more than the rest of the frame. Unfeathered, an edge
/// inside a pixel is drawn sharp instead of blended: the picture differs by at most a pixel's
/// shade at the blocks' edges.
pub fn bars_mesh(rects: &[PaintedRect]) -> egui::Mesh {
    let mut mesh = egui::Mesh::default();
    mesh.reserve_triangles(rects.len() * 2);
    mesh.reserve_vertices(rects.len() * 4);
    for painted in rects {
        mesh.add_colored_rect(painted.rect, paint_color(painted.paint));
    }
    mesh
}

/// The segment and block under screen position `pos`.
pub fn hit_test(
    layout: &BlockMapLayout,
    state: &AllocatorState,
    view: &MapView,
    area: Rect,
    pos: Pos2,
) -> Option<(usize, usize)> {
    if !area.contains(pos) || pos.x < area.left() + LABEL_WIDTH {
        return None;
    }
    let row = ((pos.y - area.top() + view.scroll_y) / ROW_HEIGHT).floor();
    if row < 0.0 {
        return None;
    }
    let MapRow::Segment { index } = layout.rows.get(row as usize)? else {
        return None;
    };
    let segment = &state.segments[*index];
    let origin = row_origin(view, area, row as usize);
    let scale = view.points_per_byte(layout, area.width() - LABEL_WIDTH);
    let offset = f64::from(pos.x - origin.x) / scale;
    if offset < 0.0 {
        return None;
    }
    // Within a sliver, snap to the nearest block start so that tiny blocks can be hovered.
    let slack = f64::from(MIN_BLOCK_WIDTH) / scale;
    let address = segment.address.saturating_add(offset as u64);
    if address >= segment.end_address().saturating_add(slack as u64) {
        return None;
    }
    let address = address.min(segment.end_address().saturating_sub(1));
    let block = segment
        .blocks
        .partition_point(|b| b.address <= address)
        .checked_sub(1)?;
    Some((*index, block))
}

/// Short label of a segment row.
pub fn segment_label(state: &AllocatorState, index: usize) -> String {
    let s = &state.segments[index];
    let tag = if s.expandable { " exp" } else { "" };
    format!("{:#x} {}{tag}", s.address, format_bytes(s.size_bytes))
}

/// The font sizes a segment label too long for its column is shrunk to, largest first.
const SHRUNK_LABEL_SIZES: [f32; 4] = [10.0, 9.0, 8.0, 7.0];

/// The font size, in points, at which a label `width` points wide at `size` fits `room`: the
/// largest of a few fixed sizes that fits (the smallest where none does), since text width
/// scales with the size. Fixed steps rather than the exact fraction: every distinct size is a
/// font of its own whose glyphs are rasterised anew, and a frame of a big snapshot's map with a
/// size per label length spent tens of milliseconds on that in a browser without a GPU.
pub fn shrunk_label_size(size: f32, width: f32, room: f32) -> f32 {
    let fitting = size * room / width;
    SHRUNK_LABEL_SIZES
        .into_iter()
        .find(|&step| step <= fitting)
        .unwrap_or(SHRUNK_LABEL_SIZES[SHRUNK_LABEL_SIZES.len() - 1])
}

/// Size of a legend swatch.
pub const SWATCH: Vec2 = vec2(12.0, 12.0);

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_core::analysis::timetravel::{BlockOrigin, StateBlock, StateSegment};
    use vramscope_core::model::allocator::PoolKind;

    const MIB: u64 = 1 << 20;

    #[test]
    fn long_segment_labels_shrink_to_a_few_fixed_sizes() {
        // 15% too wide at 11 pt: 9.6 pt would fit, so 9.
        assert_eq!(shrunk_label_size(11.0, 115.0, 100.0), 9.0);
        // Just too wide: 10.
        assert_eq!(shrunk_label_size(11.0, 101.0, 100.0), 10.0);
        // Far too wide: the smallest size, however long.
        assert_eq!(shrunk_label_size(11.0, 400.0, 100.0), 7.0);
        // Every label length lands on one of the fixed sizes, and what fits stays within room.
        for width in (101..400).map(|w| w as f32) {
            let size = shrunk_label_size(11.0, width, 100.0);
            assert!(SHRUNK_LABEL_SIZES.contains(&size), "{size}");
            assert!(
                size == 7.0 || width * size / 11.0 <= 100.0,
                "{width} at {size}"
            );
        }
    }

    fn state() -> AllocatorState {
        let block = |address, size_bytes, requested_bytes, status| StateBlock {
            address,
            size_bytes,
            requested_bytes,
            status,
            origin: BlockOrigin::Unknown,
        };
        let mut many = Vec::new();
        for i in 0..1000u64 {
            let status = if i % 2 == 0 {
                BlockStatus::Allocated
            } else {
                BlockStatus::Free
            };
            many.push(block(0x2000_0000 + i * 512, 512, 512 * (1 - i % 2), status));
        }
        let segment = StateSegment::for_test;
        let mut state = AllocatorState::default();
        state.segments = vec![
            segment(
                0x1000_0000,
                0,
                PoolKind::Large,
                vec![
                    block(0x1000_0000, 60 * MIB, 50 * MIB, BlockStatus::Allocated),
                    block(0x1000_0000 + 60 * MIB, 40 * MIB, 0, BlockStatus::Free),
                ],
            ),
            segment(0x2000_0000, 0, PoolKind::Small, many),
            segment(
                0x3000_0000,
                5,
                PoolKind::Large,
                vec![block(
                    0x3000_0000,
                    20 * MIB,
                    20 * MIB,
                    BlockStatus::PendingFree,
                )],
            ),
        ];
        state
    }

    #[test]
    fn layout_groups_by_pool_kind_and_stream() {
        let layout = BlockMapLayout::new(&state());
        let headers: Vec<&str> = layout
            .rows
            .iter()
            .filter_map(|r| match r {
                MapRow::Header { text, .. } => Some(text.as_str()),
                MapRow::Segment { .. } => None,
            })
            .collect();
        assert_eq!(
            headers,
            [
                "default pool",
                "small blocks",
                "stream 0x0",
                "large blocks",
                "stream 0x0",
                "stream 0x5"
            ]
        );
        assert_eq!(
            layout.rows[layout.segment_rows[1]],
            MapRow::Segment { index: 1 }
        );
        assert_eq!(layout.largest_segment_bytes, 100 * MIB);
    }

    #[test]
    fn blocks_are_drawn_to_scale_with_rounding_waste() {
        let state = state();
        let layout = BlockMapLayout::new(&state);
        let area = Rect::from_min_size(Pos2::ZERO, vec2(LABEL_WIDTH + 1000.0, 400.0));
        let mut rects = Vec::new();
        visible_rects(&layout, &state, &MapView::default(), area, &mut rects);
        // Segment 0: 50 MiB requested, 10 MiB rounding waste, 40 MiB free on a 1000-pt bar
        // (each block ends with a one-point gap).
        let row_top = layout.segment_rows[0] as f32 * ROW_HEIGHT + 2.0;
        let in_row: Vec<&PaintedRect> = rects.iter().filter(|r| r.rect.top() == row_top).collect();
        let widths: Vec<(BlockPaint, i32)> = in_row
            .iter()
            .map(|r| (r.paint, r.rect.width().round() as i32))
            .collect();
        assert_eq!(
            widths,
            [
                (BlockPaint::Allocated, 500),
                (BlockPaint::RoundingWaste, 99),
                (BlockPaint::Free, 399)
            ]
        );
    }

    #[test]
    fn tiny_blocks_merge_into_visible_slivers() {
        let state = state();
        let layout = BlockMapLayout::new(&state);
        let area = Rect::from_min_size(Pos2::ZERO, vec2(LABEL_WIDTH + 1000.0, 400.0));
        let mut rects = Vec::new();
        visible_rects(&layout, &state, &MapView::default(), area, &mut rects);
        let row_top = layout.segment_rows[1] as f32 * ROW_HEIGHT + 2.0;
        let slivers: Vec<&PaintedRect> = rects.iter().filter(|r| r.rect.top() == row_top).collect();
        // 1000 blocks of 512 B (0.5 MiB) are 5 points wide: a few slivers, never 1000 rects,
        // each at least the minimum width, and the allocated ones win.
        assert!(
            !slivers.is_empty() && slivers.len() <= 3,
            "{}",
            slivers.len()
        );
        assert!(
            slivers
                .iter()
                .all(|r| r.rect.width() >= MIN_BLOCK_WIDTH - 0.01)
        );
        assert!(slivers.iter().all(|r| r.paint == BlockPaint::Allocated));
        // Zoomed in far enough, every block gets its own rectangle.
        let mut view = MapView {
            zoom: 400.0,
            ..MapView::default()
        };
        view.clamp(&layout, area);
        visible_rects(&layout, &state, &view, area, &mut rects);
        let row: Vec<&PaintedRect> = rects.iter().filter(|r| r.rect.top() == row_top).collect();
        assert!(row.len() > 100, "{}", row.len());
    }

    #[test]
    fn hit_test_finds_the_block_under_the_pointer() {
        let state = state();
        let layout = BlockMapLayout::new(&state);
        let area = Rect::from_min_size(pos2(10.0, 20.0), vec2(LABEL_WIDTH + 1000.0, 400.0));
        let view = MapView::default();
        let rect = block_rect(&layout, &state, &view, area, 0, 1).unwrap();
        assert_eq!(
            hit_test(&layout, &state, &view, area, rect.center()),
            Some((0, 1))
        );
        let rect = block_rect(&layout, &state, &view, area, 2, 0).unwrap();
        assert_eq!(
            hit_test(&layout, &state, &view, area, rect.center()),
            Some((2, 0))
        );
        assert_eq!(
            hit_test(&layout, &state, &view, area, pos2(15.0, 25.0)),
            None
        );
    }

    #[test]
    fn zoom_keeps_the_anchor_in_place_and_reveal_scrolls_to_a_row() {
        let state = state();
        let layout = BlockMapLayout::new(&state);
        let area = Rect::from_min_size(Pos2::ZERO, vec2(LABEL_WIDTH + 1000.0, 60.0));
        let mut view = MapView::default();
        let anchor = LABEL_WIDTH + 600.0;
        view.zoom_around(4.0, anchor, area);
        // The byte that was under x = 600 is still there: 600 * 4 - 600 = 1800 points of pan.
        assert!((view.pan_x - 1800.0).abs() < 0.01, "{}", view.pan_x);
        view.reveal(&layout, area, layout.segment_rows[2], 0);
        let rows = visible_rows(&layout, &view, area);
        assert!(rows.contains(&layout.segment_rows[2]), "{rows:?}");
    }
}
