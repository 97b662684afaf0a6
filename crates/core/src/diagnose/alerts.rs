//! Alerts before the OOM: the alert conditions, defined once and rendered three ways — as
//! Prometheus rules (`report::alert_rules`, `vramscope alerts`), as the gauges of `vramscope
//! exporter` (the time to full), and as live notices (the app, `record`/`exporter`
//! `--alert-exec`/`--alert-webhook`) through [`LiveAlerts`].
//!
//! The conditions, for each GPU:
//! - **memory high**: the share of memory in use ([`memory_in_use_fraction`]: what the timeline
//!   draws) at or above the threshold (default [`DEFAULT_THRESHOLD_PCT`] %);
//! - **full soon**: the robust growth of the GPU's floor (the leak rule's judgement,
//!   [`growth::assess`], over the last [`GROWTH_WINDOW_SECONDS`]) fills the headroom left at the
//!   recent peak within [`FULL_WARNING_SECONDS`] (warning) or [`FULL_CRITICAL_SECONDS`] (critical);
//! - **Xid**: an Xid of DCGM's failure class ([`xid_is_critical`]) is critical, any other a
//!   warning; an Xid is an event, its alert lasts [`EVENT_WINDOW_SECONDS`];
//! - **uncorrectable ECC**: the volatile uncorrected ECC count or the rows remapped for
//!   uncorrectable errors rose (an event as well);
//! - **row remap failure** (critical) and **row remap pending** (warning): states;
//! - **GPU lost**: NVML says the GPU is gone;
//! - **throttled**: clocks held down for a thermal or hardware reason
//!   ([`THROTTLE_ALERT_EVENTS`]) for [`THROTTLE_HOLD_SECONDS`];
//! - and, in Prometheus only, the exporter gone (down, absent, or a GPU's series missing).
//!
//! Prometheus waits each rule's [`AlertRule::hold_seconds`] (`for:`) before it pages someone at
//! night; the live paths (a person at the desktop, a recording's hook) tell at the first reading
//! on the far side, then once per episode: an episode ends after its condition has been false
//! for [`CLEAR_AFTER_SECONDS`] (memory also has the timeline's hysteresis), and its end is told
//! as "resolved".

use std::collections::{BTreeMap, VecDeque};

use super::finding::Severity;
use super::growth::{self, Shape};
use super::thresholds::throttle;
use super::xid::{self, XidSeverity};
use crate::analysis::threshold::HYSTERESIS_FRACTION;
use crate::model::{DeviceFacts, EventKind, HealthSample, MemoryReading, SampleBatch, UnixMs};

/// Default memory threshold, in percent of the GPU's memory (the timeline's default too).
pub const DEFAULT_THRESHOLD_PCT: f64 = 90.0;
/// Thresholds accepted, in percent.
pub const THRESHOLD_RANGE_PCT: std::ops::RangeInclusive<f64> = 1.0..=100.0;
/// The GPU fills within this many seconds: warning (an hour: the leak rule's fast fill).
pub const FULL_WARNING_SECONDS: f64 = growth::FAST_FILL_SECONDS;
/// The GPU fills within this many seconds: critical.
pub const FULL_CRITICAL_SECONDS: f64 = 600.0;
/// The stretch of readings whose floor growth predicts the time to full.
pub const GROWTH_WINDOW_SECONDS: f64 = 1800.0;
/// The time to full counts from the highest use of this last stretch (an OOM happens at a peak).
pub const PEAK_WINDOW_SECONDS: f64 = 300.0;
/// How long an event (an Xid, an uncorrectable ECC error) keeps its alert.
pub const EVENT_WINDOW_SECONDS: f64 = 900.0;
/// Clocks held down this long for a thermal or hardware reason is an alert.
pub const THROTTLE_HOLD_SECONDS: f64 = 900.0;
/// A live alert is resolved once its condition has been false this long.
pub const CLEAR_AFTER_SECONDS: f64 = 30.0;

/// The clock-event reasons that count as throttling (thermal or failing power delivery), with
/// the names dcgm-exporter gives them (`clock_event` label) and `vramscope exporter` exports.
pub const THROTTLE_ALERT_EVENTS: [(u64, &str); 4] = [
    (throttle::HW_SLOWDOWN, "hw_slowdown"),
    (throttle::SW_THERMAL_SLOWDOWN, "sw_thermal"),
    (throttle::HW_THERMAL_SLOWDOWN, "hw_thermal"),
    (throttle::HW_POWER_BRAKE_SLOWDOWN, "hw_power_brake"),
];

