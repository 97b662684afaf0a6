//! The one evidence pipeline: open any set of files (sniffed by content: captures, PyTorch
//! snapshots, logs), analyse each, and gather them into one [`Evidence`] that produces one
//! [`Diagnosis`]. The desktop app's jobs, the web viewer, `vramscope diagnose` and the commands
//! that follow (`run`, `compare`) all open files through here, so a file reads, is named and is
//! judged the same way everywhere.
//!
//! Whoever calls decides where the work runs (a thread of the app's runner, a browser task, the
//! command line's own thread) and hands in a [`ReadProgress`] through which the work reports how
//! far it got and learns whether it should stop.

use std::sync::Arc;

use crate::analysis::snapshot_analysis::{self, DeviceAnalysis};
use crate::diagnose::leak::SnapshotFacts;
use crate::diagnose::log::{LogAnalysis, analyze_bytes};
use crate::diagnose::{DiagnosisInput, NamedCapture, diagnose, finding::Diagnosis};
use crate::formats::sniff::{Route, SNIFF_BYTES, route};
use crate::formats::{capture, pytorch};
use crate::model::allocator::AllocatorSnapshot;
use crate::model::{Capture, UnixMs};

/// How a long read reports progress and learns that it should stop. The app's job runner, the
/// web viewer's stepped tasks and the command line each implement it their way.
pub trait ReadProgress {
    /// Records the fraction done (0 to 1); returns whether to go on (false once cancelled), so
    /// that it can be a reader's progress callback as it is.
    fn set_fraction(&self, fraction: f32) -> bool;
    /// Records what the work is doing now ("analysing").
    fn set_stage(&self, stage: &str);
    /// Whether the caller asked the work to stop.
    fn is_cancelled(&self) -> bool;
}

/// Progress nobody watches and nobody cancels: the command line's.
#[derive(Clone, Copy, Debug, Default)]
pub struct Unwatched;

impl ReadProgress for Unwatched {
    fn set_fraction(&self, _fraction: f32) -> bool {
        true
    }
    fn set_stage(&self, _stage: &str) {}
    fn is_cancelled(&self) -> bool {
        false
    }
}

/// The stage a snapshot read reports once the file is read and its analysis runs.
pub const ANALYSING_STAGE: &str = "analysing";

/// A PyTorch snapshot read and analysed: the allocator view's per-device analysis (time travel,
/// OOM explanations) and the doctor's facts, made from the same replay of its trace.
pub struct OpenedSnapshot {
    pub snapshot: Arc<AllocatorSnapshot>,
    pub analysis: Vec<DeviceAnalysis>,
    pub facts: Vec<SnapshotFacts>,
}

impl OpenedSnapshot {
    /// Analyses `snapshot` (once: the facts reuse the analysis) and names its facts `name`.
    /// `None` when cancelled on the way.
    pub fn analyse(
        snapshot: Arc<AllocatorSnapshot>,
        name: &str,
        progress: &dyn ReadProgress,
    ) -> Option<Self> {
        progress.set_stage(ANALYSING_STAGE);
        let analysis = snapshot_analysis::analyze(&snapshot);
        if progress.is_cancelled() {
            return None;
        }
        let facts = crate::diagnose::snapshot::facts_from(&snapshot, &analysis);
        Some(Self::from_parts(snapshot, analysis, facts, name))
    }

    /// An opened snapshot from facts already made (the web viewer makes them in steps,
    /// `diagnose::snapshot::FactsBuild`), named `name` everywhere the diagnosis shows them.
    pub fn from_parts(
        snapshot: Arc<AllocatorSnapshot>,
        analysis: Vec<DeviceAnalysis>,
        mut facts: Vec<SnapshotFacts>,
        name: &str,
    ) -> Self {
        for fact in &mut facts {
            name.clone_into(&mut fact.name);
            if let Some(what_if) = &mut fact.what_if {
                name.clone_into(&mut what_if.name);
                // Not shared yet (just made), so this renames in place.
                name.clone_into(&mut Arc::make_mut(&mut what_if.report).snapshot);
            }
        }
        OpenedSnapshot {
            snapshot,
            analysis,
            facts,
        }
    }

