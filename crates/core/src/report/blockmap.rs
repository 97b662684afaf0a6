//! The allocator block map for reports: a PyTorch snapshot's final allocator state drawn pixel by
//! pixel with the `image` crate and encoded as PNG, like [`super::chart`] does for the timeline.
//!
//! Segments are laid out in address order, grouped by pool (private pools, then the default large
//! and small pools), each group a band of rows that wraps like text. Bytes map to pixels at one
//! scale for the whole image; a segment is never narrower than [`MIN_SEGMENT_PX`] so that small
//! segments stay visible, and a dark pixel separates segments. Blocks are coloured by what their
//! bytes do: allocated, rounding waste (the allocated block beyond the requested size), pending
//! free, cached free. Labels (group names, legend) are written by the report around the image.

use std::io::Cursor;

use image::{ImageFormat, Rgb, RgbImage};

use super::palette::{BlockPaint, Rgb as Rgb3};
use crate::analysis::timetravel::{AllocatorState, BlockStatus, StateSegment};
use crate::model::allocator::{PoolId, PoolKind};

/// Colour of bytes handed out to tensors.
pub const ALLOCATED: Rgb3 = BlockPaint::Allocated.rgb();
/// Colour of the rounding waste inside allocated blocks.
pub const ROUNDING_WASTE: Rgb3 = BlockPaint::RoundingWaste.rgb();
/// Colour of blocks freed but waiting for other streams.
pub const PENDING_FREE: Rgb3 = BlockPaint::PendingFree.rgb();
/// Colour of cached free blocks: reserved by the allocator, unused.
pub const CACHED_FREE: Rgb3 = BlockPaint::Free.rgb();
/// Legend of the block colours, in drawing priority order, for the report.
pub const LEGEND: [(&str, Rgb3); 4] = [
    (BlockPaint::Allocated.label(), ALLOCATED),
    (BlockPaint::RoundingWaste.label(), ROUNDING_WASTE),
    (BlockPaint::PendingFree.label(), PENDING_FREE),
    (BlockPaint::Free.label(), CACHED_FREE),
];
const BACKGROUND: Rgb<u8> = Rgb([255, 255, 255]);
const SEPARATOR: Rgb<u8> = Rgb([40, 40, 40]);
const GROUP_RULE: Rgb<u8> = Rgb([200, 200, 200]);

/// Narrowest a segment is drawn, in pixels.
pub const MIN_SEGMENT_PX: u64 = 3;
/// Height of one row of a group's band, and the gaps between rows and between groups.
const ROW_PX: u32 = 16;
const ROW_GAP_PX: u32 = 2;
const GROUP_GAP_PX: u32 = 9;
/// Rows the whole reserved memory would fill at the chosen scale (before minimum widths).
const TARGET_ROWS: u64 = 8;
/// Rows drawn at most; segments past them are counted in [`BlockMapImage::segments_drawn`].
const MAX_ROWS: u64 = 120;

/// The segments of one pool, in address order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolGroup {
    /// E.g. "large pool" or "small pool, private pool (1, 2)".
    pub label: String,
    pub segment_count: usize,
    pub reserved_bytes: u64,
    /// First row of the group's band in the image, counting from 0 at the top.
    pub first_row: u64,
    /// Rows the band takes.
    pub rows: u64,
}

/// A drawn block map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockMapImage {
    pub png: Vec<u8>,
    pub width: u32,
    pub height: u32,
    /// Pool groups in drawing order (top to bottom).
    pub groups: Vec<PoolGroup>,
    /// Bytes one pixel stands for (before minimum widths).
    pub bytes_per_px: u64,
    pub segments_drawn: usize,
    pub segments_total: usize,
}

/// Pool group order: private pools first (they are rarer and explain themselves), then the
/// default large pool, then the default small pool.
fn group_key(segment: &StateSegment) -> (bool, PoolId, bool) {
    (
        segment.pool_id.is_default(),
        segment.pool_id,
        segment.pool == PoolKind::Small,
    )
}

fn group_label(pool: PoolKind, pool_id: PoolId) -> String {
    if pool_id.is_default() {
        format!("{} pool", pool.as_str())
    } else {
        format!(
            "{} pool, private pool ({}, {})",
            pool.as_str(),
            pool_id.0,
            pool_id.1
        )
    }
}