/// The alerts, by the name Prometheus and the notices give them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AlertName {
    GpuMemoryHigh,
    GpuMemoryFullSoon,
    GpuXidError,
    GpuEccUncorrectable,
    GpuRowRemapFailure,
    GpuRowRemapPending,
    GpuLost,
    GpuThrottled,
    GpuExporterDown,
    GpuExporterAbsent,
    GpuMetricsMissing,
}

impl AlertName {
    /// The alert's name (`GpuMemoryHigh`).
    pub fn as_str(self) -> &'static str {
        match self {
            AlertName::GpuMemoryHigh => "GpuMemoryHigh",
            AlertName::GpuMemoryFullSoon => "GpuMemoryFullSoon",
            AlertName::GpuXidError => "GpuXidError",
            AlertName::GpuEccUncorrectable => "GpuEccUncorrectable",
            AlertName::GpuRowRemapFailure => "GpuRowRemapFailure",
            AlertName::GpuRowRemapPending => "GpuRowRemapPending",
            AlertName::GpuLost => "GpuLost",
            AlertName::GpuThrottled => "GpuThrottled",
            AlertName::GpuExporterDown => "GpuExporterDown",
            AlertName::GpuExporterAbsent => "GpuExporterAbsent",
            AlertName::GpuMetricsMissing => "GpuMetricsMissing",
        }
    }
}

/// One alert rule: a condition at one severity.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AlertRule {
    pub name: AlertName,
    pub severity: Severity,
    /// How long Prometheus waits with the condition true before it fires (`for:`).
    pub hold_seconds: u32,
    /// How far back `vramscope diagnose --since` should look for it.
    pub look_back: &'static str,
}

const fn rule(
    name: AlertName,
    severity: Severity,
    hold_seconds: u32,
    look_back: &'static str,
) -> AlertRule {
    AlertRule {
        name,
        severity,
        hold_seconds,
        look_back,
    }
}

/// Every rule, in the order rule files list them.
pub const RULES: [AlertRule; 13] = [
    rule(AlertName::GpuMemoryHigh, Severity::Warning, 300, "1h"),
    rule(AlertName::GpuMemoryFullSoon, Severity::Warning, 300, "2h"),
    rule(AlertName::GpuMemoryFullSoon, Severity::Critical, 120, "2h"),
    rule(AlertName::GpuXidError, Severity::Critical, 0, "1h"),
    rule(AlertName::GpuXidError, Severity::Warning, 0, "1h"),
    rule(AlertName::GpuEccUncorrectable, Severity::Critical, 0, "6h"),
    rule(AlertName::GpuRowRemapFailure, Severity::Critical, 60, "24h"),
    rule(AlertName::GpuRowRemapPending, Severity::Warning, 300, "24h"),
    rule(AlertName::GpuLost, Severity::Critical, 60, "6h"),
    rule(AlertName::GpuThrottled, Severity::Warning, 900, "1h"),
    rule(AlertName::GpuExporterDown, Severity::Warning, 300, "1h"),
    rule(AlertName::GpuExporterAbsent, Severity::Critical, 600, "1h"),
    rule(AlertName::GpuMetricsMissing, Severity::Warning, 300, "24h"),
];

/// The rule of `name` at `severity`.
pub fn rule_of(name: AlertName, severity: Severity) -> Option<&'static AlertRule> {
    RULES
        .iter()
        .find(|r| r.name == name && r.severity == severity)
}

/// The time-to-full horizon of a severity: under it, the GPU fills soon.
pub fn full_horizon_seconds(severity: Severity) -> f64 {
    match severity {
        Severity::Critical => FULL_CRITICAL_SECONDS,
        _ => FULL_WARNING_SECONDS,
    }
}

/// A threshold given in percent, as a fraction; refused with the range when outside it.
pub fn threshold_fraction(percent: f64) -> Result<f64, String> {
    if percent.is_finite() && THRESHOLD_RANGE_PCT.contains(&percent) {
        Ok(percent / 100.0)
    } else {
        Err(format!(
            "the memory threshold must be from {} to {} % (got {percent})",
            THRESHOLD_RANGE_PCT.start(),
            THRESHOLD_RANGE_PCT.end()
        ))
    }
}

