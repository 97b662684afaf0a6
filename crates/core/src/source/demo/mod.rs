//! The simulated demo machine: a deterministic H200 box running a compressed working day.
//!
//! It is what users see on a machine without an NVIDIA driver (and with `--demo`), and what tests,
//! benchmarks and screenshots run on. Everything it produces says "simulated": device names, the
//! host name, process names and [`SourceKind::Demo`] in the capture metadata.
//!
//! Samples are a pure function of `(start_ms, now_ms, tiers)` and the pace; see [`scenario`] for
//! the script. Events (OOM, Xid, ECC) are reported once each, on the first poll at or after the
//! moment they happen, like NVML's event queue: the source remembers only the time of its previous
//! poll.
//!
//! The scenario runs in real time by default (its OOM comes about 8 minutes in). A faster pace
//! ([`DemoConfig::speed`], `--demo-speed N`, or a [`DemoPace`] changed while it runs) plays the
//! same day N times faster, for a first look that does not wait.

pub mod scenario;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use super::{Source, SourceDescription, Tiers};
use crate::model::{
    Capture, CaptureMeta, DeviceFacts, DeviceSample, Event, EventKind, FieldState, FieldStatus,
    HealthSample, MIB, MemoryReading, ProcessKind, ProcessSample, SampleBatch, SourceKind, UnixMs,
};
use scenario::{SCENARIO_CYCLE_MS, ScenarioTime, ScriptedEvent};

/// Host name the demo machine reports.
pub const DEMO_HOST: &str = "demo (simulated)";
/// Device name every simulated GPU reports.
pub const DEMO_DEVICE_NAME: &str = "NVIDIA H200 (simulated)";
/// Slow-tier period used by [`generate_capture`], matching the sampler's default.
pub const GENERATED_SLOW_INTERVAL_MS: u32 = 5_000;
/// More simulated GPUs than this are not useful and would only cost memory.
pub const MAX_DEMO_DEVICES: u32 = 64;
/// The fastest pace: an hour of the scenario per second. (The pace keeps wall-clock timestamps and
/// the sampler's interval, for watching the day in the app; [`Accelerated`] is the time-lapse
/// that records every simulated tick, for soak tests.)
pub const MAX_DEMO_PACE: u32 = 3_600;

/// The demo machine's pace (scenario milliseconds per wall millisecond, 1 to [`MAX_DEMO_PACE`]),
/// shared between the source on the sampler thread and the UI that changes it. The source picks a
/// change up at its next poll and continues from where the scenario was, so nothing jumps and no
/// event is reported twice or lost.
#[derive(Clone, Debug)]
pub struct DemoPace(Arc<AtomicU32>);

impl DemoPace {
    /// A pace of `speed` (clamped to 1..=[`MAX_DEMO_PACE`]).
    pub fn new(speed: u32) -> Self {
        DemoPace(Arc::new(AtomicU32::new(clamp_speed(speed))))
    }

    /// The current speed.
    pub fn speed(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }

    /// Changes the speed (clamped to 1..=[`MAX_DEMO_PACE`]).
    pub fn set_speed(&self, speed: u32) {
        self.0.store(clamp_speed(speed), Ordering::Relaxed);
    }
}

fn clamp_speed(speed: u32) -> u32 {
    speed.clamp(1, MAX_DEMO_PACE)
}

/// Shape of the simulated machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DemoConfig {
    /// Number of simulated GPUs (clamped to 0..=[`MAX_DEMO_DEVICES`]). Even GPUs train, odd GPUs
    /// serve; GPUs past the first two are shifted in the scenario so they do not move in lockstep.
    pub device_count: u32,
    /// Where in the scenario the source starts, in milliseconds (0: the model load). Screenshots
    /// use it to start right before the OOM.
    pub scenario_offset_ms: i64,
    /// Scenario milliseconds per wall millisecond at the start (1: real time; clamped to
    /// 1..=[`MAX_DEMO_PACE`]).
    pub speed: u32,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            device_count: 2,
            scenario_offset_ms: 0,
            speed: 1,
        }
    }
}

