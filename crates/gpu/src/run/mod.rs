//! `vramscope run`: start a command as a child process that behaves as the command would (its
//! output streams through, its input is passed on, Ctrl+C and SIGTERM reach its process group,
//! its exit status is ours), and record everything the doctor needs into one run folder:
//!
//! ```text
//! vramscope-runs/<UTC time>-<name>/
//!   run.json          the manifest (vramscope_core::model::run, schema vramscope.run/1)
//!   output.log        the last lines of the job's output
//!   timeline.vramcap  the NVML timeline of the machine's GPUs while the job ran
//!   snapshots/        allocator snapshots the Python hook wrote (at an OOM, periodically)
//!   progress/         the hook's progress records (allocations so far, bytes)
//!   .hook/            the hook itself (sitecustomize.py), put first on the job's PYTHONPATH
//! ```
//!
//! Every Python process of the job that imports torch records its allocator history through the
//! hook (`assets/python/vramscope_run`, embedded here and installed at run time; the user's
//! code is never changed). [`prove`] re-runs the job under candidate changes, and [`conclude`]
//! is the whole sequence (run, diagnose, prove, report) that the command line and the app share.

mod child;
pub mod conclude;
pub mod prove;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vramscope_core::formats::vramcap::Recorder;
use vramscope_core::model::run::{MANIFEST_FILE, RUN_SCHEMA, RunExit, RunManifest};
use vramscope_core::model::{UtcDateTime, now_unix_ms};
use vramscope_core::source::Source;

use crate::sampler::{Sampler, SamplerConfig};

pub use child::{Forwarder, forward_signals_to};
pub use conclude::{ProveOptions, RunEvents, run_and_conclude};

/// The hook's files, installed into each run folder's `.hook/`.
const HOOK_FILES: [(&str, &str); 2] = [
    (
        "sitecustomize.py",
        include_str!("../../../../assets/python/vramscope_run/sitecustomize.py"),
    ),
    (
        "vramscope_run_hook.py",
        include_str!("../../../../assets/python/vramscope_run/vramscope_run_hook.py"),
    ),
];

/// The timeline's file name in a run folder.
pub const TIMELINE_FILE: &str = "timeline.vramcap";
/// The output log's file name in a run folder.
pub const LOG_FILE: &str = "output.log";
/// NVML sampling interval of a run unless the user picks another (`--interval-ms`): fine enough
/// to see a step's rise, light enough to cost the job nothing measurable.
pub const DEFAULT_INTERVAL_MS: u32 = 250;
/// Lines of the job's output kept in `output.log` unless the user picks another
/// (`--log-lines`): enough for the traceback of every rank of an 8-GPU job.
pub const DEFAULT_LOG_LINES: usize = 2000;

/// How much allocator history the hook records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stacks {
    /// Python frames of every allocation (the default: what people read, cheap).
    Python,
    /// Python and C++ frames (costly: the C++ unwinder runs for every allocation).
    All,
    /// Every allocation and free, without frames (the cheapest recording).
    None,
}

impl Stacks {
    fn env_value(self) -> &'static str {
        match self {
            Stacks::Python => "python",
            Stacks::All => "all",
            Stacks::None => "none",
        }
    }
}

/// What the hook records.
#[derive(Clone, Debug, PartialEq)]
pub struct HookOptions {
    /// Off: the job runs without the hook (timeline and log only).
    pub enabled: bool,
    pub stacks: Stacks,
    /// The allocator's trace ring buffer, in events.
    pub max_entries: u64,
    /// Seconds between periodic snapshots; 0 for none.
    pub periodic_s: u32,
}

impl Default for HookOptions {
    fn default() -> Self {
        HookOptions {
            enabled: true,
            stacks: Stacks::Python,
            max_entries: 100_000,
            periodic_s: 0,
        }
    }
}

/// One run of a command.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// Where run folders go (`vramscope-runs`).
    pub runs_dir: PathBuf,
    /// The run's name (the folder's suffix); from the command when `None`.
    pub name: Option<String>,
    pub hook: HookOptions,
    /// NVML sampling interval.
    pub interval_ms: u32,
    /// Lines of the job's output kept in `output.log`.
    pub log_lines: usize,
    /// Environment variables to set for the job on top of ours (the `--prove` candidates).
    pub extra_env: Vec<(String, String)>,
    /// Stream the job's output to ours (off for `--prove` re-runs, which are summarised).
    pub echo: bool,
    /// Kill the job's process group after this long (the `--prove` budget).
    pub budget: Option<Duration>,
    /// Where the job starts; ours when `None`. The app's Run dialog asks for it.
    pub working_dir: Option<PathBuf>,
    /// Hears every line of the job's output as it comes (the app's run panel shows them).
    pub output: Option<LineSink>,
}

