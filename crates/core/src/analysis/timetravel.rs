//! Time travel: the allocator's state at any event of a snapshot's trace.
//!
//! A snapshot holds the final state (segments and blocks) and a trace ring buffer of the events
//! that led there. As PyTorch's own viewer does, the state at event `i` is found by *undoing*
//! events backwards from the final state: the trace may have lost its oldest events, so the end
//! is the only state known for sure. To make scrubbing instant on millions of events, one
//! pass stores checkpoints (at least every [`MIN_CHECKPOINT_INTERVAL`] events, fewer
//! when states are big, within [`CHECKPOINT_BUDGET_BYTES`]); a query clones the nearest later
//! checkpoint and undoes at most one interval of events.
//!
//! The trace records only the *requested* size of a freed block, not the rounded block size it
//! had (the `record_trace` calls in PyTorch's `c10/cuda/CUDACachingAllocator.cpp`; see
//! `docs/sources.md` § "PyTorch allocator snapshots"), so undoing a free needs the block's real
//! size. It is found by a forward
//! replay with the allocator's split rules ([`AllocatorRules`]) from the reconstructed initial
//! state; when that replay reproduces the snapshot's final state exactly, the sizes are exact
//! and [`ReplayCheck::matches_final_state`] says so; that replay's states then are the
//! checkpoints (it is exact, and saves a third pass over the trace).

// foldhash instead of std's SipHash: the maps below are keyed by trace addresses and hit
// several times per event (millions); foldhash is several times faster and still seeded per
// process, so a crafted file cannot choose colliding addresses in advance.
use foldhash::HashMap;
use foldhash::HashMapExt;
use std::sync::Arc;

use super::allocator_rules::AllocatorRules;
use super::deadline::{Deadline, Step};
use crate::model::allocator::{
    AllocatorSnapshot, BlockState, DeviceTrace, PoolId, PoolKind, TraceAction,
};

/// Checkpoints are at least this many events apart.
pub const MIN_CHECKPOINT_INTERVAL: usize = 4096;
/// Checkpoints together may use about this much memory; bigger states get sparser checkpoints.
pub const CHECKPOINT_BUDGET_BYTES: usize = 128 << 20;

/// What a block of a reconstructed state is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockStatus {
    /// Handed out to a tensor.
    Allocated,
    /// Freed by Python but waiting for other streams (`record_stream`).
    PendingFree,
    /// Cached free memory.
    Free,
}

/// Where a block's history (and so its allocation stack) comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockOrigin {
    /// Allocated by trace event `index`.
    AllocEvent(u32),
    /// Allocated before the trace began; this is its index in the snapshot's blocks.
    SnapshotBlock(u32),
    /// Allocated before the trace began and freed by trace event `index` (only the free's stack
    /// is known).
    FreeEvent(u32),
    /// Free memory, or a block the trace cannot account for.
    Unknown,
}

/// One block of a reconstructed state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateBlock {
    pub address: u64,
    pub size_bytes: u64,
    /// Size the caller asked for; 0 for free blocks.
    pub requested_bytes: u64,
    pub status: BlockStatus,
    pub origin: BlockOrigin,
}

impl StateBlock {
    /// First address past the block.
    pub fn end_address(&self) -> u64 {
        self.address.saturating_add(self.size_bytes)
    }

    /// A block of unknown origin, for unit tests that build allocator states by hand.
    #[cfg(any(test, feature = "test-fixtures"))]
    pub fn for_test(
        address: u64,
        size_bytes: u64,
        requested_bytes: u64,
        status: BlockStatus,
    ) -> Self {
        StateBlock {
            address,
            size_bytes,
            requested_bytes,
            status,
            origin: BlockOrigin::Unknown,
        }
    }

    fn free(address: u64, size_bytes: u64) -> Self {
        StateBlock {
            address,
            size_bytes,
            requested_bytes: 0,
            status: BlockStatus::Free,
            origin: BlockOrigin::Unknown,
        }
    }
}

/// One segment (cudaMalloc'ed range, or contiguous mapped range of an expandable segment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateSegment {
    pub address: u64,
    pub size_bytes: u64,
    pub stream: u64,
    pub pool: PoolKind,
    pub pool_id: PoolId,
    pub expandable: bool,
    /// Contiguous blocks in address order; they exactly cover the segment.
    pub blocks: Vec<StateBlock>,
}

impl StateSegment {
    /// A non-expandable segment of the default pool made of `blocks`, for unit tests that build
    /// allocator states by hand.
    #[cfg(any(test, feature = "test-fixtures"))]
    pub fn for_test(address: u64, stream: u64, pool: PoolKind, blocks: Vec<StateBlock>) -> Self {
        StateSegment {
            address,
            size_bytes: blocks.iter().map(|b| b.size_bytes).sum(),
            stream,
            pool,
            pool_id: PoolId::default(),
            expandable: false,
            blocks,
        }
    }

    /// First address past the segment.
    pub fn end_address(&self) -> u64 {
        self.address.saturating_add(self.size_bytes)
    }

    /// Index of the block that contains `address`.
    fn block_containing(&self, address: u64) -> Option<usize> {
        let index = self
            .blocks
            .partition_point(|b| b.address <= address)
            .checked_sub(1)?;
        (address < self.blocks[index].end_address()).then_some(index)
    }

    /// Merges the free block at `index` with free neighbours; returns the merged block's index.
    fn merge_free_around(&mut self, mut index: usize) -> usize {
        if index + 1 < self.blocks.len() && self.blocks[index + 1].status == BlockStatus::Free {
            let next = self.blocks.remove(index + 1);
            self.blocks[index].size_bytes += next.size_bytes;
        }
        if index > 0 && self.blocks[index - 1].status == BlockStatus::Free {
            let current = self.blocks.remove(index);
            index -= 1;
            self.blocks[index].size_bytes += current.size_bytes;
        }
        index
    }

    fn is_entirely_free(&self) -> bool {
        self.blocks.iter().all(|b| b.status == BlockStatus::Free)
    }
}

/// The allocator state of one device at one point of its trace.
#[derive(Clone, Debug, Default)]
pub struct AllocatorState {
    pub device: u32,
    /// Segments in address order, stored inline (change them only through the state's own
    /// methods, which keep `segment_starts` in step): finding the segment of an address (every
    /// event) is a binary search over contiguous memory, which matters more than the cost of
    /// moving segments on insert/remove (a snapshot has tens to a few thousand segments).
    pub segments: Vec<StateSegment>,
    /// Sum of the sizes of allocated blocks (PyTorch's `allocated_bytes`).
    pub allocated_bytes: u64,
    /// Sum of segment sizes (PyTorch's `reserved_bytes`).
    pub reserved_bytes: u64,
    /// Start address of each segment, in the same order: the segment search of every event
    /// reads this dense array (8 bytes per segment, thousands of segments fit in L1) rather
    /// than the segments. Kept in step on every insert and removal; when its length differs
    /// from `segments` (a state built by hand, or `segments` changed directly), searches read
    /// the segments instead, and the next insert rebuilds it.
    pub(crate) segment_starts: Vec<u64>,
}

/// Equal when the allocator states are: the search index is derived data and not compared.
impl PartialEq for AllocatorState {
    fn eq(&self, other: &Self) -> bool {
        self.device == other.device
            && self.allocated_bytes == other.allocated_bytes
            && self.reserved_bytes == other.reserved_bytes
            && self.segments == other.segments
    }
}

impl Eq for AllocatorState {}

