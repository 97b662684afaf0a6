//! The app's file jobs (reading and preparing a capture, a PyTorch allocator snapshot or a log;
//! writing a capture, an image or a report) run here on the [`Runner`], off the UI thread; results
//! wake the UI with a repaint.
//!
//! Files are opened through the core's evidence pipeline ([`vramscope_core::evidence`], shared
//! with the command line and the web viewer), which routes them by content, not only by name:
//! captures (`.vramcap`, nvidia-smi CSV logs), then snapshots, then the extension, then "is it
//! text?" (a log). Every read shows up in
//! [`Jobs::reads`] with its progress and a cancel flag until its result is collected.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use vramscope_core::analysis::snapshot_analysis::DeviceAnalysis;
use vramscope_core::diagnose::NamedCapture;
use vramscope_core::diagnose::leak::SnapshotFacts;
use vramscope_core::diagnose::log::LogAnalysis;
use vramscope_core::diagnose::oom::LastFailureEvidence;
use vramscope_core::evidence::{self, OpenError, Opened, ReadProgress};
use vramscope_core::model::allocator::AllocatorSnapshot;

use super::allocator::JudgedDevice;
use super::runner::{Job, Poll, Progress, Runner};
use super::session::PreparedCapture;

/// A snapshot read off the UI thread, with its analysis (time travel, OOM explanations and their
/// verdicts per device, for the allocator view) and the facts the doctor takes from it: computed there too,
/// because they replay the allocator trace.
pub struct OpenedSnapshot {
    pub snapshot: Arc<AllocatorSnapshot>,
    pub analysis: Vec<JudgedDevice>,
    pub facts: Vec<SnapshotFacts>,
}

impl OpenedSnapshot {
    /// Takes the doctor's facts from `analysis` (one per device of `snapshot`, see
    /// [`vramscope_core::analysis::snapshot_analysis`]), named `file_name` like the allocator view.
    pub fn new(
        snapshot: Arc<AllocatorSnapshot>,
        analysis: Vec<DeviceAnalysis>,
        file_name: &str,
    ) -> Self {
        let facts = vramscope_core::diagnose::snapshot::facts_from(&snapshot, &analysis);
        Self::judged(evidence::OpenedSnapshot::from_parts(
            snapshot, analysis, facts, file_name,
        ))
    }

    /// The allocator view's verdicts on a snapshot the evidence pipeline opened: the verdicts on
    /// the last OOM stand on the same history and replay as the facts, taken from them, so that
    /// opening replays each device's trace once.
    pub fn judged(opened: evidence::OpenedSnapshot) -> Self {
        let evidence::OpenedSnapshot {
            snapshot,
            analysis,
            facts,
        } = opened;
        let analysis = analysis
            .into_iter()
            .map(|device| {
                let last_failure = facts
                    .iter()
                    .find(|f| f.device_index == device.travel.device() && f.oom.is_some())
                    .map(|f| LastFailureEvidence {
                        history: f.trajectory.clone(),
                        replay: f.replay.clone(),
                        breakdown: f.breakdown.clone(),
                    });
                JudgedDevice::new(&snapshot, device, last_failure)
            })
            .collect();
        OpenedSnapshot {
            snapshot,
            analysis,
            facts,
        }
    }
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

/// A read in progress: its file and its job (how far it got, and a flag that asks it to stop).
pub struct ReadStatus {
    id: u64,
    file_name: String,
    job: Job<OpenOutcome>,
}

impl ReadStatus {
    /// The file being read.
    pub fn file_name(&self) -> &str {
        &self.file_name
    }

    /// Fraction read (0 to 1), when the reader reports it (snapshots do).
    pub fn fraction(&self) -> Option<f32> {
        self.job.progress().fraction()
    }

    /// Asks the read to stop; its result then comes back as [`OpenOutcome::Cancelled`].
    pub fn cancel(&self) {
        self.job.progress().cancel();
    }

    /// Whether cancel was asked for.
    pub fn is_cancelled(&self) -> bool {
        self.job.progress().is_cancelled()
    }

    /// The read's progress, to show with [`super::runner::job_progress_ui`].
    pub fn progress(&self) -> &Progress {
        self.job.progress()
    }
}

/// Runs the app's file jobs on the [`Runner`] and collects their results.
pub struct Jobs {
    runner: Runner,
    /// Reads in progress, oldest first.
    reads: Vec<ReadStatus>,
    /// Reads that finished while an earlier read was still going, by read id: results are
    /// handed out in the order the files were opened (command line, dialog, drop), not in the
    /// order the reads happen to finish, so the last file given is the one shown.
    finished_reads: std::collections::BTreeMap<u64, JobResult>,
    next_read_id: u64,
    /// Saves and exports in progress.
    writes: Vec<Job<JobResult>>,
}

impl Jobs {
    /// Results wake `ctx` up (a repaint), so the UI needs no polling loop.
    pub fn new(ctx: egui::Context) -> Self {
        Jobs {
            runner: Runner::new(ctx),
            reads: Vec::new(),
            finished_reads: std::collections::BTreeMap::new(),
            next_read_id: 0,
            writes: Vec::new(),
        }
    }

