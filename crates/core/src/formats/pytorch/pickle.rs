//! A small pickle virtual machine that understands only data: dicts, lists, tuples, strings,
//! numbers, booleans and None (protocols 0 to 5, as written by Python's `pickle` and by
//! TorchScript's `Pickler`).
//!
//! Pickles are programs: class references and calls (`GLOBAL`, `REDUCE`, `BUILD`, …) would run
//! code in Python. This machine never does; it stops with an error that names the class. Every
//! length is checked against the bytes that are left, the stack and memo are bounded by the input
//! size, and nothing recurses, so hostile input ends in an error, not a crash or a hang.

use std::collections::HashMap;
use std::io::Read;

use super::build::{Builder, Value};
use super::chunked::ChunkedVec;

/// Why decoding stopped.
#[derive(Debug)]
pub(super) enum VmError {
    /// The input ended in the middle of something.
    Truncated { offset: u64, problem: String },
    /// The bytes are not a valid data pickle.
    Malformed { offset: u64, problem: String },
    /// The pickle would construct Python objects or call code.
    Code { offset: u64, what: String },
    /// The progress callback asked to stop.
    Cancelled,
    /// Reading the file failed.
    Io(std::io::Error),
    /// A fed input (see [`Input::fed`]) has no more bytes yet: the opcode is decoded again from
    /// its start once more are fed.
    NeedInput,
}

/// Boxed so that the hot `Ok` path returns in registers.
type VmResult<T> = Result<T, Box<VmError>>;

/// How often (in input bytes) progress is reported and cancellation checked.
const PROGRESS_STEP_BYTES: usize = 1 << 20;

/// Bytes are read in chunks of this size; the whole file is never held.
const CHUNK_BYTES: usize = 1 << 20;

/// Longest text line (protocol 0 opcodes) accepted.
const MAX_LINE_BYTES: usize = 64 << 20;

/// The pickle's bytes, streamed through a buffer that holds the current chunk (or one item
/// larger than a chunk): pulled from a reader, or fed slice by slice by a caller that cannot
/// block (the web viewer reads a dropped file in slices between frames).
pub(super) struct Input<'r> {
    /// `None` for a fed input: bytes arrive through [`Input::feed`].
    reader: Option<&'r mut dyn Read>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Start of the opcode being decoded in `buf`. A fed input keeps the bytes from here on, so
    /// that an opcode cut by the end of a slice is decoded again from its start.
    op_start: usize,
    /// File offset of `buf[0]`.
    base: u64,
    total_len: u64,
}

impl<'r> Input<'r> {
    /// Streams `total_len` bytes from `reader`.
    pub(super) fn new(reader: &'r mut dyn Read, total_len: u64) -> Input<'r> {
        Input {
            reader: Some(reader),
            ..Input::fed(total_len)
        }
    }

    /// An input of `total_len` bytes that arrive through [`Input::feed`].
    pub(super) fn fed(total_len: u64) -> Input<'r> {
        Input {
            reader: None,
            buf: Vec::new(),
            start: 0,
            end: 0,
            op_start: 0,
            base: 0,
            total_len,
        }
    }

