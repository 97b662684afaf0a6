//! Turns the containers a pickle (or JSON) builds into the compact model as they complete.
//!
//! The decoder calls [`Builder`] for every container it creates and fills. A container is
//! classified by its keys when it is *used* (put into a parent, or returned as the root), which
//! in every pickle writer happens after it is complete: a dict with `action` becomes a trace row,
//! one with `filename`/`name` an interned frame, a list of frames an interned stack, and so on.
//! Only small dicts (the root, settings, annotations) stay generic. The pickle memo holds slot
//! ids, so a frame list shared ten thousand times is classified once and referenced by id.

use std::collections::HashMap;

use super::chunked::ChunkedVec;
use crate::model::allocator::{
    AllocatorSettings, AllocatorSnapshot, Annotation, Block, BlockState, DeviceAllocState,
    DeviceTrace, Frame, FrameId, FrameTable, PoolId, PoolKind, Segment, SnapshotContainer,
    SnapshotVintage, StackId, StringId, StringTable, TIME_UNKNOWN_US, TraceAction,
};

/// Index of a container in [`Builder`]'s slot table.
pub(super) type SlotId = u32;

/// A value on the decoder's stack, in the memo, or inside a container.
///
/// Containers are [`Value::Slot`]s; once classified, rows, frames and stacks are stored inside
/// parents in their resolved form so that no second lookup is needed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// An integer in `i64::MAX + 1 ..= u64::MAX` (e.g. a -1 written as unsigned).
    U64(u64),
    /// An integer beyond 64 bits; no snapshot field needs one.
    BigInt,
    Float(f64),
    Str(StringId),
    /// Bytes or bytearray: never part of a snapshot, kept only so unknown keys can hold them.
    Bytes,
    Slot(SlotId),
    /// A classified row (trace event, block, segment, legacy history entry).
    Row(RowKind, u32),
    Frame(FrameId),
    Stack(StackId),
    /// The pickle MARK; also the "not set" marker of memo entries.
    Mark,
}

/// What kind of record a classified dict became.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RowKind {
    Trace,
    Block,
    Segment,
    History,
}

impl RowKind {
    fn name(self) -> &'static str {
        match self {
            RowKind::Trace => "trace event",
            RowKind::Block => "block",
            RowKind::Segment => "segment",
            RowKind::History => "history entry",
        }
    }
}

const NO_BUFFER: u32 = u32::MAX;

/// What a container is; 12 bytes, since a big snapshot has millions of them.
#[derive(Clone, Copy, Debug)]
enum Slot {
    /// A dict being filled; pairs in `pair_bufs[buffer]` (or none yet).
    OpenDict(u32),
    /// A list with no item yet.
    OpenList,
    /// A list whose items so far are consecutive rows `start..end` of one kind.
    OpenRows(RowKind, u32, u32),
    /// A list with other items, in `item_bufs[buffer]`.
    OpenItems(u32),
    /// A tuple of two integers (pool ids), in `int_pairs`.
    IntPair(u32),
    /// Any other tuple; items in `item_bufs[buffer]`.
    Tuple(u32),
    Row(RowKind, u32),
    Frame(FrameId),
    Stack(StackId),
    EmptyList,
    Rows(RowKind, u32, u32),
    GenericList(u32),
    GenericDict(u32),
}

#[derive(Clone, Copy, Debug)]
enum Key {
    Action,
    Addr,
    Size,
    Stream,
    TimeUs,
    Frames,
    DeviceFree,
    UserMetadata,
    CompileContext,
    PoolId,
    Device,
    Address,
    TotalSize,
    AllocatedSize,
    ActiveSize,
    RequestedSize,
    SegmentType,
    SegmentPoolId,
    IsExpandable,
    Blocks,
    State,
    History,
    Filename,
    Line,
    Name,
    RealSize,
}

const KEY_COUNT: usize = Key::RealSize as usize + 1;

impl Key {
    fn from_name(name: &str) -> Option<Key> {
        Some(match name {
            "action" => Key::Action,
            "addr" => Key::Addr,
            "size" => Key::Size,
            "stream" => Key::Stream,
            "time_us" => Key::TimeUs,
            "frames" => Key::Frames,
            "device_free" => Key::DeviceFree,
            "user_metadata" => Key::UserMetadata,
            "compile_context" => Key::CompileContext,
            "pool_id" => Key::PoolId,
            "device" => Key::Device,
            "address" => Key::Address,
            "total_size" => Key::TotalSize,
            "allocated_size" => Key::AllocatedSize,
            "active_size" => Key::ActiveSize,
            "requested_size" => Key::RequestedSize,
            "segment_type" => Key::SegmentType,
            "segment_pool_id" => Key::SegmentPoolId,
            "is_expandable" => Key::IsExpandable,
            "blocks" => Key::Blocks,
            "state" => Key::State,
            "history" => Key::History,
            "filename" => Key::Filename,
            "line" => Key::Line,
            "name" => Key::Name,
            "real_size" => Key::RealSize,
            _ => return None,
        })
    }
}

/// What a string means to the classifier, computed once per distinct string.
#[derive(Clone, Copy, Debug, Default)]
struct StrInfo {
    key: Option<Key>,
    action: Option<TraceAction>,
    state: Option<BlockState>,
    pool: Option<PoolKind>,
}

fn str_info(text: &str) -> StrInfo {
    StrInfo {
        key: Key::from_name(text),
        action: TraceAction::from_name(text),
        state: match text {
            "active_allocated" => Some(BlockState::ActiveAllocated),
            "active_pending_free" | "active_awaiting_free" => Some(BlockState::ActivePendingFree),
            "inactive" => Some(BlockState::Inactive),
            _ => None,
        },
        pool: match text {
            "small" => Some(PoolKind::Small),
            "large" => Some(PoolKind::Large),
            _ => None,
        },
    }
}

#[derive(Clone, Copy, Debug)]
struct StagedBlock {
    address: Option<u64>,
    size_bytes: u64,
    requested_bytes: Option<u64>,
    state: BlockState,
    stack: StackId,
    /// Legacy `history` list: requested size and stack come from its first entry.
    history: Option<(u64, StackId)>,
}

#[derive(Clone, Copy, Debug)]
enum RowSource {
    Range(u32, u32),
    Items(u32),
}

#[derive(Clone, Copy, Debug)]
struct StagedSegment {
    device: u32,
    address: u64,
    total_bytes: Option<u64>,
    allocated_bytes: Option<u64>,
    active_bytes: Option<u64>,
    requested_bytes: Option<u64>,
    stream: u64,
    pool: Option<PoolKind>,
    pool_id: PoolId,
    is_expandable: bool,
    stack: StackId,
    blocks: RowSource,
}

/// Format features seen, for [`SnapshotVintage`].
#[derive(Clone, Copy, Debug, Default)]
struct Features {
    history: bool,
    block_frames: bool,
    time: bool,
}

/// Builds an [`AllocatorSnapshot`] from decoder calls. Errors are plain text; the decoder adds
/// the byte offset and the caller the file name.
pub(super) struct Builder {
    strings: StringTable,
    info: Vec<StrInfo>,
    frames: FrameTable,
    /// The containers, by id: a chunked vector, as it grows to hundreds of MB.
    slots: ChunkedVec<Slot>,
    int_pairs: Vec<(i64, i64)>,
    pair_bufs: Vec<Vec<(Value, Value)>>,
    item_bufs: Vec<Vec<Value>>,
    free_pair_bufs: Vec<u32>,
    free_item_bufs: Vec<u32>,
    trace: DeviceTrace,
    blocks: Vec<StagedBlock>,
    segments: Vec<StagedSegment>,
    history: Vec<(u64, StackId)>,
    stack_scratch: Vec<FrameId>,
    empty_string: StringId,
    features: Features,
    unknown_actions: usize,
    odd_frames: usize,
    /// Rows that may still be copied when assembling; guards against memo bombs that reference
    /// one big list from many parents.
    copy_budget: usize,
    /// Fraction of the input decoded so far (see [`wanted_len`]).
    input_fraction: f32,
    /// Where the trace columns last grew (see [`wanted_len`]).
    trace_growth: LastGrowth,
    /// Rows every trace column has room for (the least capacity among them): the columns are
    /// grown one at a time ahead of need ([`Builder::tick`]), so their capacities differ for a
    /// while.
    trace_room: usize,
    /// Rows the trace columns are being grown to, one column per tick.
    trace_target_rows: usize,
}