impl AllocatorState {
    /// The final state of `device` as the snapshot's segments describe it.
    ///
    /// `live_allocs` maps the address of each block still allocated at the end of the trace to
    /// the event that allocated it, so that its origin names that event.
    fn from_snapshot(
        snapshot: &AllocatorSnapshot,
        device: u32,
        live_allocs: &HashMap<u64, u32>,
    ) -> Self {
        let mut state = AllocatorState {
            device,
            ..Default::default()
        };
        let segments = snapshot
            .devices
            .iter()
            .filter(|d| d.device == device)
            .flat_map(|d| snapshot.device_segments(d));
        for segment in segments {
            let mut blocks: Vec<StateBlock> = Vec::with_capacity(segment.block_count as usize);
            for (offset, block) in snapshot.segment_blocks(segment).iter().enumerate() {
                let status = match block.state {
                    BlockState::Inactive => BlockStatus::Free,
                    BlockState::ActivePendingFree => BlockStatus::PendingFree,
                    // An unknown state is kept as in use: never claim memory is free when the
                    // file does not say so.
                    BlockState::ActiveAllocated | BlockState::Unknown(_) => BlockStatus::Allocated,
                };
                let state_block = if status == BlockStatus::Free {
                    StateBlock::free(block.address, block.size_bytes)
                } else {
                    let snapshot_index = segment.first_block + offset as u32;
                    StateBlock {
                        address: block.address,
                        size_bytes: block.size_bytes,
                        requested_bytes: block.requested_bytes.unwrap_or(block.size_bytes),
                        status,
                        origin: live_allocs
                            .get(&block.address)
                            .map_or(BlockOrigin::SnapshotBlock(snapshot_index), |&event| {
                                BlockOrigin::AllocEvent(event)
                            }),
                    }
                };
                // Keep the no-adjacent-free-blocks invariant even if a file breaks it.
                match blocks.last_mut() {
                    Some(last)
                        if last.status == BlockStatus::Free
                            && state_block.status == BlockStatus::Free =>
                    {
                        last.size_bytes += state_block.size_bytes;
                    }
                    _ => blocks.push(state_block),
                }
            }
            let size_bytes = blocks.iter().map(|b| b.size_bytes).sum();
            state.insert_segment(StateSegment {
                address: segment.address,
                size_bytes,
                stream: segment.stream,
                pool: segment.pool,
                pool_id: segment.pool_id,
                expandable: segment.is_expandable,
                blocks,
            });
        }
        state
    }

    /// A state made of `segments` (any order): sorted, indexed and totalled. Used by the
    /// what-if replay to show its own states with the same views.
    pub(crate) fn from_segments(device: u32, mut segments: Vec<StateSegment>) -> Self {
        segments.sort_by_key(|s| s.address);
        let mut state = AllocatorState {
            device,
            ..Default::default()
        };
        for segment in segments {
            state.insert_segment(segment);
        }
        state
    }

    /// Number of blocks over all segments.
    pub fn block_count(&self) -> usize {
        self.segments.iter().map(|s| s.blocks.len()).sum()
    }

    /// Bytes of memory this state occupies (for the checkpoint budget).
    fn heap_bytes(&self) -> usize {
        self.segments.len() * std::mem::size_of::<StateSegment>()
            + self.block_count() * std::mem::size_of::<StateBlock>()
    }

    /// Index of the segment that contains `address`.
    pub fn segment_containing(&self, address: u64) -> Option<usize> {
        let after = if self.segment_starts.len() == self.segments.len() {
            self.segment_starts
                .partition_point(|&start| start <= address)
        } else {
            self.segments.partition_point(|s| s.address <= address)
        };
        let index = after.checked_sub(1)?;
        (address < self.segments[index].end_address()).then_some(index)
    }

    /// Removes the segment at `index`, keeping [`AllocatorState::segment_starts`] in step.
    /// (Does not touch the byte totals.)
    fn take_segment(&mut self, index: usize) -> StateSegment {
        if self.segment_starts.len() == self.segments.len() {
            self.segment_starts.remove(index);
        }
        self.segments.remove(index)
    }

    /// The segment and block that contain `address`.
    pub fn block_containing(&self, address: u64) -> Option<(usize, usize)> {
        let segment = self.segment_containing(address)?;
        let block = self.segments[segment].block_containing(address)?;
        Some((segment, block))
    }

    fn insert_segment(&mut self, segment: StateSegment) {
        self.reserved_bytes += segment.size_bytes;
        self.allocated_bytes += segment
            .blocks
            .iter()
            .filter(|b| b.status == BlockStatus::Allocated)
            .map(|b| b.size_bytes)
            .sum::<u64>();
        let at = self
            .segments
            .partition_point(|s| s.address < segment.address);
        if self.segment_starts.len() == self.segments.len() {
            self.segment_starts.insert(at, segment.address);
            self.segments.insert(at, segment);
        } else {
            // Built by hand: index every segment once.
            self.segments.insert(at, segment);
            self.segment_starts = self.segments.iter().map(|s| s.address).collect();
        }
    }

    fn set_status(&mut self, segment: usize, block: usize, status: BlockStatus) {
        let target = &mut self.segments[segment].blocks[block];
        if target.status == BlockStatus::Allocated {
            self.allocated_bytes -= target.size_bytes;
        }
        if status == BlockStatus::Allocated {
            self.allocated_bytes += target.size_bytes;
        }
        target.status = status;
    }

    /// Turns the block at `address` into free memory and merges it with free neighbours.
    fn release_block(&mut self, address: u64) -> Result<(), Mismatch> {
        let (segment, block) = self.block_starting_at(address)?;
        if self.segments[segment].blocks[block].status == BlockStatus::Free {
            return Err(Mismatch::BlockAlreadyFree);
        }
        self.set_status(segment, block, BlockStatus::Free);
        let target = &mut self.segments[segment].blocks[block];
        target.requested_bytes = 0;
        target.origin = BlockOrigin::Unknown;
        self.segments[segment].merge_free_around(block);
        Ok(())
    }

    fn block_starting_at(&self, address: u64) -> Result<(usize, usize), Mismatch> {
        let (segment, block) = self
            .block_containing(address)
            .ok_or(Mismatch::NoBlockAtAddress)?;
        if self.segments[segment].blocks[block].address != address {
            return Err(Mismatch::NoBlockAtAddress);
        }
        Ok((segment, block))
    }

    /// Carves `[address, address + size_bytes)` out of the free block containing it, which
    /// the caller has already found: block `block` of segment `segment`.
    fn carve_block_in(
        &mut self,
        segment: usize,
        block: usize,
        address: u64,
        size_bytes: u64,
        new_block: StateBlock,
    ) -> Result<(), Mismatch> {
        let free = self.segments[segment].blocks[block].clone();
        if free.status != BlockStatus::Free {
            return Err(Mismatch::BlockNotFree);
        }
        let end = address.saturating_add(size_bytes);
        if end > free.end_address() || size_bytes == 0 {
            return Err(Mismatch::BlockTooSmall);
        }
        if new_block.status == BlockStatus::Allocated {
            self.allocated_bytes += size_bytes;
        }
        // The free block becomes [free before] new [free after], in place: no temporary list
        // (this runs for every alloc while replaying millions of events).
        let blocks = &mut self.segments[segment].blocks;
        let mut at = block;
        if address > free.address {
            blocks[at] = StateBlock::free(free.address, address - free.address);
            at += 1;
            blocks.insert(at, new_block);
        } else {
            blocks[at] = new_block;
        }
        if end < free.end_address() {
            blocks.insert(at + 1, StateBlock::free(end, free.end_address() - end));
        }
        Ok(())
    }

