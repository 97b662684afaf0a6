//! Real GPUs through NVML (native only).
//!
//! `Nvml::init()` runs once in [`NvmlSource::open`], which also caches the device handles and
//! reads the facts that do not change. [`Source::poll`] then reads the fast tier (memory v2,
//! utilization, temperature, power, clocks, clock-event reasons, volatile ECC, processes) and, when
//! asked, the slow tier (aggregate ECC, retired pages, remapped rows, BAR1, PCIe replays,
//! persistence mode). Xid and other critical events arrive through [`events::EventWatcher`].
//!
//! Every fast tick carries each GPU's processes, but the two process-list calls (the dearest of
//! the fast tier) are made only when they can have changed: when the GPU's used memory differs
//! from its value at the last read, at least every `process_refresh_max_ms` (default 1 s), and
//! with every slow tier; otherwise the last lists are repeated with the new time (see
//! [`processes::ProcessRefresh`]). A process cannot gain or lose GPU memory without the device's
//! used memory changing, so captures and timelines are the same as with a read every tick.
//!
//! Nothing here fails the whole machine: each field's readability is tracked per device and
//! reported only when it changes (see [`fields::FieldTracker`]); a GPU that falls off the bus
//! raises one `DeviceLost` event, all its fields turn failed and it is only asked again every
//! [`LOST_RECHECK_MS`] whether it answers (after a reset or a driver recovery), while the other
//! GPUs keep being sampled; when it answers, a `DeviceReturned` event marks where its samples
//! resume.

mod events;
mod fields;
mod processes;
mod raw;

use std::sync::Arc;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, RetirementCause, TemperatureSensor,
};
use nvml_wrapper::error::NvmlError;

use self::events::EventWatcher;
use self::fields::{FieldTracker, ecc_increase, field_state_for, is_device_lost, name};
pub use self::processes::DEFAULT_PROCESS_REFRESH_MAX_MS;
use self::processes::{CachedProcessLists, ProcessNames};
use self::raw::{ProcessBuffer, ProcessList, RawDevice};
use vramscope_core::model::{
    CaptureMeta, DeviceFacts, DeviceSample, Event, EventKind, FieldState, FieldStatus,
    HealthSample, MemoryReading, ProcessSample, SampleBatch, SourceKind, UnixMs,
};
use vramscope_core::source::{Source, SourceDescription, Tiers};

/// How often a lost GPU is asked whether it answers again.
pub const LOST_RECHECK_MS: UnixMs = 5_000;

/// The NVML library nvml-wrapper loads on Linux.
const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// Why NVML could not be opened. The message tells the user what to check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvmlOpenError {
    #[error("no NVIDIA driver found: {NVML_LIBRARY} could not be loaded ({detail})")]
    LibraryNotFound { detail: String },
    #[error(
        "the NVIDIA kernel driver is not loaded (is the GPU driver installed and the module loaded?)"
    )]
    DriverNotLoaded,
    #[error(
        "the NVIDIA kernel driver and {NVML_LIBRARY} are different versions (reboot, or reinstall \
         the driver so that they match)"
    )]
    DriverLibraryMismatch,
    #[error(
        "permission denied: this user may not query the NVIDIA GPUs (check access to /dev/nvidia*)"
    )]
    NoPermission,
    #[error("the NVIDIA driver is loaded but no GPU could be opened{detail}")]
    NoDevices { detail: String },
    #[error("NVML could not be initialized: {0}")]
    Other(String),
}

impl From<NvmlError> for NvmlOpenError {
    fn from(error: NvmlError) -> Self {
        match error {
            NvmlError::LibloadingError(detail) => NvmlOpenError::LibraryNotFound {
                detail: detail.to_string(),
            },
            NvmlError::LibraryNotFound => NvmlOpenError::LibraryNotFound {
                detail: "the library or one it needs is missing".to_owned(),
            },
            NvmlError::DriverNotLoaded => NvmlOpenError::DriverNotLoaded,
            NvmlError::LibRmVersionMismatch => NvmlOpenError::DriverLibraryMismatch,
            NvmlError::NoPermission => NvmlOpenError::NoPermission,
            other => NvmlOpenError::Other(other.to_string()),
        }
    }
}

/// One GPU being sampled.
struct TrackedDevice {
    index: u32,
    handle: RawDevice,
    /// Set once NVML said the GPU is lost; the device is then only asked whether it answers
    /// again, at `recheck_at_ms`.
    lost: bool,
    recheck_at_ms: UnixMs,
    /// Last volatile (corrected, uncorrected) ECC counts, to turn increases into events.
    last_ecc_volatile: Option<(u64, u64)>,
    /// Kept between ticks so that reading a process list is one driver call, no allocation.
    process_buffer: ProcessBuffer,
    /// The last process lists, repeated while they still hold.
    processes: CachedProcessLists,
}

