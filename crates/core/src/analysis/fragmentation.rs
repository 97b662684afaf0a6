//! Fragmentation metrics of an allocator state, per segment, pool, stream and device.
//!
//! Reserved memory splits into what tensors use (allocated), what rounding wastes inside
//! allocated blocks (internal free), blocks waiting for other streams (pending free) and cached
//! free blocks (external free). External free memory is only useful if a request fits in one
//! block: free blocks inside partly used segments are *stranded* (PyTorch never merges across
//! segments and cannot return a split segment to CUDA), while entirely free segments are
//! *releasable* by `empty_cache()`. Users asked for exactly these numbers (PyTorch issues #29554
//! and #35901, github.com/pytorch/pytorch/issues).

use super::timetravel::{AllocatorState, BlockStatus, StateSegment};
use crate::model::allocator::{PoolId, PoolKind};
use crate::model::format_bytes;

/// Byte counts of one group of segments (a segment, a pool, a stream or a device).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FragmentationMetrics {
    pub segment_count: u64,
    /// Sum of segment sizes.
    pub reserved_bytes: u64,
    /// Sum of the (rounded) sizes of allocated blocks.
    pub allocated_bytes: u64,
    /// Sum of the sizes callers asked for, over allocated blocks.
    pub requested_bytes: u64,
    /// Internal free memory: `allocated_bytes - requested_bytes`, lost to rounding.
    pub rounding_waste_bytes: u64,
    /// Blocks freed by Python but waiting for other streams (`record_stream`).
    pub pending_free_bytes: u64,
    /// External free memory: cached free blocks.
    pub free_bytes: u64,
    /// The biggest single free block: the largest request that fits without a new segment.
    pub largest_free_bytes: u64,
    /// Free bytes in segments that also hold allocated or pending blocks.
    pub stranded_bytes: u64,
    /// Free bytes in entirely free segments (what `empty_cache()` returns to CUDA).
    pub releasable_bytes: u64,
    /// PyTorch's `inactive_split_bytes` ("non-releasable memory"): free blocks in split,
    /// non-expandable segments.
    pub inactive_split_bytes: u64,
    /// Number of those blocks (`inactive_split`).
    pub inactive_split_blocks: u64,
    pub allocated_blocks: u64,
    pub free_blocks: u64,
}

impl FragmentationMetrics {
    /// The metrics of one segment.
    pub fn of_segment(segment: &StateSegment) -> Self {
        let mut metrics = FragmentationMetrics {
            segment_count: 1,
            reserved_bytes: segment.size_bytes,
            ..Default::default()
        };
        let mut segment_free = 0;
        for block in &segment.blocks {
            match block.status {
                BlockStatus::Allocated => {
                    metrics.allocated_bytes += block.size_bytes;
                    let requested = block.requested_bytes.min(block.size_bytes);
                    metrics.requested_bytes += requested;
                    metrics.rounding_waste_bytes += block.size_bytes - requested;
                    metrics.allocated_blocks += 1;
                }
                BlockStatus::PendingFree => metrics.pending_free_bytes += block.size_bytes,
                BlockStatus::Free => {
                    segment_free += block.size_bytes;
                    metrics.free_blocks += 1;
                    metrics.largest_free_bytes = metrics.largest_free_bytes.max(block.size_bytes);
                    if segment.blocks.len() > 1 && !segment.expandable {
                        metrics.inactive_split_bytes += block.size_bytes;
                        metrics.inactive_split_blocks += 1;
                    }
                }
            }
        }
        metrics.free_bytes = segment_free;
        if segment_free == segment.size_bytes {
            metrics.releasable_bytes = segment_free;
        } else {
            metrics.stranded_bytes = segment_free;
        }
        metrics
    }

    /// Adds another group's metrics to this one.
    pub fn add(&mut self, other: &FragmentationMetrics) {
        self.segment_count += other.segment_count;
        self.reserved_bytes += other.reserved_bytes;
        self.allocated_bytes += other.allocated_bytes;
        self.requested_bytes += other.requested_bytes;
        self.rounding_waste_bytes += other.rounding_waste_bytes;
        self.pending_free_bytes += other.pending_free_bytes;
        self.free_bytes += other.free_bytes;
        self.largest_free_bytes = self.largest_free_bytes.max(other.largest_free_bytes);
        self.stranded_bytes += other.stranded_bytes;
        self.releasable_bytes += other.releasable_bytes;
        self.inactive_split_bytes += other.inactive_split_bytes;
        self.inactive_split_blocks += other.inactive_split_blocks;
        self.allocated_blocks += other.allocated_blocks;
        self.free_blocks += other.free_blocks;
    }