    /// Appends the next bytes of a fed input (bytes past `total_len` are never decoded).
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        self.compact(self.op_start);
        self.buf.truncate(self.end);
        self.buf.extend_from_slice(bytes);
        self.end = self.buf.len();
    }

    /// Drops the bytes before `buf[keep]`.
    fn compact(&mut self, keep: usize) {
        self.buf.copy_within(keep..self.end, 0);
        self.base += keep as u64;
        self.end -= keep;
        self.start -= keep;
        self.op_start -= keep.min(self.op_start);
    }

    /// Length of the whole input in bytes.
    pub(super) fn total_len(&self) -> u64 {
        self.total_len
    }

    fn position(&self) -> u64 {
        self.base + self.start as u64
    }

    fn truncated(&self, what: &str, n: u64) -> Box<VmError> {
        let left = self.total_len.saturating_sub(self.position());
        Box::new(VmError::Truncated {
            offset: self.position(),
            problem: format!("{what} needs {n} bytes but the file ends after {left}"),
        })
    }

    /// Makes at least `n` bytes available at `buf[start..]` (the slow path of [`Input::take`]).
    #[cold]
    #[inline(never)]
    fn ensure(&mut self, n: usize, what: &str) -> VmResult<()> {
        if self.end - self.start >= n {
            return Ok(());
        }
        if n as u64 > self.total_len.saturating_sub(self.position()) {
            return Err(self.truncated(what, n as u64));
        }
        if self.reader.is_none() {
            return Err(Box::new(VmError::NeedInput));
        }
        // A reader never runs dry before the end, so the opcode's start need not be kept.
        self.compact(self.start);
        let wanted = n.max(CHUNK_BYTES);
        if self.buf.len() < wanted {
            self.buf.resize(wanted, 0);
        }
        while self.end < n {
            let read = match &mut self.reader {
                Some(reader) => read_retrying(&mut **reader, &mut self.buf[self.end..]),
                None => Ok(0),
            };
            let read = read.map_err(|e| Box::new(VmError::Io(e)))?;
            if read == 0 {
                return Err(self.truncated(what, n as u64));
            }
            self.end += read;
        }
        Ok(())
    }

    /// Marks the start of the next opcode (see [`Input::rewind`]).
    #[inline(always)]
    fn begin_opcode(&mut self) {
        self.op_start = self.start;
    }

    /// Goes back to the start of the opcode being decoded, whose bytes are not all there yet.
    fn rewind(&mut self) {
        self.start = self.op_start;
    }

    #[inline]
    fn take(&mut self, n: usize, what: &str) -> VmResult<&[u8]> {
        if self.end - self.start < n {
            self.ensure(n, what)?;
        }
        let slice = &self.buf[self.start..self.start + n];
        self.start += n;
        Ok(slice)
    }

    /// Skips `n` bytes without holding them (payloads no snapshot needs).
    fn skip(&mut self, n: u64, what: &str) -> VmResult<()> {
        if n > self.total_len.saturating_sub(self.position()) {
            return Err(self.truncated(what, n));
        }
        let mut left = n;
        while left > 0 {
            let step = left.min(CHUNK_BYTES as u64) as usize;
            self.take(step, what)?;
            left -= step as u64;
        }
        Ok(())
    }

    #[inline]
    fn array<const N: usize>(&mut self, what: &str) -> VmResult<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    /// The next opcode, or `None` at the end of the input.
    #[inline]
    fn opcode(&mut self) -> VmResult<Option<u8>> {
        if self.start < self.end {
            let op = self.buf[self.start];
            self.start += 1;
            return Ok(Some(op));
        }
        if self.position() >= self.total_len {
            return Ok(None);
        }
        self.ensure(1, "opcode")?;
        Ok(self.take(1, "opcode")?.first().copied())
    }

    #[inline]
    fn u8(&mut self, what: &str) -> VmResult<u8> {
        Ok(self.array::<1>(what)?[0])
    }

    fn u32(&mut self, what: &str) -> VmResult<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> VmResult<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A text line of a protocol-0 opcode, without its newline.
    fn line(&mut self, what: &str) -> VmResult<&[u8]> {
        let mut searched = 0;
        loop {
            let window = &self.buf[self.start + searched..self.end];
            if let Some(n) = window.iter().position(|&b| b == b'\n') {
                let line_end = self.start + searched + n;
                let line = &self.buf[self.start..line_end];
                self.start = line_end + 1;
                return Ok(line);
            }
            searched = self.end - self.start;
            let left = self.total_len.saturating_sub(self.position()) as usize;
            if searched >= left || searched >= MAX_LINE_BYTES {
                return Err(Box::new(VmError::Truncated {
                    offset: self.position(),
                    problem: format!("{what}: the file ends inside a text line"),
                }));
            }
            self.ensure((searched * 2).clamp(searched + 1, left), what)?;
        }
    }

    fn length(&self, n: u64, what: &str) -> VmResult<usize> {
        usize::try_from(n).map_err(|_| self.truncated(what, n))
    }
}

