//! The fleet view in the real app (egui_kittest): a capture of GPUs on several hosts opens as a
//! fleet, each GPU gets the badges the diagnosis gives it, the filter narrows the rows, and a
//! click on a row opens that GPU's own timeline as a session; a snapshot image of a varied fleet
//! (`tests/snapshots/fleet_view.png`, made with `UPDATE_SNAPSHOTS=1` on lavapipe like the others).

use std::time::{Duration, Instant};

use egui::Vec2;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;

use vramscope_app::dialogs::NoDialogs;
use vramscope_app::{AppOptions, VramscopeApp};
use vramscope_core::model::{
    Capture, CaptureMeta, DeviceFacts, DeviceSample, Event, EventKind, GIB, MemoryReading,
    SampleBatch, SourceKind,
};

/// Three hosts × four GPUs over two hours at a minute; node-b GPU 2 runs at 97 %.
fn fleet() -> Capture {
    fleet_of(3, 4, 120, |d, _| {
        if d == 6 {
            0.97
        } else {
            (20 + d) as f64 / 100.0
        }
    })
}

/// `hosts` × `gpus_per_host` H200-sized GPUs of 100 GiB sampled every minute for `minutes`; GPU
/// `d` holds `share(d, minute)` of its memory.
fn fleet_of(
    hosts: u32,
    gpus_per_host: u32,
    minutes: i64,
    share: impl Fn(u32, i64) -> f64,
) -> Capture {
    let devices: Vec<DeviceFacts> = (0..hosts)
        .map(|h| format!("node-{}", char::from(b'a' + h as u8)))
        .flat_map(|host| {
            (0..gpus_per_host).map(move |gpu| DeviceFacts {
                host: host.clone(),
                name: "NVIDIA H200".to_owned(),
                memory_total_bytes: 100 * GIB,
                labels: [
                    ("gpu", gpu.to_string()),
                    (
                        "namespace",
                        if host == "node-c" { "serving" } else { "ml" }.to_owned(),
                    ),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
                ..Default::default()
            })
        })
        .enumerate()
        .map(|(index, facts)| DeviceFacts {
            index: index as u32,
            ..facts
        })
        .collect();
    let mut capture = Capture::new(
        CaptureMeta {
            source: SourceKind::Prometheus,
            host: "http://prometheus:9090".to_owned(),
            started_ms: 1_796_000_400_000,
            interval_ms: 60_000,
            ..Default::default()
        },
        devices,
    );
    for minute in 0..minutes {
        capture.ingest(&SampleBatch {
            devices: (0..hosts * gpus_per_host)
                .map(|d| {
                    let used_bytes = (share(d, minute).clamp(0.0, 1.0) * (100 * GIB) as f64) as u64;
                    DeviceSample {
                        t_ms: 1_796_000_400_000 + minute * 60_000,
                        device_index: d,
                        memory: Some(MemoryReading {
                            used_bytes,
                            reserved_bytes: 0,
                            free_bytes: 100 * GIB - used_bytes,
                            total_bytes: 100 * GIB,
                        }),
                        ..Default::default()
                    }
                })
                .collect(),
            ..Default::default()
        });
    }
    capture
}

fn harness(capture: Capture) -> Harness<'static, VramscopeApp> {
    let options = AppOptions {
        files: Vec::new(),
        live: None,
        dialogs: Box::new(NoDialogs),
        recordings_dir: None,
    };
    Harness::builder()
        .with_size(Vec2::new(1200.0, 700.0))
        .wgpu()
        .build_eframe(move |cc| {
            let mut app = VramscopeApp::new(cc, options);
            app.show_capture("fleet.vramcap", capture);
            app
        })
}

/// Steps until every GPU of the fleet is judged (the view works in slices per frame).
fn judge_all(harness: &mut Harness<'static, VramscopeApp>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    harness.step();
    while harness.query_by_label_contains("judging").is_some() {
        assert!(
            Instant::now() < deadline,
            "the fleet was not judged in time"
        );
        harness.step();
    }
    harness.step();
}

#[test]
fn a_fleet_is_judged_filtered_and_a_click_opens_one_gpu() {
    let mut harness = harness(fleet());
    judge_all(&mut harness);
    assert!(
        harness
            .query_by_label("Fleet: 12 GPUs on 3 host(s)")
            .is_some()
    );
    assert!(harness.query_by_label("1 with findings").is_some());
    // Sorted by health: the near-full GPU comes first, with its badge.
    assert!(harness.query_by_label("near full").is_some());
    assert!(harness.query_by_label("97.0%").is_some());

    // The filter narrows the rows to one label's GPUs.
    harness.get_by_label("Filter:").focus();
    harness
        .get_by_label("Filter:")
        .type_text("namespace=serving");
    harness.run_steps(3);
    assert!(
        harness
            .query_by_label_contains("4 of 12 GPUs shown")
            .is_some()
    );
    assert!(harness.query_by_label("node-c GPU 3").is_some());
    assert!(harness.query_by_label("node-b GPU 2").is_none());
    harness.get_by_label("Filter:").focus();
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    harness.run_steps(1);
    harness.get_by_label("Filter:").type_text("node-b");
    harness.run_steps(3);
    assert!(
        harness
            .query_by_label_contains("4 of 12 GPUs shown")
            .is_some()
    );

    harness.get_by_label("node-b GPU 2").click();
    harness.run_steps(3);
    let app = harness.state();
    assert_eq!(
        app.sessions().len(),
        2,
        "a click opens the GPU as a session"
    );
    let opened = app.active_session().expect("the opened GPU is shown");
    assert_eq!(opened.label(), "node-b GPU 2 of fleet.vramcap");
    assert_eq!(opened.capture.devices.len(), 1);
    assert_eq!(opened.capture.devices[0].host, "node-b");
    assert_eq!(opened.capture.sample_count(), 120);
    // One GPU is no fleet: its timeline and device panel show, named after host and GPU.
    assert!(
        harness
            .query_by_label_contains("node-b GPU 2 · NVIDIA H200")
            .is_some()
    );
}

/// Two hosts × eight GPUs over six hours: a daily wave and noise on each, one leaking, one
/// running near full with an Xid, one with short spikes; what a user sees first.
#[test]
fn fleet_view_snapshot() {
    let noise = |d: u32, minute: i64| {
        let x = (u64::from(d) * 1_000_003 + minute as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        ((x >> 40) % 1000) as f64 / 1000.0 - 0.5
    };
    let mut capture = fleet_of(2, 8, 360, |d, minute| {
        let t = minute as f64 / 360.0;
        let base = 0.25 + 0.05 * f64::from(d % 8);
        let share = base
            + 0.06 * (t * std::f64::consts::TAU * 2.0 + f64::from(d)).sin()
            + 0.02 * noise(d, minute);
        match d {
            3 => share + 0.4 * t,
            9 => 0.97,
            12 if minute % 45 == 0 => 0.99,
            _ => share,
        }
    });
    capture.events.push(Event {
        t_ms: 1_796_000_400_000 + 200 * 60_000,
        device_index: Some(9),
        kind: EventKind::Xid {
            code: 79,
            mig_instance: None,
        },
    });
    let mut harness = harness(capture);
    judge_all(&mut harness);
    harness.snapshot("fleet_view");
}
