//! The NVML side of the checks: the facts to compare with CUDA's, and the memory-health counters
//! (ECC, remapped rows, retired pages) read before and after a memory test.

use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
use nvml_wrapper::{Device, Nvml};
use vramscope_core::model::checks::*;

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
