//! NVML faults in the middle of a run, injected by the source's fault layer
//! (`vramscope_core::source::faults`, also reachable as `VRAMSCOPE_FAULTS=...`): a GPU that is lost and
//! comes back, a field whose calls fail, a call that hangs. Neither `record` nor the GUI panics or
//! stops; the lost GPU is marked and picked up again when it returns.

use std::process::Command;
use std::time::{Duration, Instant};

use egui::Vec2;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use vramscope_app::dialogs::NoDialogs;
use vramscope_app::{AppOptions, VramscopeApp};
use vramscope_core::formats::vramcap;
use vramscope_core::model::now_unix_ms;
use vramscope_core::model::{EventKind, FieldState, field_name};
use vramscope_core::source::demo::DemoSource;
use vramscope_core::source::faults::{FAULTS_ENV, FaultySource, parse_plan};

const PLAN: &str = "fail gpu=0 field=temperature at=0.3s for=1s; lost gpu=1 at=0.6s for=1.2s; \
                    hang gpu=0 at=2.2s for=0.8s";

#[test]
fn record_keeps_going_through_a_lost_gpu_a_failing_field_and_a_hang() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("faults.vramcap");
    let output = Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args([
            "record",
            "--demo",
            "--interval-ms",
            "50",
            "--duration",
            "4",
            "-o",
        ])
        .arg(&path)
        .env(FAULTS_ENV, PLAN)
        .output()
        .expect("run vramscope record");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("injecting faults"), "{stderr}");
    let capture = vramcap::read_file(&path).expect("the recording opens");
    assert_eq!(capture.recovery, None, "closed cleanly");

    // GPU 1: one loss, one return, about 1.2 s apart, and no samples in between.
    let marks: Vec<(i64, bool)> = capture
        .events
        .iter()
        .filter(|e| e.device_index == Some(1))
        .filter_map(|e| match e.kind {
            EventKind::DeviceLost { .. } => Some((e.t_ms, true)),
            EventKind::DeviceReturned => Some((e.t_ms, false)),
            _ => None,
        })
        .collect();
    assert!(matches!(marks[..], [(_, true), (_, false)]), "{marks:?}");
    let (lost_ms, back_ms) = (marks[0].0, marks[1].0);
    assert!((1100..=1500).contains(&(back_ms - lost_ms)), "{marks:?}");
    let gpu1 = capture.series(1).expect("GPU 1");
    assert!(gpu1.times().iter().all(|&t| t < lost_ms || t >= back_ms));
    assert!(
        gpu1.times().iter().any(|&t| t > back_ms),
        "sampled again after its return"
    );

    // GPU 0: sampled throughout (but for the hang), temperature missing for about a second.
    let gpu0 = capture.series(0).expect("GPU 0");
    let without_temperature = gpu0.iter().filter(|s| s.temperature_c.is_none()).count();
    assert!(
        (10..=30).contains(&without_temperature),
        "{without_temperature} samples"
    );
    assert!(
        gpu0.iter()
            .any(|s| s.memory.is_some() && s.temperature_c.is_some())
    );
    assert!(
        capture
            .field_status
            .iter()
            .any(|f| f.device_index == 0 && f.field == field_name::TEMPERATURE),
        "the failing field's state is kept"
    );

    // The hang: one gap of about 0.8 s in every GPU's samples, then sampling goes on.
    let longest_gap = gpu0
        .times()
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or(0);
    assert!(
        (700..=1500).contains(&longest_gap),
        "longest gap {longest_gap} ms"
    );
    let (_, last_ms) = capture.time_span_ms().expect("samples");
    assert!(
        last_ms - capture.meta.started_ms >= 3500,
        "kept sampling after the hang"
    );
}

