//! The demo machine's script: what every simulated GPU is doing at a given moment.
//!
//! A working day on a shared training box is compressed into a cycle of [`SCENARIO_CYCLE_MS`]
//! (15 minutes of wall time) that repeats forever. Even-numbered GPUs run a training job, odd ones
//! an inference server:
//!
//! | time in cycle | training GPU (0, 2, ...)                        | serving GPU (1, 3, ...)                      |
//! |---------------|-------------------------------------------------|----------------------------------------------|
//! | 0:00–0:20     | `train.py` loads its model to ~58 GiB           | `serve.py` loads ~20 GiB                     |
//! | 0:20–5:00     | training steps every 3.2 s, peaks ~82 GiB       | serving; leaks ~88 MiB/s                     |
//! | 5:00–7:59     | peaks grow (longer sequences), cross 90%        |                                              |
//! | 7:57–7:59     | last step holds ~132 GiB; OOM: asks for 14 GiB  |                                              |
//! | 8:14–14:45    | restarted (new pid): load, train, smaller batch |                                              |
//! | 9:50–10:01    |                                                 | `kernel_test.py` faults: Xid 31 (GPU 1 only) |
//! | 11:40         |                                                 | 3 correctable ECC errors (GPU 1 only)        |
//! | 14:45 / 14:50 | job done, GPU idle                              | watchdog restarts the leaking server         |
//!
//! Every function here is pure: the state depends only on the device, the cycle number and the time
//! within the cycle. Noise comes from a hash of those, never from a random generator with state.

use crate::model::{GIB, MIB};

/// Length of one repetition of the simulated day: 15 minutes of wall time.
pub const SCENARIO_CYCLE_MS: i64 = 15 * 60 * 1000;

/// Framebuffer size of the simulated H200, as NVML reports it on the real card.
pub const TOTAL_BYTES: u64 = 143_771 * MIB;
/// Memory the driver and firmware keep for themselves (NVML v2 `reserved`).
pub const RESERVED_BYTES: u64 = 615 * MIB;
/// BAR1 aperture of an H200.
pub const BAR1_TOTAL_BYTES: u64 = 256 * GIB;

/// NVML clock-event reason: the GPU is idle and clocks are low.
pub const CLOCKS_EVENT_GPU_IDLE: u64 = 0x1;
/// NVML clock-event reason: clocks held down by the software power cap.
pub const CLOCKS_EVENT_SW_POWER_CAP: u64 = 0x4;

/// Correctable ECC errors added by each ECC bump on GPU 1.
pub const ECC_BUMP_CORRECTED: u64 = 3;
/// Aggregate (lifetime) correctable ECC count GPU 1 starts with: an older card.
pub const ECC_AGGREGATE_BASELINE: u64 = 12;
/// Bytes the OOMing allocation asks for.
pub const OOM_REQUEST_BYTES: u64 = 14 * GIB;
/// The Xid the kernel test triggers: an MMU fault (illegal address in a user kernel).
pub const XID_MMU_FAULT: u64 = 31;

/// Device whose kernel test raises the Xid and whose memory reports the ECC bump.
pub const FAULTY_DEVICE_INDEX: u32 = 1;

const CONTEXT_BYTES: u64 = 512 * MIB;
const LOAD_SHARD_BYTES: u64 = 512 * MIB;

// Training job (even GPUs).
const TRAIN_LOAD_MS: i64 = 20_000;
const TRAIN_WEIGHTS_BYTES: u64 = 58 * GIB;
const TRAIN_BASE_BYTES: u64 = 60 * GIB;
const STEP_MS: i64 = 3_200;
/// Fraction of a step at which activations peak (end of the forward pass).
const STEP_PEAK_PHASE: f64 = 0.55;
const STEP_PEAK_OFFSET_MS: i64 = 1_760;
const ACTIVATIONS_BYTES: f64 = 22.0 * GIB as f64;
const ACTIVATIONS_GROWN_BYTES: f64 = 72.0 * GIB as f64;
const ACTIVATIONS_RESTART_BYTES: f64 = 18.0 * GIB as f64;
const GROWTH_START_MS: i64 = 300_000;
/// The OOM happens at the peak of training step 143.
pub const OOM_AT_MS: i64 = TRAIN_LOAD_MS + 143 * STEP_MS + STEP_PEAK_OFFSET_MS;
/// How long before the OOM the failing step already holds its peak: longer than the 1 s interval
/// of generated captures (and the default 250 ms), so the reading just before the OOM shows the
/// card too full for the request rather than a trough between two samples.
pub const OOM_FULL_BEFORE_MS: i64 = 1_500;
/// The failed process prints its traceback this long before it exits.
const OOM_EXIT_DELAY_MS: i64 = 3_000;
const RESTART_AT_MS: i64 = OOM_AT_MS + 15_000;
const JOB_END_MS: i64 = 885_000;

