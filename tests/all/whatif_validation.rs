//! The what-if replay against the real allocator: ground truth made on an NVIDIA H200
//! (`scripts/whatif/make_ground_truth.py`, see `tests/fixtures/whatif/README.md`). Every workload
//! ran in a fresh process under every setting, with and without a per-process cap; the replay of
//! the workload's default-settings trace must predict each run's peak reserved memory (within
//! 2 % for at least 95 % of the runs and within 5 % for all) and whether it ran out of memory
//! (right for every run, at the same allocation). The table is `docs/whatif-validation.md`;
//! `VRAMSCOPE_WRITE_DOCS=1 cargo test --test all whatif_validation::` rewrites it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use vramscope_core::analysis::replay::{
    AllocConf, CapSource, LimitsUsed, WhatIfRequest, replay_setting, what_if,
};
use vramscope_core::analysis::timetravel::TimeTravel;
use vramscope_core::formats::pytorch::{read_bytes, read_file};
use vramscope_core::model::allocator::TraceAction;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/whatif")
}

/// One real run, as `run_case.py` recorded it.
#[derive(Debug, serde::Deserialize)]
struct Run {
    workload: String,
    conf: String,
    allowed_bytes: Option<u64>,
    oom: bool,
    allocs_before_oom: Option<usize>,
    reserved_peak_bytes: u64,
    allocated_peak_bytes: u64,
}

/// One repeat of a ground-truth run (`docs/gpu-verification/whatif-repeats/summary.json`).
#[derive(Debug, serde::Deserialize)]
struct Repeat {
    oom: bool,
    reserved_peak_bytes: u64,
}

/// The repeats of one ground-truth run, by how they were run (`parallel`, `sequential`).
#[derive(Debug, Default, serde::Deserialize)]
struct Repeats {
    #[serde(default)]
    parallel: Vec<Repeat>,
    #[serde(default)]
    sequential: Vec<Repeat>,
}

/// What one real run of a (workload, setting, cap) pair gave.
#[derive(Clone, Copy, Debug)]
struct RealOutcome {
    peak: u64,
    oom: bool,
}

/// One row of the validation table: one (workload, setting, cap) pair, every real run of it
/// (the ground truth first, then its repeats) and the prediction.
#[derive(Clone)]
struct Row {
    workload: String,
    conf: String,
    cap: Option<u64>,
    real: Vec<RealOutcome>,
    predicted_peak: u64,
    /// The peak over the GPU timings replayed; `(peak, peak)` when the timing cannot matter.
    predicted_range: (u64, u64),
    predicted_oom: bool,
    /// The verdict is uncertain: it differs between the GPU timings replayed, or the setting
    /// ran out only on a scratch buffer the program may catch (`SettingOutcome::scratch_oom`).
    uncertain: bool,
    same_place: bool,
    real_allocated_peak: u64,
    predicted_allocated_peak: u64,
}

/// How a verdict counts: right; certain where the real runs disagreed, and what the ground
/// truth and most real runs did (no certain verdict matches every run then); uncertain without
/// being wrong; or wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Right,
    MostRealRuns,
    UncertainNotWrong,
    Wrong,
}

impl Row {
    /// How far the real peak furthest from the predicted range lies outside it, relative to
    /// that real peak (0 when every real peak is inside).
    fn error(&self) -> f64 {
        let (low, high) = self.predicted_range;
        self.real
            .iter()
            .map(|r| {
                let outside = low.saturating_sub(r.peak).max(r.peak.saturating_sub(high));
                outside as f64 / r.peak.max(1) as f64
            })
            .fold(0.0, f64::max)
    }

    fn ground_truth(&self) -> RealOutcome {
        self.real[0]
    }

    fn real_varied(&self) -> bool {
        self.real.iter().any(|r| r.oom != self.real[0].oom)
    }

    /// Right: a certain verdict every real run agrees with. Where the real runs disagreed, a
    /// certain verdict the ground truth and more than half of the real runs share counts apart.
    /// An uncertain verdict is not wrong only when reality did vary or every real peak lies
    /// within 5 % of the predicted range; otherwise wrong.
    fn verdict(&self) -> Verdict {
        if self.uncertain {
            if self.real_varied() || self.error() <= 0.05 {
                Verdict::UncertainNotWrong
            } else {
                Verdict::Wrong
            }
        } else if self.real.iter().all(|r| r.oom == self.predicted_oom) {
            Verdict::Right
        } else if self.ground_truth().oom == self.predicted_oom
            && 2 * self
                .real
                .iter()
                .filter(|r| r.oom == self.predicted_oom)
                .count()
                > self.real.len()
        {
            Verdict::MostRealRuns
        } else {
            Verdict::Wrong
        }
    }

    /// The measure this validation was specified with: the verdict is certain and what the
    /// pair's ground-truth run (one fresh process) did.
    fn matches_ground_truth(&self) -> bool {
        !self.uncertain && self.predicted_oom == self.ground_truth().oom
    }

    /// A right verdict, at the same allocation when the ground truth ran out.
    fn right_at_the_right_place(&self) -> bool {
        self.verdict() == Verdict::Right && (!self.ground_truth().oom || self.same_place)
    }
}

/// How many of `rows` got `verdict`.
fn count_verdict(rows: &[Row], verdict: Verdict) -> usize {
    rows.iter().filter(|r| r.verdict() == verdict).count()
}

/// How many of `rows` lie within `limit` (relative) of their predicted range.
fn count_within(rows: &[Row], limit: f64) -> usize {
    rows.iter().filter(|r| r.error() <= limit).count()
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 20) as f64)
}

/// The ground truth of `folder` by run name (`workload__setting__cap`).
fn load_runs(folder: &std::path::Path) -> Vec<(String, Run)> {
    let text = std::fs::read_to_string(folder.join("truth.json")).expect("truth.json");
    let by_name: BTreeMap<String, Option<Run>> = serde_json::from_str(&text).expect("truth JSON");
    by_name
        .into_iter()
        .filter_map(|(name, run)| run.map(|run| (name, run)))
        .collect()
}

