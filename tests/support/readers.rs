//! Every reader of bytes that come from outside the program, in one table: the fuzzer
//! (`fuzz/fuzz_targets/reader.rs`, run with `scripts/fuzz`) and the regression and mutation tests
//! (`tests/reader_fuzz_regressions.rs`) both take their list from here, so fuzzing a new reader
//! and keeping its crashes as regression tests is one more line in [`READERS`].
//!
//! Each entry does what the app does with a file of that kind: read it, and for what reads well,
//! the analysis that runs when the file is opened. It must never panic, hang or allocate by a
//! length the input claims; what it returns is not judged here (errors are expected).

use std::sync::Arc;

use vramscope::analysis::{fragmentation, oom, timetravel::TimeTravel, totals::device_totals};
use vramscope::diagnose::log;
use vramscope::formats::{pytorch, vramcap};

/// One reader under test.
pub struct Reader {
    /// Short name: the corpus folder `fuzz/corpus/NAME` and the regression folder
    /// `tests/fuzz/NAME`.
    pub name: &'static str,
    /// Files that seed its corpus, relative to the repository root: `folder/*suffix` patterns.
    pub seeds: &'static [&'static str],
    /// Reads the bytes as the app would.
    pub read: fn(&[u8]),
}

/// The readers. Adding a reader to fuzzing and to the regression tests: one line here.
#[rustfmt::skip]
pub const READERS: &[Reader] = &[
    Reader { name: "snapshot_pickle", seeds: &["tests/fixtures/pytorch/*.pickle", "tests/fixtures/cases/*.pickle"], read: read_snapshot },
    Reader { name: "snapshot_json", seeds: &["tests/fixtures/pytorch/*.snapshot.json", "tests/fuzz/seeds/snapshot_json/*.json"], read: read_snapshot },
    Reader { name: "vramcap", seeds: &["tests/fixtures/cases/*.vramcap", "tests/fuzz/seeds/vramcap/*.vramcap"], read: read_capture },
    Reader { name: "log", seeds: &["tests/fixtures/logs/*", "tests/fixtures/cases/*.log", "tests/fixtures/pytorch/*.oom.txt"], read: read_log },
];

/// The reader called `name`.
pub fn reader(name: &str) -> Option<&'static Reader> {
    READERS.iter().find(|reader| reader.name == name)
}

/// A PyTorch allocator snapshot (pickle or JSON, told apart by content as when a file is
/// opened), then what opening it in the Allocator view computes: totals, the replay of each
/// device's trace to its end, fragmentation and the OOM explanations.
fn read_snapshot(bytes: &[u8]) {
    let Ok(snapshot) = pytorch::read_bytes(bytes, "fuzz-input", &|_| true) else {
        return;
    };
    let snapshot = Arc::new(snapshot);
    for device in device_totals(&snapshot) {
        let travel = TimeTravel::new(Arc::clone(&snapshot), device.device);
        let _ = fragmentation::analyze(&travel.state_at(travel.len()));
        let _ = oom::explain_all(&travel);
    }
}

/// A `.vramcap` capture, with recovery of damaged files. What reads must save and read back to
/// the same capture (Save as… of a recovered file keeps everything that was recovered).
fn read_capture(bytes: &[u8]) {
    let Ok(capture) = vramcap::read_bytes(bytes, "fuzz-input.vramcap") else {
        return;
    };
    let saved = vramcap::write_bytes(&capture);
    match vramcap::read_bytes(&saved, "resaved.vramcap") {
        Ok(mut reread) => {
            // The re-saved file carries the recovery note of the damaged one.
            reread.recovery = capture.recovery.clone();
            assert!(
                reread == capture,
                "a capture read from damaged input does not survive save and reopen"
            );
        }
        Err(error) => panic!("a capture that was read cannot be read after saving: {error}"),
    }
}

/// A log: as dropped on the window (bytes, binary files refused) and as pasted text.
fn read_log(bytes: &[u8]) {
    let _ = log::analyze_bytes(bytes, "fuzz-input.log");
    let _ = log::analyze_text(&String::from_utf8_lossy(bytes), "pasted");
}

/// The seed files of `reader` under `root`, sorted.
pub fn seed_files(root: &std::path::Path, reader: &Reader) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for pattern in reader.seeds {
        let (folder, file_pattern) = pattern.rsplit_once('/').unwrap_or((".", pattern));
        let suffix = file_pattern.trim_start_matches('*');
        let Ok(entries) = std::fs::read_dir(root.join(folder)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let matches = path
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.ends_with(suffix));
            if matches && path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    files.dedup();
    files
}
