//! A model of PyTorch's CUDA caching allocator (`DeviceCachingAllocator` in
//! `c10/cuda/CUDACachingAllocator.cpp`, PyTorch 2.x, github.com/pytorch/pytorch) that makes the
//! same decisions the real one makes: request rounding, the small and large pools, segment
//! sizes, best fit per stream and pool (`BlockComparatorSize`: stream, then size, then address),
//! the split rules, the oversize rules of `max_split_size`, garbage collection under a per-process
//! cap, expandable segments mapped page by page, the failure path (free oversize cached blocks,
//! release every releasable cached block, retry, then out of memory), and private pools (CUDA
//! graphs, `torch.cuda.MemPool`): each has its own small and large pools that only the requests
//! routed to it use, its blocks stay in it when freed, it never uses expandable segments, a
//! request routed to it never releases cached memory (PyTorch cannot while a capture is under
//! way), and `empty_cache()` releases its cached segments only once the pool was released
//! (`graph_pools_freeable`: its graph, or its `MemPool`, deleted).
//!
//! Each function below mirrors the allocator function of the same name; where the model cannot
//! know what the real allocator knew (the address `cudaMalloc` returns, when another stream's work
//! completes) the replay driver tells it, from the trace. The model never touches a GPU.

use std::collections::{BTreeMap, BTreeSet};

use crate::analysis::allocator_rules::{
    AllocatorRules, MIN_BLOCK_BYTES, SMALL_BUFFER_BYTES, SMALL_SIZE_BYTES,
};
use crate::analysis::timetravel::{
    AllocatorState, BlockOrigin, BlockStatus, StateBlock, StateSegment,
};
use crate::model::allocator::{PoolId, PoolKind};

/// "No block" in the intrusive `prev`/`next` links and as an expandable-segment index.
const NIL: u32 = u32::MAX;
/// Sizes are packed into 48 bits of the pool keys; no request may reach this (256 TiB). Larger
/// requests, which only a corrupt trace makes, fail as out of memory.
const MAX_REQUEST_BYTES: u64 = 1 << 47;
/// Addresses the model invents for segments the real run never made start here, above every
/// real 48-bit GPU virtual address, so they never collide with addresses from the trace.
const SYNTHETIC_BASE: u64 = 1 << 52;
/// Alignment of invented segment addresses (what `cudaMalloc` gives large allocations).
const SYNTHETIC_ALIGN: u64 = 2 << 20;
/// The CUDA driver lays `cudaMalloc`'s address space out in chunks of this size (see
/// [`place_by_chunks`]).
const DRIVER_CHUNK_BYTES: u64 = 32 << 20;

/// Limits a replay runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Per-process cap (`set_per_process_memory_fraction` × device memory): a new segment is
    /// refused when reserved + its size would exceed it.
    pub cap_bytes: Option<u64>,
    /// Memory the device could give this process (`cudaMalloc` fails past it).
    pub device_limit_bytes: Option<u64>,
    /// Virtual address space one expandable segment reserves (1⅛ × device memory in PyTorch).
    pub expandable_va_bytes: u64,
}

/// Why the model ran out of memory on a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelOom {
    /// The rounded request (what the trace's `oom` event records).
    pub request_bytes: u64,
    /// The segment `cudaMalloc` was asked for (what PyTorch's message says it "tried to allocate").
    pub segment_bytes: u64,
    /// Reserved bytes after every release the failure path made.
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
}

/// Where the driver could put a new segment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentHints {
    /// The address the real run's `cudaMalloc` returned for a segment made at this same
    /// request (of this size, else of another): the model takes it first.
    pub same_request: Option<u64>,
    /// The address the real run's segment of this size and ordinal got: where the driver may
    /// put it when it does not reuse released address space (see
    /// [`AddressHints::reuse_released`]).
    pub same_size: Option<u64>,
}

/// Where a new segment goes when released address space could hold it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReusedRange {
    /// Where the driver's 32 MiB chunks put it (released space, or the top of a chunk no
    /// segment had), else the smallest released range's low end (see [`place_by_chunks`]).
    Chunked,
    /// Of the released ranges large enough for the segment, smallest first (ties: lowest
    /// address first), the one `pick` modulo how many there are names (0: the smallest), at
    /// its high end when `at_top`, else at its low end.
    Range { pick: u64, at_top: bool },
}

/// Where new segment addresses come from: the driver offers the addresses the real run's
/// `cudaMalloc` / `cuMemAddressReserve` returned around the same request, or for its segment of
/// the same size and ordinal, and reuses address space the replay released.
pub trait AddressHints {
    /// Addresses the real run's driver would give a new `size_bytes` segment at this point.
    fn segment_addresses(&mut self, size_bytes: u64) -> SegmentHints;
    /// Asked when segments this replay released (`cudaFree`) left an address range large
    /// enough for a new segment and the real run made none at this request: which one the
    /// driver reuses (or, following its chunks, a chunk's top no segment had), or `None` for
    /// fresh address space.
    fn reuse_released(&mut self) -> Option<ReusedRange>;
    /// Addresses of ranges the real run mapped at this point (expandable segments).
    fn mapped_addresses(&mut self) -> Vec<u64>;
}

/// Offers no addresses: every segment gets an invented one (unit tests).
#[cfg(test)]
pub struct NoHints;

#[cfg(test)]
impl AddressHints for NoHints {
    fn segment_addresses(&mut self, _size_bytes: u64) -> SegmentHints {
        SegmentHints::default()
    }
    fn reuse_released(&mut self) -> Option<ReusedRange> {
        None
    }
    fn mapped_addresses(&mut self) -> Vec<u64> {
        Vec::new()
    }
}

/// A block the program holds: its slot and the slot's generation, so that a handle kept for a
/// block that was since merged away never reaches the block that reuses the slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHandle {
    index: u32,
    generation: u32,
}

#[derive(Clone, Debug)]
struct Block {
    generation: u32,
    ptr: u64,
    size: u64,
    requested: u64,
    stream: u16,
    pool: u16,
    allocated: bool,
    /// Freed by the program, waiting for work on other streams (`event_count > 0`).
    pending: bool,
    mapped: bool,
    prev: u32,
    next: u32,
    /// Index into `expandable` when the block belongs to an expandable segment, else `NIL`.
    expandable: u32,
    /// The pool's `get_free_blocks_call_count` when the block entered the free set.
    gc_base: i64,
    /// Trace event that allocated it (for stacks in the block map); `NIL` if unknown.
    alloc_event: u32,
}

impl Block {
    /// A free block of `size` bytes at `ptr` that nothing has allocated yet, linked to no
    /// neighbour (callers set `prev`/`next` when it is part of a split segment).
    fn free_range(
        ptr: u64,
        size: u64,
        stream: u16,
        pool: u16,
        mapped: bool,
        expandable: u32,
    ) -> Block {
        Block {
            generation: 0,
            ptr,
            size,
            requested: 0,
            stream,
            pool,
            allocated: false,
            pending: false,
            mapped,
            prev: NIL,
            next: NIL,
            expandable,
            gc_base: 0,
            alloc_event: NIL,
        }
    }

    fn is_split(&self) -> bool {
        self.prev != NIL || self.next != NIL
    }
}

#[derive(Default)]
struct Pool {
    /// Free mapped blocks keyed by (stream, size, address).
    free: BTreeMap<u128, u32>,
    /// Unmapped ranges of expandable segments keyed by (stream, address).
    unmapped: BTreeMap<u128, u32>,
    get_free_blocks_call_count: i64,
}

/// One expandable segment's virtual reservation.
#[derive(Clone, Copy, Debug)]
struct ExpandableVa {
    base: u64,
    /// End of the reservation. PyTorch reserves 1⅛ × device memory; when the device's memory is
    /// unknown the model assumes more and shrinks the reservation when the real run shows
    /// another reservation beyond its used part.
    end: u64,
    page_bytes: u64,
    stream: u16,
    pool: u16,
}

fn size_key(stream: u16, size: u64, ptr: u64) -> u128 {
    (u128::from(stream) << 112) | (u128::from(size & ((1 << 48) - 1)) << 64) | u128::from(ptr)
}

fn key_stream(key: u128) -> u16 {
    (key >> 112) as u16
}

fn address_key(stream: u16, ptr: u64) -> u128 {
    (u128::from(stream) << 64) | u128::from(ptr)
}

/// What one `malloc` works with (`AllocParams`).
struct Params {
    size: u64,
    stream: u16,
    pool: u16,
    alloc_size: u64,
    block: u32,
}

/// The index of a pool in [`AllocatorModel`]'s pools: private pool `private` (0: the default
/// pools), its small or large pool.
pub(super) fn pool_index(private: u16, large: bool) -> u16 {
    private.saturating_mul(2).saturating_add(u16::from(large))
}

/// Whether pool index `pool` is a small pool (2 MiB segments, the small split rule).
fn is_small_pool(pool: u16) -> bool {
    pool.is_multiple_of(2)
}

/// The private pool number of pool index `pool` (0: the default pools).
fn private_of(pool: u16) -> u16 {
    pool / 2
}

/// Released address ranges, adjacent ones merged, by start and by length (to find the
/// smallest that holds a segment without a scan).
#[derive(Default)]
struct ReleasedSpace {
    by_start: BTreeMap<u64, u64>,
    by_length: BTreeSet<(u64, u64)>,
}

impl ReleasedSpace {
    fn insert(&mut self, start: u64, end: u64) {
        self.by_start.insert(start, end);
        self.by_length.insert((end - start, start));
    }

    fn remove(&mut self, start: u64) {
        if let Some(end) = self.by_start.remove(&start) {
            self.by_length.remove(&(end - start, start));
        }
    }

    /// Records `start..end` as released, merged with adjacent released ranges.
    fn add(&mut self, mut start: u64, mut end: u64) {
        if let Some((&before, &before_end)) = self.by_start.range(..=start).next_back()
            && before_end >= start
        {
            self.remove(before);
            start = before;
            end = end.max(before_end);
        }
        while let Some((&after, &after_end)) = self.by_start.range(start..=end).next() {
            self.remove(after);
            end = end.max(after_end);
        }
        self.insert(start, end);
    }

    /// A new segment at `start..end` takes that part of any released range.
    fn take(&mut self, start: u64, end: u64) {
        while let Some((&range_start, &range_end)) = self.by_start.range(..end).next_back()
            && range_end > start
        {
            self.remove(range_start);
            if range_start < start {
                self.insert(range_start, start);
            }
            if end < range_end {
                self.insert(end, range_end);
            }
            if range_start <= start {
                break;
            }
        }
    }

