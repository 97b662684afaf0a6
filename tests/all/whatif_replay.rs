//! The what-if replay's self-check on every real H200 snapshot we have (recorded under the
//! default settings, expandable segments, a split limit, a cap, C++ pickling): replayed under its
//! own recorded settings, each must reproduce the real allocator exactly — or, where history is
//! incomplete, say so instead of pretending. Also: a trace that contradicts its state stops the
//! replay at the event and names it, and the state at a predicted point can be shown.

use std::path::PathBuf;
use std::sync::Arc;

use vramscope_core::analysis::replay::{
    AllocConf, ReplayStart, WhatIfRequest, replay_state_at, what_if, what_if_snapshot,
};
use vramscope_core::analysis::timetravel::TimeTravel;
use vramscope_core::formats::pytorch::read_file;
use vramscope_core::model::allocator::{AllocatorSnapshot, TraceAction};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn open(name: &str) -> Arc<AllocatorSnapshot> {
    Arc::new(read_file(&fixture(name), &|_| true).expect("snapshot"))
}

fn only_recorded() -> WhatIfRequest {
    WhatIfRequest {
        device: 0,
        candidates: vec![AllocConf::default_conf()],
        cap_bytes: None,
        device_memory_bytes: None,
    }
}

#[test]
fn every_real_snapshot_with_full_history_replays_exactly_under_its_own_settings() {
    for name in [
        "pytorch/train.pickle",
        "pytorch/frag_oom.pickle",
        "pytorch/expandable.pickle",
        "pytorch/maxsplit.pickle",
        "pytorch/oom.pickle",
        "pytorch/cpp.pickle",
    ] {
        let report = what_if_snapshot(open(name), &only_recorded(), &|_| true).expect(name);
        let check = &report.self_check;
        assert!(check.reliable, "{name}: {:?}", check.problem);
        assert!(check.final_state_matches, "{name}");
        assert_eq!(check.real_oom_events, check.replay_oom_events, "{name}");
    }
}

#[test]
fn the_recorded_oom_is_reproduced_at_its_event() {
    let snapshot = open("pytorch/frag_oom.pickle");
    let report =
        what_if_snapshot(Arc::clone(&snapshot), &only_recorded(), &|_| true).expect("report");
    let trace = &snapshot.traces[0];
    let real = trace
        .actions
        .iter()
        .position(|&a| a == TraceAction::Oom)
        .expect("frag_oom has an OOM event");
    assert_eq!(report.self_check.real_oom_events, vec![real]);
    let recorded = &report.recorded;
    assert_eq!(recorded.oom.map(|o| o.event_index), Some(real));
    // What PyTorch reported at that moment (frag_oom.truth.json, memory_stats at the OOM).
    let truth: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("pytorch/frag_oom.truth.json")).expect("truth"),
    )
    .expect("json");
    let stats = &truth["memory_stats"];
    assert_eq!(
        Some(recorded.peak_reserved_bytes),
        stats["reserved_bytes.all.peak"].as_u64()
    );
    assert_eq!(
        Some(recorded.peak_allocated_bytes),
        stats["allocated_bytes.all.peak"].as_u64()
    );
}

/// `cases/fragmentation.pickle` (H200): the job fills the card until an allocation fails, catches
/// that out-of-memory error twice and goes on; the third one, a 1.5 GiB request, is raised. A
/// setting that runs into the caught failures as the real run did goes on as the real run did:
/// only the failure the run ended with counts. (Stopping at the first caught one made every
/// setting "run out" at the card-filling loop, so no setting could ever be proven.)
#[test]
fn failures_the_program_caught_do_not_end_a_what_if() {
    let snapshot = open("cases/fragmentation.pickle");
    let trace = &snapshot.traces[0];
    let real: Vec<usize> = trace
        .actions
        .iter()
        .enumerate()
        .filter(|(_, a)| **a == TraceAction::Oom)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(real.len(), 3, "two caught OOMs and the fatal one");
    let request = WhatIfRequest {
        device: 0,
        candidates: vec![
            AllocConf::parse("expandable_segments:True").expect("conf"),
            AllocConf::parse("roundup_power2_divisions:4").expect("conf"),
        ],
        cap_bytes: None,
        device_memory_bytes: None,
    };
    let report = what_if_snapshot(Arc::clone(&snapshot), &request, &|_| true).expect("report");
    assert!(
        report.self_check.reliable,
        "{:?}",
        report.self_check.problem
    );
    let recorded = &report.recorded;
    assert_eq!(recorded.oom.map(|o| o.event_index), real.last().copied());
    assert_eq!(recorded.shared_caught_ooms, 2);
    let outcome = |conf: &str| {
        report
            .results
            .iter()
            .find(|r| r.conf == conf)
            .unwrap_or_else(|| panic!("{conf} not replayed"))
    };
    // Re-run on the H200 (tests/fixtures/cases2/frag_fill_card, the same allocation pattern):
    // expandable segments removed the failure, power-of-two rounding did not.
    let expandable = outcome("expandable_segments:True");
    assert!(expandable.runs(), "{expandable:?}");
    assert_eq!(expandable.shared_caught_ooms, 2);
    let roundup = outcome("roundup_power2_divisions:4");
    assert_eq!(roundup.oom.map(|o| o.event_index), real.last().copied());
}

