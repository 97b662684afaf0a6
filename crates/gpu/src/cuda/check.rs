//! The whole hardware check: driver facts, per-device facts compared with NVML, the
//! largest-allocatable-block probe and an optional memory test. Shared by `vramscope check`
//! and the GUI's Hardware checks panel.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use vramscope_core::model::checks::*;

use super::alloc::largest_allocatable_block;
use super::facts::{compare_with_nvml, open_context, read_facts_with_context};
use super::memtest::{measure_copy_bandwidth, run_memtest};
use super::nvml::{self};
use super::probe::guarded;

/// What to check.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckOptions {
    /// CUDA ordinal of the device to probe and test (facts cover every device).
    pub device: usize,
    /// Upper bound for the largest-block search.
    pub largest_block_time_limit: Duration,
    /// Run the memory test with this configuration.
    pub memtest: Option<MemtestConfig>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            device: 0,
            largest_block_time_limit: Duration::from_secs(15),
            memtest: None,
        }
    }
}

/// What the check is doing, for progress displays.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckProgress {
    /// A step started (e.g. "probing the largest block").
    Stage(String),
    /// The memory test advanced.
    Memtest(MemtestProgress),
}

/// Runs every check. Never panics: a missing or broken driver is a [`CudaError`].
///
/// Cancelling before the memory test returns [`CudaError::Cancelled`]; during it, the report
/// comes back with the tests done so far and `memtest.cancelled` set.
pub fn run_checks(
    options: &CheckOptions,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(CheckProgress),
) -> Result<CheckReport, CudaError> {
    guarded("vramscope check", || {
        run_checks_unguarded(options, cancel, progress)
    })
}

fn run_checks_unguarded(
    options: &CheckOptions,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(CheckProgress),
) -> Result<CheckReport, CudaError> {
    let cancelled = || {
        if cancel.load(Ordering::Relaxed) {
            Err(CudaError::Cancelled)
        } else {
            Ok(())
        }
    };
    progress(CheckProgress::Stage("reading the driver version".into()));
    let version = super::probe::driver_version()?;
    let device_count = super::probe::device_count()?;
    if options.device >= device_count {
        return Err(CudaError::NoSuchDevice {
            ordinal: options.device,
            count: device_count,
        });
    }
    let nvml_library = nvml::open();
    let nvml_system = nvml::system_facts(&nvml_library);
    let driver_comparisons = nvml_system
        .cuda_driver_version_raw
        .map(|raw| {
            let nvml_version = CudaVersion { raw };
            vec![Comparison {
                field: "CUDA driver version".into(),
                cuda: version.to_string(),
                nvml: nvml_version.to_string(),
                agrees: raw == version.raw,
                note: "a difference means libcuda and libnvidia-ml come from different driver installations".into(),
            }]
        })
        .unwrap_or_default();

    let mut devices = Vec::with_capacity(device_count);
    let mut tested_context = None;
    for ordinal in 0..device_count {
        cancelled()?;
        progress(CheckProgress::Stage(format!(
            "reading the facts of device {ordinal}"
        )));
        let context = open_context(ordinal)?;
        let cuda = read_facts_with_context(&context)?;
        let (nvml_facts, nvml_error) = match &nvml_library {
            Ok(library) => match nvml::device_by_uuid(library, &cuda.uuid)
                .and_then(|device| nvml::device_facts(&device))
            {
                Ok(facts) => (Some(facts), None),
                Err(error) => (None, Some(error)),
            },
            Err(error) => (None, Some(error.clone())),
        };
        let comparisons = nvml_facts
            .as_ref()
            .map(|facts| compare_with_nvml(&cuda, facts))
            .unwrap_or_default();
        devices.push(DeviceCheck {
            cuda,
            nvml: nvml_facts,
            nvml_error,
            comparisons,
        });
        if ordinal == options.device {
            tested_context = Some(context);
        }
    }
    let context = tested_context.ok_or(CudaError::NoSuchDevice {
        ordinal: options.device,
        count: device_count,
    })?;

    cancelled()?;
    progress(CheckProgress::Stage(
        "finding the largest block the driver will allocate".into(),
    ));
    let largest_block =
        largest_allocatable_block(&context, options.largest_block_time_limit, cancel)?;
    cancelled()?;

    let memtest = match &options.memtest {
        None => None,
        Some(config) => {
            let nvml_device = nvml_library.as_ref().ok().and_then(|library| {
                let uuid = &devices.get(options.device)?.cuda.uuid;
                Some((library, nvml::device_by_uuid(library, uuid).ok()?))
            });
            let health_before = nvml_device
                .as_ref()
                .map(|(library, device)| nvml::health_counters(library, device));
            progress(CheckProgress::Stage(
                "measuring device-to-device copy bandwidth".into(),
            ));
            let copy_buffer_bytes = (largest_block.free_bytes / 4).min(8 << 30) >> 21 << 21;
            let copy_bandwidth = if copy_buffer_bytes > 0 {
                Some(measure_copy_bandwidth(&context, copy_buffer_bytes)?)
            } else {
                None
            };
            progress(CheckProgress::Stage("testing GPU memory".into()));
            let mut report = run_memtest(&context, config, cancel, &mut |step| {
                progress(CheckProgress::Memtest(step));
            })?;
            report.copy_bandwidth_gb_per_s = copy_bandwidth;
            report.health_before = health_before;
            report.health_after = nvml_device
                .as_ref()
                .map(|(library, device)| nvml::health_counters(library, device));
            if let (Some(before), Some(after)) = (&report.health_before, &report.health_after) {
                report.health_changes = before.changes_to(after);
            }
            Some(report)
        }
    };

    let disagreement_count = driver_comparisons
        .iter()
        .chain(devices.iter().flat_map(|device| &device.comparisons))
        .filter(|comparison| !comparison.agrees)
        .count();
    Ok(CheckReport {
        schema: CHECK_REPORT_SCHEMA.to_owned(),
        cuda_driver_version: version.to_string(),
        cuda_driver_version_raw: version.raw,
        device_count,
        nvml: nvml_system,
        driver_comparisons,
        devices,
        tested_device: options.device,
        largest_block,
        memtest,
        disagreement_count,
    })
}