    /// External fragmentation, 0 to 1: `1 - largest free block / all free bytes`. 0 means all
    /// cached free memory is one block; near 1 means it is scattered in many small pieces.
    pub fn fragmentation_ratio(&self) -> f64 {
        if self.free_bytes == 0 {
            0.0
        } else {
            1.0 - self.largest_free_bytes as f64 / self.free_bytes as f64
        }
    }

    /// The fragmentation ratio for people, naming the free bytes it describes: "0.83 of 12.0 GiB
    /// free", or "— (little free memory: 569 KiB)" when free memory is under 5% of reserved
    /// memory, where the ratio means nothing.
    pub fn fragmentation_ratio_text(&self) -> String {
        if self.free_bytes == 0
            || (self.free_bytes as f64) < NEGLIGIBLE_UNUSED_FRACTION * self.reserved_bytes as f64
        {
            format!("— (little free memory: {})", format_bytes(self.free_bytes))
        } else {
            format!(
                "{:.2} of {} free",
                self.fragmentation_ratio(),
                format_bytes(self.free_bytes)
            )
        }
    }

    /// Reserved bytes not used by tensors: rounding, pending frees and cached free blocks.
    pub fn unused_bytes(&self) -> u64 {
        self.reserved_bytes - self.requested_bytes.min(self.reserved_bytes)
    }
}

/// Which pool a group of segments belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    pub pool_id: PoolId,
    pub pool: PoolKind,
}

/// Which pool and stream a group of segments belongs to (the allocator only reuses free blocks
/// within one pool and one stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamKey {
    pub pool_id: PoolId,
    pub pool: PoolKind,
    pub stream: u64,
}

/// Fragmentation of one device's allocator state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FragmentationReport {
    pub device_index: u32,
    pub device: FragmentationMetrics,
    /// Per pool, ordered by key.
    pub pools: Vec<(PoolKey, FragmentationMetrics)>,
    /// Per pool and stream, ordered by key.
    pub streams: Vec<(StreamKey, FragmentationMetrics)>,
    /// Per segment, in the state's segment order.
    pub segments: Vec<FragmentationMetrics>,
}

/// Computes the metrics of every segment, pool, stream and the device.
pub fn analyze(state: &AllocatorState) -> FragmentationReport {
    let segments: Vec<FragmentationMetrics> = state
        .segments
        .iter()
        .map(FragmentationMetrics::of_segment)
        .collect();
    let mut device = FragmentationMetrics::default();
    let mut pools: Vec<(PoolKey, FragmentationMetrics)> = Vec::new();
    let mut streams: Vec<(StreamKey, FragmentationMetrics)> = Vec::new();
    for (segment, metrics) in state.segments.iter().zip(&segments) {
        device.add(metrics);
        let pool_key = PoolKey {
            pool_id: segment.pool_id,
            pool: segment.pool,
        };
        add_to_group(&mut pools, pool_key, metrics);
        let stream_key = StreamKey {
            pool_id: segment.pool_id,
            pool: segment.pool,
            stream: segment.stream,
        };
        add_to_group(&mut streams, stream_key, metrics);
    }
    pools.sort_by_key(|(key, _)| *key);
    streams.sort_by_key(|(key, _)| *key);
    FragmentationReport {
        device_index: state.device,
        device,
        pools,
        streams,
        segments,
    }
}

fn add_to_group<K: PartialEq + Copy>(
    groups: &mut Vec<(K, FragmentationMetrics)>,
    key: K,
    metrics: &FragmentationMetrics,
) {
    match groups.iter_mut().find(|(k, _)| *k == key) {
        Some((_, total)) => total.add(metrics),
        None => groups.push((key, metrics.clone())),
    }
}