    /// Whether some released range holds `len` bytes.
    fn holds(&self, len: u64) -> bool {
        self.by_length.range((len, 0)..).next().is_some()
    }

    /// Of the ranges that hold `len` bytes, smallest first (ties: lowest address), the one
    /// `pick` modulo their number names.
    fn fitting(&self, len: u64, pick: u64) -> Option<(u64, u64)> {
        let mut fitting = self.by_length.range((len, 0)..);
        let index = if pick == 0 {
            0
        } else {
            pick % self.by_length.range((len, 0)..).count().max(1) as u64
        };
        let &(length, start) = fitting.nth(usize::try_from(index).ok()?)?;
        Some((start, start + length))
    }
}

/// The one of the disjoint `ranges` (start → end) that holds `at`, if any.
fn range_covering(ranges: &BTreeMap<u64, u64>, at: u64) -> Option<(u64, u64)> {
    ranges
        .range(..=at)
        .next_back()
        .filter(|&(_, &end)| end > at)
        .map(|(&start, &end)| (start, end))
}

/// Whether `start..end` overlaps none of the disjoint `ranges` (start → end): the last range
/// starting before `end` must end at or before `start`.
fn overlaps_none(ranges: &BTreeMap<u64, u64>, start: u64, end: u64) -> bool {
    ranges
        .range(..end)
        .next_back()
        .is_none_or(|(_, &range_end)| range_end <= start)
}

/// Where the CUDA driver puts a new segment of `len` bytes in `released` address space while
/// the address ranges of `live` (start → end) are taken, as its 32 MiB chunks go (measured on
/// every new segment of 375 real H200 runs by `scripts/whatif/driver_address_survey.py`: of
/// the 4,500 made while released space could hold them, this, with the smallest range's low
/// end where it names nothing, names the exact address of 2,064; that fallback alone, the best
/// of eight rules by range, names 1,084). The driver lays its address space out in
/// 32 MiB chunks: a segment under 32 MiB goes into the lowest chunk that holds a live segment
/// and has room, at the lowest address there; else, and for larger segments, at the start of
/// the highest chunk free of live segments. A chunk's room is its released space, and the top
/// of it no segment has had when what segments had there is one run from its bottom (see
/// [`top_room`]): elsewhere, room the run's segments never had may be the driver's own, or
/// another library's. `None` when no room lies so.
fn place_by_chunks(released: &ReleasedSpace, live: &BTreeMap<u64, u64>, len: u64) -> Option<u64> {
    const CHUNK: u64 = DRIVER_CHUNK_BYTES;
    let chunk_of = |address: u64| address / CHUNK * CHUNK;
    let is_free = |start: u64, end: u64| overlaps_none(live, start, end);
    if len < CHUNK {
        // Chunks holding a live segment, lowest first: a segment holds those of its two ends
        // (the chunks between are full).
        let mut last_chunk = None;
        for (&start, &end) in live {
            for chunk in [chunk_of(start), chunk_of(end.saturating_sub(1).max(start))] {
                if last_chunk.is_some_and(|last| chunk <= last) {
                    continue;
                }
                last_chunk = Some(chunk);
                if let Some(at) = room_in_chunk(released, live, chunk, len) {
                    return Some(at);
                }
            }
        }
    }
    // Chunks free of live segments, highest first.
    for (&start, &end) in released.by_start.iter().rev() {
        let Some(mut at) = end.checked_sub(len).map(chunk_of) else {
            continue;
        };
        while at >= start {
            let chunks_end = at.saturating_add(len).div_ceil(CHUNK).saturating_mul(CHUNK);
            if is_free(at, chunks_end) {
                return Some(at);
            }
            let Some(lower) = at.checked_sub(CHUNK) else {
                break;
            };
            at = lower;
        }
    }
    None
}

/// The lowest address in `chunk` with room for `len` bytes: released space there, joined to
/// the chunk's [`top_room`] where they meet.
fn room_in_chunk(
    released: &ReleasedSpace,
    live: &BTreeMap<u64, u64>,
    chunk: u64,
    len: u64,
) -> Option<u64> {
    let chunk_end = chunk.saturating_add(DRIVER_CHUNK_BYTES);
    let top = top_room(released, live, chunk);
    let first = range_covering(&released.by_start, chunk).map_or(chunk, |(start, _)| start);
    for (&start, &end) in released.by_start.range(first..chunk_end) {
        let (start, mut end) = (start.max(chunk), end.min(chunk_end));
        if let Some((top_start, top_end)) = top
            && top_start == end
        {
            end = top_end;
        }
        if end - start >= len {
            return Some(start);
        }
    }
    top.filter(|&(start, end)| end - start >= len)
        .map(|(start, _)| start)
}

/// The top of `chunk` that no segment has had, when what segments had there (live in `live`
/// or released in `released`) is one run from the chunk's bottom: the driver fills a chunk
/// from its bottom, so memory of its own or another library's placed in it would have left a
/// gap in that run. In `small_churn`'s trace the driver put 2 MiB segments there, and a 20 MiB
/// one across released space and such room, 4 of the 68 times the chunks without it did not
/// name its address.
fn top_room(released: &ReleasedSpace, live: &BTreeMap<u64, u64>, chunk: u64) -> Option<(u64, u64)> {
    let chunk_end = chunk.saturating_add(DRIVER_CHUNK_BYTES);
    let covering_end =
        |ranges: &BTreeMap<u64, u64>, at: u64| range_covering(ranges, at).map(|(_, end)| end);
    let mut held_end = chunk;
    while let Some(end) =
        covering_end(live, held_end).max(covering_end(&released.by_start, held_end))
    {
        if end >= chunk_end {
            return None;
        }
        held_end = end;
    }
    (held_end > chunk
        && overlaps_none(live, held_end, chunk_end)
        && overlaps_none(&released.by_start, held_end, chunk_end))
    .then_some((held_end, chunk_end))
}

/// The address the driver's chunks give a new segment of `len` bytes ([`place_by_chunks`]),
/// else the smallest released range that holds it, at its low end; `None` when none does.
fn place_by_chunks_or_smallest(
    released: &ReleasedSpace,
    live: &BTreeMap<u64, u64>,
    len: u64,
) -> Option<u64> {
    place_by_chunks(released, live, len)
        .or_else(|| released.fitting(len, 0).map(|(start, _)| start))
}

/// How well [`place_by_chunks_or_smallest`] named where a real run's driver put its new
/// segments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkRuleRecord {
    /// New segments made while released address space could hold them.
    pub decisions: u32,
    /// Of those, the ones the rule named the exact address of.
    pub named: u32,
}

impl ChunkRuleRecord {
    /// Surveyed by `scripts/whatif/driver_address_survey.py` over 375 real H200 runs
    /// (`docs/gpu-verification/whatif-placement/driver_addresses.txt`): new segments made while
    /// released space could hold them,
    const SURVEY_DECISIONS: u32 = 4_500;
    /// those whose address [`place_by_chunks_or_smallest`] named,
    const SURVEY_NAMED: u32 = 2_064;
    /// and of the others, those the driver put in fresh address space.
    const SURVEY_FRESH_NOT_NAMED: u32 = 693;
    /// How many of a run's own decisions the survey's rate weighs as.
    const SURVEY_WEIGHT: f64 = 2.0;

    /// How often the driver goes where its chunks say, as far as this run showed: its own
    /// rate, starting from the survey's weighed as two of its decisions (a run with no such
    /// decision gets the survey's 46 %; one whose 68 decisions all followed the chunks, 98 %).
    pub fn odds_followed(&self) -> f64 {
        let survey = f64::from(Self::SURVEY_NAMED) / f64::from(Self::SURVEY_DECISIONS);
        (f64::from(self.named) + survey * Self::SURVEY_WEIGHT)
            / (f64::from(self.decisions) + Self::SURVEY_WEIGHT)
    }

    /// When the driver did not go where its chunks say, how often it took fresh address space
    /// (693 of the survey's 2,436 such cases).
    pub const ODDS_FRESH_WHEN_NOT_FOLLOWED: f64 =
        Self::SURVEY_FRESH_NOT_NAMED as f64 / (Self::SURVEY_DECISIONS - Self::SURVEY_NAMED) as f64;

    /// Follows a real run's segments: `start` (address, size) live at the first event, then
    /// its `segment_alloc` (true) and `segment_free` (false) events with address and size.
    pub fn of_run(
        start: impl IntoIterator<Item = (u64, u64)>,
        events: impl IntoIterator<Item = (bool, u64, u64)>,
    ) -> Self {
        let mut live: BTreeMap<u64, u64> = start
            .into_iter()
            .map(|(address, size)| (address, address.saturating_add(size)))
            .collect();
        let mut released = ReleasedSpace::default();
        let mut record = ChunkRuleRecord::default();
        for (made, address, size) in events {
            let end = address.saturating_add(size);
            if !made {
                if live.remove(&address).is_some() && size > 0 {
                    released.add(address, end);
                }
                continue;
            }
            if size > 0 && released.holds(size) {
                record.decisions = record.decisions.saturating_add(1);
                let named = place_by_chunks_or_smallest(&released, &live, size);
                record.named = record
                    .named
                    .saturating_add(u32::from(named == Some(address)));
            }
            released.take(address, end);
            live.insert(address, end);
        }
        record
    }
}

/// The allocator of one device.
pub struct AllocatorModel {
    rules: AllocatorRules,
    limits: Limits,
    blocks: Vec<Block>,
    free_slots: Vec<u32>,
    /// By pool index ([`pool_index`]): 0 and 1 the default small and large pools, then two per
    /// private pool.
    pools: Vec<Pool>,
    /// The private pools' ids by number (number `n` is `private_ids[n - 1]`), for the state.
    private_ids: Vec<PoolId>,
    /// By private pool number: released by the program (its graph or `MemPool` deleted), so
    /// that releasing cached memory frees its cached segments too.
    private_freeable: Vec<bool>,
    expandable: Vec<Option<ExpandableVa>>,
    /// Live address ranges (start → end) of segments and expandable reservations, to keep
    /// invented and hinted addresses from overlapping.
    ranges: BTreeMap<u64, u64>,
    /// Address space of segments the replay released with `cudaFree` that no segment took
    /// since: the driver gives it to later segments.
    released: ReleasedSpace,
    next_synthetic: u64,
    next_generation: u32,
    pending: BTreeSet<u32>,
    /// `total_allocated_memory` (= reserved bytes).
    reserved_bytes: u64,
    allocated_bytes: u64,
    segment_count: u64,
    pub(crate) stats: ModelStats,
    /// The trace event being replayed, for the peaks' positions.
    pub(crate) event: usize,
}

