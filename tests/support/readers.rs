//! Every reader of bytes that come from outside the program, in one table: the fuzzer
//! (`fuzz/fuzz_targets/reader.rs`, run with `scripts/fuzz`) and the regression and mutation tests
//! (`tests/all/reader_fuzz_regressions.rs`) both take their list from here, so fuzzing a new reader
//! and keeping its crashes as regression tests is one more line in [`READERS`].
//!
//! Each entry does what the app does with a file of that kind: read it, and for what reads well,
//! the analysis that runs when the file is opened. It must never panic, hang or allocate by a
//! length the input claims; what it returns is not judged here (errors are expected).

use std::sync::{Arc, OnceLock};

use vramscope_core::analysis::{fragmentation, oom, timetravel::TimeTravel, totals::device_totals};
use vramscope_core::diagnose::log;
use vramscope_core::formats::nvidia_smi::{self, SmiReadOptions};
use vramscope_core::formats::{capture, pytorch, vramcap};
use vramscope_core::model::{Capture, UnixMs};
use vramscope_core::source::prometheus::{self, api, reader as fleet};

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
    Reader { name: "snapshot_pickle", seeds: &["tests/fixtures/pytorch/*.pickle", "tests/fixtures/cases/*.pickle", "tests/fixtures/cases2/*.pickle"], read: read_snapshot },
    Reader { name: "snapshot_json", seeds: &["tests/fixtures/pytorch/*.snapshot.json", "tests/fuzz/seeds/snapshot_json/*.json"], read: read_snapshot },
    Reader { name: "vramcap", seeds: &["tests/fixtures/cases/*.vramcap", "tests/fixtures/cases2/*.vramcap", "tests/fuzz/seeds/vramcap/*.vramcap"], read: read_capture },
    Reader { name: "prometheus", seeds: &["tests/fuzz/seeds/prometheus/*.json"], read: read_prometheus_answer },
    Reader { name: "log", seeds: &["tests/fixtures/logs/*", "tests/fixtures/cases/*.log", "tests/fixtures/cases2/*.log", "tests/fixtures/pytorch/*.oom.txt"], read: read_log },
    Reader { name: "nvidia_smi", seeds: &["tests/fixtures/cases/*.smi.csv", "tests/fixtures/cases2/*.csv", "tests/fuzz/seeds/nvidia_smi/*.csv"], read: read_smi_log },
];

/// The reader called `name`.
#[allow(
    dead_code,
    reason = "the fuzz target's way in (fuzz/fuzz_targets/reader.rs); the tests go through READERS"
)]
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

/// A `.vramcap` capture, with recovery of damaged files; what reads must survive Save as….
fn read_capture(bytes: &[u8]) {
    if let Ok(capture) = vramcap::read_bytes(bytes, "fuzz-input.vramcap") {
        survives_save_and_reopen(&capture);
    }
}

/// An nvidia-smi CSV log, opened by content as the app opens any capture file
/// (`formats::capture` sniffs what the bytes are and refuses what is no capture). A process log
/// is also joined to a GPU log, as when both logs of one run are opened together. What reads
/// must survive Save as… (a log opened in the app is saved as a `.vramcap`).
fn read_smi_log(bytes: &[u8]) {
    // A fixed time zone and end time: the reading machine's would make runs differ.
    let options = SmiReadOptions {
        utc_offset_minutes: 60,
        untimed_end_ms: 1_764_597_600_000,
    };
    let Ok(capture) = capture::read_bytes(bytes, "fuzz-input.csv", options) else {
        return;
    };
    survives_save_and_reopen(&capture);
    if nvidia_smi::is_process_log(&capture) {
        survives_save_and_reopen(&nvidia_smi::combine(gpu_log().clone(), &capture));
    }
}

/// The GPU log that process logs are joined to: two GPUs, told apart by UUID and bus id.
fn gpu_log() -> &'static Capture {
    static GPU_LOG: OnceLock<Capture> = OnceLock::new();
    GPU_LOG.get_or_init(|| {
        let text = "timestamp, index, uuid, pci.bus_id, memory.used [MiB], memory.total [MiB]\n\
                    2026/11/30 08:46:26.300, 0, GPU-6c39affe-0e8d-7f7a-0b5c-f158975b1054, 00000000:00:06.0, 20 MiB, 143771 MiB\n\
                    2026/11/30 08:46:26.300, 1, GPU-876e6575-30fe-9a8c-ded7-40a7d790217d, 00000000:00:07.0, 30 MiB, 143771 MiB\n";
        nvidia_smi::read_str(text, "gpu.csv", SmiReadOptions::default())
            .unwrap_or_else(|error| panic!("the built-in GPU log must read: {error}"))
    })
}

