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

use vramscope::analysis::replay::{
    AllocConf, CapSource, LimitsUsed, WhatIfRequest, replay_setting, what_if,
};
use vramscope::analysis::timetravel::TimeTravel;
use vramscope::formats::pytorch::read_file;
use vramscope::model::allocator::TraceAction;

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

/// One row of the validation table.
struct Row {
    workload: String,
    conf: String,
    cap: Option<u64>,
    real_peak: u64,
    predicted_peak: u64,
    real_oom: bool,
    predicted_oom: bool,
    same_place: bool,
    real_allocated_peak: u64,
    predicted_allocated_peak: u64,
}

impl Row {
    fn error(&self) -> f64 {
        (self.predicted_peak as f64 - self.real_peak as f64).abs() / self.real_peak.max(1) as f64
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 20) as f64)
}

fn load_runs() -> Vec<Run> {
    let text = std::fs::read_to_string(fixtures().join("truth.json")).expect("truth.json");
    let by_name: BTreeMap<String, Option<Run>> = serde_json::from_str(&text).expect("truth JSON");
    by_name.into_values().flatten().collect()
}

fn validate() -> (Vec<Row>, Vec<String>) {
    let runs = load_runs();
    let mut workloads: Vec<&str> = runs.iter().map(|r| r.workload.as_str()).collect();
    workloads.sort_unstable();
    workloads.dedup();
    let mut rows = Vec::new();
    let mut checks = Vec::new();
    for workload in workloads {
        let path = fixtures().join(format!("{workload}.pickle"));
        let snapshot = Arc::new(read_file(&path, &|_| true).expect("snapshot"));
        let travel = TimeTravel::new(Arc::clone(&snapshot), 0);
        let request = WhatIfRequest {
            device: 0,
            candidates: vec![AllocConf::default_conf()],
            cap_bytes: None,
            device_memory_bytes: None,
        };
        let report = what_if(&travel, &request, &|_| true).expect("what-if");
        assert!(
            report.self_check.reliable,
            "{workload}: self-check failed: {:?}",
            report.self_check.problem
        );
        checks.push(format!(
            "{workload}: {} events, self-check OK ({} segments, {} blocks)",
            report.events, report.self_check.segments_compared, report.self_check.blocks_compared
        ));
        let trace = travel.trace();
        for run in runs.iter().filter(|r| r.workload == workload) {
            let conf = AllocConf::parse(if run.conf.is_empty() {
                "default"
            } else {
                &run.conf
            })
            .expect("setting");
            let limits = LimitsUsed {
                cap_bytes: run.allowed_bytes,
                cap_source: if run.allowed_bytes.is_some() {
                    CapSource::Given
                } else {
                    CapSource::None
                },
                device_limit_bytes: None,
            };
            let outcome = replay_setting(&travel, &conf, &limits, &|_| true).expect("replay");
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
            rows.push(Row {
                workload: workload.to_string(),
                conf: conf.text.clone(),
                cap: run.allowed_bytes,
                real_peak: run.reserved_peak_bytes,
                predicted_peak: outcome.peak_reserved_bytes,
                real_oom: run.oom,
                predicted_oom: outcome.oom.is_some(),
                same_place: predicted_allocs == run.allocs_before_oom,
                real_allocated_peak: run.allocated_peak_bytes,
                predicted_allocated_peak: outcome.peak_allocated_bytes,
            });
        }
    }
    (rows, checks)
}

