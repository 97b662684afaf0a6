//! PyTorch CUDA caching-allocator snapshots, in a compact form.
//!
//! A snapshot (`torch.cuda.memory._snapshot()`) is a tree of Python dicts and lists. Real files
//! reach hundreds of megabytes and millions of trace events, and the same frame lists are shared
//! thousands of times through the pickle memo. A generic value tree multiplies that sharing out
//! and needs gigabytes, so the model here is columnar and interned instead:
//!
//! - segments and blocks are flat vectors; a segment names its blocks by a range,
//! - trace events are one struct of arrays per device ([`DeviceTrace`]),
//! - strings are interned once in a [`StringTable`] and referred to by [`StringId`],
//! - frames `(filename, line, name)` are interned as [`FrameId`]s and identical frame lists as one
//!   [`StackId`] in the [`FrameTable`], which keeps the sharing the pickle memo had.
//!
//! Field names follow PyTorch's keys where that helps matching them up (`segmentInfoToDict` in
//! PyTorch's `torch/csrc/cuda/Module.cpp`; `docs/sources.md` § "PyTorch allocator snapshots"),
//! with the unit added (`total_bytes` for `total_size`).

use std::collections::HashMap;
use std::ops::Range;

/// Index of an interned string in [`StringTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StringId(pub u32);

/// Index of an interned frame in [`FrameTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameId(pub u32);

/// Index of an interned call stack (a list of frames, innermost first) in [`FrameTable`].
///
/// [`StackId::EMPTY`] is the stack with no frames: what PyTorch records when stacks were off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StackId(pub u32);

impl StackId {
    /// The stack with no frames (always present in every [`FrameTable`]).
    pub const EMPTY: StackId = StackId(0);
}

/// Interned strings: every distinct string of a snapshot is stored once.
#[derive(Clone, Debug, Default)]
pub struct StringTable {
    strings: Vec<Box<str>>,
    index: HashMap<Box<str>, StringId>,
}

impl StringTable {
    /// Returns the id of `text`, adding it if it is new.
    pub fn intern(&mut self, text: &str) -> StringId {
        if let Some(id) = self.index.get(text) {
            return *id;
        }
        let id = StringId(self.strings.len() as u32);
        self.strings.push(text.into());
        self.index.insert(text.into(), id);
        id
    }

    /// The id of `text` if it was interned.
    pub fn find(&self, text: &str) -> Option<StringId> {
        self.index.get(text).copied()
    }

    /// The text of an id from this table (the empty string for an id from another table).
    pub fn get(&self, id: StringId) -> &str {
        self.strings.get(id.0 as usize).map_or("", |s| s)
    }

    /// Number of distinct strings.
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    /// True when no string was interned.
    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }
}

/// One source location of a call stack: `{"filename", "line", "name"}` in the snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    pub filename: StringId,
    pub line: i64,
    /// Function name (C++ frames carry the demangled signature).
    pub name: StringId,
}

/// Interned frames and call stacks.
///
/// Stacks are stored back to back in one vector (`stack_frames`) with start offsets, so a
/// million events that share a few thousand stacks cost a few thousand entries.
#[derive(Clone, Debug)]
pub struct FrameTable {
    frames: Vec<Frame>,
    frame_index: HashMap<Frame, FrameId>,
    /// `stack_starts[s]..stack_starts[s + 1]` is stack `s`'s slice of `stack_frames`.
    stack_starts: Vec<u32>,
    stack_frames: Vec<FrameId>,
    stack_index: HashMap<Box<[FrameId]>, StackId>,
}

impl Default for FrameTable {
    fn default() -> Self {
        let mut stack_index = HashMap::new();
        stack_index.insert(Box::<[FrameId]>::from([]), StackId::EMPTY);
        FrameTable {
            frames: Vec::new(),
            frame_index: HashMap::new(),
            stack_starts: vec![0, 0],
            stack_frames: Vec::new(),
            stack_index,
        }
    }
}

impl FrameTable {
    /// Returns the id of `frame`, adding it if it is new.
    pub fn intern_frame(&mut self, frame: Frame) -> FrameId {
        if let Some(id) = self.frame_index.get(&frame) {
            return *id;
        }
        let id = FrameId(self.frames.len() as u32);
        self.frames.push(frame);
        self.frame_index.insert(frame, id);
        id
    }

