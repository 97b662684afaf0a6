//! Driving the real app under egui_kittest: the notices it shows, waiting for its background
//! work, files dropped on it and snapshots slow enough to watch load.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use egui::Vec2;
use egui_kittest::Harness;
use vramscope_app::allocator::AllocatorView;
use vramscope_app::dialogs::FileDialogs;
use vramscope_app::notices::NoticeLevel;
use vramscope_app::{AppOptions, VramscopeApp};
use vramscope_core::formats::pytorch;
use vramscope_core::model::Capture;
use vramscope_core::model::allocator::AllocatorSnapshot;

/// The real `frag_oom` snapshot (`tests/fixtures/pytorch/frag_oom.pickle`).
pub fn frag_oom() -> Arc<AllocatorSnapshot> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pytorch/frag_oom.pickle");
    Arc::new(pytorch::read_file(&path, &|_| true).unwrap_or_else(|e| panic!("{e}")))
}

/// A `size` harness drawing `frag_oom`'s Allocator view on its own, stepped until the
/// background analysis is done.
pub fn frag_oom_view_harness(size: Vec2) -> Harness<'static, AllocatorView> {
    allocator_view_harness(frag_oom(), "frag_oom.pickle", size, Duration::from_secs(60))
}

/// A `size` harness drawing `snapshot`'s Allocator view (named `name`) on its own, stepped until
/// the background analysis is done, which must take less than `analysis_limit`.
pub fn allocator_view_harness(
    snapshot: Arc<AllocatorSnapshot>,
    name: &str,
    size: Vec2,
    analysis_limit: Duration,
) -> Harness<'static, AllocatorView> {
    let view = AllocatorView::new(snapshot, name.to_string());
    let mut harness = Harness::builder()
        .with_size(size)
        .wgpu()
        .build_ui_state(|ui, view: &mut AllocatorView| view.ui(ui), view);
    let deadline = Instant::now() + analysis_limit;
    harness.step();
    while !harness.state().is_ready() {
        assert!(
            Instant::now() < deadline,
            "allocator analysis did not finish"
        );
        std::thread::sleep(Duration::from_millis(10));
        harness.step();
    }
    harness.run_steps(3);
    harness
}

/// A 1000×700 harness (the size the UI snapshots are drawn at) of the app asking `dialogs` for
/// paths, opening `files`, showing `capture` if given (as `demo-day.vramcap`), `step_dt` seconds
/// per frame (kittest runs one frame per input event, so a double click needs frames shorter than
/// egui's 0.3 s double-click window).
pub fn app_harness(
    dialogs: Box<dyn FileDialogs>,
    files: Vec<PathBuf>,
    capture: Option<Capture>,
    step_dt: f32,
) -> Harness<'static, VramscopeApp> {
    let options = AppOptions {
        files,
        live: None,
        dialogs,
        recordings_dir: None,
    };
    Harness::builder()
        .with_size(Vec2::new(1000.0, 700.0))
        .with_step_dt(step_dt)
        .wgpu()
        .build_eframe(move |cc| {
            let mut app = VramscopeApp::new(cc, options);
            if let Some(capture) = capture {
                app.show_capture("demo-day.vramcap", capture);
            }
            app
        })
}

/// The texts of the notices of `level` the app shows now.
pub fn notice_texts(harness: &Harness<'static, VramscopeApp>, level: NoticeLevel) -> Vec<String> {
    harness
        .state()
        .notices
        .items()
        .iter()
        .filter(|n| n.level == level)
        .map(|n| n.text.clone())
        .collect()
}

/// Steps the app in real time (so that its threads progress) until `done` holds (at most 30 s,
/// then fails naming `what`), then two frames more so that what follows is drawn.
pub fn step_until(
    harness: &mut Harness<'static, VramscopeApp>,
    what: &str,
    done: impl Fn(&VramscopeApp) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    harness.step();
    while !done(harness.state()) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
        harness.step();
    }
    harness.run_steps(2);
}

/// A dropped file as a desktop would hand it over (here: only bytes, no file on disk).
#[derive(Debug)]
pub struct DroppedBytes {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

impl egui::DroppedFile for DroppedBytes {
    fn path(&self) -> &Path {
        &self.path
    }
    fn bytes(&self) -> Result<Vec<u8>, String> {
        Ok(self.bytes.clone())
    }
}

/// The `fragmentation.pickle` case made slow to read: `pairs` no-op pairs (`None`, `POP`) after
/// its protocol header, so that a load takes long enough to be seen in progress and cancelled.
pub fn slow_snapshot_bytes(pairs: usize) -> Vec<u8> {
    let fixture = std::fs::read(super::cli::case("fragmentation.pickle")).expect("fixture");
    assert_eq!(&fixture[..2], b"\x80\x04", "a protocol 4 pickle");
    let mut bytes = Vec::with_capacity(fixture.len() + 2 * pairs);
    bytes.extend_from_slice(&fixture[..2]);
    for _ in 0..pairs {
        bytes.extend_from_slice(b"N0");
    }
    bytes.extend_from_slice(&fixture[2..]);
    bytes
}