/// Where a job's output lines go as they come, besides the log: a callback the output threads
/// call, so that the app can show them live without a terminal.
#[derive(Clone)]
pub struct LineSink(Arc<dyn Fn(&str) + Send + Sync>);

impl LineSink {
    /// A sink that calls `on_line` with each line (without its line end).
    pub fn new(on_line: impl Fn(&str) + Send + Sync + 'static) -> Self {
        LineSink(Arc::new(on_line))
    }

    fn send(&self, line: &str) {
        (self.0)(line);
    }
}

impl std::fmt::Debug for LineSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LineSink")
    }
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("no command given: use vramscope run [OPTIONS] -- COMMAND [ARGS…]")]
    NoCommand,
    #[error("command not found: {0}")]
    NotFound(String),
    #[error("cannot execute {0}: permission denied")]
    NotExecutable(String),
    #[error("cannot start {command}: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start in {0}: no such folder")]
    NoWorkingDirectory(String),
    #[error("cannot create the run folder {folder}: {source}")]
    Folder {
        folder: String,
        #[source]
        source: std::io::Error,
    },
}

impl RunError {
    /// The exit status a shell gives for the same failure: 127 not found, 126 not executable.
    pub fn exit_status(&self) -> u8 {
        match self {
            RunError::NotFound(_) => 127,
            RunError::NotExecutable(_) => 126,
            _ => 1,
        }
    }
}

/// A finished run: its folder and manifest.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    pub folder: PathBuf,
    pub manifest: RunManifest,
    /// Why `run.json` could not be written (a full disk), when it could not: the job ran and
    /// its output went through, but the folder has no manifest to say so, which the caller tells
    /// the user.
    pub manifest_error: Option<String>,
}

/// A folder name from the command: `python-train` for `python train.py --lr 1`.
pub fn default_name(command: &[String]) -> String {
    let base = |s: &str| {
        let file = s.rsplit('/').next().unwrap_or(s);
        file.strip_suffix(".py")
            .or_else(|| file.strip_suffix(".sh"))
            .unwrap_or(file)
            .to_owned()
    };
    let mut parts: Vec<String> = command.iter().take(1).map(|c| base(c)).collect();
    if let Some(script) = command.iter().skip(1).find(|a| !a.starts_with('-')) {
        parts.push(base(script));
    }
    let name: String = parts
        .join("-")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "run".to_owned()
    } else {
        name
    }
}

/// `20261206T210655Z`.
fn utc_stamp(t_ms: i64) -> String {
    let t = UtcDateTime::from_unix_ms(t_ms);
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year, t.month, t.day, t.hour, t.minute, t.second
    )
}

/// A new run folder under `runs_dir`; a second run in the same second gets a suffix.
fn create_folder(runs_dir: &Path, name: &str, started_ms: i64) -> Result<PathBuf, RunError> {
    let stem = format!("{}-{name}", utc_stamp(started_ms));
    let folder_error = |folder: &Path, source| RunError::Folder {
        folder: folder.display().to_string(),
        source,
    };
    std::fs::create_dir_all(runs_dir).map_err(|e| folder_error(runs_dir, e))?;
    for attempt in 0..100 {
        let folder = if attempt == 0 {
            runs_dir.join(&stem)
        } else {
            runs_dir.join(format!("{stem}-{attempt}"))
        };
        match std::fs::create_dir(&folder) {
            Ok(()) => return Ok(folder),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(folder_error(&folder, e)),
        }
    }
    Err(folder_error(
        &runs_dir.join(stem),
        std::io::Error::from(std::io::ErrorKind::AlreadyExists),
    ))
}