    /// Returns the id of the stack `frames` (innermost first), adding it if it is new.
    pub fn intern_stack(&mut self, frames: &[FrameId]) -> StackId {
        if let Some(id) = self.stack_index.get(frames) {
            return *id;
        }
        let id = StackId((self.stack_starts.len() - 1) as u32);
        self.stack_frames.extend_from_slice(frames);
        self.stack_starts.push(self.stack_frames.len() as u32);
        self.stack_index.insert(frames.into(), id);
        id
    }

    /// The frame behind an id (`None` for an id from another table).
    pub fn frame(&self, id: FrameId) -> Option<Frame> {
        self.frames.get(id.0 as usize).copied()
    }

    /// The frames of a stack, innermost first (empty for an id from another table).
    pub fn stack(&self, id: StackId) -> &[FrameId] {
        let s = id.0 as usize;
        match (self.stack_starts.get(s), self.stack_starts.get(s + 1)) {
            (Some(&start), Some(&end)) => &self.stack_frames[start as usize..end as usize],
            _ => &[],
        }
    }

    /// Number of distinct frames.
    pub fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// Number of distinct stacks, the empty stack included.
    pub fn stack_count(&self) -> usize {
        self.stack_starts.len() - 1
    }
}

/// Which of the allocator's two pools a segment belongs to (`segment_type`).
///
/// Requests up to 1 MiB are served from the small pool (2 MiB segments), larger ones from the
/// large pool. This is the pool, not the size of the segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolKind {
    Small,
    Large,
}

impl PoolKind {
    /// The name PyTorch uses (`"small"` / `"large"`).
    pub fn as_str(self) -> &'static str {
        match self {
            PoolKind::Small => "small",
            PoolKind::Large => "large",
        }
    }
}

/// Owning private pool of a segment (`segment_pool_id`): `(0, 0)` is the default pool; CUDA-graph
/// and `torch.cuda.MemPool` pools are non-zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolId(pub i64, pub i64);

impl PoolId {
    /// True for the default (non-private) pool.
    pub fn is_default(self) -> bool {
        self == PoolId(0, 0)
    }
}

/// State of a block (`state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockState {
    /// Handed out to a tensor (`"active_allocated"`).
    ActiveAllocated,
    /// Freed by Python but still in use on another stream (`"active_pending_free"`, also spelled
    /// `"active_awaiting_free"` in PyTorch's docstring).
    ActivePendingFree,
    /// Cached free memory (`"inactive"`).
    Inactive,
    /// A state this reader does not know, kept by name.
    Unknown(StringId),
}

impl BlockState {
    /// Allocated or pending free: what `memory_stats()` counts as "active".
    pub fn is_active(self) -> bool {
        matches!(
            self,
            BlockState::ActiveAllocated | BlockState::ActivePendingFree
        )
    }
}

/// One cudaMalloc'ed range (or, for expandable segments, one contiguous mapped range).
#[derive(Clone, Debug, PartialEq)]
pub struct Segment {
    pub device: u32,
    pub address: u64,
    /// Sum of the sizes of its blocks (`total_size`).
    pub total_bytes: u64,
    /// Sum of the sizes of its `active_allocated` blocks (`allocated_size`).
    pub allocated_bytes: u64,
    /// Sum of the sizes of its active blocks, pending frees included (`active_size`).
    pub active_bytes: u64,
    /// Sum of the requested sizes of its active blocks (`requested_size`); `None` in files from
    /// before PyTorch 2.1, which did not record it.
    pub requested_bytes: Option<u64>,
    /// Raw `cudaStream_t` value; 0 is the legacy default stream.
    pub stream: u64,
    pub pool: PoolKind,
    pub pool_id: PoolId,
    pub is_expandable: bool,
    /// This segment's blocks: `AllocatorSnapshot::blocks[first_block..first_block + block_count]`.
    pub first_block: u32,
    pub block_count: u32,
    /// Stack that created the segment (`frames`), [`StackId::EMPTY`] if not recorded.
    pub stack: StackId,
}

impl Segment {
    /// Index range of this segment's blocks in [`AllocatorSnapshot::blocks`].
    pub fn block_range(&self) -> Range<usize> {
        let start = self.first_block as usize;
        start..start + self.block_count as usize
    }

    /// First address past the segment.
    pub fn end_address(&self) -> u64 {
        self.address.saturating_add(self.total_bytes)
    }
}

/// One block of a segment: a piece handed out or cached.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    /// Start address. Files from before PyTorch 2.1 have none; the reader then computes it from
    /// the segment's address and the sizes of the blocks before it, as PyTorch does.
    pub address: u64,
    /// Rounded size in bytes (`size`).
    pub size_bytes: u64,
    /// Size the caller asked for (`requested_size`, or legacy `history[0].real_size`). Only
    /// meaningful for active blocks: PyTorch does not reset it when a block is freed.
    pub requested_bytes: Option<u64>,
    pub state: BlockState,
    /// Allocation stack (`frames`, or legacy `history[0].frames`).
    pub stack: StackId,
}