/// The repeated runs by run name.
fn load_repeats(summaries: &[&str]) -> BTreeMap<String, Repeats> {
    let mut all: BTreeMap<String, Repeats> = BTreeMap::new();
    for summary in summaries {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(summary);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{summary}: {e}"));
        let repeats: BTreeMap<String, Repeats> =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{summary}: {e}"));
        for (name, more) in repeats {
            let entry = all.entry(name).or_default();
            entry.parallel.extend(more.parallel);
            entry.sequential.extend(more.sequential);
        }
    }
    all
}

/// Repeats of ground-truth pairs: the misses of 2026-12-02 and the verdicts the placement check
/// made uncertain (`docs/gpu-verification/whatif-placement/`).
const GROUND_TRUTH_REPEATS: &[&str] = &[
    "docs/gpu-verification/whatif-repeats/summary.json",
    "docs/gpu-verification/whatif-placement/gt_summary.json",
    "docs/gpu-verification/whatif-placement2/summary.json",
];
/// Repeats of held-out pairs.
const HELDOUT_REPEATS: &[&str] = &["docs/gpu-verification/whatif-placement/heldout_summary.json"];
/// Repeats of the second held-out set's uncertain pairs.
const HELDOUT2_REPEATS: &[&str] = &["docs/gpu-verification/whatif-heldout2/repeats_summary.json"];
/// Repeats of the fourth held-out set's capped pairs near their cap.
const HELDOUT4_REPEATS: &[&str] = &["docs/gpu-verification/whatif-heldout4/repeats_summary.json"];

/// Every real outcome of run `name`: the ground truth, then its repeats.
fn real_outcomes(name: &str, run: &Run, repeats: &BTreeMap<String, Repeats>) -> Vec<RealOutcome> {
    let mut real = vec![RealOutcome {
        peak: run.reserved_peak_bytes,
        oom: run.oom,
    }];
    if let Some(repeats) = repeats.get(name) {
        real.extend(
            repeats
                .parallel
                .iter()
                .chain(&repeats.sequential)
                .map(|r| RealOutcome {
                    peak: r.reserved_peak_bytes,
                    oom: r.oom,
                }),
        );
    }
    real
}

/// The what-if of `conf` under `cap` on `travel` (no device limit: the runs had the card).
fn predict(
    travel: &TimeTravel,
    conf: &AllocConf,
    cap: Option<u64>,
) -> vramscope_core::analysis::replay::SettingOutcome {
    let limits = LimitsUsed {
        cap_bytes: cap,
        cap_source: if cap.is_some() {
            CapSource::Given
        } else {
            CapSource::None
        },
        device_limit_bytes: None,
    };
    replay_setting(travel, conf, &limits, &|_| true).expect("replay")
}

fn parse_conf(text: &str) -> AllocConf {
    AllocConf::parse(if text.is_empty() { "default" } else { text }).expect("setting")
}

/// Opens the snapshot at `path` (xz-compressed when its name ends in `.xz`) and replays it
/// under its own settings: the self-check must pass.
fn open_self_checked(
    path: &std::path::Path,
) -> (TimeTravel, vramscope_core::analysis::replay::WhatIfReport) {
    let snapshot = if path.extension().is_some_and(|e| e == "xz") {
        let compressed = std::fs::read(path).expect("read snapshot");
        let mut bytes = Vec::new();
        lzma_rs::xz_decompress(&mut compressed.as_slice(), &mut bytes).expect("xz");
        read_bytes(&bytes, &path.display().to_string(), &|_| true).expect("snapshot")
    } else {
        read_file(path, &|_| true).expect("snapshot")
    };
    let snapshot = Arc::new(snapshot);
    let travel = TimeTravel::new(snapshot, 0);
    let request = WhatIfRequest {
        device: 0,
        candidates: vec![AllocConf::default_conf()],
        cap_bytes: None,
        device_memory_bytes: None,
    };
    let report = what_if(&travel, &request, &|_| true).expect("what-if");
    assert!(
        report.self_check.reliable,
        "{}: self-check failed: {:?}",
        path.display(),
        report.self_check.problem
    );
    (travel, report)
}

/// The predicted half of a row from a replay's outcome.
fn with_prediction(row: Row, outcome: &vramscope_core::analysis::replay::SettingOutcome) -> Row {
    Row {
        predicted_peak: outcome.peak_reserved_bytes,
        predicted_range: outcome
            .peak_range_bytes()
            .unwrap_or((outcome.peak_reserved_bytes, outcome.peak_reserved_bytes)),
        predicted_oom: outcome.oom.is_some(),
        uncertain: outcome.verdict_uncertain(),
        predicted_allocated_peak: outcome.peak_allocated_bytes,
        ..row
    }
}

/// Every pair of the ground truth in `folder` (its `truth.json` and one default-settings
/// snapshot per workload, `WORKLOAD.pickle` or `WORKLOAD.pickle.xz`), with the repeats of
/// `repeats` where a pair has some.
fn validate(
    folder: &std::path::Path,
    repeats: &BTreeMap<String, Repeats>,
) -> (Vec<Row>, Vec<String>) {
    let runs = load_runs(folder);
    let mut workloads: Vec<&str> = runs.iter().map(|(_, r)| r.workload.as_str()).collect();
    workloads.sort_unstable();
    workloads.dedup();
    let mut rows = Vec::new();
    let mut checks = Vec::new();
    for workload in workloads {
        let plain = folder.join(format!("{workload}.pickle"));
        let source = if plain.exists() {
            plain
        } else {
            folder.join(format!("{workload}.pickle.xz"))
        };
        let (workload_rows, check) = validate_workload(&source, workload, &runs, repeats);
        rows.extend(workload_rows);
        checks.push(check);
    }
    (rows, checks)
}

