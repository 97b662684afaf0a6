//! No reader allocates by a length or count the file claims before those bytes exist: crafted
//! inputs that claim gigabytes (string and frame lengths, memo ids, item counts, header and chunk
//! sizes) must end in an error while the heap stays within a small multiple of the input.
//!
//! A counting global allocator measures the peak heap of each read. It counts the allocations
//! of the thread that measures only: the other tests of this binary run in threads of the same
//! process at the same time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use vramscope_core::diagnose::log;
use vramscope_core::formats::{pytorch, vramcap};

/// The system allocator, counting the live bytes of each thread and their peak.
struct Counting;

thread_local! {
    // Const-initialised cells without destructors: reading them allocates nothing, as an
    // allocator must not.
    /// Bytes this thread allocated and has not freed (negative when it frees what another
    /// thread allocated).
    static LIVE_BYTES: Cell<isize> = const { Cell::new(0) };
    /// The highest `LIVE_BYTES` since `peak_growth` reset it.
    static PEAK_BYTES: Cell<isize> = const { Cell::new(0) };
}

/// `layout`'s size as a count of live bytes (no allocation is larger than `isize::MAX`).
fn signed(layout: Layout) -> isize {
    isize::try_from(layout.size()).unwrap_or(isize::MAX)
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged to the system allocator.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            // `try_with`: a thread's locals are gone while it exits; those allocations are
            // no read's.
            let _ = LIVE_BYTES.try_with(|live| {
                live.set(live.get().saturating_add(signed(layout)));
                let _ = PEAK_BYTES.try_with(|peak| peak.set(peak.get().max(live.get())));
            });
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(pointer, layout) };
        let _ = LIVE_BYTES.try_with(|live| live.set(live.get().saturating_sub(signed(layout))));
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Peak heap growth, in bytes, of this thread while `read` runs.
fn peak_growth(read: impl FnOnce()) -> usize {
    let before = LIVE_BYTES.with(Cell::get);
    PEAK_BYTES.with(|peak| peak.set(before));
    read();
    let peak = PEAK_BYTES.with(Cell::get);
    usize::try_from(peak.saturating_sub(before)).unwrap_or(0)
}

/// What a read of a crafted input may use: its fixed working buffers (the pickle reader streams
/// through a 1 MiB buffer; 2 MiB in all) plus 16 bytes per input byte (the crafted inputs decode
/// to almost nothing, so this is generous).
fn allowance(input_len: usize) -> usize {
    (2 << 20) + 16 * input_len
}

const PICKLE_4: &[u8] = &[0x80, 0x04];

fn pickle(body: &[u8]) -> Vec<u8> {
    let mut out = PICKLE_4.to_vec();
    out.extend_from_slice(body);
    out
}

/// Crafted pickles: each opcode's length field claims far more than the few bytes that follow.
fn pickle_cases() -> Vec<(&'static str, Vec<u8>)> {
    let mut cases = Vec::new();
    let mut u64_claim = |name, op: u8| {
        let mut body = vec![op];
        body.extend_from_slice(&(1u64 << 62).to_le_bytes());
        body.extend_from_slice(b"abc.");
        cases.push((name, pickle(&body)));
    };
    u64_claim("FRAME of 2^62 bytes", 0x95);
    u64_claim("BINUNICODE8 of 2^62 bytes", 0x8d);
    u64_claim("BINBYTES8 of 2^62 bytes", 0x8e);
    u64_claim("BYTEARRAY8 of 2^62 bytes", 0x96);
    let mut u32_claim = |name, op: u8| {
        let mut body = vec![op];
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        body.extend_from_slice(b"abc.");
        cases.push((name, pickle(&body)));
    };
    u32_claim("BINUNICODE of 4 GiB", b'X');
    u32_claim("BINSTRING of 4 GiB", b'T');
    u32_claim("BINBYTES of 4 GiB", b'B');
    u32_claim("LONG4 of 4 GiB", 0x8b);
    // A memo id of 4 billion (LONG_BINPUT), then a read of it (LONG_BINGET).
    let mut memo = vec![b'}', b'r'];
    memo.extend_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    memo.push(b'j');
    memo.extend_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    cases.push(("memo id of 4 billion", pickle(&memo)));
    // Ten thousand memo entries with ids far apart, each one opcode.
    let mut sparse = vec![b'}'];
    for i in 0..10_000u32 {
        sparse.push(b'r');
        sparse.extend_from_slice(&(i.wrapping_mul(400_009) | 1 << 31).to_le_bytes());
    }
    cases.push(("sparse memo ids", pickle(&sparse)));
    // A protocol-0 text line that never ends.
    let mut line = vec![b'I'];
    line.extend(std::iter::repeat_n(b'9', 4 << 20));
    cases.push(("an endless protocol-0 line", pickle(&line)));
    cases
}

