//! NVML calls that nvml-wrapper 0.13 does not wrap (or wraps lossily), made through the symbol
//! table it loaded (`Nvml::lib()`): row remapping, clock-event reasons (the wrapper only has the
//! deprecated throttle-reason call), event registration that does not free the set on failure,
//! and event waits that keep the event bits and MIG ids the wrapper's `EventData` drops.
//!
//! All `unsafe` of the NVML source lives here.

use std::mem::MaybeUninit;

use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper::{Device, EventSet, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlEventData_t, nvmlProcessInfo_t, nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE,
};

use super::processes::ListedProcess;

/// A cached NVML device handle that can be sent to the event thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawDevice(nvmlDevice_t);

// SAFETY: NVML device handles are opaque pointers owned by the library; NVML is thread-safe and a
// handle stays valid for as long as the library stays initialized (nvml-wrapper itself marks
// `Device` as `Send + Sync` for the same reason). Every use goes through an `Nvml` reference that
// keeps the library initialized.
unsafe impl Send for RawDevice {}
// SAFETY: as above; the handle is never dereferenced on our side.
unsafe impl Sync for RawDevice {}

impl RawDevice {
    /// The handle of a device obtained from `nvml`.
    pub fn of(device: &Device<'_>) -> Self {
        // SAFETY: reading the handle value has no preconditions; it is only used with the same
        // library instance, through `RawDevice::device`.
        RawDevice(unsafe { device.handle() })
    }

    /// A wrapper device for this handle. `nvml` must be the instance the handle came from.
    pub fn device<'nvml>(self, nvml: &'nvml Nvml) -> Device<'nvml> {
        // SAFETY: the handle came from `nvml.device_by_index` on this same, still initialized,
        // library instance (the caller holds the `Nvml` that created it).
        unsafe { Device::new(self.0, nvml) }
    }
}

/// Row-remapper counts of one device (`nvmlDeviceGetRemappedRows`, Ampere and newer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemappedRows {
    pub correctable: u64,
    pub uncorrectable: u64,
    /// A remap waits for the next GPU reset.
    pub pending: bool,
    /// A remap failed.
    pub failure: bool,
}

pub fn remapped_rows(nvml: &Nvml, device: RawDevice) -> Result<RemappedRows, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetRemappedRows.as_ref())?;
    let (mut correctable, mut uncorrectable, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: valid device handle (see `RawDevice`) and four valid out-pointers.
    nvml_try(unsafe {
        sym(
            device.0,
            &mut correctable,
            &mut uncorrectable,
            &mut pending,
            &mut failure,
        )
    })?;
    Ok(RemappedRows {
        correctable: correctable.into(),
        uncorrectable: uncorrectable.into(),
        pending: pending != 0,
        failure: failure != 0,
    })
}

/// Current clock-event (throttle) reason bits, `nvmlClocksEventReason*`. Falls back to the
/// deprecated throttle-reason call on drivers that lack the newer symbol (same bit layout).
pub fn clocks_event_reasons(nvml: &Nvml, device: RawDevice) -> Result<u64, NvmlError> {
    let lib = nvml.lib();
    let sym = match nvml_sym(lib.nvmlDeviceGetCurrentClocksEventReasons.as_ref()) {
        Ok(sym) => sym,
        Err(_) => nvml_sym(lib.nvmlDeviceGetCurrentClocksThrottleReasons.as_ref())?,
    };
    let mut reasons = 0u64;
    // SAFETY: valid device handle and out-pointer.
    nvml_try(unsafe { sym(device.0, &mut reasons) })?;
    Ok(reasons)
}

/// Which of NVML's per-device process lists to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessList {
    Compute,
    Graphics,
}

/// Reusable storage for [`running_processes`].
pub type ProcessBuffer = Vec<nvmlProcessInfo_t>;

/// Entries a process-list buffer starts with; it grows when a GPU has more processes.
const PROCESS_BUFFER_START: usize = 16;