type BuildResult<T> = Result<T, String>;

impl Builder {
    /// A builder for an input of `input_len` bytes (which bounds the work it accepts).
    pub(super) fn new(input_len: usize) -> Builder {
        let mut builder = Builder {
            strings: StringTable::default(),
            info: Vec::new(),
            frames: FrameTable::default(),
            slots: ChunkedVec::new(Slot::EmptyList),
            int_pairs: Vec::new(),
            pair_bufs: Vec::new(),
            item_bufs: Vec::new(),
            free_pair_bufs: Vec::new(),
            free_item_bufs: Vec::new(),
            trace: DeviceTrace::default(),
            blocks: Vec::new(),
            segments: Vec::new(),
            history: Vec::new(),
            stack_scratch: Vec::new(),
            empty_string: StringId(0),
            features: Features::default(),
            unknown_actions: 0,
            odd_frames: 0,
            copy_budget: input_len.saturating_add(4096),
            input_fraction: 0.0,
            trace_growth: LastGrowth::default(),
            trace_room: 0,
            trace_target_rows: 0,
        };
        builder.empty_string = builder.intern_text("");
        builder
    }

    fn intern_text(&mut self, text: &str) -> StringId {
        let id = self.strings.intern(text);
        if id.0 as usize == self.info.len() {
            self.info.push(str_info(text));
        }
        id
    }

    /// Interns a string from the file (UTF-8; invalid sequences such as lone surrogates written
    /// with `surrogatepass` are replaced rather than rejected).
    pub(super) fn string(&mut self, bytes: &[u8]) -> Value {
        let id = match std::str::from_utf8(bytes) {
            Ok(text) => self.intern_text(text),
            Err(_) => {
                let text = String::from_utf8_lossy(bytes);
                self.intern_text(&text)
            }
        };
        Value::Str(id)
    }

    /// Text of a string value, for messages.
    pub(super) fn text(&self, value: Value) -> Option<&str> {
        match value {
            Value::Str(id) => Some(self.strings.get(id)),
            _ => None,
        }
    }

    /// The decoder's progress tick: says how far it is in the input (for [`wanted_len`])
    /// and grows one trace column if they would fill soon ([`LastGrowth::fills_soon`]).
    pub(super) fn tick(&mut self, fraction: f32) {
        self.input_fraction = fraction;
        let rows = self.trace.actions.len();
        let trace_due = self
            .trace_growth
            .fills_soon(rows, self.trace_room, fraction)
            || self.trace_target_rows > self.trace_room;
        if !trace_due {
            return;
        }
        if self.trace_target_rows <= self.trace_room {
            self.trace_target_rows = wanted_len(rows, fraction, &mut self.trace_growth);
        }
        let target = self.trace_target_rows;
        // The first column short of the target grows.
        if let Some(column) = trace_columns(&mut self.trace)
            .into_iter()
            .find(|column| column.capacity() < target)
        {
            column.reserve_exact(target - column.len());
        }
        self.trace_room = trace_row_capacity(&mut self.trace);
    }

    fn new_slot(&mut self, slot: Slot) -> BuildResult<Value> {
        let id = u32::try_from(self.slots.len())
            .map_err(|_| "more than 4 billion containers".to_owned())?;
        self.slots.push(slot);
        Ok(Value::Slot(id))
    }

    /// A new empty dict.
    pub(super) fn new_dict(&mut self) -> BuildResult<Value> {
        self.new_slot(Slot::OpenDict(NO_BUFFER))
    }

    /// A new empty list (sets are read as lists too).
    pub(super) fn new_list(&mut self) -> BuildResult<Value> {
        self.new_slot(Slot::OpenList)
    }

    /// A new tuple of `items`.
    pub(super) fn new_tuple(&mut self, items: &[Value]) -> BuildResult<Value> {
        if let [a, b] = items
            && let (Some(a), Some(b)) = (self.int_of(*a), self.int_of(*b))
        {
            let index = u32::try_from(self.int_pairs.len())
                .map_err(|_| "more than 4 billion tuples".to_owned())?;
            self.int_pairs.push((a, b));
            return self.new_slot(Slot::IntPair(index));
        }
        let buf = self.take_item_buf();
        for &item in items {
            let item = self.use_value(item)?;
            self.item_bufs[buf as usize].push(item);
        }
        self.new_slot(Slot::Tuple(buf))
    }

    fn take_pair_buf(&mut self) -> u32 {
        match self.free_pair_bufs.pop() {
            Some(buf) => buf,
            None => {
                self.pair_bufs.push(Vec::new());
                (self.pair_bufs.len() - 1) as u32
            }
        }
    }

    fn take_item_buf(&mut self) -> u32 {
        match self.free_item_bufs.pop() {
            Some(buf) => buf,
            None => {
                self.item_bufs.push(Vec::new());
                (self.item_bufs.len() - 1) as u32
            }
        }
    }

    fn release_pair_buf(&mut self, buf: u32) {
        let pairs = &mut self.pair_bufs[buf as usize];
        pairs.clear();
        if pairs.capacity() > 4096 {
            *pairs = Vec::new();
        }
        self.free_pair_bufs.push(buf);
    }

    fn release_item_buf(&mut self, buf: u32) {
        let items = &mut self.item_bufs[buf as usize];
        items.clear();
        if items.capacity() > 4096 {
            *items = Vec::new();
        }
        self.free_item_bufs.push(buf);
    }

    fn slot(&self, id: SlotId) -> BuildResult<Slot> {
        self.slots
            .get(id as usize)
            .copied()
            .ok_or_else(|| format!("reference to unknown container {id}"))
    }

    /// Sets `pairs` (key, value, key, value, …) in `dict`.
    pub(super) fn dict_set(&mut self, dict: Value, pairs: &[Value]) -> BuildResult<()> {
        let Value::Slot(id) = dict else {
            return Err("SETITEM(S) on something that is not a dict".to_owned());
        };
        if !pairs.len().is_multiple_of(2) {
            return Err("SETITEMS with an odd number of items".to_owned());
        }
        let buf = match self.slot(id)? {
            // The usual case (every SETITEMS of Python's and TorchScript's picklers): a fresh
            // dict filled in one batch. Records are classified right here, from the stack,
            // without copying the pairs; a record that gets more items later is refused.
            Slot::OpenDict(NO_BUFFER) if pairs.len() >= 4 => {
                let mut fields: [Option<Value>; KEY_COUNT] = [None; KEY_COUNT];
                for pair in pairs.chunks_exact(2) {
                    let value = self.use_value(pair[1])?;
                    if let Value::Str(key) = pair[0]
                        && let Some(key) = self.info.get(key.0 as usize).and_then(|i| i.key)
                    {
                        fields[key as usize] = Some(value);
                    }
                }
                if let Some(slot) = self.classify_fields(&fields)? {
                    self.slots[id as usize] = slot;
                    return Ok(());
                }
                let buf = self.take_pair_buf();
                self.slots[id as usize] = Slot::OpenDict(buf);
                buf
            }
            Slot::OpenDict(NO_BUFFER) => {
                let buf = self.take_pair_buf();
                self.slots[id as usize] = Slot::OpenDict(buf);
                buf
            }
            Slot::OpenDict(buf) => buf,
            _ => {
                return Err(
                    "SETITEM(S) on a dict that is already complete (or not a dict); snapshot \
                     records are written in one batch"
                        .to_owned(),
                );
            }
        };
        for pair in pairs.chunks_exact(2) {
            let key = self.use_value(pair[0])?;
            let value = self.use_value(pair[1])?;
            self.pair_bufs[buf as usize].push((key, value));
        }
        Ok(())
    }

