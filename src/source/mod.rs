//! Live data: the [`Source`] trait, the simulated demo machine, NVML (native only) and the
//! background sampling thread that polls a source in two tiers.

pub mod demo;
pub mod faults;
#[cfg(feature = "native")]
pub mod nvml;
pub mod prometheus;
#[cfg(feature = "native")]
pub mod sampler;

use crate::model::{Capture, CaptureMeta, DeviceFacts, SampleBatch, UnixMs};

/// Which tier(s) a poll should read. The fast tier is cheap (memory, utilization, processes,
/// temperature, power, clocks, throttle reasons, volatile ECC); the slow tier holds the calls that
/// cost tens of microseconds or more (BAR1, PCIe replay, remapped rows, retired pages, aggregate ECC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tiers {
    pub fast: bool,
    pub slow: bool,
}

/// What a source says about itself before it is polled.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SourceDescription {
    /// Capture metadata without `started_ms`/`interval_ms`, which the sampler fills in.
    pub meta: CaptureMeta,
    pub devices: Vec<DeviceFacts>,
}

/// A machine that can be polled for samples. Implementations must not block for long: the
/// sampler calls `poll` on its own thread at the fast-tier interval.
pub trait Source: Send {
    /// What this machine is (driver, devices, simulated or not), for capture headers and the UI.
    fn describe(&self) -> SourceDescription;

    /// Reads the requested tiers at time `now_ms` and returns what was read, plus any events that
    /// arrived since the last poll. Failures are reported per field in
    /// `SampleBatch::field_changes`, never as a panic or an `Err` for the whole machine.
    fn poll(&mut self, now_ms: UnixMs, tiers: Tiers) -> SampleBatch;

    /// The simulated demo machine's pace, which the UI can change while it runs (`None` for
    /// real GPUs, which run at the pace of the world).
    fn demo_pace(&self) -> Option<demo::DemoPace> {
        None
    }

    /// What the source already holds from before it was started (a Prometheus server's range
    /// read at start), handed over once so that a live session begins with it; `None` for
    /// sources that only know the present (NVML, the demo machine).
    fn take_history(&mut self) -> Option<Capture> {
        None
    }
}

/// Current wall-clock time in Unix milliseconds.
pub fn now_unix_ms() -> UnixMs {
    web_time::SystemTime::now()
        .duration_since(web_time::UNIX_EPOCH)
        .map(|d| d.as_millis() as UnixMs)
        .unwrap_or(0)
}

/// What a headless command samples: the simulated demo machine when `demo` is set, otherwise the
/// machine's GPUs. Unlike [`open_default`] (the GUI), no driver is an error here: a scripted
/// command must never pass simulated data off as real. The second value is the demo's notice.
#[cfg(feature = "native")]
pub fn open_real_or_demo(
    demo: bool,
) -> Result<(Box<dyn Source>, Option<String>), nvml::NvmlOpenError> {
    if demo {
        return Ok(open_demo(None, None));
    }
    let source = nvml::NvmlSource::open()?;
    Ok((faults::FaultySource::wrap_from_env(Box::new(source)), None))
}

/// The simulated demo machine with `device_count` GPUs (default 2), optionally in time-lapse
/// (`(speed, simulated interval_ms)`, see [`demo::Accelerated`]), wrapped in the fault plan of
/// [`faults::FAULTS_ENV`] when that is set. The second value is the demo's notice.
#[cfg(feature = "native")]
pub fn open_demo(
    device_count: Option<u32>,
    time_lapse: Option<(f64, u32)>,
) -> (Box<dyn Source>, Option<String>) {
    let config = demo::DemoConfig {
        device_count: device_count.unwrap_or(demo::DemoConfig::default().device_count),
        ..demo::DemoConfig::default()
    };
    let demo = demo::DemoSource::with_config(now_unix_ms(), config);
    let (source, notice): (Box<dyn Source>, String) = match time_lapse {
        Some((speed, interval_ms)) => (
            Box::new(demo::Accelerated::new(demo, speed, interval_ms)),
            format!("--demo-speed {speed}: showing a simulated machine in time-lapse"),
        ),
        None => (
            Box::new(demo),
            "--demo was given: showing a simulated machine".to_owned(),
        ),
    };
    (faults::FaultySource::wrap_from_env(source), Some(notice))
}

/// Opens the machine's GPUs through NVML, or the simulated demo machine when `force_demo` is set
/// or NVML cannot be loaded. The second value says why the demo is used (shown to the user), and is
/// `None` when real GPUs are being sampled. Either is wrapped in the fault plan of
/// [`faults::FAULTS_ENV`] when that is set.
#[cfg(feature = "native")]
pub fn open_default(force_demo: bool) -> (Box<dyn Source>, Option<String>) {
    if force_demo {
        return open_demo(None, None);
    }
    match nvml::NvmlSource::open() {
        Ok(source) => (faults::FaultySource::wrap_from_env(Box::new(source)), None),
        Err(err) => (
            faults::FaultySource::wrap_from_env(Box::new(demo::DemoSource::new(now_unix_ms()))),
            Some(format!(
                "no NVIDIA GPU could be opened ({err}): showing a simulated machine"
            )),
        ),
    }
}
