//! What a device is (facts that do not change while it runs) and which of its fields could be read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Facts about one GPU that are read once (or rarely) rather than every tick.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceFacts {
    /// NVML index (0-based), stable for the life of a capture.
    pub index: u32,
    /// Marketing name, e.g. "NVIDIA H200". Simulated devices say so in the name.
    pub name: String,
    /// `GPU-xxxxxxxx-...` UUID; empty when unknown.
    pub uuid: String,
    /// PCI bus id as NVML prints it, e.g. `00000000:19:00.0`; empty when unknown.
    pub pci_bus_id: String,
    /// Framebuffer size as reported by NVML `total` (v2 semantics).
    pub memory_total_bytes: u64,
    /// BAR1 aperture size, when known.
    pub bar1_total_bytes: Option<u64>,
    /// Persistence mode at the time the facts were read.
    pub persistence_mode: Option<bool>,
    /// Whether ECC is enabled (current mode), when known.
    pub ecc_enabled: Option<bool>,
    /// Compute capability (major, minor), when known.
    pub compute_capability: Option<(u32, u32)>,
    /// Whether this device is part of a simulated (demo) machine.
    pub simulated: bool,
    /// The machine the GPU is in, for captures that hold several machines (a fleet read from
    /// Prometheus); empty when it is the capture's own host ([`super::CaptureMeta::host`]).
    #[serde(default)]
    pub host: String,
    /// Labels the GPU carried where it came from (Prometheus: `gpu`, `UUID`, `modelName`, `pod`,
    /// `namespace`, ...), so a fleet can be sorted and filtered by them; empty for local GPUs.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl DeviceFacts {
    /// How findings, tables and the UI name the GPU: `GPU 3` on one machine, `node-a GPU 3` in a
    /// fleet (the host's own index of the GPU, from its `gpu` label, not the capture's index).
    pub fn label(&self) -> String {
        if self.host.is_empty() {
            return format!("GPU {}", self.index);
        }
        match self.labels.get("gpu") {
            Some(gpu) => format!("{} GPU {gpu}", self.host),
            None => format!("{} GPU {}", self.host, self.index),
        }
    }
}

/// Whether a field could be read from a device, and if not, why. The UI shows this per field, so
/// that "not supported on this GPU" and "permission denied" look different from a zero.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum FieldState {
    /// The last read succeeded.
    Ok,
    /// The device or driver does not support this field (not an error).
    NotSupported,
    /// The read failed; the message says why (permission, GPU lost, timeout, ...).
    Failed(String),
}

/// The state of one named field on one device, as reported by a source.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldStatus {
    pub device_index: u32,
    /// Short stable name of the field, e.g. `"memory"`, `"temperature"`, `"remapped_rows"`.
    pub field: String,
    pub state: FieldState,
}

/// Stable field names used in [`FieldStatus::field`]. The UI and reports key on these strings;
/// sources (NVML, the fault-injection layer) report under them.
pub mod field_name {
    pub const MEMORY: &str = "memory";
    pub const UTILIZATION: &str = "utilization";
    pub const TEMPERATURE: &str = "temperature";
    pub const POWER: &str = "power";
    pub const SM_CLOCK: &str = "sm_clock";
    pub const MEM_CLOCK: &str = "mem_clock";
    pub const THROTTLE_REASONS: &str = "throttle_reasons";
    pub const ECC_VOLATILE: &str = "ecc_volatile";
    pub const COMPUTE_PROCESSES: &str = "compute_processes";
    pub const GRAPHICS_PROCESSES: &str = "graphics_processes";
    pub const ECC_AGGREGATE: &str = "ecc_aggregate";
    pub const RETIRED_PAGES: &str = "retired_pages";
    pub const RETIRED_PAGES_PENDING: &str = "retired_pages_pending";
    pub const REMAPPED_ROWS: &str = "remapped_rows";
    pub const BAR1: &str = "bar1";
    pub const PCIE_REPLAY: &str = "pcie_replay";
    pub const PERSISTENCE_MODE: &str = "persistence_mode";
    /// Xid/critical event delivery (registration with the event set).
    pub const EVENTS: &str = "events";

    /// Every field a device reports; a lost GPU marks all of them failed.
    pub const ALL: &[&str] = &[
        MEMORY,
        UTILIZATION,
        TEMPERATURE,
        POWER,
        SM_CLOCK,
        MEM_CLOCK,
        THROTTLE_REASONS,
        ECC_VOLATILE,
        COMPUTE_PROCESSES,
        GRAPHICS_PROCESSES,
        ECC_AGGREGATE,
        RETIRED_PAGES,
        RETIRED_PAGES_PENDING,
        REMAPPED_ROWS,
        BAR1,
        PCIE_REPLAY,
        PERSISTENCE_MODE,
        EVENTS,
    ];
}
