//! Work that takes longer than a frame (reading and preparing a capture, a PyTorch allocator
//! snapshot or a log; writing a capture) runs here, off the UI thread; results come back through a
//! channel and wake the UI with a repaint.
//!
//! Files are routed by content, not only by name ([`route`], shared with the command line's
//! readers): captures (`.vramcap`, nvidia-smi CSV logs), then snapshots, then the extension, then
//! "is it text?" (a log). Every read shows up in
//! [`Jobs::reads`] with its progress and a cancel flag until its result is collected.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};

use crate::diagnose::NamedCapture;
use crate::diagnose::leak::SnapshotFacts;
use crate::diagnose::log::{LogAnalysis, analyze_bytes};
use crate::formats::sniff::{Route, SNIFF_BYTES, route};
use crate::formats::{capture, pytorch};
use crate::model::allocator::AllocatorSnapshot;

use super::session::PreparedCapture;

/// A snapshot read off the UI thread, with the facts the doctor needs (computed there too,
/// because they replay the allocator trace).
pub struct OpenedSnapshot {
    pub snapshot: Arc<AllocatorSnapshot>,
    pub facts: Vec<SnapshotFacts>,
}

/// What reading a file gave.
pub enum OpenOutcome {
    /// A capture, prepared for the timeline, and a copy for the doctor.
    Capture {
        prepared: Box<PreparedCapture>,
        evidence: Box<NamedCapture>,
    },
    Snapshot(Box<OpenedSnapshot>),
    Log(Box<LogAnalysis>),
    /// The user cancelled the read.
    Cancelled,
    /// The file could not be read; the message names the file and the problem.
    Failed(String),
}

/// A finished background job.
pub enum JobResult {
    /// A file was read (or failed to be, or the read was cancelled).
    Opened {
        file_name: String,
        outcome: OpenOutcome,
    },
    /// A capture was written to `path` (or failed to be).
    Saved {
        path: PathBuf,
        result: Result<(), String>,
    },
    /// A timeline export or a report was written to `path` (or failed to be; the message names
    /// the file). On success, every file written (a CSV export writes two).
    Exported {
        path: PathBuf,
        result: Result<Vec<PathBuf>, String>,
    },
}

/// A read in progress: its file, how far it got and a flag that asks it to stop.
pub struct ReadStatus {
    id: u64,
    file_name: String,
    progress: Arc<ReadProgress>,
}

impl ReadStatus {
    /// The file being read.
    pub fn file_name(&self) -> &str {
        &self.file_name
    }

    /// Fraction read (0 to 1), when the reader reports it (snapshots do).
    pub fn fraction(&self) -> Option<f32> {
        let fraction = f32::from_bits(self.progress.fraction_bits.load(Ordering::Relaxed));
        fraction.is_finite().then_some(fraction)
    }

    /// Asks the read to stop; its result then comes back as [`OpenOutcome::Cancelled`].
    pub fn cancel(&self) {
        self.progress.cancelled.store(true, Ordering::Relaxed);
    }

    /// Whether cancel was asked for.
    pub fn is_cancelled(&self) -> bool {
        self.progress.cancelled.load(Ordering::Relaxed)
    }
}

/// Shared between a read's thread (which writes the fraction and looks at the flag) and the UI.
struct ReadProgress {
    fraction_bits: AtomicU32,
    cancelled: AtomicBool,
    ctx: egui::Context,
}

impl ReadProgress {
    /// The snapshot reader's progress callback: records the fraction, wakes the UI, and says
    /// whether to go on.
    fn report(&self, fraction: f32) -> bool {
        self.fraction_bits
            .store(fraction.clamp(0.0, 1.0).to_bits(), Ordering::Relaxed);
        self.ctx.request_repaint();
        !self.is_cancelled()
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }
}

/// Runs background jobs and collects their results.
pub struct Jobs {
    sender: Sender<(Option<u64>, JobResult)>,
    receiver: Receiver<(Option<u64>, JobResult)>,
    running: usize,
    reads: Vec<ReadStatus>,
    /// Reads that finished while an earlier read was still going, by read id: results are
    /// handed out in the order the files were opened (command line, dialog, drop), not in the
    /// order the reads happen to finish, so the last file given is the one shown.
    finished_reads: std::collections::BTreeMap<u64, JobResult>,
    next_read_id: Arc<AtomicU64>,
    ctx: egui::Context,
}

