//! The Allocator tab's "What if…" panel driven through egui_kittest like a user would: type a
//! setting, replay, ask to see its peak or failure, and the replay's own block map appears
//! beside the recorded one, labelled with the setting and the moment, showing the replay's
//! state there (its reserved bytes are the replay's, not the recorded run's). A snapshot image
//! of the two maps side by side.
//!
//! Data is the real `frag_oom` fixture. Snapshot images are generated with `UPDATE_SNAPSHOTS=1`
//! on the CI machine class (Mesa lavapipe).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use egui::Vec2;
use egui::accesskit::Role;
use egui_kittest::kittest::Queryable;
use egui_kittest::{Harness, SnapshotOptions};

use vramscope_app::allocator::AllocatorView;
use vramscope_core::analysis::replay::{AllocConf, WhatIfRequest, replay_state_at, what_if};
use vramscope_core::analysis::timetravel::TimeTravel;
use vramscope_core::formats::pytorch;
use vramscope_core::model::allocator::AllocatorSnapshot;
use vramscope_core::model::format_bytes;

use crate::support::ui::frag_oom;

const SETTING: &str = "expandable_segments:True";

/// Steps the harness until `done` holds (background jobs finish between frames).
fn step_until(
    harness: &mut Harness<'static, AllocatorView>,
    what: &str,
    done: impl Fn(&Harness<'static, AllocatorView>) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    harness.step();
    while !done(harness) {
        assert!(Instant::now() < deadline, "{what} did not happen");
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
    harness.run_steps(3);
}

/// The Allocator view of `snapshot` with `setting` typed into the What if… panel and
/// replayed, once a `button` ("Show peak" or "Show failure") appeared.
fn replayed_in_the_panel(
    snapshot: &Arc<AllocatorSnapshot>,
    name: &str,
    setting: &str,
    button: &str,
) -> Harness<'static, AllocatorView> {
    let view = AllocatorView::new(Arc::clone(snapshot), name.to_string());
    let mut harness = Harness::builder()
        .with_size(Vec2::new(1600.0, 900.0))
        .wgpu()
        .build_ui_state(|ui, view: &mut AllocatorView| view.ui(ui), view);
    step_until(&mut harness, "the analysis", |h| h.state().is_ready());
    harness.get_by_label("What if…").click();
    harness.run_steps(2);
    let settings = harness.get_by_role(Role::MultilineTextInput);
    settings.focus();
    settings.type_text(setting);
    harness.run_steps(1);
    harness.get_by_label("Replay").click();
    step_until(&mut harness, "the replay", |h| {
        h.query_all_by_label(button).count() > 0
    });
    harness
}

#[test]
fn showing_a_settings_peak_draws_the_replayed_block_map_beside_the_recorded_one() {
    let snapshot = frag_oom();
    // What the replay predicts for the setting, straight from the engine.
    let travel = TimeTravel::new(Arc::clone(&snapshot), 0);
    let conf = AllocConf::parse(SETTING).unwrap_or_else(|e| panic!("{e}"));
    let request = WhatIfRequest {
        device: 0,
        candidates: vec![conf.clone()],
        cap_bytes: None,
        device_memory_bytes: None,
    };
    let report = what_if(&travel, &request, &|_| true).unwrap_or_else(|e| panic!("{e}"));
    let outcome = report
        .results
        .iter()
        .find(|o| o.conf == SETTING)
        .unwrap_or_else(|| panic!("no result for {SETTING}"));
    let (button, events_applied) = match outcome.oom {
        Some(oom) => ("Show failure", oom.event_index),
        None => ("Show peak", outcome.peak_event + 1),
    };
    let expected = replay_state_at(&travel, &conf, &report.limits, events_applied)
        .unwrap_or_else(|e| panic!("{e}"));
    let recorded_at_moment = travel.state_at(events_applied);
    assert_ne!(
        expected.reserved_bytes, recorded_at_moment.reserved_bytes,
        "the fixture must tell the replayed state from the recorded one"
    );

    let mut harness = replayed_in_the_panel(&snapshot, "frag_oom.pickle", SETTING, button);
    // Nothing is compared before the user asks.
    assert!(harness.query_by_label("Replayed block map").is_none());
    // The rows are the recorded run, then the setting: its button is the last one.
    let buttons: Vec<_> = harness.query_all_by_label(button).collect();
    buttons
        .last()
        .unwrap_or_else(|| panic!("no {button} button"))
        .click();
    step_until(&mut harness, "the replayed block map", |h| {
        h.query_by_label("Replayed block map").is_some()
    });

    assert_eq!(harness.state().position(), Some(events_applied));
    assert!(harness.query_by_label("Block map").is_some());
    assert!(
        harness
            .query_by_label_contains(&format!(
                "Recorded run · after {events_applied} of {} events",
                travel.len()
            ))
            .is_some()
    );
    assert!(
        harness
            .query_by_label_contains(&format!(
                "Replayed under {SETTING} · after {events_applied} events"
            ))
            .is_some()
    );
    assert!(
        harness
            .query_by_label_contains(&format!(
                "prediction: {} reserved, {} allocated, {} segments",
                format_bytes(expected.reserved_bytes),
                format_bytes(expected.allocated_bytes),
                expected.segments.len()
            ))
            .is_some(),
        "the replayed map shows the replay's state at the moment"
    );
    // The side panel stays beside the maps: the What-if tab (the panel's right end) and the
    // replayed map's heading do not overlap, whatever the length of the outcome sentences.
    let heading = harness
        .get_by_label_contains(&format!("Replayed under {SETTING}"))
        .rect();
    let panel_left = harness.get_by_label("Fragmentation").rect().left();
    assert!(
        heading.right() <= panel_left,
        "the replayed map's heading ({heading:?}) runs under the side panel (from x = {panel_left})"
    );
    harness.snapshot_options(
        "allocator_whatif_side_by_side",
        &SnapshotOptions::new().threshold(1.0).max_failed_pixels(40),
    );

    // Close goes back to the recorded map alone.
    harness.get_by_label("Close").click();
    harness.run_steps(2);
    assert!(harness.query_by_label("Replayed block map").is_none());
    assert!(harness.query_by_label("Block map").is_some());
}

#[test]
fn a_peak_that_depends_on_gpu_timing_shows_its_range_in_the_panel() {
    // A real two-stream trace (H200) whose frees wait for the other stream's work.
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/whatif/two_streams.pickle");
    let snapshot = Arc::new(pytorch::read_file(&path, &|_| true).unwrap_or_else(|e| panic!("{e}")));
    let travel = TimeTravel::new(Arc::clone(&snapshot), 0);
    let request = WhatIfRequest {
        device: 0,
        candidates: vec![AllocConf::default_conf()],
        cap_bytes: None,
        device_memory_bytes: None,
    };
    let report = what_if(&travel, &request, &|_| true).unwrap_or_else(|e| panic!("{e}"));
    let (low, high) = report.results[0]
        .peak_reserved_range_bytes
        .unwrap_or_else(|| panic!("a range"));
    let harness = replayed_in_the_panel(&snapshot, "two_streams.pickle", "default", "Show peak");
    let range = format!("({} – {})", format_bytes(low), format_bytes(high));
    assert!(
        harness.query_all_by_label_contains(&range).count() > 0,
        "the peak column shows {range}"
    );
    assert!(
        harness
            .query_all_by_label_contains("depending on when the GPU finishes other streams' work")
            .count()
            > 0
    );
}