// Inference server (odd GPUs).
const SERVE_LOAD_MS: i64 = 8_000;
const SERVE_WEIGHTS_BYTES: u64 = 20 * GIB;
const SERVE_LEAK_BYTES_PER_S: f64 = 88.0 * MIB as f64;
const SERVE_BURST_BYTES: f64 = 1.5 * GIB as f64;
const SERVE_BURST_MS: i64 = 1_100;
const SERVE_END_MS: i64 = 890_000;

// Kernel test on GPU 1.
const KERNEL_TEST_START_MS: i64 = 590_000;
/// The kernel test's illegal access.
pub const XID_AT_MS: i64 = 600_500;
const KERNEL_TEST_END_MS: i64 = 601_000;
const KERNEL_TEST_BYTES: u64 = 1536 * MIB;
/// Correctable ECC errors appear on GPU 1.
pub const ECC_BUMP_AT_MS: i64 = 700_000;

const IDLE_TEMPERATURE_C: f64 = 34.0;
const THERMAL_TAU_MS: f64 = 60_000.0;
const POWER_CAP_MW: f64 = 700_000.0;
const IDLE_POWER_MW: f64 = 75_000.0;
const MAX_SM_CLOCK_MHZ: f64 = 1_980.0;
const IDLE_SM_CLOCK_MHZ: u32 = 345;
const MEM_CLOCK_MHZ: u32 = 3_201;

/// What a simulated GPU runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Loads a model, trains with periodic peaks, runs out of memory once per cycle.
    Training,
    /// An inference server that slowly leaks memory until a watchdog restarts it.
    Serving,
}

impl Role {
    /// Even GPUs train, odd GPUs serve.
    pub fn of(device_index: u32) -> Role {
        if device_index.is_multiple_of(2) {
            Role::Training
        } else {
            Role::Serving
        }
    }
}

/// Where a device is in the scenario: the cycle number (counted from the source's start; may be
/// negative before it) and the time within that cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScenarioTime {
    /// Repetition number, 0 for the cycle that begins at the source's start.
    pub cycle: i64,
    /// Milliseconds into the cycle, in `0..SCENARIO_CYCLE_MS`.
    pub at_ms: i64,
}

impl ScenarioTime {
    /// Splits milliseconds since the scenario's origin into cycle and position.
    pub fn from_elapsed(elapsed_ms: i64) -> Self {
        ScenarioTime {
            cycle: elapsed_ms.div_euclid(SCENARIO_CYCLE_MS),
            at_ms: elapsed_ms.rem_euclid(SCENARIO_CYCLE_MS),
        }
    }
}

/// How far GPU `device_index` is shifted into the scenario, so that eight simulated GPUs do not
/// move in lockstep. GPUs 0 and 1 are not shifted.
pub fn device_shift_ms(device_index: u32) -> i64 {
    i64::from(device_index / 2) * 97_000
}

/// One simulated process on a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessState {
    /// Simulated pid, new for every (re)start.
    pub pid: u32,
    /// Command line, always ending in "(simulated)".
    pub name: &'static str,
    /// What NVML would list for it: allocator reservations plus context.
    pub used_bytes: u64,
}

/// Everything a fast-tier poll reads from one simulated GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceState {
    /// Up to two processes (the main job and GPU 1's kernel test).
    pub processes: [Option<ProcessState>; 2],
    pub gpu_util_pct: u32,
    pub mem_util_pct: u32,
    pub temperature_c: u32,
    pub power_mw: u32,
    pub sm_clock_mhz: u32,
    pub mem_clock_mhz: u32,
    pub throttle_reasons: u64,
}

impl DeviceState {
    /// Device `used` memory: the sum of what its processes hold.
    pub fn used_bytes(&self) -> u64 {
        self.processes.iter().flatten().map(|p| p.used_bytes).sum()
    }
}