/// Whether an Xid pages someone: DCGM's failure class in the Xid table (the GPU needs a reset or
/// service). Every other Xid warns.
pub fn xid_is_critical(code: u64) -> bool {
    xid::lookup(code).is_some_and(|info| info.severity == XidSeverity::Failure)
}

/// The critical Xid codes, ascending (for PromQL matchers).
pub fn critical_xids() -> Vec<u64> {
    xid::XID_TABLE
        .iter()
        .filter(|info| info.severity == XidSeverity::Failure)
        .map(|info| info.code)
        .collect()
}

/// The severity of an Xid's alert.
pub fn xid_alert_severity(code: u64) -> Severity {
    if xid_is_critical(code) {
        Severity::Critical
    } else {
        Severity::Warning
    }
}

/// The share of a GPU's memory in use, 0 to 1: `1 − free / total`, which is what the timeline
/// draws as occupied (used + driver reserve) of the total; where no total is known, `used / (used
/// + free)` (the reserve then counts on neither side). Either is 1 exactly when nothing is left.
pub fn memory_in_use_fraction(memory: &MemoryReading) -> Option<f64> {
    if memory.total_bytes > 0 {
        Some(memory.occupied_fraction())
    } else {
        let usable = memory.used_bytes.saturating_add(memory.free_bytes);
        (usable > 0).then(|| memory.used_bytes as f64 / usable as f64)
    }
}

/// Seconds until the GPU is full, from `(t_ms, used_bytes, free_bytes)` readings in time order:
/// when the floor of the used memory over the last [`GROWTH_WINDOW_SECONDS`] grows (the leak
/// rule's judgement, at least [`growth::CAPTURE_MIN_SPAN_MS`] of readings), the least free memory
/// of the last [`PEAK_WINDOW_SECONDS`] divided by the floor's robust slope. `None` when not
/// growing.
pub fn time_to_full_seconds(readings: &[(UnixMs, u64, u64)]) -> Option<f64> {
    let last_ms = readings.last()?.0;
    let from_ms = last_ms - (GROWTH_WINDOW_SECONDS * 1000.0) as i64;
    let window: Vec<&(UnixMs, u64, u64)> = readings.iter().filter(|r| r.0 >= from_ms).collect();
    let first_ms = window.first()?.0;
    let points: Vec<(f64, f64)> = window
        .iter()
        .map(|r| ((r.0 - first_ms) as f64 / 1000.0, r.1 as f64))
        .collect();
    let Shape::Growing(g) = growth::assess(&points, growth::CAPTURE_MIN_SPAN_MS as f64 / 1000.0)
    else {
        return None;
    };
    let peak_from_ms = last_ms - (PEAK_WINDOW_SECONDS * 1000.0) as i64;
    let least_free = window
        .iter()
        .filter(|r| r.0 >= peak_from_ms)
        .map(|r| r.2)
        .min()?;
    g.until_full(least_free)
}

/// Seconds as Prometheus's `humanizeDuration` writes them (`22m 29s`, `1h 0m 0s`), so that live
/// notices read like the rules' summaries.
pub fn humanize_duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return format!("{seconds}s");
    }
    let total = seconds.floor() as u64;
    let (days, hours, minutes, secs) = (
        total / 86_400,
        total / 3600 % 24,
        total / 60 % 60,
        total % 60,
    );
    if days > 0 {
        format!("{days}d {hours}h {minutes}m {secs}s")
    } else if hours > 0 {
        format!("{hours}h {minutes}m {secs}s")
    } else if minutes > 0 {
        format!("{minutes}m {secs}s")
    } else {
        format!("{:.0}s", seconds.floor())
    }
}

/// Whether an alert starts or ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlertState {
    Firing,
    Resolved,
}

impl AlertState {
    /// `firing` or `resolved`, as Alertmanager says.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Firing => "firing",
            AlertState::Resolved => "resolved",
        }
    }
}

/// Which alert: the rule, the GPU and, for an Xid, its code (a throttle reason for throttling).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AlertKey {
    pub name: AlertName,
    pub severity: Severity,
    pub device_index: u32,
    /// The Xid code or the clock-event reason, for the alerts that have one.
    pub detail: Option<String>,
}