/// `reader.read`, retried when a signal interrupts it.
fn read_retrying(reader: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match reader.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

struct Machine {
    builder: Builder,
    stack: Vec<Value>,
    marks: Vec<usize>,
    /// The memo's entries numbered from 0: a chunked vector, as it grows to hundreds of MB.
    memo: ChunkedVec<Value>,
    memo_far: HashMap<u64, Value>,
    memo_count: u64,
    max_stack: usize,
    offset: u64,
}

impl Machine {
    /// The progress tick: how far the input is decoded (see [`Builder::tick`]).
    fn tick(&mut self, fraction: f32) {
        self.builder.tick(fraction);
    }

    fn malformed(&self, problem: impl Into<String>) -> Box<VmError> {
        Box::new(VmError::Malformed {
            offset: self.offset,
            problem: problem.into(),
        })
    }

    #[inline(always)]
    fn push(&mut self, value: Value) -> VmResult<()> {
        if self.stack.len() >= self.max_stack {
            return Err(self.stack_overflow());
        }
        self.stack.push(value);
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn stack_overflow(&self) -> Box<VmError> {
        self.malformed(format!(
            "the pickle stack grew past {} items; a memory snapshot never needs that many",
            self.max_stack
        ))
    }

    fn pop(&mut self) -> VmResult<Value> {
        match self.stack.pop() {
            Some(Value::Mark) => Err(self.malformed("an opcode popped a MARK as a value")),
            Some(value) => Ok(value),
            None => Err(self.malformed("an opcode needs a value but the stack is empty")),
        }
    }

    fn top(&self) -> VmResult<Value> {
        match self.stack.last() {
            Some(Value::Mark) | None => Err(self.malformed("an opcode needs a value on the stack")),
            Some(value) => Ok(*value),
        }
    }

    fn mark_position(&mut self) -> VmResult<usize> {
        let mark = self
            .marks
            .pop()
            .ok_or_else(|| self.malformed("an opcode needs a MARK but there is none"))?;
        if mark > self.stack.len() {
            return Err(self.malformed("MARK points past the top of the stack"));
        }
        Ok(mark)
    }

    fn build<T>(&self, result: Result<T, String>) -> VmResult<T> {
        result.map_err(|problem| self.malformed(problem))
    }

    /// Stores the top of the stack in the memo. Real picklers number entries 0, 1, 2, …, which
    /// go to a vector; any other id goes to a map, so no id can make the reader allocate more
    /// than one entry per opcode.
    fn memo_put(&mut self, index: u64) -> VmResult<()> {
        let value = self.top()?;
        if index < self.memo.len() as u64 {
            if self.memo[index as usize] == Value::Mark {
                self.memo_count += 1;
            }
            self.memo[index as usize] = value;
        } else if index == self.memo.len() as u64 {
            self.memo.push(value);
            self.memo_count += 1;
        } else {
            if self.memo_far.insert(index, value).is_none() {
                self.memo_count += 1;
            }
            if self.memo_far.len() > self.max_stack {
                return Err(self.malformed("too many sparse memo entries"));
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn memo_get(&mut self, index: u64) -> VmResult<()> {
        match self.memo.get(index as usize) {
            Some(value) if !matches!(value, Value::Mark) => {
                let value = *value;
                self.push(value)
            }
            _ => self.memo_get_far(index),
        }
    }

    #[cold]
    #[inline(never)]
    fn memo_get_far(&mut self, index: u64) -> VmResult<()> {
        match self.memo_far.get(&index).copied() {
            Some(value) => self.push(value),
            None => Err(self.malformed(format!("memo entry {index} is read before it is set"))),
        }
    }

    fn code(&self, what: String) -> Box<VmError> {
        Box::new(VmError::Code {
            offset: self.offset,
            what,
        })
    }

    /// MARK: remembers where the stack stands, for the opcode that takes the values above it,
    /// and pushes the mark.
    #[inline(always)]
    fn mark(&mut self) -> VmResult<()> {
        if self.marks.len() >= self.max_stack {
            return Err(self.malformed("too many MARKs"));
        }
        self.marks.push(self.stack.len());
        self.push(Value::Mark)
    }

    /// POP: drops the top of the stack; a MARK on top goes with its remembered position.
    #[inline(always)]
    fn pop_discarding(&mut self) -> VmResult<()> {
        if self.stack.last() == Some(&Value::Mark) {
            self.stack.pop();
            self.marks.pop();
        } else {
            self.pop()?;
        }
        Ok(())
    }

    /// POP_MARK: drops the values above the last MARK and the mark.
    #[inline(always)]
    fn pop_mark(&mut self) -> VmResult<()> {
        let mark = self.mark_position()?;
        self.stack.truncate(mark);
        Ok(())
    }

    /// DUP: pushes the top of the stack again.
    #[inline(always)]
    fn dup(&mut self) -> VmResult<()> {
        let top = self.top()?;
        self.push(top)
    }

    /// Pushes the string of `bytes` (text, or a Python 2 str read as text) as the builder
    /// interns it.
    #[inline(always)]
    fn push_string(&mut self, bytes: &[u8]) -> VmResult<()> {
        let v = self.builder.string(bytes);
        self.push(v)
    }

    /// Pushes the empty container `make` has the builder make (refused, as malformed, where the
    /// builder refuses it).
    #[inline(always)]
    fn push_new(
        &mut self,
        make: impl FnOnce(&mut Builder) -> Result<Value, String>,
    ) -> VmResult<()> {
        let result = make(&mut self.builder);
        let v = self.build(result)?;
        self.push(v)
    }

    /// TUPLE1, TUPLE2, TUPLE3: the top `n` values replaced by their tuple.
    #[inline(always)]
    fn tuple_of_top(&mut self, n: usize) -> VmResult<()> {
        if self.stack.len() < n || self.stack[self.stack.len() - n..].contains(&Value::Mark) {
            return Err(self.malformed("TUPLE needs more values than the stack holds"));
        }
        let start = self.stack.len() - n;
        let result = self.builder.new_tuple(&self.stack[start..]);
        let v = self.build(result)?;
        self.stack.truncate(start);
        self.push(v)
    }

    /// TUPLE: the values above the last MARK, and the mark, replaced by their tuple.
    #[inline(always)]
    fn tuple_from_mark(&mut self) -> VmResult<()> {
        let mark = self.mark_position()?;
        let result = self.builder.new_tuple(&self.stack[mark + 1..]);
        let v = self.build(result)?;
        self.stack.truncate(mark);
        self.push(v)
    }

    /// LIST, FROZENSET: the values above the last MARK, and the mark, replaced by a list of
    /// them.
    #[inline(always)]
    fn list_from_mark(&mut self) -> VmResult<()> {
        let mark = self.mark_position()?;
        let result = self.builder.new_list();
        let list = self.build(result)?;
        let result = self.builder.list_append(list, &self.stack[mark + 1..]);
        self.build(result)?;
        self.stack.truncate(mark);
        self.push(list)
    }

    /// DICT: the keys and values above the last MARK, and the mark, replaced by a dict of them.
    #[inline(always)]
    fn dict_from_mark(&mut self) -> VmResult<()> {
        let mark = self.mark_position()?;
        let result = self.builder.new_dict();
        let dict = self.build(result)?;
        let result = self.builder.dict_set(dict, &self.stack[mark + 1..]);
        self.build(result)?;
        self.stack.truncate(mark);
        self.push(dict)
    }

    /// APPEND: the top value appended to the list below it.
    #[inline(always)]
    fn append(&mut self) -> VmResult<()> {
        let item = self.pop()?;
        let list = self.top()?;
        let result = self.builder.list_append(list, &[item]);
        self.build(result)?;
        Ok(())
    }

    /// APPENDS, ADDITEMS: the values above the last MARK appended to the list below the mark,
    /// and dropped with the mark.
    #[inline(always)]
    fn appends(&mut self) -> VmResult<()> {
        let mark = self.mark_position()?;
        if mark == 0 {
            return Err(self.malformed("APPENDS without a list below the MARK"));
        }
        let list = self.stack[mark - 1];
        let result = self.builder.list_append(list, &self.stack[mark + 1..]);
        self.build(result)?;
        self.stack.truncate(mark);
        Ok(())
    }

    /// SETITEM: the top key and value set in the dict below them.
    #[inline(always)]
    fn setitem(&mut self) -> VmResult<()> {
        let value = self.pop()?;
        let key = self.pop()?;
        let dict = self.top()?;
        let result = self.builder.dict_set(dict, &[key, value]);
        self.build(result)?;
        Ok(())
    }

    /// SETITEMS: the keys and values above the last MARK set in the dict below the mark, and
    /// dropped with the mark.
    #[inline(always)]
    fn setitems(&mut self) -> VmResult<()> {
        let mark = self.mark_position()?;
        if mark == 0 {
            return Err(self.malformed("SETITEMS without a dict below the MARK"));
        }
        let dict = self.stack[mark - 1];
        let result = self.builder.dict_set(dict, &self.stack[mark + 1..]);
        self.build(result)?;
        self.stack.truncate(mark);
        Ok(())
    }

    /// STACK_GLOBAL refused: a snapshot holds no Python class. Names the class the module and
    /// name on the stack give, where they are text.
    fn stack_global_refused(&mut self) -> Box<VmError> {
        let name = self
            .pop()
            .ok()
            .and_then(|v| self.builder.text(v).map(str::to_owned));
        let module = self
            .pop()
            .ok()
            .and_then(|v| self.builder.text(v).map(str::to_owned));
        let what = match (module, name) {
            (Some(module), Some(name)) => format!("Python class {module}.{name}"),
            _ => "a Python class (STACK_GLOBAL)".to_owned(),
        };
        self.code(what)
    }

    /// An opcode pickle does not have.
    fn unknown_opcode(&self, op: u8) -> Box<VmError> {
        self.malformed(format!(
            "unknown pickle opcode 0x{op:02x}; this is not a pickle or it is damaged"
        ))
    }
}

/// Decodes a pickle read from `input`'s reader and returns the builder it filled, the root
/// value and the protocol (0 if the pickle has no `PROTO` opcode).
pub(super) fn decode(
    mut input: Input<'_>,
    progress: &dyn Fn(f32) -> bool,
) -> VmResult<(Builder, Value, u8)> {
    let mut decoder = Decoder::new(input.total_len);
    match decoder.run(&mut input, progress)? {
        Some(root) => Ok(decoder.finish(root)),
        // A reader never runs dry before the end of the input; this is only for completeness.
        None => Err(input.truncated("the pickle", 1)),
    }
}

/// A pickle being decoded: the machine between slices of a fed [`Input`] (and while one reader
/// input is decoded whole, see [`decode`]).
pub(super) struct Decoder {
    vm: Machine,
    protocol: u8,
    next_progress: u64,
}

impl Decoder {
    /// A decoder for a pickle of `total_len` bytes (which bounds its stack and the work it
    /// accepts).
    pub(super) fn new(total_len: u64) -> Decoder {
        Decoder {
            vm: Machine {
                builder: Builder::new(usize::try_from(total_len).unwrap_or(usize::MAX)),
                stack: Vec::new(),
                marks: Vec::new(),
                memo: ChunkedVec::new(Value::Mark),
                memo_far: HashMap::new(),
                memo_count: 0,
                // Real snapshots keep at most one batch of items per nesting level on the
                // stack, except TorchScript's writer, which pushes a whole list before APPENDS.
                max_stack: usize::try_from(total_len / 4)
                    .unwrap_or(usize::MAX)
                    .max(1 << 20),
                offset: 0,
            },
            protocol: 0,
            next_progress: PROGRESS_STEP_BYTES as u64,
        }
    }

    /// The builder, the root value and the protocol, once [`Decoder::run`] returned the root.
    pub(super) fn finish(self, root: Value) -> (Builder, Value, u8) {
        (self.vm.builder, root, self.protocol)
    }

    /// Decodes opcodes until `STOP` (returns the root value) or, for a fed input, until the
    /// bytes fed so far end (returns `None`: feed more and run again).
    pub(super) fn run(
        &mut self,
        input: &mut Input<'_>,
        progress: &dyn Fn(f32) -> bool,
    ) -> VmResult<Option<Value>> {
        let total_len = input.total_len;
        loop {
            let position = input.position();
            if position >= self.next_progress {
                self.next_progress = position + PROGRESS_STEP_BYTES as u64;
                let fraction = position as f32 / total_len.max(1) as f32;
                self.vm.tick(fraction);
                if !progress(fraction) {
                    return Err(Box::new(VmError::Cancelled));
                }
            }
            self.vm.offset = position;
            input.begin_opcode();
            match self.step(input) {
                Ok(None) => {}
                Ok(Some(root)) => return Ok(Some(root)),
                Err(error) if matches!(*error, VmError::NeedInput) => {
                    input.rewind();
                    return Ok(None);
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Decodes one opcode; `Some` is the root value at `STOP`. Every opcode reads all its bytes
    /// before it changes the machine, so one cut short by a fed input can run again.
    ///
    /// One arm per opcode: the arm reads the opcode's argument from `input`, and an opcode that
    /// works on the stack is a step of the [`Machine`] of its own (inlined, as this is).
    #[inline(always)]
    fn step(&mut self, input: &mut Input<'_>) -> VmResult<Option<Value>> {
        let vm = &mut self.vm;
        let Some(op) = input.opcode()? else {
            return Err(Box::new(VmError::Truncated {
                offset: vm.offset,
                problem: "the file ends before the pickle's STOP opcode".to_owned(),
            }));
        };
        match op {
            // PROTO
            0x80 => {
                let protocol = input.u8("PROTO")?;
                self.protocol = protocol;
                if protocol > 5 {
                    return Err(vm.malformed(format!("unsupported pickle protocol {protocol}")));
                }
            }
            // FRAME: only framing; the content follows inline.
            0x95 => {
                input.u64("FRAME")?;
            }
            // STOP
            b'.' => {
                let root = vm.pop()?;
                return Ok(Some(root));
            }
            // MARK, POP, POP_MARK, DUP
            b'(' => vm.mark()?,
            b'0' => vm.pop_discarding()?,
            b'1' => vm.pop_mark()?,
            b'2' => vm.dup()?,
            // NONE, NEWTRUE, NEWFALSE
            b'N' => vm.push(Value::None)?,
            0x88 => vm.push(Value::Bool(true))?,
            0x89 => vm.push(Value::Bool(false))?,
            // BININT, BININT1, BININT2
            b'J' => {
                let v = i32::from_le_bytes(input.array("BININT")?);
                vm.push(Value::Int(i64::from(v)))?;
            }
            b'K' => vm.push(Value::Int(i64::from(input.u8("BININT1")?)))?,
            b'M' => {
                let v = u16::from_le_bytes(input.array("BININT2")?);
                vm.push(Value::Int(i64::from(v)))?;
            }
            // LONG1, LONG4
            0x8a => {
                let n = input.u8("LONG1")? as usize;
                let bytes = input.take(n, "LONG1")?;
                vm.push(long_value(bytes))?;
            }
            0x8b => {
                let n = input.u32("LONG4")?;
                let n = input.length(u64::from(n), "LONG4")?;
                let bytes = input.take(n, "LONG4")?;
                vm.push(long_value(bytes))?;
            }
            // INT, LONG (text)
            b'I' | b'L' => {
                let line = input.line("INT")?;
                let value =
                    text_int(line).ok_or_else(|| vm.malformed("INT/LONG is not a number"))?;
                vm.push(value)?;
            }
            // BINFLOAT (big-endian), FLOAT (text)
            b'G' => vm.push(Value::Float(f64::from_be_bytes(input.array("BINFLOAT")?)))?,
            b'F' => {
                let line = input.line("FLOAT")?;
                let v = text_float(line).ok_or_else(|| vm.malformed("FLOAT is not a number"))?;
                vm.push(Value::Float(v))?;
            }
            // SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
            0x8c => {
                let n = input.u8("SHORT_BINUNICODE")? as usize;
                vm.push_string(input.take(n, "SHORT_BINUNICODE")?)?;
            }
            b'X' => {
                let n = input.u32("BINUNICODE")? as usize;
                vm.push_string(input.take(n, "BINUNICODE")?)?;
            }
            0x8d => {
                let n = input.u64("BINUNICODE8")?;
                let n = input.length(n, "BINUNICODE8")?;
                vm.push_string(input.take(n, "BINUNICODE8")?)?;
            }
            // UNICODE (text, raw-unicode-escape)
            b'V' => {
                let line = input.line("UNICODE")?;
                let text = raw_unicode_unescape(line);
                vm.push_string(text.as_bytes())?;
            }
            // STRING (text), BINSTRING, SHORT_BINSTRING: Python 2 str, read as text.
            b'S' => {
                let line = input.line("STRING")?;
                let inner = unquoted(line).ok_or_else(|| vm.malformed("STRING is not quoted"))?;
                vm.push_string(inner)?;
            }
            b'T' => {
                let n = input.u32("BINSTRING")? as usize;
                vm.push_string(input.take(n, "BINSTRING")?)?;
            }
            b'U' => {
                let n = input.u8("SHORT_BINSTRING")? as usize;
                vm.push_string(input.take(n, "SHORT_BINSTRING")?)?;
            }
            // SHORT_BINBYTES, BINBYTES, BINBYTES8, BYTEARRAY8
            b'C' => {
                let n = input.u8("SHORT_BINBYTES")?;
                input.skip(u64::from(n), "SHORT_BINBYTES")?;
                vm.push(Value::Bytes)?;
            }
            b'B' => {
                let n = input.u32("BINBYTES")?;
                input.skip(u64::from(n), "BINBYTES")?;
                vm.push(Value::Bytes)?;
            }
            0x8e | 0x96 => {
                let n = input.u64("BINBYTES8")?;
                input.skip(n, "BINBYTES8")?;
                vm.push(Value::Bytes)?;
            }
            // NEXT_BUFFER, READONLY_BUFFER: out-of-band buffers never appear in snapshots.
            0x97 | 0x98 => {
                return Err(vm.malformed("the pickle uses out-of-band buffers (protocol 5)"));
            }
            // EMPTY_DICT, EMPTY_LIST, EMPTY_SET
            b'}' => vm.push_new(Builder::new_dict)?,
            b']' | 0x8f => vm.push_new(Builder::new_list)?,
            // EMPTY_TUPLE, TUPLE1, TUPLE2, TUPLE3, TUPLE
            b')' => vm.push_new(|builder| builder.new_tuple(&[]))?,
            0x85..=0x87 => vm.tuple_of_top((op - 0x84) as usize)?,
            b't' => vm.tuple_from_mark()?,
            // LIST, FROZENSET (from MARK), DICT (from MARK)
            b'l' | 0x91 => vm.list_from_mark()?,
            b'd' => vm.dict_from_mark()?,
            // APPEND, APPENDS (and ADDITEMS), SETITEM, SETITEMS
            b'a' => vm.append()?,
            b'e' | 0x90 => vm.appends()?,
            b's' => vm.setitem()?,
            b'u' => vm.setitems()?,
            // BINGET, LONG_BINGET, GET
            b'h' => vm.memo_get(u64::from(input.u8("BINGET")?))?,
            b'j' => vm.memo_get(u64::from(input.u32("LONG_BINGET")?))?,
            b'g' => {
                let line = input.line("GET")?;
                let index = text_index(line).ok_or_else(|| vm.malformed("GET index"))?;
                vm.memo_get(index)?;
            }
            // BINPUT, LONG_BINPUT, PUT, MEMOIZE
            b'q' => vm.memo_put(u64::from(input.u8("BINPUT")?))?,
            b'r' => vm.memo_put(u64::from(input.u32("LONG_BINPUT")?))?,
            b'p' => {
                let line = input.line("PUT")?;
                let index = text_index(line).ok_or_else(|| vm.malformed("PUT index"))?;
                vm.memo_put(index)?;
            }
            0x94 => {
                let index = vm.memo_count;
                vm.memo_put(index)?;
            }
            // GLOBAL, INST: module and name as text lines. STACK_GLOBAL: from the stack.
            b'c' | b'i' => return Err(vm.code(global_class(input)?)),
            0x93 => return Err(vm.stack_global_refused()),
            b'R' | b'b' | b'o' | 0x81 | 0x92 | b'P' | b'Q' | 0x82..=0x84 => {
                return Err(vm.code(format!(
                    "Python objects or code ({} opcode)",
                    forbidden_name(op)
                )));
            }
            other => return Err(vm.unknown_opcode(other)),
        }
        Ok(None)
    }
}

/// GLOBAL, INST: the class their module and name lines name (refused: a snapshot holds none).
fn global_class(input: &mut Input<'_>) -> VmResult<String> {
    let module = String::from_utf8_lossy(input.line("GLOBAL")?).into_owned();
    let name = String::from_utf8_lossy(input.line("GLOBAL")?).into_owned();
    Ok(format!("Python class {module}.{name}"))
}

/// FLOAT's text.
fn text_float(line: &[u8]) -> Option<f64> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|t| t.trim().parse::<f64>().ok())
}

/// STRING's text inside its single or double quotes.
fn unquoted(line: &[u8]) -> Option<&[u8]> {
    line.strip_prefix(b"'")
        .and_then(|l| l.strip_suffix(b"'"))
        .or_else(|| line.strip_prefix(b"\"").and_then(|l| l.strip_suffix(b"\"")))
}

fn forbidden_name(op: u8) -> &'static str {
    match op {
        b'R' => "REDUCE",
        b'b' => "BUILD",
        b'o' => "OBJ",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        _ => "EXT",
    }
}

/// Decodes a little-endian two's-complement integer of any length (LONG1/LONG4).
///
/// Inlined: the usual case (addresses, sizes, times of up to 8 bytes) then builds the value in
/// registers; returning it through memory from a call cost a store-forwarding stall per number.
#[inline(always)]
fn long_value(bytes: &[u8]) -> Value {
    match bytes.len() {
        0 => Value::Int(0),
        n @ 1..=8 => {
            // Shifts, not a copy into a buffer: a variable-length memcpy followed by an 8-byte
            // load stalls on store forwarding.
            let mut bits = 0u64;
            for (i, &byte) in bytes.iter().enumerate() {
                bits |= u64::from(byte) << (8 * i);
            }
            if n < 8 && bytes[n - 1] & 0x80 != 0 {
                bits |= u64::MAX << (8 * n);
            }
            Value::Int(bits as i64)
        }
        _ => long_value_wide(bytes),
    }
}

/// [`long_value`] for more than 8 bytes (rare: a `u64` above `i64::MAX`, or a big number).
#[cold]
#[inline(never)]
fn long_value_wide(bytes: &[u8]) -> Value {
    let negative = bytes[bytes.len() - 1] & 0x80 != 0;
    let fill = if negative { 0xff } else { 0x00 };
    // Strip redundant sign bytes.
    let mut len = bytes.len();
    while len > 1 && bytes[len - 1] == fill && (bytes[len - 2] & 0x80 != 0) == negative {
        len -= 1;
    }
    if len <= 8 {
        let mut buf = [fill; 8];
        buf[..len].copy_from_slice(&bytes[..len]);
        return Value::Int(i64::from_le_bytes(buf));
    }
    if len == 9 && !negative && bytes[8] == 0 {
        let mut buf = [0u8; 8];
        buf.copy_from_slice(&bytes[..8]);
        return Value::U64(u64::from_le_bytes(buf));
    }
    Value::BigInt
}

fn text_int(line: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(line).ok()?.trim();
    match text {
        "00" => return Some(Value::Bool(false)),
        "01" => return Some(Value::Bool(true)),
        _ => {}
    }
    let text = text.strip_suffix('L').unwrap_or(text);
    if let Ok(v) = text.parse::<i64>() {
        return Some(Value::Int(v));
    }
    if let Ok(v) = text.parse::<u64>() {
        return Some(Value::U64(v));
    }
    if !text.is_empty()
        && text
            .trim_start_matches('-')
            .bytes()
            .all(|b| b.is_ascii_digit())
    {
        return Some(Value::BigInt);
    }
    None
}

fn text_index(line: &[u8]) -> Option<u64> {
    std::str::from_utf8(line).ok()?.trim().parse().ok()
}

/// Python's raw-unicode-escape: `\uXXXX` and `\UXXXXXXXX` escapes, other bytes Latin-1.
fn raw_unicode_unescape(line: &[u8]) -> String {
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        let b = line[i];
        if b == b'\\' && i + 1 < line.len() && (line[i + 1] == b'u' || line[i + 1] == b'U') {
            let digits = if line[i + 1] == b'u' { 4 } else { 8 };
            let code = line
                .get(i + 2..i + 2 + digits)
                .and_then(|hex| std::str::from_utf8(hex).ok())
                .and_then(|hex| u32::from_str_radix(hex, 16).ok());
            if let Some(code) = code {
                out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
                i += 2 + digits;
                continue;
            }
        }
        out.push(char::from(b));
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_cover_signed_unsigned_and_huge() {
        assert_eq!(long_value(&[]), Value::Int(0));
        assert_eq!(long_value(&[0xff]), Value::Int(-1));
        assert_eq!(long_value(&[0x00, 0x80, 0x00]), Value::Int(0x8000));
        assert_eq!(
            long_value(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00]),
            Value::U64(u64::MAX)
        );
        assert_eq!(long_value(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 1]), Value::BigInt);
        assert_eq!(
            long_value(&[0x00, 0x10, 0x32, 0x54, 0xc6, 0x7f]),
            Value::Int(0x7fc6_5432_1000)
        );
    }

    #[test]
    fn text_numbers_and_escapes() {
        assert_eq!(text_int(b"01"), Some(Value::Bool(true)));
        assert_eq!(text_int(b"-42"), Some(Value::Int(-42)));
        assert_eq!(text_int(b"123L"), Some(Value::Int(123)));
        assert_eq!(text_int(b"x"), None);
        assert_eq!(raw_unicode_unescape(b"a\\u00e9b"), "a\u{e9}b");
    }
}