/// A deterministic simulated machine of H200 GPUs.
pub struct DemoSource {
    start_ms: UnixMs,
    config: DemoConfig,
    /// Time of the previous poll: events up to it have been reported. `None` before the first poll.
    last_poll_ms: Option<UnixMs>,
    /// The pace the UI may change while the source runs.
    pace: DemoPace,
    /// The pace in use since `anchor_wall_ms`, when the scenario (before the offset and the
    /// device shift) was at `anchor_elapsed_ms`.
    speed: i64,
    anchor_wall_ms: UnixMs,
    anchor_elapsed_ms: i64,
}

impl DemoSource {
    /// The default demo machine (2 GPUs) whose scenario starts at `start_ms`.
    pub fn new(start_ms: UnixMs) -> Self {
        Self::with_config(start_ms, DemoConfig::default())
    }

    /// A demo machine of the given shape whose scenario starts at `start_ms`.
    pub fn with_config(start_ms: UnixMs, mut config: DemoConfig) -> Self {
        config.device_count = config.device_count.min(MAX_DEMO_DEVICES);
        config.speed = clamp_speed(config.speed);
        let pace = DemoPace::new(config.speed);
        DemoSource {
            start_ms,
            speed: i64::from(config.speed),
            config,
            last_poll_ms: None,
            pace,
            anchor_wall_ms: start_ms,
            anchor_elapsed_ms: 0,
        }
    }

    /// The handle that changes this source's pace while it runs (on the sampler thread).
    pub fn pace(&self) -> DemoPace {
        self.pace.clone()
    }

    fn device_indices(&self) -> std::ops::Range<u32> {
        0..self.config.device_count
    }

    /// Milliseconds since the origin of device `device_index`'s scenario at wall time `t_ms`.
    fn elapsed_ms(&self, device_index: u32, t_ms: UnixMs) -> i64 {
        self.scenario_elapsed_ms(t_ms)
            .saturating_add(self.config.scenario_offset_ms)
            .saturating_add(scenario::device_shift_ms(device_index))
    }

    /// Scenario milliseconds since the source's start at wall time `t_ms`, at the current pace.
    fn scenario_elapsed_ms(&self, t_ms: UnixMs) -> i64 {
        t_ms.saturating_sub(self.anchor_wall_ms)
            .saturating_mul(self.speed)
            .saturating_add(self.anchor_elapsed_ms)
    }

    /// The first wall time at which device `device_index`'s scenario has reached `elapsed_ms`.
    fn wall_ms_at(&self, device_index: u32, elapsed_ms: i64) -> UnixMs {
        let scenario_ms = elapsed_ms
            .saturating_sub(self.config.scenario_offset_ms)
            .saturating_sub(scenario::device_shift_ms(device_index))
            .saturating_sub(self.anchor_elapsed_ms);
        // Rounded up: the first whole millisecond at or after the moment.
        let wall_offset =
            scenario_ms.div_euclid(self.speed) + i64::from(scenario_ms.rem_euclid(self.speed) != 0);
        self.anchor_wall_ms.saturating_add(wall_offset)
    }

    /// Takes up a pace changed through [`Self::pace`]: from the previous poll on, the scenario
    /// runs at the new speed (the time up to that poll, whose events were reported, stays as
    /// it was).
    fn follow_pace(&mut self) {
        let speed = i64::from(self.pace.speed());
        if speed == self.speed {
            return;
        }
        let anchor = self.last_poll_ms.unwrap_or(self.start_ms);
        self.anchor_elapsed_ms = self.scenario_elapsed_ms(anchor);
        self.anchor_wall_ms = anchor;
        self.speed = speed;
    }

    fn time(&self, device_index: u32, t_ms: UnixMs) -> ScenarioTime {
        ScenarioTime::from_elapsed(self.elapsed_ms(device_index, t_ms))
    }