/// Real GPUs through NVML.
pub struct NvmlSource {
    nvml: Arc<Nvml>,
    description: SourceDescription,
    devices: Vec<TrackedDevice>,
    tracker: FieldTracker,
    names: ProcessNames,
    /// `None` when the platform has no NVML events (nvml-wrapper registers them on Linux only).
    events: Option<EventWatcher>,
}

impl NvmlSource {
    /// Initializes NVML, opens every GPU it lists and starts the event thread. GPUs that cannot
    /// be opened are skipped with a warning; if none can, this is an error.
    pub fn open() -> Result<Self, NvmlOpenError> {
        let nvml = Arc::new(Nvml::init()?);
        let count = nvml.device_count()?;
        let mut devices = Vec::new();
        let mut facts = Vec::new();
        let mut last_failure = String::new();
        for index in 0..count {
            match nvml.device_by_index(index) {
                Ok(device) => {
                    facts.push(read_facts(index, &device));
                    devices.push(TrackedDevice {
                        index,
                        handle: RawDevice::of(&device),
                        lost: false,
                        recheck_at_ms: 0,
                        last_ecc_volatile: None,
                        process_buffer: ProcessBuffer::new(),
                        processes: CachedProcessLists::new(DEFAULT_PROCESS_REFRESH_MAX_MS),
                    });
                }
                Err(err) => {
                    log::warn!("GPU {index} could not be opened and is skipped: {err}");
                    last_failure = format!(" (GPU {index}: {err})");
                }
            }
        }
        if devices.is_empty() {
            return Err(NvmlOpenError::NoDevices {
                detail: last_failure,
            });
        }
        let meta = CaptureMeta {
            source: SourceKind::Live,
            host: host_name(),
            driver_version: nvml.sys_driver_version().unwrap_or_default(),
            cuda_driver_version: nvml
                .sys_cuda_driver_version()
                .ok()
                .and_then(|v| u32::try_from(v).ok()),
            writer: format!("vramscope {}", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        };
        let events = cfg!(target_os = "linux").then(|| {
            let handles = devices.iter().map(|d| (d.index, d.handle)).collect();
            EventWatcher::start(Arc::clone(&nvml), handles)
        });
        Ok(NvmlSource {
            nvml,
            description: SourceDescription {
                meta,
                devices: facts,
            },
            devices,
            tracker: FieldTracker::default(),
            names: ProcessNames::new("/proc"),
            events,
        })
    }
}

impl NvmlSource {
    /// Sets how long a GPU's process lists are repeated at most while its used memory does not
    /// change (default 1000 ms); 0 reads them on every fast tick. The next tick reads them.
    pub fn set_process_refresh_max_ms(&mut self, max_ms: u64) {
        for device in &mut self.devices {
            device.processes = CachedProcessLists::new(max_ms);
        }
    }

    /// How many times process lists were read since open (or since
    /// [`NvmlSource::set_process_refresh_max_ms`]), summed over GPUs: what the benchmark
    /// compares with the number of ticks.
    pub fn process_list_reads(&self) -> u64 {
        self.devices.iter().map(|d| d.processes.reads()).sum()
    }
}

/// Facts read once at open. A fact that cannot be read stays empty/`None`; the per-tick fields
/// report their own state.
fn read_facts(index: u32, device: &nvml_wrapper::Device<'_>) -> DeviceFacts {
    DeviceFacts {
        index,
        name: device.name().unwrap_or_default(),
        uuid: device.uuid().unwrap_or_default(),
        pci_bus_id: device.pci_info().map(|p| p.bus_id).unwrap_or_default(),
        memory_total_bytes: device.memory_info().map(|m| m.total).unwrap_or_default(),
        bar1_total_bytes: device.bar1_memory_info().ok().map(|b| b.total),
        persistence_mode: device.is_in_persistent_mode().ok(),
        ecc_enabled: device.is_ecc_enabled().ok().map(|e| e.currently_enabled),
        compute_capability: device
            .cuda_compute_capability()
            .ok()
            .and_then(|c| Some((u32::try_from(c.major).ok()?, u32::try_from(c.minor).ok()?))),
        simulated: false,
        ..Default::default()
    }
}

/// The machine's host name, or empty when it cannot be read.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_default()
}

