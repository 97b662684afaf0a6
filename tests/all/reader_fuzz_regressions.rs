//! Every reader of outside bytes (the table in `tests/support/readers.rs`) against the inputs the
//! fuzzer found failing (kept under `tests/fuzz/READER/` by `scripts/fuzz`), and against a fixed
//! set of mutations of its seed fixtures, so a stable toolchain without cargo-fuzz still shakes
//! every reader on every test run. Each input must be read without a panic and within a time
//! limit; a failure names the reader and writes the input to a file to reproduce it with.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use support::readers::{READERS, Reader, seed_files};

/// Longest one reading may take in the test build before it counts as a hang (the fuzzer's limit
/// for the optimised build is 10 s as well; real inputs take milliseconds).
const HANG_LIMIT: Duration = Duration::from_secs(10);
/// Mutated inputs per reader on each run.
const MUTATIONS_PER_READER: usize = 300;
/// Longest seed prefix that is mutated, as the fuzzer's `-max_len`.
const MAX_INPUT_BYTES: usize = 64 * 1024;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Reads `bytes` with `reader` on a thread of its own; the problem (a panic or a hang) if any.
fn read_checked(reader: &'static Reader, bytes: Vec<u8>) -> Option<String> {
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let outcome = std::panic::catch_unwind(|| (reader.read)(&bytes));
        let _ = sender.send(outcome.err().map(|panic| {
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "a panic without a message".to_owned())
        }));
    });
    match receiver.recv_timeout(HANG_LIMIT) {
        Ok(problem) => problem.map(|message| format!("panicked: {message}")),
        Err(_) => Some(format!("took more than {} s", HANG_LIMIT.as_secs())),
    }
}

/// Keeps a failing input where the developer can rerun it, and says where.
fn keep_failure(reader: &Reader, label: &str, bytes: &[u8], problem: &str) -> String {
    let path = std::env::temp_dir().join(format!("vramscope-{}-{label}", reader.name));
    let kept = match std::fs::write(&path, bytes) {
        Ok(()) => format!("input kept in {}", path.display()),
        Err(e) => format!("the input could not be kept: {e}"),
    };
    format!("{}: {label} {problem} ({kept})", reader.name)
}

/// A small deterministic random generator (xorshift64*), so every run mutates the same way.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Values that stress length and count fields: zero, one, the edges of each integer width.
const INTERESTING: &[u64] = &[
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    u64::MAX / 2,
    u64::MAX,
];

/// One mutation of `input` in the style of libFuzzer's: flip bits, set bytes to edge values,
/// write an edge-valued integer of 1 to 8 bytes, cut, duplicate or remove a range, splice a
/// range of `other` in.
fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        if out.is_empty() {
            out.push(rng.next() as u8);
            continue;
        }
        let at = rng.below(out.len());
        match rng.below(7) {
            0 => out[at] ^= 1 << rng.below(8),
            1 => out[at] = INTERESTING[rng.below(INTERESTING.len())] as u8,
            2 => {
                let width = 1 + rng.below(8);
                let value = INTERESTING[rng.below(INTERESTING.len())].to_le_bytes();
                for (i, byte) in value.iter().take(width).enumerate() {
                    if let Some(slot) = out.get_mut(at + i) {
                        *slot = *byte;
                    }
                }
            }
            3 => out.truncate(at),
            4 => {
                let end = (at + 1 + rng.below(64)).min(out.len());
                let copy = out[at..end].to_vec();
                let to = rng.below(out.len());
                out.splice(to..to, copy);
            }
            5 => {
                let end = (at + 1 + rng.below(64)).min(out.len());
                out.drain(at..end);
            }
            _ => {
                if !other.is_empty() {
                    let from = rng.below(other.len());
                    let end = (from + 1 + rng.below(256)).min(other.len());
                    out.splice(at..at, other[from..end].iter().copied());
                }
            }
        }
    }
    out.truncate(MAX_INPUT_BYTES);
    out
}

#[test]
fn every_reader_has_seeds() {
    for reader in READERS {
        assert!(
            !seed_files(root(), reader).is_empty(),
            "{}: no seed file matches {:?}",
            reader.name,
            reader.seeds
        );
    }
}

