//! The NVML side of the checks: the facts to compare with CUDA's, and the memory-health counters
//! (ECC, remapped rows, retired pages) read before and after a memory test.

use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::{Device, Nvml};
use serde::Serialize;

/// NVML's view of a device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NvmlDeviceFacts {
    /// NVML index (PCI order; may differ from the CUDA ordinal).
    pub index: u32,
    /// Marketing name.
    pub name: String,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Installed memory (`nvmlDeviceGetMemoryInfo_v2` total).
    pub total_bytes: u64,
    /// Memory the driver keeps for itself (not usable by processes).
    pub reserved_bytes: u64,
    /// Memory used by processes and contexts (vramscope's own context included).
    pub used_bytes: u64,
    /// Free memory.
    pub free_bytes: u64,
    /// Current ECC mode; `None` when the GPU has no ECC.
    pub ecc_enabled: Option<bool>,
}

/// Driver-wide NVML facts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NvmlSystemFacts {
    /// Why NVML is unusable, if it is (e.g. `libnvidia-ml.so.1` missing).
    pub error: Option<String>,
    /// Driver version string, e.g. "580.159.04".
    pub driver_version: Option<String>,
    /// CUDA version the driver supports, encoded like `cuDriverGetVersion` (13000 = 13.0).
    pub cuda_driver_version_raw: Option<i32>,
}

/// Memory-health counters of one device; `None` where the GPU or driver does not support the
/// query. Read before and after a memory test: a change is evidence of failing memory even when
/// no value mismatched (ECC corrects or contains most faults).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MemoryHealthCounters {
    /// Corrected ECC errors since the driver loaded.
    pub ecc_volatile_corrected: Option<u64>,
    /// Uncorrected ECC errors since the driver loaded.
    pub ecc_volatile_uncorrected: Option<u64>,
    /// Corrected ECC errors over the GPU's lifetime.
    pub ecc_aggregate_corrected: Option<u64>,
    /// Uncorrected ECC errors over the GPU's lifetime.
    pub ecc_aggregate_uncorrected: Option<u64>,
    /// Rows remapped because of correctable errors (Ampere and newer).
    pub remapped_rows_correctable: Option<u64>,
    /// Rows remapped because of uncorrectable errors.
    pub remapped_rows_uncorrectable: Option<u64>,
    /// A row remapping waits for a GPU reset.
    pub remapping_pending: Option<bool>,
    /// A row remapping failed (the GPU should be replaced).
    pub remapping_failed: Option<bool>,
    /// Pages wait to be retired at the next driver load (pre-Ampere page retirement).
    pub pages_pending_retirement: Option<bool>,
}

impl MemoryHealthCounters {
    /// Describes every counter that changed between `self` (before) and `after`, e.g.
    /// "ECC volatile uncorrected: 0 → 2".
    pub fn changes_to(&self, after: &Self) -> Vec<String> {
        let counts = [
            (
                "ECC volatile corrected",
                self.ecc_volatile_corrected,
                after.ecc_volatile_corrected,
            ),
            (
                "ECC volatile uncorrected",
                self.ecc_volatile_uncorrected,
                after.ecc_volatile_uncorrected,
            ),
            (
                "ECC aggregate corrected",
                self.ecc_aggregate_corrected,
                after.ecc_aggregate_corrected,
            ),
            (
                "ECC aggregate uncorrected",
                self.ecc_aggregate_uncorrected,
                after.ecc_aggregate_uncorrected,
            ),
            (
                "remapped rows (correctable)",
                self.remapped_rows_correctable,
                after.remapped_rows_correctable,
            ),
            (
                "remapped rows (uncorrectable)",
                self.remapped_rows_uncorrectable,
                after.remapped_rows_uncorrectable,
            ),
        ];
        let flags = [
            (
                "row remapping pending",
                self.remapping_pending,
                after.remapping_pending,
            ),
            (
                "row remapping failed",
                self.remapping_failed,
                after.remapping_failed,
            ),
            (
                "pages pending retirement",
                self.pages_pending_retirement,
                after.pages_pending_retirement,
            ),
        ];
        fn change<T: PartialEq + ToString>(
            name: &str,
            before: Option<T>,
            after: Option<T>,
        ) -> Option<String> {
            let show =
                |value: Option<T>| value.map_or_else(|| "unknown".to_owned(), |v| v.to_string());
            (before != after).then(|| format!("{name}: {} → {}", show(before), show(after)))
        }
        counts
            .into_iter()
            .filter_map(|(name, before, after)| change(name, before, after))
            .chain(
                flags
                    .into_iter()
                    .filter_map(|(name, before, after)| change(name, before, after)),
            )
            .collect()
    }
}

/// Reads the driver-wide facts; never fails (errors end up in [`NvmlSystemFacts::error`]).
pub(crate) fn system_facts(nvml: &Result<Nvml, String>) -> NvmlSystemFacts {
    match nvml {
        Err(error) => NvmlSystemFacts {
            error: Some(error.clone()),
            ..Default::default()
        },
        Ok(nvml) => NvmlSystemFacts {
            error: None,
            driver_version: nvml.sys_driver_version().ok(),
            cuda_driver_version_raw: nvml.sys_cuda_driver_version().ok(),
        },
    }
}

