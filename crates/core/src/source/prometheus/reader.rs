//! Turns a Prometheus server's GPU series into the model: one device per GPU (named after its
//! host and index), its memory, temperature, power, utilization, ECC and row-remap counters, its
//! processes and its Xid errors, on the grid of a range query.
//!
//! Three exporters are understood, the most precise first: vramscope's own (`vramscope_gpu_*`,
//! bytes), NVIDIA's dcgm-exporter (`DCGM_FI_DEV_*`, MiB) and nvitop-exporter (`gpu_memory_*_MiB`,
//! `process_gpu_memory_MiB`). A GPU scraped by several is one device (same UUID); each value comes
//! from the first exporter that has it. Gauges are read with `max_over_time(m[step])`, so a peak
//! shorter than the step still shows at its step; counters and dcgm's last-Xid gauge are read
//! raw and turned into events where they change.
//!
//! The reader is stateful so that the GUI can follow a server live: the devices are fixed by the
//! first read, and counters carry over from one read to the next.

use std::collections::{BTreeMap, HashMap};

use super::api::{PrometheusError, RangeApi, RangeSeries};
use crate::model::{
    CaptureMeta, DeviceFacts, DeviceSample, Event, EventKind, HealthSample, MIB, MemoryReading,
    ProcessKind, ProcessSample, SampleBatch, SourceKind, UnixMs,
};

/// Prometheus refuses range queries of more than 11,000 points per series.
pub const MAX_POINTS_PER_SERIES: usize = 11_000;
/// Points asked for in one query over all series (series × steps): large fleets get shorter
/// chunks, so that one answer stays in the tens of megabytes.
const MAX_POINTS_PER_QUERY: usize = 2_000_000;
/// Events made from one counter step at most (a counter that jumped by millions is a reset or a
/// bug, not millions of Xids).
const MAX_EVENTS_PER_STEP: u64 = 1_000;

/// What one step of a range is read as, in the model's units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    UsedBytes,
    ReservedBytes,
    TotalBytes,
    TemperatureC,
    PowerMw,
    GpuUtilPct,
    MemUtilPct,
    EccCorrectedVolatile,
    EccUncorrectedVolatile,
    EccCorrectedAggregate,
    EccUncorrectedAggregate,
    RemappedCorrectable,
    RemappedUncorrectable,
    RemapPending,
    RemapFailure,
}

/// What a query's answer feeds.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// A per-GPU value, multiplied by the factor into the model's unit.
    Slot(Slot, f64),
    /// Per-process memory, multiplied by the factor into bytes.
    ProcessBytes(f64),
    /// A counter of Xids per `xid` label: each increase is that many Xid events.
    XidCounter,
    /// dcgm-exporter's gauge of the last Xid: each change to a non-zero code is one event.
    XidLastCode,
    /// 1 while the GPU answers: a fall to 0 is a lost GPU.
    Up,
}

/// One PromQL query of one exporter. `{S}` stands for the label matchers, `[W]` for the window.
struct QueryDef {
    /// The metric names it needs (skipped when the server has none of them).
    metrics: &'static [&'static str],
    promql: &'static str,
    target: Target,
}

const MIB_F: f64 = MIB as f64;