/// Below this share of reserved memory, unused memory is not worth a warning (nor free memory a
/// fragmentation ratio).
pub const NEGLIGIBLE_UNUSED_FRACTION: f64 = 0.05;

#[cfg(test)]
pub(crate) mod tests {
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

    fn segment(address: u64, stream: u64, pool: PoolKind, blocks: Vec<StateBlock>) -> StateSegment {
        StateSegment::for_test(address, stream, pool, blocks)
    }

    /// Two large segments on stream 0 (one split: 16 MiB used of which 1 MiB rounding, 4 MiB
    /// stranded; one entirely free 20 MiB) and a small segment on stream 7 with a pending free.
    pub(crate) fn sample_state() -> AllocatorState {
        let base = 0x7f00_0000_0000;
        AllocatorState {
            device: 0,
            segments: vec![
                segment(
                    base,
                    0,
                    PoolKind::Large,
                    vec![
                        block(base, 16 * MIB, 15 * MIB, BlockStatus::Allocated),
                        block(base + 16 * MIB, 4 * MIB, 0, BlockStatus::Free),
                    ],
                ),
                segment(
                    base + 100 * MIB,
                    0,
                    PoolKind::Large,
                    vec![block(base + 100 * MIB, 20 * MIB, 0, BlockStatus::Free)],
                ),
                segment(
                    base + 200 * MIB,
                    7,
                    PoolKind::Small,
                    vec![
                        block(base + 200 * MIB, MIB, MIB, BlockStatus::PendingFree),
                        block(base + 201 * MIB, MIB, 0, BlockStatus::Free),
                    ],
                ),
            ],
            allocated_bytes: 16 * MIB,
            reserved_bytes: 42 * MIB,
            ..Default::default()
        }
    }

    #[test]
    fn device_totals_split_reserved_memory_by_use() {
        let report = analyze(&sample_state());
        let d = &report.device;
        assert_eq!(d.reserved_bytes, 42 * MIB);
        assert_eq!(d.allocated_bytes, 16 * MIB);
        assert_eq!(d.requested_bytes, 15 * MIB);
        assert_eq!(d.rounding_waste_bytes, MIB);
        assert_eq!(d.pending_free_bytes, MIB);
        assert_eq!(d.free_bytes, 25 * MIB);
        assert_eq!(d.largest_free_bytes, 20 * MIB);
        assert_eq!(d.stranded_bytes, 5 * MIB);
        assert_eq!(d.releasable_bytes, 20 * MIB);
        assert_eq!(d.inactive_split_bytes, 5 * MIB);
        assert_eq!(d.inactive_split_blocks, 2);
        assert!((d.fragmentation_ratio() - 0.2).abs() < 1e-9);
        assert_eq!(d.fragmentation_ratio_text(), "0.20 of 25.0 MiB free");
        // Scattered but negligible free memory gets no ratio.
        let little_free = FragmentationMetrics {
            reserved_bytes: 100 * MIB,
            free_bytes: 4 * MIB,
            largest_free_bytes: MIB,
            ..Default::default()
        };
        assert_eq!(
            little_free.fragmentation_ratio_text(),
            "— (little free memory: 4.00 MiB)"
        );
        // Every reserved byte is accounted for exactly once.
        assert_eq!(
            d.requested_bytes + d.rounding_waste_bytes + d.pending_free_bytes + d.free_bytes,
            d.reserved_bytes
        );
    }

    #[test]
    fn groups_by_pool_and_stream() {
        let report = analyze(&sample_state());
        assert_eq!(report.pools.len(), 2);
        assert_eq!(report.streams.len(), 2);
        let (key, large) = &report.streams[1];
        assert_eq!((key.pool, key.stream), (PoolKind::Large, 0));
        assert_eq!(large.reserved_bytes, 40 * MIB);
        assert_eq!(large.largest_free_bytes, 20 * MIB);
        let (key, small) = &report.streams[0];
        assert_eq!((key.pool, key.stream), (PoolKind::Small, 7));
        assert_eq!(small.free_bytes, MIB);
        assert_eq!(report.segments[0].stranded_bytes, 4 * MIB);
        assert_eq!(report.segments[1].releasable_bytes, 20 * MIB);
    }
}