    /// Adds a free range `[address, address + size_bytes)` as a segment, joining contiguous
    /// expandable segments of the same stream (PyTorch reports one segment per mapped range).
    fn map_range(
        &mut self,
        address: u64,
        size_bytes: u64,
        stream: u64,
        pool: PoolKind,
        pool_id: PoolId,
    ) {
        let mut segment = StateSegment {
            address,
            size_bytes,
            stream,
            pool,
            pool_id,
            expandable: true,
            blocks: vec![StateBlock::free(address, size_bytes)],
        };
        let at = self.segments.partition_point(|s| s.address < address);
        let joins = |other: &StateSegment| other.expandable && other.stream == stream;
        let mut insert_at = at;
        if at > 0 && joins(&self.segments[at - 1]) && self.segments[at - 1].end_address() == address
        {
            let mut previous = self.take_segment(at - 1);
            self.reserved_bytes -= previous.size_bytes;
            self.allocated_bytes -= allocated_in(&previous);
            segment.pool = previous.pool;
            segment.pool_id = previous.pool_id;
            previous.size_bytes += segment.size_bytes;
            previous.blocks.append(&mut segment.blocks);
            segment = previous;
            insert_at = at - 1;
        }
        if insert_at < self.segments.len()
            && joins(&self.segments[insert_at])
            && self.segments[insert_at].address == segment.end_address()
        {
            let mut next = self.take_segment(insert_at);
            self.reserved_bytes -= next.size_bytes;
            self.allocated_bytes -= allocated_in(&next);
            segment.size_bytes += next.size_bytes;
            segment.blocks.append(&mut next.blocks);
        }
        let mut index = 0;
        while index + 1 < segment.blocks.len() {
            if segment.blocks[index].status == BlockStatus::Free
                && segment.blocks[index + 1].status == BlockStatus::Free
            {
                let next = segment.blocks.remove(index + 1);
                segment.blocks[index].size_bytes += next.size_bytes;
            } else {
                index += 1;
            }
        }
        self.insert_segment(segment);
    }

    /// Removes the free range `[address, address + size_bytes)` from the segment holding it,
    /// splitting the segment when the range is in its middle.
    fn unmap_range(&mut self, address: u64, size_bytes: u64) -> Result<(), Mismatch> {
        let (segment_index, block_index) = self
            .block_containing(address)
            .ok_or(Mismatch::NoBlockAtAddress)?;
        let end = address.saturating_add(size_bytes);
        let block = &self.segments[segment_index].blocks[block_index];
        if block.status != BlockStatus::Free {
            return Err(Mismatch::BlockNotFree);
        }
        if end > block.end_address() || size_bytes == 0 {
            return Err(Mismatch::BlockTooSmall);
        }
        let segment = self.take_segment(segment_index);
        self.reserved_bytes -= segment.size_bytes;
        self.allocated_bytes -= allocated_in(&segment);
        let mut before = Vec::new();
        let mut after = Vec::new();
        for block in segment.blocks {
            if block.end_address() <= address {
                before.push(block);
            } else if block.address >= end {
                after.push(block);
            } else {
                // The free block that holds the unmapped range: keep what is left on each side.
                if block.address < address {
                    before.push(StateBlock::free(block.address, address - block.address));
                }
                if block.end_address() > end {
                    after.push(StateBlock::free(end, block.end_address() - end));
                }
            }
        }
        for blocks in [before, after] {
            if let Some(first) = blocks.first() {
                let first_address = first.address;
                self.insert_segment(StateSegment {
                    address: first_address,
                    size_bytes: blocks.iter().map(|b| b.size_bytes).sum(),
                    stream: segment.stream,
                    pool: segment.pool,
                    pool_id: segment.pool_id,
                    expandable: segment.expandable,
                    blocks,
                });
            }
        }
        Ok(())
    }

    fn remove_free_segment(&mut self, address: u64) -> Result<(), Mismatch> {
        let index = self
            .segments
            .binary_search_by_key(&address, |s| s.address)
            .map_err(|_| Mismatch::NoSegmentAtAddress)?;
        if !self.segments[index].is_entirely_free() {
            return Err(Mismatch::SegmentInUse);
        }
        let removed = self.take_segment(index);
        self.reserved_bytes -= removed.size_bytes;
        Ok(())
    }
}

fn allocated_in(segment: &StateSegment) -> u64 {
    segment
        .blocks
        .iter()
        .filter(|b| b.status == BlockStatus::Allocated)
        .map(|b| b.size_bytes)
        .sum()
}

/// Why an event could not be applied to (or undone from) a state: the trace and the snapshot
/// disagree, usually because the ring buffer lost older events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mismatch {
    NoBlockAtAddress,
    NoSegmentAtAddress,
    BlockAlreadyFree,
    BlockNotFree,
    BlockNotPending,
    BlockTooSmall,
    SegmentInUse,
}

/// How far the reconstruction can be trusted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayCheck {
    /// Replaying the whole trace forwards from the reconstructed start, with the allocator's
    /// rules, gave exactly the snapshot's final state: every state in between is exact.
    pub matches_final_state: bool,
    /// Events that did not fit the state while undoing (skipped).
    pub undo_mismatches: u32,
    /// The first event that did not fit the state while replaying forwards. The replay stops
    /// there: from then on the final state can no longer be reproduced, so going on would only
    /// cost time (millions of events in a big trace).
    pub replay_stopped_at: Option<usize>,
    /// The first problem, in words, for the UI.
    pub first_problem: Option<String>,
}

/// One event, decoded from the trace's columns.
#[derive(Clone, Copy, Debug)]
struct TraceOp {
    action: TraceAction,
    address: u64,
    size_bytes: u64,
    stream: u64,
}

fn op_at(trace: &DeviceTrace, index: usize) -> TraceOp {
    TraceOp {
        action: trace.actions[index],
        address: trace.addresses.get(index).copied().unwrap_or(0),
        size_bytes: trace.sizes_bytes.get(index).copied().unwrap_or(0),
        stream: trace.streams.get(index).copied().unwrap_or(0),
    }
}

/// Marks "no paired event" in `paired_alloc`.
const NO_EVENT: u32 = u32::MAX;

/// The state of one device at any event of its trace.
#[derive(Clone, Debug)]
pub struct TimeTravel {
    device: u32,
    rules: AllocatorRules,
    /// The snapshot whose trace this walks (shared, not copied: traces reach millions of
    /// events).
    snapshot: Arc<AllocatorSnapshot>,
    /// Index of the device's trace in `snapshot.traces`; `None` walks `empty_trace`.
    trace_index: Option<usize>,
    empty_trace: DeviceTrace,
    /// For each free event, the alloc event of the same block (or [`NO_EVENT`]).
    paired_alloc: Vec<u32>,
    /// For each `free_completed` event, the size of the freed block if known exactly (0: not).
    freed_block_bytes: Vec<u64>,
    /// Pool of each segment of the final state by address: older traces carry no pool ids, and
    /// a segment allocated during the trace keeps the pool the snapshot gives it.
    final_segment_pools: HashMap<u64, (PoolKind, PoolId)>,
    /// `(events applied, state)`, ascending; the first is the start, the last the final state.
    checkpoints: Vec<(usize, AllocatorState)>,
    /// Allocated bytes after `i` events, for `i` in `0..=len`.
    allocated_series: Vec<u64>,
    /// Reserved bytes after `i` events, for `i` in `0..=len`.
    reserved_series: Vec<u64>,
    /// Extremes of the series per [`SERIES_CHUNK`] positions.
    series_chunks: Vec<SeriesExtremes>,
    times_monotonic: bool,
    check: ReplayCheck,
}

/// Positions summarised per entry of the series' chunk summaries.
pub const SERIES_CHUNK: usize = 256;

/// Extremes of the allocated/reserved series over a range of positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeriesExtremes {
    pub allocated_min_bytes: u64,
    pub allocated_max_bytes: u64,
    pub reserved_max_bytes: u64,
}

impl SeriesExtremes {
    fn merge(&mut self, other: &SeriesExtremes) {
        self.allocated_min_bytes = self.allocated_min_bytes.min(other.allocated_min_bytes);
        self.allocated_max_bytes = self.allocated_max_bytes.max(other.allocated_max_bytes);
        self.reserved_max_bytes = self.reserved_max_bytes.max(other.reserved_max_bytes);
    }
}

impl TimeTravel {
    /// Reconstructs every state of `device`'s trace from `snapshot`.
    ///
    /// A device without a trace gets a time travel of zero events whose only state is the final
    /// one. Never fails: events that contradict the snapshot are skipped and counted in
    /// [`TimeTravel::check`]. (Runs [`TimeTravelBuild`] to the end in one go.)
    pub fn new(snapshot: Arc<AllocatorSnapshot>, device: u32) -> Self {
        let mut build = TimeTravelBuild::new(snapshot, device);
        loop {
            match build.run(Deadline::NEVER) {
                Step::Done(travel) => return travel,
                Step::Pending(more) => build = more,
            }
        }
    }