/// The rows of `workload`'s pairs among `runs`, predicted from the default-settings snapshot
/// at `source`, and a line saying its self-check passed.
fn validate_workload(
    source: &std::path::Path,
    workload: &str,
    runs: &[(String, Run)],
    repeats: &BTreeMap<String, Repeats>,
) -> (Vec<Row>, String) {
    let (travel, report) = open_self_checked(source);
    let check = format!(
        "{workload}: {} events, self-check OK ({} segments, {} blocks)",
        report.events, report.self_check.segments_compared, report.self_check.blocks_compared
    );
    let trace = travel.trace();
    let mut rows = Vec::new();
    for (name, run) in runs.iter().filter(|(_, r)| r.workload == workload) {
        let conf = parse_conf(&run.conf);
        let outcome = predict(&travel, &conf, run.allowed_bytes);
        assert!(
            outcome.incomplete.is_none(),
            "{workload} {}: {:?}",
            run.conf,
            outcome.incomplete
        );
        let predicted_allocs = outcome.oom.map(|oom| {
            trace.actions[..oom.event_index]
                .iter()
                .filter(|&&a| a == TraceAction::Alloc)
                .count()
        });
        let unpredicted = Row {
            workload: workload.to_string(),
            conf: conf.text.clone(),
            cap: run.allowed_bytes,
            real: real_outcomes(name, run, repeats),
            predicted_peak: 0,
            predicted_range: (0, 0),
            predicted_oom: false,
            uncertain: false,
            same_place: predicted_allocs == run.allocs_before_oom,
            real_allocated_peak: run.allocated_peak_bytes,
            predicted_allocated_peak: 0,
        };
        rows.push(with_prediction(unpredicted, &outcome));
    }
    (rows, check)
}

/// The held-out CNN and U-Net are traced with C++ frames (`stacks="all"`, the default of
/// `torch.cuda.memory._record_memory_history()`), which show where PyTorch retries a cuDNN
/// workspace that does not fit. Their Python-frames-only traces of the same runs
/// (`python_stacks/`) cannot tell that workspace from another kernel's scratch buffer: those
/// verdicts are uncertain there, never wrong, and every predicted peak is the same.
#[test]
fn cpp_frames_settle_the_retried_workspace_verdicts() {
    for (set, workload, repeats) in [
        ("heldout", "cnn_train", HELDOUT_REPEATS),
        ("heldout2", "unet_segment", HELDOUT2_REPEATS),
    ] {
        let folder = fixtures().join(set);
        let runs = load_runs(&folder);
        let repeats = load_repeats(repeats);
        let source = |dir: PathBuf| dir.join(format!("{workload}.pickle"));
        let (cpp, _) = validate_workload(&source(folder.clone()), workload, &runs, &repeats);
        let (python, _) = validate_workload(
            &source(fixtures().join("python_stacks")),
            workload,
            &runs,
            &repeats,
        );
        assert_eq!(cpp.len(), python.len(), "{workload}");
        let mut settled = 0;
        for (with_cpp, python_only) in cpp.iter().zip(&python) {
            let pair = format!("{workload} `{}` cap {:?}", with_cpp.conf, with_cpp.cap);
            assert_eq!(
                with_cpp.predicted_range, python_only.predicted_range,
                "{pair}"
            );
            assert_ne!(with_cpp.verdict(), Verdict::Wrong, "{pair}");
            assert_ne!(python_only.verdict(), Verdict::Wrong, "{pair}");
            if with_cpp.verdict() != python_only.verdict() {
                assert_eq!(python_only.verdict(), Verdict::UncertainNotWrong, "{pair}");
                assert_eq!(with_cpp.verdict(), Verdict::Right, "{pair}");
                settled += 1;
            }
        }
        assert!(
            settled >= 3,
            "{workload}: {settled} verdicts settled by the C++ frames"
        );
    }
}

/// The repeats' own default-settings traces (`tests/fixtures/whatif/repeats/*__default__nocap__*`):
/// each must self-check exactly, and predicts every pair of its workload again; returns one
/// line per trace saying how many pairs' real outcomes lie within 5 % of its ranges.
fn repeat_traces(rows: &[Row]) -> Vec<String> {
    let folder = fixtures().join("repeats");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&folder)
        .expect("repeats/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains("__default__nocap__") && n.ends_with(".pickle"))
        })
        .collect();
    paths.sort();
    let mut lines = Vec::new();
    for path in paths {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let Some(workload) = name.split("__").nth(1) else {
            continue;
        };
        let (travel, report) = open_self_checked(&path);
        let mut inside = 0;
        let mut pairs = 0;
        let mut outside = Vec::new();
        for row in rows.iter().filter(|r| r.workload == workload) {
            let outcome = predict(&travel, &parse_conf(&row.conf), row.cap);
            let again = with_prediction(row.clone(), &outcome);
            pairs += 1;
            if again.error() <= 0.05 && again.verdict() != Verdict::Wrong {
                inside += 1;
            } else {
                outside.push(format!(
                    "`{}` cap {}: real {} MiB, predicted {} MiB",
                    again.conf,
                    again
                        .cap
                        .map_or("none".to_string(), |c| format!("{} MiB", mib(c))),
                    real_peaks(&again),
                    predicted_peaks(&again)
                ));
            }
        }
        lines.push(format!(
            "{name}: {} events, self-check OK; {inside} of {pairs} pairs' real outcomes within 5 % of its predicted ranges{}",
            report.events,
            if outside.is_empty() {
                String::new()
            } else {
                format!("; outside: {}", outside.join("; "))
            }
        ));
    }
    lines
}

/// The real peaks of a row: the ground truth, then the repeats' distinct values with counts.
fn real_peaks(row: &Row) -> String {
    let mut text = mib(row.ground_truth().peak);
    let repeats = &row.real[1..];
    if !repeats.is_empty() {
        let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
        for r in repeats {
            *counts.entry(r.peak).or_default() += 1;
        }
        let list: Vec<String> = counts
            .iter()
            .map(|(peak, n)| format!("{} ×{n}", mib(*peak)))
            .collect();
        text.push_str(&format!(" (repeats {})", list.join(", ")));
    }
    text
}

fn predicted_peaks(row: &Row) -> String {
    let (low, high) = row.predicted_range;
    if low == high {
        mib(row.predicted_peak)
    } else {
        format!("{} – {}", mib(low), mib(high))
    }
}

