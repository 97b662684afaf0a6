//! What a device is (facts that do not change while it runs) and which of its fields could be read.

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
