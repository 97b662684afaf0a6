//! Discrete things that happened: Xid errors, OOMs, ECC changes, lost GPUs, notes.
//!
//! Threshold crossings are not events: the threshold is a view setting, so crossings are derived
//! from the samples by `analysis`.

use serde::{Deserialize, Serialize};

use super::UnixMs;

/// Something that happened at one instant, on one device or on the whole machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub t_ms: UnixMs,
    /// `None` for machine-wide events (annotations, driver errors).
    pub device_index: Option<u32>,
    pub kind: EventKind,
}

/// The kinds of events a timeline marks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum EventKind {
    /// An NVML Xid critical error (event data carries the Xid number).
    Xid {
        /// The Xid number (see `diagnose::xid` for what it means).
        code: u64,
        /// MIG (GPU instance, compute instance) that raised it, when reported.
        mig_instance: Option<(u32, u32)>,
    },
    /// Another NVML critical event (ECC storm, DRAM retirement, GPU unavailable, ...), by name.
    Critical {
        /// What NVML reported, in words, e.g. "double-bit ECC error".
        name: String,
        /// NVML's raw event data for that type.
        data: u64,
    },
    /// A process ran out of memory (observed in a log, an allocator snapshot, or simulated).
    OutOfMemory {
        pid: Option<u32>,
        requested_bytes: Option<u64>,
        detail: String,
    },
    /// An ECC counter went up between two readings.
    EccIncrease {
        corrected_delta: u64,
        uncorrected_delta: u64,
    },
    /// The device stopped answering (NVML `GPU_IS_LOST` or similar).
    DeviceLost { detail: String },
    /// A device that was lost answers again (after a reset or a driver recovery); its samples
    /// resume from here.
    DeviceReturned,
    /// A user's note.
    Annotation { text: String },
}

impl EventKind {
    /// Short label for markers and lists.
    pub fn short_label(&self) -> String {
        match self {
            EventKind::Xid { code, .. } => format!("Xid {code}"),
            EventKind::Critical { name, .. } => name.clone(),
            EventKind::OutOfMemory { .. } => "OOM".to_owned(),
            EventKind::EccIncrease { .. } => "ECC".to_owned(),
            EventKind::DeviceLost { .. } => "GPU lost".to_owned(),
            EventKind::DeviceReturned => "GPU back".to_owned(),
            EventKind::Annotation { text } => text.clone(),
        }
    }
}
