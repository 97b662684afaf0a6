//! "Compare" in the Allocator tab, driven through the real app under egui_kittest: two snapshots
//! of one leaking run (`tests/fixtures/cases/leak_step10.pickle` after step 10, `leak.pickle`
//! after step 40) opened as a user opens them, the comparison switched on, the leaking call site
//! in the difference table with its change, a click on its row outlining its blocks in both
//! maps, and the linked time travel moving both sides; with three snapshots, the rank table.

use egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

use vramscope_app::VramscopeApp;
use vramscope_app::command::UiCommand;
use vramscope_app::dialogs::NoDialogs;
use vramscope_app::views::View;

use crate::support::cli::case;
use crate::support::ui::{app_harness, step_until};

/// The leak's call site: `out = model(x)` on line 28 of the run's script, kept every step.
const LEAK_SITE: &str = "_leak.py:28 <module>";
/// 30 more steps of 256 MiB outputs between the two snapshots.
const LEAK_BYTES: i64 = 30 * (256 << 20);

/// The app with `files` opened, stepped until every snapshot's view is ready.
fn opened(files: &[&str]) -> Harness<'static, VramscopeApp> {
    let paths = files.iter().map(|f| case(f)).collect();
    let mut harness = app_harness(Box::new(NoDialogs), paths, None, 0.25);
    let count = files.len();
    step_until(&mut harness, "the snapshots' views", |app| {
        app.allocator_views().len() == count && app.allocator_views().iter().all(|v| v.is_ready())
    });
    harness
}

/// Steps until the comparison's table is measured at the moments its maps show.
fn until_measured(harness: &mut Harness<'static, VramscopeApp>) {
    step_until(harness, "the comparison's measurement", |app| {
        app.allocator_compare().is_some_and(|c| c.is_up_to_date())
    });
}

#[test]
fn compare_lists_the_leaking_site_outlines_its_blocks_in_both_maps_and_links_time_travel() {
    let mut harness = opened(&["leak_step10.pickle", "leak.pickle"]);
    assert_eq!(harness.state().view(), View::Allocator);
    harness.get_by_label("Compare").click();
    until_measured(&mut harness);
    let compare = harness.state().allocator_compare().expect("comparing");
    let names = compare.names().expect("both sides analysed");
    assert!(names[0].ends_with("leak_step10.pickle"), "{names:?}");
    assert!(names[1].ends_with("leak.pickle"), "{names:?}");
    // Each at its peak, as `vramscope compare` looks by default.
    assert_eq!(compare.positions(), Some([425, 1746]));
    assert_eq!(compare.trace_lengths(), Some([447, 1768]));
    let changes = compare.site_changes();
    assert_eq!(
        changes.first(),
        Some(&(LEAK_SITE.to_owned(), LEAK_BYTES)),
        "{changes:?}"
    );
    let headline = compare.headline().unwrap_or_default();
    assert!(headline.contains("7.50 GiB more"), "{headline}");
    // On screen: the site's row with its change and each side's blocks and bytes.
    harness.get_by_label(LEAK_SITE);
    harness.get_by_label("+7.50 GiB");
    harness.get_by_label("12× 2.53 GiB");
    harness.get_by_label("42× 10.0 GiB");
    // One bytes-per-point scale for both maps.
    let scales = compare.points_per_byte().expect("both maps drawn");
    assert!(
        scales[0] > 0.0 && (scales[0] - scales[1]).abs() <= 1e-9 * scales[0],
        "{scales:?}"
    );
    assert_eq!(compare.highlighted_blocks(), [0, 0]);

    // A click on the row outlines the site's live blocks in both maps and brings them in view.
    harness.get_by_label(LEAK_SITE).click();
    harness.run_steps(3);
    let compare = harness.state().allocator_compare().expect("comparing");
    assert_eq!(compare.selected_site(), Some(LEAK_SITE));
    assert_eq!(compare.highlighted_blocks(), [12, 42]);
    let maps = compare.map_rects();
    for (k, map) in maps.iter().enumerate() {
        let map = map.expect("map drawn");
        let block = compare
            .highlight_screen_rect(k)
            .unwrap_or_else(|| panic!("no outlined block in view in map {k}"));
        assert!(map.intersects(block), "map {k}: {block:?} outside {map:?}");
    }
    harness.get_by_label("Block map A");
    harness.get_by_label("Block map B");
    harness.snapshot("allocator_compare");

    // The linked control moves both sides by event: event 300 in both.
    harness
        .get_by_role_and_label(Role::Slider, "events applied (both)")
        .set_value_accesskit(300.0);
    harness.run_steps(2);
    let compare = harness.state().allocator_compare().expect("comparing");
    assert_eq!(compare.positions(), Some([300, 300]));
    // Both maps still outline the site's blocks at the new moment (fewer of them), and the
    // table follows.
    let [a, b] = compare.highlighted_blocks();
    assert!(a > 0 && a < 12 && b > 0 && b < 42, "{a}, {b}");
    until_measured(&mut harness);
    // At the same event of one run both sides hold the same: nothing differs.
    let compare = harness.state().allocator_compare().expect("comparing");
    assert_eq!(compare.site_changes(), Vec::new());
    // Both one event on.
    harness.get_by_label("Next >").click();
    harness.run_steps(1);
    let compare = harness.state().allocator_compare().expect("comparing");
    assert_eq!(compare.positions(), Some([301, 301]));
    // Past the shorter trace's end, it stays at its end.
    harness
        .get_by_role_and_label(Role::Slider, "events applied (both)")
        .set_value_accesskit(1000.0);
    harness.run_steps(2);
    let compare = harness.state().allocator_compare().expect("comparing");
    assert_eq!(compare.positions(), Some([447, 1000]));

    // Off again: the single snapshot with its picker.
    harness.get_by_label("Compare").click();
    harness.run_steps(2);
    assert!(harness.state().allocator_compare().is_none());
    harness.get_by_label("Snapshot");
}