/// Reads fields of one device, recording each field's state and noticing a lost GPU.
struct FieldReader<'a> {
    device_index: u32,
    tracker: &'a mut FieldTracker,
    changes: &'a mut Vec<FieldStatus>,
    /// NVML's message when a read said the GPU is lost.
    lost: Option<String>,
}

impl FieldReader<'_> {
    fn read<T>(&mut self, field: &'static str, result: Result<T, NvmlError>) -> Option<T> {
        let state = match &result {
            Ok(_) => FieldState::Ok,
            Err(err) => {
                if is_device_lost(err) && self.lost.is_none() {
                    self.lost = Some(err.to_string());
                }
                field_state_for(err)
            }
        };
        if let Some(change) = self.tracker.observe(self.device_index, field, state) {
            self.changes.push(change);
        }
        result.ok()
    }
}

/// Whether a lost GPU answers again: it is opened afresh by its index (a reset can make the old
/// handle stale) and its memory read. On success the fresh handle replaces the old one.
fn answers_again(nvml: &Nvml, device: &mut TrackedDevice) -> bool {
    let Ok(gpu) = nvml.device_by_index(device.index) else {
        return false;
    };
    if gpu.memory_info().is_err() {
        return false;
    }
    device.handle = RawDevice::of(&gpu);
    true
}

/// What a lost GPU produces: one `DeviceLost` event and every field marked failed (changes only).
fn mark_lost(
    tracker: &mut FieldTracker,
    device_index: u32,
    detail: &str,
    t_ms: UnixMs,
) -> (Event, Vec<FieldStatus>) {
    let reason = format!("GPU lost: {detail}");
    let changes = name::ALL
        .iter()
        .filter_map(|field| {
            tracker.observe(device_index, field, FieldState::Failed(reason.clone()))
        })
        .collect();
    let event = Event {
        t_ms,
        device_index: Some(device_index),
        kind: EventKind::DeviceLost {
            detail: detail.to_owned(),
        },
    };
    (event, changes)
}

/// Reads the fast tier of one device; its process lists are read again into
/// `device.processes` only when they can have changed (see [`CachedProcessLists`]).
fn read_fast(
    nvml: &Nvml,
    device: &mut TrackedDevice,
    reader: &mut FieldReader<'_>,
    t_ms: UnixMs,
    slow_tier: bool,
) -> (DeviceSample, Option<Event>) {
    let gpu = device.handle.device(nvml);
    let memory = reader
        .read(name::MEMORY, gpu.memory_info())
        .map(|m| MemoryReading {
            used_bytes: m.used,
            reserved_bytes: m.reserved,
            free_bytes: m.free,
            total_bytes: m.total,
        });
    let utilization = reader.read(name::UTILIZATION, gpu.utilization_rates());
    let ecc = gpu
        .total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
        .and_then(|c| {
            Ok((
                c,
                gpu.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)?,
            ))
        });
    let ecc = reader.read(name::ECC_VOLATILE, ecc);
    let mut ecc_event = None;
    if let Some(current) = ecc {
        ecc_event = ecc_increase(device.last_ecc_volatile, current).map(|kind| Event {
            t_ms,
            device_index: Some(device.index),
            kind,
        });
        device.last_ecc_volatile = Some(current);
    }
    let sample = DeviceSample {
        t_ms,
        device_index: device.index,
        memory,
        gpu_util_pct: utilization.as_ref().map(|u| u.gpu),
        mem_util_pct: utilization.as_ref().map(|u| u.memory),
        temperature_c: reader.read(name::TEMPERATURE, gpu.temperature(TemperatureSensor::Gpu)),
        power_mw: reader.read(name::POWER, gpu.power_usage()),
        sm_clock_mhz: reader.read(name::SM_CLOCK, gpu.clock_info(Clock::SM)),
        mem_clock_mhz: reader.read(name::MEM_CLOCK, gpu.clock_info(Clock::Memory)),
        throttle_reasons: reader.read(
            name::THROTTLE_REASONS,
            raw::clocks_event_reasons(nvml, device.handle),
        ),
        ecc_corrected_volatile: ecc.map(|(c, _)| c),
        ecc_uncorrected_volatile: ecc.map(|(_, u)| u),
    };
    let used_bytes = memory.map(|m| m.used_bytes);
    let buffer = &mut device.process_buffer;
    let handle = device.handle;
    device
        .processes
        .update(used_bytes, t_ms, slow_tier, |list| {
            let field = match list {
                ProcessList::Compute => name::COMPUTE_PROCESSES,
                ProcessList::Graphics => name::GRAPHICS_PROCESSES,
            };
            reader.read(field, raw::running_processes(nvml, handle, list, buffer))
        });
    (sample, ecc_event)
}