/// Counters a replay reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelStats {
    pub peak_reserved_bytes: u64,
    pub peak_allocated_bytes: u64,
    /// Event at which reserved memory first reached its peak.
    pub peak_reserved_event: usize,
    pub allocated_at_peak_bytes: u64,
    pub segments_at_peak: u64,
    pub num_alloc_retries: u64,
    pub num_ooms: u64,
    pub num_device_alloc: u64,
    pub num_device_free: u64,
    /// The largest `reserved + new segment size` any successful new segment needed: a
    /// per-process cap of at least this much let every one of them through.
    pub largest_reserved_plus_segment_bytes: u64,
}

impl AllocatorModel {
    pub fn new(rules: AllocatorRules, limits: Limits) -> Self {
        AllocatorModel {
            rules,
            limits,
            blocks: Vec::new(),
            free_slots: Vec::new(),
            pools: vec![Pool::default(), Pool::default()],
            private_ids: Vec::new(),
            private_freeable: Vec::new(),
            expandable: Vec::new(),
            ranges: BTreeMap::new(),
            released: ReleasedSpace::default(),
            next_synthetic: SYNTHETIC_BASE,
            next_generation: 0,
            pending: BTreeSet::new(),
            reserved_bytes: 0,
            allocated_bytes: 0,
            segment_count: 0,
            stats: ModelStats::default(),
            event: 0,
        }
    }

    /// The limits in force; a replay may learn them as it goes (the device's memory at the
    /// first out-of-memory event).
    pub fn limits_mut(&mut self) -> &mut Limits {
        &mut self.limits
    }

    pub fn reserved_bytes(&self) -> u64 {
        self.reserved_bytes
    }

    #[cfg(test)]
    pub fn allocated_bytes(&self) -> u64 {
        self.allocated_bytes
    }

    fn handle(&self, index: u32) -> BlockHandle {
        BlockHandle {
            index,
            generation: self.blocks[index as usize].generation,
        }
    }

    /// The slot of a handle whose block is still the one it was made for.
    fn resolve(&self, handle: BlockHandle) -> Option<u32> {
        self.blocks
            .get(handle.index as usize)
            .filter(|b| b.generation == handle.generation)
            .map(|_| handle.index)
    }

    /// Address of a block (what the program got for an allocation).
    pub fn block_address(&self, handle: BlockHandle) -> Option<u64> {
        self.resolve(handle).map(|i| self.blocks[i as usize].ptr)
    }

    // ----- bookkeeping -------------------------------------------------------------------

    fn new_block(&mut self, mut block: Block) -> u32 {
        self.next_generation = self.next_generation.wrapping_add(1);
        block.generation = self.next_generation;
        if let Some(slot) = self.free_slots.pop() {
            self.blocks[slot as usize] = block;
            slot
        } else {
            self.blocks.push(block);
            (self.blocks.len() - 1) as u32
        }
    }

    fn delete_block(&mut self, index: u32) {
        self.free_slots.push(index);
    }

    fn grow_reserved(&mut self, bytes: u64) {
        self.reserved_bytes += bytes;
        if self.reserved_bytes > self.stats.peak_reserved_bytes {
            self.stats.peak_reserved_bytes = self.reserved_bytes;
            self.stats.peak_reserved_event = self.event;
            self.stats.allocated_at_peak_bytes = self.allocated_bytes;
            self.stats.segments_at_peak = self.segment_count;
        }
    }

    fn insert_free(&mut self, index: u32) {
        let block = &mut self.blocks[index as usize];
        let pool = &mut self.pools[block.pool as usize];
        block.gc_base = pool.get_free_blocks_call_count;
        pool.free
            .insert(size_key(block.stream, block.size, block.ptr), index);
    }

    fn remove_free(&mut self, index: u32) {
        let block = &self.blocks[index as usize];
        self.pools[block.pool as usize]
            .free
            .remove(&size_key(block.stream, block.size, block.ptr));
    }

    fn insert_unmapped(&mut self, index: u32) {
        let block = &self.blocks[index as usize];
        self.pools[block.pool as usize]
            .unmapped
            .insert(address_key(block.stream, block.ptr), index);
    }

    fn remove_unmapped(&mut self, index: u32) {
        let block = &self.blocks[index as usize];
        self.pools[block.pool as usize]
            .unmapped
            .remove(&address_key(block.stream, block.ptr));
    }

    fn range_is_free(&self, start: u64, len: u64) -> bool {
        overlaps_none(&self.ranges, start, start.saturating_add(len))
    }

    /// An address for a new segment of `len` bytes. The real run's segment at this request
    /// first; else released address space, when the driver reuses it (see
    /// [`Self::place_in_released`]); else the real run's segment of this size and ordinal; a
    /// hint is taken when it does not overlap a live range (cutting an older expandable
    /// reservation whose unused tail it falls into); else fresh space (see
    /// [`Self::invent_range`]).
    fn place_segment(&mut self, len: u64, hints: &mut dyn AddressHints) -> u64 {
        let offered = hints.segment_addresses(len);
        let at = self
            .place_at_hint(len, offered.same_request)
            .or_else(|| self.place_in_released(len, hints))
            .or_else(|| self.place_at_hint(len, offered.same_size))
            .unwrap_or_else(|| self.invent_range(len));
        self.released.take(at, at + len);
        at
    }

    /// `hint`, when it is one and its `len` bytes are free.
    fn place_at_hint(&mut self, len: u64, hint: Option<u64>) -> Option<u64> {
        let hint = hint.filter(|&hint| hint != 0)?;
        if !self.range_is_free(hint, len) {
            self.cut_reservation_holding(hint);
        }
        self.range_is_free(hint, len).then_some(hint)
    }

    /// The driver hands address space of segments freed earlier to new ones: in 375 real
    /// H200 runs, a segment made while a released range could hold it went into one in 3,561
    /// of 4,500 cases. The hints choose where ([`AddressHints::reuse_released`]; its chunks
    /// may name a chunk's top no segment had instead, see [`place_by_chunks`];
    /// `scripts/whatif/driver_address_survey.py`,
    /// `docs/gpu-verification/whatif-placement/driver_addresses.txt`).
    fn place_in_released(&mut self, len: u64, hints: &mut dyn AddressHints) -> Option<u64> {
        if !self.released.holds(len) {
            return None;
        }
        let at = match hints.reuse_released()? {
            ReusedRange::Chunked => place_by_chunks_or_smallest(&self.released, &self.ranges, len)?,
            ReusedRange::Range { pick, at_top } => {
                let (start, end) = self.released.fitting(len, pick)?;
                if at_top { end - len } else { start }
            }
        };
        self.range_is_free(at, len).then_some(at)
    }

    /// An address for a segment no hint placed: fresh address space below every live segment,
    /// where the driver puts most of them (of the 12,311 new segments outside released ranges
    /// in the 375 real runs, 55 % went below every live segment, 38 % between two and 7 %
    /// above all), or above every real address when there is no live segment.
    fn invent_range(&mut self, len: u64) -> u64 {
        if let Some((&lowest, _)) = self.ranges.first_key_value()
            && lowest < SYNTHETIC_BASE
            && let Some(below) = lowest.checked_sub(len)
        {
            let at = below / SYNTHETIC_ALIGN * SYNTHETIC_ALIGN;
            if at > 0 && self.range_is_free(at, len) {
                return at;
            }
        }
        let start = self.next_synthetic;
        self.next_synthetic = start
            .saturating_add(len)
            .div_ceil(SYNTHETIC_ALIGN)
            .saturating_mul(SYNTHETIC_ALIGN);
        start
    }

    /// When `address` lies in the unmapped tail of an expandable reservation, that reservation
    /// was smaller than assumed: it is cut there. Returns whether `address` is now outside
    /// every live range.
    fn cut_reservation_holding(&mut self, address: u64) -> bool {
        let containing = self
            .ranges
            .range(..=address)
            .next_back()
            .filter(|&(_, &end)| end > address)
            .map(|(&start, _)| start);
        let Some(start) = containing else {
            return true;
        };
        match self
            .expandable
            .iter()
            .position(|va| va.is_some_and(|va| va.base == start))
        {
            Some(es) => self.cut_reservation(es as u32, address),
            None => false,
        }
    }

    // ----- seeding from a reconstructed state -------------------------------------------

    /// Adds a segment that existed before the trace began (a ring buffer that wrapped, or
    /// history recorded late), in private pool `private` (0: the default pools). Returns
    /// `(address, block)` of its allocated and pending blocks.
    pub fn seed_segment(
        &mut self,
        segment: &StateSegment,
        stream: u16,
        private: u16,
        expandable_va: &mut dyn FnMut(u16, u16) -> Option<u32>,
    ) -> Vec<(u64, BlockHandle)> {
        let pool = pool_index(private, segment.pool != PoolKind::Small);
        self.ensure_pool(pool);
        let es = if segment.expandable {
            expandable_va(stream, pool).unwrap_or(NIL)
        } else {
            NIL
        };
        let mut live = Vec::new();
        let mut previous = NIL;
        for state_block in &segment.blocks {
            let block = Block {
                generation: 0,
                ptr: state_block.address,
                size: state_block.size_bytes,
                requested: state_block.requested_bytes,
                stream,
                pool,
                allocated: state_block.status == BlockStatus::Allocated,
                pending: state_block.status == BlockStatus::PendingFree,
                mapped: true,
                prev: previous,
                next: NIL,
                expandable: es,
                gc_base: 0,
                alloc_event: NIL,
            };
            let index = self.new_block(block);
            if previous != NIL {
                self.blocks[previous as usize].next = index;
            }
            previous = index;
            match state_block.status {
                BlockStatus::Free => self.insert_free(index),
                BlockStatus::Allocated => {
                    self.allocated_bytes += state_block.size_bytes;
                    live.push((state_block.address, self.handle(index)));
                }
                BlockStatus::PendingFree => {
                    self.pending.insert(index);
                    live.push((state_block.address, self.handle(index)));
                }
            }
        }
        if es == NIL {
            self.ranges.insert(segment.address, segment.end_address());
            self.segment_count += 1;
        }
        self.grow_reserved(segment.size_bytes);
        self.stats.peak_allocated_bytes = self.stats.peak_allocated_bytes.max(self.allocated_bytes);
        live
    }