    /// Device ordinal.
    pub fn device(&self) -> u32 {
        self.device
    }

    /// Number of trace events; states exist for `0..=len()` events applied.
    pub fn len(&self) -> usize {
        self.trace().len()
    }

    /// True when the device has no trace events.
    pub fn is_empty(&self) -> bool {
        self.trace().is_empty()
    }

    /// The trace this time travel walks.
    pub fn trace(&self) -> &DeviceTrace {
        self.trace_index
            .and_then(|i| self.snapshot.traces.get(i))
            .unwrap_or(&self.empty_trace)
    }

    /// The snapshot this time travel walks.
    pub fn snapshot(&self) -> &Arc<AllocatorSnapshot> {
        &self.snapshot
    }

    /// The sizing rules used.
    pub fn rules(&self) -> &AllocatorRules {
        &self.rules
    }

    /// How trustworthy the reconstruction is.
    pub fn check(&self) -> &ReplayCheck {
        &self.check
    }

    /// Allocated bytes after `i` events, for every `i` in `0..=len()`.
    pub fn allocated_series(&self) -> &[u64] {
        &self.allocated_series
    }

    /// Reserved bytes after `i` events, for every `i` in `0..=len()`.
    pub fn reserved_series(&self) -> &[u64] {
        &self.reserved_series
    }

    /// Number of events between checkpoints.
    pub fn checkpoint_interval(&self) -> usize {
        match self.checkpoints.as_slice() {
            [(first, _), (second, _), ..] => second - first,
            _ => self.len().max(1),
        }
    }

    /// The state after the first `applied` events (clamped to `len()`): undoes events from the
    /// nearest checkpoint at or after it.
    pub fn state_at(&self, applied: usize) -> AllocatorState {
        let applied = applied.min(self.len());
        let at = self
            .checkpoints
            .partition_point(|(position, _)| *position < applied);
        let Some((position, checkpoint)) = self.checkpoints.get(at) else {
            return AllocatorState {
                device: self.device,
                ..Default::default()
            };
        };
        let mut state = checkpoint.clone();
        for index in (applied..*position).rev() {
            // Mismatches were counted when the checkpoints were built.
            let _ = self.undo(&mut state, index);
        }
        state
    }

    /// Moves `state`, the state after `from` events, to the state after `to` events: directly
    /// (undoing backwards, or replaying forwards when the replay is exact) when that is fewer
    /// events than starting from a checkpoint. Small scrubbing steps then cost only the events
    /// stepped over.
    pub fn move_state(&self, state: &mut AllocatorState, from: usize, to: usize) {
        let (from, to) = (from.min(self.len()), to.min(self.len()));
        let at = self
            .checkpoints
            .partition_point(|(position, _)| *position < to);
        let via_checkpoint = self.checkpoints.get(at).map_or(usize::MAX, |(p, _)| p - to);
        if to <= from && from - to <= via_checkpoint {
            for index in (to..from).rev() {
                let _ = self.undo(state, index);
            }
        } else if to > from && self.check.matches_final_state && to - from <= via_checkpoint {
            for index in from..to {
                let _ = self.apply(state, index);
            }
        } else {
            *state = self.state_at(to);
        }
    }

    /// Smallest and largest allocated bytes over positions `first..=last` (clamped; `(0, 0)`
    /// without a series): the series itself at the ends, the per-chunk summaries in between,
    /// so a stretch costs at most two chunks' worth of positions plus one step per chunk. The
    /// doctor finds iterations' floors and peaks with it (scanning the series for each took
    /// 74-98 ms of the web page's thread at 13.3 M events).
    pub fn allocated_extremes(&self, first: usize, last: usize) -> (u64, u64) {
        let series = &self.allocated_series;
        let Some(end) = series.len().checked_sub(1) else {
            return (0, 0);
        };
        let last = last.min(end);
        let first = first.min(last);
        let of = |values: &[u64]| {
            values
                .iter()
                .fold((u64::MAX, 0), |(low, high), &v| (low.min(v), high.max(v)))
        };
        // Chunks wholly inside the stretch: `full_from..full_to`.
        let full_from = first.div_ceil(SERIES_CHUNK);
        let full_to = (last + 1) / SERIES_CHUNK;
        if full_from >= full_to {
            return of(&series[first..=last]);
        }
        let (mut low, mut high) = of(&series[first..full_from * SERIES_CHUNK]);
        for chunk in self.series_chunks.get(full_from..full_to).unwrap_or(&[]) {
            low = low.min(chunk.allocated_min_bytes);
            high = high.max(chunk.allocated_max_bytes);
        }
        let (tail_low, tail_high) = of(&series[full_to * SERIES_CHUNK..=last]);
        (low.min(tail_low), high.max(tail_high))
    }

    /// Extremes of the series over positions `first..=last` (clamped): smallest and largest
    /// allocated bytes and largest reserved bytes. Uses per-chunk summaries, so a timeline
    /// column over a million events costs a few thousand steps.
    pub fn series_extremes(&self, first: usize, last: usize) -> SeriesExtremes {
        let end = self.allocated_series.len();
        let (first, last) = (
            first.min(end.saturating_sub(1)),
            last.min(end.saturating_sub(1)),
        );
        let mut extremes = SeriesExtremes {
            allocated_min_bytes: u64::MAX,
            allocated_max_bytes: 0,
            reserved_max_bytes: 0,
        };
        let mut position = first;
        while position <= last && end > 0 {
            let chunk = position / SERIES_CHUNK;
            let chunk_end = (chunk + 1) * SERIES_CHUNK - 1;
            if position % SERIES_CHUNK == 0 && chunk_end <= last {
                extremes.merge(&self.series_chunks[chunk]);
                position = chunk_end + 1;
            } else {
                extremes.merge(&SeriesExtremes {
                    allocated_min_bytes: self.allocated_series[position],
                    allocated_max_bytes: self.allocated_series[position],
                    reserved_max_bytes: self.reserved_series[position],
                });
                position += 1;
            }
        }
        if extremes.allocated_min_bytes == u64::MAX {
            extremes.allocated_min_bytes = 0;
        }
        extremes
    }

    /// True when every event has a time and times never go backwards (timelines can then use
    /// trace time as their x axis).
    pub fn times_are_monotonic(&self) -> bool {
        self.times_monotonic
    }

    /// The state after the first `applied` events, computed forwards from the reconstructed
    /// start with the allocator's rules (independent of the backward checkpoints; used to check
    /// them).
    pub fn replay_forward(&self, applied: usize) -> AllocatorState {
        let mut state = self.state_at(0);
        for index in 0..applied.min(self.len()) {
            let _ = self.apply(&mut state, index);
        }
        state
    }

    /// Applies event `index` forwards. Returns the size of the block an `alloc` handed out.
    fn apply(&self, state: &mut AllocatorState, index: usize) -> Result<Option<u64>, Mismatch> {
        let op = op_at(self.trace(), index);
        match op.action {
            TraceAction::Alloc => {
                let (segment, block) = state.block_starting_at(op.address)?;
                let target = &state.segments[segment];
                let free = &target.blocks[block];
                if free.status != BlockStatus::Free {
                    return Err(Mismatch::BlockNotFree);
                }
                let rounded = self.rules.round_size(op.size_bytes);
                if rounded > free.size_bytes {
                    return Err(Mismatch::BlockTooSmall);
                }
                let remaining = free.size_bytes - rounded;
                let size_bytes =
                    if self
                        .rules
                        .should_split(target.pool, target.expandable, rounded, remaining)
                    {
                        rounded
                    } else {
                        free.size_bytes
                    };
                state.carve_block_in(
                    segment,
                    block,
                    op.address,
                    size_bytes,
                    StateBlock {
                        address: op.address,
                        size_bytes,
                        requested_bytes: op.size_bytes,
                        status: BlockStatus::Allocated,
                        origin: BlockOrigin::AllocEvent(index as u32),
                    },
                )?;
                Ok(Some(size_bytes))
            }
            TraceAction::FreeRequested => {
                let (segment, block) = state.block_starting_at(op.address)?;
                if state.segments[segment].blocks[block].status != BlockStatus::Allocated {
                    return Err(Mismatch::BlockNotFree);
                }
                state.set_status(segment, block, BlockStatus::PendingFree);
                Ok(None)
            }
            TraceAction::FreeCompleted => state.release_block(op.address).map(|()| None),
            TraceAction::SegmentAlloc => {
                self.insert_free_segment(state, index, &op)?;
                Ok(None)
            }
            TraceAction::SegmentFree => state.remove_free_segment(op.address).map(|()| None),
            TraceAction::SegmentMap => self.map_new_range(state, index, &op).map(|()| None),
            TraceAction::SegmentUnmap => {
                state.unmap_range(op.address, op.size_bytes).map(|()| None)
            }
            _ => Ok(None),
        }
    }

