//! A small, independent simulation of PyTorch's caching allocator that writes a trace and a final
//! snapshot, so that time travel can be checked against states known for sure and benchmarked on
//! millions of events. Shared by `tests/allocator_*.rs` and `benches/blockmap.rs`.

use vramscope_core::analysis::allocator_rules::AllocatorRules;
use vramscope_core::model::allocator::{
    AllocatorSnapshot, Block, BlockState, DeviceAllocState, DeviceTrace, PoolId, PoolKind, Segment,
    StackId, StringId, TraceAction,
};

/// Deterministic xorshift64* generator: tests need fixed seeds, not a dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }
}

/// A block of the simulation: (address, size, requested, state).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimBlock {
    pub address: u64,
    pub size_bytes: u64,
    pub requested_bytes: u64,
    pub state: BlockState,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimSegment {
    pub address: u64,
    pub size_bytes: u64,
    pub stream: u64,
    pub pool: PoolKind,
    pub blocks: Vec<SimBlock>,
}

/// The simulated allocator plus the trace it wrote.
pub struct Simulation {
    pub rules: AllocatorRules,
    pub segments: Vec<SimSegment>,
    pub trace: DeviceTrace,
    next_segment_address: u64,
    /// Live allocations: (address, stream) in allocation order.
    live: Vec<u64>,
    /// Blocks freed by Python but not completed yet (record_stream).
    pending: Vec<u64>,
    time_us: i64,
}

/// A compact comparable form of a state: per segment (address, size, stream, pool, blocks as
/// (address, size, requested or 0, state code)).
pub type StateShape = Vec<(u64, u64, u64, PoolKind, Vec<(u64, u64, u64, u8)>)>;

impl Simulation {
    pub fn new() -> Self {
        Simulation {
            rules: AllocatorRules::default(),
            segments: Vec::new(),
            trace: DeviceTrace::default(),
            next_segment_address: 0x7f00_0000_0000,
            live: Vec::new(),
            pending: Vec::new(),
            time_us: 1_700_000_000_000_000,
        }
    }

    fn record(&mut self, action: TraceAction, address: u64, size_bytes: u64, stream: u64) {
        self.time_us += 3;
        let t = &mut self.trace;
        t.actions.push(action);
        t.addresses.push(address);
        t.sizes_bytes.push(size_bytes);
        t.streams.push(stream);
        t.times_us.push(self.time_us);
        t.stacks.push(StackId::EMPTY);
        t.user_metadata.push(StringId(0));
        t.compile_context.push(StringId(0));
    }

    fn locate(&self, address: u64) -> Option<(usize, usize)> {
        for (s, segment) in self.segments.iter().enumerate() {
            if address >= segment.address && address < segment.address + segment.size_bytes {
                let b = segment.blocks.iter().position(|b| b.address == address)?;
                return Some((s, b));
            }
        }
        None
    }

    /// `malloc`: best fit on the same stream and pool, else a new segment.
    pub fn malloc(&mut self, requested_bytes: u64, stream: u64) {
        let rounded = self.rules.round_size(requested_bytes);
        let pool = AllocatorRules::pool_for(rounded);
        let mut best: Option<(u64, u64, usize, usize)> = None;
        for (s, segment) in self.segments.iter().enumerate() {
            if segment.pool != pool || segment.stream != stream {
                continue;
            }
            for (b, block) in segment.blocks.iter().enumerate() {
                if block.state == BlockState::Inactive && block.size_bytes >= rounded {
                    let key = (block.size_bytes, block.address, s, b);
                    if best.is_none_or(|current| (key.0, key.1) < (current.0, current.1)) {
                        best = Some(key);
                    }
                }
            }
        }
        let (s, b) = match best {
            Some((_, _, s, b)) => (s, b),
            None => {
                let size_bytes = AllocatorRules::segment_size_for(rounded);
                let address = self.next_segment_address;
                // Leave gaps so that segments are never contiguous.
                self.next_segment_address += size_bytes + (64 << 20);
                self.record(TraceAction::SegmentAlloc, address, size_bytes, stream);
                let segment = SimSegment {
                    address,
                    size_bytes,
                    stream,
                    pool,
                    blocks: vec![SimBlock {
                        address,
                        size_bytes,
                        requested_bytes: 0,
                        state: BlockState::Inactive,
                    }],
                };
                let at = self.segments.partition_point(|x| x.address < address);
                self.segments.insert(at, segment);
                (at, 0)
            }
        };
        let segment = &mut self.segments[s];
        let free = segment.blocks[b].clone();
        let remaining = free.size_bytes - rounded;
        let size_bytes = if self.rules.should_split(pool, false, rounded, remaining) {
            segment.blocks.insert(
                b + 1,
                SimBlock {
                    address: free.address + rounded,
                    size_bytes: remaining,
                    requested_bytes: 0,
                    state: BlockState::Inactive,
                },
            );
            rounded
        } else {
            free.size_bytes
        };
        segment.blocks[b] = SimBlock {
            address: free.address,
            size_bytes,
            requested_bytes,
            state: BlockState::ActiveAllocated,
        };
        self.record(TraceAction::Alloc, free.address, requested_bytes, stream);
        self.live.push(free.address);
    }

