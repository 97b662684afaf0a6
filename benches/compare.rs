//! `vramscope compare`'s cost against opening the same files: two 263 MB snapshots compared
//! (read in parallel, time travel of each, each at its peak, call sites, categories, verdict)
//! against opening them (read + exact totals, as `benches/snapshot.rs` measures it; and read +
//! time travel, the Allocator tab's full analysis without the what-if sweep), and eight 66 MB
//! rank snapshots compared as a rank table.
//!
//! `cargo bench --bench compare`. It builds `target/bench/big_snapshot.pickle` (≥ 250 MB) and
//! `target/bench/rank_snapshot.pickle` (≥ 66 MB) with `scripts/make_big_snapshot.py` if they are
//! missing. Under `cargo test` (no `--bench` argument) it compares two small fixtures once.
#![allow(
    clippy::unwrap_used,
    clippy::too_many_lines,
    reason = "test and bench code: a panic is the failure report, and a test reads best as one story"
)]

#[path = "support/big_snapshot.rs"]
mod big_snapshot;
#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use vramscope_core::analysis::compare::Moment;
use vramscope_core::analysis::timetravel::TimeTravel;
use vramscope_core::analysis::totals::device_totals;
use vramscope_core::evidence::{main_device, open_for_comparison};
use vramscope_core::formats::pytorch::read_file;
use vramscope_core::model::now_unix_ms;
use vramscope_core::report::compare::{CompareKind, CompareRequest, build};

const RUNS: usize = 3;

/// Seconds of `work`, median of [`RUNS`] runs.
fn median_seconds(mut work: impl FnMut()) -> f64 {
    let mut seconds: Vec<f64> = (0..RUNS)
        .map(|_| {
            let started = Instant::now();
            work();
            started.elapsed().as_secs_f64()
        })
        .collect();
    seconds.sort_by(f64::total_cmp);
    seconds[RUNS / 2]
}

/// Reads each file and computes its totals, one after the other.
fn open_with_totals(paths: &[PathBuf]) {
    for path in paths {
        let snapshot = read_file(path, &|_| true).unwrap();
        std::hint::black_box(device_totals(&snapshot));
    }
}

/// Reads each file and builds the time travel of its main device, one after the other.
fn open_with_time_travel(paths: &[PathBuf]) {
    for path in paths {
        let snapshot = Arc::new(read_file(path, &|_| true).unwrap());
        let device = main_device(&snapshot);
        std::hint::black_box(TimeTravel::new(snapshot, device).len());
    }
}

/// The whole comparison `vramscope compare` makes, without printing it.
fn compare(paths: &[PathBuf], kind: CompareKind) -> usize {
    let inputs = open_for_comparison(paths);
    assert!(inputs.unreadable.is_empty(), "{:?}", inputs.unreadable);
    let report = build(CompareRequest {
        snapshots: inputs.snapshots,
        captures: inputs.captures,
        moment: Moment::Peak,
        kind,
        threshold_fraction: 0.9,
        unreadable: inputs.unreadable,
        generated_at_ms: now_unix_ms(),
    });
    report.snapshots.map_or(0, |c| c.sides.len()) + report.ranks.len()
}

/// `dir/rank{i}.pickle` for `i` in `0..count`, each a link to `source` (the names make a rank
/// table; the files are the same size as distinct ranks' would be).
fn rank_links(source: &Path, dir: &Path, count: usize) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    (0..count)
        .map(|i| {
            let link = dir.join(format!("rank{i}.pickle"));
            if !link.exists() {
                std::os::unix::fs::symlink(source, &link).unwrap();
            }
            link
        })
        .collect()
}

fn main() {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if !common::measuring() {
        let cases = manifest.join("tests/fixtures/cases");
        let pair = [cases.join("leak_step10.pickle"), cases.join("leak.pickle")];
        assert_eq!(compare(&pair, CompareKind::Pair), 2);
        println!("compare bench: smoke test passed (run with `cargo bench --bench compare`)");
        return;
    }
    let big = big_snapshot::big_snapshot("big_snapshot.pickle", 250).unwrap();
    let size_mb = std::fs::metadata(&big).unwrap().len() as f64 / 1e6;
    let pair = [big.clone(), big.clone()];
    println!("two snapshots of {size_mb:.0} MB ({}):", big.display());
    let open_totals = median_seconds(|| open_with_totals(&pair));
    let open_travel = median_seconds(|| open_with_time_travel(&pair));
    let compared = median_seconds(|| {
        compare(&pair, CompareKind::Pair);
    });
    println!("  open both (read + totals), one after the other:        {open_totals:.2} s");
    println!("  open both (read + time travel), one after the other:   {open_travel:.2} s");
    println!(
        "  compare (both at once, time travel, peaks, sites):     {compared:.2} s  = {:.2}× open+totals, {:.2}× open+time travel",
        compared / open_totals,
        compared / open_travel
    );
    let rank = big_snapshot::big_snapshot("rank_snapshot.pickle", 66).unwrap();
    let rank_mb = std::fs::metadata(&rank).unwrap().len() as f64 / 1e6;
    let ranks = rank_links(&rank, &manifest.join("target/bench/ranks"), 8);
    let rank_seconds = median_seconds(|| {
        assert_eq!(compare(&ranks, CompareKind::Ranks), 8 + 8);
    });
    println!(
        "eight rank snapshots of {rank_mb:.0} MB: rank table in {rank_seconds:.2} s (median of {RUNS}; {} cores)",
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    );
    println!(
        "peak RSS of the bench process: {} MiB",
        common::peak_rss_kib().unwrap_or(0) / 1024
    );
}