/// Every query, in the order values are taken: vramscope's, dcgm-exporter's, nvitop-exporter's.
const QUERIES: &[QueryDef] = &[
    // vramscope exporter (bytes, base units).
    q(
        &["vramscope_gpu_memory_used_bytes"],
        "max_over_time(vramscope_gpu_memory_used_bytes{S}[W])",
        Target::Slot(Slot::UsedBytes, 1.0),
    ),
    q(
        &["vramscope_gpu_memory_reserved_bytes"],
        "max_over_time(vramscope_gpu_memory_reserved_bytes{S}[W])",
        Target::Slot(Slot::ReservedBytes, 1.0),
    ),
    q(
        &["vramscope_gpu_memory_total_bytes"],
        "max_over_time(vramscope_gpu_memory_total_bytes{S}[W])",
        Target::Slot(Slot::TotalBytes, 1.0),
    ),
    q(
        &["vramscope_gpu_temperature_celsius"],
        "max_over_time(vramscope_gpu_temperature_celsius{S}[W])",
        Target::Slot(Slot::TemperatureC, 1.0),
    ),
    q(
        &["vramscope_gpu_power_watts"],
        "max_over_time(vramscope_gpu_power_watts{S}[W])",
        Target::Slot(Slot::PowerMw, 1000.0),
    ),
    q(
        &["vramscope_gpu_utilization_ratio"],
        "max_over_time(vramscope_gpu_utilization_ratio{S}[W])",
        Target::Slot(Slot::GpuUtilPct, 100.0),
    ),
    q(
        &["vramscope_gpu_memory_utilization_ratio"],
        "max_over_time(vramscope_gpu_memory_utilization_ratio{S}[W])",
        Target::Slot(Slot::MemUtilPct, 100.0),
    ),
    q(
        &["vramscope_gpu_ecc_corrected_errors_volatile_total"],
        "max_over_time(vramscope_gpu_ecc_corrected_errors_volatile_total{S}[W])",
        Target::Slot(Slot::EccCorrectedVolatile, 1.0),
    ),
    q(
        &["vramscope_gpu_ecc_uncorrected_errors_volatile_total"],
        "max_over_time(vramscope_gpu_ecc_uncorrected_errors_volatile_total{S}[W])",
        Target::Slot(Slot::EccUncorrectedVolatile, 1.0),
    ),
    q(
        &["vramscope_gpu_ecc_corrected_errors_aggregate_total"],
        "max_over_time(vramscope_gpu_ecc_corrected_errors_aggregate_total{S}[W])",
        Target::Slot(Slot::EccCorrectedAggregate, 1.0),
    ),
    q(
        &["vramscope_gpu_ecc_uncorrected_errors_aggregate_total"],
        "max_over_time(vramscope_gpu_ecc_uncorrected_errors_aggregate_total{S}[W])",
        Target::Slot(Slot::EccUncorrectedAggregate, 1.0),
    ),
    q(
        &["vramscope_gpu_remapped_rows_correctable_total"],
        "max_over_time(vramscope_gpu_remapped_rows_correctable_total{S}[W])",
        Target::Slot(Slot::RemappedCorrectable, 1.0),
    ),
    q(
        &["vramscope_gpu_remapped_rows_uncorrectable_total"],
        "max_over_time(vramscope_gpu_remapped_rows_uncorrectable_total{S}[W])",
        Target::Slot(Slot::RemappedUncorrectable, 1.0),
    ),
    q(
        &["vramscope_gpu_remapped_rows_pending"],
        "max_over_time(vramscope_gpu_remapped_rows_pending{S}[W])",
        Target::Slot(Slot::RemapPending, 1.0),
    ),
    q(
        &["vramscope_gpu_remapped_rows_failure"],
        "max_over_time(vramscope_gpu_remapped_rows_failure{S}[W])",
        Target::Slot(Slot::RemapFailure, 1.0),
    ),
    q(
        &["vramscope_gpu_process_memory_used_bytes"],
        "max_over_time(vramscope_gpu_process_memory_used_bytes{S}[W])",
        Target::ProcessBytes(1.0),
    ),
    q(
        &["vramscope_gpu_xid_errors_total"],
        "vramscope_gpu_xid_errors_total{S}",
        Target::XidCounter,
    ),
    q(
        &["vramscope_gpu_up"],
        "min_over_time(vramscope_gpu_up{S}[W])",
        Target::Up,
    ),
    // dcgm-exporter (MiB, °C, W, %).
    q(
        &["DCGM_FI_DEV_FB_USED"],
        "max_over_time(DCGM_FI_DEV_FB_USED{S}[W])",
        Target::Slot(Slot::UsedBytes, MIB_F),
    ),
    q(
        &["DCGM_FI_DEV_FB_RESERVED"],
        "max_over_time(DCGM_FI_DEV_FB_RESERVED{S}[W])",
        Target::Slot(Slot::ReservedBytes, MIB_F),
    ),
    // No total by default: used + free + reserved is the total (free + used where reserved is missing).
    q(
        &[
            "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_FB_FREE",
            "DCGM_FI_DEV_FB_RESERVED",
        ],
        "DCGM_FI_DEV_FB_USED{S} + DCGM_FI_DEV_FB_FREE{S} + DCGM_FI_DEV_FB_RESERVED{S}",
        Target::Slot(Slot::TotalBytes, MIB_F),
    ),
    q(
        &["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"],
        "DCGM_FI_DEV_FB_USED{S} + DCGM_FI_DEV_FB_FREE{S}",
        Target::Slot(Slot::TotalBytes, MIB_F),
    ),
    q(
        &["DCGM_FI_DEV_GPU_TEMP"],
        "max_over_time(DCGM_FI_DEV_GPU_TEMP{S}[W])",
        Target::Slot(Slot::TemperatureC, 1.0),
    ),
    q(
        &["DCGM_FI_DEV_POWER_USAGE"],
        "max_over_time(DCGM_FI_DEV_POWER_USAGE{S}[W])",
        Target::Slot(Slot::PowerMw, 1000.0),
    ),
    q(
        &["DCGM_FI_DEV_GPU_UTIL"],
        "max_over_time(DCGM_FI_DEV_GPU_UTIL{S}[W])",
        Target::Slot(Slot::GpuUtilPct, 1.0),
    ),
    q(
        &["DCGM_FI_DEV_MEM_COPY_UTIL"],
        "max_over_time(DCGM_FI_DEV_MEM_COPY_UTIL{S}[W])",
        Target::Slot(Slot::MemUtilPct, 1.0),
    ),
    q(
        &["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"],
        "max_over_time(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{S}[W])",
        Target::Slot(Slot::EccCorrectedVolatile, 1.0),
    ),
    q(
        &["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"],
        "max_over_time(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{S}[W])",
        Target::Slot(Slot::EccUncorrectedVolatile, 1.0),
    ),
    q(
        &["DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"],
        "max_over_time(DCGM_FI_DEV_ECC_SBE_AGG_TOTAL{S}[W])",
        Target::Slot(Slot::EccCorrectedAggregate, 1.0),
    ),
    q(
        &["DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"],
        "max_over_time(DCGM_FI_DEV_ECC_DBE_AGG_TOTAL{S}[W])",
        Target::Slot(Slot::EccUncorrectedAggregate, 1.0),
    ),
    q(
        &["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"],
        "max_over_time(DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{S}[W])",
        Target::Slot(Slot::RemappedCorrectable, 1.0),
    ),
    q(
        &["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"],
        "max_over_time(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{S}[W])",
        Target::Slot(Slot::RemappedUncorrectable, 1.0),
    ),
    q(
        &["DCGM_FI_DEV_ROW_REMAP_FAILURE"],
        "max_over_time(DCGM_FI_DEV_ROW_REMAP_FAILURE{S}[W])",
        Target::Slot(Slot::RemapFailure, 1.0),
    ),
    q(
        &["DCGM_EXP_XID_ERRORS_COUNT"],
        "DCGM_EXP_XID_ERRORS_COUNT{S}",
        Target::XidCounter,
    ),
    q(
        &["DCGM_FI_DEV_XID_ERRORS"],
        "DCGM_FI_DEV_XID_ERRORS{S}",
        Target::XidLastCode,
    ),
    // nvitop-exporter (MiB).
    q(
        &["gpu_memory_used_MiB"],
        "max_over_time(gpu_memory_used_MiB{S}[W])",
        Target::Slot(Slot::UsedBytes, MIB_F),
    ),
    q(
        &["gpu_memory_total_MiB"],
        "max_over_time(gpu_memory_total_MiB{S}[W])",
        Target::Slot(Slot::TotalBytes, MIB_F),
    ),
    q(
        &["gpu_memory_used_MiB", "gpu_memory_free_MiB"],
        "gpu_memory_used_MiB{S} + gpu_memory_free_MiB{S}",
        Target::Slot(Slot::TotalBytes, MIB_F),
    ),
    q(
        &["process_gpu_memory_MiB"],
        "max_over_time(process_gpu_memory_MiB{S}[W])",
        Target::ProcessBytes(MIB_F),
    ),
];