/// Width in pixels of a segment of `size_bytes` at `bytes_per_px`.
fn segment_px(size_bytes: u64, bytes_per_px: u64) -> u64 {
    size_bytes.div_ceil(bytes_per_px.max(1)).max(MIN_SEGMENT_PX)
}

/// The colour of the byte at `offset` into `segment`.
fn color_at(segment: &StateSegment, offset: u64) -> [u8; 3] {
    let address = segment.address.saturating_add(offset);
    let index = segment
        .blocks
        .partition_point(|b| b.address <= address)
        .saturating_sub(1);
    let Some(block) = segment.blocks.get(index) else {
        return CACHED_FREE;
    };
    match block.status {
        BlockStatus::Allocated if address.saturating_sub(block.address) < block.requested_bytes => {
            ALLOCATED
        }
        BlockStatus::Allocated => ROUNDING_WASTE,
        BlockStatus::PendingFree => PENDING_FREE,
        BlockStatus::Free => CACHED_FREE,
    }
}

/// Draws `state` `width` pixels wide. Returns `None` when the state has no segments.
pub fn render_png(
    state: &AllocatorState,
    width: u32,
) -> Option<Result<BlockMapImage, image::ImageError>> {
    if state.segments.is_empty() {
        return None;
    }
    let width = width.max(2 * MIN_SEGMENT_PX as u32 + 2);
    let row_px = u64::from(width);
    let reserved: u64 = state.segments.iter().map(|s| s.size_bytes).sum();
    let bytes_per_px = reserved.div_ceil(row_px * TARGET_ROWS).max(1);

    // Group segments by pool, each group in address order (the state's order).
    let mut order: Vec<&StateSegment> = state.segments.iter().collect();
    order.sort_by_key(|s| (group_key(s), s.address));

    // Lay out: every segment gets a pixel span in its group's strip, plus one separator pixel.
    struct Placed<'a> {
        segment: &'a StateSegment,
        strip_start_px: u64,
        width_px: u64,
    }
    let mut groups: Vec<PoolGroup> = Vec::new();
    let mut placed: Vec<(usize, Vec<Placed<'_>>)> = Vec::new();
    let mut next_row = 0u64;
    let mut segments_drawn = 0usize;
    let mut start = 0;
    while start < order.len() {
        let key = group_key(order[start]);
        let end = start + order[start..].partition_point(|s| group_key(s) == key);
        let members = &order[start..end];
        start = end;
        if next_row >= MAX_ROWS {
            continue;
        }
        let mut strip_px = 0u64;
        let mut spans = Vec::new();
        for segment in members {
            let width_px = segment_px(segment.size_bytes, bytes_per_px);
            let rows_needed = (strip_px + width_px).div_ceil(row_px);
            if next_row + rows_needed > MAX_ROWS {
                break;
            }
            spans.push(Placed {
                segment,
                strip_start_px: strip_px,
                width_px,
            });
            strip_px += width_px + 1;
        }
        segments_drawn += spans.len();
        let rows = strip_px.div_ceil(row_px).max(1);
        groups.push(PoolGroup {
            label: group_label(members[0].pool, key.1),
            segment_count: members.len(),
            reserved_bytes: members.iter().map(|s| s.size_bytes).sum(),
            first_row: next_row,
            rows,
        });
        placed.push((groups.len() - 1, spans));
        next_row += rows;
    }

    let group_top = |group: &PoolGroup, index: usize| -> u64 {
        group.first_row * u64::from(ROW_PX + ROW_GAP_PX) + index as u64 * u64::from(GROUP_GAP_PX)
    };
    let height = groups
        .iter()
        .enumerate()
        .map(|(i, g)| group_top(g, i) + g.rows * u64::from(ROW_PX + ROW_GAP_PX))
        .max()
        .unwrap_or(1);
    let height = u32::try_from(height).unwrap_or(u32::MAX);
    let mut img = RgbImage::from_pixel(width, height, BACKGROUND);
    for (group_index, spans) in &placed {
        let group = &groups[*group_index];
        let top = group_top(group, *group_index);
        if *group_index > 0 {
            let rule_y = top.saturating_sub(u64::from(GROUP_GAP_PX) / 2 + 1);
            for x in 0..width {
                put(&mut img, u64::from(x), rule_y, GROUP_RULE);
            }
        }
        let mut paint = |strip_px: u64, color: Rgb<u8>| {
            let row = strip_px / row_px;
            let x = strip_px % row_px;
            let y0 = top + row * u64::from(ROW_PX + ROW_GAP_PX);
            for y in y0..y0 + u64::from(ROW_PX) {
                put(&mut img, x, y, color);
            }
        };
        for span in spans {
            for px in 0..span.width_px {
                // The byte at the middle of the pixel decides its colour.
                let offset = ((2 * px + 1) as u128 * u128::from(span.segment.size_bytes)
                    / (2 * span.width_px) as u128) as u64;
                paint(
                    span.strip_start_px + px,
                    Rgb(color_at(span.segment, offset)),
                );
            }
            paint(span.strip_start_px + span.width_px, SEPARATOR);
        }
    }
    let mut png = Vec::new();
    Some(
        img.write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
            .map(|()| BlockMapImage {
                png,
                width,
                height,
                groups,
                bytes_per_px,
                segments_drawn,
                segments_total: state.segments.len(),
            }),
    )
}