    fn device_sample(
        &self,
        device_index: u32,
        t_ms: UnixMs,
        state: &scenario::DeviceState,
    ) -> DeviceSample {
        let used_bytes = state.used_bytes();
        let ecc_corrected = scenario::ecc_bumps(device_index, self.time(device_index, t_ms));
        DeviceSample {
            t_ms,
            device_index,
            memory: Some(MemoryReading {
                used_bytes,
                reserved_bytes: scenario::RESERVED_BYTES,
                free_bytes: scenario::TOTAL_BYTES
                    .saturating_sub(scenario::RESERVED_BYTES + used_bytes),
                total_bytes: scenario::TOTAL_BYTES,
            }),
            gpu_util_pct: Some(state.gpu_util_pct),
            mem_util_pct: Some(state.mem_util_pct),
            temperature_c: Some(state.temperature_c),
            power_mw: Some(state.power_mw),
            sm_clock_mhz: Some(state.sm_clock_mhz),
            mem_clock_mhz: Some(state.mem_clock_mhz),
            throttle_reasons: Some(state.throttle_reasons),
            ecc_corrected_volatile: Some(ecc_corrected),
            ecc_uncorrected_volatile: Some(0),
        }
    }

    fn health_sample(
        &self,
        device_index: u32,
        t_ms: UnixMs,
        state: &scenario::DeviceState,
    ) -> HealthSample {
        let ecc_corrected = scenario::ecc_bumps(device_index, self.time(device_index, t_ms));
        let baseline = if device_index == scenario::FAULTY_DEVICE_INDEX {
            scenario::ECC_AGGREGATE_BASELINE
        } else {
            0
        };
        let process_count = state.processes.iter().flatten().count() as u64;
        HealthSample {
            t_ms,
            device_index,
            ecc_corrected_aggregate: Some(baseline + ecc_corrected),
            ecc_uncorrected_aggregate: Some(0),
            // Hopper GPUs remap rows instead of retiring pages: NVML reports "not supported".
            retired_pages_sbe: None,
            retired_pages_dbe: None,
            retired_pages_pending: None,
            remapped_rows_correctable: Some(0),
            remapped_rows_uncorrectable: Some(0),
            remapped_rows_pending: Some(false),
            remapped_rows_failure: Some(false),
            bar1_used_bytes: Some(MIB + process_count * 2 * MIB),
            bar1_total_bytes: Some(scenario::BAR1_TOTAL_BYTES),
            pcie_replay_count: Some(0),
            persistence_mode: Some(true),
        }
    }

    /// Events whose time lies in `(after_ms, up_to_ms]`, in time order. At most one scenario
    /// cycle is looked at, so a long gap between polls cannot produce an unbounded batch.
    fn events_between(&self, after_ms: UnixMs, up_to_ms: UnixMs) -> Vec<Event> {
        let mut events = Vec::new();
        for device_index in self.device_indices() {
            // The same interval in this device's scenario time: events at scenario times in
            // (from, to] happen at wall times in (after_ms, up_to_ms].
            let to = self.elapsed_ms(device_index, up_to_ms);
            let from = self
                .elapsed_ms(device_index, after_ms)
                .max(to.saturating_sub(SCENARIO_CYCLE_MS));
            for &(at_ms, scripted) in scenario::scripted_events(device_index) {
                let first_cycle = from.saturating_sub(at_ms).div_euclid(SCENARIO_CYCLE_MS);
                for cycle in first_cycle..=first_cycle.saturating_add(1) {
                    let Some(elapsed) = cycle
                        .checked_mul(SCENARIO_CYCLE_MS)
                        .and_then(|offset| offset.checked_add(at_ms))
                        .filter(|&elapsed| elapsed > from && elapsed <= to)
                    else {
                        continue;
                    };
                    let t_ms = self.wall_ms_at(device_index, elapsed);
                    events.push(self.event(device_index, t_ms, cycle, scripted));
                }
            }
        }
        events.sort_by_key(|e| (e.t_ms, e.device_index));
        events
    }

    fn event(&self, device_index: u32, t_ms: UnixMs, cycle: i64, scripted: ScriptedEvent) -> Event {
        let kind = match scripted {
            ScriptedEvent::OutOfMemory => {
                let state = scenario::device_state(device_index, self.time(device_index, t_ms));
                let free_bytes = scenario::TOTAL_BYTES
                    .saturating_sub(scenario::RESERVED_BYTES + state.used_bytes());
                let gib = |bytes: u64| bytes as f64 / crate::model::GIB as f64;
                EventKind::OutOfMemory {
                    pid: Some(scenario::oom_pid(device_index, cycle)),
                    requested_bytes: Some(scenario::OOM_REQUEST_BYTES),
                    detail: format!(
                        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {:.2} GiB. GPU {device_index} \
                         has a total capacity of {:.2} GiB of which {:.2} GiB is free. (simulated)",
                        gib(scenario::OOM_REQUEST_BYTES),
                        gib(scenario::TOTAL_BYTES),
                        gib(free_bytes),
                    ),
                }
            }
            ScriptedEvent::Xid => EventKind::Xid {
                code: scenario::XID_MMU_FAULT,
                mig_instance: None,
            },
            ScriptedEvent::EccBump => EventKind::EccIncrease {
                corrected_delta: scenario::ECC_BUMP_CORRECTED,
                uncorrected_delta: 0,
            },
        };
        Event {
            t_ms,
            device_index: Some(device_index),
            kind,
        }
    }
}

