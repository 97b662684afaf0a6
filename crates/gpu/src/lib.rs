//! vramscope on real machines: everything that touches NVML, the CUDA driver or the network.
//! [`nvml`] samples GPUs as a [`Source`], [`sampler`] polls a source on its own thread, [`cuda`]
//! runs the hardware checks and the memory test, and [`prometheus`] holds the HTTP ends of
//! Prometheus (the range client and the `/metrics` exporter). It builds on `vramscope-core` alone:
//! what these produce is the core's plain data, judged there.

pub mod alert_hooks;
pub mod cuda;
pub mod nvml;
pub mod prometheus;
pub mod run;
pub mod sampler;

use vramscope_core::model::now_unix_ms;
use vramscope_core::source::{Source, demo, faults};

/// What a headless command samples: the simulated demo machine when `demo` is set, otherwise the
/// machine's GPUs. Unlike [`open_default`] (the GUI), no driver is an error here: a scripted
/// command must never pass simulated data off as real. The second value is the demo's notice.
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