    /// Records when the file was last written, which orders snapshots whose trace recorded no
    /// times.
    pub fn set_file_modified_ms(&mut self, modified_ms: Option<UnixMs>) {
        for fact in &mut self.facts {
            fact.identity.file_modified_ms = modified_ms;
        }
    }
}

/// One file, opened and analysed.
pub enum Opened {
    Capture(Box<NamedCapture>),
    Snapshot(Box<OpenedSnapshot>),
    Log(Box<LogAnalysis>),
}

/// Why a file gave no evidence.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The caller asked the read to stop.
    #[error("cancelled")]
    Cancelled,
    /// The file could not be read; the message names the file and the problem.
    #[error("{0}")]
    Failed(String),
}

/// Reads a file handed over as bytes (dropped on the window or the web page), routed by its
/// content and `name`, and analyses it. `name` names the evidence in findings and errors.
pub fn open_bytes(
    bytes: &[u8],
    name: &str,
    progress: &dyn ReadProgress,
) -> Result<Opened, OpenError> {
    match route(name, &bytes[..bytes.len().min(SNIFF_BYTES)]) {
        Route::Capture => capture_opened(
            capture::read_bytes(bytes, name, capture::read_options_now())
                .map_err(|err| err.to_string()),
            name,
            progress,
        ),
        Route::Snapshot => {
            let read =
                pytorch::read_bytes(bytes, name, &|fraction| progress.set_fraction(fraction));
            snapshot_opened(read, name, None, progress)
        }
        Route::Log => match analyze_bytes(bytes, name) {
            Err(err) => Err(OpenError::Failed(err.to_string())),
            Ok(_) if progress.is_cancelled() => Err(OpenError::Cancelled),
            Ok(log) => Ok(Opened::Log(Box::new(log))),
        },
    }
}

/// A capture read, as evidence named `name`.
fn capture_opened(
    read: Result<Capture, String>,
    name: &str,
    progress: &dyn ReadProgress,
) -> Result<Opened, OpenError> {
    let capture = read.map_err(OpenError::Failed)?;
    if progress.is_cancelled() {
        return Err(OpenError::Cancelled);
    }
    Ok(Opened::Capture(Box::new(NamedCapture {
        name: name.to_owned(),
        capture,
    })))
}

/// A snapshot read, analysed as evidence named `name`.
fn snapshot_opened(
    read: Result<AllocatorSnapshot, pytorch::SnapshotError>,
    name: &str,
    file_modified_ms: Option<UnixMs>,
    progress: &dyn ReadProgress,
) -> Result<Opened, OpenError> {
    let snapshot = read.map_err(snapshot_error)?;
    if progress.is_cancelled() {
        return Err(OpenError::Cancelled);
    }
    let mut opened =
        OpenedSnapshot::analyse(Arc::new(snapshot), name, progress).ok_or(OpenError::Cancelled)?;
    opened.set_file_modified_ms(file_modified_ms);
    Ok(Opened::Snapshot(Box::new(opened)))
}

/// What a failed snapshot read gives: cancelled, or the error (which starts with the file's
/// name).
pub fn snapshot_error(err: pytorch::SnapshotError) -> OpenError {
    match err {
        pytorch::SnapshotError::Cancelled { .. } => OpenError::Cancelled,
        err => OpenError::Failed(err.to_string()),
    }
}

#[cfg(feature = "native")]
pub use files::{file_modified_ms, open_path, open_path_as, open_paths, read_snapshot, route_path};

#[cfg(feature = "native")]
mod files {
    use std::path::{Path, PathBuf};

    use super::{OpenError, Opened, ReadProgress, capture_opened, snapshot_opened};
    use crate::diagnose::NamedCapture;
    use crate::formats::sniff::{Route, SNIFF_BYTES, route};
    use crate::formats::{capture, pytorch};
    use crate::model::UnixMs;