    /// Appends `items` to `list`.
    pub(super) fn list_append(&mut self, list: Value, items: &[Value]) -> BuildResult<()> {
        let Value::Slot(id) = list else {
            return Err("APPEND(S) on something that is not a list".to_owned());
        };
        let mut state = self.slot(id)?;
        for &item in items {
            let item = self.use_value(item)?;
            state = match (state, item) {
                (Slot::OpenList, Value::Row(kind, row)) => Slot::OpenRows(kind, row, row + 1),
                (Slot::OpenRows(kind, start, end), Value::Row(k, row))
                    if k == kind && row == end =>
                {
                    Slot::OpenRows(kind, start, end + 1)
                }
                (Slot::OpenList, item) => {
                    let buf = self.take_item_buf();
                    self.item_bufs[buf as usize].push(item);
                    Slot::OpenItems(buf)
                }
                (Slot::OpenRows(kind, start, end), item) => {
                    let buf = self.take_item_buf();
                    let items = &mut self.item_bufs[buf as usize];
                    items.extend((start..end).map(|row| Value::Row(kind, row)));
                    items.push(item);
                    Slot::OpenItems(buf)
                }
                (Slot::OpenItems(buf), item) => {
                    self.item_bufs[buf as usize].push(item);
                    Slot::OpenItems(buf)
                }
                _ => {
                    return Err(
                        "APPEND(S) on a list that is already complete or not a list".to_owned()
                    );
                }
            };
        }
        self.slots[id as usize] = state;
        Ok(())
    }

    /// Completes a container that is being put somewhere and returns the form parents store.
    /// Inlined for the common case (a number or string, which needs no work); containers go to
    /// [`Builder::use_container`].
    #[inline(always)]
    pub(super) fn use_value(&mut self, value: Value) -> BuildResult<Value> {
        match value {
            Value::Slot(id) => self.use_container(value, id),
            Value::Mark => Err("a MARK was used as a value".to_owned()),
            _ => Ok(value),
        }
    }

    /// Classifies container `id` (the slot of `value`) if it is still open.
    #[inline(never)]
    fn use_container(&mut self, value: Value, id: SlotId) -> BuildResult<Value> {
        let slot = match self.slot(id)? {
            Slot::OpenDict(buf) => self.classify_dict(buf)?,
            Slot::OpenList => Slot::EmptyList,
            Slot::OpenRows(kind, start, end) => Slot::Rows(kind, start, end),
            Slot::OpenItems(buf) => self.classify_list(buf),
            done => done,
        };
        self.slots[id as usize] = slot;
        Ok(match slot {
            Slot::Row(kind, row) => Value::Row(kind, row),
            Slot::Frame(frame) => Value::Frame(frame),
            Slot::Stack(stack) => Value::Stack(stack),
            _ => value,
        })
    }

    fn classify_list(&mut self, buf: u32) -> Slot {
        let items = &self.item_bufs[buf as usize];
        if !items.iter().all(|item| matches!(item, Value::Frame(_))) {
            return Slot::GenericList(buf);
        }
        self.stack_scratch.clear();
        self.stack_scratch
            .extend(items.iter().filter_map(|item| match item {
                Value::Frame(frame) => Some(*frame),
                _ => None,
            }));
        let stack = self.frames.intern_stack(&self.stack_scratch);
        self.release_item_buf(buf);
        Slot::Stack(stack)
    }

    fn classify_dict(&mut self, buf: u32) -> BuildResult<Slot> {
        if buf == NO_BUFFER {
            let buf = self.take_pair_buf();
            return Ok(Slot::GenericDict(buf));
        }
        let mut fields: [Option<Value>; KEY_COUNT] = [None; KEY_COUNT];
        for &(key, value) in &self.pair_bufs[buf as usize] {
            if let Value::Str(id) = key
                && let Some(key) = self.info.get(id.0 as usize).and_then(|info| info.key)
            {
                fields[key as usize] = Some(value);
            }
        }
        match self.classify_fields(&fields)? {
            Some(slot) => {
                self.release_pair_buf(buf);
                Ok(slot)
            }
            None => Ok(Slot::GenericDict(buf)),
        }
    }

    /// Turns a dict's known fields into a record, or `None` for a dict that stays generic.
    fn classify_fields(
        &mut self,
        fields: &[Option<Value>; KEY_COUNT],
    ) -> BuildResult<Option<Slot>> {
        let has = |key: Key| fields[key as usize].is_some();
        Ok(Some(if has(Key::Action) {
            Slot::Row(RowKind::Trace, self.add_trace_row(fields)?)
        } else if has(Key::Blocks) {
            Slot::Row(RowKind::Segment, self.add_segment(fields)?)
        } else if has(Key::State) && has(Key::Size) {
            Slot::Row(RowKind::Block, self.add_block(fields)?)
        } else if has(Key::Filename) && has(Key::Name) {
            Slot::Frame(self.add_frame(fields)?)
        } else if has(Key::RealSize) {
            Slot::Row(RowKind::History, self.add_history(fields)?)
        } else {
            return Ok(None);
        }))
    }

    /// The optional integer field `key` (called `what` in messages) of a `record` such as
    /// "block": `None` when it is missing or `None` in the file, an error naming the record and
    /// the field when it is not an integer.
    fn int_field(
        &self,
        fields: &[Option<Value>; KEY_COUNT],
        key: Key,
        record: &str,
        what: &str,
    ) -> BuildResult<Option<i64>> {
        match fields[key as usize] {
            None | Some(Value::None) => Ok(None),
            Some(value) => self
                .int_of(value)
                .map(Some)
                .ok_or_else(|| format!("{record}: '{what}' is not an integer")),
        }
    }

    fn int_of(&self, value: Value) -> Option<i64> {
        match value {
            Value::Int(i) => Some(i),
            Value::U64(u) => Some(u as i64),
            Value::Bool(b) => Some(i64::from(b)),
            Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e18 => Some(f as i64),
            _ => None,
        }
    }

    fn pair_of(&self, value: Value) -> Option<PoolId> {
        let Value::Slot(id) = value else { return None };
        match self.slots.get(id as usize)? {
            Slot::IntPair(index) => {
                let (a, b) = *self.int_pairs.get(*index as usize)?;
                Some(PoolId(a, b))
            }
            Slot::GenericList(buf) | Slot::Tuple(buf) => match self.item_bufs[*buf as usize][..] {
                [a, b] => Some(PoolId(self.int_of(a)?, self.int_of(b)?)),
                _ => None,
            },
            _ => None,
        }
    }

    fn stack_of(&mut self, value: Option<Value>) -> StackId {
        match value {
            None | Some(Value::None) => StackId::EMPTY,
            Some(Value::Stack(stack)) => stack,
            Some(Value::Slot(id))
                if matches!(self.slots.get(id as usize), Some(Slot::EmptyList)) =>
            {
                StackId::EMPTY
            }
            Some(_) => {
                self.odd_frames += 1;
                StackId::EMPTY
            }
        }
    }