/// The numbers in one line: pairs within 2 % and 5 %, verdicts right, uncertain and wrong.
fn summary_line(rows: &[Row]) -> String {
    let within = |limit: f64| count_within(rows, limit);
    let count = |verdict: Verdict| count_verdict(rows, verdict);
    let real_runs: usize = rows.iter().map(|r| r.real.len()).sum();
    let mut out = String::new();
    out.push_str(&format!(
        "**{} pairs ({real_runs} real runs): peak reserved within 2 % for {} ({:.1} %), within 5 % \
         for {}; OOM verdict certain and the ground-truth run's for {} of {}; against every real \
         run: right for {}, where the real runs disagreed the ground truth's and most runs' for \
         {}, uncertain but not wrong for {}, wrong for {}; of the {} real OOMs, {} predicted at \
         the same allocation.**\n\n",
        rows.len(),
        within(0.02),
        100.0 * within(0.02) as f64 / rows.len().max(1) as f64,
        within(0.05),
        rows.iter().filter(|r| r.matches_ground_truth()).count(),
        rows.len(),
        count(Verdict::Right),
        count(Verdict::MostRealRuns),
        count(Verdict::UncertainNotWrong),
        count(Verdict::Wrong),
        rows.iter().filter(|r| r.ground_truth().oom).count(),
        rows.iter()
            .filter(|r| r.ground_truth().oom && r.predicted_oom && r.same_place)
            .count()
    ));
    out
}

/// The pairs that miss the 5 % bound or the OOM verdict, one line each.
fn misses_list(rows: &[Row]) -> String {
    let misses: Vec<&Row> = rows
        .iter()
        .filter(|r| {
            r.error() > 0.05 || matches!(r.verdict(), Verdict::Wrong | Verdict::MostRealRuns)
        })
        .collect();
    let mut out = format!(
        "{} pairs miss the 5 % bound or the OOM verdict of some real run:\n\n",
        misses.len()
    );
    for row in &misses {
        out.push_str(&format!(
            "- {} `{}` cap {}: real peak {} MiB{}, predicted {} MiB{}\n",
            row.workload,
            row.conf,
            row.cap
                .map_or("none".to_string(), |c| format!("{} MiB", mib(c))),
            real_peaks(row),
            if row.ground_truth().oom {
                " (ran out)"
            } else {
                ""
            },
            predicted_peaks(row),
            if row.predicted_oom { " (runs out)" } else { "" },
        ));
    }
    out
}

/// Every pair as a Markdown table.
fn rows_table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| workload | setting | cap (MiB) | real peak (MiB) | predicted (MiB) | error | real OOM | \
         predicted OOM | same place | real / predicted peak allocated (MiB) |\n",
    );
    out.push_str("| --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- | --- |\n");
    for row in rows {
        let real_oom = if row.real_varied() {
            "varied"
        } else if row.ground_truth().oom {
            "yes"
        } else {
            "no"
        };
        let predicted_oom = if row.uncertain {
            "uncertain"
        } else if row.predicted_oom {
            "yes"
        } else {
            "no"
        };
        out.push_str(&format!(
            "| {} | `{}` | {} | {} | {} | {:.2} % | {real_oom} | {predicted_oom} | {} | {} / {} |\n",
            row.workload,
            row.conf,
            row.cap.map_or("none".to_string(), mib),
            real_peaks(row),
            predicted_peaks(row),
            100.0 * row.error(),
            if !row.ground_truth().oom && !row.predicted_oom {
                "–"
            } else if row.same_place {
                "yes"
            } else {
                "no"
            },
            mib(row.real_allocated_peak),
            mib(row.predicted_allocated_peak)
        ));
    }
    out
}

