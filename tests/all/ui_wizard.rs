//! The wizards driven through egui_kittest like a user would: choose, add evidence (paste a log,
//! or captures the app adds), read the findings, and leave with a report.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use egui::accesskit::Role;
use egui::{Key, Modifiers, Vec2};
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

use vramscope_app::wizard::{Step, WizardKind, WizardView};
use vramscope_core::diagnose::NamedCapture;
use vramscope_core::diagnose::finding::Category;
use vramscope_core::model::{
    Capture, CaptureMeta, DeviceFacts, DeviceSample, Event, EventKind, GIB, HealthSample, MIB,
    MemoryReading, ProcessSample, SampleBatch,
};

fn harness(view: WizardView) -> Harness<'static, WizardView> {
    Harness::builder()
        .with_size(Vec2::new(1100.0, 1400.0))
        .build_ui_state(|ui, view: &mut WizardView| view.ui(ui), view)
}

fn fixture_text(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/logs")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn has(harness: &Harness<'static, WizardView>, text: &str) -> bool {
    harness.query_all_by_label_contains(text).next().is_some()
}

fn paste_log(harness: &mut Harness<'static, WizardView>, text: &str) {
    let field = harness.get_by_role(Role::MultilineTextInput);
    field.click();
    field.type_text(text);
    harness.run();
    harness.get_by_label("Analyze pasted log").click();
    harness.run();
}

fn next(harness: &mut Harness<'static, WizardView>) {
    harness.get_by_label("Next").click();
    harness.run();
}