/// Every metric a read asks for when the server has it (servers that stand in for Prometheus
/// offer them all).
pub fn metrics_read() -> impl Iterator<Item = &'static str> {
    QUERIES.iter().flat_map(|def| def.metrics.iter().copied())
}

const fn q(metrics: &'static [&'static str], promql: &'static str, target: Target) -> QueryDef {
    QueryDef {
        metrics,
        promql,
        target,
    }
}

/// Labels that describe one series of a GPU (a process, an Xid code), not the GPU itself.
const PER_SERIES_LABELS: &[&str] = &[
    "pid",
    "process_name",
    "command",
    "username",
    "xid",
    "err_code",
    "err_msg",
];

/// A time range on a step grid: `start_ms`, `start_ms + step_ms`, … up to `end_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepRange {
    pub start_ms: UnixMs,
    pub end_ms: UnixMs,
    pub step_ms: i64,
}

impl StepRange {
    /// Number of steps (at least one when `end_ms >= start_ms`).
    pub fn steps(&self) -> usize {
        if self.end_ms < self.start_ms || self.step_ms <= 0 {
            return 0;
        }
        // Timestamps come from the server's answer: near i64's ends the span does not fit.
        match self.end_ms.checked_sub(self.start_ms) {
            Some(span) => usize::try_from(span / self.step_ms)
                .unwrap_or(usize::MAX)
                .saturating_add(1),
            None => 0,
        }
    }

    fn time_of(&self, step: usize) -> UnixMs {
        let offset = i64::try_from(step)
            .unwrap_or(i64::MAX)
            .saturating_mul(self.step_ms);
        self.start_ms.saturating_add(offset)
    }

    /// The step nearest to `t_ms`, if it is on the grid; `None` for times outside it (including
    /// any whose distance from the start does not fit in an `i64`).
    fn step_of(&self, t_ms: UnixMs) -> Option<usize> {
        let offset = t_ms.checked_sub(self.start_ms)?;
        if offset < 0 || self.step_ms <= 0 {
            return None;
        }
        let rounded = offset.checked_add(self.step_ms / 2)?;
        let step = usize::try_from(rounded / self.step_ms).ok()?;
        (step < self.steps()).then_some(step)
    }

