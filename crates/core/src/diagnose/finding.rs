//! The findings model: what the doctor concluded, with the numbers behind it and what to do.
//!
//! A [`Diagnosis`] is an ordered list of [`Finding`]s (the first is the primary cause). Every
//! number a finding relies on is an [`Evidence`] item that carries its unit and where it came from
//! (a log line, a capture, a device, a snapshot), so a reader can check it. Everything here is
//! plain data with serde, so reports and `--json` print the same structure.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::analysis::categories::MemoryBreakdown;
use crate::analysis::replay::WhatIfReport;
use crate::analysis::timetravel::AllocatorState;
use crate::model::allocator::AllocatorSnapshot;
use crate::model::{Capture, DeviceFacts};

/// What kind of problem (or non-problem) a finding is about. Serialized in kebab-case
/// (`other-process`, `memory-cap`, ...), which is the stable vocabulary of the JSON report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    /// Another process holds most of the memory the failing process needed.
    OtherProcess,
    /// A per-process memory fraction cap (`set_per_process_memory_fraction`, JAX/TF fractions).
    MemoryCap,
    /// The work simply needs more memory than the device has.
    Capacity,
    /// Enough memory is cached by the allocator but not in a block large enough.
    Fragmentation,
    /// Memory grows steadily over time or steps.
    Leak,
    /// The driver is too old for the CUDA toolkit in use (or the combination is unsupported).
    DriverMismatch,
    /// ECC errors (uncorrectable or a high rate of corrected ones).
    Ecc,
    /// Row remapping pending or failed (Ampere and newer), retired pages (older GPUs).
    RowRemap,
    /// An Xid error from the driver.
    Xid,
    /// Thermal or power throttling, or temperatures near the limit.
    Thermal,
    /// A CUDA error that is not one of the above (illegal address, device assert, launch failure).
    CudaError,
    /// cuDNN / cuBLAS failures.
    Library,
    /// The evidence cannot settle a question it raises (a recording too short to tell a leak
    /// from a warm-up): said instead of "healthy".
    Inconclusive,
    /// Nothing wrong was found in the evidence given.
    Healthy,
}

impl Category {
    /// Whether a finding of this category explains an out-of-memory error (what `vramscope
    /// run` takes as "the job ran out of memory", and what a fix proven by a re-run is filed
    /// under).
    pub fn is_out_of_memory_cause(self) -> bool {
        matches!(
            self,
            Category::OtherProcess
                | Category::MemoryCap
                | Category::Capacity
                | Category::Fragmentation
                | Category::Leak
        )
    }

    /// The kebab-case name used in JSON and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::OtherProcess => "other-process",
            Category::MemoryCap => "memory-cap",
            Category::Capacity => "capacity",
            Category::Fragmentation => "fragmentation",
            Category::Leak => "leak",
            Category::DriverMismatch => "driver-mismatch",
            Category::Ecc => "ecc",
            Category::RowRemap => "row-remap",
            Category::Xid => "xid",
            Category::Thermal => "thermal",
            Category::CudaError => "cuda-error",
            Category::Library => "library",
            Category::Inconclusive => "inconclusive",
            Category::Healthy => "healthy",
        }
    }
}

/// How bad a finding is. Ordered so that `Critical` sorts first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// The job failed or the hardware needs attention now.
    Critical,
    /// Likely to cause trouble; worth acting on.
    Warning,
    /// For information (including "healthy").
    Info,
}

impl Severity {
    /// The lower-case name used in JSON reports and CLI output.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// Where a piece of evidence came from, precisely enough to find it again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum EvidenceSource {
    /// A line of a log file (1-based line number).
    LogLine { file: String, line: usize },
    /// A `.vramcap` capture (or the live session), on one device, at one time when relevant.
    Capture {
        file: String,
        device_index: Option<u32>,
        t_ms: Option<i64>,
        /// How the capture names the device when its index alone would mislead: a fleet's
        /// `node-a GPU 3` (host and the host's own GPU index, [`crate::model::DeviceFacts::label`]),
        /// where `device_index` is only the capture's position of that GPU. `None` on one machine.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gpu: Option<String>,
    },
    /// A PyTorch allocator snapshot.
    Snapshot {
        file: String,
        device_index: Option<u32>,
    },
    /// Something the user told us (e.g. the CUDA version a framework was built for).
    User { what: String },
    /// Computed from other evidence items of the same finding.
    Derived,
}

