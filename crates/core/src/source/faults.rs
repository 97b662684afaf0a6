//! Fault injection: a [`Source`] wrapper that makes a GPU fail the way NVML fails on real
//! machines, on a schedule, so the sampler, `record` and the GUI can be tested against it.
//!
//! Three faults, each on one GPU for a time window counted from the first poll:
//! - `lost`: the GPU falls off the bus (NVML `GPU_IS_LOST`): one `DeviceLost` event, every field
//!   marked failed, no samples; when the window ends it answers again: one `DeviceReturned`
//!   event, fields back to readable, samples resume.
//! - `fail`: one field's calls fail (NVML "Unknown Error"): the field is empty and marked failed,
//!   the rest of the GPU is sampled as usual.
//! - `hang`: a call blocks: the poll that enters the window sleeps until the window ends.
//!
//! The plan is a short text, e.g. `lost gpu=1 at=2s for=3s; hang gpu=0 at=6s for=1.5s;
//! fail gpu=0 field=temperature at=1s for=2s`, given in the environment variable
//! [`FAULTS_ENV`] to any vramscope command that samples (live GPUs or `--demo`).

use std::collections::{BTreeMap, BTreeSet};

use super::{Source, SourceDescription, Tiers};
use crate::model::{
    DeviceSample, Event, EventKind, FieldState, FieldStatus, SampleBatch, UnixMs, field_name,
};

/// The environment variable that holds a fault plan.
pub const FAULTS_ENV: &str = "VRAMSCOPE_FAULTS";

/// The NVML message a lost GPU gives, as the injected faults report it.
const LOST_MESSAGE: &str = "GPU is lost (injected fault: NVML_ERROR_GPU_IS_LOST)";
/// The NVML message of a failing call, as the injected faults report it.
const FAILED_MESSAGE: &str = "Unknown Error (injected fault: NVML_ERROR_UNKNOWN)";

/// What goes wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// The GPU is lost for the window, then answers again.
    Lost,
    /// One field (a name from [`field_name`] that a fast sample carries) fails for the window.
    Fail { field: &'static str },
    /// The poll that enters the window blocks until the window ends.
    Hang,
}

/// One scheduled fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    pub device_index: u32,
    /// Start of the window, in milliseconds after the first poll.
    pub at_ms: u64,
    /// Length of the window in milliseconds.
    pub for_ms: u64,
}

impl Fault {
    fn covers(&self, elapsed_ms: u64) -> bool {
        elapsed_ms >= self.at_ms && elapsed_ms < self.at_ms.saturating_add(self.for_ms)
    }
}

/// The fast-sample fields a `fail` fault can name.
const FAILABLE_FIELDS: &[&str] = &[
    field_name::MEMORY,
    field_name::UTILIZATION,
    field_name::TEMPERATURE,
    field_name::POWER,
    field_name::SM_CLOCK,
    field_name::MEM_CLOCK,
    field_name::THROTTLE_REASONS,
    field_name::ECC_VOLATILE,
];

/// Parses a fault plan (see the module documentation). Errors say which part is wrong.
pub fn parse_plan(text: &str) -> Result<Vec<Fault>, String> {
    text.split(';')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(parse_fault)
        .collect()
}