    /// Undoes event `index`: turns the state after it into the state before it.
    fn undo(&self, state: &mut AllocatorState, index: usize) -> Result<(), Mismatch> {
        let op = op_at(self.trace(), index);
        match op.action {
            TraceAction::Alloc => state.release_block(op.address),
            TraceAction::FreeRequested => {
                let (segment, block) = state.block_starting_at(op.address)?;
                if state.segments[segment].blocks[block].status != BlockStatus::PendingFree {
                    return Err(Mismatch::BlockNotPending);
                }
                state.set_status(segment, block, BlockStatus::Allocated);
                Ok(())
            }
            TraceAction::FreeCompleted => {
                let (segment, block) = state
                    .block_containing(op.address)
                    .ok_or(Mismatch::NoBlockAtAddress)?;
                // Known once the replay filled them in (empty before).
                let size_bytes = match self.freed_block_bytes.get(index).copied().unwrap_or(0) {
                    0 => self.estimate_freed_block_bytes(state, segment, block, &op),
                    known => known,
                };
                let origin = match self.paired_alloc[index] {
                    NO_EVENT => BlockOrigin::FreeEvent(index as u32),
                    alloc => BlockOrigin::AllocEvent(alloc),
                };
                state.carve_block_in(
                    segment,
                    block,
                    op.address,
                    size_bytes,
                    StateBlock {
                        address: op.address,
                        size_bytes,
                        requested_bytes: op.size_bytes,
                        status: BlockStatus::PendingFree,
                        origin,
                    },
                )
            }
            TraceAction::SegmentAlloc => state.remove_free_segment(op.address),
            TraceAction::SegmentFree => self.insert_free_segment(state, index, &op),
            TraceAction::SegmentMap => state.unmap_range(op.address, op.size_bytes),
            TraceAction::SegmentUnmap => self.map_new_range(state, index, &op),
            _ => Ok(()),
        }
    }

    /// Maps a range of an expandable segment where trace event `index` says one appears: a
    /// `segment_map` replayed forward, or a `segment_unmap` undone backward.
    fn map_new_range(
        &self,
        state: &mut AllocatorState,
        index: usize,
        op: &TraceOp,
    ) -> Result<(), Mismatch> {
        ensure_room_for_segment(state, op)?;
        state.map_range(
            op.address,
            op.size_bytes,
            op.stream,
            expandable_pool_guess(op.size_bytes),
            self.trace().pool_id(index),
        );
        Ok(())
    }

    /// A new, entirely free segment where trace event `index` says one appears: a `segment_alloc`
    /// replayed forward, or a `segment_free` undone backward.
    fn insert_free_segment(
        &self,
        state: &mut AllocatorState,
        index: usize,
        op: &TraceOp,
    ) -> Result<(), Mismatch> {
        ensure_room_for_segment(state, op)?;
        let (pool, pool_id) = self.segment_pool(index, op);
        state.insert_segment(StateSegment {
            address: op.address,
            size_bytes: op.size_bytes,
            stream: op.stream,
            pool,
            pool_id,
            expandable: false,
            blocks: vec![StateBlock::free(op.address, op.size_bytes)],
        });
        Ok(())
    }

    /// Pool of a segment created or re-created by event `index`.
    fn segment_pool(&self, index: usize, op: &TraceOp) -> (PoolKind, PoolId) {
        let from_trace = self.trace().pool_id(index);
        match self.final_segment_pools.get(&op.address) {
            Some(&(pool, pool_id)) if from_trace.is_default() => (pool, pool_id),
            _ => (AllocatorRules::pool_of_segment(op.size_bytes), from_trace),
        }
    }

    /// The size a freed block most likely had: its rounded request, or the whole free block it
    /// merged into when the leftover would have been too small for the allocator to split off.
    /// `segment` and `block` are the indices of the block containing the freed address.
    fn estimate_freed_block_bytes(
        &self,
        state: &AllocatorState,
        segment: usize,
        block: usize,
        op: &TraceOp,
    ) -> u64 {
        let segment = &state.segments[segment];
        let free = &segment.blocks[block];
        let room = free.end_address() - op.address;
        let rounded = self.rules.round_size(op.size_bytes);
        if rounded >= room {
            return room;
        }
        let remaining = room - rounded;
        if self
            .rules
            .should_split(segment.pool, segment.expandable, rounded, remaining)
        {
            rounded
        } else {
            room
        }
    }
}

/// A segment (or mapped range) can appear at `op.address` only where none is, and only with a size.
/// Events handled between two looks at the deadline while a [`TimeTravel`] is built.
const EVENTS_PER_STEP: usize = 16 * 1024;

/// A [`TimeTravel`] being built in steps that stop at a deadline ([`TimeTravelBuild::run`]), so
/// that a caller with a single thread (the web viewer) keeps its page responsive on traces of
/// millions of events. [`TimeTravel::new`] runs it to the end.
///
/// The passes, in order (see [`TimeTravel`] for why):
/// 1. pair every free with its alloc;
/// 2. undo with estimated sizes of freed blocks, to find the starting state; it keeps checkpoints
///    and the series: when the replay below does not reproduce the final state, the sizes stay
///    estimates and these are the final ones;
/// 3. replay forwards with the allocator's rules, which know every block's size; it stops at
///    the first event that does not fit (the final state can then no longer be reproduced, and
///    the rest would be wasted work). When pass 2 needed no skips, it records the series and
///    checkpoints (pass 2's are dropped first, to keep the peak memory): if the replay
///    reproduces the final state exactly, these are the exact states;
/// 4. when needed, undo again from the final state with the sizes now known (or, when only
///    pass 2's recording was dropped, with the same estimates), keeping checkpoints and series;
/// 5. summaries of the series and whether times are monotonic.
pub struct TimeTravelBuild {
    travel: TimeTravel,
    stage: Stage,
}

enum Stage {
    Pair(PairPass),
    FirstUndo {
        final_state: AllocatorState,
        pass: UndoPass,
    },
    Replay {
        final_state: AllocatorState,
        start_mismatches: u32,
        pass: ReplayPass,
    },
    /// The replay reproduced the final state: the sizes of freed blocks are copied from the
    /// allocs they pair with.
    FillFreed {
        block_bytes: Vec<u64>,
        next: usize,
        check: ReplayCheck,
        /// The final state, when pass 4 must follow (with the sizes now filled in).
        third_undo: Option<AllocatorState>,
    },
    ThirdUndo {
        pass: UndoPass,
        check: ReplayCheck,
    },
    Summary {
        pass: SummaryPass,
        check: ReplayCheck,
    },
    Done,
}

impl TimeTravelBuild {
    /// Starts building the time travel of `device`'s trace in `snapshot`.
    pub fn new(snapshot: Arc<AllocatorSnapshot>, device: u32) -> Self {
        let trace_index = snapshot.traces.iter().position(|t| t.device == device);
        let empty_trace = DeviceTrace {
            device,
            ..Default::default()
        };
        let rules = AllocatorRules::from_settings(snapshot.settings.as_ref());
        let travel = TimeTravel {
            device,
            rules,
            snapshot,
            trace_index,
            empty_trace,
            final_segment_pools: HashMap::new(),
            freed_block_bytes: Vec::new(),
            paired_alloc: Vec::new(),
            checkpoints: Vec::new(),
            allocated_series: Vec::new(),
            reserved_series: Vec::new(),
            series_chunks: Vec::new(),
            times_monotonic: false,
            check: ReplayCheck::default(),
        };
        let stage = Stage::Pair(PairPass::new(travel.len()));
        TimeTravelBuild { travel, stage }
    }