    fn add_trace_row(&mut self, fields: &[Option<Value>; KEY_COUNT]) -> BuildResult<u32> {
        let row = u32::try_from(self.trace.actions.len())
            .map_err(|_| "more than 4 billion trace events".to_owned())?;
        let action = match fields[Key::Action as usize] {
            Some(Value::Str(id)) => match self.info[id.0 as usize].action {
                Some(action) => action,
                None => {
                    self.unknown_actions += 1;
                    TraceAction::Unknown(id)
                }
            },
            _ => return Err("trace event: 'action' is not a string".to_owned()),
        };
        let int = |key: Key, what: &str| self.int_field(fields, key, "trace event", what);
        let address = int(Key::Addr, "addr")?.unwrap_or(0) as u64;
        let size = non_negative(int(Key::Size, "size")?, "trace event", "size")?.unwrap_or(0);
        let stream = int(Key::Stream, "stream")?.unwrap_or(0) as u64;
        let time = int(Key::TimeUs, "time_us")?;
        let device_free = non_negative(
            int(Key::DeviceFree, "device_free")?,
            "trace event",
            "device_free",
        )?;
        if time.is_some() {
            self.features.time = true;
        }
        let stack = self.stack_of(fields[Key::Frames as usize]);
        let text = |key: Key| match fields[key as usize] {
            Some(Value::Str(id)) => id,
            _ => self.empty_string,
        };
        let user_metadata = text(Key::UserMetadata);
        let compile_context = text(Key::CompileContext);
        let pool_id = fields[Key::PoolId as usize]
            .and_then(|v| self.pair_of(v))
            .unwrap_or_default();

        if self.trace.actions.len() >= self.trace_room {
            self.grow_trace();
        }
        let t = &mut self.trace;
        t.actions.push(action);
        t.addresses.push(address);
        t.sizes_bytes.push(size);
        t.streams.push(stream);
        t.times_us.push(time.unwrap_or(TIME_UNKNOWN_US));
        t.stacks.push(stack);
        t.user_metadata.push(user_metadata);
        t.compile_context.push(compile_context);
        if let Some(free) = device_free {
            t.device_free_bytes.push((row, free));
        }
        if !pool_id.is_default() {
            t.pool_ids.push((row, pool_id));
        }
        Ok(row)
    }

    /// Makes room in every trace column at once (see [`wanted_len`]), when they filled
    /// before [`Builder::tick`] grew them.
    #[cold]
    #[inline(never)]
    fn grow_trace(&mut self) {
        #[cfg(test)]
        TRACE_GROWN_ON_PUSH.with(|count| count.set(count.get() + 1));
        let fraction = self.input_fraction;
        let len = self.trace.actions.len();
        let wanted = wanted_len(len, fraction, &mut self.trace_growth).max(self.trace_target_rows);
        for column in trace_columns(&mut self.trace) {
            column.reserve_exact(wanted.saturating_sub(column.len()));
        }
        self.trace_room = trace_row_capacity(&mut self.trace);
    }

    fn add_frame(&mut self, fields: &[Option<Value>; KEY_COUNT]) -> BuildResult<FrameId> {
        let text = |key: Key, what: &str| match fields[key as usize] {
            Some(Value::Str(id)) => Ok(id),
            _ => Err(format!("frame: '{what}' is not a string")),
        };
        let filename = text(Key::Filename, "filename")?;
        let name = text(Key::Name, "name")?;
        let line = fields[Key::Line as usize]
            .and_then(|v| self.int_of(v))
            .unwrap_or(0);
        Ok(self.frames.intern_frame(Frame {
            filename,
            line,
            name,
        }))
    }

    fn add_history(&mut self, fields: &[Option<Value>; KEY_COUNT]) -> BuildResult<u32> {
        let real_size = match fields[Key::RealSize as usize].and_then(|v| self.int_of(v)) {
            Some(size) if size >= 0 => size as u64,
            _ => return Err("history entry: 'real_size' is not a size".to_owned()),
        };
        let stack = self.stack_of(fields[Key::Frames as usize]);
        self.features.history = true;
        self.history.push((real_size, stack));
        Ok((self.history.len() - 1) as u32)
    }

    fn add_block(&mut self, fields: &[Option<Value>; KEY_COUNT]) -> BuildResult<u32> {
        let int = |key: Key, what: &str| self.int_field(fields, key, "block", what);
        let size_bytes = non_negative(int(Key::Size, "size")?, "block", "size")?.unwrap_or(0);
        let address = int(Key::Address, "address")?.map(|a| a as u64);
        let requested_bytes = non_negative(
            int(Key::RequestedSize, "requested_size")?,
            "block",
            "requested_size",
        )?;
        let state = match fields[Key::State as usize] {
            Some(Value::Str(id)) => self.info[id.0 as usize]
                .state
                .unwrap_or(BlockState::Unknown(id)),
            _ => return Err("block: 'state' is not a string".to_owned()),
        };
        if address.is_some() || requested_bytes.is_some() || fields[Key::Frames as usize].is_some()
        {
            self.features.block_frames = true;
        }
        let stack = self.stack_of(fields[Key::Frames as usize]);
        let history = match fields[Key::History as usize] {
            Some(value) => self.first_history(value),
            None => None,
        };
        self.blocks.push(StagedBlock {
            address,
            size_bytes,
            requested_bytes,
            state,
            stack,
            history,
        });
        u32::try_from(self.blocks.len() - 1).map_err(|_| "more than 4 billion blocks".to_owned())
    }

    fn first_history(&self, value: Value) -> Option<(u64, StackId)> {
        let Value::Slot(id) = value else { return None };
        let row = match self.slots.get(id as usize)? {
            Slot::Rows(RowKind::History, start, _) => *start,
            Slot::GenericList(buf) => match self.item_bufs[*buf as usize].first() {
                Some(Value::Row(RowKind::History, row)) => *row,
                _ => return None,
            },
            _ => return None,
        };
        self.history.get(row as usize).copied()
    }

    fn add_segment(&mut self, fields: &[Option<Value>; KEY_COUNT]) -> BuildResult<u32> {
        let int = |key: Key, what: &str| self.int_field(fields, key, "segment", what);
        let address =
            int(Key::Address, "address")?.ok_or_else(|| "segment: no 'address'".to_owned())? as u64;
        let device = match int(Key::Device, "device")? {
            None => 0,
            Some(d) => u32::try_from(d).map_err(|_| format!("segment: device {d} is invalid"))?,
        };
        let size = |key: Key, what: &str| -> BuildResult<Option<u64>> {
            non_negative(int(key, what)?, "segment", what)
        };
        let total_bytes = size(Key::TotalSize, "total_size")?;
        let allocated_bytes = size(Key::AllocatedSize, "allocated_size")?;
        let active_bytes = size(Key::ActiveSize, "active_size")?;
        let requested_bytes = size(Key::RequestedSize, "requested_size")?;
        let stream = int(Key::Stream, "stream")?.unwrap_or(0) as u64;
        let pool = match fields[Key::SegmentType as usize] {
            Some(Value::Str(id)) => self.info[id.0 as usize].pool,
            _ => None,
        };
        let pool_id = fields[Key::SegmentPoolId as usize]
            .and_then(|v| self.pair_of(v))
            .unwrap_or_default();
        let is_expandable = matches!(fields[Key::IsExpandable as usize], Some(Value::Bool(true)));
        let stack = self.stack_of(fields[Key::Frames as usize]);
        let blocks = match fields[Key::Blocks as usize] {
            Some(Value::Slot(id)) => match self.slot(id)? {
                Slot::EmptyList => RowSource::Range(0, 0),
                Slot::Rows(RowKind::Block, start, end) => RowSource::Range(start, end),
                Slot::GenericList(buf) => {
                    let items = &self.item_bufs[buf as usize];
                    if !items
                        .iter()
                        .all(|item| matches!(item, Value::Row(RowKind::Block, _)))
                    {
                        return Err("segment: 'blocks' holds something that is not a block".into());
                    }
                    RowSource::Items(buf)
                }
                _ => return Err("segment: 'blocks' is not a list of blocks".to_owned()),
            },
            Some(Value::Row(kind, _)) => {
                return Err(format!("segment: 'blocks' is a {} not a list", kind.name()));
            }
            _ => return Err("segment: 'blocks' is not a list".to_owned()),
        };
        self.segments.push(StagedSegment {
            device,
            address,
            total_bytes,
            allocated_bytes,
            active_bytes,
            requested_bytes,
            stream,
            pool,
            pool_id,
            is_expandable,
            stack,
            blocks,
        });
        u32::try_from(self.segments.len() - 1)
            .map_err(|_| "more than 4 billion segments".to_owned())
    }