/// An alert starting or ending, as the live paths report it.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertChange {
    pub key: AlertKey,
    pub state: AlertState,
    /// The reading that started or ended it.
    pub t_ms: UnixMs,
    /// When its episode started (the same as `t_ms` when firing).
    pub started_ms: UnixMs,
    pub host: String,
    pub uuid: String,
    pub model: String,
    /// One line naming the host and the GPU (as the rules' `summary`).
    pub summary: String,
    /// What happened and what to run.
    pub description: String,
    /// The measured value: the share in use, seconds to full, the Xid code.
    pub value: Option<f64>,
}

/// What the live paths need to know beyond the readings.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveAlertSettings {
    /// The memory threshold, 0 to 1.
    pub threshold_fraction: f64,
    /// The command that shows the evidence, named in descriptions (`vramscope diagnose --live`).
    pub diagnose_hint: String,
}

impl Default for LiveAlertSettings {
    fn default() -> Self {
        LiveAlertSettings {
            threshold_fraction: DEFAULT_THRESHOLD_PCT / 100.0,
            diagnose_hint: "vramscope diagnose --live".to_owned(),
        }
    }
}

/// An episode in progress.
#[derive(Clone, Debug)]
struct Episode {
    started_ms: UnixMs,
    /// The last reading at which the condition held.
    last_true_ms: UnixMs,
}

/// What [`LiveAlerts`] remembers of one GPU.
#[derive(Clone, Debug, Default)]
struct GpuWatch {
    facts: DeviceFacts,
    /// `(t_ms, used, free)` of the last [`GROWTH_WINDOW_SECONDS`].
    readings: VecDeque<(UnixMs, u64, u64)>,
    in_use: Option<f64>,
    time_to_full_s: Option<f64>,
    last_ecc_uncorrected: Option<u64>,
    last_remapped_uncorrectable: Option<u64>,
    health: Option<HealthSample>,
    /// Since when each throttle reason has been set without a break.
    throttled_since: BTreeMap<&'static str, UnixMs>,
    /// The last time each Xid code was reported.
    xids: BTreeMap<u64, UnixMs>,
    /// The last uncorrectable memory error.
    ecc_event_ms: Option<UnixMs>,
    lost: bool,
}

/// The alert conditions evaluated on a sampler's readings, batch after batch: the app's live
/// notices, `record`'s and `exporter`'s hooks, and the exporter's time-to-full gauge.
#[derive(Clone, Debug)]
pub struct LiveAlerts {
    settings: LiveAlertSettings,
    host: String,
    gpus: Vec<GpuWatch>,
    active: BTreeMap<AlertKey, Episode>,
    now_ms: UnixMs,
}