/// What a trace event records (`action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceAction {
    /// A block was handed out; size is the unrounded request.
    Alloc,
    /// Python freed a block; size is its requested size.
    FreeRequested,
    /// The block really went back to the cache (maybe later, after cross-stream uses).
    FreeCompleted,
    /// cudaMalloc of a new segment; size is the whole segment.
    SegmentAlloc,
    /// cudaFree of a segment.
    SegmentFree,
    /// Pages mapped into an expandable segment.
    SegmentMap,
    /// Pages unmapped from an expandable segment.
    SegmentUnmap,
    /// `_snapshot()` was called; size is the active bytes on the device.
    Snapshot,
    /// An allocation failed; size is the rounded request, `device_free` what CUDA had free.
    Oom,
    /// Historic record_function marker stored in the trace (PyTorch mid-2024 only).
    UserDefined,
    /// Metadata attached to a live allocation (`torch.cuda.memory._annotate_memory`).
    Annotate,
    /// An action this reader does not know, kept by name.
    Unknown(StringId),
}

impl TraceAction {
    /// Maps PyTorch's action string; `None` for names this reader does not know.
    pub fn from_name(name: &str) -> Option<TraceAction> {
        Some(match name {
            "alloc" => TraceAction::Alloc,
            "free_requested" => TraceAction::FreeRequested,
            "free_completed" => TraceAction::FreeCompleted,
            "segment_alloc" => TraceAction::SegmentAlloc,
            "segment_free" => TraceAction::SegmentFree,
            "segment_map" => TraceAction::SegmentMap,
            "segment_unmap" => TraceAction::SegmentUnmap,
            "snapshot" => TraceAction::Snapshot,
            "oom" => TraceAction::Oom,
            "user_defined" => TraceAction::UserDefined,
            "annotate" => TraceAction::Annotate,
            _ => return None,
        })
    }

    /// PyTorch's name of a known action (`None` for [`TraceAction::Unknown`]).
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            TraceAction::Alloc => "alloc",
            TraceAction::FreeRequested => "free_requested",
            TraceAction::FreeCompleted => "free_completed",
            TraceAction::SegmentAlloc => "segment_alloc",
            TraceAction::SegmentFree => "segment_free",
            TraceAction::SegmentMap => "segment_map",
            TraceAction::SegmentUnmap => "segment_unmap",
            TraceAction::Snapshot => "snapshot",
            TraceAction::Oom => "oom",
            TraceAction::UserDefined => "user_defined",
            TraceAction::Annotate => "annotate",
            TraceAction::Unknown(_) => return None,
        })
    }
}

/// Marks a trace event without a recorded time (files from before `time_us` existed).
pub const TIME_UNKNOWN_US: i64 = i64::MIN;

/// The trace ring buffer of one device, oldest event first, as a struct of arrays.
///
/// All column vectors have the same length (one entry per event). Columns that only a few events
/// carry (`device_free` of `oom` events, non-default `pool_id`s) are stored sparsely, sorted by
/// event index.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceTrace {
    pub device: u32,
    pub actions: Vec<TraceAction>,
    /// Block or segment address (`addr`); 0 for `oom` and `snapshot` events.
    pub addresses: Vec<u64>,
    /// Bytes; meaning depends on the action (see [`TraceAction`]).
    pub sizes_bytes: Vec<u64>,
    /// Raw `cudaStream_t` values.
    pub streams: Vec<u64>,
    /// Microseconds since the Unix epoch, or [`TIME_UNKNOWN_US`].
    pub times_us: Vec<i64>,
    /// Stack of the event (`frames`), [`StackId::EMPTY`] when not recorded.
    pub stacks: Vec<StackId>,
    /// `user_metadata` (the empty string when absent).
    pub user_metadata: Vec<StringId>,
    /// `compile_context` (the empty string when absent).
    pub compile_context: Vec<StringId>,
    /// `(event index, device_free bytes)` for `oom` events.
    pub device_free_bytes: Vec<(u32, u64)>,
    /// `(event index, pool id)` for events whose `pool_id` is not the default pool.
    pub pool_ids: Vec<(u32, PoolId)>,
}

impl DeviceTrace {
    /// Number of events.
    pub fn len(&self) -> usize {
        self.actions.len()
    }