    /// Rows of `kind` that a list value holds, as a source to copy from.
    fn rows_of(&self, value: Value, kind: RowKind) -> BuildResult<RowSource> {
        let Value::Slot(id) = value else {
            return Err(format!("expected a list of {}s", kind.name()));
        };
        match self.slot(id)? {
            Slot::EmptyList | Slot::OpenList => Ok(RowSource::Range(0, 0)),
            Slot::Rows(k, start, end) | Slot::OpenRows(k, start, end) if k == kind => {
                Ok(RowSource::Range(start, end))
            }
            Slot::GenericList(buf) | Slot::OpenItems(buf)
                if self.item_bufs[buf as usize]
                    .iter()
                    .all(|item| matches!(item, Value::Row(k, _) if *k == kind)) =>
            {
                Ok(RowSource::Items(buf))
            }
            _ => Err(format!("expected a list of {}s", kind.name())),
        }
    }

    fn row_indices(&self, source: RowSource) -> Vec<u32> {
        match source {
            RowSource::Range(start, end) => (start..end).collect(),
            RowSource::Items(buf) => self.item_bufs[buf as usize]
                .iter()
                .filter_map(|item| match item {
                    Value::Row(_, row) => Some(*row),
                    _ => None,
                })
                .collect(),
        }
    }

    fn spend(&mut self, rows: usize) -> BuildResult<()> {
        self.copy_budget = self.copy_budget.checked_sub(rows).ok_or_else(|| {
            "the pickle reuses memoized lists far more often than a memory snapshot does \
             (a memo bomb?)"
                .to_owned()
        })?;
        Ok(())
    }

    fn dict_pairs(&self, value: Value) -> Option<&[(Value, Value)]> {
        let Value::Slot(id) = value else { return None };
        match self.slots.get(id as usize)? {
            Slot::GenericDict(buf) => Some(&self.pair_bufs[*buf as usize]),
            _ => None,
        }
    }

    fn list_items(&self, value: Value) -> Option<&[Value]> {
        let Value::Slot(id) = value else { return None };
        match self.slots.get(id as usize)? {
            Slot::GenericList(buf) => Some(&self.item_bufs[*buf as usize]),
            Slot::EmptyList => Some(&[]),
            _ => None,
        }
    }

    /// Assembles the snapshot from the decoded root value, in steps: the top-level keys, the
    /// segments with their blocks, the per-device traces, the settings and annotations, the
    /// format vintage, and the devices.
    pub(super) fn finish(
        mut self,
        root: Value,
        name: &str,
        container: SnapshotContainer,
    ) -> Result<AllocatorSnapshot, NotSnapshot> {
        let root = self.use_value(root).map_err(NotSnapshot::Malformed)?;
        let mut warnings = Vec::new();
        let top = self.top_level(root, &mut warnings)?;
        let segment_rows = self.segment_rows(&top)?;
        let (segments, blocks) = self.assemble_segments(segment_rows, &mut warnings)?;
        let traces = self.assemble_traces(top.traces)?;
        self.decoding_warnings(&mut warnings);
        let settings = top.settings.map(|v| self.settings(v));
        let annotations = top
            .annotations
            .map(|v| self.annotations(v))
            .unwrap_or_default();
        let vintage = self.vintage(settings.is_some(), top.bare_list);
        let devices = device_states(&segments, &traces);
        Ok(AllocatorSnapshot {
            name: name.to_owned(),
            devices,
            segments,
            blocks,
            traces,
            frames: self.frames,
            strings: self.strings,
            settings,
            annotations,
            container: Some(container),
            vintage: Some(vintage),
            warnings,
        })
    }

    /// The top-level keys of a snapshot dict, or a bare list of segments (the oldest format).
    fn top_level(&self, root: Value, warnings: &mut Vec<String>) -> Result<TopLevel, NotSnapshot> {
        let Some(pairs) = self.dict_pairs(root) else {
            return Ok(TopLevel {
                segments: root,
                traces: None,
                settings: None,
                annotations: None,
                bare_list: true,
            });
        };
        let mut segments = None;
        let mut top = TopLevel {
            segments: Value::None,
            traces: None,
            settings: None,
            annotations: None,
            bare_list: false,
        };
        for &(key, value) in pairs {
            match self.text(key) {
                Some("segments") => segments = Some(value),
                Some("device_traces") => top.traces = Some(value),
                Some("allocator_settings") => top.settings = Some(value),
                Some("external_annotations") => top.annotations = Some(value),
                Some("host_segments") | Some("host_traces") => {
                    if !warnings.iter().any(|w: &String| w.contains("host")) {
                        warnings.push(
                            "the file also records pinned host memory (host_segments), which is \
                             not shown"
                                .to_owned(),
                        );
                    }
                }
                Some(other) => warnings.push(format!("ignored unknown top-level key '{other}'")),
                None => warnings.push("ignored a top-level key that is not a string".into()),
            }
        }
        top.segments = segments.ok_or_else(|| {
            NotSnapshot::NotSnapshot("the top-level dict has no 'segments' key".to_owned())
        })?;
        Ok(top)
    }

    /// The staged rows of the segments list.
    fn segment_rows(&self, top: &TopLevel) -> Result<Vec<u32>, NotSnapshot> {
        match self.rows_of(top.segments, RowKind::Segment) {
            Ok(source) => Ok(self.row_indices(source)),
            Err(_) if top.bare_list => Err(NotSnapshot::NotSnapshot(
                "the file holds neither a snapshot dict nor a list of segments".to_owned(),
            )),
            Err(_) => Err(NotSnapshot::NotSnapshot(
                "'segments' is not a list of segments".to_owned(),
            )),
        }
    }

    /// Segments sorted by (device, address), with their blocks copied in that order.
    fn assemble_segments(
        &mut self,
        mut order: Vec<u32>,
        warnings: &mut Vec<String>,
    ) -> Result<(Vec<Segment>, Vec<Block>), NotSnapshot> {
        self.spend(order.len()).map_err(NotSnapshot::Malformed)?;
        order.sort_by_key(|&row| {
            let s = &self.segments[row as usize];
            (s.device, s.address)
        });
        let mut segments = Vec::with_capacity(order.len());
        let mut blocks: Vec<Block> = Vec::new();
        for &row in &order {
            let staged = self.segments[row as usize];
            let block_rows = self.row_indices(staged.blocks);
            self.spend(block_rows.len())
                .map_err(NotSnapshot::Malformed)?;
            segments.push(self.assemble_segment(staged, &block_rows, &mut blocks, warnings)?);
        }
        Ok((segments, blocks))
    }