    /// The range cut into pieces of at most `steps_per_chunk` steps, on the same grid.
    fn chunks(&self, steps_per_chunk: usize) -> Vec<StepRange> {
        let steps_per_chunk = steps_per_chunk.max(1);
        let mut chunks = Vec::new();
        let mut first = 0;
        let total = self.steps();
        while first < total {
            let last = (first + steps_per_chunk).min(total) - 1;
            chunks.push(StepRange {
                start_ms: self.time_of(first),
                end_ms: self.time_of(last),
                step_ms: self.step_ms,
            });
            first = last + 1;
        }
        chunks
    }
}

/// Label matchers (`Hostname=~"node-.*"`, with or without braces) put into every query.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector(String);

impl Selector {
    /// `text` as given to `--match`; braces are optional.
    pub fn new(text: &str) -> Self {
        let inner = text.trim();
        let inner = inner
            .strip_prefix('{')
            .and_then(|rest| rest.strip_suffix('}'))
            .unwrap_or(inner);
        Selector(inner.trim().to_owned())
    }

    fn braces(&self) -> String {
        if self.0.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", self.0)
        }
    }

    /// The series of any metric that the selector selects (`None` without a selector), for
    /// asking which metrics those series have: a selector of label matchers alone may match the
    /// empty string (`pod=~".*"`), which Prometheus refuses without a name matcher.
    fn series_match(&self) -> Option<String> {
        (!self.0.is_empty()).then(|| format!("{{__name__=~\".+\",{}}}", self.0))
    }
}

/// A Prometheus duration for a window of `ms`.
fn promql_duration(ms: i64) -> String {
    if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// The GPU a series belongs to, from its labels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct GpuIdentity {
    host: String,
    gpu: String,
    uuid: String,
    model: String,
    pci_bus_id: String,
    labels: BTreeMap<String, String>,
}

impl GpuIdentity {
    fn of(labels: &BTreeMap<String, String>) -> Self {
        let first = |keys: &[&str]| {
            keys.iter()
                .find_map(|k| labels.get(*k).filter(|v| !v.is_empty()))
                .cloned()
                .unwrap_or_default()
        };
        let mut host = first(&["Hostname", "hostname"]);
        if host.is_empty() {
            // Without a host label the scrape target names the machine.
            let instance = first(&["instance"]);
            host = match instance.rsplit_once(':') {
                Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name.to_owned(),
                _ => instance,
            };
        }
        let kept = labels
            .iter()
            .filter(|(k, _)| !PER_SERIES_LABELS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        GpuIdentity {
            host,
            gpu: first(&["gpu", "index"]),
            uuid: first(&["UUID", "uuid"]),
            model: first(&["modelName", "devicename", "name"]),
            pci_bus_id: first(&["pci_bus_id"]),
            labels: kept,
        }
    }

    /// What makes two series the same GPU: its UUID, else its host and index.
    fn key(&self) -> String {
        if self.uuid.is_empty() {
            format!("{}\u{0}{}", self.host, self.gpu)
        } else {
            self.uuid.clone()
        }
    }

    /// Sort order of devices: by host, then by index as a number.
    fn order(&self) -> (String, u64, String, String) {
        (
            self.host.clone(),
            self.gpu.parse().unwrap_or(u64::MAX),
            self.gpu.clone(),
            self.uuid.clone(),
        )
    }
}

/// What one read gathered for one GPU, on the read's step grid.
#[derive(Default)]
struct GpuGrid {
    identity: GpuIdentity,
    slots: BTreeMap<Slot, Vec<f64>>,
    /// Per-process memory: (pid, name) → (step, bytes); only from the first exporter with any.
    processes: BTreeMap<(u32, String), Vec<(usize, f64)>>,
    process_query: Option<usize>,
    /// Raw counter points per (query, Xid code).
    xid_counters: BTreeMap<(usize, u64), Vec<(usize, f64)>>,
    xid_last_code: Vec<(usize, f64)>,
    up: Vec<(usize, f64)>,
}

impl GpuGrid {
    fn slot_mut(&mut self, slot: Slot, steps: usize) -> &mut Vec<f64> {
        self.slots
            .entry(slot)
            .or_insert_with(|| vec![f64::NAN; steps])
    }

    fn slot(&self, slot: Slot, step: usize) -> Option<f64> {
        self.slots
            .get(&slot)
            .and_then(|values| values.get(step))
            .copied()
            .filter(|v| !v.is_nan())
    }
}

/// Progress of a read: requests done of requests planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadProgress {
    pub requests_done: usize,
    pub requests_total: usize,
}

