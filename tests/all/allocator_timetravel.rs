//! Time travel: the state at event `i`, undone backwards from the final state through
//! checkpoints, equals the state an independent simulation had at `i` and a fresh forward replay.

use crate::support;

use std::sync::Arc;

use std::collections::HashMap;

use support::synthetic_allocator::{Rng, Simulation, StateShape};
use vramscope_core::analysis::timetravel::{AllocatorState, BlockStatus, TimeTravel};
use vramscope_core::model::allocator::TraceAction;

fn shape(state: &AllocatorState) -> StateShape {
    state
        .segments
        .iter()
        .map(|s| {
            let blocks = s
                .blocks
                .iter()
                .map(|b| {
                    let code = match b.status {
                        BlockStatus::Allocated => 0,
                        BlockStatus::PendingFree => 1,
                        BlockStatus::Free => 2,
                    };
                    (b.address, b.size_bytes, b.requested_bytes, code)
                })
                .collect();
            (s.address, s.size_bytes, s.stream, s.pool, blocks)
        })
        .collect()
}

/// Runs a simulation of `events` events and keeps its true state at about `samples` positions
/// chosen with a fixed seed.
fn simulate(seed: u64, events: usize, samples: usize) -> (Simulation, HashMap<usize, StateShape>) {
    let mut rng = Rng::new(seed);
    let mut pick = Rng::new(seed ^ 0x9e37_79b9);
    let mut truth = HashMap::new();
    let mut simulation = Simulation::new();
    truth.insert(0, simulation.shape());
    simulation.run(&mut rng, events, |sim| {
        if pick.below((events / samples) as u64) == 0 {
            truth.insert(sim.trace.len(), sim.shape());
        }
    });
    (simulation, truth)
}

#[test]
fn state_at_any_event_equals_the_simulated_truth_and_a_forward_replay() {
    let (simulation, truth) = simulate(7, 20_000, 60);
    let snapshot = simulation.snapshot();
    let travel = TimeTravel::new(Arc::new(snapshot), 0);
    assert_eq!(travel.len(), simulation.trace.len());
    let check = travel.check();
    assert!(check.matches_final_state, "{check:?}");
    assert_eq!((check.undo_mismatches, check.replay_stopped_at), (0, None));
    assert!(
        truth.len() > 20,
        "too few sampled positions: {}",
        truth.len()
    );
    // Several checkpoints, so most queries start from one in the middle.
    assert!(travel.len() / travel.checkpoint_interval() >= 3);
    for (&position, expected) in &truth {
        let state = travel.state_at(position);
        assert_eq!(&shape(&state), expected, "state after {position} events");
        assert_eq!(
            state,
            travel.replay_forward(position),
            "replay after {position} events"
        );
        let allocated: u64 = expected
            .iter()
            .flat_map(|s| &s.4)
            .filter(|b| b.3 == 0)
            .map(|b| b.1)
            .sum();
        assert_eq!(travel.allocated_series()[position], allocated);
        assert_eq!(
            travel.reserved_series()[position],
            expected.iter().map(|s| s.1).sum::<u64>()
        );
    }
    assert_eq!(shape(&travel.state_at(travel.len())), simulation.shape());
}

#[test]
fn start_state_of_a_truncated_trace_keeps_blocks_from_before_it() {
    // Drop the first half of the trace, as a wrapped ring buffer does: the start state must then
    // hold the blocks that already existed, and every later state must still be right.
    let (simulation, truth) = simulate(11, 6_000, 40);
    let mut snapshot = simulation.snapshot();
    let cut = 3_000;
    let trace = &mut snapshot.traces[0];
    trace.actions.drain(..cut);
    trace.addresses.drain(..cut);
    trace.sizes_bytes.drain(..cut);
    trace.streams.drain(..cut);
    trace.times_us.drain(..cut);
    trace.stacks.drain(..cut);
    trace.user_metadata.drain(..cut);
    trace.compile_context.drain(..cut);
    let travel = TimeTravel::new(Arc::new(snapshot), 0);
    assert_eq!(travel.check().undo_mismatches, 0, "{:?}", travel.check());
    let mut compared = 0;
    for (&position, expected) in &truth {
        if position < cut {
            continue;
        }
        // Blocks allocated before the cut cannot be resized exactly when freed later, so compare
        // what is certain: allocation status and totals.
        let state = travel.state_at(position - cut);
        let reserved: u64 = expected.iter().map(|s| s.1).sum();
        assert_eq!(
            state.reserved_bytes, reserved,
            "reserved after {position} events"
        );
        let segment_addresses: Vec<u64> = state.segments.iter().map(|s| s.address).collect();
        let expected_addresses: Vec<u64> = expected.iter().map(|s| s.0).collect();
        assert_eq!(segment_addresses, expected_addresses);
        compared += 1;
    }
    assert!(compared > 5);
}