impl Source for DemoSource {
    fn describe(&self) -> SourceDescription {
        SourceDescription {
            meta: CaptureMeta {
                source: SourceKind::Demo,
                host: DEMO_HOST.to_owned(),
                driver_version: "580.159.04".to_owned(),
                cuda_driver_version: Some(13_000),
                writer: format!("vramscope {}", env!("CARGO_PKG_VERSION")),
                ..Default::default()
            },
            devices: self.device_indices().map(demo_device_facts).collect(),
        }
    }

    fn poll(&mut self, now_ms: UnixMs, tiers: Tiers) -> SampleBatch {
        self.follow_pace();
        let mut batch = SampleBatch::default();
        let states: Vec<scenario::DeviceState> = if tiers.fast || tiers.slow {
            self.device_indices()
                .map(|d| scenario::device_state(d, self.time(d, now_ms)))
                .collect()
        } else {
            Vec::new()
        };
        if tiers.fast {
            batch.devices = self
                .device_indices()
                .zip(&states)
                .map(|(d, state)| self.device_sample(d, now_ms, state))
                .collect();
            batch.processes = Some(
                self.device_indices()
                    .zip(&states)
                    .flat_map(|(d, state)| {
                        state
                            .processes
                            .iter()
                            .flatten()
                            .map(move |p| ProcessSample {
                                t_ms: now_ms,
                                device_index: d,
                                pid: p.pid,
                                name: p.name.to_owned(),
                                used_bytes: Some(p.used_bytes),
                                kind: ProcessKind::Compute,
                                mig_instance: None,
                            })
                    })
                    .collect(),
            );
        }
        if tiers.slow {
            batch.health = self
                .device_indices()
                .zip(&states)
                .map(|(d, state)| self.health_sample(d, now_ms, state))
                .collect();
        }
        match self.last_poll_ms {
            None => {
                batch.events = self.events_between(self.start_ms.saturating_sub(1), now_ms);
                batch.field_changes = self
                    .device_indices()
                    .map(|device_index| FieldStatus {
                        device_index,
                        field: "retired_pages".to_owned(),
                        state: FieldState::NotSupported,
                    })
                    .collect();
            }
            Some(last_ms) => batch.events = self.events_between(last_ms, now_ms),
        }
        self.last_poll_ms = Some(self.last_poll_ms.map_or(now_ms, |last| last.max(now_ms)));
        batch
    }

    fn demo_pace(&self) -> Option<DemoPace> {
        Some(self.pace())
    }
}

/// Facts of simulated GPU `index`: an H200 with identifiers that are obviously not real.
fn demo_device_facts(index: u32) -> DeviceFacts {
    DeviceFacts {
        index,
        name: DEMO_DEVICE_NAME.to_owned(),
        uuid: format!("GPU-00000000-demo-0000-0000-{index:012}"),
        pci_bus_id: format!("0000FA4E:{index:02X}:00.0"),
        memory_total_bytes: scenario::TOTAL_BYTES,
        bar1_total_bytes: Some(scenario::BAR1_TOTAL_BYTES),
        persistence_mode: Some(true),
        ecc_enabled: Some(true),
        compute_capability: Some((9, 0)),
        simulated: true,
        ..Default::default()
    }
}