#[test]
fn the_compare_command_needs_two_snapshots() {
    let mut harness = opened(&["leak.pickle"]);
    let context = harness.state().command_context();
    assert!(
        !UiCommand::CompareSnapshots
            .availability(&context)
            .is_enabled()
    );
    assert!(harness.query_by_label("Compare").is_none());
    harness.state_mut().run_command(UiCommand::CompareSnapshots);
    harness.run_steps(1);
    assert!(harness.state().allocator_compare().is_none());

    let mut harness = opened(&["leak_step10.pickle", "leak.pickle"]);
    let context = harness.state().command_context();
    assert!(
        UiCommand::CompareSnapshots
            .availability(&context)
            .is_enabled()
    );
    harness.state_mut().run_command(UiCommand::ShowTimeline);
    harness.state_mut().run_command(UiCommand::CompareSnapshots);
    until_measured(&mut harness);
    assert_eq!(harness.state().view(), View::Allocator);
    harness.get_by_label(LEAK_SITE);
}

#[test]
fn three_snapshots_get_a_rank_table() {
    let mut harness = opened(&["leak_step10.pickle", "leak.pickle", "fragmentation.pickle"]);
    harness.get_by_label("Compare").click();
    step_until(&mut harness, "the rank table", |app| {
        app.allocator_compare()
            .is_some_and(|c| c.rank_rows().len() == 3 && c.is_up_to_date())
    });
    let compare = harness.state().allocator_compare().expect("comparing");
    // A is the first opened, B the last, as `vramscope compare` pairs first and last.
    let names = compare.names().expect("both sides analysed");
    assert!(names[1].ends_with("fragmentation.pickle"), "{names:?}");
    let rows = compare.rank_rows();
    // Ranked in the order opened (no rank in their names), each against the median peak: the
    // late leak snapshot (11.8 GiB) is the median, the early one lighter, the 139 GiB
    // fragmentation run far heavier, with its OOM.
    let ranked: Vec<(u32, &str, bool, usize)> = rows
        .iter()
        .map(|r| {
            let sign = r.imbalance_percent > 0.0;
            (r.rank, r.name.as_str(), sign, r.ooms)
        })
        .collect();
    assert_eq!(
        ranked,
        [
            (0, "leak_step10.pickle", false, 0),
            (1, "leak.pickle", false, 0),
            (2, "fragmentation.pickle", true, 1)
        ],
        "{rows:?}"
    );
    assert_eq!(rows[1].imbalance_percent, 0.0);
    assert_eq!(rows[1].site_differences[0].0, LEAK_SITE);
    harness.get_by_label("All 3 snapshots at their peaks");
    harness.get_by_label("differs most at");
}

#[test]
fn captures_overlay_in_the_timeline_aligned_at_their_start() {
    let files = ["cap_growth.smi-gpu.csv", "cap_fragmentation.smi-gpu.csv"];
    let paths = files
        .iter()
        .map(|f| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/cases2")
                .join(f)
        })
        .collect();
    let mut harness = app_harness(Box::new(NoDialogs), paths, None, 0.25);
    step_until(&mut harness, "both captures", |app| {
        app.sessions().len() == 2
    });
    harness.state_mut().run_command(UiCommand::ShowTimeline);
    harness.run_steps(2);
    assert!(harness.state().capture_compare().lines().is_empty());
    harness.get_by_label("Compare captures").click();
    harness.run_steps(3);
    let lines = harness.state().capture_compare().lines();
    let labels: Vec<&str> = lines.iter().map(|(label, _)| *label).collect();
    assert_eq!(lines.len(), 2, "{labels:?}");
    for (file, (label, points)) in files.iter().zip(&lines) {
        assert!(label.starts_with(file), "{label}");
        // Each against the time since its own start: both begin at 0 s, though recorded at
        // different times of day.
        assert_eq!(points.first().map(|p| p[0]), Some(0.0), "{label}");
        let end = points.last().map_or(0.0, |p| p[0]);
        assert!(end > 1.0, "{label} lasts {end} s");
        let peak = points.iter().map(|p| p[1]).fold(0.0, f64::max);
        assert!(peak > 1.0, "{label} peaks at {peak} GiB");
    }
    // Unticking one leaves the other.
    let second = labels_of_session(&harness, 1);
    harness
        .get_by_role_and_label(Role::CheckBox, &second)
        .click();
    harness.run_steps(2);
    assert_eq!(harness.state().capture_compare().lines().len(), 1);
}

/// The name the app shows for its `i`th session (the overlay's checkbox).
fn labels_of_session(harness: &Harness<'static, VramscopeApp>, i: usize) -> String {
    harness.state().sessions()[i].label()
}