fn parse_fault(text: &str) -> Result<Fault, String> {
    let mut words = text.split_whitespace();
    let kind_word = words.next().unwrap_or_default();
    let (mut device_index, mut at_ms, mut for_ms, mut field) = (None, None, None, None);
    for word in words {
        let (key, value) = word
            .split_once('=')
            .ok_or_else(|| format!("'{word}' in '{text}' is not key=value"))?;
        match key {
            "gpu" => {
                device_index = Some(
                    value
                        .parse()
                        .map_err(|_| format!("gpu={value} in '{text}' is not a GPU index"))?,
                );
            }
            "at" => at_ms = Some(parse_secs(value, text)?),
            "for" => for_ms = Some(parse_secs(value, text)?),
            "field" => {
                field = Some(
                    FAILABLE_FIELDS
                        .iter()
                        .copied()
                        .find(|f| *f == value)
                        .ok_or_else(|| {
                            format!("field={value} in '{text}': one of {FAILABLE_FIELDS:?}")
                        })?,
                );
            }
            _ => return Err(format!("unknown key '{key}' in '{text}'")),
        }
    }
    let kind = match (kind_word, field) {
        ("lost", None) => FaultKind::Lost,
        ("hang", None) => FaultKind::Hang,
        ("fail", Some(field)) => FaultKind::Fail { field },
        ("fail", None) => return Err(format!("'{text}': fail needs field=NAME")),
        ("lost" | "hang", Some(_)) => return Err(format!("'{text}': only fail takes a field")),
        _ => {
            return Err(format!(
                "'{text}': a fault is 'lost', 'fail' or 'hang', then gpu=N at=SECS for=SECS"
            ));
        }
    };
    Ok(Fault {
        kind,
        device_index: device_index.ok_or_else(|| format!("'{text}' needs gpu=N"))?,
        at_ms: at_ms.ok_or_else(|| format!("'{text}' needs at=SECS"))?,
        for_ms: for_ms.ok_or_else(|| format!("'{text}' needs for=SECS"))?,
    })
}

/// `1.5s`, `1.5` or `1500ms`, in milliseconds.
fn parse_secs(value: &str, text: &str) -> Result<u64, String> {
    let (number, scale) = match value.strip_suffix("ms") {
        Some(ms) => (ms, 1.0),
        None => (value.strip_suffix('s').unwrap_or(value), 1000.0),
    };
    let parsed: f64 = number
        .parse()
        .map_err(|_| format!("'{value}' in '{text}' is not a time (e.g. 1.5s or 200ms)"))?;
    if !(0.0..=1e9).contains(&parsed) {
        return Err(format!("'{value}' in '{text}' is out of range"));
    }
    Ok((parsed * scale).round() as u64)
}

/// A source whose GPUs fail on schedule (see the module documentation).
pub struct FaultySource {
    inner: Box<dyn Source>,
    faults: Vec<Fault>,
    /// Hang faults (by position in `faults`) that have already blocked a poll.
    hung: BTreeSet<usize>,
    /// Time of the first poll: fault windows count from it.
    origin_ms: Option<UnixMs>,
    /// GPUs now lost.
    lost: BTreeSet<u32>,
    /// (GPU, field) pairs now failing.
    failing: BTreeSet<(u32, &'static str)>,
    /// The field states the wrapped source reported, to restore when a fault ends.
    inner_states: BTreeMap<(u32, String), FieldState>,
}

impl FaultySource {
    /// Wraps `inner` with the faults of `plan`.
    pub fn new(inner: Box<dyn Source>, faults: Vec<Fault>) -> Self {
        FaultySource {
            inner,
            faults,
            hung: BTreeSet::new(),
            origin_ms: None,
            lost: BTreeSet::new(),
            failing: BTreeSet::new(),
            inner_states: BTreeMap::new(),
        }
    }

    /// Wraps `source` in the plan of [`FAULTS_ENV`] when it is set. A plan that does not parse
    /// is reported on standard error and in the log and nothing is injected.
    #[cfg(feature = "native")]
    pub fn wrap_from_env(source: Box<dyn Source>) -> Box<dyn Source> {
        let Ok(text) = std::env::var(FAULTS_ENV) else {
            return source;
        };
        match parse_plan(&text) {
            Ok(faults) if faults.is_empty() => source,
            Ok(faults) => {
                eprintln!("vramscope: {FAULTS_ENV} is set: injecting faults {faults:?}");
                log::warn!("{FAULTS_ENV} is set: injecting faults {faults:?}");
                Box::new(FaultySource::new(source, faults))
            }
            Err(problem) => {
                eprintln!("vramscope: {FAULTS_ENV} ignored, nothing injected: {problem}");
                log::error!("{FAULTS_ENV} ignored, nothing injected: {problem}");
                source
            }
        }
    }