    /// `free`: Python frees the `index`-th live block; with `deferred` it waits for another
    /// stream (free_completed comes later).
    pub fn free(&mut self, index: usize, deferred: bool) {
        let address = self.live.swap_remove(index);
        let Some((s, b)) = self.locate(address) else {
            return;
        };
        let (requested, stream) = (
            self.segments[s].blocks[b].requested_bytes,
            self.segments[s].stream,
        );
        self.segments[s].blocks[b].state = BlockState::ActivePendingFree;
        self.record(TraceAction::FreeRequested, address, requested, stream);
        if deferred {
            self.pending.push(address);
        } else {
            self.complete(address);
        }
    }

    /// `free_block`: the block returns to the cache and merges with free neighbours.
    pub fn complete(&mut self, address: u64) {
        let Some((s, mut b)) = self.locate(address) else {
            return;
        };
        let stream = self.segments[s].stream;
        let requested = self.segments[s].blocks[b].requested_bytes;
        self.record(TraceAction::FreeCompleted, address, requested, stream);
        let blocks = &mut self.segments[s].blocks;
        blocks[b].state = BlockState::Inactive;
        blocks[b].requested_bytes = 0;
        if b + 1 < blocks.len() && blocks[b + 1].state == BlockState::Inactive {
            let next = blocks.remove(b + 1);
            blocks[b].size_bytes += next.size_bytes;
        }
        if b > 0 && blocks[b - 1].state == BlockState::Inactive {
            let current = blocks.remove(b);
            b -= 1;
            blocks[b].size_bytes += current.size_bytes;
        }
    }

    /// `empty_cache`: cudaFree every entirely free segment.
    pub fn empty_cache(&mut self) {
        let mut s = 0;
        while s < self.segments.len() {
            let segment = &self.segments[s];
            if segment.blocks.len() == 1 && segment.blocks[0].state == BlockState::Inactive {
                let (address, size, stream) = (segment.address, segment.size_bytes, segment.stream);
                self.record(TraceAction::SegmentFree, address, size, stream);
                self.segments.remove(s);
            } else {
                s += 1;
            }
        }
    }

    /// One random step of a training-like workload.
    pub fn step(&mut self, rng: &mut Rng) {
        let roll = rng.below(100);
        if roll < 2 && !self.pending.is_empty() {
            let address = self
                .pending
                .swap_remove(rng.below(self.pending.len() as u64) as usize);
            self.complete(address);
        } else if roll < 3 {
            self.empty_cache();
        } else if roll < 52 || self.live.is_empty() {
            let requested = match rng.below(4) {
                0 => 1 + rng.below(1 << 20),
                1 => (1 << 20) + rng.below(9 << 20),
                _ => (1 << 20) + rng.below(200 << 20),
            };
            let stream = if rng.below(10) == 0 { 0x55aa } else { 0 };
            self.malloc(requested, stream);
        } else {
            let index = rng.below(self.live.len() as u64) as usize;
            let deferred = rng.below(20) == 0;
            self.free(index, deferred);
        }
    }

    /// Runs until the trace has at least `events` events, bounding live memory by freeing when
    /// too many blocks are live.
    pub fn run(&mut self, rng: &mut Rng, events: usize, mut on_event: impl FnMut(&Simulation)) {
        while self.trace.len() < events {
            if self.live.len() > 400 {
                let index = rng.below(self.live.len() as u64) as usize;
                self.free(index, false);
            } else {
                self.step(rng);
            }
            on_event(self);
        }
    }

    /// The state in comparable form.
    pub fn shape(&self) -> StateShape {
        self.segments
            .iter()
            .map(|s| {
                let blocks = s
                    .blocks
                    .iter()
                    .map(|b| {
                        let code = match b.state {
                            BlockState::ActiveAllocated => 0,
                            BlockState::ActivePendingFree => 1,
                            _ => 2,
                        };
                        let requested = if code == 2 { 0 } else { b.requested_bytes };
                        (b.address, b.size_bytes, requested, code)
                    })
                    .collect();
                (s.address, s.size_bytes, s.stream, s.pool, blocks)
            })
            .collect()
    }

    /// The snapshot PyTorch would write now: final segments plus the trace.
    pub fn snapshot(&self) -> AllocatorSnapshot {
        let mut snapshot = AllocatorSnapshot {
            name: "synthetic".to_string(),
            ..Default::default()
        };
        for segment in &self.segments {
            let first_block = snapshot.blocks.len() as u32;
            let mut allocated = 0;
            let mut active = 0;
            let mut requested = 0;
            for block in &segment.blocks {
                if block.state == BlockState::ActiveAllocated {
                    allocated += block.size_bytes;
                }
                if block.state.is_active() {
                    active += block.size_bytes;
                    requested += block.requested_bytes;
                }
                snapshot.blocks.push(Block {
                    address: block.address,
                    size_bytes: block.size_bytes,
                    requested_bytes: Some(block.requested_bytes),
                    state: block.state,
                    stack: StackId::EMPTY,
                });
            }
            snapshot.segments.push(Segment {
                device: 0,
                address: segment.address,
                total_bytes: segment.size_bytes,
                allocated_bytes: allocated,
                active_bytes: active,
                requested_bytes: Some(requested),
                stream: segment.stream,
                pool: segment.pool,
                pool_id: PoolId::default(),
                is_expandable: false,
                first_block,
                block_count: segment.blocks.len() as u32,
                stack: StackId::EMPTY,
            });
        }
        snapshot.traces.push(self.trace.clone());
        snapshot.devices.push(DeviceAllocState {
            device: 0,
            segments: 0..snapshot.segments.len(),
            trace: Some(0),
        });
        snapshot
    }
}

impl Default for Simulation {
    fn default() -> Self {
        Self::new()
    }
}