/// docs/reliability.md's table of fuzzing done per reader is the sums of the runs recorded in
/// docs/fuzz-runs.tsv, with a row for every reader (`scripts/fuzz-totals --update` writes it).
#[test]
fn the_documented_fuzzing_totals_are_the_recorded_runs() {
    let output = std::process::Command::new("bash")
        .arg(root().join("scripts/fuzz-totals"))
        .arg("--check")
        .output()
        .unwrap_or_else(|e| panic!("cannot run scripts/fuzz-totals: {e}"));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn inputs_the_fuzzer_found_failing_are_read_without_panic_or_hang() {
    let mut failures = Vec::new();
    let mut replayed = 0;
    for reader in READERS {
        let folder = root().join("tests/fuzz").join(reader.name);
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        files.sort();
        for path in files {
            let bytes = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            replayed += 1;
            if let Some(problem) = read_checked(reader, bytes) {
                failures.push(format!("{}: {} {problem}", reader.name, path.display()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("replayed {replayed} kept inputs");
}

#[test]
fn mutated_fixtures_are_read_without_panic_or_hang() {
    let mut failures = Vec::new();
    for (reader_number, reader) in READERS.iter().enumerate() {
        let seeds: Vec<Vec<u8>> = seed_files(root(), reader)
            .iter()
            .filter_map(|path| std::fs::read(path).ok())
            .map(|mut bytes| {
                bytes.truncate(MAX_INPUT_BYTES);
                bytes
            })
            .collect();
        assert!(!seeds.is_empty(), "{}: no seeds", reader.name);
        // Each seed as it is first (the fixtures themselves must read).
        for (i, seed) in seeds.iter().enumerate() {
            if let Some(problem) = read_checked(reader, seed.clone()) {
                failures.push(keep_failure(reader, &format!("seed-{i}"), seed, &problem));
            }
        }
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ reader_number as u64);
        for round in 0..MUTATIONS_PER_READER {
            let input = &seeds[rng.below(seeds.len())];
            let other = &seeds[rng.below(seeds.len())];
            let mutated = mutate(&mut rng, input, other);
            if let Some(problem) = read_checked(reader, mutated.clone()) {
                failures.push(keep_failure(
                    reader,
                    &format!("mutation-{round}"),
                    &mutated,
                    &problem,
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The capture seeds in the saved form (series, track and window chunks, a recovery note), which
/// no fixture has: made by the writer from the demo machine. `UPDATE_SEEDS=1` rewrites them when
/// the writer changes; otherwise they must match what the writer makes now.
#[test]
fn saved_capture_seeds_are_what_the_writer_makes() {
    use vramscope_core::formats::vramcap;
    use vramscope_core::model::Recovery;
    use vramscope_core::source::demo::{DemoConfig, generate_capture};

    let start_ms = 1_767_225_600_000;
    let whole = generate_capture(&DemoConfig::default(), start_ms, 150_000, 1000);
    let mut recovered = generate_capture(
        &DemoConfig {
            device_count: 3,
            scenario_offset_ms: 600_000,
            ..DemoConfig::default()
        },
        start_ms,
        20_000,
        250,
    );
    recovered.recovery = Some(Recovery {
        problem: "the recording was not closed (seed)".to_owned(),
        chunks_recovered: 3,
        bytes_discarded: 17,
    });
    let folder = root().join("tests/fuzz/seeds/vramcap");
    for (name, capture) in [("saved.vramcap", whole), ("recovered.vramcap", recovered)] {
        let bytes = vramcap::write_bytes(&capture);
        let path = folder.join(name);
        if std::env::var_os("UPDATE_SEEDS").is_some() {
            std::fs::create_dir_all(&folder).expect("seed folder");
            std::fs::write(&path, &bytes).expect("write seed");
        }
        let kept = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_SEEDS=1 makes it)", path.display()));
        assert!(
            kept == bytes,
            "{} differs from what the writer makes now (UPDATE_SEEDS=1 updates it)",
            path.display()
        );
    }
}