    /// When `path` was last written, in Unix milliseconds.
    pub fn file_modified_ms(path: &Path) -> Option<UnixMs> {
        std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| i64::try_from(d.as_millis()).ok())
    }

    /// How `path` is read: regular files by their first bytes; anything else (a pipe) by its
    /// name, since its first bytes can be read only once.
    pub fn route_path(path: &Path, name: &str) -> Result<Route, OpenError> {
        if !path.is_file() {
            return Ok(route(name, &[]));
        }
        read_head(path)
            .map(|head| route(name, &head))
            .map_err(|err| OpenError::Failed(format!("{name}: cannot read the file: {err}")))
    }

    /// The first [`SNIFF_BYTES`] of a file.
    fn read_head(path: &Path) -> std::io::Result<Vec<u8>> {
        use std::io::Read;
        let mut head = Vec::with_capacity(SNIFF_BYTES);
        std::fs::File::open(path)?
            .take(SNIFF_BYTES as u64)
            .read_to_end(&mut head)?;
        Ok(head)
    }

    /// Reads the PyTorch snapshot at `path` without analysing it (a comparison builds only the
    /// time travel it needs, with no what-if replay).
    pub fn read_snapshot(
        path: &Path,
        progress: &dyn ReadProgress,
    ) -> Result<std::sync::Arc<crate::model::allocator::AllocatorSnapshot>, OpenError> {
        let snapshot = pytorch::read_file(path, &|fraction| progress.set_fraction(fraction))
            .map_err(super::snapshot_error)?;
        Ok(std::sync::Arc::new(snapshot))
    }

    /// Reads the file at `path`, routed by its content, and analyses it as evidence named
    /// `name` (the app passes the file's name, the command line the path as given).
    pub fn open_path(
        path: &Path,
        name: &str,
        progress: &dyn ReadProgress,
    ) -> Result<Opened, OpenError> {
        let kind = route_path(path, name)?;
        open_path_as(path, name, kind, progress)
    }

    /// Reads the file at `path` as `kind` whatever its content says (the user said what it is:
    /// a file given as a log that is not text is refused, not read as something else).
    pub fn open_path_as(
        path: &Path,
        name: &str,
        kind: Route,
        progress: &dyn ReadProgress,
    ) -> Result<Opened, OpenError> {
        match kind {
            Route::Capture => capture_opened(
                capture::read_file(path).map_err(|err| err.to_string()),
                name,
                progress,
            ),
            Route::Snapshot => snapshot_opened(
                pytorch::read_file(path, &|fraction| progress.set_fraction(fraction)),
                name,
                file_modified_ms(path),
                progress,
            ),
            Route::Log => match crate::diagnose::log::analyze_path(path, name) {
                Ok(_) if progress.is_cancelled() => Err(OpenError::Cancelled),
                Ok(log) => Ok(Opened::Log(Box::new(log))),
                Err(err) => Err(OpenError::Failed(err.to_string())),
            },
        }
    }

    /// Opens every file of `files`, each named by its path as given, as the kind given with it
    /// or, where none is, as its content says. The captures among them are read together, so
    /// that an nvidia-smi `--query-compute-apps` log joins the `--query-gpu` log of the same run.
    /// Returns what opened, in the order given (joined captures where their first file was), and
    /// stops at the first file that cannot be read.
    pub fn open_paths(
        files: &[(PathBuf, Option<Route>)],
        progress: &dyn ReadProgress,
    ) -> Result<Vec<Opened>, OpenError> {
        let mut routes = Vec::with_capacity(files.len());
        for (path, kind) in files {
            routes.push(match kind {
                Some(kind) => *kind,
                None => route_path(path, &path.display().to_string())?,
            });
        }
        let capture_paths: Vec<PathBuf> = files
            .iter()
            .zip(&routes)
            .filter(|(_, kind)| **kind == Route::Capture)
            .map(|((path, _), _)| path.clone())
            .collect();
        let mut captures = capture::read_files(&capture_paths)
            .map_err(|err| OpenError::Failed(err.to_string()))?
            .into_iter();
        let mut opened = Vec::with_capacity(files.len());
        for ((path, _), kind) in files.iter().zip(routes) {
            if kind == Route::Capture {
                // The joined captures come back in the order of their first files.
                if let Some((name, capture)) = captures.next() {
                    opened.push(Opened::Capture(Box::new(NamedCapture { name, capture })));
                }
                continue;
            }
            opened.push(open_path_as(
                path,
                &path.display().to_string(),
                kind,
                progress,
            )?);
        }
        Ok(opened)
    }
}