fn table(
    rows: &[Row],
    checks: &[String],
    repeat_lines: &[String],
    heldout: &[Row],
    heldout2: &[Row],
    heldout3: &[Row],
    heldout4: &[Row],
) -> String {
    let mut out = String::new();
    out.push_str("# What-if replay validated against the real allocator\n\n");
    out.push_str(
        "Generated by `VRAMSCOPE_WRITE_DOCS=1 cargo test --test all whatif_validation::` from the ground \
         truth in `tests/fixtures/whatif/` (made on an NVIDIA H200 with PyTorch 2.11.0+cu130 by \
         `scripts/whatif/make_ground_truth.py`; see its README) and the repeated runs in \
         `docs/gpu-verification/whatif-repeats/summary.json` (`scripts/whatif/repeat_runs.py`). \
         Each run is a fresh process under the setting and cap shown; the prediction replays the \
         workload's default-settings trace under that setting and cap. Peak = \
         `reserved_bytes.all.peak` of `torch.cuda.memory_stats()`; OOM = the run raised \
         `torch.OutOfMemoryError`, and \"same place\" = the replay ran out on the same allocation.\n\n",
    );
    out.push_str(
        "How it counts. Each (workload, setting, cap) pair is compared with every real run of it: \
         the ground truth and, where the pair was run again, every repeat. When some free in the \
         trace waited for another stream's work (its `free_completed` came later than its \
         `free_requested`), the replay runs each setting twice: with that work finishing as the \
         trace recorded it, and with it finished by the allocator's next call (PyTorch's \
         `malloc` starts with `process_events`, which completes every free whose events are \
         done); the prediction is then the range of the two peaks, and a verdict that differs \
         between them is \"uncertain\". For a trace whose frees never wait, the range is the one \
         peak. A pair's error is how far the real peak furthest outside the predicted range lies \
         from it, relative to that real peak (0 when every real peak is inside); \"within 2 %\" \
         and \"within 5 %\" count pairs with an error up to that. A verdict is right when it is \
         certain and every real run agrees with it (whether the replay ran out at the same \
         allocation as the ground truth is counted apart). Where the real runs disagreed among \
         themselves no certain verdict matches them all: one that is the ground truth's and \
         more than half of the real runs' is counted apart. The measure this validation was \
         specified with, one fresh process per pair, is the first count: the verdict certain \
         and the ground-truth run's. \
         A verdict is also uncertain when the \
         setting ran out only on a scratch buffer the program may survive, or when the \
         placement of segments decides it: near a limit (the replay ran out, released cached \
         memory for a request, or peaked within a tenth of the limit) each setting is replayed \
         again under 8 drawn placements, in which each segment made while released address \
         space could hold it goes where the driver's 32 MiB chunks say as often as the \
         recorded run's driver followed them (from the 46 % of 375 surveyed runs, see the \
         causes below), else, as the driver's did, into fresh space with probability 28 % and \
         otherwise into any of the released ranges that can hold it, at either end; a \
         verdict some of them do not share is uncertain, its range widened by their peaks (see \
         the causes below). An uncertain verdict is counted apart: not wrong when the real runs' verdicts \
         differed from each other or every real peak lies within 5 % of \
         the range, else wrong. Nothing changes for a single-stream trace: its range is one \
         number and its repeats, where there are any, gave the ground truth's numbers.\n\n",
    );
    out.push_str(&summary_line(rows));
    out.push_str("## Where the model is approximate\n\n");
    out.push_str(&misses_list(rows));
    out.push_str(
        "\nWhat is known of the causes:\n\n\
         - Addresses. PyTorch's best fit (`BlockComparatorSize`: stream, size, then address) \
         gives a request the lowest-addressed of equal free blocks, so which of two equal cached \
         blocks is split depends on where `cudaMalloc` put their segments, and with it which \
         segments are still whole (releasable) later under a cap. The replay places a new \
         segment as the driver was seen to (`scripts/whatif/driver_address_survey.py` over 375 \
         real runs' snapshots, `docs/gpu-verification/whatif-placement/driver_addresses.txt`): \
         (1) where the recorded run made a segment at the same request: one of the same size, \
         else one of another size (a setting that rounds differently asks for another size at \
         the same point; the driver gave it the same place in 58 of 124 such cases, against \
         2,670 of 3,623 of the same size, in the first 279 runs); (2) into address space that \
         segments the replay released (`cudaFree`) left, when a range can hold it: the driver \
         did so in 3,561 of 4,500 such cases. The replay takes the smallest range that fits, \
         at its low end, which names the exact address in 1,084 (24 %), the most of eight \
         rules by range (smallest, highest, lowest or latest-freed range, at either end). The \
         driver's 32 MiB chunks name more, 2,064 (46 %): a segment under 32 MiB goes into the \
         lowest chunk that holds a live segment and has room, at the lowest address there, \
         else to the start of the highest chunk free of live segments (else the smallest \
         range, at its low end). A chunk's room is its released space, and the top of the \
         chunk that no segment had when what its segments had there is one run from its \
         bottom (the driver fills a chunk from its bottom, so memory of another's there would \
         show as a gap; room elsewhere that no segment had may hold such memory); they name \
         all 68 in `small_churn`'s trace, 4 of them in such a top (without the tops: 1,911 of \
         4,500 and 64 of 68). Taken as the replay's own choice (with the tops or without), \
         they made `small_churn` under \
         `roundup_power2_divisions:4` at 233 MiB run out at the real runs' allocation (31 of \
         the 31 real OOMs at the same allocation), but replayed from 2 of the 6 surveyed real \
         placements of `transformer_step` (see below) they made it fit under the 3353 and \
         3355 MiB caps in 3 settings whose real runs all ran out, and from the capped \
         run that fit, they made it run out; so the chunks are what the placement check \
         draws, as often as the recorded run's driver followed them, and the other choices \
         otherwise; \
(3) at the address of the recorded run's segment of the same size and ordinal \
         (the n-th 20 MiB segment gets the recorded n-th 20 MiB segment's address); (4) in \
         fresh space below every live segment, where the driver put 55 % of its new segments \
         outside released ranges (38 % between two, 7 % above all). Rule (3) fixed `kv_cache` \
         under `roundup_power2_divisions:4` (248 MiB real, was predicted 228; the 230 MiB \
         cap's OOM, was missed): the real run made its 2 MiB and 20 MiB segments a few requests \
         earlier than the default run and the driver gave all 18 the default run's addresses \
         for that size and ordinal. Rules (1) for another size, (2) and (4) came on 2026-12-03: \
         before them, new segments after a release took the recorded run's addresses for their \
         size or one above every address, and 22 of the 31 real OOMs were predicted at the same \
         allocation (now 30).\n\
         - `transformer_step` under a 3353 or 3355 MiB cap (7 real runs each, all out of memory \
         after 1653 allocations at a 3318 MiB peak): before rules (2) and (4) the replay fitted. \
         The segments made after the cap's first releases took the uncapped run's addresses for \
         their size, or one above every address, where the real driver reused the released \
         space or went below the live segments; best fit then split other blocks, and later \
         the replay released other segments than the real runs did. With either rule it runs \
         out at the real runs' allocation. Real runs of this program also put their first \
         segments in different places (the 32 MiB segment made at event 168 sat 2376 to 2504 \
         MiB below the first segment in 5 of 8 runs and 152 to 632 MiB above it in 3), and that \
         was taken for the cause: the placement \
         check then moved each segment, with probability 1/4, to a random address: that made \
         these 6 verdicts (3 settings, 2 caps) and 5 other ground-truth ones uncertain, and 4 \
         held-out ones, while the real runs of 10 of those 11 ground-truth pairs all agreed (6 \
         or 7 runs each). The check now \
         draws only the choices the trace does not fix (rule (2)), for three reasons measured \
         on the H200's runs (`scripts/whatif/placement_replay_check.py`, output in \
         `docs/gpu-verification/whatif-placement/placement_replay_check.txt`): replayed with \
         the segments where each of 6 real uncapped runs of each of 11 workloads put them (the \
         placement survey), the replay gives the same verdict in each of the 126 capped pairs \
         of the 9 single-stream workloads; moving one segment of `transformer_step` far above \
         or below the others changes its verdicts at 3353 MiB for 3 of its 55 segments only, \
         each of which kept its place among the others in all 6 surveyed runs (a 20 MiB one at \
         the same relative address in all, a 96 and a 128 MiB one in the same place of the \
         descending run of large segments, which lay 160 MiB lower in 2 runs); and replayed \
         with the segments where each of 24 capped `transformer_step` runs \
         (`garbage_collection_threshold:0.6` and `roundup_power2_divisions:4`) put them up to \
         its first release, it gives each run's own verdict and peak, 24 of 24. The price is \
         one verdict: that setting under the 3355 MiB cap ran \
         out in 29 of 31 real runs (24 of them run for this, \
         `docs/gpu-verification/whatif-placement2/`) and fit in 2, at a 3354 MiB peak; the \
         replay says it runs out (peak 3254 MiB; the real peaks were 3254 MiB in 24 runs, \
         3262 to 3326 MiB in 5 and 3354 MiB in 2), and from the first run that fit's own placement \
         it predicts a fit at 3354 MiB. Where the driver puts a \
         process's first segments differs from run to run (in `transformer_step` only 9 of 55 \
         kept their relative address over 6 runs), the trace shows one such run, and no draw \
         tried here reproduced which orders real runs have; so this verdict, whose real runs \
         disagreed, is counted apart: certain, and what the ground truth and 29 of the 31 \
         real runs did, which no certain verdict can be for all of them. A draw that did \
         reproduce the real runs' variation would not settle it either: 4 of the 24 capped runs \
         put the 32 MiB segment of event 168 among the first segments instead of below the \
         others, and 1 of those 4 fit, so 8 such draws would catch a fit in about 3 of 10 \
         questions (1 - (23/24)^8). `small_churn` under `roundup_power2_divisions:4` at \
         233 MiB, whose 7 real runs all ran out, was uncertain until the chunks' tops came \
         (2026-12-04): 4 of its 8 draws fit when every draw chose a released range at random, \
         and 1 when its draws followed the chunks as its trace's driver did in 64 of 68 \
         decisions (leaving them in 7 % of theirs); with the tops its driver followed them in \
         68 of 68, its draws leave them in 2 % of theirs, and all 8 run out.\n\
         - Scratch buffers. A program can catch an out-of-memory error and go on, and PyTorch \
         itself does so for cuDNN's convolution workspace: it tries the next algorithm, down to \
         one needing none. The held-out `cnn_train` under `roundup_power2_divisions` and a cap \
         showed it: a 576 MiB workspace, rounded to 640 MiB, did not fit, the real run recorded \
         24 failures of it and finished. A request made inside PyTorch's own code (innermost \
         Python frame in torch's files, or no Python frame while others have one) and given \
         back before any other request or free is taken for such a scratch buffer: when a \
         setting cannot serve it the replay goes on without it and the verdict is uncertain \
         (`scratch_oom`); a later failure still ends the run. A user's tensor freed first (CPython \
         frees a list's items last to first) is not one, so no ground-truth verdict changed. \
         With Python frames only, the trace cannot tell a convolution's workspace from another \
         kernel's scratch buffer (a reduction's, say), whose failure PyTorch does not catch. \
         Traced with C++ frames as well (`stacks=\"all\"`, the default of \
         `torch.cuda.memory._record_memory_history()`) it can: the verdict is certain, the job \
         runs, when every failed scratch buffer was requested under \
         `at::native::run_single_conv` (cuDNN v8: a cached plan, the heuristics' \
         `try_configs`, the benchmark's search) or v7's `AlgoIterator<…>::try_all`. Seen on the \
         H200 (`docs/gpu-verification/whatif-cpp-stacks/`): real runs under a cap recorded 39, \
         24, 26 and 3 failures there, in the heuristics, the benchmark and the v7 search, and \
         each finished. The held-out `cnn_train` and `unet_segment` traces below are those \
         recordings (the same events as their Python-frames-only traces, kept in \
         `tests/fixtures/whatif/python_stacks/`: with those, 3 and 6 of their verdicts are \
         uncertain instead of right, and every peak is the same; \
         `cpp_frames_settle_the_retried_workspace_verdicts`). This rule was found on these \
         runs, so for it these two workloads are not held out.\n\
         - Two streams: when another stream's work on a freed block finishes is the GPU's \
         timing. The trace records it (`free_completed`) for the run it came from only, and it \
         changes from run to run: the default uncapped `two_streams` run peaked at 380 MiB in \
         the ground truth and at 330 MiB in all 7 repeats, `expandable_segments:True` under a \
         296 MiB cap at 280 MiB in the ground truth and 300 MiB in all 7 repeats. So the replay \
         gives such a trace a range (see \"How it counts\"): every real outcome of the 21 \
         `two_streams` pairs lies inside the range predicted from the ground truth's trace. \
         The range is wide (its lower end, the GPU finishing everything by the next request, \
         is 210-240 MiB where real runs gave 278-404 MiB), and a GPU slower than the recorded \
         run's is bounded by nothing the trace shows: replayed from the repeats' own traces \
         (which peaked at 330 MiB), the uncapped ground truth (380 or 404 MiB) lies above \
         every setting's range (below). Every recorded run replays exactly under its own \
         settings and cap (see `every_recorded_setting_replays_to_its_own_final_state`, all 14 \
         capped `two_streams` runs among its fixtures, and the repeats' traces below): a free \
         completed inside a request's failure path (PyTorch's \
         `synchronize_and_free_events` in `release_cached_blocks`) is completed by the model at \
         that point, not before the request.\n\n",
    );
    out.push_str(
        "Self-checks (default settings, recorded trace replayed against its own end state):\n\n",
    );
    for check in checks {
        out.push_str(&format!("- {check}\n"));
    }
    out.push_str(
        "\n## The repeats' own traces\n\nThe default uncapped runs that were repeated \
         (`tests/fixtures/whatif/repeats/`) recorded traces of their own. Each replays exactly \
         under its own settings, and predicts every pair of its workload again; the real \
         outcomes (ground truth and repeats) are compared with those predictions as above:\n\n",
    );
    for line in repeat_lines {
        out.push_str(&format!("- {line}\n"));
    }
    out.push('\n');
    out.push_str(&rows_table(rows));
    out.push_str(
        "\n## Held-out workloads\n\nFive workloads written after the model was built and never \
         used to tune it (`scripts/whatif/workloads_heldout.py`, ground truth in \
         `tests/fixtures/whatif/heldout/`, 105 real H200 runs, counted as above; the one pair \
         the placement check made uncertain was run 6 times more). \
         They found one rule the model lacked, added since (the failed scratch buffer under \
         \"What is known of the causes\"): before it, the 3 uncertain `cnn_train` verdicts below \
         were wrong (the replay called the workspace's failure fatal) and one of them had its \
         peak exact (now 3.6 % over: going on without the workspace, the replay's later state \
         differs from the real run's).\n\n",
    );
    out.push_str(&held_out_section(heldout));
    out.push_str(HELDOUT2_INTRO);
    out.push_str(&held_out_section(heldout2));
    out.push_str(HELDOUT3_INTRO);
    out.push_str(&held_out_section(heldout3));
    out.push_str(HELDOUT4_INTRO);
    out.push_str(&held_out_section(heldout4));
    out
}