fn read_slow(
    nvml: &Nvml,
    device: &TrackedDevice,
    reader: &mut FieldReader<'_>,
    t_ms: UnixMs,
) -> HealthSample {
    let gpu = device.handle.device(nvml);
    let aggregate = gpu
        .total_ecc_errors(MemoryError::Corrected, EccCounter::Aggregate)
        .and_then(|c| {
            Ok((
                c,
                gpu.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate)?,
            ))
        });
    let aggregate = reader.read(name::ECC_AGGREGATE, aggregate);
    let retired = gpu
        .retired_pages(RetirementCause::MultipleSingleBitEccErrors)
        .and_then(|sbe| {
            Ok((
                sbe.len() as u64,
                gpu.retired_pages(RetirementCause::DoubleBitEccError)?.len() as u64,
            ))
        });
    let retired = reader.read(name::RETIRED_PAGES, retired);
    let remapped = reader.read(name::REMAPPED_ROWS, raw::remapped_rows(nvml, device.handle));
    let bar1 = reader.read(name::BAR1, gpu.bar1_memory_info());
    HealthSample {
        t_ms,
        device_index: device.index,
        ecc_corrected_aggregate: aggregate.map(|(c, _)| c),
        ecc_uncorrected_aggregate: aggregate.map(|(_, u)| u),
        retired_pages_sbe: retired.map(|(sbe, _)| sbe),
        retired_pages_dbe: retired.map(|(_, dbe)| dbe),
        retired_pages_pending: reader
            .read(name::RETIRED_PAGES_PENDING, gpu.are_pages_pending_retired()),
        remapped_rows_correctable: remapped.map(|r| r.correctable),
        remapped_rows_uncorrectable: remapped.map(|r| r.uncorrectable),
        remapped_rows_pending: remapped.map(|r| r.pending),
        remapped_rows_failure: remapped.map(|r| r.failure),
        bar1_used_bytes: bar1.as_ref().map(|b| b.used),
        bar1_total_bytes: bar1.as_ref().map(|b| b.total),
        pcie_replay_count: reader
            .read(name::PCIE_REPLAY, gpu.pcie_replay_counter())
            .map(u64::from),
        persistence_mode: reader.read(name::PERSISTENCE_MODE, gpu.is_in_persistent_mode()),
    }
}

impl Source for NvmlSource {
    fn describe(&self) -> SourceDescription {
        self.description.clone()
    }