/// Files opened for a comparison: each snapshot with the time travel of its main device
/// (no what-if replay: a comparison needs none), the captures, and a message for each file
/// that could not be read.
#[cfg(feature = "native")]
pub struct ComparisonInputs {
    pub snapshots: Vec<crate::report::compare::SnapshotInput>,
    pub captures: Vec<NamedCapture>,
    pub unreadable: Vec<String>,
}

/// The device a comparison of `snapshot` looks at: the one with the longest trace (a process
/// normally uses one GPU), else the first.
pub fn main_device(snapshot: &AllocatorSnapshot) -> u32 {
    snapshot
        .devices
        .iter()
        .max_by_key(|d| {
            (
                d.trace
                    .and_then(|t| snapshot.traces.get(t))
                    .map_or(0, |t| t.len()),
                std::cmp::Reverse(d.device),
            )
        })
        .map_or(0, |d| d.device)
}

/// Opens `paths` for a comparison, as many at a time as there are cores (reading a snapshot
/// and building its time travel is the whole cost of a comparison), keeping their order. A
/// folder stands for the snapshots in it (a run folder keeps them in `snapshots/`).
#[cfg(feature = "native")]
pub fn open_for_comparison(paths: &[std::path::PathBuf]) -> ComparisonInputs {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let files: Vec<std::path::PathBuf> = paths.iter().flat_map(|p| expand_folder(p)).collect();
    let next = AtomicUsize::new(0);
    let results: Vec<Mutex<Option<Result<Compared, String>>>> =
        files.iter().map(|_| Mutex::new(None)).collect();
    let workers = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(files.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(path) = files.get(i) else { break };
                    let opened = open_one_for_comparison(path);
                    if let Ok(mut slot) = results[i].lock() {
                        *slot = Some(opened);
                    }
                }
            });
        }
    });
    let mut inputs = ComparisonInputs {
        snapshots: Vec::new(),
        captures: Vec::new(),
        unreadable: Vec::new(),
    };
    for (path, slot) in files.iter().zip(results) {
        let result = slot
            .into_inner()
            .ok()
            .flatten()
            .unwrap_or_else(|| Err(format!("{}: the read stopped", path.display())));
        match result {
            Ok(Compared::Snapshot(input)) => inputs.snapshots.push(*input),
            Ok(Compared::Capture(capture)) => inputs.captures.push(*capture),
            Err(message) => inputs.unreadable.push(message),
        }
    }
    inputs
}

#[cfg(feature = "native")]
enum Compared {
    Snapshot(Box<crate::report::compare::SnapshotInput>),
    Capture(Box<NamedCapture>),
}

