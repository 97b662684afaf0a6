//! "Watch folder…": yields each snapshot file that appears complete in a folder.
//!
//! The capture helper (`assets/python/vramscope_capture.py`) writes `.NAME.tmp` and renames it
//! to `NAME.pickle`, so a rename into a final name means a complete file. Writers that write in
//! place are caught when they close the file (Linux) or, elsewhere, once the file has not
//! changed for [`SETTLE`]. Hidden files, `*.tmp` and files of other types are ignored.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant, SystemTime};

use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
use notify::{EventKind, RecursiveMode, Watcher};

/// A file that stopped changing this long ago is taken as complete.
pub const SETTLE: Duration = Duration::from_millis(750);

/// File extensions of snapshots.
const SNAPSHOT_EXTENSIONS: &[&str] = &["pickle", "pkl", "json"];

/// Why a folder cannot be watched.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("{folder}: cannot watch this folder: {source}")]
    Watch {
        folder: String,
        #[source]
        source: notify::Error,
    },
    #[error("{folder}: cannot list this folder: {source}")]
    List {
        folder: String,
        #[source]
        source: std::io::Error,
    },
}

/// True for names the watcher reports: visible snapshot files, not temporary ones.
pub fn is_snapshot_name(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    if name.starts_with('.') || name.ends_with(".tmp") || name.ends_with('~') {
        return false;
    }
    path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
        SNAPSHOT_EXTENSIONS
            .iter()
            .any(|s| e.eq_ignore_ascii_case(s))
    })
}

/// Identity of a file version: a rewritten file with the same name is reported again.
type Version = (u64, Option<SystemTime>);

fn version_of(path: &Path) -> Option<Version> {
    let meta = std::fs::metadata(path).ok()?;
    meta.is_file().then(|| (meta.len(), meta.modified().ok()))
}

/// Watches one folder for new complete snapshot files.
pub struct SnapshotWatcher {
    folder: PathBuf,
    _watcher: notify::RecommendedWatcher,
    events: Receiver<notify::Result<notify::Event>>,
    /// Files that changed but may still be written, with the time of their last change.
    settling: HashMap<PathBuf, Instant>,
    /// Versions already reported.
    reported: HashMap<PathBuf, Version>,
}

impl SnapshotWatcher {
    /// Starts watching `folder` (not its subfolders). `wake` is called from the watcher's thread
    /// whenever something happens there, e.g. `move || ctx.request_repaint()`.
    pub fn new(folder: &Path, wake: impl Fn() + Send + 'static) -> Result<Self, WatchError> {
        let (sender, events) = channel();
        let mut watcher = notify::recommended_watcher(move |event| {
            // The receiver is gone only when the watcher is being dropped.
            let _ = sender.send(event);
            wake();
        })
        .map_err(|source| WatchError::Watch {
            folder: folder.display().to_string(),
            source,
        })?;
        watcher
            .watch(folder, RecursiveMode::NonRecursive)
            .map_err(|source| WatchError::Watch {
                folder: folder.display().to_string(),
                source,
            })?;
        Ok(SnapshotWatcher {
            folder: folder.to_path_buf(),
            _watcher: watcher,
            events,
            settling: HashMap::new(),
            reported: HashMap::new(),
        })
    }

    /// The folder watched.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// Snapshot files already in the folder, oldest name first; they count as reported.
    pub fn existing(&mut self) -> Result<Vec<PathBuf>, WatchError> {
        let entries = std::fs::read_dir(&self.folder).map_err(|source| WatchError::List {
            folder: self.folder.display().to_string(),
            source,
        })?;
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| is_snapshot_name(p))
            .filter(|p| self.mark_reported(p))
            .collect();
        found.sort();
        Ok(found)
    }

    /// Newly complete snapshot files since the last call, in name order. Call it each frame (it
    /// does not block); while [`SnapshotWatcher::is_settling`], call again after [`SETTLE`].
    pub fn poll(&mut self) -> Vec<PathBuf> {
        let now = Instant::now();
        let mut complete = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            let Ok(event) = event else {
                continue;
            };
            let finished = matches!(
                event.kind,
                EventKind::Access(AccessKind::Close(AccessMode::Write))
                    | EventKind::Modify(ModifyKind::Name(
                        RenameMode::To | RenameMode::Both | RenameMode::Any
                    ))
            );
            for path in event.paths {
                if !is_snapshot_name(&path) {
                    continue;
                }
                if finished {
                    self.settling.remove(&path);
                    complete.push(path);
                } else if matches!(event.kind, EventKind::Create(_) | EventKind::Modify(_)) {
                    self.settling.insert(path, now);
                }
            }
        }
        let settled: Vec<PathBuf> = self
            .settling
            .iter()
            .filter(|(_, changed)| now.duration_since(**changed) >= SETTLE)
            .map(|(path, _)| path.clone())
            .collect();
        for path in settled {
            self.settling.remove(&path);
            complete.push(path);
        }
        complete.sort();
        complete.dedup();
        complete.retain(|path| self.mark_reported(path));
        complete
    }

    /// True while some file is still being written: poll again after [`SETTLE`].
    pub fn is_settling(&self) -> bool {
        !self.settling.is_empty()
    }

    /// Records `path`'s current version; false if it no longer exists or was reported as is.
    fn mark_reported(&mut self, path: &Path) -> bool {
        let Some(version) = version_of(path) else {
            return false;
        };
        if self.reported.get(path) == Some(&version) {
            return false;
        }
        self.reported.insert(path.to_path_buf(), version);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_visible_snapshot_names_count() {
        assert!(is_snapshot_name(Path::new("/s/vramscope-1-oom.pickle")));
        assert!(is_snapshot_name(Path::new("/s/dump.JSON")));
        assert!(!is_snapshot_name(Path::new("/s/.vramscope-1.tmp")));
        assert!(!is_snapshot_name(Path::new("/s/.hidden.pickle")));
        assert!(!is_snapshot_name(Path::new("/s/x.pickle.tmp")));
        assert!(!is_snapshot_name(Path::new("/s/notes.txt")));
    }
}