    fn poll(&mut self, now_ms: UnixMs, tiers: Tiers) -> SampleBatch {
        let mut batch = SampleBatch::default();
        if let Some(watcher) = &self.events {
            let (events, statuses) = watcher.drain();
            batch.events.extend(events);
            for status in statuses {
                let field = name::EVENTS;
                if let Some(change) = self
                    .tracker
                    .observe(status.device_index, field, status.state)
                {
                    batch.field_changes.push(change);
                }
            }
        }
        let nvml = &*self.nvml;
        let mut processes = Vec::new();
        for device in self.devices.iter_mut() {
            if device.lost {
                if now_ms < device.recheck_at_ms || !answers_again(nvml, device) {
                    device.recheck_at_ms = device.recheck_at_ms.max(now_ms + LOST_RECHECK_MS);
                    continue;
                }
                log::warn!("GPU {} answers again; sampling it resumes", device.index);
                device.lost = false;
                batch.events.push(Event {
                    t_ms: now_ms,
                    device_index: Some(device.index),
                    kind: EventKind::DeviceReturned,
                });
            }
            let mut reader = FieldReader {
                device_index: device.index,
                tracker: &mut self.tracker,
                changes: &mut batch.field_changes,
                lost: None,
            };
            if tiers.fast {
                let (sample, ecc_event) = read_fast(nvml, device, &mut reader, now_ms, tiers.slow);
                batch.devices.push(sample);
                batch.events.extend(ecc_event);
                for (listed, kind) in device.processes.merged() {
                    processes.push(ProcessSample {
                        t_ms: now_ms,
                        device_index: device.index,
                        pid: listed.pid,
                        name: self.names.name(listed.pid).to_owned(),
                        used_bytes: listed.used_bytes,
                        kind,
                        mig_instance: listed.mig_instance,
                    });
                }
            }
            if tiers.slow && reader.lost.is_none() {
                batch
                    .health
                    .push(read_slow(nvml, device, &mut reader, now_ms));
            }
            if let Some(detail) = reader.lost {
                log::error!(
                    "GPU {} was lost; asking every {} s whether it answers again: {detail}",
                    device.index,
                    LOST_RECHECK_MS / 1000
                );
                device.lost = true;
                device.recheck_at_ms = now_ms + LOST_RECHECK_MS;
                let (event, changes) = mark_lost(&mut self.tracker, device.index, &detail, now_ms);
                batch.events.push(event);
                batch.field_changes.extend(changes);
            }
        }
        if tiers.fast {
            let pids: Vec<u32> = processes.iter().map(|p| p.pid).collect();
            self.names.retain_only(&pids);
            batch.processes = Some(processes);
        }
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_without_a_driver_says_so() {
        // This test machine (and CI) has no NVIDIA driver: NVML cannot be loaded.
        if std::path::Path::new("/dev/nvidiactl").exists() {
            return;
        }
        match NvmlSource::open() {
            Err(err @ NvmlOpenError::LibraryNotFound { .. }) => {
                let message = err.to_string();
                assert!(message.starts_with("no NVIDIA driver found"), "{message}");
                assert!(message.contains(NVML_LIBRARY), "{message}");
            }
            Err(other) => panic!("expected LibraryNotFound, got {other:?}"),
            Ok(_) => panic!("NVML opened on a machine without /dev/nvidiactl"),
        }
    }

    #[test]
    fn init_errors_become_clear_open_errors() {
        assert_eq!(
            NvmlOpenError::from(NvmlError::DriverNotLoaded),
            NvmlOpenError::DriverNotLoaded
        );
        assert_eq!(
            NvmlOpenError::from(NvmlError::LibRmVersionMismatch),
            NvmlOpenError::DriverLibraryMismatch
        );
        assert_eq!(
            NvmlOpenError::from(NvmlError::NoPermission),
            NvmlOpenError::NoPermission
        );
        assert!(matches!(
            NvmlOpenError::from(NvmlError::LibraryNotFound),
            NvmlOpenError::LibraryNotFound { .. }
        ));
        assert!(
            NvmlOpenError::DriverLibraryMismatch
                .to_string()
                .contains("different versions")
        );
        assert!(
            NvmlOpenError::NoPermission
                .to_string()
                .contains("/dev/nvidia")
        );
        let none = NvmlOpenError::NoDevices {
            detail: " (GPU 0: boom)".into(),
        };
        assert_eq!(
            none.to_string(),
            "the NVIDIA driver is loaded but no GPU could be opened (GPU 0: boom)"
        );
    }

    #[test]
    fn reader_records_changes_and_notices_a_lost_gpu() {
        let mut tracker = FieldTracker::default();
        let mut changes = Vec::new();
        let mut reader = FieldReader {
            device_index: 1,
            tracker: &mut tracker,
            changes: &mut changes,
            lost: None,
        };
        assert_eq!(
            reader.read(name::TEMPERATURE, Ok::<u32, NvmlError>(40)),
            Some(40)
        );
        assert_eq!(
            reader.read::<bool>(name::RETIRED_PAGES_PENDING, Err(NvmlError::NotSupported)),
            None
        );
        assert_eq!(
            reader.read::<bool>(name::RETIRED_PAGES_PENDING, Err(NvmlError::NotSupported)),
            None
        );
        assert!(reader.lost.is_none(), "not supported is not a lost GPU");
        assert_eq!(
            reader.read::<u32>(name::POWER, Err(NvmlError::GpuLost)),
            None
        );
        assert!(reader.lost.is_some());
        let fields: Vec<&str> = changes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            ["retired_pages_pending", "power"],
            "one change per transition"
        );
    }

    #[test]
    fn a_lost_gpu_raises_one_event_and_fails_every_field_once() {
        let mut tracker = FieldTracker::default();
        tracker.observe(0, name::POWER, FieldState::Failed("GPU lost: x".into()));
        let (event, changes) = mark_lost(&mut tracker, 0, "x", 1234);
        assert_eq!(event.t_ms, 1234);
        assert_eq!(event.device_index, Some(0));
        assert_eq!(event.kind, EventKind::DeviceLost { detail: "x".into() });
        assert_eq!(
            changes.len(),
            name::ALL.len() - 1,
            "power was already failed"
        );
        assert!(
            changes
                .iter()
                .all(|c| c.state == FieldState::Failed("GPU lost: x".into()))
        );
        let (_, again) = mark_lost(&mut tracker, 0, "x", 1300);
        assert!(again.is_empty());
    }
}
