//! Diagnosis: findings, the rules that produce them, the log analyzer and knowledge tables
//! (CUDA errors, CUDA ↔ driver compatibility, Xid codes, health thresholds).
//!
//! Data flows in one direction: evidence (logs, captures, snapshot facts) → rules → an ordered
//! [`finding::Diagnosis`]. Nothing here knows about egui or the file formats of reports.

pub mod compat;
pub mod cuda_errors;
pub mod engine;
pub mod finding;
pub mod hardware;
pub mod leak;
pub mod log;
pub mod oom;
pub mod recommend;
pub mod size;
pub mod thresholds;

pub use engine::{DiagnosisInput, NamedCapture, diagnose};
pub use finding::{
    Category, Diagnosis, Evidence, EvidenceSource, Finding, Recommendation, Severity, Wizard,
};
pub(crate) use hardware::{xid_category, xid_meaning};
