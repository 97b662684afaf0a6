//! Diagnosis: findings, rules, the wizards' logic and the knowledge tables they draw on (Xid
//! codes, CUDA errors, CUDA/driver compatibility, health thresholds). Functions over the
//! model (plus a log-file reader); nothing here touches NVML or egui, so the same diagnosis runs live, on a reopened
//! capture and in the web viewer.
//!
//! Data flows in one direction: evidence (logs, captures, snapshot facts) → rules → an ordered
//! [`finding::Diagnosis`], primary cause first.

pub mod alerts;
pub mod categories;
pub mod compare;
pub mod compat;
pub mod cuda_errors;
pub mod engine;
pub mod finding;
pub mod fleet;
pub mod fragmentation;
pub mod gpu_checks;
pub mod growth;
pub mod hardware;
pub mod headroom;
pub mod leak;
pub mod log;
pub mod oom;
pub mod proof;
pub mod real_runs;
pub mod recommend;
pub mod size;
pub mod snapshot;
pub mod step_reach;
pub mod thresholds;
pub mod trace_events;
pub mod trajectory;
pub mod xid;

pub use engine::{DiagnosisInput, NamedCapture, OomComposition, diagnose, oom_composition};
pub use finding::{
    Category, Diagnosis, Evidence, EvidenceSource, Finding, Recommendation, Severity, Wizard,
};
pub(crate) use hardware::{xid_category, xid_meaning};