    /// Creates the virtual reservation of an expandable segment that already had mapped
    /// ranges when the trace began, spanning `[base, base + va_bytes)`; the seeded mapped
    /// ranges are linked in by [`AllocatorModel::link_seeded_expandable`].
    pub fn seed_expandable_va(&mut self, base: u64, stream: u16, pool: u16) -> u32 {
        let page_bytes = self.page_bytes(pool);
        let end = self.reservation_end(base, self.limits.expandable_va_bytes);
        self.expandable.push(Some(ExpandableVa {
            base,
            end,
            page_bytes,
            stream,
            pool,
        }));
        self.ranges.insert(base, end);
        self.segment_count += 1;
        (self.expandable.len() - 1) as u32
    }

    /// Where a reservation of `len` bytes at `base` ends: at `base + len`, or earlier at the
    /// next live range (real reservations never overlap).
    fn reservation_end(&self, base: u64, len: u64) -> u64 {
        let wanted = base.saturating_add(len);
        match self.ranges.range(base.saturating_add(1)..).next() {
            Some((&next_start, _)) => wanted.min(next_start),
            None => wanted,
        }
    }

    /// A base for a new expandable reservation: the first address the real run mapped that
    /// no live segment holds (see [`AllocatorModel::cut_reservation_holding`]).
    fn place_expandable(&mut self, len: u64, hints: &[u64]) -> u64 {
        for &hint in hints {
            if hint != 0 && self.cut_reservation_holding(hint) {
                return hint;
            }
        }
        self.invent_range(len)
    }

    /// Ends reservation `es` at `at` when everything from `at` on is its unmapped tail.
    fn cut_reservation(&mut self, es: u32, at: u64) -> bool {
        let Some(Some(va)) = self.expandable.get(es as usize).copied() else {
            return false;
        };
        let tail = self.pools[va.pool as usize]
            .unmapped
            .range(..address_key(va.stream, va.end))
            .next_back()
            .map(|(_, &index)| index);
        let Some(tail) = tail else {
            return false;
        };
        let (ptr, size, next, prev) = {
            let b = &self.blocks[tail as usize];
            (b.ptr, b.size, b.next, b.prev)
        };
        if self.blocks[tail as usize].expandable != es || next != NIL || ptr > at || ptr + size < at
        {
            return false;
        }
        if at == ptr {
            self.remove_unmapped(tail);
            if prev != NIL {
                self.blocks[prev as usize].next = NIL;
            }
            self.delete_block(tail);
        } else {
            self.blocks[tail as usize].size = at - ptr;
        }
        if let Some(Some(va)) = self.expandable.get_mut(es as usize) {
            va.end = at;
        }
        self.ranges.insert(va.base, at);
        true
    }

    /// After seeding the mapped ranges of expandable segment `es` (blocks in address order),
    /// links them into one chain with unmapped blocks for the gaps and the tail.
    pub fn link_seeded_expandable(&mut self, es: u32, stream: u16, pool: u16) {
        let Some(Some(va)) = self.expandable.get(es as usize).copied() else {
            return;
        };
        let mut members: Vec<u32> = (0..self.blocks.len() as u32)
            .filter(|&i| {
                let b = &self.blocks[i as usize];
                b.expandable == es && !self.free_slots.contains(&i)
            })
            .collect();
        members.sort_by_key(|&i| self.blocks[i as usize].ptr);
        let va_end = va.end;
        let mut chain = Vec::new();
        let mut cursor = va.base;
        for index in members {
            let ptr = self.blocks[index as usize].ptr;
            if ptr > cursor {
                chain.push(self.new_unmapped(cursor, ptr - cursor, stream, pool, es));
            }
            chain.push(index);
            cursor = ptr + self.blocks[index as usize].size;
        }
        if cursor < va_end {
            chain.push(self.new_unmapped(cursor, va_end - cursor, stream, pool, es));
        }
        for pair in chain.windows(2) {
            self.blocks[pair[0] as usize].next = pair[1];
            self.blocks[pair[1] as usize].prev = pair[0];
        }
        if let (Some(&first), Some(&last)) = (chain.first(), chain.last()) {
            self.blocks[first as usize].prev = NIL;
            self.blocks[last as usize].next = NIL;
        }
    }

    fn new_unmapped(&mut self, ptr: u64, size: u64, stream: u16, pool: u16, es: u32) -> u32 {
        let index = self.new_block(Block::free_range(ptr, size, stream, pool, false, es));
        self.insert_unmapped(index);
        index
    }

    /// The page an expandable segment of `pool` maps: 2 MiB (small), the large segment size.
    fn page_bytes(&self, pool: u16) -> u64 {
        if is_small_pool(pool) {
            SMALL_BUFFER_BYTES
        } else {
            self.rules.large_segment_bytes
        }
    }

    // ----- malloc -----------------------------------------------------------------------

    /// `DeviceCachingAllocator::malloc`: a block for `orig_size` bytes on `stream`, or out of
    /// memory. `alloc_event` is the trace event the block is remembered by.
    #[cfg(test)]
    pub fn malloc(
        &mut self,
        orig_size: u64,
        stream: u16,
        alloc_event: u32,
        hints: &mut dyn AddressHints,
    ) -> Result<BlockHandle, ModelOom> {
        self.malloc_in_pool(orig_size, stream, 0, alloc_event, hints)
    }

    /// [`Self::malloc`] of a request routed to private pool `private` (0: the default pools):
    /// served from that pool's cached blocks or a new segment of its own, never by releasing
    /// cached memory (PyTorch does not while a capture or a `MemPool` routes requests).
    pub fn malloc_in_pool(
        &mut self,
        orig_size: u64,
        stream: u16,
        private: u16,
        alloc_event: u32,
        hints: &mut dyn AddressHints,
    ) -> Result<BlockHandle, ModelOom> {
        let size = self.rules.round_size(orig_size);
        let pool = pool_index(private, size > SMALL_SIZE_BYTES);
        self.ensure_pool(pool);
        let alloc_size = self.rules.allocation_size(size);
        let mut params = Params {
            size,
            stream,
            pool,
            alloc_size,
            block: NIL,
        };
        if size >= MAX_REQUEST_BYTES {
            self.stats.num_ooms += 1;
            return Err(self.oom(&params));
        }
        let mut found = self.get_free_block(&mut params);
        if !found {
            if self.limits.cap_bytes.is_some() && self.rules.garbage_collection_threshold > 0.0 {
                self.garbage_collect_cached_blocks();
            }
            found = self.alloc_block(&mut params, false, hints)
                || (self.release_available_cached_blocks(&params)
                    && self.alloc_block(&mut params, false, hints))
                || (private == 0
                    && self.release_cached_blocks()
                    && self.alloc_block(&mut params, true, hints));
        }
        if !found {
            self.stats.num_ooms += 1;
            return Err(self.oom(&params));
        }
        let split = self.should_split(params.block, size);
        let block = self.alloc_found_block(&params, orig_size, split, alloc_event);
        Ok(self.handle(block))
    }

    fn oom(&self, params: &Params) -> ModelOom {
        ModelOom {
            request_bytes: params.size,
            segment_bytes: params.alloc_size,
            reserved_bytes: self.reserved_bytes,
            allocated_bytes: self.allocated_bytes,
        }
    }

    fn expandable_active(&self) -> bool {
        self.rules.expandable_segments
    }

    /// `get_free_block`: best fit on the same stream, within the oversize rules.
    fn get_free_block(&mut self, p: &mut Params) -> bool {
        let gc_on =
            self.limits.cap_bytes.is_some() && self.rules.garbage_collection_threshold > 0.0;
        let expandable_active = self.expandable_active();
        let max_split = self.rules.max_split_size_bytes.unwrap_or(u64::MAX);
        let max_non_split_rounding = self.rules.max_non_split_rounding_bytes;
        let pool = &mut self.pools[p.pool as usize];
        if gc_on {
            pool.get_free_blocks_call_count += 1;
        }
        let start = size_key(p.stream, p.size, 0);
        let mut candidates = pool.free.range(start..);
        let Some((&first_key, &first)) = candidates.next() else {
            return false;
        };
        if key_stream(first_key) != p.stream {
            return false;
        }
        let mut chosen = first;
        let blocks = &self.blocks;
        if blocks[chosen as usize].expandable != NIL {
            if expandable_active {
                // Best fit by the size a block could grow to: its own size plus the unmapped
                // range right after it.
                let expandable_size = |index: u32| {
                    let b = &blocks[index as usize];
                    let grow = if b.next != NIL && !blocks[b.next as usize].mapped {
                        blocks[b.next as usize].size
                    } else {
                        0
                    };
                    b.size + grow
                };
                for (&key, &next) in candidates {
                    if blocks[chosen as usize].expandable == NIL
                        || key_stream(key) != p.stream
                        || expandable_size(next) >= expandable_size(chosen)
                    {
                        break;
                    }
                    chosen = next;
                }
            } else {
                // Expandable segments were turned off: use only classic blocks.
                let mut replacement = None;
                for (&key, &next) in candidates {
                    if key_stream(key) != p.stream {
                        break;
                    }
                    if blocks[next as usize].expandable == NIL {
                        replacement = Some(next);
                        break;
                    }
                }
                match replacement {
                    Some(next) => chosen = next,
                    None => return false,
                }
            }
        }
        let candidate_size = blocks[chosen as usize].size;
        if p.size < max_split && candidate_size >= max_split {
            return false;
        }
        if p.size >= max_split && candidate_size >= p.size.saturating_add(max_non_split_rounding) {
            return false;
        }
        p.block = chosen;
        self.remove_free(chosen);
        true
    }