/// A scheduled moment in the script that produces an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScriptedEvent {
    /// The training job's failed allocation.
    OutOfMemory,
    /// Xid 31 from the faulting kernel test.
    Xid,
    /// Correctable ECC errors appear.
    EccBump,
}

/// The events of one cycle on `device_index`, with their time within the cycle.
pub fn scripted_events(device_index: u32) -> &'static [(i64, ScriptedEvent)] {
    match Role::of(device_index) {
        Role::Training => &[(OOM_AT_MS, ScriptedEvent::OutOfMemory)],
        Role::Serving if device_index == FAULTY_DEVICE_INDEX => &[
            (XID_AT_MS, ScriptedEvent::Xid),
            (ECC_BUMP_AT_MS, ScriptedEvent::EccBump),
        ],
        Role::Serving => &[],
    }
}

/// Correctable ECC errors GPU `device_index` has accumulated since the source started, given the
/// milliseconds elapsed in its own (shifted) scenario since then.
pub fn ecc_bumps(device_index: u32, time: ScenarioTime) -> u64 {
    if device_index != FAULTY_DEVICE_INDEX {
        return 0;
    }
    let bumps = time.cycle + i64::from(time.at_ms >= ECC_BUMP_AT_MS);
    u64::try_from(bumps).unwrap_or(0) * ECC_BUMP_CORRECTED
}

/// The pid of a simulated process: distinct per device, per job and per cycle, like a real
/// machine where every restart gets a new pid.
fn pid(device_index: u32, job: u32, cycle: i64) -> u32 {
    let run = u32::try_from(cycle.rem_euclid(4_000)).unwrap_or(0);
    100_000 + device_index * 20_000 + job * 5_000 + run
}

/// Pid of the training job on `device_index` that runs out of memory in `cycle`.
pub fn oom_pid(device_index: u32, cycle: i64) -> u32 {
    pid(device_index, 0, cycle)
}