/// Records `duration_ms` of the demo machine started at `start_ms`, polled every `interval_ms`
/// (at least 1) with the slow tier every [`GENERATED_SLOW_INTERVAL_MS`], exactly as the sampler
/// would have, but without waiting. Tests, benchmarks and screenshots use it.
pub fn generate_capture(
    config: &DemoConfig,
    start_ms: UnixMs,
    duration_ms: u64,
    interval_ms: u32,
) -> Capture {
    let interval_ms = i64::from(interval_ms.max(1));
    let duration_ms = i64::try_from(duration_ms).unwrap_or(i64::MAX);
    let mut source = DemoSource::with_config(start_ms, config.clone());
    let description = source.describe();
    let meta = CaptureMeta {
        started_ms: start_ms,
        interval_ms: interval_ms as u32,
        ..description.meta
    };
    let mut capture = Capture::new(meta, description.devices);
    let mut next_slow_ms = start_ms;
    let mut elapsed_ms = 0;
    while elapsed_ms < duration_ms {
        let t_ms = start_ms.saturating_add(elapsed_ms);
        let slow = t_ms >= next_slow_ms;
        if slow {
            next_slow_ms = t_ms + i64::from(GENERATED_SLOW_INTERVAL_MS);
        }
        capture.ingest(&source.poll(t_ms, Tiers { fast: true, slow }));
        elapsed_ms += interval_ms;
    }
    capture
}

/// Fastest time-lapse: a day of the demo in 10 s of wall time at most.
pub const MAX_DEMO_SPEED: f64 = 8640.0;
/// Most simulated ticks one poll of an [`Accelerated`] source returns (a poll that comes late
/// after a stall catches up over several polls rather than in one huge batch).
const MAX_TICKS_PER_POLL: u64 = 20_000;

/// The demo machine in time-lapse: every poll returns all the ticks the simulated clock passed
/// since the previous one, `speed` times faster than the wall clock, each tick as the sampler
/// would have polled it (fast tier every `interval_ms`, slow tier every
/// [`GENERATED_SLOW_INTERVAL_MS`]), with process lists on every tick. A day of 8 GPUs at 250 ms
/// plays in minutes, for soak tests of `record` and the GUI (`--demo-speed`).
pub struct Accelerated {
    demo: DemoSource,
    speed: f64,
    interval_ms: i64,
    /// Wall time of the first poll; the simulated clock starts at the demo's start then.
    origin_ms: Option<UnixMs>,
    /// Simulated time of the next tick.
    next_tick_ms: UnixMs,
    next_slow_ms: UnixMs,
}

impl Accelerated {
    /// `demo` played `speed` times faster (clamped to 1..=[`MAX_DEMO_SPEED`]), ticking every
    /// `interval_ms` of simulated time.
    pub fn new(demo: DemoSource, speed: f64, interval_ms: u32) -> Self {
        let start_ms = demo.start_ms;
        Accelerated {
            demo,
            speed: if speed.is_finite() {
                speed.clamp(1.0, MAX_DEMO_SPEED)
            } else {
                1.0
            },
            interval_ms: i64::from(interval_ms.max(1)),
            origin_ms: None,
            next_tick_ms: start_ms,
            next_slow_ms: start_ms,
        }
    }
}

impl Source for Accelerated {
    fn describe(&self) -> SourceDescription {
        self.demo.describe()
    }

    fn poll(&mut self, now_ms: UnixMs, _tiers: Tiers) -> SampleBatch {
        let origin_ms = *self.origin_ms.get_or_insert(now_ms);
        let simulated_now_ms =
            self.demo.start_ms + ((now_ms.saturating_sub(origin_ms)) as f64 * self.speed) as i64;
        let mut batch = SampleBatch::default();
        let mut ticks = 0;
        while self.next_tick_ms <= simulated_now_ms && ticks < MAX_TICKS_PER_POLL {
            let t_ms = self.next_tick_ms;
            let slow = t_ms >= self.next_slow_ms;
            if slow {
                self.next_slow_ms = t_ms + i64::from(GENERATED_SLOW_INTERVAL_MS);
            }
            let tick = self.demo.poll(t_ms, Tiers { fast: true, slow });
            batch.devices.extend(tick.devices);
            batch
                .processes
                .get_or_insert_with(Vec::new)
                .extend(tick.processes.into_iter().flatten());
            batch.health.extend(tick.health);
            batch.events.extend(tick.events);
            batch.field_changes.extend(tick.field_changes);
            self.next_tick_ms += self.interval_ms;
            ticks += 1;
        }
        batch
    }
}
