//! The live-capture path end to end without a GPU: the Python helper's own unit tests (with a
//! stand-in for torch), then the helper writing snapshots into a folder while a
//! `SnapshotWatcher` picks up each complete file, which the reader then opens.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use vramscope_app::allocator::SnapshotWatcher;
use vramscope_core::formats::pytorch;

fn helper_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/python")
}

fn python() -> Command {
    let mut command = Command::new("python3");
    // No __pycache__ next to the helper.
    command.arg("-B").current_dir(helper_dir());
    command
}

#[test]
fn python_helper_unit_tests_pass() {
    let output = python()
        .args(["-m", "unittest", "discover", "-s", ".", "-p", "test_*.py"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 (the capture helper's tests need it): {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("OK"), "{stderr}");
}

/// Runs the helper with the fake torch to write `count` snapshots into `folder`, one every
/// 50 ms, then one "oom" snapshot through the OOM observer.
fn write_snapshots(folder: &Path, count: usize) {
    let script = format!(
        "import time, vramscope_capture, test_vramscope_capture as t\n\
         torch = t.FakeTorch()\n\
         capture = vramscope_capture.Capture({folder:?}, every_s=None, keep=None, torch_module=torch).start()\n\
         for _ in range({count}):\n    capture.dump('periodic')\n    time.sleep(0.05)\n\
         torch.oom_observer(0, 32 << 20, 4 << 30, 1 << 30)\n",
        folder = folder.display().to_string()
    );
    let output = python()
        .args(["-c", &script])
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3: {e}"));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn watcher_picks_up_each_complete_snapshot_the_helper_writes() {
    let folder = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    // A file that was there before watching started.
    write_snapshots(folder.path(), 1);
    let mut watcher = SnapshotWatcher::new(folder.path(), || {}).unwrap_or_else(|e| panic!("{e}"));
    let existing = watcher.existing().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(existing.len(), 2, "{existing:?}");

    // A stray temporary file and an unrelated file are never reported.
    std::fs::write(folder.path().join(".half-written.tmp"), b"\x80\x04")
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(folder.path().join("notes.txt"), b"hello").unwrap_or_else(|e| panic!("{e}"));
    write_snapshots(folder.path(), 3);

    let mut seen: Vec<PathBuf> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.len() < 4 && Instant::now() < deadline {
        seen.extend(watcher.poll());
        std::thread::sleep(Duration::from_millis(20));
    }
    let names: Vec<String> = seen
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert_eq!(
        names
            .iter()
            .filter(|n| n.ends_with("-periodic.pickle"))
            .count(),
        3,
        "{names:?}"
    );
    assert_eq!(
        names.iter().filter(|n| n.ends_with("-oom.pickle")).count(),
        1,
        "{names:?}"
    );
    // Nothing is reported twice.
    std::thread::sleep(vramscope_app::allocator::watcher::SETTLE + Duration::from_millis(100));
    assert!(watcher.poll().is_empty());

    // A writer that writes in place (no rename) is reported once it closes the file (or, where
    // the OS does not say so, once the file has settled).
    let direct = folder.path().join("copied-by-hand.pickle");
    std::fs::copy(&seen[0], &direct).unwrap_or_else(|e| panic!("{e}"));
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut later = Vec::new();
    while later.is_empty() && Instant::now() < deadline {
        later = watcher.poll();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(later, vec![direct]);

    // Every reported file is complete: the reader opens it.
    for path in &seen {
        let snapshot = pytorch::read_file(path, &|_| true).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(snapshot.segments.len(), 1);
        assert_eq!(snapshot.blocks.len(), 2);
    }
}