/// A Prometheus server's answers, as `vramscope pull` reads them: the bytes are the body of every
/// `/api/v1/query_range` answer (and of the metric names request, which fails on them or lists
/// names); the range read is the grid of the answer's own times. The fleet reader turns the
/// series into a capture, which must survive being saved as the `.vramcap` that `pull` writes;
/// a second read of the same range follows on, as the GUI following a server does.
fn read_prometheus_answer(bytes: &[u8]) {
    const SERVER: &str = "http://prometheus.fuzz:9090";
    // The client reads an answer as UTF-8 text; other bytes never reach the reader.
    let Ok(body) = std::str::from_utf8(bytes) else {
        return;
    };
    let _ = api::read_metric_names(SERVER, api::METRIC_NAMES, 200, body);
    let Ok(series) = api::read_range_answer(SERVER, "fuzz", 200, body) else {
        return;
    };
    let range = grid_of(&series);
    let mut reader = fleet::FleetReader::new(
        AnsweringServer {
            server: SERVER,
            series,
        },
        fleet::Selector::new(""),
    );
    let Ok(capture) = prometheus::pull(&mut reader, &range, &mut |_| {}) else {
        return;
    };
    survives_save_and_reopen(&capture);
    let _ = reader.read(&range, &mut |_| {});
}

/// A server that has every metric the fleet reader asks for and answers every range query with
/// the same series.
struct AnsweringServer {
    server: &'static str,
    series: Vec<api::RangeSeries>,
}

impl api::RangeApi for AnsweringServer {
    fn server(&self) -> &str {
        self.server
    }

    fn metric_names(
        &self,
        _: UnixMs,
        _: UnixMs,
        _: Option<&str>,
    ) -> Result<Vec<String>, api::PrometheusError> {
        Ok(fleet::metrics_read().map(str::to_owned).collect())
    }

    fn query_range(
        &self,
        _: &str,
        _: UnixMs,
        _: UnixMs,
        _: i64,
    ) -> Result<Vec<api::RangeSeries>, api::PrometheusError> {
        Ok(self.series.clone())
    }
}

/// The range that a query answered with `series` asked for: from the first to the last time in
/// it, the step the smallest gap between two times (15 s when there is none), at most 500 steps
/// (what a reader does per step is the same at every step; fewer keep the runs fast).
fn grid_of(series: &[api::RangeSeries]) -> fleet::StepRange {
    let mut times: Vec<UnixMs> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|&(t_ms, _)| t_ms))
        .collect();
    times.sort_unstable();
    times.dedup();
    let start_ms = times.first().copied().unwrap_or(0);
    let step_ms = times
        .windows(2)
        .filter_map(|pair| pair[1].checked_sub(pair[0]))
        .min()
        .unwrap_or(15_000)
        .max(1);
    let last_ms = times.last().copied().unwrap_or(start_ms);
    let steps = (i128::from(last_ms) - i128::from(start_ms)) / i128::from(step_ms) + 1;
    let end_ms = i128::from(start_ms) + (steps.min(500) - 1) * i128::from(step_ms);
    fleet::StepRange {
        start_ms,
        end_ms: UnixMs::try_from(end_ms).unwrap_or(last_ms),
        step_ms,
    }
}

/// Saves `capture` as a `.vramcap` and reads it back: it must be the same capture (Save as… of a
/// recovered file keeps everything that was recovered).
fn survives_save_and_reopen(capture: &Capture) {
    let saved = vramcap::write_bytes(capture);
    match vramcap::read_bytes(&saved, "resaved.vramcap") {
        Ok(mut reread) => {
            // The re-saved file carries the recovery note of the damaged one.
            reread.recovery = capture.recovery.clone();
            assert!(
                reread == *capture,
                "a capture that was read does not survive save and reopen"
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