    /// Works until `deadline` (checked every few thousand events) or the end: the finished
    /// time travel, or this build to run again.
    pub fn run(mut self, deadline: Deadline) -> Step<TimeTravel, TimeTravelBuild> {
        loop {
            if self.advance(deadline) {
                return Step::Done(self.travel);
            }
            if deadline.passed() {
                return Step::Pending(self);
            }
        }
    }

    /// Runs the current stage until it ends (then moves to the next) or the deadline passes.
    /// True once everything is done.
    fn advance(&mut self, deadline: Deadline) -> bool {
        let travel = &mut self.travel;
        let len = travel.len();
        let stage = std::mem::replace(&mut self.stage, Stage::Done);
        self.stage = match stage {
            Stage::Pair(mut pass) => {
                if !pass.run(travel.trace(), deadline) {
                    Stage::Pair(pass)
                } else {
                    let PairPass { paired, open, .. } = pass;
                    let final_state =
                        AllocatorState::from_snapshot(&travel.snapshot, travel.device, &open);
                    travel.final_segment_pools = final_state
                        .segments
                        .iter()
                        .map(|s| (s.address, (s.pool, s.pool_id)))
                        .collect();
                    travel.paired_alloc = paired;
                    Stage::FirstUndo {
                        pass: UndoPass::new(final_state.clone(), len),
                        final_state,
                    }
                }
            }
            Stage::FirstUndo {
                final_state,
                mut pass,
            } => {
                if !pass.run(travel, deadline) {
                    Stage::FirstUndo { final_state, pass }
                } else {
                    let (start, start_mismatches) = pass.finish(travel);
                    let record = start_mismatches == 0;
                    if record {
                        travel.checkpoints = Vec::new();
                        travel.allocated_series = Vec::new();
                        travel.reserved_series = Vec::new();
                    }
                    let interval = if record {
                        checkpoint_interval(len, &final_state)
                    } else {
                        usize::MAX
                    };
                    Stage::Replay {
                        final_state,
                        start_mismatches,
                        pass: ReplayPass::new(start, len, record, interval),
                    }
                }
            }
            Stage::Replay {
                final_state,
                start_mismatches,
                mut pass,
            } => {
                if !pass.run(travel, deadline) {
                    Stage::Replay {
                        final_state,
                        start_mismatches,
                        pass,
                    }
                } else {
                    replay_done(travel, pass, final_state, start_mismatches)
                }
            }
            Stage::FillFreed {
                block_bytes,
                next,
                check,
                third_undo,
            } => {
                if zero_fill_step(&mut travel.freed_block_bytes, len) {
                    self.stage = Stage::FillFreed {
                        block_bytes,
                        next,
                        check,
                        third_undo,
                    };
                    return false;
                }
                let end = next.saturating_add(EVENTS_PER_STEP * 8).min(len);
                let mut freed = std::mem::take(&mut travel.freed_block_bytes);
                let actions = &travel.trace().actions;
                for index in next..end {
                    let paired = travel.paired_alloc[index];
                    if actions[index] == TraceAction::FreeCompleted && paired != NO_EVENT {
                        freed[index] = block_bytes[paired as usize];
                    }
                }
                travel.freed_block_bytes = freed;
                match third_undo {
                    _ if end < len => Stage::FillFreed {
                        block_bytes,
                        next: end,
                        check,
                        third_undo,
                    },
                    Some(final_state) => Stage::ThirdUndo {
                        pass: UndoPass::new(final_state, len),
                        check,
                    },
                    None => Stage::Summary {
                        pass: SummaryPass::default(),
                        check,
                    },
                }
            }
            Stage::ThirdUndo {
                mut pass,
                mut check,
            } => {
                if !pass.run(travel, deadline) {
                    Stage::ThirdUndo { pass, check }
                } else {
                    check.undo_mismatches = pass.finish(travel).1;
                    Stage::Summary {
                        pass: SummaryPass::default(),
                        check,
                    }
                }
            }
            Stage::Summary { mut pass, check } => {
                if !pass.run(travel, deadline) {
                    Stage::Summary { pass, check }
                } else {
                    travel.series_chunks = pass.chunks;
                    travel.times_monotonic = pass.times_monotonic;
                    travel.check = check;
                    Stage::Done
                }
            }
            Stage::Done => return true,
        };
        matches!(self.stage, Stage::Done)
    }
}

/// After the forward replay: keeps its recording when it is exact, and decides whether the
/// sizes of freed blocks are known (fill them in) or a third pass must record the states.
fn replay_done(
    travel: &mut TimeTravel,
    pass: ReplayPass,
    final_state: AllocatorState,
    start_mismatches: u32,
) -> Stage {
    let len = travel.len();
    let ReplayPass {
        state,
        record,
        mut checkpoints,
        mut allocated,
        mut reserved,
        block_bytes,
        stopped_at: replay_stopped_at,
        mut first_problem,
        ..
    } = pass;
    let matches_final_state = replay_stopped_at.is_none() && state == final_state;
    if record {
        allocated[len] = state.allocated_bytes;
        reserved[len] = state.reserved_bytes;
        checkpoints.push((len, state));
    }
    if !matches_final_state && first_problem.is_none() {
        first_problem = Some(
            "replaying the trace forwards did not reproduce the snapshot's final state; \
             sizes of blocks freed during the trace are estimates"
                .to_string(),
        );
    }
    let mut check = ReplayCheck {
        matches_final_state,
        undo_mismatches: 0,
        replay_stopped_at,
        first_problem,
    };
    match (record, matches_final_state) {
        // The replay's states are exact: they are the checkpoints and the series.
        (true, true) => {
            travel.checkpoints = checkpoints;
            travel.allocated_series = allocated;
            travel.reserved_series = reserved;
        }
        // Sizes stay estimates, so undoing again would repeat the first undo exactly.
        (false, false) => check.undo_mismatches = start_mismatches,
        _ => drop((checkpoints, allocated, reserved)),
    }
    // Pass 4 when the replay's recording is not the answer but an undo may differ from pass 2.
    let third_undo = (record != matches_final_state).then_some(final_state);
    if matches_final_state {
        Stage::FillFreed {
            block_bytes,
            next: 0,
            check,
            third_undo,
        }
    } else if let Some(final_state) = third_undo {
        Stage::ThirdUndo {
            pass: UndoPass::new(final_state, len),
            check,
        }
    } else {
        Stage::Summary {
            pass: SummaryPass::default(),
            check,
        }
    }
}

/// Pass 1: pairs each free event with the alloc of the same block, and finds the blocks still
/// allocated at the end (address -> alloc event).
struct PairPass {
    next: usize,
    /// For each free event, its alloc event (or [`NO_EVENT`]).
    paired: Vec<u32>,
    open: HashMap<u64, u32>,
}

impl PairPass {
    fn new(len: usize) -> Self {
        PairPass {
            next: 0,
            paired: vec![NO_EVENT; len],
            open: HashMap::new(),
        }
    }

    /// True once every event is paired.
    fn run(&mut self, trace: &DeviceTrace, deadline: Deadline) -> bool {
        let len = self.paired.len();
        while self.next < len {
            let end = (self.next + EVENTS_PER_STEP).min(len);
            for index in self.next..end {
                let address = trace.addresses.get(index).copied().unwrap_or(0);
                match trace.actions[index] {
                    TraceAction::Alloc => {
                        self.open.insert(address, index as u32);
                    }
                    TraceAction::FreeRequested => {
                        self.paired[index] = self.open.get(&address).copied().unwrap_or(NO_EVENT);
                    }
                    TraceAction::FreeCompleted => {
                        self.paired[index] = self.open.remove(&address).unwrap_or(NO_EVENT);
                    }
                    _ => {}
                }
            }
            self.next = end;
            if deadline.passed() {
                break;
            }
        }
        self.next >= len
    }
}

