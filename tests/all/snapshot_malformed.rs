//! Damaged and hostile input: every case must end in a clear error (naming the file and the
//! problem) quickly and without a panic, never in code execution, a hang or a memory blow-up.

use std::cell::{Cell, RefCell};
use std::path::Path;
use std::time::{Duration, Instant};

use vramscope_core::formats::pytorch::{SnapshotError, looks_like_snapshot, read_bytes, read_file};
use vramscope_core::model::allocator::{BlockState, TraceAction};

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pytorch")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn read(
    bytes: &[u8],
) -> Result<vramscope_core::model::allocator::AllocatorSnapshot, SnapshotError> {
    read_bytes(bytes, "input.pickle", &|_| true)
}

fn error_text(bytes: &[u8]) -> String {
    match read(bytes) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

/// Pickle assembly helpers (protocol 4 opcodes).
fn short_str(s: &str) -> Vec<u8> {
    let mut out = vec![0x8c, s.len() as u8];
    out.extend_from_slice(s.as_bytes());
    out
}

#[test]
fn class_references_are_refused_without_running_anything() {
    // os.system via GLOBAL (protocol 0-3 style) and builtins.eval via STACK_GLOBAL.
    let global = b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02Rq\x03.";
    let text = error_text(global);
    assert!(text.contains("not a memory snapshot"), "{text}");
    assert!(text.contains("os.system"), "{text}");
    assert!(text.starts_with("input.pickle: "), "{text}");

    let mut stack_global = vec![0x80, 0x04];
    stack_global.extend(short_str("builtins"));
    stack_global.extend(short_str("eval"));
    stack_global.extend([0x93, b'.']);
    let text = error_text(&stack_global);
    assert!(text.contains("builtins.eval"), "{text}");

    for (op, name) in [
        (b'R', "REDUCE"),
        (b'b', "BUILD"),
        (0x81, "NEWOBJ"),
        (b'Q', "BINPERSID"),
    ] {
        let bytes = [0x80, 0x02, b'N', b'N', op, b'.'];
        let text = error_text(&bytes);
        assert!(text.contains(name), "{name}: {text}");
        assert!(text.contains("not a memory snapshot"), "{text}");
    }
    let inst = b"(iposix\nsystem\n.";
    assert!(error_text(inst).contains("posix.system"));
}

#[test]
fn every_truncation_of_a_real_file_is_a_clear_error() {
    let bytes = fixture("frag_oom.pickle");
    let step = bytes.len() / 300;
    for cut in (1..bytes.len()).step_by(step.max(1)) {
        match read(&bytes[..cut]) {
            Err(SnapshotError::Truncated { offset, name, .. }) => {
                assert!(offset <= cut as u64, "cut {cut}: offset {offset}");
                assert_eq!(name, "input.pickle");
            }
            Err(other) => panic!("cut {cut}: expected Truncated, got {other}"),
            Ok(_) => panic!("cut {cut}: a truncated file was accepted"),
        }
    }
    // The JSON form too.
    let json = fixture("leak.snapshot.json");
    let text = error_text(&json[..json.len() / 2]);
    assert!(text.contains("truncated"), "{text}");
}

#[test]
fn absurd_lengths_fail_fast() {
    for bytes in [
        // BINUNICODE8 of 2^62 bytes, BINUNICODE of 4 GiB, LONG4 of 2 GiB, BINBYTES8.
        vec![0x80, 0x04, 0x8d, 0, 0, 0, 0, 0, 0, 0, 0x40, b'.'],
        vec![0x80, 0x02, b'X', 0xff, 0xff, 0xff, 0xff, b'.'],
        vec![0x80, 0x02, 0x8b, 0xff, 0xff, 0xff, 0x7f, b'.'],
        vec![
            0x80, 0x04, 0x8e, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ],
    ] {
        let started = Instant::now();
        let text = error_text(&bytes);
        assert!(text.contains("truncated"), "{text}");
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}

#[test]
fn deep_nesting_does_not_overflow_the_stack() {
    // 200 000 nested lists: EMPTY_LIST MARK ... then APPENDS for each level.
    let depth = 200_000;
    let mut bytes = vec![0x80, 0x04];
    for _ in 0..depth {
        bytes.extend([b']', b'(']);
    }
    bytes.push(b']');
    bytes.extend(std::iter::repeat_n(b'e', depth));
    bytes.push(b'.');
    let started = Instant::now();
    let text = error_text(&bytes);
    assert!(text.contains("not a memory snapshot"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(5));

    // The same in JSON is refused by the parser's depth limit.
    let json = "[".repeat(100_000);
    let text = error_text(json.as_bytes());
    assert!(text.contains("JSON"), "{text}");
}

#[test]
fn memo_bombs_are_refused_with_bounded_work() {
    // One segment with 20 000 blocks (the same memoized block dict), referenced 50 000 times
    // from the segment list: 10^9 blocks if expanded, from about 150 KB of input.
    let mut b = vec![0x80, 0x04, b'}', 0x94]; // root dict, memo 0
    b.extend(short_str("segments"));
    b.extend([0x94, b']', 0x94]); // key memo 1, segments list memo 2
    // The segment dict (memo 3).
    b.extend([b'}', 0x94, b'(']);
    b.extend(short_str("address"));
    b.extend([0x94, b'K', 0]);
    b.extend(short_str("blocks"));
    b.extend([0x94, b']', 0x94, b'(']); // blocks list (memo 6)
    b.extend([b'}', 0x94, b'(']); // block dict (memo 7)
    b.extend(short_str("size"));
    b.extend([0x94, b'K', 1]);
    b.extend(short_str("state"));
    b.extend([0x94]);
    b.extend(short_str("inactive"));
    b.extend([0x94, b'u']); // block complete
    for _ in 0..20_000 {
        b.extend([b'h', 7]);
    }
    b.extend([b'e', b'u', b'0']); // blocks appended, segment complete, popped
    b.push(b'(');
    for _ in 0..50_000 {
        b.extend([b'h', 3]);
    }
    b.extend([b'e', b's', b'.']);
    let started = Instant::now();
    let text = error_text(&b);
    assert!(text.contains("memo bomb"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(5));

    // Reading a memo entry that was never set.
    let text = error_text(&[0x80, 0x04, b'h', 9, b'.']);
    assert!(text.contains("memo entry 9"), "{text}");
}

#[test]
fn not_snapshots_say_so() {
    assert!(error_text(b"").contains("empty"));
    assert!(error_text(b"\x89PNG\r\n\x1a\n").contains("neither a pickle nor JSON"));
    // Packed for sharing: the error names the format and how to unpack it.
    let gzip = error_text(b"\x1f\x8b\x08\x00\x00\x00\x00\x00");
    assert!(
        gzip.contains("gzip-compressed") && gzip.contains("gunzip -k"),
        "{gzip}"
    );
    let xz = error_text(b"\xfd7zXZ\x00\x00\x04");
    assert!(
        xz.contains("xz-compressed") && xz.contains("xz -dk"),
        "{xz}"
    );
    let zstd = error_text(b"\x28\xb5\x2f\xfd\x00");
    assert!(zstd.contains("zstd-compressed"), "{zstd}");
    let bzip2 = error_text(b"BZh91AY&SY");
    assert!(bzip2.contains("bzip2-compressed"), "{bzip2}");
    let zip = error_text(b"PK\x03\x04\x14\x00");
    assert!(
        zip.contains("zip archive") && zip.contains("_dump_snapshot"),
        "{zip}"
    );
    // The same from a file: the first bytes decide it, whatever follows.
    let dir = tempfile::tempdir().expect("temp dir");
    let packed = dir.path().join("snapshot.pickle.xz");
    let mut bytes = b"\xfd7zXZ\x00".to_vec();
    bytes.resize(1 << 20, 0xAB);
    std::fs::write(&packed, &bytes).expect("write");
    let text = read_file(&packed, &|_| true)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        text.contains("snapshot.pickle.xz") && text.contains("xz-compressed"),
        "{text}"
    );
    // A capture given where a snapshot is expected says what it is and what to run instead.
    let capture =
        vramscope_core::formats::vramcap::write_bytes(&vramscope_core::model::Capture::new(
            vramscope_core::model::CaptureMeta::default(),
            Vec::new(),
        ));
    let text = error_text(&capture);
    assert!(
        text.contains("vramscope capture") && text.contains("vramscope inspect"),
        "{text}"
    );
    // A valid pickle of {'a': 1}.
    let mut dict = vec![0x80, 0x04, b'}', 0x94];
    dict.extend(short_str("a"));
    dict.extend([0x94, b'K', 1, b's', b'.']);
    assert!(error_text(&dict).contains("no 'segments' key"));
    assert!(error_text(b"{\"x\": 1}").contains("no 'segments' key"));
    assert!(error_text(b"[1, 2]").contains("list of segments"));
    let text = error_text(&[0x80, 0x02, 0xff, b'.']);
    assert!(text.contains("unknown pickle opcode 0xff"), "{text}");
    assert!(text.contains("byte 2"), "{text}");
    assert!(error_text(&[0x80, 0x09, b'.']).contains("protocol 9"));
    assert!(error_text(&[0x80, 0x02, b'N']).contains("STOP"));
    assert!(error_text(&[0x80, 0x02, b'u', b'.']).contains("MARK"));
    assert!(error_text(&[0x80, 0x02, b'a', b'.']).contains("stack is empty"));

    let missing = read_file(Path::new("/nonexistent/snap.pickle"), &|_| true);
    let text = missing.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.contains("/nonexistent/snap.pickle: cannot read the file"),
        "{text}"
    );
}

#[test]
fn unknown_keys_actions_and_states_are_tolerated() {
    let json = br#"{
        "segments": [{"device": 0, "address": 4096, "total_size": 1536, "allocated_size": 512,
            "active_size": 1024, "requested_size": 900, "stream": 0, "segment_type": "small",
            "segment_pool_id": [0, 0], "is_expandable": false, "frames": [], "shiny": 3,
            "blocks": [
                {"address": 4096, "size": 512, "requested_size": 500, "state": "active_allocated",
                 "frames": [{"filename": "a.py", "line": 3, "name": "f", "fx_node_op": "call"}]},
                {"address": 4608, "size": 512, "requested_size": 400, "state": "active_pending_free",
                 "frames": []},
                {"address": 5120, "size": 512, "requested_size": 0, "state": "floating"}]}],
        "device_traces": [[
            {"action": "alloc", "addr": 4096, "size": 500, "stream": 0, "time_us": 7},
            {"action": "teleport", "addr": 1, "size": 2, "stream": 3, "pool_id": [1, 2]},
            {"action": "oom", "size": 2097152, "stream": 0, "device_free": 1234}]],
        "host_segments": [],
        "future_key": {"x": 1}
    }"#;
    let snapshot = read(json).expect("tolerant read");
    let trace = &snapshot.traces[0];
    assert_eq!(trace.actions[0], TraceAction::Alloc);
    match trace.actions[1] {
        TraceAction::Unknown(id) => assert_eq!(snapshot.string(id), "teleport"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        trace.pool_id(1),
        vramscope_core::model::allocator::PoolId(1, 2)
    );
    assert_eq!(trace.device_free_bytes(2), Some(1234));
    assert_eq!(trace.time_us(0), Some(7));
    assert_eq!(trace.time_us(1), None);
    let states: Vec<BlockState> = snapshot.blocks.iter().map(|b| b.state).collect();
    assert_eq!(states[0], BlockState::ActiveAllocated);
    assert_eq!(states[1], BlockState::ActivePendingFree);
    assert!(matches!(states[2], BlockState::Unknown(id) if snapshot.string(id) == "floating"));
    let frames = snapshot.frames.stack(snapshot.blocks[0].stack);
    assert_eq!(frames.len(), 1);
    let frame = snapshot.frames.frame(frames[0]).expect("frame");
    assert_eq!(snapshot.string(frame.filename), "a.py");
    assert_eq!(frame.line, 3);
    let warnings = snapshot.warnings.join("\n");
    assert!(warnings.contains("future_key"), "{warnings}");
    assert!(warnings.contains("host"), "{warnings}");
    assert!(
        warnings.contains("1 trace events have actions"),
        "{warnings}"
    );

    // Pending frees count as active but not allocated.
    let totals = vramscope_core::analysis::totals::device_totals(&snapshot);
    assert_eq!(totals[0].small_pool.allocated_bytes, 512);
    assert_eq!(totals[0].small_pool.active_bytes, 1024);
    assert_eq!(totals[0].small_pool.active_count, 2);
    assert_eq!(totals[0].small_pool.requested_bytes, 900);
    assert_eq!(totals[0].large_pool.reserved_bytes, 0);
}

#[test]
fn broken_invariants_become_warnings() {
    let json = br#"{"segments": [{"device": 0, "address": 0, "total_size": 4096, "stream": 0,
        "segment_type": "large", "blocks": [
            {"address": 0, "size": 1024, "state": "inactive"},
            {"address": 2048, "size": 1024, "state": "inactive"}]}], "device_traces": []}"#;
    let snapshot = read(json).expect("read");
    let warnings = snapshot.warnings.join("\n");
    assert!(warnings.contains("does not follow"), "{warnings}");
    assert!(
        warnings.contains("differs from the sum of its blocks"),
        "{warnings}"
    );
}