/// Reads GPU series from one server into sample batches, keeping the devices and the counters of
/// earlier reads.
pub struct FleetReader {
    client: Box<dyn RangeApi>,
    selector: Selector,
    /// GPU keys in device-index order, fixed by the first read.
    keys: Vec<String>,
    devices: Vec<DeviceFacts>,
    /// Last raw value of every counter series (device, query, code), across reads.
    counter_last: HashMap<(u32, usize, u64), f64>,
    /// Last code of dcgm's last-Xid gauge and last `up` per device, across reads.
    last_code: HashMap<u32, f64>,
    last_up: HashMap<u32, f64>,
    /// Last health reading per device: a new one is emitted only when it changes.
    last_health: HashMap<u32, HealthSample>,
    /// GPUs that appeared after the first read (not shown: the devices are fixed).
    pub ignored_new_gpus: usize,
    reads: usize,
}

impl FleetReader {
    /// A reader of the series that match `selector` on the server `client` asks (the Prometheus
    /// client, or a stand-in).
    pub fn new(client: impl RangeApi + 'static, selector: Selector) -> Self {
        FleetReader {
            client: Box::new(client),
            selector,
            keys: Vec::new(),
            devices: Vec::new(),
            counter_last: HashMap::new(),
            last_code: HashMap::new(),
            last_up: HashMap::new(),
            last_health: HashMap::new(),
            ignored_new_gpus: 0,
            reads: 0,
        }
    }

    /// The devices found by the first read, in index order.
    pub fn devices(&self) -> &[DeviceFacts] {
        &self.devices
    }

    /// Capture metadata for reads of this server with this step.
    pub fn meta(&self, range: &StepRange) -> CaptureMeta {
        CaptureMeta {
            source: SourceKind::Prometheus,
            host: self.client.server().to_owned(),
            driver_version: String::new(),
            cuda_driver_version: None,
            started_ms: range.start_ms,
            interval_ms: u32::try_from(range.step_ms).unwrap_or(u32::MAX),
            writer: format!("vramscope {}", env!("CARGO_PKG_VERSION")),
        }
    }

    /// Reads `range`, calling `progress` after every request, and returns one batch per step
    /// that has data, oldest first. The first read decides the devices.
    pub fn read(
        &mut self,
        range: &StepRange,
        progress: &mut dyn FnMut(ReadProgress),
    ) -> Result<Vec<SampleBatch>, PrometheusError> {
        let steps = range.steps();
        if steps == 0 {
            return Ok(Vec::new());
        }
        let present = self.client.metric_names(
            range.start_ms,
            range.end_ms,
            self.selector.series_match().as_deref(),
        )?;
        let queries: Vec<(usize, &QueryDef)> = QUERIES
            .iter()
            .enumerate()
            .filter(|(_, def)| def.metrics.iter().all(|m| present.iter().any(|p| p == m)))
            .collect();
        let mut gpus: BTreeMap<String, GpuGrid> = BTreeMap::new();
        // Size chunks by the number of GPUs of the previous read (or a thousand at first).
        let expected_series = if self.keys.is_empty() {
            1000
        } else {
            self.keys.len()
        };
        let steps_per_chunk =
            (MAX_POINTS_PER_QUERY / expected_series.max(1)).clamp(100, MAX_POINTS_PER_SERIES);
        let chunks = range.chunks(steps_per_chunk);
        let requests_total = chunks.len() * queries.len();
        let mut requests_done = 0;
        let selector = self.selector.braces();
        let window = format!("[{}]", promql_duration(range.step_ms));
        for chunk in &chunks {
            for &(query_index, def) in &queries {
                let promql = def.promql.replace("{S}", &selector).replace("[W]", &window);
                let answer = self.client.query_range(
                    &promql,
                    chunk.start_ms,
                    chunk.end_ms,
                    chunk.step_ms,
                )?;
                for series in answer {
                    add_series(&mut gpus, range, steps, query_index, def.target, series);
                }
                requests_done += 1;
                progress(ReadProgress {
                    requests_done,
                    requests_total,
                });
            }
        }
        if self.reads == 0 {
            self.fix_devices(&gpus);
        }
        self.reads += 1;
        Ok(self.batches(range, &gpus))
    }