/// Undoes every event from the end, recording checkpoints and the allocated/reserved series.
struct UndoPass {
    len: usize,
    /// Positions still to record, from `len` down to 0: the next one is `remaining - 1`.
    remaining: usize,
    state: AllocatorState,
    interval: usize,
    checkpoints: Vec<(usize, AllocatorState)>,
    allocated: Vec<u64>,
    reserved: Vec<u64>,
    mismatches: u32,
}

impl UndoPass {
    fn new(final_state: AllocatorState, len: usize) -> Self {
        UndoPass {
            len,
            remaining: len + 1,
            interval: checkpoint_interval(len, &final_state),
            state: final_state,
            checkpoints: Vec::new(),
            allocated: Vec::new(),
            reserved: Vec::new(),
            mismatches: 0,
        }
    }

    /// True once every event is undone.
    fn run(&mut self, travel: &TimeTravel, deadline: Deadline) -> bool {
        if zero_fill_step(&mut self.allocated, self.len + 1)
            || zero_fill_step(&mut self.reserved, self.len + 1)
        {
            return false;
        }
        while self.remaining > 0 {
            let stop = self.remaining.saturating_sub(EVENTS_PER_STEP);
            for position in (stop..self.remaining).rev() {
                self.allocated[position] = self.state.allocated_bytes;
                self.reserved[position] = self.state.reserved_bytes;
                if position == self.len || position % self.interval == 0 {
                    self.checkpoints.push((position, self.state.clone()));
                }
                if position > 0 && travel.undo(&mut self.state, position - 1).is_err() {
                    self.mismatches += 1;
                }
            }
            self.remaining = stop;
            if deadline.passed() {
                break;
            }
        }
        self.remaining == 0
    }

    /// Hands the checkpoints and the series to `travel`; returns the start state and the number
    /// of events that did not fit.
    fn finish(mut self, travel: &mut TimeTravel) -> (AllocatorState, u32) {
        self.checkpoints.reverse();
        travel.checkpoints = self.checkpoints;
        travel.allocated_series = self.allocated;
        travel.reserved_series = self.reserved;
        (self.state, self.mismatches)
    }
}

/// Zeros a pass's big vector fills per call of its `run`: 8 MiB, a few milliseconds.
const ZERO_FILL_ENTRIES: usize = 1 << 20;

/// Fills `items` towards `len` zeros, [`ZERO_FILL_ENTRIES`] at a time; true when it filled some
/// (the pass's `run` then returns, and the page's deadline is checked). Zeroing the three
/// 106 MB vectors of a 13.3 M-event trace at once took 113-150 ms of the web page's thread;
/// the room is reserved once, so no fill copies what came before.
fn zero_fill_step(items: &mut Vec<u64>, len: usize) -> bool {
    if items.len() >= len {
        return false;
    }
    items.reserve_exact(len - items.len());
    let to = items.len().saturating_add(ZERO_FILL_ENTRIES).min(len);
    items.resize(to, 0);
    true
}

/// Replays the trace forwards from the start state with the allocator's rules.
struct ReplayPass {
    next: usize,
    len: usize,
    state: AllocatorState,
    /// Whether to record checkpoints and the series (every `interval` events).
    record: bool,
    interval: usize,
    checkpoints: Vec<(usize, AllocatorState)>,
    allocated: Vec<u64>,
    reserved: Vec<u64>,
    /// Block sizes handed out by each alloc event, stored at the alloc's index.
    block_bytes: Vec<u64>,
    stopped_at: Option<usize>,
    first_problem: Option<String>,
}

impl ReplayPass {
    fn new(start: AllocatorState, len: usize, record: bool, interval: usize) -> Self {
        ReplayPass {
            next: 0,
            len,
            state: start,
            record,
            interval,
            checkpoints: Vec::new(),
            allocated: Vec::new(),
            reserved: Vec::new(),
            block_bytes: Vec::new(),
            stopped_at: None,
            first_problem: None,
        }
    }

    /// True once the replay reached the end or stopped at an event that does not fit.
    fn run(&mut self, travel: &TimeTravel, deadline: Deadline) -> bool {
        let series_len = if self.record { self.len + 1 } else { 0 };
        if zero_fill_step(&mut self.block_bytes, self.len)
            || zero_fill_step(&mut self.allocated, series_len)
            || zero_fill_step(&mut self.reserved, series_len)
        {
            return false;
        }
        while self.next < self.len && self.stopped_at.is_none() {
            let end = (self.next + EVENTS_PER_STEP).min(self.len);
            for index in self.next..end {
                if self.record {
                    self.allocated[index] = self.state.allocated_bytes;
                    self.reserved[index] = self.state.reserved_bytes;
                    if index % self.interval == 0 {
                        self.checkpoints.push((index, self.state.clone()));
                    }
                }
                match travel.apply(&mut self.state, index) {
                    Ok(Some(handed_out)) => self.block_bytes[index] = handed_out,
                    Ok(None) => {}
                    Err(mismatch) => {
                        self.stopped_at = Some(index);
                        self.first_problem = Some(describe_mismatch(
                            "replaying",
                            index,
                            travel.trace(),
                            mismatch,
                        ));
                        break;
                    }
                }
            }
            self.next = end;
            if deadline.passed() {
                break;
            }
        }
        self.next >= self.len || self.stopped_at.is_some()
    }
}

/// The last pass: extremes of the series per [`SERIES_CHUNK`] positions, and whether trace
/// times are known and never go backwards.
struct SummaryPass {
    chunks: Vec<SeriesExtremes>,
    /// Events whose time was checked.
    times_checked: usize,
    times_monotonic: bool,
}

impl Default for SummaryPass {
    fn default() -> Self {
        SummaryPass {
            chunks: Vec::new(),
            times_checked: 0,
            times_monotonic: true,
        }
    }
}

impl SummaryPass {
    /// True once both are known.
    fn run(&mut self, travel: &TimeTravel, deadline: Deadline) -> bool {
        let chunk_count = travel.allocated_series.len().div_ceil(SERIES_CHUNK);
        while self.chunks.len() < chunk_count {
            let first = self.chunks.len() * SERIES_CHUNK;
            let last = (first + EVENTS_PER_STEP * 4).min(travel.allocated_series.len());
            let allocated = &travel.allocated_series[first..last];
            let reserved = &travel.reserved_series[first..last];
            self.chunks.extend(
                allocated
                    .chunks(SERIES_CHUNK)
                    .zip(reserved.chunks(SERIES_CHUNK))
                    .map(|(allocated, reserved)| SeriesExtremes {
                        allocated_min_bytes: allocated.iter().copied().min().unwrap_or(0),
                        allocated_max_bytes: allocated.iter().copied().max().unwrap_or(0),
                        reserved_max_bytes: reserved.iter().copied().max().unwrap_or(0),
                    }),
            );
            if deadline.passed() {
                return false;
            }
        }
        let len = travel.len();
        let times = &travel.trace().times_us;
        if times.len() != len {
            self.times_monotonic = false;
        }
        while self.times_monotonic && self.times_checked < len {
            let first = self.times_checked;
            let last = (first + EVENTS_PER_STEP * 4).min(len);
            let previous = first.checked_sub(1).map(|i| times[i]);
            let window = &times[first..last];
            self.times_monotonic = window
                .iter()
                .all(|&t| t != crate::model::allocator::TIME_UNKNOWN_US)
                && previous.is_none_or(|p| window.first().is_none_or(|&t| p <= t))
                && window.windows(2).all(|w| w[0] <= w[1]);
            self.times_checked = last;
            if deadline.passed() {
                return !self.times_monotonic || self.times_checked >= len;
            }
        }
        true
    }
}

fn ensure_room_for_segment(state: &AllocatorState, op: &TraceOp) -> Result<(), Mismatch> {
    if state.segment_containing(op.address).is_some() || op.size_bytes == 0 {
        return Err(Mismatch::SegmentInUse);
    }
    Ok(())
}

