//! What the CUDA driver says about a device, and how that compares with NVML's view.

use super::driver_error;
use std::sync::Arc;
use vramscope_core::model::checks::*;

use cudarc::driver::{CudaContext, result, sys};

/// Opens the primary context of `ordinal` (it costs about half a GiB of device memory while it
/// lives), checking the ordinal first so that a wrong one gets a
/// clear message.
pub(crate) fn open_context(ordinal: usize) -> Result<Arc<CudaContext>, CudaError> {
    result::init().map_err(|error| driver_error("cuInit", error))?;
    let count =
        result::device::get_count().map_err(|error| driver_error("cuDeviceGetCount", error))?;
    let count = usize::try_from(count).unwrap_or(0);
    if ordinal >= count {
        return Err(CudaError::NoSuchDevice { ordinal, count });
    }
    CudaContext::new(ordinal).map_err(|error| driver_error("cuDevicePrimaryCtxRetain", error))
}

/// Reads the facts of the device behind an open context.
pub(crate) fn read_facts_with_context(
    context: &Arc<CudaContext>,
) -> Result<CudaDeviceFacts, CudaError> {
    use sys::CUdevice_attribute as Attribute;
    let attribute = |which: Attribute| {
        context
            .attribute(which)
            .map_err(|error| driver_error("cuDeviceGetAttribute", error))
    };
    let non_negative = |value: i32| u32::try_from(value).unwrap_or(0);
    let name = context
        .name()
        .map_err(|error| driver_error("cuDeviceGetName", error))?;
    let uuid = context
        .uuid()
        .map_err(|error| driver_error("cuDeviceGetUuid", error))?;
    let total_bytes = context
        .total_mem()
        .map_err(|error| driver_error("cuDeviceTotalMem", error))?;
    let (free_bytes, _) = context
        .mem_get_info()
        .map_err(|error| driver_error("cuMemGetInfo", error))?;
    let pci_bus_id = format!(
        "{:04x}:{:02x}:{:02x}.0",
        attribute(Attribute::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
        attribute(Attribute::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
        attribute(Attribute::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?
    );
    Ok(CudaDeviceFacts {
        ordinal: context.ordinal(),
        name,
        uuid: format_uuid(&uuid.bytes.map(|byte| byte as u8)),
        pci_bus_id,
        compute_capability_major: non_negative(attribute(
            Attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        )?),
        compute_capability_minor: non_negative(attribute(
            Attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
        )?),
        ecc_enabled: attribute(Attribute::CU_DEVICE_ATTRIBUTE_ECC_ENABLED)? != 0,
        total_bytes: total_bytes as u64,
        free_bytes: free_bytes as u64,
        memory_bus_width_bits: non_negative(attribute(
            Attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH,
        )?),
        multiprocessor_count: non_negative(attribute(
            Attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )?),
        l2_cache_bytes: u64::from(non_negative(attribute(
            Attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
        )?)),
        memory_clock_khz: non_negative(attribute(
            Attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE,
        )?),
    })
}

/// Formats the 16 UUID bytes the way NVML and nvidia-smi print them.
pub(crate) fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// How far CUDA's total may be from NVML's total minus its reserved memory before it counts as
/// a disagreement: the driver's own bookkeeping moves it by a few MiB between versions.
const TOTAL_TOLERANCE_BYTES: u64 = 64 << 20;

/// Compares the fields both CUDA and NVML report for the same device.
pub fn compare_with_nvml(cuda: &CudaDeviceFacts, nvml: &NvmlDeviceFacts) -> Vec<Comparison> {
    let mut comparisons = vec![Comparison {
        field: "name".into(),
        cuda: cuda.name.clone(),
        nvml: nvml.name.clone(),
        agrees: cuda.name == nvml.name,
        note: "both come from the same driver; a difference means the two libraries do not belong to the same driver installation".into(),
    }];
    let usable_total = nvml.total_bytes.saturating_sub(nvml.reserved_bytes);
    comparisons.push(Comparison {
        field: "total memory".into(),
        cuda: format_mib(cuda.total_bytes),
        nvml: format!(
            "{} ({} total − {} reserved by the driver)",
            format_mib(usable_total),
            format_mib(nvml.total_bytes),
            format_mib(nvml.reserved_bytes)
        ),
        agrees: cuda.total_bytes.abs_diff(usable_total) <= TOTAL_TOLERANCE_BYTES
            || cuda.total_bytes == nvml.total_bytes,
        note: "CUDA's total leaves out the memory the driver reserves, which NVML reports separately; a larger gap means the two see different memory (MIG instance, virtualization)".into(),
    });
    match nvml.ecc_enabled {
        Some(nvml_ecc) => comparisons.push(Comparison {
            field: "ECC".into(),
            cuda: on_off(cuda.ecc_enabled).into(),
            nvml: on_off(nvml_ecc).into(),
            agrees: nvml_ecc == cuda.ecc_enabled,
            note: "a difference usually means an ECC mode change is pending a GPU reset".into(),
        }),
        None => comparisons.push(Comparison {
            field: "ECC".into(),
            cuda: on_off(cuda.ecc_enabled).into(),
            nvml: "not supported".into(),
            agrees: !cuda.ecc_enabled,
            note: "NVML reports no ECC support on this GPU".into(),
        }),
    }
    comparisons
}

fn on_off(enabled: bool) -> &'static str {
    if enabled { "enabled" } else { "disabled" }
}

/// Bytes as MiB with one decimal, e.g. "143771.0 MiB".
pub fn format_mib(bytes: u64) -> String {
    format!(
        "{:.1} MiB",
        bytes as f64 / vramscope_core::model::MIB as f64
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use vramscope_core::model::MIB;

    /// Values read on the H200 (`docs/sources.md` § "Measured"): CUDA total = NVML total −
    /// reserved.
    fn h200_pair() -> (CudaDeviceFacts, NvmlDeviceFacts) {
        let cuda = CudaDeviceFacts {
            name: "NVIDIA H200".into(),
            ecc_enabled: true,
            total_bytes: (143_771 - 615) * MIB,
            ..Default::default()
        };
        let nvml = NvmlDeviceFacts {
            name: "NVIDIA H200".into(),
            total_bytes: 143_771 * MIB,
            reserved_bytes: 615 * MIB,
            ecc_enabled: Some(true),
            ..Default::default()
        };
        (cuda, nvml)
    }

    #[test]
    fn matching_devices_agree_on_every_field() {
        let (cuda, nvml) = h200_pair();
        let comparisons = compare_with_nvml(&cuda, &nvml);
        assert_eq!(comparisons.len(), 3);
        assert!(comparisons.iter().all(|c| c.agrees), "{comparisons:#?}");
    }

    #[test]
    fn differences_in_name_memory_and_ecc_are_flagged() {
        let (mut cuda, nvml) = h200_pair();
        cuda.name = "NVIDIA H100".into();
        cuda.total_bytes = 80_000 * MIB;
        cuda.ecc_enabled = false;
        let flagged: Vec<String> = compare_with_nvml(&cuda, &nvml)
            .into_iter()
            .filter(|c| !c.agrees)
            .map(|c| c.field)
            .collect();
        assert_eq!(flagged, ["name", "total memory", "ECC"]);
    }

    #[test]
    fn ecc_unsupported_in_nvml_agrees_only_with_ecc_off() {
        let (mut cuda, mut nvml) = h200_pair();
        nvml.ecc_enabled = None;
        assert!(!compare_with_nvml(&cuda, &nvml)[2].agrees);
        cuda.ecc_enabled = false;
        assert!(compare_with_nvml(&cuda, &nvml)[2].agrees);
    }

    #[test]
    fn uuid_is_formatted_like_nvidia_smi() {
        let bytes = [
            0x9f, 0xca, 0x33, 0xe6, 0x40, 0x22, 0xad, 0x7e, 0x7c, 0xc7, 0xe8, 0xe7, 0x87, 0xc3,
            0xd4, 0xf7,
        ];
        assert_eq!(
            format_uuid(&bytes),
            "GPU-9fca33e6-4022-ad7e-7cc7-e8e787c3d4f7"
        );
    }
}