    /// One segment: its blocks appended to `blocks` (addresses filled in where old files leave
    /// them out), and the totals the file does not record computed from them.
    fn assemble_segment(
        &self,
        staged: StagedSegment,
        block_rows: &[u32],
        blocks: &mut Vec<Block>,
        warnings: &mut Vec<String>,
    ) -> Result<Segment, NotSnapshot> {
        let first_block = u32::try_from(blocks.len())
            .map_err(|_| NotSnapshot::Malformed("more than 4 billion blocks".to_owned()))?;
        let mut next_address = staged.address;
        let (mut total, mut allocated, mut active, mut requested) = (0u64, 0u64, 0u64, 0u64);
        for &b in block_rows {
            let block = staged_block(self.blocks[b as usize], next_address);
            if block.address != next_address && warnings.len() < 100 {
                warnings.push(format!(
                    "segment {:#x}: block at {:#x} does not follow the previous one (expected {:#x})",
                    staged.address, block.address, next_address
                ));
            }
            next_address = block.address.saturating_add(block.size_bytes);
            total = total.saturating_add(block.size_bytes);
            if block.state == BlockState::ActiveAllocated {
                allocated = allocated.saturating_add(block.size_bytes);
            }
            if block.state.is_active() {
                active = active.saturating_add(block.size_bytes);
                requested =
                    requested.saturating_add(block.requested_bytes.unwrap_or(block.size_bytes));
            }
            blocks.push(block);
        }
        if let Some(recorded) = staged.total_bytes
            && recorded != total
            && !block_rows.is_empty()
            && warnings.len() < 100
        {
            warnings.push(format!(
                "segment {:#x}: total_size {recorded} differs from the sum of its blocks {total}",
                staged.address
            ));
        }
        let total_bytes = staged.total_bytes.unwrap_or(total);
        Ok(Segment {
            device: staged.device,
            address: staged.address,
            total_bytes,
            allocated_bytes: staged.allocated_bytes.unwrap_or(allocated),
            active_bytes: staged.active_bytes.unwrap_or(active),
            requested_bytes: staged
                .requested_bytes
                .or(self.features.block_frames.then_some(requested)),
            stream: staged.stream,
            // Old files without segment_type: the large pool has segments over 2 MiB.
            pool: staged.pool.unwrap_or(if total_bytes > 2 << 20 {
                PoolKind::Large
            } else {
                PoolKind::Small
            }),
            pool_id: staged.pool_id,
            is_expandable: staged.is_expandable,
            first_block,
            block_count: block_rows.len() as u32,
            stack: staged.stack,
        })
    }

    /// One trace per device ordinal (= index in `device_traces`). The usual file has one device
    /// trace holding every staged row in order: it is moved whole rather than gathered.
    fn assemble_traces(&mut self, traces: Option<Value>) -> Result<Vec<DeviceTrace>, NotSnapshot> {
        let mut trace_sources = Vec::new();
        if let Some(value) = traces {
            let items = self.list_items(value).ok_or_else(|| {
                NotSnapshot::NotSnapshot("'device_traces' is not a list of lists".to_owned())
            })?;
            for &item in items {
                let source = self.rows_of(item, RowKind::Trace).map_err(|_| {
                    NotSnapshot::NotSnapshot(
                        "'device_traces' holds something that is not a list of trace events"
                            .to_owned(),
                    )
                })?;
                trace_sources.push(source);
            }
        }
        let staged_rows = self.trace.actions.len() as u32;
        let non_empty = trace_sources
            .iter()
            .filter(|s| !matches!(s, RowSource::Range(a, b) if a == b))
            .count();
        let mut staging = Some(std::mem::take(&mut self.trace));
        let mut traces = Vec::with_capacity(trace_sources.len());
        for (device, source) in trace_sources.iter().enumerate() {
            let device = device as u32;
            let trace = match *source {
                RowSource::Range(a, b) if a == b => DeviceTrace {
                    device,
                    ..Default::default()
                },
                RowSource::Range(0, end) if non_empty == 1 && end == staged_rows => DeviceTrace {
                    device,
                    ..staging.take().unwrap_or_default()
                },
                other => {
                    let rows = self.row_indices(other);
                    self.spend(rows.len()).map_err(NotSnapshot::Malformed)?;
                    match &staging {
                        Some(staging) => gather_trace(staging, &rows, device),
                        None => DeviceTrace {
                            device,
                            ..Default::default()
                        },
                    }
                }
            };
            traces.push(trace);
        }
        Ok(traces)
    }

    /// What decoding met that the snapshot does not show: actions this version does not know,
    /// `frames` values that were not lists of frames.
    fn decoding_warnings(&self, warnings: &mut Vec<String>) {
        if self.unknown_actions > 0 {
            warnings.push(format!(
                "{} trace events have actions this version does not know; they are kept but not interpreted",
                self.unknown_actions
            ));
        }
        if self.odd_frames > 0 {
            warnings.push(format!(
                "{} 'frames' values were not lists of frames and were ignored",
                self.odd_frames
            ));
        }
    }

    /// The format generation, from the newest feature seen.
    fn vintage(&self, has_settings: bool, bare_list: bool) -> SnapshotVintage {
        if has_settings {
            SnapshotVintage::AllocatorSettings
        } else if self.features.time {
            SnapshotVintage::TimedEvents
        } else if self.features.block_frames {
            SnapshotVintage::BlockFrames
        } else if self.features.history || !bare_list {
            SnapshotVintage::BlockHistory
        } else {
            SnapshotVintage::BareSegmentList
        }
    }

    fn value_text(&self, value: Value) -> String {
        match value {
            Value::None => "None".to_owned(),
            Value::Bool(b) => if b { "True" } else { "False" }.to_owned(),
            Value::Int(i) => i.to_string(),
            Value::U64(u) => u.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Str(id) => self.strings.get(id).to_owned(),
            _ => "…".to_owned(),
        }
    }

    fn settings(&self, value: Value) -> AllocatorSettings {
        let mut settings = AllocatorSettings::default();
        let Some(pairs) = self.dict_pairs(value) else {
            return settings;
        };
        for &(key, value) in pairs {
            let Some(key) = self.text(key) else { continue };
            match key {
                "PYTORCH_CUDA_ALLOC_CONF" | "PYTORCH_ALLOC_CONF" => {
                    settings.alloc_conf = self.text(value).map(str::to_owned);
                }
                "max_split_size" => {
                    settings.max_split_size_bytes = match value {
                        Value::Int(i) if i >= 0 => Some(i as u64),
                        Value::U64(u) if u != u64::MAX => Some(u),
                        _ => None,
                    };
                }
                "garbage_collection_threshold" => {
                    settings.garbage_collection_threshold = match value {
                        Value::Float(f) => Some(f),
                        other => self.int_of(other).map(|i| i as f64),
                    };
                }
                "expandable_segments" => {
                    settings.expandable_segments = match value {
                        Value::Bool(b) => Some(b),
                        _ => None,
                    };
                }
                "roundup_power2_divisions" => {
                    if let Some(entries) = self.dict_pairs(value) {
                        let mut divisions: Vec<(u64, u64)> = entries
                            .iter()
                            .filter_map(|&(k, v)| {
                                let start = self.text(k)?.parse::<u64>().ok()?;
                                let d = self.int_of(v)?;
                                Some((start, d.max(0) as u64))
                            })
                            .collect();
                        divisions.sort_unstable();
                        settings.roundup_power2_divisions = divisions;
                    }
                }
                "trace_alloc_max_entries" => {
                    settings.trace_alloc_max_entries = match self.list_items(value) {
                        Some(items) => items.iter().filter_map(|&v| self.int_of(v)).max(),
                        None => self.int_of(value),
                    }
                    .map(|i| i.max(0) as u64);
                }
                "trace_alloc_overflowed" => {
                    settings.trace_alloc_overflowed = match self.list_items(value) {
                        Some(items) => Some(items.contains(&Value::Bool(true))),
                        None => match value {
                            Value::Bool(b) => Some(b),
                            _ => None,
                        },
                    };
                }
                other => settings
                    .other
                    .push((other.to_owned(), self.value_text(value))),
            }
        }
        settings
    }