/// `snapshot` as if its history had been a ring buffer that kept only the last `kept` events:
/// the segments are the same (the final state), the trace is its own last `kept` events.
fn wrapped(snapshot: &AllocatorSnapshot, kept: usize) -> AllocatorSnapshot {
    let mut snapshot = snapshot.clone();
    let trace = &mut snapshot.traces[0];
    let dropped = trace.len().saturating_sub(kept);
    trace.actions.drain(..dropped);
    trace.addresses.drain(..dropped);
    trace.sizes_bytes.drain(..dropped);
    trace.streams.drain(..dropped);
    trace.times_us.drain(..dropped);
    trace.stacks.drain(..dropped);
    trace.user_metadata.drain(..dropped);
    trace.compile_context.drain(..dropped);
    let shift = |index: u32| index.checked_sub(dropped as u32);
    trace.device_free_bytes = trace
        .device_free_bytes
        .iter()
        .filter_map(|&(i, v)| Some((shift(i)?, v)))
        .collect();
    trace.pool_ids = trace
        .pool_ids
        .iter()
        .filter_map(|&(i, v)| Some((shift(i)?, v)))
        .collect();
    snapshot
}

#[test]
fn a_wrapped_ring_buffer_starts_from_the_reconstructed_state_and_says_so() {
    // The training snapshot cut to its last third: the replay cannot start from an empty
    // allocator, it starts from the state time travel reconstructs at the first kept event.
    let full = open("pytorch/train.pickle");
    let kept = full.traces[0].len() / 3;
    let report = what_if_snapshot(Arc::new(wrapped(&full, kept)), &only_recorded(), &|_| true)
        .expect("report");
    assert!(
        matches!(report.self_check.start, ReplayStart::Seeded { segments, exact: true } if segments > 0),
        "{:?}",
        report.self_check.start
    );
    // Seeded from the reconstruction, the replay still ends in the snapshot's own state.
    assert!(report.self_check.reliable, "{:?}", report.self_check);
    assert!(report.self_check.final_state_matches);
    let text = vramscope_core::report::whatif::self_check_line(&report.self_check);
    assert!(text.contains("ring buffer wrapped"), "{text}");
}

#[test]
fn a_trace_that_contradicts_its_state_stops_there_and_is_unreliable() {
    let mut snapshot = (*open("pytorch/train.pickle")).clone();
    let trace = &mut snapshot.traces[0];
    // Move one allocation: its later free then names an address nobody holds.
    let alloc = trace
        .actions
        .iter()
        .position(|&a| a == TraceAction::Alloc)
        .expect("an alloc");
    let moved = trace.addresses[alloc];
    trace.addresses[alloc] = moved + 0x1000_0000_0000;
    let free = trace
        .actions
        .iter()
        .zip(&trace.addresses)
        .position(|(&a, &addr)| a == TraceAction::FreeRequested && addr == moved)
        .expect("its free");
    let contradicted = Arc::new(snapshot);
    let report =
        what_if_snapshot(Arc::clone(&contradicted), &only_recorded(), &|_| true).expect("report");
    assert!(!report.self_check.reliable);
    let problem = report.self_check.problem.clone().unwrap_or_default();
    assert!(problem.contains(&format!("event {alloc}")), "{problem}");
    // Every what-if run stops where time travel found the trace and the state disagreeing,
    // marked incomplete, instead of printing numbers that rest on a state that never existed.
    let travel = TimeTravel::new(Arc::clone(&contradicted), 0);
    let stopped_at = travel.check().replay_stopped_at.expect("time travel stops");
    assert!(stopped_at <= free, "{stopped_at} > {free}");
    for outcome in std::iter::once(&report.recorded).chain(&report.results) {
        let incomplete = outcome
            .incomplete
            .clone()
            .unwrap_or_else(|| panic!("{} is not marked incomplete", outcome.conf));
        assert_eq!(incomplete.event_index, stopped_at);
        assert!(outcome.events_replayed <= stopped_at);
    }
    let json = vramscope_core::report::whatif::to_json(&report, &open("pytorch/train.pickle"));
    assert!(json.contains("\"reliable\": false"), "{json}");
}

#[test]
fn the_state_at_the_end_under_the_recorded_settings_is_the_snapshots() {
    let snapshot = open("pytorch/expandable.pickle");
    let travel = TimeTravel::new(Arc::clone(&snapshot), 0);
    let report = what_if(&travel, &only_recorded(), &|_| true).expect("report");
    let recorded = AllocConf::recorded(snapshot.settings.as_ref());
    let state = replay_state_at(&travel, &recorded, &report.limits, travel.len()).expect("state");
    let real = travel.state_at(travel.len());
    assert_eq!(state.reserved_bytes, real.reserved_bytes);
    assert_eq!(state.allocated_bytes, real.allocated_bytes);
    assert_eq!(state.segments.len(), real.segments.len());
}