impl Jobs {
    /// Results wake `ctx` up (a repaint), so the UI needs no polling loop.
    pub fn new(ctx: egui::Context) -> Self {
        let (sender, receiver) = channel();
        Jobs {
            sender,
            receiver,
            running: 0,
            reads: Vec::new(),
            finished_reads: std::collections::BTreeMap::new(),
            next_read_id: Arc::new(AtomicU64::new(0)),
            ctx,
        }
    }

    /// Number of jobs started and not yet collected by [`Jobs::poll`].
    pub fn running(&self) -> usize {
        self.running
    }

    /// The UI's context, which results wake.
    pub fn ctx(&self) -> &egui::Context {
        &self.ctx
    }

    /// Reads in progress, oldest first.
    pub fn reads(&self) -> &[ReadStatus] {
        &self.reads
    }

    /// Starts tracking a read of `file_name`.
    fn new_read(&mut self, file_name: &str) -> (u64, Arc<ReadProgress>) {
        let id = self.next_read_id.fetch_add(1, Ordering::Relaxed);
        let progress = Arc::new(ReadProgress {
            fraction_bits: AtomicU32::new(f32::NAN.to_bits()),
            cancelled: AtomicBool::new(false),
            ctx: self.ctx.clone(),
        });
        self.reads.push(ReadStatus {
            id,
            file_name: file_name.to_owned(),
            progress: Arc::clone(&progress),
        });
        (id, progress)
    }

    /// Reads and prepares the capture, snapshot or log at `path` (routed by [`route`]).
    #[cfg(feature = "native")]
    pub fn open_path(&mut self, path: PathBuf) {
        let file_name = display_name(&path);
        let (id, progress) = self.new_read(&file_name);
        self.spawn(Some(id), move || {
            let outcome = read_path(&path, &file_name, &progress);
            JobResult::Opened { file_name, outcome }
        });
    }

    /// Reads a dropped file: by path when it has one on disk, else through the handle's bytes.
    pub fn open_dropped(&mut self, file: egui::DroppedFileHandle) {
        let path = file.path().to_owned();
        #[cfg(feature = "native")]
        if path.is_file() {
            self.open_path(path);
            return;
        }
        let file_name = display_name(&path);
        let (id, progress) = self.new_read(&file_name);
        #[cfg(not(target_arch = "wasm32"))]
        {
            self.spawn(Some(id), move || {
                let outcome = match file.bytes() {
                    Ok(bytes) => read_bytes(&bytes, &file_name, &progress),
                    Err(err) => OpenOutcome::Failed(format!(
                        "{file_name}: cannot read the dropped file: {err}"
                    )),
                };
                JobResult::Opened { file_name, outcome }
            });
        }
        #[cfg(target_arch = "wasm32")]
        {
            let sender = self.sender.clone();
            let ctx = self.ctx.clone();
            self.running += 1;
            wasm_bindgen_futures::spawn_local(async move {
                let outcome = match file.bytes_async().await {
                    Ok(bytes) => read_bytes(&bytes, &file_name, &progress),
                    Err(err) => OpenOutcome::Failed(format!(
                        "{file_name}: cannot read the dropped file: {err}"
                    )),
                };
                // The receiver lives as long as the app; if it is gone there is nobody to tell.
                let _ = sender.send((Some(id), JobResult::Opened { file_name, outcome }));
                ctx.request_repaint();
            });
        }
    }

    /// Writes `capture` to `path` as a `.vramcap` file.
    #[cfg(feature = "native")]
    pub fn save(&mut self, path: PathBuf, capture: crate::model::Capture) {
        self.spawn(None, move || {
            let result =
                crate::formats::vramcap::write_file(&path, &capture).map_err(|err| err.to_string());
            JobResult::Saved { path, result }
        });
    }

