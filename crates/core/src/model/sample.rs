//! Per-tick readings: memory and counters per device, processes per device, slow-tier health.

use serde::{Deserialize, Serialize};

use super::{Event, FieldStatus, UnixMs};

/// Device memory with NVML v2 semantics: `used` excludes `reserved` (driver/firmware), and
/// `used + reserved + free == total` on current drivers. Tools that show v1 `used` fold `reserved`
/// into `used`, which is why they disagree; we keep all four.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryReading {
    /// Memory held by processes' allocations and contexts (v2: without the driver's reserve).
    pub used_bytes: u64,
    /// Memory the driver and firmware keep for themselves.
    pub reserved_bytes: u64,
    /// Memory still available to allocations.
    pub free_bytes: u64,
    /// Installed memory as NVML reports it.
    pub total_bytes: u64,
}

impl MemoryReading {
    /// Memory not available to applications: used plus driver-reserved. This is what
    /// `nvidia-smi`'s "Memory-Usage" column shows on current drivers.
    pub fn occupied_bytes(&self) -> u64 {
        self.used_bytes.saturating_add(self.reserved_bytes)
    }

    /// `occupied / total` in [0, 1]; 0 when total is unknown.
    pub fn occupied_fraction(&self) -> f64 {
        if self.total_bytes == 0 {
            0.0
        } else {
            self.occupied_bytes() as f64 / self.total_bytes as f64
        }
    }
}

/// Fast-tier reading of one device at one instant. `None` means the field was not read (not
/// supported or failed; the source reports which through [`FieldStatus`]). A capture stores these
/// by column ([`super::DeviceSeries`]); the struct is what sources produce and views read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceSample {
    pub t_ms: UnixMs,
    pub device_index: u32,
    pub memory: Option<MemoryReading>,
    pub gpu_util_pct: Option<u32>,
    pub mem_util_pct: Option<u32>,
    pub temperature_c: Option<u32>,
    pub power_mw: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    /// NVML clock-event (throttle) reason bits, `nvmlClocksEventReason*`.
    pub throttle_reasons: Option<u64>,
    /// Volatile ECC counts (since the driver loaded); cheap, so read every tick.
    pub ecc_corrected_volatile: Option<u64>,
    pub ecc_uncorrected_volatile: Option<u64>,
}

/// Slow-tier reading: counters whose NVML calls cost tens to hundreds of microseconds, or that
/// change rarely.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthSample {
    pub t_ms: UnixMs,
    pub device_index: u32,
    pub ecc_corrected_aggregate: Option<u64>,
    pub ecc_uncorrected_aggregate: Option<u64>,
    /// Retired pages due to single-bit and double-bit errors (pre-Ampere; `None` on H100/H200).
    pub retired_pages_sbe: Option<u64>,
    pub retired_pages_dbe: Option<u64>,
    pub retired_pages_pending: Option<bool>,
    /// Row remapping (Ampere and newer).
    pub remapped_rows_correctable: Option<u64>,
    pub remapped_rows_uncorrectable: Option<u64>,
    pub remapped_rows_pending: Option<bool>,
    pub remapped_rows_failure: Option<bool>,
    pub bar1_used_bytes: Option<u64>,
    pub bar1_total_bytes: Option<u64>,
    pub pcie_replay_count: Option<u64>,
    pub persistence_mode: Option<bool>,
}

/// What kind of context a process holds on a GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ProcessKind {
    #[default]
    Compute,
    Graphics,
    /// Listed by both the compute and the graphics query.
    ComputeAndGraphics,
}

impl ProcessKind {
    /// The lower-case word shown in tables and written to text reports.
    pub fn label(self) -> &'static str {
        match self {
            ProcessKind::Compute => "compute",
            ProcessKind::Graphics => "graphics",
            ProcessKind::ComputeAndGraphics => "compute+graphics",
        }
    }
}

/// One process's use of one GPU at one instant. NVML reports the process's whole footprint on the
/// device (its allocator's reserved memory plus CUDA context), not its live tensors.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessSample {
    pub t_ms: UnixMs,
    pub device_index: u32,
    pub pid: u32,
    /// Process name from `/proc/<pid>/comm` or the command line; empty when not visible (for
    /// example inside a container without the host PID namespace).
    pub name: String,
    /// `None` when the driver does not report it (NVML_VALUE_NOT_AVAILABLE).
    pub used_bytes: Option<u64>,
    pub kind: ProcessKind,
    /// (GPU instance id, compute instance id) when MIG is enabled.
    pub mig_instance: Option<(u32, u32)>,
}

/// Everything one poll of a source produced. The sampling thread sends batches to the UI and to
/// the recorder; a capture is a sequence of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SampleBatch {
    pub devices: Vec<DeviceSample>,
    /// Complete process list per device for this tick (an empty list means "no processes").
    /// Only present on ticks where processes were polled.
    pub processes: Option<Vec<ProcessSample>>,
    pub health: Vec<HealthSample>,
    pub events: Vec<Event>,
    /// Field states that changed since the previous batch (sources report changes only).
    pub field_changes: Vec<FieldStatus>,
}

impl SampleBatch {
    /// True when the poll produced nothing at all.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
            && self.processes.is_none()
            && self.health.is_empty()
            && self.events.is_empty()
            && self.field_changes.is_empty()
    }
}