#[test]
fn a_trace_that_does_not_replay_stops_the_replay_at_its_first_bad_event() {
    // An alloc in the middle points at an address the allocator never had: undoing it fails,
    // and the forward replay must stop at (or before) it, name it, and still leave a usable
    // time travel whose end is the snapshot's final state.
    let (simulation, _) = simulate(29, 4_000, 5);
    let mut snapshot = simulation.snapshot();
    let trace = &mut snapshot.traces[0];
    let bad = (2_000..trace.len())
        .find(|&i| trace.actions[i] == TraceAction::Alloc)
        .expect("the simulation allocates");
    trace.addresses[bad] = 0xdead_0000_0000;
    let travel = TimeTravel::new(Arc::new(snapshot), 0);
    let check = travel.check();
    assert!(!check.matches_final_state, "{check:?}");
    assert!(check.undo_mismatches >= 1, "{check:?}");
    let stopped = check.replay_stopped_at.expect("the replay stops");
    assert!(stopped <= bad, "stopped at {stopped}, bad event {bad}");
    let problem = check.first_problem.as_deref().unwrap_or_default();
    assert!(
        problem.contains(&format!("replaying event {stopped}")),
        "{problem}"
    );
    assert_eq!(shape(&travel.state_at(travel.len())), simulation.shape());
    assert_eq!(travel.allocated_series().len(), travel.len() + 1);
}

#[test]
fn a_snapshot_without_trace_has_only_its_final_state() {
    let (simulation, _) = simulate(3, 500, 5);
    let mut snapshot = simulation.snapshot();
    snapshot.traces.clear();
    snapshot.devices[0].trace = None;
    let travel = TimeTravel::new(Arc::new(snapshot), 0);
    assert!(travel.is_empty());
    assert_eq!(shape(&travel.state_at(0)), simulation.shape());
    assert_eq!(travel.allocated_series().len(), 1);
}

#[test]
fn moving_step_by_step_equals_jumping_from_checkpoints() {
    let (simulation, _) = simulate(19, 12_000, 10);
    let travel = TimeTravel::new(Arc::new(simulation.snapshot()), 0);
    let mut rng = Rng::new(23);
    let mut position = travel.len();
    let mut state = travel.state_at(position);
    for _ in 0..200 {
        // Mostly small scrubbing steps both ways, sometimes a long jump.
        let target = if rng.below(10) == 0 {
            rng.below(travel.len() as u64 + 1) as usize
        } else {
            let step = rng.below(300) as usize;
            if rng.below(2) == 0 {
                position.saturating_sub(step)
            } else {
                (position + step).min(travel.len())
            }
        };
        travel.move_state(&mut state, position, target);
        position = target;
        assert_eq!(
            state,
            travel.state_at(position),
            "after moving to {position}"
        );
    }
}

#[test]
fn series_extremes_match_a_scan_of_the_series() {
    let (simulation, _) = simulate(29, 5_000, 10);
    let travel = TimeTravel::new(Arc::new(simulation.snapshot()), 0);
    let allocated = travel.allocated_series();
    let reserved = travel.reserved_series();
    let mut rng = Rng::new(31);
    for _ in 0..300 {
        let a = rng.below(allocated.len() as u64) as usize;
        let b = rng.below(allocated.len() as u64) as usize;
        let (first, last) = (a.min(b), a.max(b));
        let extremes = travel.series_extremes(first, last);
        let range = first..=last;
        assert_eq!(
            extremes.allocated_min_bytes,
            allocated[range.clone()].iter().copied().min().unwrap_or(0)
        );
        assert_eq!(
            extremes.allocated_max_bytes,
            allocated[range.clone()].iter().copied().max().unwrap_or(0)
        );
        assert_eq!(
            extremes.reserved_max_bytes,
            reserved[range].iter().copied().max().unwrap_or(0)
        );
    }
}
