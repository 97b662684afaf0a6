//! Per-frame cost of the allocator view on a trace of 3 million events.
//!
//! A synthetic caching-allocator workload (the same simulation the tests check time travel
//! against) writes the trace; the benchmark then times what a frame does:
//!
//! - a still frame: the visible block rectangles (`visible_rects`) of a 1600×1000 map,
//! - a jump frame: `state_at` a random event, the new layout, the fragmentation report and the
//!   visible rectangles,
//! - a drag frame: the same after moving up to 400 events from the previous frame's state,
//! - once per width: the timeline's min/max columns,
//!
//! plus the one-off analysis (`TimeTravel::new`). Each sample is the fastest of three runs (the
//! drag frame includes cloning the previous state). Run: `cargo bench --bench blockmap`
//! (`BLOCKMAP_EVENTS=N` changes the trace length). Under `cargo test` (no `--bench` argument)
//! it runs once on 20,000 events as a smoke test.
#![allow(
    clippy::unwrap_used,
    clippy::too_many_lines,
    reason = "test and bench code: a panic is the failure report, and a test reads best as one story"
)]

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/synthetic_allocator.rs"]
#[allow(
    dead_code,
    reason = "the tests use more of this shared module than the bench"
)]
mod synthetic_allocator;

use std::time::{Duration, Instant};

use egui::{Pos2, Rect, vec2};
use synthetic_allocator::{Rng, Simulation};
use vramscope_app::allocator::block_map::{BlockMapLayout, MapView, visible_rects};
use vramscope_app::allocator::timeline::TimelineColumns;
use vramscope_core::analysis::fragmentation;
use vramscope_core::analysis::timetravel::TimeTravel;

/// Times `work` three times and keeps the fastest run: on a shared machine a single run can be
/// preempted for tens of milliseconds, which measures the scheduler, not the frame.
fn fastest_of_3(work: impl FnMut()) -> Duration {
    common::time_runs(3, work).0.min()
}

fn report(name: &str, samples: Vec<Duration>) {
    let samples = common::Samples::from_durations(samples);
    println!(
        "{name:<44} median {:>9.3} ms   p99 {:>9.3} ms   max {:>9.3} ms   ({} runs)",
        common::ms(samples.median()),
        common::ms(samples.percentile(0.99)),
        common::ms(samples.max()),
        samples.len()
    );
}

fn main() {
    // `cargo bench` passes `--bench`; under `cargo test --all-targets` this runs once on a short
    // trace as a smoke test.
    let benchmarking = common::measuring();
    let default_events = if benchmarking { 3_000_000 } else { 20_000 };
    let events: usize = std::env::var("BLOCKMAP_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_events);
    let started = Instant::now();
    let mut simulation = Simulation::new();
    simulation.run(&mut Rng::new(42), events, |_| {});
    let snapshot = std::sync::Arc::new(simulation.snapshot());
    println!(
        "synthetic trace: {} events, final state {} segments / {} blocks (simulated in {:.1} s)",
        simulation.trace.len(),
        snapshot.segments.len(),
        snapshot.blocks.len(),
        started.elapsed().as_secs_f64()
    );

    let started = Instant::now();
    let travel = TimeTravel::new(std::sync::Arc::clone(&snapshot), 0);
    println!(
        "TimeTravel::new (undo pass + forward replay, checkpoints every {} events): {:.2} s, exact replay: {}",
        travel.checkpoint_interval(),
        started.elapsed().as_secs_f64(),
        travel.check().matches_final_state
    );

    let area = Rect::from_min_size(Pos2::ZERO, vec2(1600.0, 1000.0));
    let mut rng = Rng::new(7);
    let mut rects = Vec::new();

    // A still frame at a busy moment (the middle of the trace), zoomed out and zoomed in.
    let state = travel.state_at(travel.len() / 2);
    let layout = BlockMapLayout::new(&state);
    for (name, zoom) in [
        ("still frame: visible_rects, zoom 1", 1.0),
        ("still frame: visible_rects, zoom 64", 64.0),
    ] {
        let mut view = MapView {
            zoom,
            ..MapView::default()
        };
        view.clamp(&layout, area);
        let samples = (0..500)
            .map(|_| fastest_of_3(|| visible_rects(&layout, &state, &view, area, &mut rects)))
            .collect();
        report(name, samples);
    }

    // Jumping: every frame shows another random event.
    let mut state_at = Vec::new();
    let mut frame = Vec::new();
    for _ in 0..300 {
        let position = rng.below(travel.len() as u64 + 1) as usize;
        state_at.push(fastest_of_3(|| {
            std::hint::black_box(travel.state_at(position));
        }));
        frame.push(fastest_of_3(|| {
            let state = travel.state_at(position);
            let layout = BlockMapLayout::new(&state);
            let report = fragmentation::analyze(&state);
            let mut view = MapView::default();
            view.clamp(&layout, area);
            visible_rects(&layout, &state, &view, area, &mut rects);
            std::hint::black_box(&report);
        }));
    }
    report("jump: state_at(random event)", state_at);
    report("jump frame: state_at+layout+report+rects", frame);

    // Dragging the slider: each frame moves up to a few hundred events from the last one.
    let mut position = travel.len() / 2;
    let mut state = travel.state_at(position);
    let mut frame = Vec::new();
    for _ in 0..1000 {
        let step = rng.below(400) as usize;
        let target = if rng.below(2) == 0 {
            position.saturating_sub(step)
        } else {
            (position + step).min(travel.len())
        };
        frame.push(fastest_of_3(|| {
            let mut moved = state.clone();
            travel.move_state(&mut moved, position, target);
            let layout = BlockMapLayout::new(&moved);
            let report = fragmentation::analyze(&moved);
            let mut view = MapView::default();
            view.clamp(&layout, area);
            visible_rects(&layout, &moved, &view, area, &mut rects);
            std::hint::black_box(&report);
        }));
        travel.move_state(&mut state, position, target);
        position = target;
    }
    report(
        "drag frame: move_state(<=400 ev)+layout+report+rects",
        frame,
    );

    let samples = (0..20)
        .map(|_| {
            fastest_of_3(|| {
                std::hint::black_box(TimelineColumns::new(&travel, 1600));
            })
        })
        .collect();
    report("timeline columns (per width change), 1600", samples);
}