/// Writes the report through the Report step's field and button, and returns the file's text.
fn write_report(harness: &mut Harness<'static, WizardView>, path: &std::path::Path) -> String {
    assert_eq!(harness.state().step(), Step::Report);
    let field =
        harness.get_by_role_and_label(Role::TextInput, "Report file (.html, .md or .json):");
    field.click();
    harness.run();
    harness.key_press_modifiers(Modifiers::COMMAND, Key::A);
    harness
        .get_by_role_and_label(Role::TextInput, "Report file (.html, .md or .json):")
        .type_text(&path.display().to_string());
    harness.run();
    harness.get_by_label("Write report").click();
    harness.run();
    let deadline = Instant::now() + Duration::from_secs(20);
    while harness.state().is_writing_report() {
        assert!(Instant::now() < deadline, "report write did not finish");
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
    harness.run();
    assert!(has(harness, "Report written to"));
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn out_of_memory_wizard_from_a_pasted_log_to_an_html_report() {
    let mut harness = harness(WizardView::new());
    harness.get_by_label("Out of memory").click();
    harness.run();
    next(&mut harness);
    assert_eq!(harness.state().step(), Step::Evidence);
    paste_log(&mut harness, &fixture_text("pytorch_frag_under_cap.log"));
    assert!(has(&harness, "pasted log 1: 1 recognised line of 5"));
    next(&mut harness);
    assert_eq!(harness.state().step(), Step::Findings);
    assert!(has(&harness, "GPU 0 at the failure"), "composition bar");
    assert!(has(&harness, "cap 4.00 GiB"));
    assert!(has(&harness, "382 MiB cached"));
    assert!(has(&harness, "Turn on expandable segments"));
    next(&mut harness);
    harness.get_by_label("Copy Markdown").click();
    harness.step();
    let copied = harness
        .output()
        .platform_output
        .commands
        .iter()
        .any(|c| matches!(c, egui::OutputCommand::CopyText(t) if t.contains("fragmentation")));
    assert!(copied, "Markdown copied to the clipboard");
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let html = write_report(&mut harness, &dir.path().join("oom.html"));
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("expandable_segments"));
}

#[test]
fn log_analyzer_lists_lines_and_continues_in_the_hardware_wizard() {
    let mut harness = harness(WizardView::with_kind(WizardKind::LogAnalyzer));
    paste_log(&mut harness, &fixture_text("dmesg_xid.log"));
    assert!(has(&harness, "line 2"));
    assert!(has(&harness, "GPU memory page fault"), "Xid 31 explained");
    harness
        .get_by_label_contains("Continue in Hardware and driver (line 2)")
        .click();
    harness.run();
    assert_eq!(harness.state().kind(), WizardKind::HardwareAndDriver);
    assert_eq!(harness.state().step(), Step::Findings);
    assert!(
        harness.query_all_by_label("failure").next().is_some(),
        "Xid 79 fails the Xid check"
    );
    next(&mut harness);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let json = write_report(&mut harness, &dir.path().join("xid.json"));
    assert!(json.contains("\"schema\": \"vramscope.report/1\""));
}

fn capture_with_health(
    health: HealthSample,
    events: Vec<Event>,
    growth_per_s: u64,
) -> NamedCapture {
    let total = 140 * GIB;
    let mut c = Capture::new(
        CaptureMeta {
            driver_version: "535.104.05".into(),
            ..Default::default()
        },
        vec![DeviceFacts {
            index: 0,
            memory_total_bytes: total,
            ..Default::default()
        }],
    );
    // A reading every 12 s for 12 minutes: long enough for growth to count as a leak.
    const STEP_S: u64 = 12;
    for s in 0..60u64 {
        let used = 20 * GIB + s * STEP_S * growth_per_s;
        c.ingest(&SampleBatch {
            devices: vec![DeviceSample {
                t_ms: (s * STEP_S * 1000) as i64,
                device_index: 0,
                memory: Some(MemoryReading {
                    used_bytes: used,
                    reserved_bytes: 0,
                    free_bytes: total - used,
                    total_bytes: total,
                }),
                ..Default::default()
            }],
            processes: Some(vec![ProcessSample {
                t_ms: (s * STEP_S * 1000) as i64,
                device_index: 0,
                pid: 4242,
                name: "python".into(),
                used_bytes: Some(used),
                ..Default::default()
            }]),
            ..Default::default()
        });
    }
    c.ingest(&SampleBatch {
        health: vec![health],
        events,
        ..Default::default()
    });
    NamedCapture {
        name: "run.vramcap".into(),
        capture: c,
    }
}

#[test]
fn hardware_wizard_grades_each_check_and_checks_the_cuda_version() {
    let mut view = WizardView::with_kind(WizardKind::HardwareAndDriver);
    view.add_capture(capture_with_health(
        HealthSample {
            t_ms: 60_000,
            remapped_rows_pending: Some(true),
            remapped_rows_failure: Some(false),
            persistence_mode: Some(true),
            ..Default::default()
        },
        vec![],
        0,
    ));
    let mut harness = harness(view);
    let field =
        harness.get_by_role_and_label(Role::TextInput, "CUDA version the framework was built for:");
    field.click();
    field.type_text("13.0");
    harness.run();
    harness.get_by_label("Check").click();
    harness.run();
    assert_eq!(
        harness.state().diagnosis().primary().map(|f| f.category),
        Some(Category::DriverMismatch)
    );
    next(&mut harness);
    assert!(
        harness
            .query_by_label("Row remapping / retired pages")
            .is_some()
    );
    assert!(
        harness.query_all_by_label("warning").next().is_some(),
        "pending remap"
    );
    assert!(
        harness.query_all_by_label("failure").next().is_some(),
        "driver too old for CUDA 13.0"
    );
    assert!(has(&harness, "Driver 535.104.05 is too old for CUDA 13.0"));
    next(&mut harness);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let md = write_report(&mut harness, &dir.path().join("hw.md"));
    assert!(
        md.contains("[driver-mismatch]") && md.contains("[row-remap]"),
        "{md}"
    );
}

#[test]
fn leak_wizard_shows_the_slope_and_time_to_full() {
    let mut view = WizardView::with_kind(WizardKind::Leak);
    view.add_capture(capture_with_health(
        HealthSample::default(),
        vec![Event {
            t_ms: 1,
            device_index: None,
            kind: EventKind::Annotation {
                text: "start".into(),
            },
        }],
        100 * MIB,
    ));
    let mut harness = harness(view);
    assert!(has(&harness, "capture run.vramcap"), "evidence so far");
    next(&mut harness);
    assert!(has(&harness, "grows steadily by 5.86 GiB/min"));
    assert!(
        harness
            .query_by_label("time until the GPU is full")
            .is_some()
    );
    harness.get_by_label("Back").click();
    harness.run();
    assert_eq!(harness.state().step(), Step::Evidence);
    next(&mut harness);
    next(&mut harness);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let html = write_report(&mut harness, &dir.path().join("leak.html"));
    assert!(html.contains("data:image/png;base64,"), "timeline embedded");
}

#[test]
fn fragmentation_wizard_recommends_the_allocator_setting() {
    let mut harness = harness(WizardView::with_kind(WizardKind::Fragmentation));
    paste_log(&mut harness, &fixture_text("pytorch_fragmentation.log"));
    next(&mut harness);
    assert!(has(
        &harness,
        "16.2 GiB cached on GPU 0 but no free block fits the 2.00 GiB request"
    ));
    assert!(has(
        &harness,
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    ));
    assert!(has(&harness, "max_split_size_mb:2048"));
    next(&mut harness);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let md = write_report(&mut harness, &dir.path().join("frag.md"));
    assert!(md.contains("### 1. CRITICAL [fragmentation]"), "{md}");
}

#[test]
fn fragmentation_wizard_shows_the_allocator_metrics_and_block_map_of_a_snapshot() {
    let cases = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cases");
    let snapshot = std::sync::Arc::new(
        vramscope_core::formats::pytorch::read_file(&cases.join("fragmentation.pickle"), &|_| true)
            .unwrap_or_else(|e| panic!("fragmentation.pickle: {e}")),
    );
    let log_path = cases.join("fragmentation.log");
    let log_text = std::fs::read_to_string(&log_path)
        .unwrap_or_else(|e| panic!("{}: {e}", log_path.display()));
    let facts = vramscope_core::diagnose::snapshot::facts(&snapshot);
    let summary = facts
        .first()
        .and_then(|f| f.final_state.as_ref())
        .map(|state| {
            vramscope_core::diagnose::fragmentation::summarize(
                &vramscope_core::analysis::fragmentation::analyze(state).device,
            )
        })
        .unwrap_or_else(|| panic!("fragmentation.pickle has no final allocator state"));
    let mut view = WizardView::with_kind(WizardKind::Fragmentation);
    view.add_snapshot_facts(facts);
    view.add_log(vramscope_core::diagnose::log::analyze_text(
        &log_text,
        "fragmentation.log",
    ));
    let mut harness = harness(view);
    assert!(
        !has(&harness, "Allocator at the failure"),
        "the figures belong to the Findings step only"
    );
    next(&mut harness);
    assert_eq!(harness.state().step(), Step::Findings);
    assert!(has(
        &harness,
        "Allocator at the failure: fragmentation.pickle, GPU 0"
    ));
    assert!(summary.contains("stranded"), "{summary}");
    assert!(has(&harness, &summary), "the fragmentation summary");
    assert!(has(&harness, "Stranded (partly used segments)"), "metrics");
    assert!(has(&harness, "Largest free block"), "metrics");
    let map = harness.get_by_role_and_label(
        Role::Image,
        "Block map of Allocator at the failure: fragmentation.pickle, GPU 0",
    );
    let size = map.rect().size();
    assert!(
        size.x > 100.0 && size.y > 10.0,
        "block map drawn at {size:?}"
    );
    assert!(has(&harness, "rounding waste"), "legend");
    assert!(
        harness.query_by_label("Open in Allocator tab").is_none(),
        "only offered when the app has an Allocator tab"
    );
    assert!(has(&harness, "large pool ("), "pool groups");
    // The findings' recommendations are still there: with the snapshot's allocation history,
    // a setting only as the what-if replay proved it, with the replayed peak as evidence.
    assert!(has(&harness, "replayed: peak"), "a replay-proven setting");
    assert!(!has(
        &harness,
        "Replay the allocation history under other allocator settings"
    ));
    // Another frame reuses the texture and shows the same map.
    harness.run();
    assert!(harness.query_by_role(Role::Image).is_some());
}

#[test]
fn the_user_can_ask_about_one_gpu_of_a_multi_gpu_capture() {
    // The demo day: GPU 0 trains and runs out of memory, GPU 1's server leaks slowly.
    let capture = vramscope_core::source::demo::generate_capture(
        &vramscope_core::source::demo::DemoConfig::default(),
        1_796_000_000_000,
        15 * 60 * 1000,
        1000,
    );
    let mut view = WizardView::with_kind(WizardKind::Leak);
    view.add_capture(NamedCapture {
        name: "day.vramcap".into(),
        capture,
    });
    let leak_on = |view: &WizardView, gpu: &str| {
        view.diagnosis()
            .findings
            .iter()
            .any(|f| f.category == Category::Leak && f.title.contains(gpu))
    };
    assert!(
        leak_on(&view, "GPU 1"),
        "all GPUs: the server's leak is found"
    );

    view.set_device_filter(Some(0));
    assert!(!leak_on(&view, "GPU 1"), "GPU 0 only: nothing about GPU 1");
    assert!(
        view.diagnosis()
            .findings
            .iter()
            .all(|f| !f.title.contains("GPU 1")),
        "GPU 0 only"
    );

    view.set_device_filter(Some(1));
    assert_eq!(view.diagnosis().findings[0].category, Category::Leak);
    assert!(leak_on(&view, "GPU 1"));

    // the picker is on the evidence step, named for screen readers
    let harness = harness(view);
    assert_eq!(harness.state().step(), Step::Evidence);
    assert!(harness.query_by_label("Which GPU:").is_some());
}

#[test]
fn the_user_leaves_an_unrelated_snapshot_out_of_the_diagnosis() {
    let cases = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cases");
    let facts = |name: &str| {
        let snapshot = std::sync::Arc::new(
            vramscope_core::formats::pytorch::read_file(&cases.join(name), &|_| true)
                .unwrap_or_else(|e| panic!("{name}: {e}")),
        );
        vramscope_core::diagnose::snapshot::facts(&snapshot)
    };
    let mut view = WizardView::with_kind(WizardKind::OutOfMemory);
    view.add_snapshot_facts(facts("fragmentation.pickle"));
    view.add_snapshot_facts(facts("memory_cap.pickle"));
    let categories = |view: &WizardView| -> Vec<Category> {
        view.diagnosis()
            .findings
            .iter()
            .map(|f| f.category)
            .collect()
    };
    assert!(categories(&view).contains(&Category::Fragmentation));
    assert!(categories(&view).contains(&Category::MemoryCap));
    let mut harness = harness(view);
    let tick_box = || {
        egui_kittest::kittest::by()
            .role(Role::CheckBox)
            .label_contains("fragmentation.pickle")
    };
    harness.get(tick_box()).click();
    harness.run();
    let left = categories(harness.state());
    assert!(!left.contains(&Category::Fragmentation), "{left:?}");
    assert_eq!(left.first(), Some(&Category::MemoryCap));
    assert!(has(&harness, "fragmentation.pickle (left out)"));
    // Ticked again, it is back.
    harness.get(tick_box()).click();
    harness.run();
    assert!(categories(harness.state()).contains(&Category::Fragmentation));
}