#[test]
fn progress_reaches_the_end_and_cancelling_stops_the_replay() {
    let snapshot = open("pytorch/train.pickle");
    let seen = std::sync::Mutex::new(Vec::new());
    let report = what_if_snapshot(Arc::clone(&snapshot), &only_recorded(), &|f| {
        seen.lock().expect("lock").push(f);
        true
    });
    assert!(report.is_ok());
    let seen = seen.into_inner().expect("lock");
    assert_eq!(seen.last().copied(), Some(1.0));
    assert!(seen.windows(2).all(|w| w[0] <= w[1] + 1e-6), "{seen:?}");
    let cancelled = what_if_snapshot(snapshot, &only_recorded(), &|_| false);
    assert_eq!(
        cancelled.err(),
        Some(vramscope_core::analysis::replay::ReplayError::Cancelled)
    );
}

#[test]
fn a_new_segment_gets_the_address_the_real_run_gave_its_nth_segment_of_that_size() {
    // Made by scripts/whatif/make_rule_fixtures.py: under the default settings a 36 MiB segment
    // at a high address is split for a 30 MiB request, then two 30 MiB requests get segments at
    // low addresses. Under max_split_size_mb:32 the first 30 MiB request needs a segment of its
    // own, two requests earlier than the real run made its first 30 MiB segment: the driver,
    // asked for the same sizes in the same order, hands out the same addresses.
    let snapshot = open("whatif/rules/driver_address_sequence.pickle");
    let travel = TimeTravel::new(Arc::clone(&snapshot), 0);
    let report = what_if(&travel, &only_recorded(), &|_| true).expect("report");
    assert!(
        report.self_check.reliable,
        "{:?}",
        report.self_check.problem
    );
    let split_limit = AllocConf::parse("max_split_size_mb:32").expect("setting");
    let low_segments = |stop_at: usize| -> Vec<(u64, u64)> {
        let state = replay_state_at(&travel, &split_limit, &report.limits, stop_at).expect("state");
        state
            .segments
            .iter()
            .filter(|s| s.size_bytes == 30 << 20)
            .map(|s| (s.address, s.size_bytes))
            .collect()
    };
    // After the first 30 MiB request (event 4): its segment is the real run's first 30 MiB one.
    assert_eq!(low_segments(5), vec![(0x7E00_0000_0000, 30 << 20)]);
    // The next one takes the real run's second; the third has no recorded address left and
    // gets fresh address space where the driver puts most: below every live segment.
    let end = low_segments(travel.len());
    assert_eq!(end.len(), 3, "{end:x?}");
    assert_eq!(end[0], (0x7E00_0000_0000 - (30 << 20), 30 << 20));
    assert_eq!(end[1], (0x7E00_0000_0000, 30 << 20));
    assert_eq!(end[2], (0x7E00_0400_0000, 30 << 20));
}

/// A trace recorded with C++ frames (`stacks="all"`, the default of
/// `torch.cuda.memory._record_memory_history()`): a cuDNN workspace that does not fit is one
/// PyTorch retries with less, so the setting runs and says why; and a failure's stack is told by
/// the code that asked, not by the recorder's or the allocator's own frames, which every C++
/// stack starts with.
#[test]
fn a_trace_with_cpp_frames_tells_caught_workspaces_and_who_asked() {
    let snapshot = open("whatif/heldout2/unet_segment.pickle");
    let request = |conf: &str| WhatIfRequest {
        device: 0,
        candidates: vec![AllocConf::parse(conf).expect("setting")],
        cap_bytes: Some(1_483_735_040),
        device_memory_bytes: None,
    };
    let report =
        what_if_snapshot(Arc::clone(&snapshot), &request("default"), &|_| true).expect("report");
    let outcome = &report.recorded;
    assert!(outcome.scratch_oom_caught && outcome.runs(), "{outcome:?}");
    let words = vramscope_core::report::whatif::outcome_words(outcome, &report);
    assert!(
        words.starts_with("runs") && words.contains("cuDNN convolution workspace"),
        "{words}"
    );
    let report = what_if_snapshot(
        Arc::clone(&snapshot),
        &request("roundup_power2_divisions:4"),
        &|_| true,
    )
    .expect("report");
    // Under power-of-two rounding a workspace does not fit either (the real run recorded 39
    // such failures and finished): its stack is told by the convolution that asked.
    let outcome = &report.results[0];
    assert!(outcome.runs(), "{outcome:?}");
    let failed = outcome.scratch_oom.expect("a workspace that did not fit");
    let frame =
        vramscope_core::report::whatif::telling_frame(&snapshot, failed.stack).expect("a frame");
    assert!(
        frame.contains("at::native::") && !frame.contains("unwind"),
        "{frame}"
    );
}