    /// Sleeps through a hang whose window `elapsed_ms` has entered, once per hang fault.
    fn hang_if_due(&mut self, elapsed_ms: u64) {
        let due = self.faults.iter().enumerate().find(|(i, fault)| {
            fault.kind == FaultKind::Hang && fault.covers(elapsed_ms) && !self.hung.contains(i)
        });
        if let Some((i, fault)) = due {
            let left_ms = fault.at_ms + fault.for_ms - elapsed_ms;
            self.hung.insert(i);
            std::thread::sleep(std::time::Duration::from_millis(left_ms));
        }
    }

    /// What the wrapped source last reported for a field (readable when it said nothing).
    fn inner_state(&self, device_index: u32, field: &str) -> FieldState {
        self.inner_states
            .get(&(device_index, field.to_owned()))
            .cloned()
            .unwrap_or(FieldState::Ok)
    }

    fn is_lost(&self, device_index: u32, elapsed_ms: u64) -> bool {
        self.faults.iter().any(|fault| {
            fault.kind == FaultKind::Lost
                && fault.device_index == device_index
                && fault.covers(elapsed_ms)
        })
    }

    fn failing_fields(&self, device_index: u32, elapsed_ms: u64) -> BTreeSet<&'static str> {
        self.faults
            .iter()
            .filter(|fault| fault.device_index == device_index && fault.covers(elapsed_ms))
            .filter_map(|fault| match fault.kind {
                FaultKind::Fail { field } => Some(field),
                _ => None,
            })
            .collect()
    }
}

/// Empties the fields of a sample that a failing read leaves empty.
fn clear_field(sample: &mut DeviceSample, field: &str) {
    match field {
        field_name::MEMORY => sample.memory = None,
        field_name::UTILIZATION => {
            sample.gpu_util_pct = None;
            sample.mem_util_pct = None;
        }
        field_name::TEMPERATURE => sample.temperature_c = None,
        field_name::POWER => sample.power_mw = None,
        field_name::SM_CLOCK => sample.sm_clock_mhz = None,
        field_name::MEM_CLOCK => sample.mem_clock_mhz = None,
        field_name::THROTTLE_REASONS => sample.throttle_reasons = None,
        field_name::ECC_VOLATILE => {
            sample.ecc_corrected_volatile = None;
            sample.ecc_uncorrected_volatile = None;
        }
        _ => {}
    }
}

fn status(device_index: u32, field: &str, state: FieldState) -> FieldStatus {
    FieldStatus {
        device_index,
        field: field.to_owned(),
        state,
    }
}

impl Source for FaultySource {
    fn describe(&self) -> SourceDescription {
        self.inner.describe()
    }