    /// Makes a timeline export (image, CSV tables or trace) and writes its files.
    #[cfg(feature = "native")]
    pub fn export_timeline(&mut self, job: super::export::TimelineExportJob) {
        self.spawn(None, move || {
            let result = super::export::write_timeline_export(&job);
            JobResult::Exported {
                path: job.path,
                result,
            }
        });
    }

    /// Writes `report` to `path` in the format its extension names (.html, .md or .json).
    pub fn write_report(&mut self, path: PathBuf, report: crate::report::Report) {
        self.spawn(None, move || {
            let result = crate::report::write(&report, &path)
                .map(|()| vec![path.clone()])
                .map_err(|err| err.to_string());
            JobResult::Exported { path, result }
        });
    }

    /// Finished jobs since the last call. Never blocks.
    pub fn poll(&mut self) -> Vec<JobResult> {
        let finished: Vec<(Option<u64>, JobResult)> = self.receiver.try_iter().collect();
        self.running = self.running.saturating_sub(finished.len());
        let mut results = Vec::with_capacity(finished.len());
        for (read_id, result) in finished {
            match read_id {
                Some(id) => {
                    self.reads.retain(|read| read.id != id);
                    self.finished_reads.insert(id, result);
                }
                None => results.push(result),
            }
        }
        // Hand out finished reads up to the oldest one still in progress, in opening order.
        let oldest_running = self.reads.iter().map(|read| read.id).min();
        while let Some(entry) = self.finished_reads.first_entry() {
            if oldest_running.is_some_and(|oldest| *entry.key() > oldest) {
                break;
            }
            results.push(entry.remove());
        }
        results
    }

    /// Runs `job` on a thread (inline on the web, which has no threads) and reports its result.
    fn spawn(&mut self, read_id: Option<u64>, job: impl FnOnce() -> JobResult + Send + 'static) {
        self.running += 1;
        let sender = self.sender.clone();
        let ctx = self.ctx.clone();
        let deliver = move |result: JobResult| {
            // The receiver lives as long as the app; if it is gone there is nobody to tell.
            let _ = sender.send((read_id, result));
            ctx.request_repaint();
        };
        #[cfg(not(target_arch = "wasm32"))]
        {
            let spawned = std::thread::Builder::new()
                .name("vramscope-job".to_owned())
                .spawn(move || deliver(job()));
            if let Err(err) = spawned {
                log::error!("could not start a background thread: {err}");
                self.running -= 1;
                if let Some(id) = read_id {
                    self.reads.retain(|read| read.id != id);
                }
            }
        }
        #[cfg(target_arch = "wasm32")]
        deliver(job());
    }
}

/// Reads a file from disk. Regular files are sniffed first; anything else (a pipe) is routed by
/// its name, since its first bytes can be read only once.
#[cfg(feature = "native")]
fn read_path(path: &Path, file_name: &str, progress: &ReadProgress) -> OpenOutcome {
    let kind = if path.is_file() {
        match read_head(path) {
            Ok(head) => route(file_name, &head),
            Err(err) => {
                return OpenOutcome::Failed(format!("{file_name}: cannot read the file: {err}"));
            }
        }
    } else {
        route(file_name, &[])
    };
    match kind {
        Route::Capture => capture_outcome(
            capture::read_file(path).map_err(|err| err.to_string()),
            file_name,
            progress,
        ),
        Route::Snapshot => snapshot_outcome(
            pytorch::read_file(path, &|fraction| progress.report(fraction)),
            file_name,
            progress,
        ),
        Route::Log => {
            let analysis = std::fs::File::open(path).and_then(|file| {
                crate::diagnose::log::analyze_reader(std::io::BufReader::new(file), file_name)
            });
            match analysis {
                Ok(_) if progress.is_cancelled() => OpenOutcome::Cancelled,
                Ok(log) => OpenOutcome::Log(Box::new(log)),
                Err(err) => OpenOutcome::Failed(format!("{file_name}: cannot read the log: {err}")),
            }
        }
    }
}

/// The first [`SNIFF_BYTES`] of a file.
#[cfg(feature = "native")]
fn read_head(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut head = Vec::with_capacity(SNIFF_BYTES);
    std::fs::File::open(path)?
        .take(SNIFF_BYTES as u64)
        .read_to_end(&mut head)?;
    Ok(head)
}