/// Sets a pixel if it lies inside the image.
fn put(img: &mut RgbImage, x: u64, y: u64, color: Rgb<u8>) {
    if x < u64::from(img.width()) && y < u64::from(img.height()) {
        img.put_pixel(x as u32, y as u32, color);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::timetravel::StateBlock;
    use crate::model::MIB;

    fn block(
        address: u64,
        size_bytes: u64,
        requested_bytes: u64,
        status: BlockStatus,
    ) -> StateBlock {
        StateBlock::for_test(address, size_bytes, requested_bytes, status)
    }

    fn segment(address: u64, pool: PoolKind, blocks: Vec<StateBlock>) -> StateSegment {
        StateSegment::for_test(address, 0, pool, blocks)
    }

    #[test]
    fn blocks_are_coloured_by_what_their_bytes_do_and_pools_get_their_own_band() {
        let base = 0x7f00_0000_0000;
        let large = segment(
            base,
            PoolKind::Large,
            vec![
                // 4 MiB asked, 6 MiB handed out: 2 MiB of rounding waste.
                block(base, 6 * MIB, 4 * MIB, BlockStatus::Allocated),
                block(base + 6 * MIB, 4 * MIB, 0, BlockStatus::PendingFree),
                block(base + 10 * MIB, 10 * MIB, 0, BlockStatus::Free),
            ],
        );
        let small = segment(
            base + 64 * MIB,
            PoolKind::Small,
            vec![block(
                base + 64 * MIB,
                2 * MIB,
                2 * MIB,
                BlockStatus::Allocated,
            )],
        );
        let state = AllocatorState {
            segments: vec![small, large],
            ..Default::default()
        };
        let drawn = render_png(&state, 200)
            .expect("segments")
            .unwrap_or_else(|e| panic!("{e}"));
        let img = image::load_from_memory(&drawn.png)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_rgb8();
        assert_eq!((img.width(), img.height()), (drawn.width, drawn.height));
        let labels: Vec<&str> = drawn.groups.iter().map(|g| g.label.as_str()).collect();
        assert_eq!(labels, ["large pool", "small pool"]);
        assert_eq!((drawn.segments_drawn, drawn.segments_total), (2, 2));
        // 22 MiB over 200 px x 8 rows: every kind of byte shows, in proportion to its size.
        let count = |color: [u8; 3]| img.pixels().filter(|p| p.0 == color).count();
        let px_per_mib = (ROW_PX as usize) * MIB as usize / drawn.bytes_per_px as usize;
        let near =
            |pixels: usize, mib: usize| pixels.abs_diff(mib * px_per_mib) <= 2 * ROW_PX as usize;
        assert!(near(count(ALLOCATED), 4 + 2), "{}", count(ALLOCATED));
        assert!(near(count(ROUNDING_WASTE), 2), "{}", count(ROUNDING_WASTE));
        assert!(near(count(PENDING_FREE), 4), "{}", count(PENDING_FREE));
        assert!(near(count(CACHED_FREE), 10), "{}", count(CACHED_FREE));
        assert_eq!(img.get_pixel(0, ROW_PX / 2).0, ALLOCATED, "address order");
        // The small pool's band starts below the large pool's, allocated throughout.
        let small_top = drawn.height - ROW_PX - ROW_GAP_PX;
        assert_eq!(img.get_pixel(0, small_top + ROW_PX / 2).0, ALLOCATED);
    }

    #[test]
    fn an_empty_state_draws_nothing() {
        assert!(render_png(&AllocatorState::default(), 100).is_none());
    }
}
