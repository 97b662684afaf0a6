//! Exact per-device, per-pool totals of an allocator snapshot, the numbers
//! `torch.cuda.memory_stats()` reports as `current` (the allocator's `DeviceStats` in PyTorch's
//! `c10/cuda/CUDACachingAllocator.h`; `docs/sources.md` § "PyTorch allocator snapshots").
//!
//! Users compare what a tool shows with what PyTorch printed; if the two disagree by a byte the
//! tool is not trusted. So every total here is defined by the allocator's own bookkeeping rules
//! and tested against `memory_stats()` captured at the same moment as real snapshots.

use serde::Serialize;

use crate::model::allocator::{AllocatorSnapshot, BlockState, PoolKind, Segment};

/// Totals of one pool (small, large, or both) on one device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PoolTotals {
    /// `allocated_bytes`: sizes of `active_allocated` blocks.
    pub allocated_bytes: u64,
    /// `allocation`: number of `active_allocated` blocks.
    pub allocation_count: u64,
    /// `active_bytes`: allocated blocks plus blocks whose free waits on another stream.
    pub active_bytes: u64,
    /// `active`: number of those blocks.
    pub active_count: u64,
    /// `requested_bytes`: what callers asked for, before rounding, over active blocks.
    pub requested_bytes: u64,
    /// `reserved_bytes`: memory held from CUDA (sum of segment sizes).
    pub reserved_bytes: u64,
    /// `segment`: number of cudaMalloc'ed segments. Like PyTorch, expandable segments are not
    /// counted here (mapping pages changes reserved bytes, not the segment count).
    pub segment_count: u64,
    /// Contiguous mapped ranges of expandable segments (each is one snapshot segment).
    pub expandable_range_count: u64,
    /// `inactive_split_bytes`: free blocks inside split, non-expandable segments — cached memory
    /// that `empty_cache()` cannot return ("non-releasable").
    pub inactive_split_bytes: u64,
    /// `inactive_split`: number of those blocks.
    pub inactive_split_count: u64,
    /// `oversize_allocations`: allocated blocks of at least `max_split_size` (0 when unlimited).
    pub oversize_allocation_count: u64,
    /// `oversize_segments`: segments of at least `max_split_size` (0 when unlimited).
    pub oversize_segment_count: u64,
}

impl PoolTotals {
    /// Value of a `memory_stats()` stat name without the pool and `.current` parts
    /// (`"allocated_bytes"`, `"allocation"`, `"segment"`, …); `None` for stats a snapshot cannot
    /// tell (retries, OOM counts, peaks).
    pub fn stat(&self, name: &str) -> Option<u64> {
        Some(match name {
            "allocated_bytes" => self.allocated_bytes,
            "allocation" => self.allocation_count,
            "active_bytes" => self.active_bytes,
            "active" => self.active_count,
            "requested_bytes" => self.requested_bytes,
            "reserved_bytes" => self.reserved_bytes,
            "segment" => self.segment_count,
            "inactive_split_bytes" => self.inactive_split_bytes,
            "inactive_split" => self.inactive_split_count,
            _ => return None,
        })
    }

    fn add(&mut self, other: &PoolTotals) {
        self.allocated_bytes += other.allocated_bytes;
        self.allocation_count += other.allocation_count;
        self.active_bytes += other.active_bytes;
        self.active_count += other.active_count;
        self.requested_bytes += other.requested_bytes;
        self.reserved_bytes += other.reserved_bytes;
        self.segment_count += other.segment_count;
        self.expandable_range_count += other.expandable_range_count;
        self.inactive_split_bytes += other.inactive_split_bytes;
        self.inactive_split_count += other.inactive_split_count;
        self.oversize_allocation_count += other.oversize_allocation_count;
        self.oversize_segment_count += other.oversize_segment_count;
    }
}

/// Totals of one device: each pool and both together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceTotals {
    pub device: u32,
    pub small_pool: PoolTotals,
    pub large_pool: PoolTotals,
    pub all: PoolTotals,
}

impl DeviceTotals {
    /// Value of a flattened `memory_stats()` key such as `"reserved_bytes.large_pool.current"`
    /// or `"oversize_segments.current"`; `None` for keys a snapshot cannot tell.
    pub fn memory_stat(&self, key: &str) -> Option<u64> {
        match key {
            "oversize_allocations.current" => return Some(self.all.oversize_allocation_count),
            "oversize_segments.current" => return Some(self.all.oversize_segment_count),
            _ => {}
        }
        let mut parts = key.split('.');
        let (stat, pool, which) = (parts.next()?, parts.next()?, parts.next()?);
        if which != "current" || parts.next().is_some() {
            return None;
        }
        let pool = match pool {
            "all" => &self.all,
            "small_pool" => &self.small_pool,
            "large_pool" => &self.large_pool,
            _ => return None,
        };
        pool.stat(stat)
    }
}

/// Totals per device, in device order.
pub fn device_totals(snapshot: &AllocatorSnapshot) -> Vec<DeviceTotals> {
    let max_split_bytes = snapshot
        .settings
        .as_ref()
        .and_then(|s| s.max_split_size_bytes);
    snapshot
        .devices
        .iter()
        .map(|device| {
            let mut totals = DeviceTotals {
                device: device.device,
                ..Default::default()
            };
            for segment in snapshot.device_segments(device) {
                let pool = segment_totals(snapshot, segment, max_split_bytes);
                match segment.pool {
                    PoolKind::Small => totals.small_pool.add(&pool),
                    PoolKind::Large => totals.large_pool.add(&pool),
                }
                totals.all.add(&pool);
            }
            totals
        })
        .collect()
}

/// Totals of a single segment, in the same terms as a pool.
pub fn segment_totals(
    snapshot: &AllocatorSnapshot,
    segment: &Segment,
    max_split_bytes: Option<u64>,
) -> PoolTotals {
    let blocks = snapshot.segment_blocks(segment);
    let mut totals = PoolTotals {
        reserved_bytes: segment.total_bytes,
        segment_count: u64::from(!segment.is_expandable),
        expandable_range_count: u64::from(segment.is_expandable),
        ..Default::default()
    };
    let is_split = blocks.len() > 1;
    let mut requested_from_blocks = 0u64;
    for block in blocks {
        match block.state {
            BlockState::ActiveAllocated => {
                totals.allocated_bytes += block.size_bytes;
                totals.allocation_count += 1;
                if max_split_bytes.is_some_and(|max| block.size_bytes >= max) {
                    totals.oversize_allocation_count += 1;
                }
            }
            BlockState::Inactive if is_split && !segment.is_expandable => {
                totals.inactive_split_bytes += block.size_bytes;
                totals.inactive_split_count += 1;
            }
            _ => {}
        }
        if block.state.is_active() {
            totals.active_bytes += block.size_bytes;
            totals.active_count += 1;
            requested_from_blocks += block.requested_bytes.unwrap_or(block.size_bytes);
        }
    }
    totals.requested_bytes = segment.requested_bytes.unwrap_or(requested_from_blocks);
    if max_split_bytes.is_some_and(|max| segment.total_bytes >= max) {
        totals.oversize_segment_count = 1;
    }
    totals
}