/// Reads a file handed over as bytes (dropped on the window or the web page).
fn read_bytes(bytes: &[u8], file_name: &str, progress: &ReadProgress) -> OpenOutcome {
    match route(file_name, &bytes[..bytes.len().min(SNIFF_BYTES)]) {
        Route::Capture => capture_outcome(
            capture::read_bytes(bytes, file_name, capture::read_options_now())
                .map_err(|err| err.to_string()),
            file_name,
            progress,
        ),
        Route::Snapshot => snapshot_outcome(
            pytorch::read_bytes(bytes, file_name, &|fraction| progress.report(fraction)),
            file_name,
            progress,
        ),
        Route::Log => match analyze_bytes(bytes, file_name) {
            Err(err) => OpenOutcome::Failed(err.to_string()),
            Ok(_) if progress.is_cancelled() => OpenOutcome::Cancelled,
            Ok(log) => OpenOutcome::Log(Box::new(log)),
        },
    }
}

fn capture_outcome(
    read: Result<crate::model::Capture, String>,
    file_name: &str,
    progress: &ReadProgress,
) -> OpenOutcome {
    match read {
        Err(message) => OpenOutcome::Failed(message),
        Ok(_) if progress.is_cancelled() => OpenOutcome::Cancelled,
        Ok(capture) => {
            let evidence = NamedCapture {
                name: file_name.to_owned(),
                capture: capture.clone(),
            };
            OpenOutcome::Capture {
                prepared: Box::new(PreparedCapture::new(capture)),
                evidence: Box::new(evidence),
            }
        }
    }
}

fn snapshot_outcome(
    read: Result<AllocatorSnapshot, pytorch::SnapshotError>,
    file_name: &str,
    progress: &ReadProgress,
) -> OpenOutcome {
    match read {
        Err(pytorch::SnapshotError::Cancelled { .. }) => OpenOutcome::Cancelled,
        // The error already starts with the file's name.
        Err(err) => OpenOutcome::Failed(err.to_string()),
        Ok(_) if progress.is_cancelled() => OpenOutcome::Cancelled,
        Ok(snapshot) => {
            let snapshot = Arc::new(snapshot);
            let mut facts = crate::diagnose::snapshot::facts(&snapshot);
            for fact in &mut facts {
                file_name.clone_into(&mut fact.name);
            }
            if progress.is_cancelled() {
                return OpenOutcome::Cancelled;
            }
            OpenOutcome::Snapshot(Box::new(OpenedSnapshot { snapshot, facts }))
        }
    }
}

/// The file name part of a path, for messages and the top bar.
fn display_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Collects results until `count` arrived (reads run on threads).
    fn poll_until(jobs: &mut Jobs, count: usize) -> Vec<String> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut names = Vec::new();
        while names.len() < count {
            assert!(std::time::Instant::now() < deadline, "got only {names:?}");
            for result in jobs.poll() {
                if let JobResult::Opened { file_name, .. } = result {
                    names.push(file_name);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        names
    }

    #[test]
    fn reads_are_handed_out_in_the_order_they_were_started() {
        let mut jobs = Jobs::new(egui::Context::default());
        let (release_first, first_may_finish) = channel::<()>();
        let (id, _) = jobs.new_read("first.pickle");
        jobs.spawn(Some(id), move || {
            let _ = first_may_finish.recv();
            JobResult::Opened {
                file_name: "first.pickle".to_owned(),
                outcome: OpenOutcome::Cancelled,
            }
        });
        let (id, _) = jobs.new_read("second.pickle");
        jobs.spawn(Some(id), move || JobResult::Opened {
            file_name: "second.pickle".to_owned(),
            outcome: OpenOutcome::Cancelled,
        });
        // The second read finishes first but waits for the first.
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(jobs.poll().is_empty());
        assert_eq!(jobs.reads().len(), 1, "only the first is still in progress");
        release_first.send(()).expect("first job waits");
        assert_eq!(
            poll_until(&mut jobs, 2),
            vec!["first.pickle".to_owned(), "second.pickle".to_owned()]
        );
        assert_eq!(jobs.running(), 0);
    }
}