/// Reads one process list in a single NVML call, into a buffer kept between ticks.
/// (`Device::running_compute_processes` asks for the count first and allocates every time: two
/// driver calls per list per tick.) A buffer too small is grown and the call retried once.
pub fn running_processes(
    nvml: &Nvml,
    device: RawDevice,
    list: ProcessList,
    buffer: &mut ProcessBuffer,
) -> Result<Vec<ListedProcess>, NvmlError> {
    let lib = nvml.lib();
    let sym = match list {
        ProcessList::Compute => nvml_sym(lib.nvmlDeviceGetComputeRunningProcesses_v3.as_ref())?,
        ProcessList::Graphics => nvml_sym(lib.nvmlDeviceGetGraphicsRunningProcesses_v3.as_ref())?,
    };
    if buffer.len() < PROCESS_BUFFER_START {
        // SAFETY: `nvmlProcessInfo_t` is plain integers; all-zero is a valid value.
        buffer.resize(PROCESS_BUFFER_START, unsafe { std::mem::zeroed() });
    }
    let mut attempts = 0;
    loop {
        let mut count = u32::try_from(buffer.len()).unwrap_or(u32::MAX);
        // SAFETY: valid device handle; `buffer` holds `count` writable entries.
        let code = unsafe { sym(device.0, &mut count, buffer.as_mut_ptr()) };
        if code == nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE && attempts == 0 {
            attempts += 1;
            // More processes than entries: NVML put the number needed in `count`. Leave
            // headroom for processes starting in between.
            let needed = usize::try_from(count)
                .unwrap_or(usize::MAX)
                .saturating_add(8);
            // SAFETY: as above.
            buffer.resize(needed.max(buffer.len() * 2), unsafe { std::mem::zeroed() });
            continue;
        }
        nvml_try(code)?;
        let filled = usize::try_from(count)
            .unwrap_or(usize::MAX)
            .min(buffer.len());
        return Ok(buffer[..filled]
            .iter()
            .map(|p| {
                ListedProcess::from_nvml(
                    p.pid,
                    p.usedGpuMemory,
                    p.gpuInstanceId,
                    p.computeInstanceId,
                )
            })
            .collect());
    }
}

/// The event-type bits this device can deliver, unfiltered (nvml-wrapper truncates unknown bits
/// or fails on them).
pub fn supported_event_types(nvml: &Nvml, device: RawDevice) -> Result<u64, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetSupportedEventTypes.as_ref())?;
    let mut mask = 0u64;
    // SAFETY: valid device handle and out-pointer.
    nvml_try(unsafe { sym(device.0, &mut mask) })?;
    Ok(mask)
}

/// Registers `mask` for `device` on `set`. Unlike `Device::register_events`, a refusal leaves
/// the set alive so that other devices (or a smaller mask) can still be registered.
pub fn register_events(
    nvml: &Nvml,
    device: RawDevice,
    mask: u64,
    set: &EventSet<'_>,
) -> Result<(), NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceRegisterEvents.as_ref())?;
    // SAFETY: valid device handle; the set handle belongs to `set`, which outlives the call.
    nvml_try(unsafe { sym(device.0, mask, set.handle()) })
}

/// One event as NVML delivered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawEvent {
    pub device: RawDevice,
    pub event_type: u64,
    /// The Xid for Xid events; the action for recovery-action events; 0 otherwise.
    pub event_data: u64,
    /// `0xFFFFFFFF` when not attributable to a MIG instance.
    pub gpu_instance_id: u32,
    pub compute_instance_id: u32,
}

/// Waits up to `timeout_ms` for the next event on `set` (`Err(Timeout)` when none came).
pub fn wait_event(nvml: &Nvml, set: &EventSet<'_>, timeout_ms: u32) -> Result<RawEvent, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlEventSetWait_v2.as_ref())?;
    let mut data = MaybeUninit::<nvmlEventData_t>::zeroed();
    // SAFETY: the set handle belongs to `set`; `data` is a valid, zero-initialized out-struct.
    nvml_try(unsafe { sym(set.handle(), data.as_mut_ptr(), timeout_ms) })?;
    // SAFETY: an all-zero `nvmlEventData_t` is valid (integers and a nullable pointer), and NVML
    // filled it on success.
    let data = unsafe { data.assume_init() };
    Ok(RawEvent {
        device: RawDevice(data.device),
        event_type: data.eventType,
        event_data: data.eventData,
        gpu_instance_id: data.gpuInstanceId,
        compute_instance_id: data.computeInstanceId,
    })
}