/// Opens NVML, turning its error into text that names the library.
pub(crate) fn open() -> Result<Nvml, String> {
    Nvml::init().map_err(|error| format!("NVML (libnvidia-ml.so.1) could not be used: {error}"))
}

/// Finds the NVML device with this UUID.
pub(crate) fn device_by_uuid<'nvml>(
    nvml: &'nvml Nvml,
    uuid: &str,
) -> Result<Device<'nvml>, String> {
    nvml.device_by_uuid(uuid)
        .map_err(|error| format!("NVML does not know the device {uuid}: {error}"))
}

/// Reads NVML's facts of one device.
pub(crate) fn device_facts(device: &Device<'_>) -> Result<NvmlDeviceFacts, String> {
    let memory = device
        .memory_info()
        .map_err(|error| format!("NVML memory info failed: {error}"))?;
    Ok(NvmlDeviceFacts {
        index: device.index().unwrap_or(u32::MAX),
        name: device.name().unwrap_or_default(),
        uuid: device.uuid().unwrap_or_default(),
        total_bytes: memory.total,
        reserved_bytes: memory.reserved,
        used_bytes: memory.used,
        free_bytes: memory.free,
        ecc_enabled: device
            .is_ecc_enabled()
            .ok()
            .map(|mode| mode.currently_enabled),
    })
}

/// Reads the memory-health counters of one device.
pub(crate) fn health_counters(nvml: &Nvml, device: &Device<'_>) -> MemoryHealthCounters {
    let ecc = |error_type, counter| device.total_ecc_errors(error_type, counter).ok();
    let remapped = remapped_rows(nvml, device);
    MemoryHealthCounters {
        ecc_volatile_corrected: ecc(MemoryError::Corrected, EccCounter::Volatile),
        ecc_volatile_uncorrected: ecc(MemoryError::Uncorrected, EccCounter::Volatile),
        ecc_aggregate_corrected: ecc(MemoryError::Corrected, EccCounter::Aggregate),
        ecc_aggregate_uncorrected: ecc(MemoryError::Uncorrected, EccCounter::Aggregate),
        remapped_rows_correctable: remapped.map(|rows| u64::from(rows.0)),
        remapped_rows_uncorrectable: remapped.map(|rows| u64::from(rows.1)),
        remapping_pending: remapped.map(|rows| rows.2 != 0),
        remapping_failed: remapped.map(|rows| rows.3 != 0),
        pages_pending_retirement: device.are_pages_pending_retired().ok(),
    }
}

/// `nvmlDeviceGetRemappedRows`: (correctable, uncorrectable, pending, failure). nvml-wrapper has
/// no safe method for it, so the raw symbol is called; `None` when missing or unsupported.
fn remapped_rows(nvml: &Nvml, device: &Device<'_>) -> Option<(u32, u32, u32, u32)> {
    let symbol = nvml.lib().nvmlDeviceGetRemappedRows.as_ref().ok()?;
    let (mut correctable, mut uncorrectable, mut pending, mut failure) = (0, 0, 0, 0);
    // SAFETY: the handle belongs to `nvml`, which outlives the call; the out pointers are valid.
    let status = unsafe {
        symbol(
            device.handle(),
            &mut correctable,
            &mut uncorrectable,
            &mut pending,
            &mut failure,
        )
    };
    (status == 0).then_some((correctable, uncorrectable, pending, failure))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unchanged_counters_report_nothing() {
        let counters = MemoryHealthCounters {
            ecc_volatile_corrected: Some(3),
            remapping_pending: Some(false),
            ..Default::default()
        };
        assert!(counters.changes_to(&counters).is_empty());
    }

    #[test]
    fn every_changed_counter_is_reported_with_both_values() {
        let before = MemoryHealthCounters {
            ecc_volatile_uncorrected: Some(0),
            remapped_rows_correctable: Some(1),
            remapping_pending: Some(false),
            ..Default::default()
        };
        let after = MemoryHealthCounters {
            ecc_volatile_uncorrected: Some(2),
            remapped_rows_correctable: Some(1),
            remapping_pending: Some(true),
            pages_pending_retirement: Some(false),
            ..Default::default()
        };
        assert_eq!(
            before.changes_to(&after),
            [
                "ECC volatile uncorrected: 0 → 2",
                "row remapping pending: false → true",
                "pages pending retirement: unknown → false",
            ]
        );
    }

    #[test]
    fn missing_nvml_is_an_error_value_not_a_panic() {
        let facts = system_facts(&Err("NVML (libnvidia-ml.so.1) could not be used: x".into()));
        assert!(facts.error.is_some_and(|e| e.contains("libnvidia-ml")));
        assert_eq!(facts.driver_version, None);
    }
}