/// A minimal valid capture, to craft damaged ones from.
fn capture_bytes() -> Vec<u8> {
    let capture = vramscope_core::model::Capture::new(
        vramscope_core::model::CaptureMeta::default(),
        vec![vramscope_core::model::DeviceFacts::default()],
    );
    vramcap::write_bytes(&capture)
}

/// A chunk frame as the format defines it: type, payload length, CRC32 of type + length + payload.
fn chunk(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut framed = vec![kind];
    framed.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&framed);
    crc.update(payload);
    framed.extend_from_slice(&crc.finalize().to_le_bytes());
    framed.extend_from_slice(payload);
    framed
}

/// LEB128, as the format's varints.
fn varint(mut value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// Crafted captures: a header and chunks that claim more than they hold, and counts of items
/// that are each many times bigger in memory than in the file, followed by bytes that fail to
/// decode at once.
fn capture_cases() -> Vec<(&'static str, Vec<u8>)> {
    let valid = capture_bytes();
    // Fixed header: magic (8), version (2), body length (4), CRC (4).
    let header_len = 18 + u32::from_le_bytes([valid[10], valid[11], valid[12], valid[13]]) as usize;
    let header = &valid[..header_len];
    let mut cases = Vec::new();

    let mut huge_header = valid.clone();
    huge_header[10..14].copy_from_slice(&u32::MAX.to_le_bytes());
    cases.push(("header body of 4 GiB", huge_header));

    let mut huge_chunk = header.to_vec();
    huge_chunk.push(1);
    huge_chunk.extend_from_slice(&u32::MAX.to_le_bytes());
    huge_chunk.extend_from_slice(&[0; 4]);
    huge_chunk.extend_from_slice(b"a few bytes");
    cases.push(("chunk of 4 GiB", huge_chunk));

    // A 1 MiB chunk whose count claims one item per byte, then bytes that are not an item.
    let claims = |kind: u8, prefix: &[u8]| {
        let mut payload = prefix.to_vec();
        let filler = 1 << 20;
        payload.extend(varint(filler as u64 - 8));
        payload.extend(std::iter::repeat_n(0xff, filler));
        let mut bytes = header.to_vec();
        if kind != 1 {
            // The series and track chunks refer to the series layout.
            bytes.extend(chunk(2, &[1, 0]));
        }
        bytes.extend(chunk(kind, &payload));
        bytes
    };
    cases.push(("a million batches claimed", claims(1, &[])));
    cases.push(("a million samples claimed", claims(3, &[0])));
    cases.push(("a million track pieces claimed", claims(4, &[])));
    cases.push(("a million health readings claimed", claims(6, &[])));
    cases
}

#[test]
fn crafted_lengths_and_counts_do_not_allocate_what_they_claim() {
    let mut failures = Vec::new();
    // `read` returns true when the input was accepted as undamaged, which none of these may be.
    let mut check =
        |reader: &str, name: &str, input: &[u8], allowed: usize, read: &dyn Fn(&[u8]) -> bool| {
            let mut accepted = false;
            let peak = peak_growth(|| accepted = read(input));
            println!(
                "{reader}: {name}: {} input bytes, peak heap {peak} bytes (allowed {allowed})",
                input.len()
            );
            if peak > allowed {
                failures.push(format!(
                "{reader}: {name}: peak heap {peak} bytes for {} input bytes (allowed {allowed})",
                input.len()
            ));
            }
            if accepted {
                failures.push(format!("{reader}: {name}: read as if it were undamaged"));
            }
        };
    let dir = tempfile::tempdir().expect("temporary directory");
    for (name, input) in pickle_cases() {
        let allowed = allowance(input.len());
        check("snapshot", name, &input, allowed, &|bytes| {
            pytorch::read_bytes(bytes, "crafted.pickle", &|_| true).is_ok()
        });
        // And through the streaming file reader, which reads ahead in buffers of its own.
        let path = dir.path().join("crafted.pickle");
        std::fs::write(&path, &input).expect("write the crafted file");
        check("snapshot file", name, &input, allowed, &|_| {
            pytorch::read_file(&path, &|_| true).is_ok()
        });
    }
    for (name, input) in capture_cases() {
        check("capture", name, &input, allowance(input.len()), &|bytes| {
            vramcap::read_bytes(bytes, "crafted.vramcap").is_ok_and(|c| c.recovery.is_none())
        });
    }
    // A log line is bounded, not refused: the 16 MiB line is analysed by its first 64 KiB, in
    // memory that does not grow with the line.
    let endless_line = vec![b'x'; 16 << 20];
    check("log", "a 16 MiB line", &endless_line, 1 << 20, &|bytes| {
        log::analyze_bytes(bytes, "crafted.log").is_ok_and(|analysis| analysis.long_lines == 0)
    });
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