/// A held-out set's results: its summary, its misses and its table.
fn held_out_section(rows: &[Row]) -> String {
    format!(
        "{}{}\n{}",
        summary_line(rows),
        misses_list(rows),
        rows_table(rows)
    )
}

/// What the fourth held-out set is.
const HELDOUT4_INTRO: &str = "\n## Fourth held-out set\n\nFive more workloads, written on \
     2026-12-04 after the drawn placements learnt the driver's chunks (their released space and \
     the top no segment had), and run once on the H200 with C++ frames in the stacks \
     (`scripts/whatif/workloads_heldout4.py`: message passing on random graphs of changing \
     size, spectrograms through `torch.stft` into a small conv net, a GAN trained in turns with \
     two optimizers, training that keeps every step's predictions on the GPU, inference of a \
     transformer encoder on padded batches under `inference_mode`; ground truth in \
     `tests/fixtures/whatif/heldout4/`, records and log in \
     `docs/gpu-verification/whatif-heldout4/`), counted as above. No rule was changed for \
     them. The 48 capped pairs that ran out or peaked within 5 % of their cap were run 5 times \
     more, 12 processes at a time (`repeats_summary.json` there): all 240 repeats gave their \
     ground truth's verdict and peak.\n\n";

/// What the third held-out set is.
const HELDOUT3_INTRO: &str = "\n## Third held-out set\n\nFive more workloads, written on \
     2026-12-03 after the replay learnt where the driver puts segments made after a release \
     (see \"Addresses\" under the causes), and run once on the H200 with C++ frames in the \
     stacks (`scripts/whatif/workloads_heldout3.py`: a vision transformer on images of changing \
     size through `scaled_dot_product_attention`, an LSTM on packed variable-length batches, \
     fp16 training with a gradient scaler and gradient clipping, a recommendation model's \
     embedding bags; ground truth in `tests/fixtures/whatif/heldout3/`, runs and log in \
     `docs/gpu-verification/whatif-heldout3/`), counted as above. No rule was changed for \
     them. A fifth workload of the set, batched generation whose batch shrinks while its KV \
     caches grow (`shrinking_generation`), is not in this table: its default trace is 18 MB, \
     and with its snapshots the repository no longer fits the 64 MiB a GPU machine of this \
     project can be sent; its 21 records are kept in that folder, and replayed once by this \
     tree it gave 21 of 21 verdicts right and every peak within 2 % (see its README).\n\n";

