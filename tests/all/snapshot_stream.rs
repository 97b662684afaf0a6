//! Snapshots read slice by slice (`SnapshotStream`, how the web viewer reads a dropped file)
//! equal those read whole, whatever the slice size (an opcode, a string or a number cut between
//! slices), for every pickle protocol and the JSON form; damaged files give the same errors.

use std::path::{Path, PathBuf};

use vramscope_core::formats::pytorch::{SnapshotError, SnapshotStream, read_bytes};
use vramscope_core::model::allocator::{AllocatorSnapshot, FrameId, StackId, StringId};

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pytorch")
        .join(name)
}

fn fixture(name: &str) -> Vec<u8> {
    let path = fixture_path(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Pushes `bytes` in slices of `slice_len` (of `total_len` announced bytes) and finishes.
fn streamed(
    bytes: &[u8],
    total_len: u64,
    slice_len: usize,
) -> Result<AllocatorSnapshot, SnapshotError> {
    let mut stream = SnapshotStream::new("input.pickle", total_len);
    for slice in bytes.chunks(slice_len) {
        stream.push(slice, &|_| true)?;
    }
    assert_eq!(stream.received_len(), bytes.len() as u64);
    stream.finish(&|_| true)
}

/// Everything the reader produced, for comparing two reads (tables by id: their lookup maps
/// iterate in a different order in every process).
fn described(snapshot: &AllocatorSnapshot) -> String {
    let strings: Vec<&str> = (0..snapshot.strings.len())
        .map(|i| snapshot.strings.get(StringId(i as u32)))
        .collect();
    let frames: Vec<_> = (0..snapshot.frames.frame_count())
        .map(|i| snapshot.frames.frame(FrameId(i as u32)))
        .collect();
    let stacks: Vec<&[FrameId]> = (0..snapshot.frames.stack_count())
        .map(|i| snapshot.frames.stack(StackId(i as u32)))
        .collect();
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{strings:?}\n{frames:?}\n{stacks:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        snapshot.name,
        snapshot.devices,
        snapshot.segments,
        snapshot.blocks,
        snapshot.traces,
        snapshot.settings,
        snapshot.annotations,
        snapshot.container,
        snapshot.vintage,
        snapshot.warnings,
    )
}

/// Where two descriptions first differ, with some context, for the failure message.
fn first_difference(a: &str, b: &str) -> String {
    let at = a
        .bytes()
        .zip(b.bytes())
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let context = |s: &str| {
        s.get(at.saturating_sub(80)..(at + 80).min(s.len()))
            .unwrap_or("")
            .to_owned()
    };
    format!("at {at}: {:?}\nvs {:?}", context(a), context(b))
}

#[test]
fn every_fixture_read_in_slices_equals_the_fixture_read_whole() {
    let names = [
        "cpp.pickle",
        "expandable.pickle",
        "frag_oom.pickle",
        "frag_oom.v-bare.pickle",
        "frag_oom.v-p0.pickle",
        "frag_oom.v-p1.pickle",
        "frag_oom.v-p2.pickle",
        "frag_oom.v-p3.pickle",
        "frag_oom.v-p5.pickle",
        "frag_oom.v-pre21.pickle",
        "frag_oom.v-torchscript.pickle",
        "frag_oom.v-json.snapshot.json",
        "graphs.pickle",
        "leak.pickle",
        "maxsplit.pickle",
        "nohistory.pickle",
        "nohistory_bare.pickle",
        "oom.pickle",
        "oom_after.pickle",
        "streams.p2.pickle",
        "streams.p5.pickle",
    ];
    for name in names {
        let bytes = fixture(name);
        let whole =
            read_bytes(&bytes, "input.pickle", &|_| true).unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected = described(&whole);
        for slice_len in [1, 2, 3, 7, 64, 1000, 65_536, bytes.len().max(1)] {
            let streamed = streamed(&bytes, bytes.len() as u64, slice_len)
                .unwrap_or_else(|e| panic!("{name} in slices of {slice_len}: {e}"));
            let got = described(&streamed);
            assert!(
                got == expected,
                "{name} read in slices of {slice_len} differs from the whole read: {}",
                first_difference(&got, &expected)
            );
        }
    }
}

#[test]
fn a_big_real_snapshot_in_uneven_slices_equals_the_file_read() {
    let bytes = fixture("train.pickle");
    let from_file =
        vramscope_core::formats::pytorch::read_file(&fixture_path("train.pickle"), &|_| true)
            .expect("train.pickle reads");
    // The file reader names the snapshot by its path; the stream by the name it was given.
    let whole = read_bytes(&bytes, "input.pickle", &|_| true).expect("train.pickle reads");
    assert_eq!(from_file.event_count(), whole.event_count());
    let expected = described(&whole);
    for slice_len in [4093, 1 << 20, 4 << 20] {
        let streamed = streamed(&bytes, bytes.len() as u64, slice_len).expect("streams");
        let got = described(&streamed);
        assert!(
            got == expected,
            "train.pickle read in slices of {slice_len} differs from the whole read: {}",
            first_difference(&got, &expected)
        );
    }
}

#[test]
fn damaged_files_read_in_slices_fail_like_files_read_whole() {
    let train = fixture("frag_oom.pickle");
    // The byte after PROTO is the first opcode (FRAME): no opcode 0xff exists.
    let mut flipped = train.clone();
    flipped[2] = 0xff;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("cut in half", train[..train.len() / 2].to_vec()),
        ("cut before STOP", train[..train.len() - 1].to_vec()),
        ("an unknown opcode", flipped),
        ("empty", Vec::new()),
        ("not a pickle", b"hello, world".to_vec()),
        (
            "a class reference",
            b"\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02Rq\x03.".to_vec(),
        ),
    ];
    for (what, bytes) in cases {
        let whole = match read_bytes(&bytes, "input.pickle", &|_| true) {
            Ok(_) => panic!("{what}: expected an error"),
            Err(e) => e.to_string(),
        };
        for slice_len in [1, 5, 4096] {
            match streamed(&bytes, bytes.len() as u64, slice_len.max(1)) {
                Ok(_) => panic!("{what} in slices of {slice_len}: expected an error ({whole})"),
                Err(e) => assert_eq!(e.to_string(), whole, "{what} in slices of {slice_len}"),
            }
        }
    }
}

#[test]
fn a_file_that_ends_before_its_announced_size_is_truncated() {
    let bytes = fixture("oom.pickle");
    let half = &bytes[..bytes.len() / 2];
    let error = streamed(half, bytes.len() as u64, 1000).expect_err("half a file");
    assert!(matches!(error, SnapshotError::Truncated { .. }), "{error}");
    assert!(error.to_string().starts_with("input.pickle: "), "{error}");
}

#[test]
fn a_stream_can_be_cancelled_from_its_progress_callback() {
    let bytes = fixture("train.pickle");
    let mut stream = SnapshotStream::new("train.pickle", bytes.len() as u64);
    let mut outcome = Ok(());
    for slice in bytes.chunks(1 << 20) {
        outcome = stream.push(slice, &|_| false);
        if outcome.is_err() {
            break;
        }
    }
    assert!(
        matches!(outcome, Err(SnapshotError::Cancelled { .. })),
        "{outcome:?}"
    );
}