#[test]
fn progress_is_reported_and_cancel_stops_reading() {
    let bytes = fixture("train.pickle");
    let seen = RefCell::new(Vec::new());
    let snapshot = read_bytes(&bytes, "train.pickle", &|f| {
        seen.borrow_mut().push(f);
        true
    });
    assert!(snapshot.is_ok());
    let seen = seen.into_inner();
    assert!(seen.len() >= 3, "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    assert_eq!(seen.last(), Some(&1.0));

    let calls = Cell::new(0);
    let result = read_bytes(&bytes, "train.pickle", &|_| {
        calls.set(calls.get() + 1);
        false
    });
    assert!(matches!(result, Err(SnapshotError::Cancelled { .. })));
    assert_eq!(calls.get(), 1, "stops at the first report");
}

#[test]
fn sniffing_routes_snapshots_and_rejects_other_files() {
    assert!(looks_like_snapshot(&fixture("cpp.pickle")[..64]));
    assert!(looks_like_snapshot(&fixture("nohistory_bare.pickle")[..64]));
    assert!(looks_like_snapshot(&fixture("leak.snapshot.json")[..64]));
    assert!(!looks_like_snapshot(b"\x89PNG\r\n\x1a\n"));
    assert!(!looks_like_snapshot(b"VRAMCAP\x00segments"));
    assert!(!looks_like_snapshot(b"{\"name\": \"a capture\"}"));
    assert!(!looks_like_snapshot(b""));
}

#[test]
fn huge_memo_ids_do_not_allocate_tables() {
    // 50 000 LONG_BINPUTs with ids 80 000 apart: a dense table would need 64 GB.
    let mut bytes = vec![0x80, 0x02, b'N'];
    for i in 0..50_000u32 {
        bytes.push(b'r');
        bytes.extend((i * 80_000 + 7).to_le_bytes());
    }
    bytes.extend([b'j']);
    bytes.extend((49_999u32 * 80_000 + 7).to_le_bytes());
    bytes.push(b'.');
    let started = Instant::now();
    // The pickle is valid (it returns None), just not a snapshot.
    let text = error_text(&bytes);
    assert!(text.contains("not a memory snapshot"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn records_extended_after_completion_are_refused() {
    // A frame dict filled by SETITEMS and then given one more key: no snapshot writer does that.
    let mut bytes = vec![0x80, 0x04, b'}', b'('];
    for text in ["filename", "a.py", "name", "f"] {
        bytes.extend(short_str(text));
    }
    bytes.push(b'u');
    bytes.extend(short_str("line"));
    bytes.extend([b'K', 3, b's', b'.']);
    let text = error_text(&bytes);
    assert!(text.contains("one batch"), "{text}");
    assert!(text.contains("damaged at byte"), "{text}");
}