/// What the second held-out set is and what it found.
const HELDOUT2_INTRO: &str = "\n## Second held-out set\n\nFive more workloads, written on \
     2026-12-02 after every rule above was in place and run once on the H200 \
     (`scripts/whatif/workloads_heldout2.py`: activation checkpointing under bf16 autocast, a \
     U-Net, mixture-of-experts routing, a leak of kept losses, models swapped with \
     `empty_cache()`; ground truth in `tests/fixtures/whatif/heldout2/`, runs and logs in \
     `docs/gpu-verification/whatif-heldout2/`), counted as above. No rule was changed for them \
     until one was found on them on 2026-12-03 (below). \
     The uncertain verdicts, each run 6 times more on the H200 (5 twelve at a time, 1 alone; \
     `repeats_summary.json` there): `unet_segment` under the lower cap, where a cuDNN workspace \
     did not fit and the real runs went on without it (the scratch-buffer rule; all 36 repeats \
     ran, at the ground truth's peak; traced with C++ frames, as now, all 6 are right, see the \
     scratch-buffer cause), and `ckpt_transformer` under `max_split_size_mb:64` and a 777 MiB \
     cap, which the placement of segments decides (the replay runs out, 5 of 8 drawn choices of \
     released address space do not): the ground truth fit 1 MiB under the cap, and 3 of the 6 \
     repeats ran out, at the same peak. Rule (1) for a segment of another size (see \
     \"Addresses\" under the causes) was found on this set, so for it `unet_segment` is not \
     held out: with rules (2) and (4) alone, its 40 and 80 MiB segments under \
     `roundup_power2_divisions:4` went below every other, and the 1555 MiB cap's peak was \
     predicted at 1538 MiB (real 1394 MiB, 10 % over; 1438 MiB before the three rules).\n\n";

