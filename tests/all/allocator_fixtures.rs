//! Allocator analyses on real PyTorch snapshots (H200, PyTorch 2.11): time travel against a
//! forward replay, fragmentation metrics against `torch.cuda.memory_stats()`, and the OOM
//! explainer against PyTorch's own out-of-memory message.

use crate::support;

use std::sync::Arc;

use std::path::PathBuf;

use support::synthetic_allocator::Rng;
use vramscope_core::analysis::fragmentation;
use vramscope_core::analysis::oom::{self, FitFailure, OomExplanation};
use vramscope_core::analysis::timetravel::TimeTravel;
use vramscope_core::diagnose::Category;
use vramscope_core::diagnose::oom::{JudgedOom, judge_explanation};
use vramscope_core::diagnose::trajectory;
use vramscope_core::formats::pytorch;
use vramscope_core::model::allocator::{AllocatorSnapshot, PoolKind};

const MIB: u64 = 1 << 20;

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pytorch")
        .join(name)
}

fn read(name: &str) -> AllocatorSnapshot {
    let path = fixture_path(&format!("{name}.pickle"));
    pytorch::read_file(&path, &|_| true).unwrap_or_else(|e| panic!("{e}"))
}

fn truth(name: &str) -> serde_json::Value {
    let path = fixture_path(&format!("{name}.truth.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A `memory_stats()` value: under `memory_stats` in the fixtures' truth files, at the top level
/// in the diagnosis corpus.
fn stat(truth: &serde_json::Value, key: &str) -> u64 {
    truth.get("memory_stats").unwrap_or(truth)[key]
        .as_u64()
        .unwrap_or_else(|| panic!("truth has no memory_stats[{key}]"))
}

#[test]
fn time_travel_replays_every_fixture_exactly() {
    for name in ["frag_oom", "train"] {
        let snapshot = read(name);
        let travel = TimeTravel::new(Arc::new(snapshot), 0);
        let check = travel.check();
        assert!(check.matches_final_state, "{name}: {check:?}");
        assert_eq!(
            (check.undo_mismatches, check.replay_stopped_at),
            (0, None),
            "{name}"
        );
        // The start of the trace: nothing reserved yet (both traces begin with the process).
        assert_eq!(travel.reserved_series()[0], 0, "{name}");
        let mut rng = Rng::new(0x5eed);
        for _ in 0..40 {
            let position = rng.below(travel.len() as u64 + 1) as usize;
            assert_eq!(
                travel.state_at(position),
                travel.replay_forward(position),
                "{name}: state after {position} events"
            );
        }
    }
}

#[test]
fn fragmentation_totals_equal_memory_stats() {
    for name in ["frag_oom", "train"] {
        let snapshot = read(name);
        let truth = truth(name);
        let travel = TimeTravel::new(Arc::new(snapshot), 0);
        let report = fragmentation::analyze(&travel.state_at(travel.len()));
        let device = &report.device;
        assert_eq!(
            device.reserved_bytes,
            stat(&truth, "reserved_bytes.all.current"),
            "{name}"
        );
        assert_eq!(
            device.allocated_bytes,
            stat(&truth, "allocated_bytes.all.current"),
            "{name}"
        );
        assert_eq!(
            device.requested_bytes,
            stat(&truth, "requested_bytes.all.current"),
            "{name}"
        );
        assert_eq!(
            device.inactive_split_bytes,
            stat(&truth, "inactive_split_bytes.all.current"),
            "{name}"
        );
        assert_eq!(
            device.inactive_split_blocks,
            stat(&truth, "inactive_split.all.current"),
            "{name}"
        );
        for (pool, key) in [
            (PoolKind::Small, "small_pool"),
            (PoolKind::Large, "large_pool"),
        ] {
            let mut reserved = 0;
            let mut allocated = 0;
            for (k, m) in &report.pools {
                if k.pool == pool {
                    reserved += m.reserved_bytes;
                    allocated += m.allocated_bytes;
                }
            }
            assert_eq!(
                reserved,
                stat(&truth, &format!("reserved_bytes.{key}.current")),
                "{name} {key}"
            );
            assert_eq!(
                allocated,
                stat(&truth, &format!("allocated_bytes.{key}.current")),
                "{name} {key}"
            );
        }
        // Every reserved byte is in exactly one bucket.
        assert_eq!(
            device.requested_bytes
                + device.rounding_waste_bytes
                + device.pending_free_bytes
                + device.free_bytes,
            device.reserved_bytes,
            "{name}"
        );
    }
}

#[test]
fn frag_oom_fragmentation_numbers_checked_by_hand() {
    // From the pickle (python3 -c 'import pickle; ...'): 54 inactive blocks, 382 MiB in total,
    // all in split segments; the largest is 12 MiB; no segment is entirely free.
    let snapshot = read("frag_oom");
    let travel = TimeTravel::new(Arc::new(snapshot), 0);
    let report = fragmentation::analyze(&travel.state_at(travel.len()));
    let d = &report.device;
    assert_eq!(d.free_bytes, 382 * MIB);
    assert_eq!(d.free_blocks, 54);
    assert_eq!(d.largest_free_bytes, 12 * MIB);
    assert_eq!(d.stranded_bytes, 382 * MIB);
    assert_eq!(d.releasable_bytes, 0);
    assert_eq!(d.segment_count, 142);
    assert!(
        vramscope_core::diagnose::fragmentation::summarize(&report.device)
            .contains("most unused memory is stranded"),
        "{}",
        vramscope_core::diagnose::fragmentation::summarize(&report.device)
    );
    assert!(d.fragmentation_ratio() > 0.9, "{}", d.fragmentation_ratio());
}

/// PyTorch's `format_size` (CUDACachingAllocator.cpp): two decimals, binary units.
fn pytorch_format_size(bytes: u64) -> String {
    if bytes <= 1024 {
        format!("{bytes} bytes")
    } else if bytes <= 1 << 20 {
        format!("{:.2} KiB", bytes as f64 / 1024.0)
    } else if bytes <= 1 << 30 {
        format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else {
        format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
    }
}

#[test]
fn frag_oom_explanation_agrees_with_pytorchs_message() {
    let snapshot = read("frag_oom");
    let message = std::fs::read_to_string(fixture_path("frag_oom.oom.txt")).unwrap_or_default();
    let travel = TimeTravel::new(Arc::new(snapshot), 0);
    let explanations = oom::explain_all(&travel);
    assert_eq!(explanations.len(), 1);
    let e = &explanations[0];
    let expect = |fragment: String| {
        assert!(
            message.contains(&fragment),
            "PyTorch's message lacks {fragment:?}:\n{message}"
        );
    };
    expect(format!(
        "Tried to allocate {}.",
        pytorch_format_size(e.segment_request_bytes)
    ));
    let device_free = e.device_free_bytes.unwrap_or(0);
    expect(format!(
        "of which {} is free",
        pytorch_format_size(device_free)
    ));
    expect(format!(
        "{} is allocated by PyTorch",
        pytorch_format_size(e.allocated_bytes)
    ));
    expect(format!(
        "{} is reserved by PyTorch but unallocated",
        pytorch_format_size(e.reserved_unallocated_bytes)
    ));
    assert_eq!(e.rounded_request_bytes, 31 * MIB);
    assert_eq!(e.segment_request_bytes, 32 * MIB);
    assert_eq!(e.pool, PoolKind::Large);
    // A 4 GiB cap refused it with 135 GiB free, and the trace shows the live set growing by
    // 188 MiB an iteration, more than the 382 MiB cached: packing better would only postpone the
    // failure by two iterations, so the verdict is the cap (issue 10: the shortfall of one request
    // says nothing about what the job needs; this was "fragmentation" before the history counted).
    let verdict = judged(&travel, e);
    assert_eq!(verdict.category, Category::MemoryCap, "{verdict:?}");
    assert!(
        verdict.explanation.contains("per iteration"),
        "{}",
        verdict.explanation
    );
    // 382 MiB is cached free in all: 381 MiB in the large pool, 1 MiB in the small one.
    assert_eq!(e.usable_free_bytes, 381 * MIB);
    assert_eq!(e.wrong_pool.bytes, MIB);
    assert_eq!(e.usable_largest_free_bytes, 12 * MIB);
    assert_eq!(e.too_small.blocks, 53);
    assert_eq!(e.wrong_pool.blocks, 1);
    assert!(
        e.largest_free_blocks
            .iter()
            .all(|b| b.failure != FitFailure::WouldFit)
    );
    // The allocator freed a 12 MiB and a 2 MiB cached segment while retrying, just before.
    assert_eq!(e.released_before_oom_bytes, 14 * MIB);
    assert_eq!(e.releasable_bytes, 0);
    let text = e.facts_text();
    assert!(
        text.starts_with(
            "381 MiB cached free in the large pool on stream 0x0 for the 31.0 MiB request, the largest block 12.0 MiB"
        ),
        "{text}"
    );
    // The GPU had room: a cap is why the allocator could not reserve more.
    assert!(
        verdict.explanation.contains("per-process limit"),
        "{}",
        verdict.explanation
    );
}

#[test]
fn train_has_no_oom_and_mostly_releasable_cache() {
    let snapshot = read("train");
    let travel = TimeTravel::new(Arc::new(snapshot), 0);
    assert!(oom::explain_all(&travel).is_empty());
    let report = fragmentation::analyze(&travel.state_at(travel.len()));
    // After training, 3 small tensors remain; the 114 segments are cached: all but 4 split
    // blocks (97 MiB, PyTorch's inactive_split) sit in entirely free segments.
    let d = &report.device;
    assert_eq!(d.allocated_blocks, 3);
    assert_eq!(d.releasable_bytes + d.stranded_bytes, d.free_bytes);
    assert_eq!(d.stranded_bytes, d.inactive_split_bytes);
    assert!(d.releasable_bytes * 100 / d.reserved_bytes >= 98, "{d:?}");
    assert!(
        vramscope_core::diagnose::fragmentation::summarize(&report.device)
            .contains("most unused memory is in cached free segments"),
        "{}",
        vramscope_core::diagnose::fragmentation::summarize(&report.device)
    );
}

/// The diagnosis's verdict on an explained OOM: what the Allocator tab and `diagnose` show.
fn judged(travel: &TimeTravel, e: &OomExplanation) -> JudgedOom {
    let snapshot = travel.snapshot();
    judge_explanation(
        e,
        &snapshot.name,
        snapshot
            .settings
            .as_ref()
            .and_then(|s| s.expandable_segments),
        trajectory::of_trace(travel, Some(e.event_index)),
        vramscope_core::diagnose::proof::replay_trace(travel, travel.device()).ok(),
    )
}

/// The H200 diagnosis corpus (`tests/fixtures/cases`): six jobs with one cause each.
const CASES: [&str; 7] = [
    "other_process",
    "batch_too_large",
    "fragmentation",
    "memory_cap",
    "leak",
    "leak_step10",
    "healthy",
];

fn read_case(name: &str) -> (AllocatorSnapshot, serde_json::Value) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cases");
    let snapshot = pytorch::read_file(&dir.join(format!("{name}.pickle")), &|_| true)
        .unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join(format!("{name}.truth.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let truth = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (snapshot, truth)
}

#[test]
fn corpus_time_travel_is_exact_and_totals_equal_memory_stats() {
    for name in CASES {
        let (snapshot, truth) = read_case(name);
        let travel = TimeTravel::new(Arc::new(snapshot), 0);
        let check = travel.check();
        assert!(check.matches_final_state, "{name}: {check:?}");
        let mut rng = Rng::new(0xcafe);
        for _ in 0..10 {
            let position = rng.below(travel.len() as u64 + 1) as usize;
            assert_eq!(
                travel.state_at(position),
                travel.replay_forward(position),
                "{name} @ {position}"
            );
        }
        let d = fragmentation::analyze(&travel.state_at(travel.len())).device;
        assert_eq!(
            d.reserved_bytes,
            stat(&truth, "reserved_bytes.all.current"),
            "{name}"
        );
        assert_eq!(
            d.allocated_bytes,
            stat(&truth, "allocated_bytes.all.current"),
            "{name}"
        );
        assert_eq!(
            d.inactive_split_bytes,
            stat(&truth, "inactive_split_bytes.all.current"),
            "{name}"
        );
    }
}

#[test]
fn corpus_oom_explanations_agree_with_pytorchs_messages() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cases");
    for (name, verdict, process_limit) in [
        ("other_process", Category::Capacity, false),
        ("batch_too_large", Category::Capacity, false),
        ("fragmentation", Category::Fragmentation, false),
        ("memory_cap", Category::MemoryCap, true),
    ] {
        let (snapshot, _) = read_case(name);
        let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default();
        let message = log
            .lines()
            .find(|l| l.contains("OutOfMemoryError: CUDA out of memory"))
            .unwrap_or_else(|| panic!("{name}.log has no OOM message"));
        let travel = TimeTravel::new(Arc::new(snapshot), 0);
        // The last OOM is the one that was raised (earlier ones were caught by the job).
        let explanations = oom::explain_all(&travel);
        let e = explanations
            .last()
            .unwrap_or_else(|| panic!("{name}: no oom event"));
        let expect = |fragment: String| {
            assert!(
                message.contains(&fragment),
                "{name}: message lacks {fragment:?}:\n{message}"
            );
        };
        expect(format!(
            "Tried to allocate {}.",
            pytorch_format_size(e.segment_request_bytes)
        ));
        expect(format!(
            "of which {} is free",
            pytorch_format_size(e.device_free_bytes.unwrap_or(0))
        ));
        expect(format!(
            "{} is allocated by PyTorch",
            pytorch_format_size(e.allocated_bytes)
        ));
        expect(format!(
            "{} is reserved by PyTorch but unallocated",
            pytorch_format_size(e.reserved_unallocated_bytes)
        ));
        let judged = judged(&travel, e);
        assert_eq!(judged.category, verdict, "{name}: {judged:?}");
        assert_eq!(
            judged.explanation.contains("per-process"),
            process_limit,
            "{name}: {}",
            judged.explanation
        );
    }
}

/// The real H200 snapshots of `scripts/record_snapshots.sh` (several streams, expandable segments,
/// OOM, leak, `max_split_size`, CUDA graph / MemPool private pools, the C++ writer): on every
/// device, time travel reproduces the final state from the trace, and the state at any event
/// equals a fresh forward replay.
#[test]
fn time_travel_replays_the_recorded_h200_snapshots_exactly() {
    for name in [
        "streams",
        "streams.p2",
        "streams.p5",
        "expandable",
        "oom",
        "oom_after",
        "leak",
        "maxsplit",
        "graphs",
        "cpp",
    ] {
        let snapshot = Arc::new(read(name));
        for device in snapshot.devices.iter().map(|d| d.device) {
            let travel = TimeTravel::new(Arc::clone(&snapshot), device);
            let check = travel.check();
            assert!(
                check.matches_final_state,
                "{name} device {device}: {check:?}"
            );
            let mut rng = Rng::new(0xa11c);
            for _ in 0..20 {
                let position = rng.below(travel.len() as u64 + 1) as usize;
                assert_eq!(
                    travel.state_at(position),
                    travel.replay_forward(position),
                    "{name} device {device}: state after {position} events"
                );
            }
        }
    }
}
