//! The allocator view driven through egui_kittest like a user would: hovering a block shows its
//! allocation stack, search finds blocks by frame text and by address, clicking the timeline
//! moves the block map in time, and a snapshot image of the whole view.
//!
//! Data is the real `frag_oom` fixture. Snapshot images are generated with `UPDATE_SNAPSHOTS=1`
//! on the CI machine class (Mesa lavapipe).

use egui::{Key, Rect, Vec2};
use egui_kittest::kittest::Queryable;
use egui_kittest::{Harness, SnapshotOptions};

use vramscope_app::allocator::AllocatorView;
use vramscope_core::model::allocator::BlockState;

use crate::support::ui::{allocator_view_harness, frag_oom_view_harness};

/// A 1280×800 harness showing `frag_oom`, stepped until the background analysis is done.
fn harness() -> Harness<'static, AllocatorView> {
    frag_oom_view_harness(Vec2::new(1280.0, 800.0))
}

/// The widest allocated block that is fully visible in the block map.
fn widest_visible_allocated_block(harness: &Harness<'static, AllocatorView>) -> (u64, Rect) {
    let view = harness.state();
    let map = view
        .block_map_rect()
        .unwrap_or_else(|| panic!("no block map drawn"));
    view.snapshot()
        .blocks
        .iter()
        .filter(|b| b.state == BlockState::ActiveAllocated)
        .filter_map(|b| Some((b.address, view.block_screen_rect(b.address)?)))
        .filter(|(_, rect)| map.contains_rect(*rect))
        .max_by(|a, b| a.1.width().total_cmp(&b.1.width()))
        .unwrap_or_else(|| panic!("no allocated block is visible"))
}

/// lavapipe JIT-compiles shaders for the host CPU: a small, non-zero tolerance.
fn snapshot_options() -> SnapshotOptions {
    SnapshotOptions::new().threshold(1.0).max_failed_pixels(40)
}

#[test]
fn hovering_a_block_shows_its_size_state_and_filtered_stack() {
    let mut harness = harness();
    let (address, rect) = widest_visible_allocated_block(&harness);
    harness.hover_at(rect.center());
    // Tooltips wait for the pointer to rest (egui's tooltip_delay, 0.5 s = 2 steps).
    harness.run_steps(8);
    assert!(
        harness
            .query_by_label(&format!("Block {address:#x}"))
            .is_some()
    );
    assert!(harness.query_by_label("state allocated").is_some());
    // The user's frame is shown; the unwinder and interpreter frames are filtered out.
    assert!(
        harness
            .query_by_label_contains("train_fixture.py:")
            .is_some()
    );
    assert!(harness.query_by_label_contains("unwind::unwind").is_none());
    assert!(
        harness
            .query_by_label_contains("_PyEval_EvalFrameDefault")
            .is_none()
    );
    harness.snapshot_options("allocator_view_hover", &snapshot_options());
}

#[test]
fn clicking_a_block_pins_it() {
    let mut harness = harness();
    let (address, rect) = widest_visible_allocated_block(&harness);
    harness.hover_at(rect.center());
    harness.run_steps(1);
    harness.get_by_label("Block map").click();
    harness.run_steps(2);
    // The node click lands in the map's centre; any block there is pinned, and the side panel
    // switched to it.
    let pinned = harness.state().pinned_address();
    assert!(pinned.is_some(), "nothing pinned (hovered {address:#x})");
    assert!(
        harness
            .query_by_label(&format!("Block {:#x}", pinned.unwrap_or(0)))
            .is_some()
    );
}

#[test]
fn search_finds_blocks_by_frame_text_and_by_address() {
    let mut harness = harness();
    harness.get_by_label("Find:").focus();
    harness.get_by_label("Find:").type_text("train_fixture");
    harness.key_press(Key::Enter);
    harness.run_steps(3);
    // Every live allocation of frag_oom was made at train_fixture.py (194 blocks).
    assert!(
        harness
            .query_by_label("194 blocks allocated from frames matching \"train_fixture\"")
            .is_some()
    );
    assert!(harness.state().pinned_address().is_some());

    // Pick a free block's inner address: the search names the block that holds it.
    let snapshot = harness.state().snapshot().clone();
    let free = snapshot
        .blocks
        .iter()
        .find(|b| b.state == BlockState::Inactive && b.size_bytes > 4096)
        .unwrap_or_else(|| panic!("frag_oom has free blocks"));
    let inner = free.address + 1000;
    let field = harness.get_by_label("Find:");
    field.focus();
    harness.key_press_modifiers(egui::Modifiers::COMMAND, Key::A);
    harness
        .get_by_label("Find:")
        .type_text(&format!("{inner:#x}"));
    harness.key_press(Key::Enter);
    harness.run_steps(3);
    assert_eq!(harness.state().pinned_address(), Some(free.address));
    assert!(
        harness
            .query_by_label_contains(&format!("is in block {:#x}", free.address))
            .is_some()
    );
}

#[test]
fn clicking_the_timeline_moves_the_block_map_in_time() {
    let mut harness = harness();
    let end = harness.state().position().unwrap_or(0);
    assert!(end > 1000, "frag_oom has {end} events");
    harness
        .get_by_label("Allocated vs reserved timeline")
        .click();
    harness.run_steps(3);
    let moved = harness.state().position().unwrap_or(end);
    assert!(
        moved > 0 && moved < end,
        "position after the click: {moved} of {end}"
    );
    // The slider follows.
    assert!(harness.query_by_value(&moved.to_string()).is_some());
}

#[test]
fn allocator_view_snapshot() {
    let mut harness = harness();
    harness.snapshot_options("allocator_view_frag_oom", &snapshot_options());
}

/// The OOM explainer of a real job that ran out inside Adam's foreach step
/// (`tests/fixtures/run/hook_oom/`): under the last failure's verdict, a bar per category of the
/// live memory at the failure, with its bytes and share, and what the failing request was for;
/// and a snapshot image of it.
#[test]
fn the_oom_explainer_shows_where_the_memory_went() {
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::time::Duration;
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/run/hook_oom/snapshots/rank3-pid668-oom-1.pickle");
    let snapshot = Arc::new(
        vramscope_core::formats::pytorch::read_file(&path, &|_| true)
            .unwrap_or_else(|e| panic!("{e}")),
    );
    let mut harness = allocator_view_harness(
        snapshot,
        "rank3-pid668-oom-1.pickle",
        Vec2::new(1280.0, 900.0),
        Duration::from_secs(120),
    );
    harness.get_by_label("OOM (1)").click();
    harness.run_steps(3);
    assert!(harness.query_by_label("Where the memory went").is_some());
    assert!(
        harness
            .query_by_label("at the failure (event #2523)")
            .is_some()
    );
    for category in ["parameters", "gradients", "optimizer state", "temporaries"] {
        assert!(harness.query_by_label(category).is_some(), "{category}");
    }
    assert!(harness.query_by_label("128 MiB (8 %)").is_some());
    assert!(
        harness
            .query_by_label(
                "The failing request was made for temporaries, inside optimizer.step()."
            )
            .is_some()
    );
    harness.snapshot_options("allocator_oom_categories", &snapshot_options());
}