/// Installs the hook into `folder/.hook/`; the environment the job needs for it, and whether
/// the hook is in place (it is not when turned off or when it could not be written).
fn install_hook(
    folder: &Path,
    hook: &HookOptions,
    not_recorded: &mut Vec<String>,
) -> (Vec<(String, String)>, bool) {
    let mut env = vec![("VRAMSCOPE_RUN_DIR".to_owned(), folder.display().to_string())];
    if !hook.enabled {
        env.push(("VRAMSCOPE_RUN_OFF".to_owned(), "1".to_owned()));
        not_recorded.push("the allocator hook was turned off (--no-hook)".to_owned());
        return (env, false);
    }
    let dir = folder.join(".hook");
    let written = std::fs::create_dir_all(&dir).and_then(|()| {
        HOOK_FILES
            .iter()
            .try_for_each(|(name, text)| std::fs::write(dir.join(name), text))
    });
    if let Err(e) = written {
        // Half a hook is no use to the job, and its bytes are what a full disk needs for the
        // log and the manifest.
        let _ = std::fs::remove_dir_all(&dir);
        not_recorded.push(format!(
            "the allocator hook could not be installed ({e}): no snapshots"
        ));
        return (env, false);
    }
    let python_path = match std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        Some(old) => format!("{}:{}", dir.display(), old.to_string_lossy()),
        None => dir.display().to_string(),
    };
    env.extend([
        ("PYTHONPATH".to_owned(), python_path),
        (
            "VRAMSCOPE_RUN_STACKS".to_owned(),
            hook.stacks.env_value().to_owned(),
        ),
        (
            "VRAMSCOPE_RUN_MAX_ENTRIES".to_owned(),
            hook.max_entries.to_string(),
        ),
        (
            "VRAMSCOPE_RUN_PERIODIC_S".to_owned(),
            hook.periodic_s.to_string(),
        ),
        // Output streams through pipes: unbuffered, Python prints it as it happens.
        ("PYTHONUNBUFFERED".to_owned(), "1".to_owned()),
    ]);
    (env, true)
}

/// The NVML timeline of the run, recorded on its own thread: opening NVML takes a moment, and
/// the job must not wait for it.
struct Timeline {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<Option<String>, String>>>,
}

impl Timeline {
    fn start(path: PathBuf, interval_ms: u32) -> Timeline {
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("vramscope-run-timeline".to_owned())
            .spawn(move || record_timeline(&path, interval_ms, &thread_stop))
            .ok();
        Timeline { stop, thread }
    }

    /// Stops recording; the driver version when NVML answered, or why nothing was recorded.
    fn finish(mut self) -> Result<Option<String>, String> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err("the timeline's thread stopped unexpectedly".to_owned()),
            None => Err("the timeline's thread could not start".to_owned()),
        }
    }
}

fn record_timeline(
    path: &Path,
    interval_ms: u32,
    stop: &AtomicBool,
) -> Result<Option<String>, String> {
    let source = crate::nvml::NvmlSource::open()
        .map_err(|e| format!("no timeline was recorded: no NVIDIA GPU could be opened ({e})"))?;
    let driver = source.describe().meta.driver_version.clone();
    let sampler = Sampler::spawn(
        Box::new(source),
        SamplerConfig {
            fast_interval_ms: interval_ms,
            ..SamplerConfig::default()
        },
        Box::new(|| {}),
    );
    let description = sampler.description().clone();
    let recorder =
        Recorder::create(path, &description.meta, &description.devices).map_err(|e| {
            // A header cut short holds nothing, and must not be listed as evidence.
            let _ = std::fs::remove_file(path);
            format!("the timeline could not be written ({e})")
        })?;
    while !stop.load(Ordering::Relaxed) {
        if let Some(batch) = sampler.recv_timeout(Duration::from_millis(100)) {
            recorder.push(&batch);
        }
    }
    for batch in sampler.drain() {
        recorder.push(&batch);
    }
    sampler.stop();
    recorder
        .finish()
        .map_err(|e| format!("the timeline was cut short ({e})"))?;
    Ok((!driver.is_empty()).then_some(driver))
}

/// Files of the run folder worth listing in the manifest, relative to it, sorted.
pub fn evidence_files(folder: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for sub in ["", "snapshots", "progress"] {
        let dir = if sub.is_empty() {
            folder.to_path_buf()
        } else {
            folder.join(sub)
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !entry.path().is_file() || name == MANIFEST_FILE {
                continue;
            }
            files.push(if sub.is_empty() {
                name
            } else {
                format!("{sub}/{name}")
            });
        }
    }
    files.sort();
    files
}

/// Writes `manifest` into `folder` (atomically); what went wrong, if it did.
pub fn write_manifest(folder: &Path, manifest: &RunManifest) -> Result<(), String> {
    let text = serde_json::to_string_pretty(manifest).map_err(|e| e.to_string())?;
    vramscope_core::formats::write_atomically(&folder.join(MANIFEST_FILE), text.as_bytes())
        .map_err(|e| format!("the manifest could not be written ({e})"))
}