    /// True when the trace holds no event.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    /// Time of event `index`, if recorded.
    pub fn time_us(&self, index: usize) -> Option<i64> {
        self.times_us
            .get(index)
            .copied()
            .filter(|&t| t != TIME_UNKNOWN_US)
    }

    /// Free device memory reported with `oom` event `index`.
    pub fn device_free_bytes(&self, index: usize) -> Option<u64> {
        sparse_lookup(&self.device_free_bytes, index)
    }

    /// Pool of event `index` (the default pool when the file does not say).
    pub fn pool_id(&self, index: usize) -> PoolId {
        sparse_lookup(&self.pool_ids, index).unwrap_or_default()
    }
}

fn sparse_lookup<T: Copy>(column: &[(u32, T)], index: usize) -> Option<T> {
    let index = u32::try_from(index).ok()?;
    column
        .binary_search_by_key(&index, |&(i, _)| i)
        .ok()
        .map(|found| column[found].1)
}

/// `allocator_settings` of the snapshot: the allocator's options at snapshot time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AllocatorSettings {
    /// The settings string last parsed (`PYTORCH_CUDA_ALLOC_CONF`).
    pub alloc_conf: Option<String>,
    /// `max_split_size`; `None` when unlimited (PyTorch writes -1) or not recorded.
    pub max_split_size_bytes: Option<u64>,
    pub garbage_collection_threshold: Option<f64>,
    pub expandable_segments: Option<bool>,
    /// `(interval start in MiB, divisions)` of `roundup_power2_divisions`, 0 divisions = off.
    pub roundup_power2_divisions: Vec<(u64, u64)>,
    /// `trace_alloc_max_entries` (ring buffer size), when recorded.
    pub trace_alloc_max_entries: Option<u64>,
    /// `trace_alloc_overflowed`: the ring buffer wrapped, older events are lost.
    pub trace_alloc_overflowed: Option<bool>,
    /// Every other setting as `(key, value as text)`, for display.
    pub other: Vec<(String, String)>,
}

/// One `external_annotations` entry: a record_function START/END marker.
#[derive(Clone, Debug, PartialEq)]
pub struct Annotation {
    pub device: Option<u32>,
    pub time_us: Option<i64>,
    /// The record_function name (e.g. `ProfilerStep#3`).
    pub name: StringId,
    /// `START` or `END` (or whatever the file says).
    pub stage: StringId,
}

/// How the snapshot was stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotContainer {
    /// A pickle; `protocol` from its `PROTO` opcode (0 if it had none: protocols 0 and 1).
    Pickle { protocol: u8 },
    /// JSON text.
    Json,
}

/// Format generation of a snapshot, from the newest feature seen (`docs/sources.md` § "Format
/// vintages"), oldest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SnapshotVintage {
    /// A bare list of segments (`torch.cuda.memory_snapshot()`), blocks with size and state only.
    BareSegmentList,
    /// Blocks carry `history` stacks (2022 – PyTorch 2.0).
    BlockHistory,
    /// Blocks carry `address`, `requested_size` and `frames` (PyTorch 2.1, 2023).
    BlockFrames,
    /// Trace events carry `time_us` (late 2023).
    TimedEvents,
    /// `allocator_settings` is present (2024 and later).
    AllocatorSettings,
}

/// Live state of one device in the snapshot.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceAllocState {
    pub device: u32,
    /// This device's segments: `AllocatorSnapshot::segments[segments]`.
    pub segments: Range<usize>,
    /// Index of this device's trace in `AllocatorSnapshot::traces`, if the file had one.
    pub trace: Option<usize>,
}

/// A whole allocator snapshot.
///
/// Invariants kept by the reader: `segments` are sorted by `(device, address)`; each segment's
/// blocks are contiguous in `blocks` in address order; `devices` are sorted by device ordinal and
/// list every device that has segments or a trace.
#[derive(Clone, Debug, Default)]
pub struct AllocatorSnapshot {
    /// File name (or the name the caller gave), for messages.
    pub name: String,
    pub devices: Vec<DeviceAllocState>,
    pub segments: Vec<Segment>,
    pub blocks: Vec<Block>,
    pub traces: Vec<DeviceTrace>,
    pub frames: FrameTable,
    pub strings: StringTable,
    pub settings: Option<AllocatorSettings>,
    pub annotations: Vec<Annotation>,
    pub container: Option<SnapshotContainer>,
    pub vintage: Option<SnapshotVintage>,
    /// Things the reader tolerated but a user should know (unknown keys, broken invariants).
    pub warnings: Vec<String>,
}