    /// Makes the devices from the GPUs of the first read: sorted by host and index, each named
    /// after its model, with its host and labels.
    fn fix_devices(&mut self, gpus: &BTreeMap<String, GpuGrid>) {
        let mut found: Vec<(&String, &GpuGrid)> = gpus.iter().collect();
        found.sort_by_key(|(_, grid)| grid.identity.order());
        for (index, (key, grid)) in found.into_iter().enumerate() {
            let id = &grid.identity;
            let total = grid
                .slots
                .get(&Slot::TotalBytes)
                .into_iter()
                .flatten()
                .copied()
                .filter(|v| !v.is_nan())
                .fold(0.0, f64::max);
            let simulated = id.model.contains("(simulated)") || id.host.contains("(simulated)");
            let mut labels = id.labels.clone();
            if !id.gpu.is_empty() {
                labels.insert("gpu".to_owned(), id.gpu.clone());
            }
            self.keys.push(key.clone());
            self.devices.push(DeviceFacts {
                index: index as u32,
                name: id.model.clone(),
                uuid: id.uuid.clone(),
                pci_bus_id: id.pci_bus_id.clone(),
                memory_total_bytes: total as u64,
                simulated,
                host: id.host.clone(),
                labels,
                ..Default::default()
            });
        }
    }

    /// One batch per step with data.
    fn batches(&mut self, range: &StepRange, gpus: &BTreeMap<String, GpuGrid>) -> Vec<SampleBatch> {
        let steps = range.steps();
        let mut batches: Vec<SampleBatch> = (0..steps).map(|_| SampleBatch::default()).collect();
        let known: HashMap<&str, u32> = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.as_str(), i as u32))
            .collect();
        let any_processes = gpus.values().any(|g| !g.processes.is_empty());
        let first_read = self.reads <= 1;
        let mut new_gpus = 0;
        for (key, grid) in gpus {
            let Some(&device_index) = known.get(key.as_str()) else {
                new_gpus += 1;
                continue;
            };
            for (step, batch) in batches.iter_mut().enumerate() {
                let t_ms = range.time_of(step);
                if let Some(sample) = device_sample(grid, device_index, step, t_ms) {
                    batch.devices.push(sample);
                }
                if let Some(health) = health_sample(grid, device_index, step, t_ms) {
                    let changed = self
                        .last_health
                        .get(&device_index)
                        .is_none_or(|last| !same_health(last, &health));
                    if changed {
                        self.last_health.insert(device_index, health.clone());
                        batch.health.push(health);
                    }
                }
            }
            if any_processes {
                for ((pid, name), points) in &grid.processes {
                    for &(step, bytes) in points {
                        let processes = batches[step].processes.get_or_insert_with(Vec::new);
                        processes.push(ProcessSample {
                            t_ms: range.time_of(step),
                            device_index,
                            pid: *pid,
                            name: name.clone(),
                            used_bytes: Some(bytes as u64),
                            kind: ProcessKind::Compute,
                            mig_instance: None,
                        });
                    }
                }
            }
            let mut xid_events: Vec<(usize, u64)> = Vec::new();
            for (&(query, code), points) in &grid.xid_counters {
                let key = (device_index, query, code);
                for (position, &(step, value)) in points.iter().enumerate() {
                    let increase = match self.counter_last.get(&key) {
                        Some(&last) if value >= last => value - last,
                        // A reset: the counter started again from zero.
                        Some(_) => value,
                        // A series that exists from the very first step of the first read
                        // counted Xids before the range; one that appears later counts them all.
                        None if first_read && position == 0 && step == 0 => 0.0,
                        None => value,
                    };
                    self.counter_last.insert(key, value);
                    let count = (increase.round() as u64).min(MAX_EVENTS_PER_STEP);
                    xid_events.extend(std::iter::repeat_n((step, code), count as usize));
                }
            }
            if grid.xid_counters.is_empty() {
                for &(step, code) in &grid.xid_last_code {
                    let previous = self.last_code.insert(device_index, code);
                    let changed = match previous {
                        Some(previous) => previous != code,
                        None => !(first_read && step == 0),
                    };
                    if changed && code > 0.0 {
                        xid_events.push((step, code as u64));
                    }
                }
            }
            for (step, code) in xid_events {
                batches[step].events.push(Event {
                    t_ms: range.time_of(step),
                    device_index: Some(device_index),
                    kind: EventKind::Xid {
                        code,
                        mig_instance: None,
                    },
                });
            }
            for &(step, up) in &grid.up {
                let previous = self.last_up.insert(device_index, up);
                if previous.is_some_and(|p| p > 0.0) && up <= 0.0 {
                    batches[step].events.push(Event {
                        t_ms: range.time_of(step),
                        device_index: Some(device_index),
                        kind: EventKind::DeviceLost {
                            detail: "vramscope exporter reported the GPU down (vramscope_gpu_up 0)"
                                .to_owned(),
                        },
                    });
                }
            }
        }
        self.ignored_new_gpus = self.ignored_new_gpus.max(new_gpus);
        if any_processes {
            // A step where the process metrics answered lists every process: empty lists count.
            for batch in &mut batches {
                if !batch.devices.is_empty() && batch.processes.is_none() {
                    batch.processes = Some(Vec::new());
                }
            }
        }
        batches.retain(|b| !b.is_empty());
        batches
    }
}