    /// Number of jobs started whose results [`Jobs::poll`] has not collected yet.
    pub fn running(&self) -> usize {
        self.reads.len() + self.writes.len()
    }

    /// Saves and exports in progress.
    pub fn writes_running(&self) -> usize {
        self.writes.len()
    }

    /// The UI's context, which results wake.
    pub fn ctx(&self) -> &egui::Context {
        self.runner.ctx()
    }

    /// Reads in progress, oldest first.
    pub fn reads(&self) -> &[ReadStatus] {
        &self.reads
    }

    /// Tracks a read of `file_name` done by `job`.
    fn track_read(&mut self, file_name: String, job: Job<OpenOutcome>) {
        let id = self.next_read_id;
        self.next_read_id += 1;
        self.reads.push(ReadStatus { id, file_name, job });
    }

    /// Reads and prepares the capture, snapshot or log at `path` (routed by its content).
    #[cfg(feature = "native")]
    pub fn open_path(&mut self, path: PathBuf) {
        let file_name = display_name(&path);
        self.open_path_named(path, file_name, None);
    }

    /// Reads the file at `path` as `file_name`, as `kind` when given (a run folder knows what
    /// each of its files is: an empty output log is still a log) or routed by its content.
    #[cfg(feature = "native")]
    pub fn open_path_named(
        &mut self,
        path: PathBuf,
        file_name: String,
        kind: Option<vramscope_core::formats::sniff::Route>,
    ) {
        let name = file_name.clone();
        let job = self.runner.spawn(
            &format!("reading {file_name}"),
            move |progress| match kind {
                Some(kind) => outcome(evidence::open_path_as(&path, &name, kind, progress)),
                None => read_path(&path, &name, progress),
            },
        );
        self.track_read(file_name, job);
    }

    /// The runner the jobs run on, for work the app tracks itself (File › Run a command…).
    pub fn runner(&self) -> &Runner {
        &self.runner
    }

    /// Reads a dropped file: by path when it has one on disk, else through the handle's bytes (in
    /// the web viewer, in slices: [`super::web_open`]).
    pub fn open_dropped(&mut self, file: egui::DroppedFileHandle) {
        let path = file.path().to_owned();
        #[cfg(feature = "native")]
        if path.is_file() {
            self.open_path(path);
            return;
        }
        let file_name = display_name(&path);
        let name = file_name.clone();
        let title = format!("reading {file_name}");
        #[cfg(not(target_arch = "wasm32"))]
        let job = self
            .runner
            .spawn(&title, move |progress| match file.bytes() {
                Ok(bytes) => read_bytes(&bytes, &name, progress),
                Err(err) => {
                    OpenOutcome::Failed(format!("{name}: cannot read the dropped file: {err}"))
                }
            });
        #[cfg(target_arch = "wasm32")]
        let job = match file.web_file() {
            Some(web_file) => {
                super::web_open::open_job(&self.runner, &title, web_file.clone(), name)
            }
            None => self.runner.spawn(&title, move |_| {
                OpenOutcome::Failed(format!("{name}: the browser handed over no file to read"))
            }),
        };
        self.track_read(file_name, job);
    }

    /// Writes `capture` to `path` as a `.vramcap` file.
    #[cfg(feature = "native")]
    pub fn save(&mut self, path: PathBuf, capture: vramscope_core::model::Capture) {
        let job = self
            .runner
            .spawn(&format!("saving {}", path.display()), move |_| {
                let result = vramscope_core::formats::vramcap::write_file(&path, &capture)
                    .map_err(|err| err.to_string());
                JobResult::Saved { path, result }
            });
        self.writes.push(job);
    }

    /// Makes a timeline export (image, CSV tables or trace) and writes its files.
    #[cfg(feature = "native")]
    pub fn export_timeline(&mut self, job: super::export::TimelineExportJob) {
        let name = format!("exporting {}", job.path.display());
        let job = self.runner.spawn(&name, move |_| {
            let result = super::export::write_timeline_export(&job);
            JobResult::Exported {
                path: job.path,
                result,
            }
        });
        self.writes.push(job);
    }

    /// Writes `report` to `path` in the format its extension names (.html, .md or .json).
    pub fn write_report(&mut self, path: PathBuf, report: vramscope_core::report::Report) {
        let job = self
            .runner
            .spawn(&format!("writing {}", path.display()), move |_| {
                let result = vramscope_core::report::write(&report, &path)
                    .map(|()| vec![path.clone()])
                    .map_err(|err| err.to_string());
                JobResult::Exported { path, result }
            });
        self.writes.push(job);
    }