impl EvidenceSource {
    /// Evidence from device `device_index` (or the whole capture) of `capture`, read from `file`,
    /// at `t_ms`: a GPU of a fleet (a device with a host) is named by [`DeviceFacts::label`], as
    /// the fleet view names it (`node-a GPU 3`), never by the capture's own index.
    pub fn capture(
        file: &str,
        capture: &Capture,
        device_index: Option<u32>,
        t_ms: Option<i64>,
    ) -> Self {
        let gpu = device_index
            .and_then(|d| capture.devices.iter().find(|facts| facts.index == d))
            .filter(|facts| !facts.host.is_empty())
            .map(DeviceFacts::label);
        EvidenceSource::Capture {
            file: file.to_owned(),
            device_index,
            t_ms,
            gpu,
        }
    }

    /// One-line human description, e.g. `train.log line 42`.
    pub fn describe(&self) -> String {
        match self {
            EvidenceSource::LogLine { file, line } => format!("{file} line {line}"),
            EvidenceSource::Capture {
                file,
                device_index,
                t_ms,
                gpu,
            } => {
                let mut s = file.clone();
                match (gpu, device_index) {
                    (Some(gpu), _) => s.push_str(&format!(", {gpu}")),
                    (None, Some(d)) => s.push_str(&format!(", GPU {d}")),
                    (None, None) => {}
                }
                if let Some(t) = t_ms {
                    s.push_str(&format!(", {}", format_utc_ms(*t)));
                }
                s
            }
            EvidenceSource::Snapshot { file, device_index } => match device_index {
                Some(d) => format!("{file}, GPU {d}"),
                None => file.clone(),
            },
            EvidenceSource::User { what } => format!("given by the user ({what})"),
            EvidenceSource::Derived => "computed from the evidence above".to_owned(),
        }
    }
}

/// Formats Unix milliseconds as an ISO-8601 UTC timestamp (`2026-11-30T08:30:00Z`).
pub fn format_utc_ms(t_ms: i64) -> String {
    let utc = crate::model::UtcDateTime::from_unix_ms(t_ms);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second
    )
}

/// The unit of an evidence value; serialized in kebab-case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Unit {
    Bytes,
    BytesPerSecond,
    Seconds,
    Percent,
    Celsius,
    Count,
    /// A code or a version (Xid number, CUDA error code, driver version as a number).
    Code,
    /// No number; the evidence is the text itself.
    Text,
}

/// One fact a finding relies on: a named value with its unit and its origin.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// What the value is, e.g. "requested", "free on the device", "other process 1234".
    pub label: String,
    /// The number in the unit below (`None` for text-only evidence).
    pub value: Option<f64>,
    pub unit: Unit,
    /// The value formatted for people, e.g. `27.86 GiB` or `Xid 79`.
    pub display: String,
    pub source: EvidenceSource,
}

impl Evidence {
    /// A byte count, shown in binary units.
    pub fn bytes(label: impl Into<String>, bytes: u64, source: EvidenceSource) -> Self {
        Evidence {
            label: label.into(),
            value: Some(bytes as f64),
            unit: Unit::Bytes,
            display: crate::model::format_bytes(bytes),
            source,
        }
    }

    /// A number with a unit and a caller-made display string.
    pub fn number(
        label: impl Into<String>,
        value: f64,
        unit: Unit,
        display: impl Into<String>,
        source: EvidenceSource,
    ) -> Self {
        Evidence {
            label: label.into(),
            value: Some(value),
            unit,
            display: display.into(),
            source,
        }
    }

    /// A count (errors, occurrences, pages), shown as the plain number.
    pub fn count(label: impl Into<String>, count: u64, source: EvidenceSource) -> Self {
        Evidence::number(label, count as f64, Unit::Count, count.to_string(), source)
    }

    /// Text evidence (a quoted log line, a driver version string).
    pub fn text(label: impl Into<String>, text: impl Into<String>, source: EvidenceSource) -> Self {
        Evidence {
            label: label.into(),
            value: None,
            unit: Unit::Text,
            display: text.into(),
            source,
        }
    }
}

/// One thing to do about a finding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    /// Stable identifier (e.g. `reduce-batch-size`, `expandable-segments`) for scripts and tests.
    pub id: String,
    /// Short imperative, e.g. "Halve the batch size".
    pub title: String,
    /// What it should change, with an estimate when the data allows ("frees about 12 GiB").
    pub expected_effect: String,
    /// The exact code, command or configuration to apply (may be several lines).
    pub action: String,
    /// Estimated bytes this saves or makes available, when it can be computed.
    pub estimated_saving_bytes: Option<u64>,
    /// Whether the recommendation was tried before it was shown (a what-if replay of the
    /// allocation history) and what came out; `None` where no check applies (hardware advice).
    pub verification: Option<Verification>,
}