/// The snapshot files of a folder, sorted by name; a file stands for itself.
#[cfg(feature = "native")]
fn expand_folder(path: &std::path::Path) -> Vec<std::path::PathBuf> {
    if !path.is_dir() {
        return vec![path.to_path_buf()];
    }
    let folder = if path.join("snapshots").is_dir() {
        path.join("snapshots")
    } else {
        path.to_path_buf()
    };
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&folder)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path())
                .filter(|p| {
                    p.is_file()
                        && !p
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

#[cfg(feature = "native")]
fn open_one_for_comparison(path: &std::path::Path) -> Result<Compared, String> {
    let name = path.display().to_string();
    match route_path(path, &name).map_err(|e| e.to_string())? {
        Route::Snapshot => {
            let snapshot = read_snapshot(path, &Unwatched).map_err(|e| e.to_string())?;
            let device = main_device(&snapshot);
            Ok(Compared::Snapshot(Box::new(
                crate::report::compare::SnapshotInput {
                    rank: crate::analysis::compare::rank_from_name(&name).unwrap_or(u32::MAX),
                    travel: crate::analysis::timetravel::TimeTravel::new(snapshot, device),
                    name,
                },
            )))
        }
        Route::Capture | Route::Log => match open_path(path, &name, &Unwatched) {
            Ok(Opened::Capture(capture)) => Ok(Compared::Capture(capture)),
            Ok(_) => Err(format!(
                "{name}: a log cannot be compared (compare snapshots or captures)"
            )),
            Err(e) => Err(e.to_string()),
        },
    }
}

/// A run folder of `vramscope run`, as every front end opens it: its evidence files and the
/// proof its manifest records, so that the folder diagnoses the same wherever it is opened
/// (`vramscope FOLDER`, `vramscope diagnose FOLDER`, the app, the end of the run itself).
#[cfg(feature = "native")]
#[derive(Clone, Debug, PartialEq)]
pub struct RunFolder {
    /// The output log, the timeline, every snapshot (oldest name first), each with what it is.
    pub files: Vec<(std::path::PathBuf, Option<Route>)>,
    /// The `--prove` re-runs of the manifest, in the order they ran (for
    /// [`Evidence::add_run`]).
    pub proof: Vec<crate::model::run::ProofRun>,
    /// The job's processes as the manifest lists them: the timeline's GPUs they used are the
    /// ones the diagnosis judges ([`DiagnosisInput::job_pids`](crate::diagnose::DiagnosisInput)).
    pub job_pids: Vec<u32>,
    /// Why the manifest's proof could not be read, when it could not (the files still open).
    pub problem: Option<String>,
}

/// The run folder at `folder`; `None` when it is not one (it has no `run.json`).
#[cfg(feature = "native")]
pub fn run_folder(folder: &std::path::Path) -> Option<RunFolder> {
    folder
        .join(crate::model::run::MANIFEST_FILE)
        .is_file()
        .then(|| run_folder_contents(folder))
}

/// What `folder` holds of a run, with or without its manifest: `vramscope run` itself reads
/// back a folder whose manifest a full disk left unwritten.
#[cfg(feature = "native")]
pub fn run_folder_contents(folder: &std::path::Path) -> RunFolder {
    let manifest = folder.join(crate::model::run::MANIFEST_FILE);
    let mut files = Vec::new();
    let log = folder.join("output.log");
    if log.is_file() {
        files.push((log, Some(Route::Log)));
    }
    let timeline = folder.join("timeline.vramcap");
    if timeline.is_file() {
        files.push((timeline, Some(Route::Capture)));
    }
    let mut snapshots: Vec<std::path::PathBuf> = std::fs::read_dir(folder.join("snapshots"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.extension().is_some_and(|e| e == "pickle")
                        && !p
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect()
        })
        .unwrap_or_default();
    snapshots.sort();
    files.extend(snapshots.into_iter().map(|p| (p, Some(Route::Snapshot))));
    let (judged, problem) = if manifest.is_file() {
        match manifest_proof_and_pids(&manifest) {
            Ok(judged) => (judged, None),
            Err(why) => (ProofAndPids::default(), Some(why)),
        }
    } else {
        (ProofAndPids::default(), None)
    };
    RunFolder {
        files,
        proof: judged.proof,
        job_pids: judged.pids,
        problem,
    }
}

/// What the diagnosis reads of a manifest: its proof rows and the job's processes.
#[cfg(feature = "native")]
#[derive(Default, serde::Deserialize)]
struct ProofAndPids {
    #[serde(default)]
    proof: Vec<crate::model::run::ProofRun>,
    #[serde(default)]
    pids: Vec<u32>,
}

/// The proof rows and job processes of the manifest at `path`. Only those are read, and a
/// manifest without them has none: a manifest of an older version, or one cut short on a full
/// disk, still gives what it holds.
#[cfg(feature = "native")]
fn manifest_proof_and_pids(path: &std::path::Path) -> Result<ProofAndPids, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot be read ({e})", path.display()))?;
    serde_json::from_str::<ProofAndPids>(&text)
        .map_err(|e| format!("{}: not a run manifest ({e})", path.display()))
}

/// The manifest of a run folder, when it has one that reads.
#[cfg(feature = "native")]
pub fn run_manifest(folder: &std::path::Path) -> Option<crate::model::run::RunManifest> {
    let text = std::fs::read_to_string(folder.join(crate::model::run::MANIFEST_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Everything opened for one diagnosis: captures, snapshots' facts and logs, plus what the user
/// said about their setup.
#[derive(Clone, Default)]
pub struct Evidence {
    pub input: DiagnosisInput,
}

impl Evidence {
    /// Evidence with the CUDA version the user's framework was built for, when they give it.
    pub fn new(framework_cuda: Option<(u32, u32)>) -> Self {
        Evidence {
            input: DiagnosisInput {
                framework_cuda,
                ..DiagnosisInput::default()
            },
        }
    }

    /// Adds what one file gave: a capture, a snapshot's facts (one per device) or a log.
    pub fn add(&mut self, opened: &Opened) {
        match opened {
            Opened::Capture(capture) => self.input.captures.push((**capture).clone()),
            Opened::Snapshot(snapshot) => {
                self.input.snapshots.extend(snapshot.facts.iter().cloned());
            }
            Opened::Log(log) => self.input.logs.push((**log).clone()),
        }
    }

    /// Adds the `--prove` re-runs of a run folder (rows already there are not added twice):
    /// the diagnosis then puts what they proved first.
    pub fn add_proof(&mut self, proof: &[crate::model::run::ProofRun]) {
        self.input.add_proof(proof);
    }

    /// Adds what a run folder's manifest tells the diagnosis: its `--prove` re-runs and its
    /// job's processes ([`DiagnosisInput::add_run`]).
    #[cfg(feature = "native")]
    pub fn add_run(&mut self, run: &RunFolder) {
        self.input.add_run(&run.proof, &run.job_pids);
    }

    /// Adds a capture that did not come from a file (the live machine, a Prometheus pull).
    pub fn add_capture(&mut self, capture: NamedCapture) {
        self.input.captures.push(capture);
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.input.captures.is_empty()
            && self.input.snapshots.is_empty()
            && self.input.logs.is_empty()
    }

    /// The diagnosis of all the evidence.
    pub fn diagnose(&self) -> Diagnosis {
        diagnose(&self.input)
    }

    /// The report of the diagnosis, titled `title`, with the first capture's timeline.
    pub fn report(&self, title: &str, generated_at_ms: UnixMs) -> crate::report::Report {
        crate::report::Report {
            title: title.to_owned(),
            generated_at_ms,
            diagnosis: self.diagnose(),
            timeline: self
                .input
                .captures
                .iter()
                .find_map(|c| crate::report::Timeline::from_capture(&c.name, &c.capture)),
        }
    }
}

#[cfg(all(test, feature = "native"))]
mod tests {
    use super::*;

    /// Progress that counts what it was told and cancels on demand.
    #[derive(Default)]
    struct Recorded {
        fractions: std::sync::Mutex<Vec<f32>>,
        stages: std::sync::Mutex<Vec<String>>,
        cancel: std::sync::atomic::AtomicBool,
    }

    impl ReadProgress for Recorded {
        fn set_fraction(&self, fraction: f32) -> bool {
            if let Ok(mut fractions) = self.fractions.lock() {
                fractions.push(fraction);
            }
            !self.is_cancelled()
        }
        fn set_stage(&self, stage: &str) {
            if let Ok(mut stages) = self.stages.lock() {
                stages.push(stage.to_owned());
            }
        }
        fn is_cancelled(&self) -> bool {
            self.cancel.load(std::sync::atomic::Ordering::Relaxed)
        }
    }

    #[test]
    fn a_snapshot_opens_by_content_with_progress_its_name_and_file_time() {
        let path = crate::test_fixtures::pytorch_path("frag_oom.pickle");
        let progress = Recorded::default();
        let opened = open_path(&path, "renamed.bin", &progress).expect("opens");
        let Opened::Snapshot(snapshot) = opened else {
            panic!("not read as a snapshot");
        };
        assert!(!snapshot.facts.is_empty());
        assert!(snapshot.facts.iter().all(|f| f.name == "renamed.bin"));
        assert!(
            snapshot
                .facts
                .iter()
                .all(|f| f.identity.file_modified_ms == file_modified_ms(&path))
        );
        assert!(progress.fractions.lock().is_ok_and(|f| !f.is_empty()));
        assert_eq!(
            progress
                .stages
                .lock()
                .map(|s| s.clone())
                .unwrap_or_default(),
            [ANALYSING_STAGE]
        );
        // The same bytes handed over give the same facts.
        let bytes = std::fs::read(&path).expect("fixture");
        let Ok(Opened::Snapshot(from_bytes)) = open_bytes(&bytes, "renamed.bin", &Unwatched) else {
            panic!("bytes not read as a snapshot");
        };
        assert_eq!(
            format!("{:?}", from_bytes.facts[0].oom),
            format!("{:?}", snapshot.facts[0].oom)
        );
    }

    #[test]
    fn a_cancelled_read_gives_no_evidence_and_a_bad_file_names_itself() {
        let path = crate::test_fixtures::pytorch_path("frag_oom.pickle");
        let progress = Recorded::default();
        progress
            .cancel
            .store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            open_path(&path, "frag_oom.pickle", &progress).err(),
            Some(OpenError::Cancelled)
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let bad = dir.path().join("broken.pickle");
        std::fs::write(&bad, b"\x80\x04\x95 not a whole pickle").expect("written");
        match open_path(&bad, "broken.pickle", &Unwatched) {
            Err(OpenError::Failed(message)) => {
                assert!(message.contains("broken.pickle"), "{message}")
            }
            _ => panic!("a broken file opened"),
        }
    }

    /// A run folder as `vramscope run --prove` leaves it: the job's log with a real OOM
    /// message, and a manifest with a re-run that removed the failure and one that did not.
    fn proven_run_folder(dir: &std::path::Path) -> std::path::PathBuf {
        use crate::model::run::{ProofRun, RunManifest};
        let folder = dir.join("20261206T235300Z-python3-train");
        std::fs::create_dir_all(&folder).expect("folder");
        std::fs::write(
            folder.join("output.log"),
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a \
             total capacity of 79.19 GiB of which 1.02 GiB is free. Of the allocated memory 70.00 \
             GiB is allocated by PyTorch, and 7.50 GiB is reserved by PyTorch but unallocated.\n",
        )
        .expect("log");
        let row = |change: &str, outcome: &str| ProofRun {
            change: change.to_owned(),
            outcome: outcome.to_owned(),
            seconds: 2.0,
            folder: format!("proof/{change}"),
            ..ProofRun::default()
        };
        let manifest = RunManifest {
            schema: crate::model::run::RUN_SCHEMA.to_owned(),
            proof: vec![
                row("UNRELATED=1", "ran_out"),
                row(
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                    "removed",
                ),
            ],
            pids: vec![4242, 4243],
            ..RunManifest::default()
        };
        std::fs::write(
            folder.join(crate::model::run::MANIFEST_FILE),
            serde_json::to_string(&manifest).expect("JSON"),
        )
        .expect("manifest");
        folder
    }

    #[test]
    fn a_run_folders_proof_comes_first_in_its_diagnosis() {
        let dir = tempfile::tempdir().expect("temp dir");
        let folder = proven_run_folder(dir.path());
        let run = run_folder(&folder).expect("a run folder");
        assert_eq!(run.problem, None);
        assert_eq!(run.proof.len(), 2);
        assert_eq!(run.job_pids, vec![4242, 4243]);
        let mut evidence = Evidence::default();
        for file in open_paths(&run.files, &Unwatched).expect("opens") {
            evidence.add(&file);
        }
        // The files alone: the fragmentation the log shows, no proof.
        let files_only = evidence.diagnose();
        assert!(
            !files_only.findings[0]
                .title
                .starts_with("Proven by a real run"),
            "{}",
            files_only.findings[0].title
        );
        evidence.add_proof(&run.proof);
        evidence.add_proof(&run.proof);
        assert_eq!(evidence.input.proof.len(), 2, "a folder opened twice");
        let report = evidence.report("t", 0);
        let first = &report.diagnosis.findings[0];
        assert_eq!(
            first.title,
            "Proven by a real run: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True removes the \
             out-of-memory error"
        );
        assert_eq!(first.category, files_only.findings[0].category);
        assert_eq!(first.recommendations[0].id, "proven-by-run");
        // The files' own findings follow.
        assert_eq!(
            report.diagnosis.findings[1].title,
            files_only.findings[0].title
        );
        assert!(
            report
                .diagnosis
                .inputs
                .iter()
                .any(|i| i.kind == crate::diagnose::engine::PROOF_INPUT_KIND),
            "{:?}",
            report.diagnosis.inputs
        );
    }

    #[test]
    fn re_runs_that_all_failed_are_said_first_and_never_healthy() {
        use crate::model::run::ProofRun;
        let mut evidence = Evidence::default();
        evidence.add_proof(&[ProofRun {
            change: "--batch-size 8".to_owned(),
            outcome: "ran_out".to_owned(),
            missing_bytes: Some(1 << 30),
            ..ProofRun::default()
        }]);
        let diagnosis = evidence.diagnose();
        assert_eq!(
            diagnosis.findings[0].title,
            "No change tried removed the out-of-memory error; the best still lacked 1.00 GiB"
        );
        assert!(
            diagnosis
                .findings
                .iter()
                .all(|f| f.category != crate::diagnose::Category::Healthy),
            "{:?}",
            diagnosis.findings
        );
    }

    #[test]
    fn a_manifest_without_proof_gives_none_and_a_broken_one_says_so() {
        let dir = tempfile::tempdir().expect("temp dir");
        let manifest = dir.path().join(crate::model::run::MANIFEST_FILE);
        assert_eq!(run_folder(dir.path()), None, "no manifest, no run folder");
        std::fs::write(&manifest, r#"{"schema": "vramscope.run/1"}"#).expect("written");
        let run = run_folder(dir.path()).expect("a run folder");
        assert_eq!((run.proof.len(), run.problem), (0, None));
        std::fs::write(&manifest, r#"{"schema": "vramscope.run/1", "proof": [{"#).expect("written");
        let run = run_folder(dir.path()).expect("still a run folder");
        assert!(run.proof.is_empty());
        assert!(
            run.problem
                .as_deref()
                .is_some_and(|p| p.contains("run.json") && p.contains("not a run manifest")),
            "{:?}",
            run.problem
        );
    }

    #[test]
    fn evidence_of_several_files_gives_one_diagnosis() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("train.log");
        std::fs::write(
            &log,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a \
             total capacity of 79.19 GiB of which 1.02 GiB is free.\n",
        )
        .expect("written");
        let snapshot = crate::test_fixtures::pytorch_path("frag_oom.pickle");
        let opened =
            open_paths(&[(log.clone(), None), (snapshot, None)], &Unwatched).expect("both open");
        assert_eq!(opened.len(), 2);
        assert!(matches!(opened[0], Opened::Log(_)));
        assert!(matches!(opened[1], Opened::Snapshot(_)));
        let mut evidence = Evidence::default();
        for file in &opened {
            evidence.add(file);
        }
        assert!(!evidence.is_empty());
        assert_eq!(evidence.input.logs.len(), 1);
        let diagnosis = evidence.diagnose();
        assert!(!diagnosis.findings.is_empty(), "an OOM gives findings");
        let report = evidence.report("t", 0);
        assert_eq!(report.diagnosis.findings.len(), diagnosis.findings.len());
    }
}