impl LiveAlerts {
    /// Watches the GPUs `devices` of `host`.
    pub fn new(settings: LiveAlertSettings, host: &str, devices: &[DeviceFacts]) -> Self {
        LiveAlerts {
            settings,
            host: host.to_owned(),
            gpus: devices
                .iter()
                .map(|facts| GpuWatch {
                    facts: facts.clone(),
                    ..Default::default()
                })
                .collect(),
            active: BTreeMap::new(),
            now_ms: 0,
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &LiveAlertSettings {
        &self.settings
    }

    /// Changes the threshold (the app's Settings); an episode in progress ends by the new one.
    pub fn set_threshold_fraction(&mut self, fraction: f64) {
        self.settings.threshold_fraction = fraction;
    }

    /// The GPU's current time to full in seconds, while its memory grows.
    pub fn time_to_full_seconds(&self, device_index: u32) -> Option<f64> {
        self.gpu(device_index)?.time_to_full_s
    }

    /// The alerts in progress.
    pub fn active(&self) -> impl Iterator<Item = &AlertKey> {
        self.active.keys()
    }

    fn gpu(&self, device_index: u32) -> Option<&GpuWatch> {
        self.gpus.iter().find(|g| g.facts.index == device_index)
    }

    fn gpu_mut(&mut self, device_index: u32) -> Option<&mut GpuWatch> {
        self.gpus.iter_mut().find(|g| g.facts.index == device_index)
    }

    /// Folds one batch in and returns the alerts that started or ended with it.
    pub fn apply(&mut self, batch: &SampleBatch) -> Vec<AlertChange> {
        let batch_ms = batch
            .devices
            .iter()
            .map(|s| s.t_ms)
            .chain(batch.events.iter().map(|e| e.t_ms))
            .max();
        if let Some(t) = batch_ms {
            self.now_ms = self.now_ms.max(t);
        }
        self.fold_samples(batch);
        self.fold_health(batch);
        self.fold_events(batch);
        let holding = self.conditions();
        self.episodes(holding)
    }

    fn fold_samples(&mut self, batch: &SampleBatch) {
        let window_ms = (GROWTH_WINDOW_SECONDS * 1000.0) as i64;
        for sample in &batch.devices {
            let Some(gpu) = self.gpu_mut(sample.device_index) else {
                continue;
            };
            if let Some(memory) = sample.memory {
                gpu.in_use = memory_in_use_fraction(&memory);
                gpu.readings
                    .push_back((sample.t_ms, memory.used_bytes, memory.free_bytes));
                while gpu
                    .readings
                    .front()
                    .is_some_and(|r| r.0 < sample.t_ms - window_ms)
                {
                    gpu.readings.pop_front();
                }
                gpu.time_to_full_s = time_to_full_seconds(gpu.readings.make_contiguous());
            }
            if let Some(now) = sample.ecc_uncorrected_volatile {
                if gpu.last_ecc_uncorrected.is_some_and(|before| now > before) {
                    gpu.ecc_event_ms = Some(sample.t_ms);
                }
                gpu.last_ecc_uncorrected = Some(now);
            }
            if let Some(bits) = sample.throttle_reasons {
                for (bit, reason) in THROTTLE_ALERT_EVENTS {
                    if bits & bit != 0 {
                        gpu.throttled_since.entry(reason).or_insert(sample.t_ms);
                    } else {
                        gpu.throttled_since.remove(reason);
                    }
                }
            }
        }
    }

    fn fold_health(&mut self, batch: &SampleBatch) {
        for health in &batch.health {
            let Some(gpu) = self.gpu_mut(health.device_index) else {
                continue;
            };
            if let Some(now) = health.remapped_rows_uncorrectable {
                if gpu
                    .last_remapped_uncorrectable
                    .is_some_and(|before| now > before)
                {
                    gpu.ecc_event_ms = Some(health.t_ms);
                }
                gpu.last_remapped_uncorrectable = Some(now);
            }
            gpu.health = Some(health.clone());
        }
    }

    fn fold_events(&mut self, batch: &SampleBatch) {
        for event in &batch.events {
            let Some(gpu) = event.device_index.and_then(|d| self.gpu_mut(d)) else {
                continue;
            };
            match event.kind {
                EventKind::Xid { code, .. } => {
                    gpu.xids.insert(code, event.t_ms);
                }
                EventKind::DeviceLost { .. } => gpu.lost = true,
                _ => {}
            }
        }
    }

    /// Every alert whose condition holds now, with its measured value.
    fn conditions(&self) -> Vec<(AlertKey, Option<f64>)> {
        let mut holding = Vec::new();
        let event_ms = (EVENT_WINDOW_SECONDS * 1000.0) as i64;
        for gpu in &self.gpus {
            let key = |name, severity, detail: Option<String>| AlertKey {
                name,
                severity,
                device_index: gpu.facts.index,
                detail,
            };
            if let Some(fraction) = gpu.in_use {
                let threshold = self.settings.threshold_fraction;
                let already = self.active.contains_key(&key(
                    AlertName::GpuMemoryHigh,
                    Severity::Warning,
                    None,
                ));
                let line = if already {
                    threshold - HYSTERESIS_FRACTION
                } else {
                    threshold
                };
                if fraction >= line {
                    holding.push((
                        key(AlertName::GpuMemoryHigh, Severity::Warning, None),
                        Some(fraction),
                    ));
                }
            }
            if let Some(seconds) = gpu.time_to_full_s {
                for severity in [Severity::Warning, Severity::Critical] {
                    if seconds < full_horizon_seconds(severity) {
                        holding.push((
                            key(AlertName::GpuMemoryFullSoon, severity, None),
                            Some(seconds),
                        ));
                    }
                }
            }
            for (&code, &t) in &gpu.xids {
                if self.now_ms - t < event_ms {
                    holding.push((
                        key(
                            AlertName::GpuXidError,
                            xid_alert_severity(code),
                            Some(code.to_string()),
                        ),
                        Some(code as f64),
                    ));
                }
            }
            if gpu.ecc_event_ms.is_some_and(|t| self.now_ms - t < event_ms) {
                holding.push((
                    key(AlertName::GpuEccUncorrectable, Severity::Critical, None),
                    None,
                ));
            }
            let health = gpu.health.as_ref();
            if health.and_then(|h| h.remapped_rows_failure) == Some(true) {
                holding.push((
                    key(AlertName::GpuRowRemapFailure, Severity::Critical, None),
                    None,
                ));
            }
            if health.and_then(|h| h.remapped_rows_pending) == Some(true) {
                holding.push((
                    key(AlertName::GpuRowRemapPending, Severity::Warning, None),
                    None,
                ));
            }
            if gpu.lost {
                holding.push((key(AlertName::GpuLost, Severity::Critical, None), None));
            }
            let hold_ms = (THROTTLE_HOLD_SECONDS * 1000.0) as i64;
            for (reason, since) in &gpu.throttled_since {
                if self.now_ms - since >= hold_ms {
                    holding.push((
                        key(
                            AlertName::GpuThrottled,
                            Severity::Warning,
                            Some((*reason).to_owned()),
                        ),
                        None,
                    ));
                }
            }
        }
        holding
    }

    /// Starts the episodes of conditions that newly hold, and ends those whose condition has
    /// been false for [`CLEAR_AFTER_SECONDS`] (a lost GPU's never ends).
    fn episodes(&mut self, holding: Vec<(AlertKey, Option<f64>)>) -> Vec<AlertChange> {
        let now = self.now_ms;
        let mut changes = Vec::new();
        let mut still = BTreeMap::new();
        for (key, value) in holding {
            match self.active.get_mut(&key) {
                Some(episode) => episode.last_true_ms = now,
                None => {
                    changes.push(self.change(&key, AlertState::Firing, now, value));
                    still.insert(
                        key,
                        Episode {
                            started_ms: now,
                            last_true_ms: now,
                        },
                    );
                }
            }
        }
        self.active.append(&mut still);
        let clear_ms = (CLEAR_AFTER_SECONDS * 1000.0) as i64;
        let ended: Vec<AlertKey> = self
            .active
            .iter()
            .filter(|(_, e)| now - e.last_true_ms >= clear_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for key in ended {
            if let Some(episode) = self.active.remove(&key) {
                let mut change = self.change(&key, AlertState::Resolved, now, None);
                change.started_ms = episode.started_ms;
                changes.push(change);
            }
        }
        changes
    }

    fn change(
        &self,
        key: &AlertKey,
        state: AlertState,
        t_ms: UnixMs,
        value: Option<f64>,
    ) -> AlertChange {
        let facts = self
            .gpu(key.device_index)
            .map(|g| g.facts.clone())
            .unwrap_or_default();
        let host = if facts.host.is_empty() {
            self.host.clone()
        } else {
            facts.host.clone()
        };
        let (summary, description) = texts(key, state, value, &host, &self.settings);
        AlertChange {
            key: key.clone(),
            state,
            t_ms,
            started_ms: t_ms,
            host,
            uuid: facts.uuid,
            model: facts.name,
            summary,
            description,
            value,
        }
    }
}

/// The summary and description of a live alert, worded like the rules' annotations.
fn texts(
    key: &AlertKey,
    state: AlertState,
    value: Option<f64>,
    host: &str,
    settings: &LiveAlertSettings,
) -> (String, String) {
    let gpu = format!("{host} GPU {}", key.device_index);
    let detail = key.detail.as_deref().unwrap_or("");
    let threshold_pct = settings.threshold_fraction * 100.0;
    let summary = match key.name {
        AlertName::GpuMemoryHigh => match value {
            Some(f) => format!("GPU memory {:.0}% full on {gpu}", f * 100.0),
            None => format!("GPU memory above {threshold_pct:.0}% on {gpu}"),
        },
        AlertName::GpuMemoryFullSoon => match value {
            Some(s) => format!("GPU memory on {gpu} full in {}", humanize_duration(s)),
            None => format!(
                "GPU memory on {gpu} full within {}",
                humanize_duration(full_horizon_seconds(key.severity))
            ),
        },
        AlertName::GpuXidError => format!("Xid {detail} on {gpu}"),
        AlertName::GpuEccUncorrectable => format!("Uncorrectable ECC error on {gpu}"),
        AlertName::GpuRowRemapFailure => format!("Row remapping failed on {gpu}"),
        AlertName::GpuRowRemapPending => format!("Row remap pending on {gpu}"),
        AlertName::GpuLost => format!("GPU lost on {gpu}"),
        AlertName::GpuThrottled => format!("GPU throttled ({detail}) on {gpu}"),
        AlertName::GpuExporterDown
        | AlertName::GpuExporterAbsent
        | AlertName::GpuMetricsMissing => {
            format!("{} on {gpu}", key.name.as_str())
        }
    };
    let what = match key.name {
        AlertName::GpuMemoryHigh => format!(
            "More than {threshold_pct:.0}% of the GPU's memory is in use: the next large allocation may fail with out of memory."
        ),
        AlertName::GpuMemoryFullSoon => "Its memory grows steadily and, at its recent rate, runs out soon: find the growing process and its leak.".to_owned(),
        AlertName::GpuXidError => format!("The driver reported {}.", xid::describe(detail.parse().unwrap_or(0))),
        AlertName::GpuEccUncorrectable => "An uncorrectable memory error (ECC double-bit or a row remapped for one): drain the GPU and reset it.".to_owned(),
        AlertName::GpuRowRemapFailure => "A failing memory row could not be remapped: the GPU needs service.".to_owned(),
        AlertName::GpuRowRemapPending => "A memory row remap waits for the next GPU reset.".to_owned(),
        AlertName::GpuLost => "The GPU stopped answering (lost, fallen off the bus): reboot the node.".to_owned(),
        AlertName::GpuThrottled => format!(
            "Clocks held down ({detail}) for {} minutes: check cooling and power.",
            THROTTLE_HOLD_SECONDS / 60.0
        ),
        AlertName::GpuExporterDown | AlertName::GpuExporterAbsent | AlertName::GpuMetricsMissing => String::new(),
    };
    let description = match state {
        AlertState::Firing => format!("{what} Evidence: {}", settings.diagnose_hint),
        AlertState::Resolved => format!("Resolved: {summary}."),
    };
    let summary = match state {
        AlertState::Firing => summary,
        AlertState::Resolved => format!("Resolved: {summary}"),
    };
    (summary, description)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeviceSample, Event, GIB, MIB};

    const TOTAL: u64 = 100 * GIB;

    fn watch() -> LiveAlerts {
        LiveAlerts::new(
            LiveAlertSettings::default(),
            "node-a",
            &[DeviceFacts {
                index: 0,
                name: "NVIDIA H200".into(),
                uuid: "GPU-1".into(),
                ..Default::default()
            }],
        )
    }

    fn sample(t_ms: i64, used: u64) -> SampleBatch {
        SampleBatch {
            devices: vec![DeviceSample {
                t_ms,
                device_index: 0,
                memory: Some(MemoryReading {
                    used_bytes: used,
                    reserved_bytes: 0,
                    free_bytes: TOTAL - used,
                    total_bytes: TOTAL,
                }),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn names(changes: &[AlertChange]) -> Vec<(AlertName, Severity, AlertState)> {
        changes
            .iter()
            .map(|c| (c.key.name, c.key.severity, c.state))
            .collect()
    }

    #[test]
    fn a_crossing_fires_at_once_once_per_episode_and_resolves_after_the_hysteresis() {
        let mut alerts = watch();
        assert!(alerts.apply(&sample(0, 50 * GIB)).is_empty());
        let fired = alerts.apply(&sample(250, 91 * GIB));
        assert_eq!(
            names(&fired),
            [(
                AlertName::GpuMemoryHigh,
                Severity::Warning,
                AlertState::Firing
            )]
        );
        assert_eq!(fired[0].summary, "GPU memory 91% full on node-a GPU 0");
        assert!(fired[0].description.contains("vramscope diagnose --live"));
        // Hovering at the line (89.5 %: within the hysteresis) is the same episode.
        for t in 1..200 {
            let used = if t % 2 == 0 {
                92 * GIB
            } else {
                8950 * GIB / 100
            };
            assert!(alerts.apply(&sample(250 + t * 250, used)).is_empty(), "{t}");
        }
        // Below the hysteresis: resolved once it has stayed below for 30 s.
        let mut resolved = Vec::new();
        for t in 0..200 {
            resolved.extend(alerts.apply(&sample(60_000 + t * 250, 80 * GIB)));
        }
        assert_eq!(
            names(&resolved),
            [(
                AlertName::GpuMemoryHigh,
                Severity::Warning,
                AlertState::Resolved
            )]
        );
        // The last reading within the hysteresis was at 50 s.
        assert_eq!(resolved[0].t_ms, 50_000 + 30_000);
    }

    #[test]
    fn a_steady_leak_is_full_soon_and_a_step_is_not() {
        // 100 MiB/s from 10 GiB: full in about 15 minutes after two minutes of readings.
        let mut alerts = watch();
        let mut fired = Vec::new();
        for i in 0..=480 {
            let t = i * 250;
            fired.extend(alerts.apply(&sample(t, 10 * GIB + (t as u64) * 100 * MIB / 1000)));
        }
        assert_eq!(
            names(&fired),
            [(
                AlertName::GpuMemoryFullSoon,
                Severity::Warning,
                AlertState::Firing
            )]
        );
        let ttf = alerts.time_to_full_seconds(0).expect("growing");
        let used = 10.0 * GIB as f64 + 120.0 * 100.0 * MIB as f64;
        let truth = (TOTAL as f64 - used) / (100.0 * MIB as f64);
        assert!((ttf - truth).abs() / truth < 0.05, "{ttf} vs {truth}");
        // One step from 10 to 60 GiB, then flat: never full soon.
        let mut alerts = watch();
        for i in 0..=2400 {
            let t = i * 250;
            let used = if t < 60_000 { 10 * GIB } else { 60 * GIB };
            let changes = alerts.apply(&sample(t, used));
            assert!(changes.is_empty(), "{changes:?}");
        }
    }

    #[test]
    fn xids_page_by_class_and_a_lost_gpu_stays() {
        let mut alerts = watch();
        alerts.apply(&sample(0, GIB));
        let event = |code| SampleBatch {
            events: vec![Event {
                t_ms: 1000,
                device_index: Some(0),
                kind: EventKind::Xid {
                    code,
                    mig_instance: None,
                },
            }],
            ..Default::default()
        };
        let fired = alerts.apply(&event(79));
        assert_eq!(
            names(&fired),
            [(
                AlertName::GpuXidError,
                Severity::Critical,
                AlertState::Firing
            )]
        );
        assert_eq!(fired[0].summary, "Xid 79 on node-a GPU 0");
        let fired = alerts.apply(&event(31));
        assert_eq!(
            names(&fired),
            [(
                AlertName::GpuXidError,
                Severity::Warning,
                AlertState::Firing
            )]
        );
        // 15 minutes later both have passed (+30 s to clear).
        let resolved = alerts.apply(&sample(1000 + 930_000, GIB));
        assert_eq!(resolved.len(), 2, "{resolved:?}");
        let lost = alerts.apply(&SampleBatch {
            events: vec![Event {
                t_ms: 2_000_000,
                device_index: Some(0),
                kind: EventKind::DeviceLost {
                    detail: "GPU is lost".into(),
                },
            }],
            ..Default::default()
        });
        assert_eq!(
            names(&lost),
            [(AlertName::GpuLost, Severity::Critical, AlertState::Firing)]
        );
        assert!(
            alerts.apply(&sample(9_000_000, GIB)).is_empty(),
            "a lost GPU stays lost"
        );
    }

    #[test]
    fn thresholds_outside_the_range_are_refused_with_it() {
        assert_eq!(threshold_fraction(90.0), Ok(0.9));
        for bad in [0.0, 0.5, 100.5, f64::NAN, -3.0] {
            let err = threshold_fraction(bad).expect_err("refused");
            assert!(err.contains("from 1 to 100 %"), "{err}");
        }
    }

    #[test]
    fn critical_xids_come_from_the_table() {
        assert_eq!(critical_xids(), [48, 64, 74, 79, 95, 119, 120, 140]);
        assert!(xid_is_critical(79) && !xid_is_critical(31) && !xid_is_critical(9999));
    }

    #[test]
    fn durations_read_like_prometheus() {
        assert_eq!(humanize_duration(1349.5), "22m 29s");
        assert_eq!(humanize_duration(3600.0), "1h 0m 0s");
        assert_eq!(humanize_duration(42.0), "42s");
    }
}