    /// `alloc_block`: a new segment (or newly mapped pages) for the request.
    fn alloc_block(
        &mut self,
        p: &mut Params,
        is_retry: bool,
        hints: &mut dyn AddressHints,
    ) -> bool {
        if is_retry {
            self.stats.num_alloc_retries += 1;
        }
        let size = p.alloc_size;
        if let Some(cap) = self.limits.cap_bytes
            && self.reserved_bytes.saturating_add(size) > cap
        {
            return false;
        }
        let needed = self.reserved_bytes.saturating_add(size);
        if self.expandable_active() && private_of(p.pool) == 0 {
            match self.try_allocate_expandable_block(p.stream, p.pool, p.size, hints) {
                Some(block) => {
                    p.block = block;
                    self.stats.largest_reserved_plus_segment_bytes =
                        self.stats.largest_reserved_plus_segment_bytes.max(needed);
                    true
                }
                None => false,
            }
        } else {
            if let Some(limit) = self.limits.device_limit_bytes
                && self.reserved_bytes.saturating_add(size) > limit
            {
                return false;
            }
            self.stats.largest_reserved_plus_segment_bytes =
                self.stats.largest_reserved_plus_segment_bytes.max(needed);
            let ptr = self.place_segment(size, hints);
            self.ranges.insert(ptr, ptr + size);
            self.segment_count += 1;
            self.stats.num_device_alloc += 1;
            self.grow_reserved(size);
            p.block = self.new_block(Block::free_range(ptr, size, p.stream, p.pool, true, NIL));
            true
        }
    }

    fn should_split(&self, block: u32, size: u64) -> bool {
        let b = &self.blocks[block as usize];
        let remaining = b.size - size;
        if is_small_pool(b.pool) || self.expandable_active() {
            remaining >= MIN_BLOCK_BYTES
        } else {
            self.rules
                .max_split_size_bytes
                .is_none_or(|limit| size < limit)
                && remaining > SMALL_SIZE_BYTES
        }
    }

    /// `alloc_found_block`: hands out `p.block`, splitting the remainder off when `split`.
    fn alloc_found_block(
        &mut self,
        p: &Params,
        orig_size: u64,
        split: bool,
        alloc_event: u32,
    ) -> u32 {
        let mut block = p.block;
        if split {
            let remaining = block;
            let (ptr, prev, expandable) = {
                let r = &self.blocks[remaining as usize];
                (r.ptr, r.prev, r.expandable)
            };
            block = self.new_block(Block {
                prev,
                next: remaining,
                ..Block::free_range(ptr, p.size, p.stream, p.pool, true, expandable)
            });
            if prev != NIL {
                self.blocks[prev as usize].next = block;
            }
            let r = &mut self.blocks[remaining as usize];
            r.prev = block;
            r.ptr += p.size;
            r.size -= p.size;
            self.insert_free(remaining);
        }
        let b = &mut self.blocks[block as usize];
        b.allocated = true;
        b.requested = orig_size;
        b.alloc_event = alloc_event;
        self.allocated_bytes += b.size;
        if self.allocated_bytes > self.stats.peak_allocated_bytes {
            self.stats.peak_allocated_bytes = self.allocated_bytes;
        }
        block
    }

    // ----- expandable segments ------------------------------------------------------------

    /// `try_allocate_expandable_block`: maps enough pages at the lowest address with room.
    fn try_allocate_expandable_block(
        &mut self,
        stream: u16,
        pool: u16,
        size: u64,
        hints: &mut dyn AddressHints,
    ) -> Option<u32> {
        let mut candidate = self.find_expandable_block(stream, pool, size, hints);
        if !self.blocks[candidate as usize].mapped {
            let want = self.blocks[candidate as usize].size.min(size);
            if !self.map_block(candidate, want) {
                return None;
            }
        }
        while self.blocks[candidate as usize].size < size {
            let remaining = size - self.blocks[candidate as usize].size;
            let next = self.blocks[candidate as usize].next;
            if next == NIL {
                return None;
            }
            let want = remaining.min(self.blocks[next as usize].size);
            if !self.map_block(next, want) {
                return None;
            }
            candidate = next;
        }
        self.remove_free(candidate);
        Some(candidate)
    }

    fn allocatable(&self, block: u32) -> bool {
        block != NIL && {
            let b = &self.blocks[block as usize];
            !b.allocated && !b.pending
        }
    }

    /// `find_expandable_block`: the lowest free-or-unmapped stretch with room for `size`, or a
    /// new virtual reservation.
    fn find_expandable_block(
        &mut self,
        stream: u16,
        pool: u16,
        size: u64,
        hints: &mut dyn AddressHints,
    ) -> u32 {
        let start = address_key(stream, 0);
        let unmapped: Vec<u32> = self.pools[pool as usize]
            .unmapped
            .range(start..)
            .take_while(|(key, _)| (**key >> 64) as u16 == stream)
            .map(|(_, &index)| index)
            .collect();
        for index in unmapped {
            let mut candidate = index;
            let prev = self.blocks[candidate as usize].prev;
            if self.allocatable(prev) {
                candidate = prev;
            }
            let mut bytes = 0u64;
            let mut cursor = candidate;
            while bytes < size && self.allocatable(cursor) {
                bytes += self.blocks[cursor as usize].size;
                cursor = self.blocks[cursor as usize].next;
            }
            if bytes >= size {
                return candidate;
            }
        }
        let page_bytes = self.page_bytes(pool);
        let va_bytes = self
            .limits
            .expandable_va_bytes
            .div_ceil(page_bytes)
            .saturating_mul(page_bytes);
        let mapped_hints = hints.mapped_addresses();
        let base = self.place_expandable(va_bytes, &mapped_hints);
        let end = self.reservation_end(base, va_bytes);
        self.ranges.insert(base, end);
        self.segment_count += 1;
        self.expandable.push(Some(ExpandableVa {
            base,
            end,
            page_bytes,
            stream,
            pool,
        }));
        let es = (self.expandable.len() - 1) as u32;
        self.new_unmapped(base, end - base, stream, pool, es)
    }

    /// `map_block`: maps the pages under `[ptr, ptr + size)` of an unmapped block.
    fn map_block(&mut self, to_map: u32, size: u64) -> bool {
        let (ptr, block_size, es) = {
            let b = &self.blocks[to_map as usize];
            (b.ptr, b.size, b.expandable)
        };
        let Some(Some(va)) = self.expandable.get(es as usize).copied() else {
            return false;
        };
        let offset = ptr - va.base;
        let begin = offset / va.page_bytes;
        let end = (offset + size).div_ceil(va.page_bytes);
        let mapped_bytes = ((end - begin) * va.page_bytes).min(block_size);
        if mapped_bytes == 0 {
            return false;
        }
        if let Some(limit) = self.limits.device_limit_bytes
            && self.reserved_bytes.saturating_add(mapped_bytes) > limit
        {
            return false;
        }
        self.remove_unmapped(to_map);
        self.blocks[to_map as usize].mapped = true;
        if mapped_bytes < block_size {
            let (stream, pool, next) = {
                let b = &self.blocks[to_map as usize];
                (b.stream, b.pool, b.next)
            };
            let remaining = self.new_unmapped(
                ptr + mapped_bytes,
                block_size - mapped_bytes,
                stream,
                pool,
                es,
            );
            self.blocks[remaining as usize].prev = to_map;
            self.blocks[remaining as usize].next = next;
            if next != NIL {
                self.blocks[next as usize].prev = remaining;
            }
            self.blocks[to_map as usize].next = remaining;
            self.blocks[to_map as usize].size = mapped_bytes;
        }
        let prev = self.blocks[to_map as usize].prev;
        self.try_merge_blocks(to_map, prev);
        let next = self.blocks[to_map as usize].next;
        self.try_merge_blocks(to_map, next);
        self.insert_free(to_map);
        self.stats.num_device_alloc += 1;
        self.grow_reserved(mapped_bytes);
        true
    }

    /// `unmap_block`: unmaps the whole pages inside a free block of an expandable segment.
    fn unmap_block(&mut self, block: u32) {
        let (ptr, size, es, stream, pool) = {
            let b = &self.blocks[block as usize];
            (b.ptr, b.size, b.expandable, b.stream, b.pool)
        };
        let Some(Some(va)) = self.expandable.get(es as usize).copied() else {
            return;
        };
        let begin = (ptr - va.base).div_ceil(va.page_bytes);
        let end = (ptr + size - va.base) / va.page_bytes;
        if begin >= end {
            return;
        }
        let unmapped_ptr = va.base + begin * va.page_bytes;
        let unmapped_size = (end - begin) * va.page_bytes;
        self.remove_free(block);
        let before_size = unmapped_ptr - ptr;
        if before_size > 0 {
            let prev = self.blocks[block as usize].prev;
            let before = self.new_block(Block {
                prev,
                next: block,
                ..Block::free_range(ptr, before_size, stream, pool, true, es)
            });
            if prev != NIL {
                self.blocks[prev as usize].next = before;
            }
            self.blocks[block as usize].prev = before;
            self.insert_free(before);
        }
        let after_size = size - before_size - unmapped_size;
        if after_size > 0 {
            let next = self.blocks[block as usize].next;
            let after = self.new_block(Block {
                prev: block,
                next,
                ..Block::free_range(
                    unmapped_ptr + unmapped_size,
                    after_size,
                    stream,
                    pool,
                    true,
                    es,
                )
            });
            if next != NIL {
                self.blocks[next as usize].prev = after;
            }
            self.blocks[block as usize].next = after;
            self.insert_free(after);
        }
        {
            let b = &mut self.blocks[block as usize];
            b.ptr = unmapped_ptr;
            b.size = unmapped_size;
            b.mapped = false;
        }
        let prev = self.blocks[block as usize].prev;
        self.try_merge_blocks(block, prev);
        let next = self.blocks[block as usize].next;
        self.try_merge_blocks(block, next);
        self.insert_unmapped(block);
        self.reserved_bytes -= unmapped_size;
        self.stats.num_device_free += 1;
    }

    fn release_expandable_segment(&mut self, block: u32) {
        let es = self.blocks[block as usize].expandable;
        if let Some(Some(va)) = self.expandable.get(es as usize).copied() {
            self.ranges.remove(&va.base);
            self.expandable[es as usize] = None;
            self.segment_count -= 1;
        }
        self.remove_unmapped(block);
        self.delete_block(block);
    }

    // ----- free ---------------------------------------------------------------------------

    /// `free`: the program frees a block; with uses on other streams it waits for them
    /// (`deferred`) until [`AllocatorModel::complete_free`] or a synchronising release.
    /// Returns false when the handle is stale or its block is not allocated (a trace that
    /// contradicts the state).
    pub fn free(&mut self, handle: BlockHandle, deferred: bool) -> bool {
        let Some(block) = self.resolve(handle) else {
            return false;
        };
        let b = &mut self.blocks[block as usize];
        if !b.allocated {
            return false;
        }
        b.allocated = false;
        self.allocated_bytes -= b.size;
        if deferred {
            b.pending = true;
            self.pending.insert(block);
        } else {
            self.free_block(block);
        }
        true
    }