/// A number in [-1, 1) derived from the arguments alone (splitmix64).
fn noise(device_index: u32, channel: u64, time: ScenarioTime, at_ms: i64) -> f64 {
    let mut z = (time.cycle as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((at_ms as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9))
        .wrapping_add(u64::from(device_index) << 40)
        .wrapping_add(channel << 56);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// Memory while loading weights: the context first, then shard after shard.
fn loading_bytes(since_ms: i64, load_ms: i64, weights_bytes: u64) -> u64 {
    let progress = (since_ms as f64 / load_ms as f64).clamp(0.0, 1.0);
    let loaded = ((weights_bytes - CONTEXT_BYTES) as f64 * progress) as u64;
    CONTEXT_BYTES + loaded / LOAD_SHARD_BYTES * LOAD_SHARD_BYTES
}

/// Share of the step's activation memory alive at `phase` in [0, 1): built up during the forward
/// pass, released during the backward pass, a little left for gradients and the optimizer step.
fn activation_share(phase: f64) -> f64 {
    if phase < STEP_PEAK_PHASE {
        phase / STEP_PEAK_PHASE
    } else if phase < 0.8 {
        1.0 - 0.9 * (phase - STEP_PEAK_PHASE) / (0.8 - STEP_PEAK_PHASE)
    } else {
        0.1
    }
}

/// One thermal segment: from `start_ms` on the GPU heads towards `target_c`.
struct ThermalSegment {
    start_ms: i64,
    target_c: f64,
}

/// Temperature at `at_ms` of a GPU that follows `segments` with first-order lag, starting the
/// cycle at `initial_c`.
fn lagged_temperature(segments: &[ThermalSegment], at_ms: i64, initial_c: f64) -> f64 {
    let mut temperature = initial_c;
    for (i, segment) in segments.iter().enumerate() {
        if at_ms < segment.start_ms {
            break;
        }
        let end_ms = segments
            .get(i + 1)
            .map_or(at_ms, |next| next.start_ms.min(at_ms));
        let decay = (-((end_ms - segment.start_ms) as f64) / THERMAL_TAU_MS).exp();
        temperature = segment.target_c + (temperature - segment.target_c) * decay;
    }
    temperature
}

/// Temperature within a cycle, starting from where the previous cycle ended (one cycle is many
/// time constants long, so one pass from idle converges).
fn cycle_temperature(segments: &[ThermalSegment], at_ms: i64) -> f64 {
    let carried_c = lagged_temperature(segments, SCENARIO_CYCLE_MS, IDLE_TEMPERATURE_C);
    lagged_temperature(segments, at_ms, carried_c)
}

const TRAINING_THERMAL: [ThermalSegment; 6] = [
    ThermalSegment {
        start_ms: 0,
        target_c: 42.0,
    },
    ThermalSegment {
        start_ms: TRAIN_LOAD_MS,
        target_c: 71.0,
    },
    ThermalSegment {
        start_ms: OOM_AT_MS + OOM_EXIT_DELAY_MS,
        target_c: IDLE_TEMPERATURE_C,
    },
    ThermalSegment {
        start_ms: RESTART_AT_MS,
        target_c: 42.0,
    },
    ThermalSegment {
        start_ms: RESTART_AT_MS + TRAIN_LOAD_MS,
        target_c: 69.0,
    },
    ThermalSegment {
        start_ms: JOB_END_MS,
        target_c: IDLE_TEMPERATURE_C,
    },
];

const SERVING_THERMAL: [ThermalSegment; 3] = [
    ThermalSegment {
        start_ms: 0,
        target_c: 40.0,
    },
    ThermalSegment {
        start_ms: SERVE_LOAD_MS,
        target_c: 55.0,
    },
    ThermalSegment {
        start_ms: SERVE_END_MS,
        target_c: IDLE_TEMPERATURE_C,
    },
];

/// What a GPU's compute is doing, which decides utilization, power and clocks.
enum Activity {
    Idle,
    /// Copying weights in: light load.
    Loading,
    /// Inside a training step, with `share` of the step's activations alive.
    Training {
        share: f64,
    },
    /// Serving requests with the given load in [0, 1].
    Serving {
        load: f64,
    },
}

/// The state of GPU `device_index` at `time`: its processes and temperature from its role
/// ([`training_gpu`], [`serving_gpu`]), then the load ([`activity_load`]), power and clocks
/// ([`clocks`]) its activity makes.
pub fn device_state(device_index: u32, time: ScenarioTime) -> DeviceState {
    let at = time.at_ms;
    let n = |channel: u64| noise(device_index, channel, time, at);
    let mut processes = [None, None];
    let (activity, temperature_c) = match Role::of(device_index) {
        Role::Training => training_gpu(device_index, time, &n, &mut processes),
        Role::Serving => serving_gpu(device_index, time, &n, &mut processes),
    };

    // Utilization, power and clocks follow the activity; power above the cap pulls clocks down.
    let (gpu_util, mem_util, wanted_power_mw) = activity_load(&activity, &n);
    let power_capped = wanted_power_mw > POWER_CAP_MW;
    let power_mw = wanted_power_mw.min(POWER_CAP_MW - 1_500.0 * n(6).abs());
    let (sm_clock_mhz, throttle_reasons) = clocks(&activity, power_capped, wanted_power_mw);
    DeviceState {
        processes,
        gpu_util_pct: gpu_util.clamp(0.0, 100.0).round() as u32,
        mem_util_pct: mem_util.clamp(0.0, 100.0).round() as u32,
        temperature_c: (temperature_c + 0.6 * n(7)).round() as u32,
        power_mw: power_mw.max(0.0) as u32,
        sm_clock_mhz,
        mem_clock_mhz: MEM_CLOCK_MHZ,
        throttle_reasons,
    }
}

/// A training GPU at `time` (noise from `n`): its job, if one runs ([`training_phase`]), goes
/// into `processes`; returns what the GPU is doing and its temperature (warmer with more of a
/// step's activations alive).
fn training_gpu(
    device_index: u32,
    time: ScenarioTime,
    n: &impl Fn(u64) -> f64,
    processes: &mut [Option<ProcessState>; 2],
) -> (Activity, f64) {
    let at = time.at_ms;
    let first_run = pid(device_index, 0, time.cycle);
    let restarted = pid(device_index, 1, time.cycle);
    let training = |since_ms: i64, amplitude: f64, min_share: f64| {
        let phase = (since_ms.rem_euclid(STEP_MS)) as f64 / STEP_MS as f64;
        let share = activation_share(phase).max(min_share);
        let jitter = n(1) * 192.0 * MIB as f64;
        let bytes = TRAIN_BASE_BYTES as f64 + share * amplitude + jitter;
        (bytes.max(0.0) as u64, Activity::Training { share })
    };
    let (job, bytes_and_activity) = training_phase(at, (first_run, restarted), &training);
    let activity = match (job, bytes_and_activity) {
        (Some(pid), Some((used_bytes, activity))) => {
            processes[0] = Some(ProcessState {
                pid,
                name: "python train.py (simulated)",
                used_bytes,
            });
            activity
        }
        _ => Activity::Idle,
    };
    let mut temperature = cycle_temperature(&TRAINING_THERMAL, at);
    if let Activity::Training { share } = activity {
        temperature += 2.0 * share;
    }
    (activity, temperature)
}

/// Which training job runs `at` ms into the cycle (the first run, or the one `restarted` after
/// the out-of-memory), with its memory and activity: loading, then training steps (`training`
/// from the step's start, its activations' amplitude and least share) whose activations grow
/// until the OOM, the failed step's memory held while the traceback prints, nothing until the
/// restart, and the restarted job until the end.
fn training_phase(
    at: i64,
    (first_run, restarted): (u32, u32),
    training: &impl Fn(i64, f64, f64) -> (u64, Activity),
) -> (Option<u32>, Option<(u64, Activity)>) {
    if at < TRAIN_LOAD_MS {
        (
            Some(first_run),
            Some((
                loading_bytes(at, TRAIN_LOAD_MS, TRAIN_WEIGHTS_BYTES),
                Activity::Loading,
            )),
        )
    } else if at < OOM_AT_MS {
        let since = at - TRAIN_LOAD_MS;
        let growth =
            ((at - GROWTH_START_MS) as f64 / (OOM_AT_MS - GROWTH_START_MS) as f64).clamp(0.0, 1.0);
        let amplitude = ACTIVATIONS_BYTES + growth * (ACTIVATIONS_GROWN_BYTES - ACTIVATIONS_BYTES);
        // The failing step's long sequence fills the card early and holds it, so the readings
        // just before the OOM show it full, as a real capture would.
        let min_share = if at >= OOM_AT_MS - OOM_FULL_BEFORE_MS {
            1.0
        } else {
            0.0
        };
        (Some(first_run), Some(training(since, amplitude, min_share)))
    } else if at < OOM_AT_MS + OOM_EXIT_DELAY_MS {
        // The failed allocation left everything else allocated while the traceback prints.
        let held = TRAIN_BASE_BYTES as f64 + ACTIVATIONS_GROWN_BYTES;
        (Some(first_run), Some((held as u64, Activity::Idle)))
    } else if at < RESTART_AT_MS {
        (None, None)
    } else if at < RESTART_AT_MS + TRAIN_LOAD_MS {
        let since = at - RESTART_AT_MS;
        (
            Some(restarted),
            Some((
                loading_bytes(since, TRAIN_LOAD_MS, TRAIN_WEIGHTS_BYTES),
                Activity::Loading,
            )),
        )
    } else if at < JOB_END_MS {
        let since = at - RESTART_AT_MS - TRAIN_LOAD_MS;
        (
            Some(restarted),
            Some(training(since, ACTIVATIONS_RESTART_BYTES, 0.0)),
        )
    } else {
        (None, None)
    }
}

/// A serving GPU at `time` (noise from `n`): the server (loading, then serving a varying load
/// with bursts and a slow leak) and, on the faulty GPU, the kernel test go into `processes`;
/// returns what the GPU is doing and its temperature.
fn serving_gpu(
    device_index: u32,
    time: ScenarioTime,
    n: &impl Fn(u64) -> f64,
    processes: &mut [Option<ProcessState>; 2],
) -> (Activity, f64) {
    let at = time.at_ms;
    let server = pid(device_index, 0, time.cycle);
    let activity = if at < SERVE_END_MS {
        let (used_bytes, activity) = if at < SERVE_LOAD_MS {
            (
                loading_bytes(at, SERVE_LOAD_MS, SERVE_WEIGHTS_BYTES),
                Activity::Loading,
            )
        } else {
            let since = at - SERVE_LOAD_MS;
            let leaked = SERVE_LEAK_BYTES_PER_S * since as f64 / 1000.0;
            let burst = (since % SERVE_BURST_MS) as f64 / SERVE_BURST_MS as f64;
            let load =
                (0.45 + 0.25 * (since as f64 / 23_000.0).sin() + 0.1 * n(2)).clamp(0.05, 1.0);
            let bytes = SERVE_WEIGHTS_BYTES as f64 + leaked + burst * load * SERVE_BURST_BYTES;
            (bytes as u64, Activity::Serving { load })
        };
        processes[0] = Some(ProcessState {
            pid: server,
            name: "python serve.py (simulated)",
            used_bytes,
        });
        activity
    } else {
        Activity::Idle
    };
    if device_index == FAULTY_DEVICE_INDEX
        && (KERNEL_TEST_START_MS..KERNEL_TEST_END_MS).contains(&at)
    {
        processes[1] = Some(ProcessState {
            pid: pid(device_index, 1, time.cycle),
            name: "python kernel_test.py (simulated)",
            used_bytes: KERNEL_TEST_BYTES,
        });
    }
    (activity, cycle_temperature(&SERVING_THERMAL, at))
}

/// The GPU and memory utilization (%) and the power (mW, before the cap) that `activity` makes,
/// with noise from `n`.
fn activity_load(activity: &Activity, n: &impl Fn(u64) -> f64) -> (f64, f64, f64) {
    match *activity {
        Activity::Idle => (0.0, 0.0, IDLE_POWER_MW + 3_000.0 * n(3)),
        Activity::Loading => (
            12.0 + 6.0 * n(4),
            4.0 + 2.0 * n(5),
            140_000.0 + 15_000.0 * n(3),
        ),
        Activity::Training { share } => {
            let util = if share > 0.1 {
                97.0 + 2.0 * n(4)
            } else {
                78.0 + 5.0 * n(4)
            };
            (
                util,
                38.0 + 25.0 * share + 3.0 * n(5),
                430_000.0 + 300_000.0 * share + 15_000.0 * n(3),
            )
        }
        Activity::Serving { load } => (
            100.0 * load,
            30.0 * load + 2.0 * n(5),
            160_000.0 + 260_000.0 * load + 10_000.0 * n(3),
        ),
    }
}

/// The SM clock (MHz) and the throttle reasons: idle clocks when idle, pulled down by how far
/// the `wanted_power_mw` overshoots the cap when `power_capped`, else the maximum.
fn clocks(activity: &Activity, power_capped: bool, wanted_power_mw: f64) -> (u32, u64) {
    match activity {
        Activity::Idle => (IDLE_SM_CLOCK_MHZ, CLOCKS_EVENT_GPU_IDLE),
        _ if power_capped => {
            let overshoot = (wanted_power_mw - POWER_CAP_MW) / POWER_CAP_MW;
            (
                (MAX_SM_CLOCK_MHZ * (1.0 - overshoot)).round() as u32 / 15 * 15,
                CLOCKS_EVENT_SW_POWER_CAP,
            )
        }
        _ => (MAX_SM_CLOCK_MHZ as u32, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(at_ms: i64) -> ScenarioTime {
        ScenarioTime { cycle: 0, at_ms }
    }

    #[test]
    fn scenario_time_wraps_and_handles_negative_elapsed() {
        assert_eq!(
            ScenarioTime::from_elapsed(SCENARIO_CYCLE_MS + 5),
            ScenarioTime { cycle: 1, at_ms: 5 }
        );
        assert_eq!(
            ScenarioTime::from_elapsed(-1),
            ScenarioTime {
                cycle: -1,
                at_ms: SCENARIO_CYCLE_MS - 1
            }
        );
    }

    #[test]
    fn noise_is_bounded_and_varies() {
        let values: Vec<f64> = (0..1000).map(|t| noise(0, 1, at(t), t)).collect();
        assert!(values.iter().all(|v| (-1.0..1.0).contains(v)));
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        assert!(mean.abs() < 0.1, "mean {mean}");
        assert_ne!(values[0], values[1]);
    }

    #[test]
    fn training_job_loads_about_sixty_gib_and_peaks_during_steps() {
        let loaded = device_state(0, at(TRAIN_LOAD_MS - 1)).used_bytes();
        assert!((55 * GIB..=60 * GIB).contains(&loaded), "loaded {loaded}");
        let step_start = TRAIN_LOAD_MS + 10 * STEP_MS;
        let trough = device_state(0, at(step_start)).used_bytes();
        let peak = device_state(0, at(step_start + STEP_PEAK_OFFSET_MS)).used_bytes();
        assert!(peak > trough + 15 * GIB, "peak {peak} trough {trough}");
        assert!(peak < TOTAL_BYTES * 6 / 10);
    }

    #[test]
    fn oom_happens_near_full_memory_and_the_job_comes_back_with_a_new_pid() {
        let before = device_state(0, at(OOM_AT_MS));
        let free = TOTAL_BYTES - RESERVED_BYTES - before.used_bytes();
        assert!(
            free < OOM_REQUEST_BYTES,
            "free {free} must not fit the request"
        );
        // Every reading in the failing step's last OOM_FULL_BEFORE_MS shows the card full too.
        for before_ms in (1..=OOM_FULL_BEFORE_MS).step_by(50) {
            let used = device_state(0, at(OOM_AT_MS - before_ms)).used_bytes();
            let free = TOTAL_BYTES - RESERVED_BYTES - used;
            assert!(
                free < OOM_REQUEST_BYTES,
                "{before_ms} ms before: free {free}"
            );
        }
        let gone = device_state(0, at(OOM_AT_MS + OOM_EXIT_DELAY_MS + 1));
        assert_eq!(gone.used_bytes(), 0);
        let old_pid = before.processes[0].map(|p| p.pid);
        let new_pid = device_state(0, at(RESTART_AT_MS + 1)).processes[0].map(|p| p.pid);
        assert!(old_pid.is_some() && new_pid.is_some() && old_pid != new_pid);
    }

    #[test]
    fn power_cap_throttles_during_peaks_and_idle_is_reported() {
        let peak = device_state(0, at(TRAIN_LOAD_MS + 10 * STEP_MS + STEP_PEAK_OFFSET_MS));
        assert_eq!(peak.throttle_reasons, CLOCKS_EVENT_SW_POWER_CAP);
        assert!(
            peak.power_mw <= POWER_CAP_MW as u32 && peak.sm_clock_mhz < MAX_SM_CLOCK_MHZ as u32
        );
        let idle = device_state(0, at(JOB_END_MS + 1));
        assert_eq!(idle.throttle_reasons, CLOCKS_EVENT_GPU_IDLE);
        assert_eq!(idle.gpu_util_pct, 0);
    }

    #[test]
    fn temperature_heats_while_training_cools_when_idle_and_is_continuous_across_cycles() {
        let hot = device_state(0, at(GROWTH_START_MS)).temperature_c;
        assert!((65..=75).contains(&hot), "hot {hot}");
        let exit = OOM_AT_MS + OOM_EXIT_DELAY_MS;
        let cooled = device_state(0, at(RESTART_AT_MS - 1)).temperature_c;
        assert!(
            cooled + 5 < device_state(0, at(exit)).temperature_c,
            "cooled {cooled}"
        );
        let end = cycle_temperature(&TRAINING_THERMAL, SCENARIO_CYCLE_MS);
        let start = cycle_temperature(&TRAINING_THERMAL, 0);
        assert!((end - start).abs() < 0.5, "end {end} start {start}");
    }

    #[test]
    fn serving_job_leaks_but_stays_below_ninety_percent() {
        let early = device_state(1, at(SERVE_LOAD_MS + 1_000)).used_bytes();
        let late = device_state(1, at(SERVE_END_MS - 1)).used_bytes();
        assert!(late > early + 60 * GIB, "early {early} late {late}");
        assert!(((late + RESERVED_BYTES) as f64) < TOTAL_BYTES as f64 * 0.85);
    }

    #[test]
    fn ecc_bumps_accumulate_over_cycles_on_the_faulty_gpu_only() {
        assert_eq!(ecc_bumps(1, at(ECC_BUMP_AT_MS - 1)), 0);
        assert_eq!(ecc_bumps(1, at(ECC_BUMP_AT_MS)), ECC_BUMP_CORRECTED);
        assert_eq!(
            ecc_bumps(1, ScenarioTime { cycle: 2, at_ms: 0 }),
            2 * ECC_BUMP_CORRECTED
        );
        assert_eq!(
            ecc_bumps(
                1,
                ScenarioTime {
                    cycle: -1,
                    at_ms: 0
                }
            ),
            0
        );
        assert_eq!(ecc_bumps(0, at(ECC_BUMP_AT_MS)), 0);
    }
}