#[test]
fn the_gui_marks_a_lost_gpu_stays_responsive_through_a_hang_and_takes_the_gpu_back() {
    // As `PLAN`, with the hang later: frames are slow enough in the test build that the GUI may
    // still be looking at the returned GPU 2 s in.
    let plan = parse_plan(
        "fail gpu=0 field=temperature at=0.3s for=1s; lost gpu=1 at=0.6s for=1.2s; \
         hang gpu=0 at=5s for=1.5s",
    )
    .expect("plan");
    let source = FaultySource::new(Box::new(DemoSource::new(now_unix_ms())), plan);
    let options = AppOptions {
        files: Vec::new(),
        live: Some(vramscope_app::app::LiveStart {
            source: Box::new(source),
            demo_notice: Some("fault-injection test: a simulated machine".to_owned()),
        }),
        dialogs: Box::new(NoDialogs),
        recordings_dir: None,
    };
    let mut harness = Harness::builder()
        .with_size(Vec2::new(1000.0, 700.0))
        .build_eframe(move |cc| VramscopeApp::new(cc, options));
    let lost = |h: &Harness<'static, VramscopeApp>| {
        h.state()
            .active_session()
            .is_some_and(|s| s.capture.lost_event(1).is_some())
    };
    let returned = |h: &Harness<'static, VramscopeApp>| {
        h.state().active_session().is_some_and(|s| {
            s.capture
                .events
                .iter()
                .any(|e| e.kind == EventKind::DeviceReturned)
        })
    };
    let step_until = |h: &mut Harness<'static, VramscopeApp>,
                      what: &str,
                      done: &dyn Fn(&Harness<'static, VramscopeApp>) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done(h) {
            assert!(Instant::now() < deadline, "never saw: {what}");
            std::thread::sleep(Duration::from_millis(20));
            h.step();
        }
        h.step();
    };

    step_until(&mut harness, "GPU 1 lost", &lost);
    assert!(
        harness.query_by_label_contains("LOST at").is_some(),
        "the devices panel marks the lost GPU"
    );
    let failed_memory = harness.state().active_session().is_some_and(|s| {
        s.capture.field_status.iter().any(|f| {
            f.device_index == 1
                && f.field == field_name::MEMORY
                && matches!(&f.state, FieldState::Failed(why) if why.contains("GPU lost"))
        })
    });
    assert!(failed_memory, "its fields say why they are not read");

    step_until(&mut harness, "GPU 1 back", &returned);
    assert!(harness.query_by_label_contains("LOST at").is_none());
    let back_ms = harness
        .state()
        .active_session()
        .and_then(|s| {
            s.capture
                .events
                .iter()
                .find(|e| e.kind == EventKind::DeviceReturned)
                .map(|e| e.t_ms)
        })
        .expect("return event");
    let sampled_after = |h: &Harness<'static, VramscopeApp>| {
        h.state()
            .active_session()
            .and_then(|s| s.capture.series(1))
            .is_some_and(|s| s.times().iter().any(|&t| t > back_ms))
    };
    step_until(&mut harness, "GPU 1 sampled again", &sampled_after);

    // The hang blocks the sampling thread for 1.5 s; frames go on being drawn meanwhile.
    let samples = |h: &Harness<'static, VramscopeApp>| {
        h.state()
            .active_session()
            .map_or(0, |s| s.capture.sample_count())
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut frames_while_stalled = 0;
    let mut last_count = samples(&harness);
    let mut stalled_since = Instant::now();
    while frames_while_stalled < 10 {
        assert!(Instant::now() < deadline, "never saw the sampler stall");
        std::thread::sleep(Duration::from_millis(20));
        harness.step();
        let count = samples(&harness);
        if count != last_count {
            last_count = count;
            stalled_since = Instant::now();
            frames_while_stalled = 0;
        } else if stalled_since.elapsed() > Duration::from_millis(300) {
            frames_while_stalled += 1;
        }
    }
    step_until(&mut harness, "sampling after the hang", &|h| {
        samples(h) > last_count
    });
}

#[test]
fn a_watched_folder_survives_a_corrupt_snapshot_and_one_still_being_written() {
    use std::io::Write;
    use vramscope_app::notices::NoticeLevel;

    let folder = tempfile::tempdir().expect("temporary directory");
    let good = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pytorch/oom.pickle"),
    )
    .expect("fixture");
    let options = AppOptions {
        files: Vec::new(),
        live: None,
        dialogs: Box::new(NoDialogs),
        recordings_dir: None,
    };
    let mut harness = Harness::builder()
        .with_size(Vec2::new(1000.0, 700.0))
        .build_eframe(move |cc| VramscopeApp::new(cc, options));
    harness.state_mut().watch_folder(folder.path().to_owned());
    harness.step();
    let errors = |h: &Harness<'static, VramscopeApp>| -> Vec<String> {
        h.state()
            .notices
            .items()
            .iter()
            .filter(|n| n.level == NoticeLevel::Error)
            .map(|n| n.text.clone())
            .collect()
    };
    let step_until = |h: &mut Harness<'static, VramscopeApp>,
                      what: &str,
                      done: &dyn Fn(&Harness<'static, VramscopeApp>) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done(h) {
            assert!(
                Instant::now() < deadline,
                "never saw: {what}; errors {:?}",
                errors(h)
            );
            std::thread::sleep(Duration::from_millis(20));
            h.step();
        }
    };

    // A corrupt snapshot: a clear error naming it, and the folder is still watched.
    let mut corrupt = good.clone();
    corrupt.truncate(good.len() / 3);
    corrupt.extend_from_slice(b"\xff\xfe not a pickle any more");
    std::fs::write(folder.path().join("corrupt.pickle"), &corrupt).expect("write");
    step_until(&mut harness, "an error about corrupt.pickle", &|h| {
        errors(h).iter().any(|e| e.contains("corrupt.pickle"))
    });
    assert!(harness.state().watched_folder().is_some(), "still watching");
    assert_eq!(harness.state().allocator_views().len(), 0);

    // A snapshot written in place, stalled half way for longer than the watcher waits: whatever
    // it says about the half file, the whole one opens once it is complete.
    let path = folder.path().join("slow.pickle");
    let mut file = std::fs::File::create(&path).expect("create");
    file.write_all(&good[..good.len() / 2])
        .expect("write the first half");
    file.flush().expect("flush");
    std::thread::sleep(vramscope_app::allocator::watcher::SETTLE * 2);
    for _ in 0..10 {
        harness.step();
        std::thread::sleep(Duration::from_millis(50));
    }
    file.write_all(&good[good.len() / 2..])
        .expect("write the rest");
    drop(file);
    step_until(&mut harness, "slow.pickle opened", &|h| {
        h.state()
            .allocator_views()
            .iter()
            .any(|v| v.name().contains("slow.pickle"))
    });
    assert!(harness.state().watched_folder().is_some(), "still watching");

    // And the next complete snapshot opens as usual.
    std::fs::write(folder.path().join("next.pickle"), &good).expect("write");
    step_until(&mut harness, "next.pickle opened", &|h| {
        h.state()
            .allocator_views()
            .iter()
            .any(|v| v.name().contains("next.pickle"))
    });
}