fn table(rows: &[Row], checks: &[String]) -> String {
    let within = |limit: f64| rows.iter().filter(|r| r.error() <= limit).count();
    let verdicts = rows
        .iter()
        .filter(|r| r.real_oom == r.predicted_oom)
        .count();
    let mut out = String::new();
    out.push_str("# What-if replay validated against the real allocator\n\n");
    out.push_str(
        "Generated by `VRAMSCOPE_WRITE_DOCS=1 cargo test --test all whatif_validation::` from the ground \
         truth in `tests/fixtures/whatif/` (made on an NVIDIA H200 with PyTorch 2.11.0+cu130 by \
         `scripts/whatif/make_ground_truth.py`; see its README). Each run is a fresh process under \
         the setting and cap shown; the prediction replays the workload's default-settings trace \
         under that setting and cap. Peak = `reserved_bytes.all.peak` of \
         `torch.cuda.memory_stats()`; OOM = the run raised `torch.OutOfMemoryError`, and \"same \
         place\" = the replay ran out on the same allocation.\n\n",
    );
    out.push_str(&format!(
        "**{} runs: peak reserved within 2 % for {} ({:.1} %), within 5 % for {}; OOM verdict \
         right for {} of {}; of the {} real OOMs, {} predicted at the same allocation.**\n\n",
        rows.len(),
        within(0.02),
        100.0 * within(0.02) as f64 / rows.len().max(1) as f64,
        within(0.05),
        verdicts,
        rows.len(),
        rows.iter().filter(|r| r.real_oom).count(),
        rows.iter()
            .filter(|r| r.real_oom && r.predicted_oom && r.same_place)
            .count()
    ));
    let misses: Vec<&Row> = rows
        .iter()
        .filter(|r| r.error() > 0.05 || r.predicted_oom != r.real_oom)
        .collect();
    out.push_str(&format!(
        "## Where the model is approximate\n\n{} runs miss the 5 % bound or the OOM verdict:\n\n",
        misses.len()
    ));
    for row in &misses {
        out.push_str(&format!(
            "- {} `{}` cap {}: real peak {} MiB{}, predicted {} MiB{}\n",
            row.workload,
            row.conf,
            row.cap
                .map_or("none".to_string(), |c| format!("{} MiB", mib(c))),
            mib(row.real_peak),
            if row.real_oom { " (ran out)" } else { "" },
            mib(row.predicted_peak),
            if row.predicted_oom { " (runs out)" } else { "" },
        ));
    }
    out.push_str(
        "\nWhat is known of the causes:\n\n\
         - Addresses. PyTorch's best fit (`BlockComparatorSize`: stream, size, then address) \
         gives a request the lowest-addressed of equal free blocks, so which of two equal cached \
         blocks is split depends on where `cudaMalloc` put their segments, and with it which \
         segments are still whole (releasable) later under a cap. The replay gives a new segment \
         the address the recorded run's segment event for the same request had; failing that, \
         the address of the recorded run's segment of the same size and ordinal (the n-th 20 MiB \
         segment gets the recorded n-th 20 MiB segment's address); failing that, one above every \
         real address. The second rule fixed `kv_cache` under `roundup_power2_divisions:4` \
         (248 MiB real, was predicted 228; the 230 MiB cap's OOM, was missed): there the real \
         run made its 2 MiB and 20 MiB segments a few requests earlier than the default run, \
         the driver gave all 18 of them the default run's addresses for that size and ordinal \
         (relative to the first segment), and the first divergence was at event 3268, a 1.6 MiB \
         request (1.75 MiB rounded) between two free 4 MiB blocks: the real run took the one in \
         its twelfth segment, below the first segment; the replay, with an invented address for \
         the twelfth segment, took the first segment's.\n\
         - `transformer_step` under a 3353 or 3355 MiB cap (real OOM at a 3318 MiB peak, the \
         replay fits): the driver's placement is not a function of the call sequence there. \
         Every capped run makes the same `cudaMalloc` calls as the default run up to its first \
         release, yet across 8 real runs of the program the 32 MiB segment made at event 168 \
         sat 2504, 2472 or 2376 MiB below the first segment in 5 and 152 to 632 MiB above it in \
         3, and repeats of the default run matched the recorded run's relative addresses for \
         only 9 of 55 segments. First divergence, default with the 3353 MiB cap: event 495, a \
         32 MiB request, two free 32 MiB blocks (the whole segment of event 168 and the tail of \
         a split 128 MiB segment); the real run's driver had put the segment of event 168 above \
         the 128 MiB one, so best fit split off the tail and the 32 MiB segment stayed whole; \
         the recorded default run had it below, so the replay took it. With the 3355 MiB cap: \
         event 913, a 16 MiB request, two whole free 32 MiB segments (events 63 and 80), the \
         real run took the segment of event 80, the replay that of event 63 (808 MiB below the \
         first segment in the recorded run, above the other in 5 of the 8 runs). From there the \
         runs release different segments under the cap: at allocation 1304 (from 0), a 128 MiB \
         request, the real run found a cached block and the replay released two 32 MiB \
         segments for a new one; the real run later ran out within 1 % of the cap. No rule of \
         the allocator decides this; verdicts this close to the cap are the least certain.\n\
         - Two streams: when another stream's work on a freed block finishes is the GPU's \
         timing, which the trace records (`free_completed`) for the run it came from only. \
         Replaying the uncapped trace under a cap keeps the uncapped run's timing; in the real \
         capped runs the allocator's synchronisations change it (of the 170 frees the uncapped \
         run completed, 60 to 73 completed after a different number of allocations in the \
         capped default, `expandable_segments` and `garbage_collection_threshold` runs), which \
         is what the 6-7 % over-predictions above come from. Every one of the 126 \
         recorded runs replays exactly under its own settings and cap (see \
         `every_recorded_setting_replays_to_its_own_final_state`, all 14 capped `two_streams` \
         runs among its fixtures): a free completed inside a request's failure path (PyTorch's \
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
        "\n| workload | setting | cap (MiB) | real peak (MiB) | predicted (MiB) | error | real OOM | \
         predicted OOM | same place | real / predicted peak allocated (MiB) |\n",
    );
    out.push_str("| --- | --- | ---: | ---: | ---: | ---: | --- | --- | --- | --- |\n");
    for row in rows {
        out.push_str(&format!(
            "| {} | `{}` | {} | {} | {} | {:.2} % | {} | {} | {} | {} / {} |\n",
            row.workload,
            row.conf,
            row.cap.map_or("none".to_string(), mib),
            mib(row.real_peak),
            mib(row.predicted_peak),
            100.0 * row.error(),
            if row.real_oom { "yes" } else { "no" },
            if row.predicted_oom { "yes" } else { "no" },
            if !row.real_oom && !row.predicted_oom {
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

#[test]
fn replay_predicts_real_runs_under_every_setting_and_cap() {
    let (rows, checks) = validate();
    assert!(
        rows.len() >= 5 * 7 * 2,
        "ground truth too small: {} runs",
        rows.len()
    );
    let text = table(&rows, &checks);
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
    // Not yet met (see docs/whatif-validation.md, "Where the model is approximate"): every run
    // within 5 % and every OOM verdict right. Until they are, the results may not get worse.
    let within_5 = rows.iter().filter(|r| r.error() <= 0.05).count();
    let verdicts = rows
        .iter()
        .filter(|r| r.predicted_oom == r.real_oom && (!r.real_oom || r.same_place))
        .count();
    assert!(
        within_5 >= 122,
        "{within_5} of {} runs within 5 % (was 122); worst: {} `{}` cap {:?}: predicted {} vs real {}",
        rows.len(),
        worst.workload,
        worst.conf,
        worst.cap,
        worst.predicted_peak,
        worst.real_peak
    );
    assert!(
        verdicts >= 117,
        "{verdicts} of {} OOM verdicts right at the right place (was 117)",
        rows.len()
    );
    let current = std::fs::read_to_string(&doc).unwrap_or_default();
    assert_eq!(
        current, text,
        "docs/whatif-validation.md is out of date: rerun with VRAMSCOPE_WRITE_DOCS=1"
    );
}

#[test]
fn every_recorded_setting_replays_to_its_own_final_state() {
    // Snapshots recorded under other settings (expandable segments, split limits, rounding,
    // caps): the model must reproduce each exactly under its own recorded settings.
    let mut checked = 0;
    let mut failures = Vec::new();
    let folder = std::env::var_os("VRAMSCOPE_WHATIF_RECORDED")
        .map(PathBuf::from)
        .unwrap_or_else(|| fixtures().join("recorded"));
    for entry in std::fs::read_dir(folder).expect("recorded/") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("pickle") {
            continue;
        }
        let snapshot = Arc::new(read_file(&path, &|_| true).expect("snapshot"));
        let cap = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.split("__cap").nth(1))
            .and_then(|s| s.parse::<u64>().ok());
        let request = WhatIfRequest {
            device: 0,
            candidates: vec![AllocConf::default_conf()],
            cap_bytes: cap,
            device_memory_bytes: None,
        };
        let report = vramscope::analysis::replay::what_if_snapshot(snapshot, &request, &|_| true)
            .expect("what-if");
        if !report.self_check.reliable {
            failures.push(format!(
                "{}: {:?}",
                path.display(),
                report.self_check.problem
            ));
        }
        checked += 1;
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 24, "only {checked} recorded snapshots");
}