    fn annotations(&self, value: Value) -> Vec<Annotation> {
        let Some(items) = self.list_items(value) else {
            return Vec::new();
        };
        items
            .iter()
            .filter_map(|&item| {
                let pairs = self.dict_pairs(item)?;
                let mut annotation = Annotation {
                    device: None,
                    time_us: None,
                    name: self.empty_string,
                    stage: self.empty_string,
                };
                for &(key, value) in pairs {
                    match self.text(key) {
                        Some("name") => {
                            if let Value::Str(id) = value {
                                annotation.name = id;
                            }
                        }
                        Some("stage") => {
                            if let Value::Str(id) = value {
                                annotation.stage = id;
                            }
                        }
                        Some("device") => {
                            annotation.device =
                                self.int_of(value).and_then(|d| u32::try_from(d).ok());
                        }
                        Some("time_us") => annotation.time_us = self.int_of(value),
                        _ => {}
                    }
                }
                Some(annotation)
            })
            .collect()
    }
}

/// Why [`Builder::finish`] gave up.
pub(super) enum NotSnapshot {
    /// The data is a well-formed pickle but not a snapshot.
    NotSnapshot(String),
    /// The data breaks the snapshot's structure.
    Malformed(String),
}

#[cfg(test)]
thread_local! {
    /// Times the trace columns filled before a tick grew them, on this thread.
    static TRACE_GROWN_ON_PUSH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A column of the trace: a vector that grows a row per event, whatever its rows hold.
trait TraceColumn {
    fn len(&self) -> usize;
    fn capacity(&self) -> usize;
    fn reserve_exact(&mut self, additional: usize);
}

impl<T> TraceColumn for Vec<T> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn capacity(&self) -> usize {
        Vec::capacity(self)
    }
    fn reserve_exact(&mut self, additional: usize) {
        Vec::reserve_exact(self, additional);
    }
}

/// The columns of `trace` that grow a row per event, the one list of them the reader's growth
/// goes by.
fn trace_columns(trace: &mut DeviceTrace) -> [&mut dyn TraceColumn; 8] {
    [
        &mut trace.actions,
        &mut trace.addresses,
        &mut trace.sizes_bytes,
        &mut trace.streams,
        &mut trace.times_us,
        &mut trace.stacks,
        &mut trace.user_metadata,
        &mut trace.compile_context,
    ]
}

/// The capacity of each column of `trace` that grows a row per event.
fn trace_column_capacities(trace: &mut DeviceTrace) -> [usize; 8] {
    trace_columns(trace).map(|column| column.capacity())
}

/// Rows every column of `trace` has room for.
fn trace_row_capacity(trace: &mut DeviceTrace) -> usize {
    trace_column_capacities(trace)
        .into_iter()
        .min()
        .unwrap_or(0)
}

/// Where a vector that grows with the input last grew, for [`wanted_len`], and its length
/// at the decoder's last progress tick, for [`LastGrowth::fills_soon`].
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct LastGrowth {
    fraction: f32,
    len: usize,
    tick_len: usize,
    /// Items added between the last two ticks.
    per_tick: usize,
    /// Fraction of the input at the last tick.
    tick_fraction: f32,
    /// Ticks left before the input's end, at the last tick's pace (at most
    /// [`GROW_AHEAD_TICKS`]).
    ticks_left: usize,
}

/// How many of the decoder's progress ticks (one per MiB of input) before a vector that grows
/// with the input would fill it is grown, at a tick ([`LastGrowth::fills_soon`]). A tick grows at
/// most one vector, and about ten grow with the input (the eight trace columns, the container
/// table, the pickle memo), so they all have their turn before they fill.
const GROW_AHEAD_TICKS: usize = 32;

impl LastGrowth {
    /// Called at each progress tick with the vector's length and capacity: whether, at the rate
    /// it grew since the last tick, it fills within [`GROW_AHEAD_TICKS`] ticks. Growing it then,
    /// between ticks' work, keeps the copy of a big vector out of the middle of a decode step
    /// and never copies two at once: growing all eight trace columns together at 264 MB copied
    /// 135 MB in one 80 ms step of the web page.
    /// A small file, with fewer ticks left, only grows what would fill before its end.
    pub(super) fn fills_soon(&mut self, len: usize, capacity: usize, fraction: f32) -> bool {
        let per_tick = len.saturating_sub(self.tick_len);
        let tick_step = fraction - self.tick_fraction;
        self.ticks_left = if tick_step > 0.0 {
            ((1.0 - fraction).max(0.0) / tick_step).ceil() as usize
        } else {
            GROW_AHEAD_TICKS
        }
        .min(GROW_AHEAD_TICKS);
        self.tick_len = len;
        self.per_tick = per_tick;
        self.tick_fraction = fraction;
        per_tick > 0 && capacity.saturating_sub(len) < per_tick.saturating_mul(self.ticks_left)
    }
}

/// Share of the input that must lie between two growths of a vector for [`wanted_len`] to
/// project from the items added in between (fewer bytes say too little about what follows).
const RECENT_MIN_FRACTION: f64 = 0.005;

/// The length to make room for in a full vector of `len` items that grows with the input (the
/// trace columns), remembering the growth in `last`: about what the whole input will need,
/// projected from the `fraction` of the input decoded so far, and at least a quarter more;
/// before 2 % of the input (too early to project from) or without a known fraction (JSON),
/// twice as much. Doubling all the way would leave up to half of each big vector unused and copy
/// it at its largest; a browser page has at most 4 GiB, and growing a vector needs its old and
/// new copies at once. (The container table and the memo, the largest, are chunked instead:
/// [`ChunkedVec`].)
///
/// The projection takes the greater of two rates of items per byte: over all the input so far,
/// and since the vector last grew (`last`). A file's start is sparser in trace events than the
/// rest (the segments, and the first use of every frame and string, come first), so the first
/// rate alone fell short and the vectors grew again late in the file, copying most of the
/// model at once (a 338 ms step and a few hundred MB of holes at 1 GB).
fn wanted_len(len: usize, fraction: f32, last: &mut LastGrowth) -> usize {
    let wanted = if fraction >= 0.02 {
        let done = f64::from(fraction);
        let mut per_fraction = len as f64 / done;
        let since = done - f64::from(last.fraction);
        if since >= RECENT_MIN_FRACTION && len >= last.len {
            per_fraction = per_fraction.max((len - last.len) as f64 / since);
        }
        let projected = ((len as f64 + per_fraction * (1.0 - done).max(0.0)) * 1.03) as usize;
        projected.max(len + len / 4)
    } else {
        len * 2
    };
    // At least twice the ticks left of room at the last tick's rate (the rest of a small
    // file): a projection from a sparse start can fall short of even that, and the vector
    // would be due again at once.
    let ahead = last.per_tick.saturating_mul(2 * last.ticks_left);
    *last = LastGrowth {
        fraction,
        len,
        ..*last
    };
    wanted.max(len + 1024).max(len.saturating_add(ahead))
}

fn non_negative(value: Option<i64>, record: &str, what: &str) -> BuildResult<Option<u64>> {
    match value {
        None => Ok(None),
        Some(v) => u64::try_from(v)
            .map(Some)
            .map_err(|_| format!("{record}: '{what}' is negative ({v})")),
    }
}

/// The parts of a snapshot's top level that the builder reads.
struct TopLevel {
    /// The `segments` list (or the whole root, for a bare list of segments).
    segments: Value,
    traces: Option<Value>,
    settings: Option<Value>,
    annotations: Option<Value>,
    /// The file is the oldest format: a bare list of segments, no dict.
    bare_list: bool,
}