impl Recommendation {
    /// "proven by replay" or "unverified", for reports; `None` where no check applies.
    pub fn verification_label(&self) -> Option<&'static str> {
        self.verification.as_ref().map(|v| match v.status {
            VerificationStatus::ProvenByRun => "proven by a real run",
            VerificationStatus::Proven => "proven by replay",
            VerificationStatus::PassesFailingRequest => {
                "passes the failing request; the rest of the step is unknown"
            }
            VerificationStatus::Unverified => "unverified",
        })
    }

    /// Why it is unverified and how to verify it, when it is (a proven recommendation's effect
    /// already starts with what the replay showed).
    pub fn unverified_detail(&self) -> Option<&str> {
        self.verification
            .as_ref()
            .filter(|v| v.status == VerificationStatus::Unverified)
            .map(|v| v.detail.as_str())
    }
}

/// How far a recommendation is proven.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VerificationStatus {
    /// The job itself, re-run under the change (`vramscope run --prove`), got past its original
    /// failure: stronger than a replay.
    ProvenByRun,
    /// A replay of the recorded allocations under the change went past the recorded failure
    /// (when there was one) and through at least one completed iteration of recorded work after
    /// it.
    Proven,
    /// A replay served the failing request under the change, but the trace ends inside the step
    /// that failed (a snapshot taken at the failure): what the rest of that step and the next ones
    /// need is unknown, so it is not proof that the job gets through. `detail` says what settles
    /// it. Serialized `passes-failing-request`.
    PassesFailingRequest,
    /// Not tried: no allocation history, the replay could not be trusted, or the change is not
    /// one a replay can try. `detail` says which and how to verify it.
    Unverified,
}

/// The outcome of checking a recommendation, for people and scripts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verification {
    pub status: VerificationStatus,
    /// What the check showed ("replayed: peak 61.2 GiB of 64.0 GiB allowed"), or why there was
    /// none and how to run one.
    pub detail: String,
}

impl Verification {
    /// A change the replay tried and that did not run out of memory.
    pub fn proven(detail: impl Into<String>) -> Self {
        Verification {
            status: VerificationStatus::Proven,
            detail: detail.into(),
        }
    }

    /// A change the replay showed serving the failing request, in a trace that ends inside the
    /// step that failed (see [`VerificationStatus::PassesFailingRequest`]).
    pub fn passes_failing_request(detail: impl Into<String>) -> Self {
        Verification {
            status: VerificationStatus::PassesFailingRequest,
            detail: detail.into(),
        }
    }

    /// A change a real re-run of the job got past its original failure with.
    pub fn proven_by_run(detail: impl Into<String>) -> Self {
        Verification {
            status: VerificationStatus::ProvenByRun,
            detail: detail.into(),
        }
    }

    /// A change not tried, with the reason and how to verify it.
    pub fn unverified(detail: impl Into<String>) -> Self {
        Verification {
            status: VerificationStatus::Unverified,
            detail: detail.into(),
        }
    }
}

/// Which guided wizard continues the investigation of a finding or a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Wizard {
    OutOfMemory,
    Fragmentation,
    Leak,
    HardwareAndDriver,
}

impl Wizard {
    /// The wizard's title as the UI and reports show it.
    pub fn label(self) -> &'static str {
        match self {
            Wizard::OutOfMemory => "Out of memory",
            Wizard::Fragmentation => "Fragmentation",
            Wizard::Leak => "Leak",
            Wizard::HardwareAndDriver => "Hardware and driver",
        }
    }
}

/// One conclusion of the doctor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub category: Category,
    pub severity: Severity,
    /// One line, with the key number in it.
    pub title: String,
    pub evidence: Vec<Evidence>,
    /// Why the evidence leads to this conclusion, in a few sentences.
    pub explanation: String,
    /// Ranked: the first is the one to try first.
    pub recommendations: Vec<Recommendation>,
    /// The wizard that digs deeper into this kind of problem.
    pub wizard: Option<Wizard>,
}

impl Finding {
    /// Starts a finding with its category, severity and one-line title; the evidence, the
    /// explanation, the recommendations and the wizard follow with the methods below, so a rule
    /// reads as what it concludes rather than as a struct literal.
    pub fn new(category: Category, severity: Severity, title: impl Into<String>) -> Self {
        Finding {
            category,
            severity,
            title: title.into(),
            evidence: Vec::new(),
            explanation: String::new(),
            recommendations: Vec::new(),
            wizard: None,
        }
    }

    /// Adds evidence items (after those already there).
    pub fn with_evidence(mut self, evidence: impl IntoIterator<Item = Evidence>) -> Self {
        self.evidence.extend(evidence);
        self
    }

    /// Sets why the evidence leads to this conclusion.
    pub fn explained(mut self, explanation: impl Into<String>) -> Self {
        self.explanation = explanation.into();
        self
    }