/// Runs `options.command` to its end, recording into a new run folder. `forwarder` receives the
/// child's process group so that signals vramscope gets reach the job.
pub fn run(options: &RunOptions, forwarder: &Forwarder) -> Result<RunOutcome, RunError> {
    run_until(options, forwarder, &|_| false).map(|(outcome, _)| outcome)
}

/// [`run`], stopping the job's process group as soon as `stop_now(run folder)` says so (a
/// `--prove` re-run that is past the original failure). The second value says whether it did.
pub fn run_until(
    options: &RunOptions,
    forwarder: &Forwarder,
    stop_now: &dyn Fn(&Path) -> bool,
) -> Result<(RunOutcome, bool), RunError> {
    let Some(program) = options.command.first() else {
        return Err(RunError::NoCommand);
    };
    // Checked first: a missing folder makes the start fail as a missing program would.
    if let Some(dir) = options.working_dir.as_ref().filter(|d| !d.is_dir()) {
        return Err(RunError::NoWorkingDirectory(dir.display().to_string()));
    }
    let started_ms = now_unix_ms();
    let name = options
        .name
        .clone()
        .unwrap_or_else(|| default_name(&options.command));
    let folder = create_folder(&options.runs_dir, &name, started_ms)?;
    // Absolute: the job's processes may change their working directory.
    let folder = std::path::absolute(&folder).unwrap_or(folder);
    let mut not_recorded = Vec::new();
    let (mut env, hooked) = install_hook(&folder, &options.hook, &mut not_recorded);
    env.extend(options.extra_env.iter().cloned());
    let started = Instant::now();
    let job = child::Job::spawn(program, options, &env).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => RunError::NotFound(program.clone()),
        std::io::ErrorKind::PermissionDenied => RunError::NotExecutable(program.clone()),
        _ => RunError::Spawn {
            command: program.clone(),
            source,
        },
    })?;
    forwarder.attach(job.pid());
    let timeline = Timeline::start(folder.join(TIMELINE_FILE), options.interval_ms);
    let ended = job.wait(options.budget, started, &|| stop_now(&folder));
    forwarder.detach();
    let mut versions = vec![("vramscope".to_owned(), env!("CARGO_PKG_VERSION").to_owned())];
    match timeline.finish() {
        Ok(Some(driver)) => versions.push(("NVIDIA driver".to_owned(), driver)),
        Ok(None) => {}
        Err(why) => not_recorded.push(why),
    }
    // Whole or not at all: a log cut short by a full disk would be listed as evidence, and
    // would take the room the manifest needs to say what was lost.
    let log = ended.tail.join("\n") + "\n";
    if let Err(e) =
        vramscope_core::formats::write_atomically(&folder.join(LOG_FILE), log.as_bytes())
    {
        not_recorded.push(format!(
            "the output log could not be written ({e}): the job's last {} output lines are not \
             in the folder",
            ended.tail.len()
        ));
    }
    if ended.budget_hit {
        not_recorded.push(format!(
            "stopped at the budget of {} s",
            options.budget.map_or(0, |b| b.as_secs())
        ));
    }
    let files = evidence_files(&folder);
    let torch_seen = files.iter().any(|f| f.starts_with("progress/"));
    if hooked && !torch_seen {
        not_recorded.push(
            "no process of the job imported torch and used CUDA: no allocator snapshots (the \
             timeline and the log are the evidence)"
                .to_owned(),
        );
    }
    let manifest = RunManifest {
        schema: RUN_SCHEMA.to_owned(),
        command: options.command.clone(),
        working_directory: match &options.working_dir {
            Some(dir) => std::path::absolute(dir).unwrap_or_else(|_| dir.clone()),
            None => std::env::current_dir().unwrap_or_default(),
        }
        .display()
        .to_string(),
        environment_changes: env,
        started_ms,
        ended_ms: now_unix_ms(),
        exit: ended.exit,
        pids: ended.pids,
        files,
        torch_seen,
        not_recorded,
        versions,
        proof: Vec::new(),
    };
    // The job ran and its output went through; only the folder is incomplete.
    let manifest_error = write_manifest(&folder, &manifest).err();
    Ok((
        RunOutcome {
            folder,
            manifest,
            manifest_error,
        },
        ended.stopped_early,
    ))
}

/// The exit of a job that ended as `status` says.
pub(crate) fn run_exit(status: std::process::ExitStatus) -> RunExit {
    use std::os::unix::process::ExitStatusExt as _;
    let code = status.code();
    let signal = status.signal();
    RunExit {
        code,
        signal,
        status: code.unwrap_or_else(|| 128 + signal.unwrap_or(0)),
    }
}