    /// Finished jobs since the last call. Never blocks.
    pub fn poll(&mut self) -> Vec<JobResult> {
        let mut results = Vec::new();
        self.writes.retain_mut(|job| match job.poll() {
            Poll::Running => true,
            Poll::Done(result) => {
                results.push(result);
                false
            }
            Poll::Lost(message) => {
                log::error!("{message}");
                false
            }
        });
        let finished_reads = &mut self.finished_reads;
        self.reads.retain_mut(|read| {
            let outcome = match read.job.poll() {
                Poll::Running => return true,
                Poll::Done(outcome) => outcome,
                Poll::Lost(message) => {
                    OpenOutcome::Failed(format!("{}: the read stopped: {message}", read.file_name))
                }
            };
            finished_reads.insert(
                read.id,
                JobResult::Opened {
                    file_name: read.file_name.clone(),
                    outcome,
                },
            );
            false
        });
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
}

/// Reads a file from disk through the evidence pipeline (sniffed by content).
#[cfg(feature = "native")]
pub(super) fn read_path(path: &Path, file_name: &str, progress: &Progress) -> OpenOutcome {
    outcome(evidence::open_path(path, file_name, progress))
}

/// Reads a file handed over as bytes (dropped on the window, or a capture or log dropped on the
/// web page) through the evidence pipeline.
pub(super) fn read_bytes(bytes: &[u8], file_name: &str, progress: &Progress) -> OpenOutcome {
    outcome(evidence::open_bytes(bytes, file_name, progress))
}

/// What the app makes of an opened file: a capture prepared for the timeline (and a copy for
/// the doctor), a snapshot with the allocator view's verdicts, a log.
pub(super) fn outcome(opened: Result<Opened, OpenError>) -> OpenOutcome {
    match opened {
        Ok(Opened::Capture(evidence)) => OpenOutcome::Capture {
            prepared: Box::new(PreparedCapture::new(evidence.capture.clone())),
            evidence,
        },
        Ok(Opened::Snapshot(opened)) => {
            OpenOutcome::Snapshot(Box::new(OpenedSnapshot::judged(*opened)))
        }
        Ok(Opened::Log(log)) => OpenOutcome::Log(log),
        Err(OpenError::Cancelled) => OpenOutcome::Cancelled,
        Err(OpenError::Failed(message)) => OpenOutcome::Failed(message),
    }
}

/// The app's job progress reports a read's progress.
impl ReadProgress for Progress {
    fn set_fraction(&self, fraction: f32) -> bool {
        Progress::set_fraction(self, fraction)
    }
    fn set_stage(&self, stage: &str) {
        Progress::set_stage(self, stage);
    }
    fn is_cancelled(&self) -> bool {
        Progress::is_cancelled(self)
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

    /// Opening a snapshot with an OOM replays its trace once (for the doctor's facts), and the
    /// Allocator tab's verdicts stand on that replay: the same verdicts as judging afresh.
    #[test]
    fn opening_a_snapshot_replays_its_trace_once() {
        let snapshot = Arc::new(vramscope_core::test_fixtures::pytorch_snapshot(
            "frag_oom.pickle",
        ));
        let analysis = vramscope_core::analysis::snapshot_analysis::analyze(&snapshot);
        assert!(
            analysis.iter().any(|d| !d.ooms.is_empty()),
            "no OOM in the fixture"
        );
        let calls = || vramscope_core::analysis::replay::WHAT_IF_CALLS.with(std::cell::Cell::get);
        let before = calls();
        let opened = OpenedSnapshot::new(Arc::clone(&snapshot), analysis, "frag_oom.pickle");
        assert_eq!(calls() - before, 1, "replays while opening");
        let fresh: Vec<_> = vramscope_core::analysis::snapshot_analysis::analyze(&snapshot)
            .into_iter()
            .map(|device| JudgedDevice::new(&snapshot, device, None))
            .collect();
        assert_eq!(fresh.len(), opened.analysis.len());
        for (fresh, opened) in fresh.iter().zip(&opened.analysis) {
            assert!(!fresh.judged.is_empty());
            assert_eq!(
                format!("{:?}", fresh.judged),
                format!("{:?}", opened.judged)
            );
        }
    }

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
        let (release_first, first_may_finish) = std::sync::mpsc::channel::<()>();
        let first = jobs.runner.spawn("first", move |_| {
            let _ = first_may_finish.recv();
            OpenOutcome::Cancelled
        });
        jobs.track_read("first.pickle".to_owned(), first);
        let second = jobs.runner.spawn("second", |_| OpenOutcome::Cancelled);
        jobs.track_read("second.pickle".to_owned(), second);
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