/// A staged block as the model holds it: where old files leave the address out, it follows the
/// previous block (`next_address`); the legacy `history` supplies requested size and stack.
fn staged_block(staged: StagedBlock, next_address: u64) -> Block {
    let (history_requested, history_stack) = match staged.history {
        Some((size, stack)) => (Some(size), stack),
        None => (None, StackId::EMPTY),
    };
    Block {
        address: staged.address.unwrap_or(next_address),
        size_bytes: staged.size_bytes,
        requested_bytes: staged.requested_bytes.or(history_requested),
        state: staged.state,
        stack: if staged.stack == StackId::EMPTY {
            history_stack
        } else {
            staged.stack
        },
    }
}

/// One entry per device that has segments or a trace; segments are sorted by device.
fn device_states(segments: &[Segment], traces: &[DeviceTrace]) -> Vec<DeviceAllocState> {
    let mut device_ids: Vec<u32> = segments.iter().map(|s| s.device).collect();
    device_ids.extend(traces.iter().map(|t| t.device));
    device_ids.sort_unstable();
    device_ids.dedup();
    device_ids
        .into_iter()
        .map(|device| {
            let start = segments.partition_point(|s| s.device < device);
            let end = segments.partition_point(|s| s.device <= device);
            DeviceAllocState {
                device,
                segments: start..end,
                trace: traces.iter().position(|t| t.device == device),
            }
        })
        .collect()
}

fn gather_trace(staging: &DeviceTrace, rows: &[u32], device: u32) -> DeviceTrace {
    let take = |row: &u32| *row as usize;
    let mut trace = DeviceTrace {
        device,
        actions: rows.iter().map(|r| staging.actions[take(r)]).collect(),
        addresses: rows.iter().map(|r| staging.addresses[take(r)]).collect(),
        sizes_bytes: rows.iter().map(|r| staging.sizes_bytes[take(r)]).collect(),
        streams: rows.iter().map(|r| staging.streams[take(r)]).collect(),
        times_us: rows.iter().map(|r| staging.times_us[take(r)]).collect(),
        stacks: rows.iter().map(|r| staging.stacks[take(r)]).collect(),
        user_metadata: rows
            .iter()
            .map(|r| staging.user_metadata[take(r)])
            .collect(),
        compile_context: rows
            .iter()
            .map(|r| staging.compile_context[take(r)])
            .collect(),
        ..Default::default()
    };
    let position: HashMap<u32, u32> = rows
        .iter()
        .enumerate()
        .map(|(i, &r)| (r, i as u32))
        .collect();
    for &(row, free) in &staging.device_free_bytes {
        if let Some(&i) = position.get(&row) {
            trace.device_free_bytes.push((i, free));
        }
    }
    for &(row, pool) in &staging.pool_ids {
        if let Some(&i) = position.get(&row) {
            trace.pool_ids.push((i, pool));
        }
    }
    trace.device_free_bytes.sort_unstable_by_key(|&(i, _)| i);
    trace.pool_ids.sort_unstable_by_key(|&(i, _)| i);
    trace
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Items pushed as a decoder does: `count(fraction)` items once `fraction` of the input is
    /// read, the fraction told every 1/1000 of the input. Returns how often the vector grew
    /// after 2 % of the input, the items it held when it last grew, and its final length and
    /// capacity.
    fn fill_with_input(count: impl Fn(f64) -> usize) -> (usize, usize, usize, usize) {
        let mut items: Vec<u32> = Vec::new();
        let mut last = LastGrowth::default();
        let (mut late_growths, mut len_at_last_growth) = (0, 0);
        for step in 1..=1000 {
            let fraction = step as f32 / 1000.0;
            while items.len() < count(f64::from(fraction)) {
                if items.len() == items.capacity() {
                    let wanted = wanted_len(items.len(), fraction, &mut last);
                    items.reserve_exact(wanted - items.len());
                    if fraction >= 0.02 {
                        late_growths += 1;
                    }
                    len_at_last_growth = items.len();
                }
                items.push(0);
            }
        }
        (
            late_growths,
            len_at_last_growth,
            items.len(),
            items.capacity(),
        )
    }

    /// A file whose first 5 % holds no trace event (segments, first frames), then 10 M events
    /// evenly: the vector grows to about its final size once, early, instead of again and again
    /// through the file (each time copying all it holds).
    #[test]
    fn a_vector_growing_with_the_input_projects_from_the_recent_rate() {
        let events = 10_000_000.0;
        let (_, len_at_last_growth, len, capacity) =
            fill_with_input(|f| (((f - 0.05).max(0.0) / 0.95) * events) as usize);
        assert_eq!(len, 10_000_000);
        assert!(capacity <= len + len / 10, "{capacity}");
        assert!(
            len_at_last_growth < len / 10,
            "last grew at {len_at_last_growth}"
        );
        // An even file: one growth to the projected size after 2 %.
        let (late_growths, len_at_last_growth, len, capacity) =
            fill_with_input(|f| (f * events) as usize);
        assert!(capacity <= len + len / 10, "{capacity}");
        assert!(
            len_at_last_growth < len / 10,
            "last grew at {len_at_last_growth}"
        );
        assert_eq!(late_growths, 1);
    }

    /// Trace events added as a decoder adds them, with its progress tick every 1/1000 of the
    /// input: none in the first 5 % (segments), then a rate that quadruples halfway (a second
    /// phase of the job), which the projection at the first growth cannot foresee. The ticks
    /// grow the columns one at a time before they fill: no event finds the columns full once
    /// they hold more than 1 % of the trace (each such event grew all eight at once in the
    /// middle of a step), and the columns end close to the trace's length.
    #[test]
    fn ticks_grow_the_trace_columns_one_at_a_time_before_they_fill() {
        let events = 400_000.0;
        let count = |f: f64| {
            let f = (f - 0.05).max(0.0) / 0.95;
            (events * if f < 0.5 { f } else { 0.5 + 4.0 * (f - 0.5) }) as usize
        };
        for ticking in [false, true] {
            let mut builder = Builder::new(1 << 30);
            let Value::Str(alloc) = builder.string(b"alloc") else {
                panic!("a string");
            };
            let mut fields = [None; KEY_COUNT];
            fields[Key::Action as usize] = Some(Value::Str(alloc));
            let grown = || TRACE_GROWN_ON_PUSH.with(std::cell::Cell::get);
            let mut grown_late = 0;
            let mut most_columns_grown_at_a_tick = 0;
            for step in 1..=1000 {
                let fraction = step as f32 / 1000.0;
                if ticking {
                    let before = trace_column_capacities(&mut builder.trace);
                    builder.tick(fraction);
                    let after = trace_column_capacities(&mut builder.trace);
                    let columns_grown = before.iter().zip(&after).filter(|(b, a)| b != a).count();
                    most_columns_grown_at_a_tick = most_columns_grown_at_a_tick.max(columns_grown);
                } else {
                    builder.input_fraction = fraction;
                }
                let before = grown();
                while builder.trace.len() < count(f64::from(fraction)) {
                    if let Err(e) = builder.add_trace_row(&fields) {
                        panic!("{e}");
                    }
                }
                if builder.trace.len() > count(1.0) / 100 {
                    grown_late += grown() - before;
                }
            }
            let len = builder.trace.len();
            assert_eq!(len, count(1.0));
            let room = trace_row_capacity(&mut builder.trace);
            assert_eq!(room, builder.trace_room);
            if ticking {
                assert_eq!(grown_late, 0);
                assert_eq!(most_columns_grown_at_a_tick, 1);
                assert!(room <= len + len / 4, "{room} rows of room for {len}");
            } else {
                // Without ticks the columns fill after the rate changes, and all grow at once.
                assert!(grown_late >= 1);
            }
        }
    }

    #[test]
    fn per_container_state_stays_small() {
        // Millions of containers: slots and values dominate the reader's memory.
        assert!(std::mem::size_of::<Slot>() <= 12);
        assert!(std::mem::size_of::<Value>() <= 16);
    }
}