/// Folds one answered series into the grid of its GPU.
fn add_series(
    gpus: &mut BTreeMap<String, GpuGrid>,
    range: &StepRange,
    steps: usize,
    query_index: usize,
    target: Target,
    series: RangeSeries,
) {
    let identity = GpuIdentity::of(&series.labels);
    let grid = gpus.entry(identity.key()).or_default();
    if grid.identity == GpuIdentity::default() {
        grid.identity = identity;
    } else {
        for (k, v) in identity.labels {
            grid.identity.labels.entry(k).or_insert(v);
        }
        if grid.identity.model.is_empty() {
            grid.identity.model = identity.model;
        }
        if grid.identity.pci_bus_id.is_empty() {
            grid.identity.pci_bus_id = identity.pci_bus_id;
        }
    }
    let on_grid = series
        .points
        .iter()
        .filter_map(|&(t, v)| Some((range.step_of(t)?, v)));
    match target {
        Target::Slot(slot, factor) => {
            let values = grid.slot_mut(slot, steps);
            for (step, v) in on_grid {
                if values[step].is_nan() {
                    values[step] = v * factor;
                }
            }
        }
        Target::ProcessBytes(factor) => {
            if grid.process_query.is_some_and(|q| q != query_index) {
                return;
            }
            grid.process_query = Some(query_index);
            let pid = series
                .labels
                .get("pid")
                .and_then(|p| p.parse().ok())
                .unwrap_or(0);
            let name = ["process_name", "command", "username"]
                .iter()
                .find_map(|k| series.labels.get(*k).filter(|v| !v.is_empty()))
                .cloned()
                .unwrap_or_default();
            grid.processes
                .entry((pid, name))
                .or_default()
                .extend(on_grid.map(|(step, v)| (step, v * factor)));
        }
        Target::XidCounter => {
            let code = series
                .labels
                .get("xid")
                .and_then(|x| x.parse().ok())
                .unwrap_or(0);
            grid.xid_counters
                .entry((query_index, code))
                .or_default()
                .extend(on_grid);
        }
        Target::XidLastCode => grid.xid_last_code.extend(on_grid),
        Target::Up => grid.up.extend(on_grid),
    }
}

fn device_sample(
    grid: &GpuGrid,
    device_index: u32,
    step: usize,
    t_ms: UnixMs,
) -> Option<DeviceSample> {
    let used = grid.slot(Slot::UsedBytes, step)?;
    let reserved = grid.slot(Slot::ReservedBytes, step).unwrap_or(0.0);
    let total = grid.slot(Slot::TotalBytes, step).unwrap_or(0.0);
    let as_u32 = |slot| {
        grid.slot(slot, step)
            .map(|v: f64| v.round().clamp(0.0, u32::MAX as f64) as u32)
    };
    let as_u64 = |slot| {
        grid.slot(slot, step)
            .map(|v: f64| v.round().max(0.0) as u64)
    };
    let (used, reserved, total) = (used as u64, reserved as u64, total as u64);
    Some(DeviceSample {
        t_ms,
        device_index,
        memory: Some(MemoryReading {
            used_bytes: used,
            reserved_bytes: reserved,
            free_bytes: total.saturating_sub(used).saturating_sub(reserved),
            total_bytes: total,
        }),
        gpu_util_pct: as_u32(Slot::GpuUtilPct),
        mem_util_pct: as_u32(Slot::MemUtilPct),
        temperature_c: as_u32(Slot::TemperatureC),
        power_mw: as_u32(Slot::PowerMw),
        sm_clock_mhz: None,
        mem_clock_mhz: None,
        throttle_reasons: None,
        ecc_corrected_volatile: as_u64(Slot::EccCorrectedVolatile),
        ecc_uncorrected_volatile: as_u64(Slot::EccUncorrectedVolatile),
    })
}

fn health_sample(
    grid: &GpuGrid,
    device_index: u32,
    step: usize,
    t_ms: UnixMs,
) -> Option<HealthSample> {
    let as_u64 = |slot| {
        grid.slot(slot, step)
            .map(|v: f64| v.round().max(0.0) as u64)
    };
    let as_bool = |slot| grid.slot(slot, step).map(|v: f64| v > 0.0);
    let health = HealthSample {
        t_ms,
        device_index,
        ecc_corrected_aggregate: as_u64(Slot::EccCorrectedAggregate),
        ecc_uncorrected_aggregate: as_u64(Slot::EccUncorrectedAggregate),
        remapped_rows_correctable: as_u64(Slot::RemappedCorrectable),
        remapped_rows_uncorrectable: as_u64(Slot::RemappedUncorrectable),
        remapped_rows_pending: as_bool(Slot::RemapPending),
        remapped_rows_failure: as_bool(Slot::RemapFailure),
        ..Default::default()
    };
    let empty = HealthSample {
        t_ms,
        device_index,
        ..Default::default()
    };
    (health != empty).then_some(health)
}

