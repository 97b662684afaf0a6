//! A run folder's manifest (`run.json`, schema `vramscope.run/1`): what `vramscope run`
//! started, how it ended, which files hold the evidence and what could not be recorded. Plain
//! data, so that the app (desktop and web), `compare` and the diagnosis read runs the same way.

use serde::{Deserialize, Serialize};

/// Version tag of `run.json`; bump it when a field changes meaning or disappears.
pub const RUN_SCHEMA: &str = "vramscope.run/1";

/// The manifest's file name inside a run folder.
pub const MANIFEST_FILE: &str = "run.json";

/// The run hook's option that raises every per-process memory fraction the job sets to at least
/// its value: how `--prove` tries a raised cap with no change to the job's code. A re-run's
/// change `VRAMSCOPE_RUN_MEMORY_FRACTION=F` is read back as "the job's cap raised to F".
pub const MEMORY_FRACTION_VARIABLE: &str = "VRAMSCOPE_RUN_MEMORY_FRACTION";

/// The fraction a re-run's `change` raised the job's cap to, when it is a raised cap.
pub fn raised_memory_fraction(change: &str) -> Option<&str> {
    change
        .strip_prefix(MEMORY_FRACTION_VARIABLE)
        .and_then(|rest| rest.strip_prefix('='))
}

/// How the job ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunExit {
    /// The exit code, when the job exited.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// What `vramscope run` itself exits with: the code, or 128 + the signal.
    pub status: i32,
}

impl RunExit {
    /// Whether the job succeeded (exit code 0).
    pub fn succeeded(&self) -> bool {
        self.code == Some(0)
    }
}

/// What a re-run's speed is compared by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpeedBasis {
    /// Seconds per optimizer step, first step left out (the hook's global step post-hook).
    TimePerIteration,
    /// Allocations per second over the whole run, start-up included.
    AllocationsPerSecond,
}

impl SpeedBasis {
    /// Words for tables and reports.
    pub fn label(self) -> &'static str {
        match self {
            Self::TimePerIteration => "time per iteration",
            Self::AllocationsPerSecond => "allocations per second",
        }
    }
}

/// One re-run of a `--prove`: the job under one candidate change.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProofRun {
    /// The change, as the user would make it (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`,
    /// `--batch-size 16`).
    pub change: String,
    /// `removed` (past the original failure by the margin, or finished), `ran_out`,
    /// `undecided` (stopped at the budget), `failed` (ended otherwise).
    pub outcome: String,
    /// Allocations made when it ran out, when it did.
    pub ran_out_at_allocation: Option<u64>,
    /// Peak reserved bytes the hook reported.
    pub peak_reserved_bytes: Option<u64>,
    /// When it ran out: the failed request minus the memory the device had free then.
    pub missing_bytes: Option<u64>,
    /// Speed relative to the original run (1 = as fast; lower is slower), measured as
    /// `speed_basis` says.
    pub relative_speed: Option<f64>,
    /// What `relative_speed` compares: time per iteration when both runs made at least two
    /// optimizer steps, else allocations per second. Absent in run folders written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_basis: Option<SpeedBasis>,
    /// This re-run's seconds per training iteration (optimizer step), when it made two or more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds_per_iteration: Option<f64>,
    pub seconds: f64,
    /// The folder of this re-run's evidence, relative to the run folder.
    pub folder: String,
    /// What the replay of the original snapshot predicted for this change, when it could.
    pub replay_prediction: Option<String>,
    /// Why a re-run that `failed` ended: the last error line of its output (`RuntimeError: …`).
    /// Absent for other outcomes and in run folders written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_by: Option<String>,
}

impl ProofRun {
    /// The speed as tables show it: `×0.97` by time per iteration, `×0.97 (alloc/s)` where it
    /// could only be compared by allocations per second, `?` when unknown.
    pub fn speed_text(&self) -> String {
        match (self.relative_speed, self.speed_basis) {
            (Some(speed), Some(SpeedBasis::TimePerIteration)) => format!("×{speed:.2}"),
            (Some(speed), _) => format!("×{speed:.2} (alloc/s)"),
            (None, _) => "?".to_owned(),
        }
    }
}

/// `run.json`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunManifest {
    pub schema: String,
    /// The command and its arguments, as given.
    pub command: Vec<String>,
    pub working_directory: String,
    /// Environment variables `vramscope run` set or changed for the job (name, value).
    pub environment_changes: Vec<(String, String)>,
    /// Unix milliseconds.
    pub started_ms: i64,
    pub ended_ms: i64,
    pub exit: RunExit,
    /// The job's process (the leader of its process group) and every descendant seen.
    pub pids: Vec<u32>,
    /// Files of the evidence, relative to the run folder: the timeline, the log, snapshots,
    /// the hook's progress records, the reports.
    pub files: Vec<String>,
    /// Whether any process of the job imported torch (the hook wrote its progress).
    pub torch_seen: bool,
    /// What could not be recorded, in words ("no NVIDIA driver: no timeline", "disk full: …").
    pub not_recorded: Vec<String>,
    /// vramscope's version, and the driver's when NVML answered.
    pub versions: Vec<(String, String)>,
    /// The `--prove` re-runs, in the order they ran.
    pub proof: Vec<ProofRun>,
}