#[test]
fn replay_predicts_real_runs_under_every_setting_and_cap() {
    let (rows, checks) = validate(&fixtures(), &load_repeats(GROUND_TRUTH_REPEATS));
    let (heldout, _) = validate(&fixtures().join("heldout"), &load_repeats(HELDOUT_REPEATS));
    let (heldout2, _) = validate(
        &fixtures().join("heldout2"),
        &load_repeats(HELDOUT2_REPEATS),
    );
    assert!(
        rows.len() >= 5 * 7 * 2,
        "ground truth too small: {} runs",
        rows.len()
    );
    let repeat_lines = repeat_traces(&rows);
    let (heldout3, _) = validate(&fixtures().join("heldout3"), &BTreeMap::new());
    let (heldout4, _) = validate(
        &fixtures().join("heldout4"),
        &load_repeats(HELDOUT4_REPEATS),
    );
    let text = table(
        &rows,
        &checks,
        &repeat_lines,
        &heldout,
        &heldout2,
        &heldout3,
        &heldout4,
    );
    let doc = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/whatif-validation.md");
    if std::env::var_os("VRAMSCOPE_WRITE_DOCS").is_some() {
        std::fs::write(&doc, &text).expect("write docs/whatif-validation.md");
    }
    // The whole table on failure, so one run shows every disagreement.
    eprintln!("{text}");
    let within_2 = rows.iter().filter(|r| r.error() <= 0.02).count();
    let worst = rows
        .iter()
        .max_by(|a, b| a.error().total_cmp(&b.error()))
        .expect("rows");
    assert!(
        within_2 * 100 >= rows.len() * 95,
        "only {within_2} of {} runs within 2 %",
        rows.len()
    );
    // The results may not get worse (see docs/whatif-validation.md, "Where the model is
    // approximate", for the pair whose real runs disagreed).
    let within_5 = count_within(&rows, 0.05);
    let right = rows.iter().filter(|r| r.right_at_the_right_place()).count();
    let wrong = count_verdict(&rows, Verdict::Wrong);
    assert!(
        within_5 >= WITHIN_5_AT_LEAST,
        "{within_5} of {} runs within 5 % (was {WITHIN_5_AT_LEAST}); worst: {} `{}` cap {:?}: predicted {:?} vs real {}",
        rows.len(),
        worst.workload,
        worst.conf,
        worst.cap,
        worst.predicted_range,
        real_peaks(worst)
    );
    // 124 (was 113) since new segments take the address space the replay's releases freed and
    // fresh space lies below the live segments, the drawn placements vary only what the
    // driver was seen to vary, and follow its chunks' tops (see the causes in the document).
    assert!(
        right >= 124,
        "{right} of {} OOM verdicts right at the right place (was 124)",
        rows.len()
    );
    // A certain verdict may miss a real run only where the real runs disagreed among
    // themselves (then no certain verdict matches them all), and then it must be what the
    // ground truth and most real runs did: one pair, which ran out in 29 of its 31 real runs.
    assert_eq!(wrong, 0, "OOM verdicts wrong");
    let most_real_runs = count_verdict(&rows, Verdict::MostRealRuns);
    assert!(
        most_real_runs <= 1,
        "{most_real_runs} certain verdicts some real runs did not share (was 1)"
    );
    // The measure this validation was specified with: every pair's verdict certain and what
    // its ground-truth run (one fresh process) did.
    let against_ground_truth: Vec<String> = rows
        .iter()
        .filter(|r| !r.matches_ground_truth())
        .map(|r| format!("{} `{}` cap {:?}", r.workload, r.conf, r.cap))
        .collect();
    assert!(
        against_ground_truth.is_empty(),
        "verdicts uncertain or not the ground truth's: {against_ground_truth:?}"
    );
    // The held-out sets: no verdict wrong, and the results may not get worse than first
    // measured (the first set's 105 right since released address space is reused, 104 before,
    // 101 before the CNN was traced with C++ frames; the second's 104 likewise, 103 before, 98
    // before the U-Net was traced with C++ frames).
    for (name, rows, floor) in [
        (
            "held-out",
            &heldout,
            HeldOutFloor {
                pairs: 100,
                within_2: 103,
                within_5: HELDOUT_WITHIN_5_AT_LEAST,
                right: 105,
            },
        ),
        (
            "second held-out",
            &heldout2,
            HeldOutFloor {
                pairs: 80,
                within_2: 104,
                within_5: 105,
                right: 104,
            },
        ),
        (
            "third held-out",
            &heldout3,
            HeldOutFloor {
                pairs: 80,
                within_2: 84,
                within_5: 84,
                right: 84,
            },
        ),
        (
            "fourth held-out",
            &heldout4,
            HeldOutFloor {
                pairs: 100,
                within_2: 104,
                within_5: 105,
                right: 105,
            },
        ),
    ] {
        floor.check(name, rows);
    }
    let current = std::fs::read_to_string(&doc).unwrap_or_default();
    assert_eq!(
        current, text,
        "docs/whatif-validation.md is out of date: rerun with VRAMSCOPE_WRITE_DOCS=1"
    );
}

/// What a held-out set's results may not fall below: as first measured.
struct HeldOutFloor {
    pairs: usize,
    within_2: usize,
    within_5: usize,
    right: usize,
}

impl HeldOutFloor {
    /// Asserts that `rows` has no wrong verdict and reaches every number of the floor.
    fn check(&self, name: &str, rows: &[Row]) {
        assert!(
            rows.len() >= self.pairs,
            "{name} ground truth too small: {}",
            rows.len()
        );
        assert_eq!(
            count_verdict(rows, Verdict::Wrong),
            0,
            "{name} set: OOM verdicts wrong"
        );
        let within_2 = count_within(rows, 0.02);
        let within_5 = count_within(rows, 0.05);
        let right = count_verdict(rows, Verdict::Right);
        assert!(
            within_2 >= self.within_2 && within_5 >= self.within_5 && right >= self.right,
            "{name} set: {within_2} within 2 %, {within_5} within 5 %, {right} verdicts right \
             (were {}, {} and {})",
            self.within_2,
            self.within_5,
            self.right
        );
    }
}

/// Pairs within 5 % of their predicted range (the replay may not get worse than this).
const WITHIN_5_AT_LEAST: usize = 126;
/// The held-out workloads' pairs within 5 % when the scratch-buffer rule was added.
const HELDOUT_WITHIN_5_AT_LEAST: usize = 104;

/// Replays every snapshot in `folder` under its own recorded settings and the cap its name
/// carries (`…__capBYTES[__…].pickle`); returns how many were checked and the failures.
fn self_check_folder(folder: &std::path::Path) -> (usize, Vec<String>) {
    let mut checked = 0;
    let mut failures = Vec::new();
    for entry in std::fs::read_dir(folder).expect("snapshot folder") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("pickle") {
            continue;
        }
        let snapshot = Arc::new(read_file(&path, &|_| true).expect("snapshot"));
        let cap = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.split("__cap").nth(1))
            .and_then(|s| s.split("__").next())
            .and_then(|s| s.parse::<u64>().ok());
        let request = WhatIfRequest {
            device: 0,
            candidates: vec![AllocConf::default_conf()],
            cap_bytes: cap,
            device_memory_bytes: None,
        };
        let report =
            vramscope_core::analysis::replay::what_if_snapshot(snapshot, &request, &|_| true)
                .expect("what-if");
        if !report.self_check.reliable || report.self_check.cap_bytes != cap {
            failures.push(format!(
                "{}: {:?} (self-check cap {:?})",
                path.display(),
                report.self_check.problem,
                report.self_check.cap_bytes
            ));
        }
        checked += 1;
    }
    (checked, failures)
}

#[test]
fn every_recorded_setting_replays_to_its_own_final_state() {
    // Snapshots recorded under other settings (expandable segments, split limits, rounding,
    // caps): the model must reproduce each exactly under its own recorded settings.
    let folder = std::env::var_os("VRAMSCOPE_WHATIF_RECORDED")
        .map(PathBuf::from)
        .unwrap_or_else(|| fixtures().join("recorded"));
    let (checked, failures) = self_check_folder(&folder);
    assert!(
        failures.is_empty(),
        "{} of {checked} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 24, "only {checked} recorded snapshots");
}

#[test]
fn every_repeated_run_replays_to_its_own_final_state() {
    // The repeats (`tests/fixtures/whatif/repeats/`), whose GPU timing differed from run to run:
    // each one's own trace must replay exactly under its own settings and cap.
    let (checked, failures) = self_check_folder(&fixtures().join("repeats"));
    assert!(
        failures.is_empty(),
        "{} of {checked} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 40, "only {checked} repeat snapshots");
}