    /// The other streams' work on a deferred free completed (`process_events`). Nothing to do
    /// when a synchronising release already completed it.
    pub fn complete_free(&mut self, handle: BlockHandle) {
        if let Some(block) = self.resolve(handle)
            && self.pending.remove(&block)
        {
            self.free_block(block);
        }
    }

    /// `free_block`: back into the pool, merged with free neighbours.
    fn free_block(&mut self, block: u32) {
        self.blocks[block as usize].pending = false;
        let prev = self.blocks[block as usize].prev;
        self.try_merge_blocks(block, prev);
        let next = self.blocks[block as usize].next;
        self.try_merge_blocks(block, next);
        self.insert_free(block);
    }

    /// `try_merge_blocks`: `dst` absorbs `src` when `src` is free and mapped alike. `dst` is
    /// in no pool set while this runs (its key changes).
    fn try_merge_blocks(&mut self, dst: u32, src: u32) -> u64 {
        if src == NIL {
            return 0;
        }
        {
            let s = &self.blocks[src as usize];
            let d = &self.blocks[dst as usize];
            if s.allocated || s.pending || s.mapped != d.mapped {
                return 0;
            }
        }
        if self.blocks[src as usize].mapped {
            self.remove_free(src);
        } else {
            self.remove_unmapped(src);
        }
        let s = self.blocks[src as usize].clone();
        let d = &mut self.blocks[dst as usize];
        if d.prev == src {
            d.ptr = s.ptr;
            d.prev = s.prev;
            if s.prev != NIL {
                self.blocks[s.prev as usize].next = dst;
            }
        } else {
            d.next = s.next;
            if s.next != NIL {
                self.blocks[s.next as usize].prev = dst;
            }
        }
        self.blocks[dst as usize].size += s.size;
        self.delete_block(src);
        s.size
    }

    // ----- releasing cached memory -----------------------------------------------------

    /// `release_block`: `cudaFree` of a whole cached segment.
    fn release_block(&mut self, block: u32) {
        self.remove_free(block);
        let (ptr, size) = {
            let b = &self.blocks[block as usize];
            (b.ptr, b.size)
        };
        self.ranges.remove(&ptr);
        self.released.add(ptr, ptr + size);
        self.reserved_bytes -= size;
        self.segment_count -= 1;
        self.stats.num_device_free += 1;
        self.delete_block(block);
    }

    /// `release_available_cached_blocks`: with a split limit, frees the smallest oversize
    /// cached block that covers the request, or several largest-first.
    fn release_available_cached_blocks(&mut self, p: &Params) -> bool {
        let Some(max_split) = self.rules.max_split_size_bytes else {
            return false;
        };
        let key_size = p.size.max(max_split);
        let pool = &self.pools[p.pool as usize];
        let search = size_key(p.stream, key_size, 0);
        let at = pool.free.range(search..).next().map(|(&k, &v)| (k, v));
        let single = match at {
            Some((key, index))
                if key_stream(key) == p.stream && self.blocks[index as usize].expandable == NIL =>
            {
                Some(index)
            }
            _ => None,
        };
        if let Some(index) = single {
            self.release_block(index);
            return true;
        }
        // No single block is large enough: free oversize blocks, largest first.
        let mut total_released = 0u64;
        let mut cursor = match self.pools[p.pool as usize].free.range(..search).next_back() {
            Some((&key, _)) => key,
            None => return false,
        };
        while let Some(&index) = self.pools[p.pool as usize].free.get(&cursor) {
            let b = &self.blocks[index as usize];
            if total_released >= key_size || b.size < max_split || b.stream != p.stream {
                break;
            }
            let previous = self.pools[p.pool as usize]
                .free
                .range(..cursor)
                .next_back()
                .map(|(&k, _)| k);
            if b.expandable == NIL {
                total_released += b.size;
                self.release_block(index);
            }
            match previous {
                Some(key) => cursor = key,
                None => break,
            }
        }
        total_released >= key_size
    }

    /// `release_cached_blocks`: waits for every pending free, then frees every cached block that
    /// is a whole segment of the default pools or of a released private pool, and unmaps the free
    /// pages of expandable segments.
    pub fn release_cached_blocks(&mut self) -> bool {
        let pending: Vec<u32> = std::mem::take(&mut self.pending).into_iter().collect();
        for block in pending {
            self.free_block(block);
        }
        let freeable = (1..self.private_freeable.len())
            .filter(|&private| self.private_freeable[private])
            .filter_map(|private| u16::try_from(private).ok());
        let pools: Vec<u16> = [0u16]
            .into_iter()
            .chain(freeable)
            .flat_map(|private| [pool_index(private, true), pool_index(private, false)])
            .filter(|&pool| usize::from(pool) < self.pools.len())
            .collect();
        for pool in pools {
            let entries: Vec<u32> = self.pools[pool as usize].free.values().copied().collect();
            let mut to_unmap = Vec::new();
            for index in entries {
                let b = &self.blocks[index as usize];
                if b.expandable != NIL {
                    to_unmap.push(index);
                } else if !b.is_split() {
                    self.release_block(index);
                }
            }
            for index in to_unmap {
                self.unmap_block(index);
                let b = &self.blocks[index as usize];
                if !b.mapped && !b.is_split() {
                    self.release_expandable_segment(index);
                }
            }
        }
        true
    }

    /// `empty_cache()` from the program.
    pub fn empty_cache(&mut self) {
        self.release_cached_blocks();
    }

    /// Names the private pools (number `n` is `ids[n - 1]`), for the state the model reports.
    pub fn name_private_pools(&mut self, ids: &[PoolId]) {
        self.private_ids = ids.to_vec();
    }

    /// `releasePool`: the program released private pool `private` (its graph, or its `MemPool`,
    /// was deleted); its cached segments are freed by the next release of cached memory.
    pub fn release_pool(&mut self, private: u16) {
        let private = usize::from(private);
        if private == 0 {
            return;
        }
        if self.private_freeable.len() <= private {
            self.private_freeable.resize(private + 1, false);
        }
        self.private_freeable[private] = true;
    }

    /// Makes room for pool index `pool` (a private pool's pools appear on first use).
    fn ensure_pool(&mut self, pool: u16) {
        let needed = usize::from(pool) + 1;
        if self.pools.len() < needed {
            self.pools.resize_with(needed, Pool::default);
        }
    }

    /// `garbage_collect_cached_blocks`: under a cap, frees cached whole segments of the large
    /// pool that are older than average until reserved memory is back under the threshold.
    fn garbage_collect_cached_blocks(&mut self) {
        let Some(cap) = self.limits.cap_bytes else {
            return;
        };
        let gc_threshold = (self.rules.garbage_collection_threshold * cap as f64) as u64;
        if self.reserved_bytes <= gc_threshold {
            return;
        }
        let target = self.reserved_bytes - gc_threshold;
        let counter = self.pools[1].get_free_blocks_call_count;
        let age = |b: &Block| (counter - b.gc_base).max(0) as u64;
        let mut total_age = 0u64;
        let mut freeable = 0u64;
        for &index in self.pools[1].free.values() {
            let b = &self.blocks[index as usize];
            if !b.is_split() {
                total_age += age(b);
                freeable += 1;
            }
        }
        if freeable == 0 {
            return;
        }
        let mut reclaimed = 0u64;
        let mut block_freed = true;
        while reclaimed < target && block_freed && freeable > 0 {
            let age_threshold = total_age as f64 / freeable as f64;
            block_freed = false;
            let entries: Vec<u32> = self.pools[1].free.values().copied().collect();
            for index in entries {
                let b = &self.blocks[index as usize];
                if !b.is_split() && b.expandable == NIL && age(b) as f64 >= age_threshold {
                    block_freed = true;
                    reclaimed += b.size;
                    total_age = total_age.saturating_sub(age(b));
                    freeable -= 1;
                    self.release_block(index);
                }
            }
        }
    }

    // ----- state export -----------------------------------------------------------------