    /// Adds recommendations, ranked: the first is the one to try first.
    pub fn recommend(mut self, recommendations: impl IntoIterator<Item = Recommendation>) -> Self {
        self.recommendations.extend(recommendations);
        self
    }

    /// Names the wizard that digs deeper into this kind of problem.
    pub fn in_wizard(mut self, wizard: Wizard) -> Self {
        self.wizard = Some(wizard);
        self
    }
}

/// A short description of one piece of input the diagnosis looked at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputSummary {
    /// `log`, `capture`, `snapshot` or `live`.
    pub kind: String,
    /// File name (or `live`).
    pub name: String,
    /// What was found in it, e.g. "3 recognised lines of 1200".
    pub summary: String,
}

/// The result of running every rule over the evidence: ordered findings, primary cause first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub findings: Vec<Finding>,
    pub inputs: Vec<InputSummary>,
    /// True when any input came from the simulated demo machine.
    pub simulated: bool,
    /// Final allocator states of the snapshots examined, one per snapshot and device, for the
    /// report's block map. Figures, not findings: not serialized.
    #[serde(skip)]
    pub allocator_states: Vec<NamedAllocatorState>,
    /// What-if replays of the snapshots with an allocation history, one per snapshot and
    /// device, for the report's table of predictions. Figures, not findings: not serialized
    /// here (the JSON report writes them itself).
    #[serde(skip)]
    pub what_if: Vec<NamedWhatIf>,
    /// Where the live memory went, by category, in each snapshot with an allocation history
    /// (one per snapshot and device), for the reports' bars. Figures, not findings: not
    /// serialized here (the JSON report writes them itself, `memory_categories`).
    #[serde(skip)]
    pub memory_categories: Vec<NamedBreakdown>,
}

/// Where one snapshot device's live memory went, by category, with the snapshot's name.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedBreakdown {
    /// The snapshot's file name.
    pub name: String,
    pub device_index: u32,
    pub breakdown: Arc<MemoryBreakdown>,
}

/// A what-if replay of one snapshot device's history (`analysis::replay::what_if` with the
/// sweep of candidate settings), with the snapshot its stacks refer to.
#[derive(Clone)]
pub struct NamedWhatIf {
    /// The snapshot's file name.
    pub name: String,
    pub snapshot: Arc<AllocatorSnapshot>,
    pub report: Arc<WhatIfReport>,
}

/// The name and the replay; the snapshot itself (every block and trace event) is left out, as
/// [`PartialEq`] leaves it out.
impl std::fmt::Debug for NamedWhatIf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedWhatIf")
            .field("name", &self.name)
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

/// Equal when the replays are (the snapshot is the same file when the name is).
impl PartialEq for NamedWhatIf {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.report == other.report
    }
}

/// One device's allocator state at the end of a snapshot, with the snapshot's name.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedAllocatorState {
    /// The snapshot's file name.
    pub name: String,
    pub state: Arc<AllocatorState>,
}

impl Diagnosis {
    /// The primary finding (the first), if any.
    pub fn primary(&self) -> Option<&Finding> {
        self.findings.first()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_fills_every_part_in_order() {
        use crate::diagnose::recommend;
        let finding = Finding::new(Category::Ecc, Severity::Warning, "GPU 0 corrects errors")
            .with_evidence([Evidence::count("corrected", 40, EvidenceSource::Derived)])
            .with_evidence([Evidence::text("flag", "set", EvidenceSource::Derived)])
            .explained("An early sign of failing memory.")
            .recommend([recommend::check_hardware()])
            .recommend([recommend::reset_gpu("The error state is cleared.")])
            .in_wizard(Wizard::HardwareAndDriver);
        assert_eq!(finding.title, "GPU 0 corrects errors");
        let labels: Vec<&str> = finding.evidence.iter().map(|e| e.label.as_str()).collect();
        assert_eq!(labels, ["corrected", "flag"]);
        assert_eq!(finding.evidence[0].value, Some(40.0));
        assert_eq!(finding.evidence[0].display, "40");
        assert_eq!(finding.evidence[0].unit, Unit::Count);
        assert_eq!(finding.explanation, "An early sign of failing memory.");
        let ids: Vec<&str> = finding
            .recommendations
            .iter()
            .map(|r| r.id.as_str())
            .collect();
        assert_eq!(ids, ["check-hardware", "reset-gpu"]);
        assert_eq!(finding.wizard, Some(Wizard::HardwareAndDriver));
        let bare = Finding::new(Category::Healthy, Severity::Info, "fine");
        assert!(bare.evidence.is_empty() && bare.recommendations.is_empty());
        assert_eq!(bare.wizard, None);
    }
}
