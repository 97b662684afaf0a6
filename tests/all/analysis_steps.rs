//! The analyses the web viewer runs in steps (stopping at a deadline after every few thousand
//! events) give exactly what the one-go analyses give, on every path through the time-travel
//! passes: an exact replay, a replay that stops at a bad event, a trace that lost its first
//! events, a trace without events, and the real fixtures.

use crate::support;

use std::path::Path;
use std::sync::Arc;

use support::synthetic_allocator::{Rng, Simulation};
use vramscope_core::analysis::deadline::{Deadline, Step};
use vramscope_core::analysis::snapshot_analysis::{SnapshotAnalysisBuild, analyze};
use vramscope_core::analysis::timetravel::{TimeTravel, TimeTravelBuild};
use vramscope_core::formats::pytorch;
use vramscope_core::model::allocator::{AllocatorSnapshot, TraceAction};

fn simulated(seed: u64, events: usize) -> AllocatorSnapshot {
    let mut rng = Rng::new(seed);
    let mut simulation = Simulation::new();
    simulation.run(&mut rng, events, |_| {});
    simulation.snapshot()
}

fn fixture(name: &str) -> AllocatorSnapshot {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pytorch")
        .join(name);
    pytorch::read_file(&path, &|_| true).unwrap_or_else(|e| panic!("{e}"))
}

/// A deadline that has always passed: every step does the least work it can.
fn passed() -> Deadline {
    Deadline::after(std::time::Duration::ZERO)
}

/// Builds `device`'s time travel one smallest step at a time; also returns the number of steps.
fn stepped(snapshot: &Arc<AllocatorSnapshot>, device: u32) -> (TimeTravel, usize) {
    let mut build = TimeTravelBuild::new(Arc::clone(snapshot), device);
    let mut steps = 1;
    loop {
        match build.run(passed()) {
            Step::Done(travel) => return (travel, steps),
            Step::Pending(more) => build = more,
        }
        steps += 1;
        assert!(steps < 100_000, "the build makes no progress");
    }
}

fn assert_same(stepped: &TimeTravel, whole: &TimeTravel, what: &str) {
    assert_eq!(stepped.len(), whole.len(), "{what}");
    assert_eq!(stepped.check(), whole.check(), "{what}");
    assert_eq!(
        stepped.allocated_series(),
        whole.allocated_series(),
        "{what}"
    );
    assert_eq!(stepped.reserved_series(), whole.reserved_series(), "{what}");
    assert_eq!(
        stepped.checkpoint_interval(),
        whole.checkpoint_interval(),
        "{what}"
    );
    assert_eq!(
        stepped.times_are_monotonic(),
        whole.times_are_monotonic(),
        "{what}"
    );
    let len = whole.len();
    let last = len.saturating_sub(1);
    assert_eq!(
        stepped.series_extremes(0, last),
        whole.series_extremes(0, last),
        "{what}"
    );
    for position in [0, len / 3, len / 2, len.saturating_sub(7), len] {
        assert_eq!(
            stepped.state_at(position),
            whole.state_at(position),
            "{what}: state after {position} events"
        );
    }
}

fn check_every_device(snapshot: AllocatorSnapshot, what: &str) -> usize {
    let snapshot = Arc::new(snapshot);
    let mut most_steps = 0;
    for device in vramscope_core::analysis::snapshot_analysis::snapshot_devices(&snapshot) {
        let (travel, steps) = stepped(&snapshot, device);
        assert_same(
            &travel,
            &TimeTravel::new(Arc::clone(&snapshot), device),
            &format!("{what}, device {device}"),
        );
        most_steps = most_steps.max(steps);
    }
    most_steps
}

#[test]
fn an_exact_replay_built_in_steps_equals_the_one_built_at_once() {
    let snapshot = simulated(5, 60_000);
    let steps = check_every_device(snapshot, "exact replay");
    // 60,000 events in steps of 16,384 events, over several passes.
    assert!(steps >= 8, "only {steps} steps");
}

#[test]
fn a_replay_that_stops_built_in_steps_equals_the_one_built_at_once() {
    let mut snapshot = simulated(29, 40_000);
    let trace = &mut snapshot.traces[0];
    let bad = (20_000..trace.len())
        .find(|&i| trace.actions[i] == TraceAction::Alloc)
        .expect("the simulation allocates");
    trace.addresses[bad] = 0xdead_0000_0000;
    check_every_device(snapshot, "replay stopped at a bad alloc");
}

#[test]
fn a_trace_that_lost_its_first_events_built_in_steps_equals_the_one_built_at_once() {
    let mut snapshot = simulated(11, 40_000);
    let trace = &mut snapshot.traces[0];
    let cut = 12_345;
    trace.actions.drain(..cut);
    trace.addresses.drain(..cut);
    trace.sizes_bytes.drain(..cut);
    trace.streams.drain(..cut);
    trace.times_us.drain(..cut);
    trace.stacks.drain(..cut);
    trace.user_metadata.drain(..cut);
    trace.compile_context.drain(..cut);
    check_every_device(snapshot, "trace without its first events");
}

#[test]
fn a_device_without_trace_built_in_steps_equals_the_one_built_at_once() {
    let mut snapshot = simulated(3, 500);
    snapshot.traces.clear();
    snapshot.devices[0].trace = None;
    check_every_device(snapshot, "no trace");
}

#[test]
fn real_snapshots_built_in_steps_equal_those_built_at_once() {
    for name in [
        "train.pickle",
        "frag_oom.pickle",
        "oom.pickle",
        "expandable.pickle",
        "streams.pickle",
    ] {
        check_every_device(fixture(name), name);
    }
}

#[test]
fn the_snapshot_analysis_in_steps_equals_the_analysis_at_once() {
    for name in ["frag_oom.pickle", "oom_after.pickle", "streams.pickle"] {
        let snapshot = Arc::new(fixture(name));
        let whole = analyze(&snapshot);
        let mut build = SnapshotAnalysisBuild::new(Arc::clone(&snapshot));
        let in_steps = loop {
            match build.run(passed()) {
                Step::Done(analysis) => break analysis,
                Step::Pending(more) => build = more,
            }
        };
        assert_eq!(in_steps.len(), whole.len(), "{name}");
        for (a, b) in in_steps.iter().zip(&whole) {
            assert_eq!(a.travel.device(), b.travel.device(), "{name}");
            assert_eq!(a.ooms, b.ooms, "{name}");
            assert_eq!(a.travel.check(), b.travel.check(), "{name}");
        }
        assert!(
            whole.iter().any(|d| !d.ooms.is_empty()) || name == "streams.pickle",
            "{name} has OOM events to explain"
        );
    }
}