/// Events between checkpoints for a trace of `len` events whose states are about as big as
/// `state`: at least [`MIN_CHECKPOINT_INTERVAL`], sparser when the checkpoints would exceed
/// [`CHECKPOINT_BUDGET_BYTES`].
fn checkpoint_interval(len: usize, state: &AllocatorState) -> usize {
    let per_state = state.heap_bytes().max(1);
    let budget_interval = len.saturating_mul(per_state) / CHECKPOINT_BUDGET_BYTES + 1;
    budget_interval.max(MIN_CHECKPOINT_INTERVAL)
}

/// Expandable segments map 2 MiB pages for the small pool and 20 MiB pages for the large one.
fn expandable_pool_guess(size_bytes: u64) -> PoolKind {
    if size_bytes.is_multiple_of(super::allocator_rules::LARGE_BUFFER_BYTES) {
        PoolKind::Large
    } else {
        PoolKind::Small
    }
}

fn describe_mismatch(doing: &str, index: usize, trace: &DeviceTrace, mismatch: Mismatch) -> String {
    let op = op_at(trace, index);
    let action = op.action.name().unwrap_or("unknown");
    let why = match mismatch {
        Mismatch::NoBlockAtAddress => "no block starts at that address",
        Mismatch::NoSegmentAtAddress => "no segment starts at that address",
        Mismatch::BlockAlreadyFree => "the block is already free",
        Mismatch::BlockNotFree => "the block is not in the expected state",
        Mismatch::BlockNotPending => "the block is not waiting to be freed",
        Mismatch::BlockTooSmall => "the free block there is too small",
        Mismatch::SegmentInUse => "the segment is in use or overlaps another",
    };
    format!(
        "{doing} event {index} ({action} at {:#x}, {} bytes): {why}",
        op.address, op.size_bytes
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_segment(address: u64, size_bytes: u64) -> StateSegment {
        StateSegment::for_test(
            address,
            0,
            PoolKind::Large,
            vec![StateBlock::free(address, size_bytes)],
        )
    }

    fn starts(state: &AllocatorState) -> Vec<u64> {
        state.segments.iter().map(|s| s.address).collect()
    }

    #[test]
    fn the_segment_index_follows_inserts_joins_and_removals() {
        let mut state = AllocatorState::default();
        for address in [0x3000, 0x1000, 0x5000] {
            state.insert_segment(free_segment(address, 0x1000));
        }
        assert_eq!(state.segment_starts, starts(&state));
        assert_eq!(state.block_containing(0x1fff), Some((0, 0)));
        assert_eq!(state.block_containing(0x2000), None);
        // Expandable ranges next to each other join into one segment.
        state.map_range(0x7000, 0x1000, 0, PoolKind::Large, PoolId::default());
        state.map_range(0x8000, 0x1000, 0, PoolKind::Large, PoolId::default());
        assert_eq!(starts(&state), vec![0x1000, 0x3000, 0x5000, 0x7000]);
        assert_eq!(state.segment_starts, starts(&state));
        assert_eq!(state.segment_containing(0x8fff), Some(3));
        state
            .unmap_range(0x7000, 0x2000)
            .expect("unmaps the whole range");
        state
            .remove_free_segment(0x3000)
            .expect("removes a free segment");
        assert_eq!(state.segment_starts, vec![0x1000, 0x5000]);
        assert_eq!(state.segment_containing(0x5000), Some(1));
        assert_eq!(state.segment_containing(0x3000), None);
    }

    #[test]
    fn a_state_built_or_changed_by_hand_is_searched_without_the_index() {
        let mut state = AllocatorState {
            segments: vec![free_segment(0x1000, 0x1000), free_segment(0x4000, 0x1000)],
            ..Default::default()
        };
        assert_eq!(state.segment_containing(0x4800), Some(1));
        state.insert_segment(free_segment(0x2000, 0x1000));
        assert_eq!(state.segment_starts, vec![0x1000, 0x2000, 0x4000]);
        // Changed directly: the index no longer matches and is not used.
        state.segments.remove(0);
        assert_eq!(state.segment_containing(0x2800), Some(0));
        assert_eq!(state.segment_containing(0x4800), Some(1));
        // States compare by their segments, not by the index.
        let rebuilt = AllocatorState {
            segments: state.segments.clone(),
            reserved_bytes: state.reserved_bytes,
            ..Default::default()
        };
        assert_eq!(rebuilt, state);
    }

    /// The undo and replay passes fill their big vectors with zeros a bounded part per call of
    /// `run` (which then returns, so a deadline comes between them), and a time travel built
    /// with a deadline that has always passed is the one built in one go.
    #[test]
    fn passes_zero_fill_their_vectors_a_part_per_call() {
        let mut items = Vec::new();
        let mut calls = 0;
        while zero_fill_step(&mut items, 2 * ZERO_FILL_ENTRIES + 5) {
            calls += 1;
        }
        assert_eq!(calls, 3);
        assert_eq!(items.len(), 2 * ZERO_FILL_ENTRIES + 5);
        assert!(items.iter().all(|&v| v == 0));
        let snapshot = crate::test_fixtures::pytorch_snapshot("frag_oom.pickle");
        let snapshot = Arc::new(snapshot);
        let travel = TimeTravel::new(Arc::clone(&snapshot), 0);
        let len = travel.len();
        assert!(len > 0);
        let mut undo = UndoPass::new(travel.state_at(len), len);
        assert!(!undo.run(&travel, Deadline::NEVER));
        assert_eq!((undo.allocated.len(), undo.reserved.len()), (len + 1, 0));
        assert!(!undo.run(&travel, Deadline::NEVER));
        assert_eq!(undo.reserved.len(), len + 1);
        assert!(undo.run(&travel, Deadline::NEVER));
        let mut replay = ReplayPass::new(travel.state_at(0), len, true, usize::MAX);
        for allocated in 1..=3 {
            assert!(!replay.run(&travel, Deadline::NEVER));
            let sizes = [
                replay.block_bytes.len(),
                replay.allocated.len(),
                replay.reserved.len(),
            ];
            assert_eq!(sizes.iter().filter(|&&n| n > 0).count(), allocated);
        }
        let mut build = TimeTravelBuild::new(Arc::clone(&snapshot), 0);
        let mut steps = 0;
        let stepped = loop {
            steps += 1;
            match build.run(Deadline::after(std::time::Duration::ZERO)) {
                Step::Done(done) => break done,
                Step::Pending(more) => build = more,
            }
        };
        assert!(steps > 5);
        assert_eq!(stepped.allocated_series, travel.allocated_series);
        assert_eq!(stepped.reserved_series, travel.reserved_series);
        assert_eq!(stepped.freed_block_bytes, travel.freed_block_bytes);
        assert_eq!(
            format!("{:?}", stepped.state_at(0)),
            format!("{:?}", travel.state_at(0))
        );
    }

    /// The allocated series' extremes over a stretch, from the chunk summaries and the series
    /// at the ends, are the ones a scan of the stretch finds: across chunk edges, within one
    /// chunk, and clamped past the end.
    #[test]
    fn allocated_extremes_are_those_of_the_stretch() {
        let snapshot = crate::test_fixtures::pytorch_snapshot("frag_oom.pickle");
        let travel = TimeTravel::new(Arc::new(snapshot), 0);
        let series = travel.allocated_series();
        let end = series.len() - 1;
        assert!(end > 4 * SERIES_CHUNK, "{end} events");
        let edges = [0, 1, 255, 256, 257, 511, 512, 700, end - 300, end - 1, end];
        for &first in &edges {
            for &last in &edges {
                if first > last {
                    continue;
                }
                let stretch = &series[first..=last];
                let scanned = (
                    stretch.iter().copied().min().unwrap_or(0),
                    stretch.iter().copied().max().unwrap_or(0),
                );
                assert_eq!(
                    travel.allocated_extremes(first, last),
                    scanned,
                    "{first}..={last}"
                );
            }
        }
        assert_eq!(
            travel.allocated_extremes(end - 10, end + 100),
            travel.allocated_extremes(end - 10, end)
        );
    }
}