    fn poll(&mut self, now_ms: UnixMs, tiers: Tiers) -> SampleBatch {
        let origin_ms = *self.origin_ms.get_or_insert(now_ms);
        let elapsed_ms = u64::try_from(now_ms.saturating_sub(origin_ms)).unwrap_or(0);
        self.hang_if_due(elapsed_ms);
        let mut batch = self.inner.poll(now_ms, tiers);
        for change in &batch.field_changes {
            self.inner_states.insert(
                (change.device_index, change.field.clone()),
                change.state.clone(),
            );
        }
        let devices: Vec<u32> = self.faults.iter().map(|f| f.device_index).collect();
        for device_index in devices.into_iter().collect::<BTreeSet<_>>() {
            let lost_now = self.is_lost(device_index, elapsed_ms);
            let was_lost = self.lost.contains(&device_index);
            if lost_now && !was_lost {
                self.lost.insert(device_index);
                batch.events.push(Event {
                    t_ms: now_ms,
                    device_index: Some(device_index),
                    kind: EventKind::DeviceLost {
                        detail: LOST_MESSAGE.to_owned(),
                    },
                });
                let failed = FieldState::Failed(format!("GPU lost: {LOST_MESSAGE}"));
                batch.field_changes.extend(
                    field_name::ALL
                        .iter()
                        .map(|field| status(device_index, field, failed.clone())),
                );
            } else if was_lost && !lost_now {
                self.lost.remove(&device_index);
                batch.events.push(Event {
                    t_ms: now_ms,
                    device_index: Some(device_index),
                    kind: EventKind::DeviceReturned,
                });
                // Every field back to what the wrapped source last said of it (readable unless
                // it said otherwise).
                let restored: Vec<FieldStatus> = field_name::ALL
                    .iter()
                    .map(|field| status(device_index, field, self.inner_state(device_index, field)))
                    .collect();
                batch.field_changes.extend(restored);
            }
            if lost_now {
                batch.devices.retain(|s| s.device_index != device_index);
                batch.health.retain(|h| h.device_index != device_index);
                if let Some(processes) = &mut batch.processes {
                    processes.retain(|p| p.device_index != device_index);
                }
                continue;
            }
            let failing_now = self.failing_fields(device_index, elapsed_ms);
            for sample in batch
                .devices
                .iter_mut()
                .filter(|s| s.device_index == device_index)
            {
                for field in &failing_now {
                    clear_field(sample, field);
                }
            }
            for field in &failing_now {
                if self.failing.insert((device_index, *field)) {
                    batch.field_changes.push(status(
                        device_index,
                        field,
                        FieldState::Failed(FAILED_MESSAGE.to_owned()),
                    ));
                }
            }
            let recovered: Vec<&'static str> = self
                .failing
                .iter()
                .filter(|(d, field)| *d == device_index && !failing_now.contains(field))
                .map(|(_, field)| *field)
                .collect();
            for field in recovered {
                self.failing.remove(&(device_index, field));
                let state = self.inner_state(device_index, field);
                batch.field_changes.push(status(device_index, field, state));
            }
        }
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::demo::DemoSource;

    const START_MS: UnixMs = 1_767_225_600_000;

    fn poll_every_250_ms(source: &mut FaultySource, until_ms: i64) -> Vec<SampleBatch> {
        (0..until_ms / 250)
            .map(|tick| {
                source.poll(
                    START_MS + tick * 250,
                    Tiers {
                        fast: true,
                        slow: tick % 20 == 0,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn plans_parse_and_bad_plans_say_what_is_wrong() {
        let plan =
            parse_plan("lost gpu=1 at=2s for=3s; hang gpu=0 at=6s for=1500ms; fail gpu=0 field=temperature at=1 for=0.5s;")
                .expect("a valid plan");
        assert_eq!(
            plan,
            vec![
                Fault {
                    kind: FaultKind::Lost,
                    device_index: 1,
                    at_ms: 2000,
                    for_ms: 3000
                },
                Fault {
                    kind: FaultKind::Hang,
                    device_index: 0,
                    at_ms: 6000,
                    for_ms: 1500
                },
                Fault {
                    kind: FaultKind::Fail {
                        field: field_name::TEMPERATURE
                    },
                    device_index: 0,
                    at_ms: 1000,
                    for_ms: 500
                },
            ]
        );
        for (bad, says) in [
            ("lost at=1s for=1s", "needs gpu=N"),
            ("fail gpu=0 at=1s for=1s", "needs field=NAME"),
            ("fail gpu=0 field=fan at=1s for=1s", "one of"),
            ("explode gpu=0 at=1s for=1s", "'lost', 'fail' or 'hang'"),
            ("lost gpu=0 at=soon for=1s", "is not a time"),
            ("lost gpu=0 at=1s for=-1s", "out of range"),
        ] {
            let error = parse_plan(bad).expect_err(bad);
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn a_lost_gpu_stops_sampling_then_returns() {
        let plan = parse_plan("lost gpu=1 at=1s for=2s").expect("plan");
        let mut source = FaultySource::new(Box::new(DemoSource::new(START_MS)), plan);
        let batches = poll_every_250_ms(&mut source, 5000);
        let gpu1_ticks: Vec<bool> = batches
            .iter()
            .map(|b| b.devices.iter().any(|s| s.device_index == 1))
            .collect();
        // Ticks 4..12 (1 s to 3 s) have no GPU 1; GPU 0 is sampled throughout.
        assert_eq!(gpu1_ticks.iter().filter(|&&present| !present).count(), 8);
        assert!(!gpu1_ticks[4] && !gpu1_ticks[11] && gpu1_ticks[3] && gpu1_ticks[12]);
        assert!(
            batches
                .iter()
                .all(|b| b.devices.iter().any(|s| s.device_index == 0))
        );
        let events: Vec<(UnixMs, &EventKind)> = batches
            .iter()
            .flat_map(|b| &b.events)
            .filter(|e| e.device_index == Some(1))
            .map(|e| (e.t_ms - START_MS, &e.kind))
            .filter(|(_, kind)| {
                matches!(
                    kind,
                    EventKind::DeviceLost { .. } | EventKind::DeviceReturned
                )
            })
            .collect();
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0].0, 1000);
        assert!(
            matches!(events[0].1, EventKind::DeviceLost { detail } if detail.contains("GPU is lost"))
        );
        assert_eq!(events[1], (3000, &EventKind::DeviceReturned));
        let memory_states: Vec<&FieldState> = batches
            .iter()
            .flat_map(|b| &b.field_changes)
            .filter(|c| c.device_index == 1 && c.field == field_name::MEMORY)
            .map(|c| &c.state)
            .collect();
        assert!(matches!(
            memory_states[..],
            [FieldState::Failed(_), FieldState::Ok]
        ));
        // A field the demo does not support goes back to "not supported", not to readable.
        let retired_pages = batches
            .iter()
            .flat_map(|b| &b.field_changes)
            .filter(|c| c.device_index == 1 && c.field == field_name::RETIRED_PAGES)
            .map(|c| &c.state)
            .next_back();
        assert_eq!(retired_pages, Some(&FieldState::NotSupported));
    }

    #[test]
    fn a_failing_field_is_empty_and_marked_while_the_rest_is_sampled() {
        let plan = parse_plan("fail gpu=0 field=power at=0.5s for=0.5s").expect("plan");
        let mut source = FaultySource::new(Box::new(DemoSource::new(START_MS)), plan);
        let batches = poll_every_250_ms(&mut source, 2000);
        let gpu0 = |b: &SampleBatch| b.devices.iter().find(|s| s.device_index == 0).copied();
        let power: Vec<bool> = batches
            .iter()
            .map(|b| gpu0(b).and_then(|s| s.power_mw).is_some())
            .collect();
        assert_eq!(power, [true, true, false, false, true, true, true, true]);
        assert!(
            batches
                .iter()
                .all(|b| gpu0(b).and_then(|s| s.memory).is_some())
        );
        let changes: Vec<(usize, &FieldState)> = batches
            .iter()
            .enumerate()
            .flat_map(|(i, b)| b.field_changes.iter().map(move |c| (i, c)))
            .filter(|(_, c)| c.field == field_name::POWER)
            .map(|(i, c)| (i, &c.state))
            .collect();
        assert!(
            matches!(
                changes[..],
                [(2, FieldState::Failed(_)), (4, FieldState::Ok)]
            ),
            "{changes:?}"
        );
    }

    #[test]
    fn a_hanging_call_blocks_one_poll_for_the_rest_of_its_window() {
        let plan = parse_plan("hang gpu=0 at=0ms for=300ms").expect("plan");
        let mut source = FaultySource::new(Box::new(DemoSource::new(START_MS)), plan);
        let started = std::time::Instant::now();
        let first = source.poll(
            START_MS + 100,
            Tiers {
                fast: true,
                slow: false,
            },
        );
        let blocked = started.elapsed();
        let second = source.poll(
            START_MS + 200,
            Tiers {
                fast: true,
                slow: false,
            },
        );
        assert!(
            blocked >= std::time::Duration::from_millis(300),
            "{blocked:?}"
        );
        assert!(started.elapsed() - blocked < std::time::Duration::from_millis(200));
        assert_eq!((first.devices.len(), second.devices.len()), (2, 2));
    }
}