impl AllocatorSnapshot {
    /// The blocks of a segment, in address order.
    pub fn segment_blocks(&self, segment: &Segment) -> &[Block] {
        self.blocks.get(segment.block_range()).unwrap_or(&[])
    }

    /// The segments of a device.
    pub fn device_segments(&self, device: &DeviceAllocState) -> &[Segment] {
        self.segments.get(device.segments.clone()).unwrap_or(&[])
    }

    /// Text of an interned string.
    pub fn string(&self, id: StringId) -> &str {
        self.strings.get(id)
    }

    /// Total number of trace events over all devices.
    pub fn event_count(&self) -> usize {
        self.traces.iter().map(DeviceTrace::len).sum()
    }

    /// Test snapshots: adds a segment that is one block of `size_bytes` (held unless the block
    /// is inactive), so that a synthetic trace's live set can be laid out in a few lines.
    #[cfg(test)]
    pub(crate) fn push_one_block_segment(
        &mut self,
        address: u64,
        size_bytes: u64,
        state: BlockState,
        stack: StackId,
        pool_id: PoolId,
    ) {
        let first_block = self.blocks.len() as u32;
        self.blocks.push(Block {
            address,
            size_bytes,
            requested_bytes: Some(size_bytes),
            state,
            stack,
        });
        let held_bytes = if state == BlockState::Inactive {
            0
        } else {
            size_bytes
        };
        self.segments.push(Segment {
            device: 0,
            address,
            total_bytes: size_bytes,
            allocated_bytes: held_bytes,
            active_bytes: held_bytes,
            requested_bytes: Some(held_bytes),
            stream: 0,
            pool: PoolKind::Large,
            pool_id,
            is_expandable: false,
            first_block,
            block_count: 1,
            stack: StackId::EMPTY,
        });
    }

    /// Test snapshots: device 0 owns every segment and the first trace.
    #[cfg(test)]
    pub(crate) fn finish_as_device_zero(mut self) -> std::sync::Arc<Self> {
        self.devices.push(DeviceAllocState {
            device: 0,
            segments: 0..self.segments.len(),
            trace: Some(0),
        });
        std::sync::Arc::new(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_returns_the_same_ids_for_equal_values() {
        let mut strings = StringTable::default();
        let a = strings.intern("a.py");
        let f = strings.intern("f");
        assert_eq!(strings.intern("a.py"), a);
        assert_ne!(a, f);
        assert_eq!(strings.get(f), "f");

        let mut table = FrameTable::default();
        let x = table.intern_frame(Frame {
            filename: a,
            line: 3,
            name: f,
        });
        let y = table.intern_frame(Frame {
            filename: a,
            line: 4,
            name: f,
        });
        assert_eq!(
            table.intern_frame(Frame {
                filename: a,
                line: 3,
                name: f
            }),
            x
        );
        let s1 = table.intern_stack(&[x, y]);
        let s2 = table.intern_stack(&[y]);
        assert_eq!(table.intern_stack(&[x, y]), s1);
        assert_eq!(table.intern_stack(&[]), StackId::EMPTY);
        assert_eq!(table.stack(s1), &[x, y]);
        assert_eq!(table.stack(s2), &[y]);
        assert_eq!(table.stack(StackId::EMPTY), &[] as &[FrameId]);
        assert_eq!(table.stack_count(), 3);
        assert_eq!(table.frame(y).map(|f| f.line), Some(4));
    }

    #[test]
    fn sparse_columns_answer_by_event_index() {
        let trace = DeviceTrace {
            actions: vec![TraceAction::Alloc, TraceAction::Oom],
            times_us: vec![TIME_UNKNOWN_US, 5],
            device_free_bytes: vec![(1, 77)],
            pool_ids: vec![(0, PoolId(1, 2))],
            ..Default::default()
        };
        assert_eq!(trace.device_free_bytes(1), Some(77));
        assert_eq!(trace.device_free_bytes(0), None);
        assert_eq!(trace.pool_id(0), PoolId(1, 2));
        assert!(trace.pool_id(1).is_default());
        assert_eq!(trace.time_us(0), None);
        assert_eq!(trace.time_us(1), Some(5));
    }

    #[test]
    fn action_names_round_trip() {
        for name in [
            "alloc",
            "free_requested",
            "free_completed",
            "segment_alloc",
            "segment_free",
            "segment_map",
            "segment_unmap",
            "snapshot",
            "oom",
            "user_defined",
            "annotate",
        ] {
            let action = TraceAction::from_name(name);
            assert_eq!(action.and_then(TraceAction::name), Some(name));
        }
        assert_eq!(TraceAction::from_name("teleport"), None);
    }
}