/// Whether two health readings say the same (their times aside).
fn same_health(a: &HealthSample, b: &HealthSample) -> bool {
    HealthSample {
        t_ms: 0,
        ..a.clone()
    } == HealthSample {
        t_ms: 0,
        ..b.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by fuzzing (23 inputs, one bug): timestamps near i64's ends overflowed the step
    /// grid's arithmetic.
    #[test]
    fn the_step_grid_survives_timestamps_at_the_ends_of_i64() {
        let grid = StepRange {
            start_ms: i64::MIN + 1,
            end_ms: i64::MAX,
            step_ms: 15_000,
        };
        assert!(grid.steps() == 0 || grid.steps() > 1);
        assert_eq!(grid.step_of(i64::MAX), None);
        let normal = StepRange {
            start_ms: 0,
            end_ms: 60_000,
            step_ms: 15_000,
        };
        assert_eq!(normal.steps(), 5);
        assert_eq!(normal.step_of(i64::MAX), None);
        assert_eq!(normal.step_of(i64::MIN), None);
        assert_eq!(normal.step_of(29_000), Some(2));
        assert_eq!(normal.time_of(usize::MAX), i64::MAX);
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn long_ranges_are_cut_on_the_same_grid_under_the_point_limit() {
        let range = StepRange {
            start_ms: 1_000,
            end_ms: 1_000 + 30_000 * 15_000,
            step_ms: 15_000,
        };
        assert_eq!(range.steps(), 30_001);
        let chunks = range.chunks(MAX_POINTS_PER_SERIES);
        assert_eq!(chunks.len(), 3);
        assert!(chunks.iter().all(|c| c.steps() <= MAX_POINTS_PER_SERIES));
        assert_eq!(chunks.iter().map(StepRange::steps).sum::<usize>(), 30_001);
        assert_eq!(chunks[0].start_ms, 1_000);
        assert_eq!(
            chunks[1].start_ms,
            chunks[0].end_ms + 15_000,
            "no step twice, none lost"
        );
        assert_eq!(chunks[2].end_ms, range.end_ms);
        assert_eq!(range.step_of(1_000 + 15_000 * 7 + 3), Some(7));
        assert_eq!(range.step_of(0), None);
    }

    #[test]
    fn selectors_and_windows_are_written_as_promql() {
        assert_eq!(
            Selector::new(" {Hostname=~\"node-.*\"} ").braces(),
            "{Hostname=~\"node-.*\"}"
        );
        assert_eq!(Selector::new("pod=\"a\"").braces(), "{pod=\"a\"}");
        assert_eq!(Selector::new("").braces(), "");
        assert_eq!(
            Selector::new("{pod=\"a\"}").series_match().as_deref(),
            Some("{__name__=~\".+\",pod=\"a\"}")
        );
        assert_eq!(Selector::new(" ").series_match(), None);
        assert_eq!(promql_duration(15_000), "15s");
        assert_eq!(promql_duration(1_500), "1500ms");
    }

    #[test]
    fn gpus_are_identified_across_exporters_by_uuid_else_host_and_index() {
        let dcgm = GpuIdentity::of(&labels(&[
            ("Hostname", "node-a"),
            ("gpu", "3"),
            ("UUID", "GPU-1"),
            ("modelName", "NVIDIA H200"),
            ("pod", "train-0"),
        ]));
        let nvitop = GpuIdentity::of(&labels(&[
            ("hostname", "10.0.0.7"),
            ("index", "3"),
            ("uuid", "GPU-1"),
            ("devicename", "NVIDIA H200"),
            ("pid", "42"),
            ("username", "ml"),
        ]));
        assert_eq!(dcgm.key(), nvitop.key());
        assert_eq!((dcgm.host.as_str(), dcgm.gpu.as_str()), ("node-a", "3"));
        assert!(
            !nvitop.labels.contains_key("pid"),
            "process labels are not GPU labels"
        );
        let bare = GpuIdentity::of(&labels(&[("instance", "node-b:9400"), ("gpu", "0")]));
        assert_eq!(bare.host, "node-b", "the scrape target names the host");
        assert_ne!(
            bare.key(),
            GpuIdentity::of(&labels(&[("instance", "node-b:9400"), ("gpu", "1")])).key()
        );
    }

    #[test]
    fn every_query_is_written_with_its_selector_and_window() {
        for def in QUERIES {
            assert!(!def.metrics.is_empty());
            for metric in def.metrics {
                assert!(
                    def.promql.contains(&format!("{metric}{{S}}")),
                    "{}",
                    def.promql
                );
            }
            assert_eq!(
                def.promql.contains("_over_time("),
                def.promql.contains("[W]"),
                "{}",
                def.promql
            );
        }
    }
}
