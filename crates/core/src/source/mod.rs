//! Live data: the [`Source`] trait, the simulated demo machine, NVML (native only) and the
//! background sampling thread that polls a source in two tiers.

pub mod demo;
pub mod faults;
pub mod prometheus;

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