    /// The model's state in time travel's terms (segments as a snapshot reports them: one per
    /// cudaMalloc, one per contiguous mapped range of an expandable segment).
    pub fn state(&self, device: u32, streams: &[u64]) -> AllocatorState {
        let mut free = vec![false; self.blocks.len()];
        for &slot in &self.free_slots {
            free[slot as usize] = true;
        }
        let mut segments = Vec::new();
        for (index, head) in self.blocks.iter().enumerate() {
            if free[index] || head.prev != NIL {
                continue;
            }
            let stream = streams.get(head.stream as usize).copied().unwrap_or(0);
            let pool = if is_small_pool(head.pool) {
                PoolKind::Small
            } else {
                PoolKind::Large
            };
            let pool_id = usize::from(private_of(head.pool))
                .checked_sub(1)
                .and_then(|n| self.private_ids.get(n))
                .copied()
                .unwrap_or_default();
            let mut cursor = index as u32;
            let mut current: Vec<StateBlock> = Vec::new();
            let flush = |blocks: &mut Vec<StateBlock>, segments: &mut Vec<StateSegment>| {
                if let Some(first) = blocks.first() {
                    segments.push(StateSegment {
                        address: first.address,
                        size_bytes: blocks.iter().map(|b| b.size_bytes).sum(),
                        stream,
                        pool,
                        pool_id,
                        expandable: head.expandable != NIL,
                        blocks: std::mem::take(blocks),
                    });
                }
            };
            while cursor != NIL {
                let b = &self.blocks[cursor as usize];
                if b.mapped {
                    let status = if b.allocated {
                        BlockStatus::Allocated
                    } else if b.pending {
                        BlockStatus::PendingFree
                    } else {
                        BlockStatus::Free
                    };
                    current.push(StateBlock {
                        address: b.ptr,
                        size_bytes: b.size,
                        requested_bytes: if status == BlockStatus::Free {
                            0
                        } else {
                            b.requested
                        },
                        status,
                        origin: if b.alloc_event != NIL && status != BlockStatus::Free {
                            BlockOrigin::AllocEvent(b.alloc_event)
                        } else {
                            BlockOrigin::Unknown
                        },
                    });
                } else {
                    flush(&mut current, &mut segments);
                }
                cursor = b.next;
            }
            flush(&mut current, &mut segments);
        }
        AllocatorState::from_segments(device, segments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MIB;

    fn model(rules: AllocatorRules, cap_bytes: Option<u64>) -> AllocatorModel {
        AllocatorModel::new(
            rules,
            Limits {
                cap_bytes,
                device_limit_bytes: None,
                expandable_va_bytes: 1 << 34,
            },
        )
    }

    fn alloc(m: &mut AllocatorModel, bytes: u64) -> BlockHandle {
        m.malloc(bytes, 0, 0, &mut NoHints).expect("fits")
    }

    fn segments(m: &AllocatorModel) -> Vec<(u64, Vec<(u64, BlockStatus)>)> {
        m.state(0, &[0])
            .segments
            .iter()
            .map(|s| {
                (
                    s.size_bytes,
                    s.blocks.iter().map(|b| (b.size_bytes, b.status)).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn small_requests_share_a_two_mebibyte_segment() {
        let mut m = model(AllocatorRules::default(), None);
        let a = alloc(&mut m, 1000);
        let b = alloc(&mut m, 100);
        assert_eq!(m.reserved_bytes(), 2 * MIB);
        assert_eq!(m.allocated_bytes(), 1024 + 512);
        assert_eq!(m.block_address(b), m.block_address(a).map(|x| x + 1024));
        assert!(m.free(a, false));
        assert!(m.free(b, false));
        assert_eq!(
            segments(&m),
            vec![(2 * MIB, vec![(2 * MIB, BlockStatus::Free)])]
        );
        // A freed handle is no longer the program's.
        assert!(!m.free(a, false));
    }

    #[test]
    fn mid_requests_split_a_twenty_mebibyte_segment_and_large_ones_get_their_own() {
        let mut m = model(AllocatorRules::default(), None);
        let a = alloc(&mut m, 5 * MIB);
        assert_eq!(m.reserved_bytes(), 20 * MIB);
        let b = alloc(&mut m, 30 * MIB + 1);
        // 30 MiB + 1 rounds to 30 MiB + 512 and gets a segment rounded to 2 MiB.
        assert_eq!(m.reserved_bytes(), 20 * MIB + 32 * MIB);
        let b_address = m.block_address(b);
        assert!(m.free(b, false));
        // 28 MiB fits the cached 32 MiB block; 4 MiB remain, more than 1 MiB: split.
        let c = alloc(&mut m, 28 * MIB);
        assert_eq!(m.reserved_bytes(), 52 * MIB);
        assert_eq!(m.block_address(c), b_address);
        let state = segments(&m);
        assert_eq!(state[1].1[0], (28 * MIB, BlockStatus::Allocated));
        assert_eq!(state[1].1[1].1, BlockStatus::Free);
        let _ = a;
    }

    #[test]
    fn oversize_blocks_are_not_split_and_serve_only_close_requests() {
        let rules = AllocatorRules {
            max_split_size_bytes: Some(64 * MIB),
            ..AllocatorRules::default()
        };
        let mut m = model(rules, None);
        let big = alloc(&mut m, 100 * MIB);
        assert!(m.free(big, false));
        // 90 MiB is oversize too and within 20 MiB: it takes the whole 100 MiB block unsplit.
        let close = alloc(&mut m, 90 * MIB);
        assert_eq!(m.reserved_bytes(), 100 * MIB);
        assert!(m.free(close, false));
        // 70 MiB is 30 MiB below: not served from it; a new segment is made.
        let _far = alloc(&mut m, 70 * MIB);
        assert_eq!(m.reserved_bytes(), 170 * MIB);
        // A normal request never takes an oversize block: the cached 100 MiB stays whole.
        let _normal = alloc(&mut m, 30 * MIB);
        assert_eq!(m.reserved_bytes(), 200 * MIB);
    }

    /// Offers one real address for the first new segment, then none, and a fixed choice of
    /// released range.
    struct FirstAddress {
        address: Option<u64>,
        reuse: Option<ReusedRange>,
    }

    impl AddressHints for FirstAddress {
        fn segment_addresses(&mut self, _size_bytes: u64) -> SegmentHints {
            SegmentHints {
                same_request: None,
                same_size: self.address.take(),
            }
        }
        fn reuse_released(&mut self) -> Option<ReusedRange> {
            self.reuse
        }
        fn mapped_addresses(&mut self) -> Vec<u64> {
            Vec::new()
        }
    }

    /// Three 30 MiB segments under a 100 MiB cap, the first at `X`; the upper two freed and
    /// released for a 50 MiB request. Returns (X, where the 50 MiB segment went).
    fn segment_after_release(reuse: Option<ReusedRange>) -> (u64, Option<u64>) {
        const X: u64 = 0x7f00_0000_0000;
        let mut m = model(AllocatorRules::default(), Some(100 * MIB));
        let mut hints = FirstAddress {
            address: Some(X),
            reuse,
        };
        let mut alloc = |m: &mut AllocatorModel, size: u64| {
            m.malloc(size, 0, 0, &mut hints)
                .unwrap_or_else(|oom| panic!("{oom:?}"))
        };
        let a = alloc(&mut m, 30 * MIB);
        let b = alloc(&mut m, 30 * MIB);
        let c = alloc(&mut m, 30 * MIB);
        // Fresh address space goes down, below every live segment.
        assert_eq!(m.block_address(a), Some(X));
        assert_eq!(m.block_address(b), Some(X - 30 * MIB));
        assert_eq!(m.block_address(c), Some(X - 60 * MIB));
        assert!(m.free(a, false));
        assert!(m.free(b, false));
        // 90 + 50 > 100: the two cached segments are released (one 60 MiB range, X - 30 MiB
        // to X + 30 MiB), then the retry makes a new segment.
        let d = alloc(&mut m, 50 * MIB);
        assert_eq!(m.stats.num_device_free, 2);
        assert_eq!(m.reserved_bytes(), 80 * MIB);
        (X, m.block_address(d))
    }

    #[test]
    fn released_space_merges_neighbours_and_gives_up_what_a_segment_takes() {
        let ranges = |space: &ReleasedSpace| {
            assert_eq!(space.by_length.len(), space.by_start.len());
            space
                .by_start
                .iter()
                .map(|(&start, &end)| (start, end))
                .collect::<Vec<_>>()
        };
        let mut space = ReleasedSpace::default();
        space.add(100, 130);
        space.add(200, 210);
        // Adjacent on both sides: one range 100..210.
        space.add(130, 200);
        assert_eq!(ranges(&space), vec![(100, 210)]);
        space.add(300, 320);
        space.add(400, 450);
        // A segment in the middle of 100..210 leaves both ends.
        space.take(120, 150);
        assert_eq!(
            ranges(&space),
            vec![(100, 120), (150, 210), (300, 320), (400, 450)]
        );
        // Smallest first among those that hold 20 bytes: 100..120 and 300..320 (20 each, lower
        // address first), then 400..450, then 150..210.
        assert_eq!(space.fitting(20, 0), Some((100, 120)));
        assert_eq!(space.fitting(20, 1), Some((300, 320)));
        assert_eq!(space.fitting(20, 3), Some((150, 210)));
        assert_eq!(space.fitting(20, 4), Some((100, 120)));
        assert_eq!(space.fitting(55, 0), Some((150, 210)));
        assert!(!space.holds(61));
        // A segment over several ranges takes all it covers.
        space.take(110, 420);
        assert_eq!(ranges(&space), vec![(100, 110), (420, 450)]);
    }

    /// Chunk-aligned base of the driver-chunk tests.
    const B: u64 = 0x7f00_0000_0000;

    fn live_ranges(ranges: &[(u64, u64)]) -> BTreeMap<u64, u64> {
        ranges
            .iter()
            .map(|&(start, len)| (start, start + len))
            .collect()
    }

    #[test]
    fn the_driver_chunks_fill_the_lowest_chunk_holding_a_segment_then_the_highest_empty_one() {
        // Live: 2 MiB at the bottom of chunk B and of chunk B + 64 MiB, and 2 MiB at B + 20 MiB.
        // Released: 10 MiB above the first, 30 MiB above the second, and two whole chunks at
        // B + 128 MiB. Chunk B's 8 MiB between its released space and its third segment no
        // segment had: it may hold another's memory, so it is no room.
        let live = live_ranges(&[
            (B, 2 * MIB),
            (B + 20 * MIB, 2 * MIB),
            (B + 64 * MIB, 2 * MIB),
        ]);
        let mut released = ReleasedSpace::default();
        released.add(B + 2 * MIB, B + 12 * MIB);
        released.add(B + 66 * MIB, B + 96 * MIB);
        released.add(B + 128 * MIB, B + 192 * MIB);
        // The lowest chunk with a live segment and room, at the lowest address there.
        assert_eq!(
            place_by_chunks(&released, &live, 8 * MIB),
            Some(B + 2 * MIB)
        );
        // No room in the lowest: the next chunk holding a segment, though a whole chunk is free.
        assert_eq!(
            place_by_chunks(&released, &live, 20 * MIB),
            Some(B + 66 * MIB)
        );
        // No chunk holding a segment has room: the start of the highest free chunk.
        assert_eq!(
            place_by_chunks(&released, &live, 31 * MIB),
            Some(B + 160 * MIB)
        );
        // A segment of a chunk or more goes to free chunks only, from a chunk's start.
        assert_eq!(
            place_by_chunks(&released, &live, 40 * MIB),
            Some(B + 128 * MIB)
        );
        assert_eq!(place_by_chunks(&released, &live, 65 * MIB), None);
        // Released space that neither shares a chunk with a live segment nor starts a chunk is
        // not where the chunks put anything.
        let mut unaligned = ReleasedSpace::default();
        unaligned.add(B + 40 * MIB, B + 60 * MIB);
        let full = live_ranges(&[(B, 32 * MIB)]);
        assert_eq!(place_by_chunks(&unaligned, &full, 10 * MIB), None);
    }

    #[test]
    fn a_chunks_top_no_segment_had_is_room_when_its_segments_held_one_run_from_its_bottom() {
        // Chunk B: 2 MiB live at its bottom, 8 MiB released above it: one run to B + 10 MiB,
        // so the 22 MiB above are room too, and join the released space (as a 20 MiB segment
        // of `small_churn` went, across both).
        let live = live_ranges(&[(B, 2 * MIB), (B + 64 * MIB, 2 * MIB)]);
        let mut released = ReleasedSpace::default();
        released.add(B + 2 * MIB, B + 10 * MIB);
        assert_eq!(
            top_room(&released, &live, B),
            Some((B + 10 * MIB, B + 32 * MIB))
        );
        assert_eq!(
            place_by_chunks(&released, &live, 20 * MIB),
            Some(B + 2 * MIB)
        );
        // Chunk B + 64 MiB: nothing released, its top is room: a 2 MiB segment goes on the
        // run when the lower chunk is full.
        let full = live_ranges(&[(B, 32 * MIB), (B + 64 * MIB, 2 * MIB)]);
        let none = ReleasedSpace::default();
        assert_eq!(top_room(&none, &full, B), None);
        assert_eq!(place_by_chunks(&none, &full, 2 * MIB), Some(B + 66 * MIB));
        // A run that does not start at the chunk's bottom, or a gap in it, leaves no room
        // known to be free.
        let raised = live_ranges(&[(B + 4 * MIB, 2 * MIB)]);
        assert_eq!(top_room(&none, &raised, B), None);
        let gapped = live_ranges(&[(B, 2 * MIB), (B + 8 * MIB, 2 * MIB)]);
        assert_eq!(top_room(&none, &gapped, B), None);
        assert_eq!(place_by_chunks(&none, &gapped, 2 * MIB), None);
    }

    #[test]
    fn a_runs_record_counts_the_segments_its_driver_put_where_the_chunks_say() {
        let record = ChunkRuleRecord::of_run(
            [(B, 20 * MIB)],
            [
                (true, B + 32 * MIB, 20 * MIB),
                (false, B + 32 * MIB, 20 * MIB),
                // Released space could hold it, and it went where the chunks say.
                (true, B + 32 * MIB, 20 * MIB),
                (false, B, 20 * MIB),
                // The chunks say B + 52 MiB (the top of the live segment's chunk, which no
                // segment had), the driver chose fresh space.
                (true, B + 96 * MIB, 2 * MIB),
                // It went to that top: where the chunks say.
                (true, B + 52 * MIB, 2 * MIB),
                // No released space left that could hold it: not a decision.
                (true, B + 98 * MIB, 30 * MIB),
            ],
        );
        assert_eq!(
            record,
            ChunkRuleRecord {
                decisions: 3,
                named: 2
            }
        );
    }

    #[test]
    fn the_odds_of_following_the_chunks_go_from_the_surveys_to_the_runs_own() {
        let survey = ChunkRuleRecord::default().odds_followed();
        assert!((survey - 2_064.0 / 4_500.0).abs() < 1e-12, "{survey}");
        let always = ChunkRuleRecord {
            decisions: 68,
            named: 68,
        };
        assert!(always.odds_followed() > 0.98 && always.odds_followed() < 1.0);
        let never = ChunkRuleRecord {
            decisions: 68,
            named: 0,
        };
        assert!(never.odds_followed() < 0.02 && never.odds_followed() > 0.0);
        let fresh = ChunkRuleRecord::ODDS_FRESH_WHEN_NOT_FOLLOWED;
        assert!((fresh - 693.0 / 2_436.0).abs() < 1e-12, "{fresh}");
    }

    #[test]
    fn a_new_segment_goes_where_the_driver_chose_in_released_address_space() {
        let low_end = ReusedRange::Range {
            pick: 0,
            at_top: false,
        };
        let (x, at) = segment_after_release(Some(low_end));
        assert_eq!(at, Some(x - 30 * MIB));
        let high_end = ReusedRange::Range {
            pick: 0,
            at_top: true,
        };
        let (x, at) = segment_after_release(Some(high_end));
        assert_eq!(at, Some(x + 30 * MIB - 50 * MIB));
        // Where the chunks say: no chunk of the range X - 30 MiB .. X + 30 MiB is free for
        // 50 MiB from its start, so the smallest range, at its low end.
        let (x, at) = segment_after_release(Some(ReusedRange::Chunked));
        assert_eq!(at, Some(x - 30 * MIB));
        // Fresh address space instead: below the live segment at X - 60 MiB.
        let (x, at) = segment_after_release(None);
        assert_eq!(at, Some(x - 110 * MIB));
    }

    #[test]
    fn a_cap_releases_cached_segments_and_retries_before_running_out() {
        let mut m = model(AllocatorRules::default(), Some(100 * MIB));
        let a = alloc(&mut m, 60 * MIB);
        assert!(m.free(a, false));
        // A cached block big enough is reused without a new segment.
        let b = alloc(&mut m, 50 * MIB);
        assert_eq!(m.reserved_bytes(), 60 * MIB);
        assert!(m.free(b, false));
        // 60 cached + 70 new > 100: the cached segment is released, then the retry fits.
        let _c = alloc(&mut m, 70 * MIB);
        assert_eq!(m.reserved_bytes(), 70 * MIB);
        assert_eq!(m.stats.num_alloc_retries, 1);
        let oom = m.malloc(40 * MIB, 0, 0, &mut NoHints).unwrap_err();
        assert_eq!(oom.segment_bytes, 40 * MIB);
        assert_eq!(oom.reserved_bytes, 70 * MIB);
        assert_eq!(m.stats.num_ooms, 1);
        assert_eq!(m.stats.peak_reserved_bytes, 70 * MIB);
    }

    #[test]
    fn expandable_segments_grow_by_pages_and_give_back_free_pages() {
        let rules = AllocatorRules {
            expandable_segments: true,
            ..AllocatorRules::default()
        };
        let mut m = model(rules, None);
        let a = alloc(&mut m, 30 * MIB);
        // Two 20 MiB pages mapped; the rest of the block is a free 10 MiB tail.
        assert_eq!(m.reserved_bytes(), 40 * MIB);
        let b = alloc(&mut m, 3 * MIB);
        assert_eq!(m.reserved_bytes(), 40 * MIB);
        assert_eq!(m.block_address(b), m.block_address(a).map(|x| x + 30 * MIB));
        let c = alloc(&mut m, 25 * MIB);
        // 7 MiB left, 25 needed: one more page maps and merges with the free tail.
        assert_eq!(m.reserved_bytes(), 60 * MIB);
        assert_eq!(m.block_address(c), m.block_address(a).map(|x| x + 33 * MIB));
        let state = m.state(0, &[0]);
        assert_eq!(state.segments.len(), 1, "one contiguous mapped range");
        assert!(m.free(a, false));
        m.empty_cache();
        // The first page is wholly free and unmapped; the partly used second page stays.
        assert_eq!(m.reserved_bytes(), 40 * MIB);
        assert_eq!(m.state(0, &[0]).segments.len(), 1);
        assert!(m.free(b, false));
        assert!(m.free(c, false));
        m.empty_cache();
        assert_eq!(m.reserved_bytes(), 0);
        assert!(m.state(0, &[0]).segments.is_empty());
    }

    #[test]
    fn deferred_frees_wait_for_completion_or_a_synchronising_release() {
        let mut m = model(AllocatorRules::default(), None);
        let a = alloc(&mut m, 40 * MIB);
        assert!(m.free(a, true));
        // Still pending: a new request cannot reuse it.
        let b = alloc(&mut m, 40 * MIB);
        assert_eq!(m.reserved_bytes(), 80 * MIB);
        m.complete_free(a);
        assert!(m.free(b, true));
        m.empty_cache();
        assert_eq!(m.reserved_bytes(), 0);
        // Completing a free the release already completed is harmless.
        m.complete_free(b);
        assert_eq!(m.reserved_bytes(), 0);
    }

    #[test]
    fn garbage_collection_frees_old_cached_segments_under_a_cap() {
        let rules = AllocatorRules {
            garbage_collection_threshold: 0.5,
            ..AllocatorRules::default()
        };
        let mut m = model(rules, Some(200 * MIB));
        let old = alloc(&mut m, 60 * MIB);
        let young = alloc(&mut m, 50 * MIB);
        assert!(m.free(old, false));
        // Searches age the cached 60 MiB block.
        for _ in 0..4 {
            let t = alloc(&mut m, 12 * MIB);
            assert!(m.free(t, false));
        }
        assert!(m.free(young, false));
        let reserved_before = m.reserved_bytes();
        // A request no cached block fits: reserved is above half the cap, so the collector
        // frees the older cached segment before asking for a new one.
        let _big = alloc(&mut m, 70 * MIB);
        assert!(m.reserved_bytes() < reserved_before + 70 * MIB);
        assert_eq!(m.stats.num_alloc_retries, 0);
    }

    /// A private pool (a CUDA graph's): its blocks serve only requests routed to it, stay in it
    /// when freed, are not released by `empty_cache()` until the program released the pool, and
    /// a request routed to it that does not fit fails without releasing the default pools'
    /// cached memory (PyTorch cannot while a capture is under way).
    #[test]
    fn a_private_pools_memory_serves_only_its_own_requests() {
        let mut m = model(AllocatorRules::default(), None);
        m.name_private_pools(&[PoolId(1, 0)]);
        let in_pool = m
            .malloc_in_pool(30 * MIB, 0, 1, 0, &mut NoHints)
            .expect("fits");
        assert!(m.free(in_pool, false));
        // The default pool makes its own segment: the graph's cached block is not for it.
        let outside = alloc(&mut m, 30 * MIB);
        assert_eq!(m.reserved_bytes(), 60 * MIB);
        let pools: Vec<PoolId> = m
            .state(0, &[0])
            .segments
            .iter()
            .map(|s| s.pool_id)
            .collect();
        assert!(pools.contains(&PoolId(1, 0)) && pools.contains(&PoolId(0, 0)));
        // A routed request reuses its pool's cached block.
        let again = m
            .malloc_in_pool(30 * MIB, 0, 1, 0, &mut NoHints)
            .expect("fits");
        assert_eq!(m.reserved_bytes(), 60 * MIB);
        assert!(m.free(again, false) && m.free(outside, false));
        // empty_cache() keeps the live pool's segment, and frees it once the pool is released.
        m.empty_cache();
        assert_eq!(m.reserved_bytes(), 30 * MIB);
        m.release_pool(1);
        m.empty_cache();
        assert_eq!(m.reserved_bytes(), 0);
        // Under a cap, a routed request that does not fit fails with the default pools' cached
        // segment still there; a default request releases it and fits.
        let mut capped = model(AllocatorRules::default(), Some(40 * MIB));
        let cached = alloc(&mut capped, 30 * MIB);
        assert!(capped.free(cached, false));
        assert!(
            capped
                .malloc_in_pool(30 * MIB, 0, 1, 0, &mut NoHints)
                .is_err()
        );
        assert_eq!(capped.reserved_bytes(), 30 * MIB);
        assert!(capped.malloc(35 * MIB, 0, 0, &mut NoHints).is_ok());
    }
}
