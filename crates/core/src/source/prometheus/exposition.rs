//! What `vramscope exporter` serves: the latest readings of the sampler in Prometheus's text
//! exposition format (version 0.0.4), named after Prometheus's conventions (base units in the
//! name, `_total` on counters) and labelled like NVIDIA's dcgm-exporter (`gpu`, `UUID`,
//! `pci_bus_id`, `device`, `modelName`, `Hostname`) so that dashboards can join both.
//!
//! [`ExporterState`] folds sample batches in as they arrive and renders the whole page once per
//! batch; scrapes only copy the rendered page, so their cost does not depend on NVML at all.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::model::{
    CaptureMeta, DeviceFacts, DeviceSample, EventKind, HealthSample, ProcessSample, SampleBatch,
};

/// The `Content-Type` of the page (text format 0.0.4).
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every metric vramscope exports starts with this, so its series never collide with another
/// exporter's (and [`super::reader`] recognises them).
pub const METRIC_PREFIX: &str = "vramscope_";

/// The exporter's metric names; the reader looks for the same names.
pub mod names {
    pub const MEMORY_USED_BYTES: &str = "vramscope_gpu_memory_used_bytes";
    pub const MEMORY_RESERVED_BYTES: &str = "vramscope_gpu_memory_reserved_bytes";
    pub const MEMORY_FREE_BYTES: &str = "vramscope_gpu_memory_free_bytes";
    pub const MEMORY_TOTAL_BYTES: &str = "vramscope_gpu_memory_total_bytes";
    pub const MEMORY_TIME_TO_FULL_SECONDS: &str = "vramscope_gpu_memory_time_to_full_seconds";
    pub const PROCESS_MEMORY_USED_BYTES: &str = "vramscope_gpu_process_memory_used_bytes";
    pub const XID_ERRORS_TOTAL: &str = "vramscope_gpu_xid_errors_total";
    pub const ECC_CORRECTED_VOLATILE_TOTAL: &str =
        "vramscope_gpu_ecc_corrected_errors_volatile_total";
    pub const ECC_UNCORRECTED_VOLATILE_TOTAL: &str =
        "vramscope_gpu_ecc_uncorrected_errors_volatile_total";
    pub const ECC_CORRECTED_AGGREGATE_TOTAL: &str =
        "vramscope_gpu_ecc_corrected_errors_aggregate_total";
    pub const ECC_UNCORRECTED_AGGREGATE_TOTAL: &str =
        "vramscope_gpu_ecc_uncorrected_errors_aggregate_total";
    pub const REMAPPED_ROWS_CORRECTABLE_TOTAL: &str =
        "vramscope_gpu_remapped_rows_correctable_total";
    pub const REMAPPED_ROWS_UNCORRECTABLE_TOTAL: &str =
        "vramscope_gpu_remapped_rows_uncorrectable_total";
    pub const REMAPPED_ROWS_PENDING: &str = "vramscope_gpu_remapped_rows_pending";
    pub const REMAPPED_ROWS_FAILURE: &str = "vramscope_gpu_remapped_rows_failure";
    pub const TEMPERATURE_CELSIUS: &str = "vramscope_gpu_temperature_celsius";
    pub const POWER_WATTS: &str = "vramscope_gpu_power_watts";
    pub const UTILIZATION_RATIO: &str = "vramscope_gpu_utilization_ratio";
    pub const MEMORY_UTILIZATION_RATIO: &str = "vramscope_gpu_memory_utilization_ratio";
    pub const CLOCK_EVENT_ACTIVE: &str = "vramscope_gpu_clock_event_active";
    pub const UP: &str = "vramscope_gpu_up";
    pub const SAMPLE_TIMESTAMP_SECONDS: &str = "vramscope_gpu_sample_timestamp_seconds";
    pub const EXPORTER_INFO: &str = "vramscope_exporter_info";
}

/// What the exporter knows about one GPU: its latest readings and its counters.
#[derive(Clone, Debug, Default)]
struct GpuState {
    sample: Option<DeviceSample>,
    health: Option<HealthSample>,
    processes: Vec<ProcessSample>,
    /// Xid errors seen since the exporter started, by Xid code (every one, not only the last).
    xid_counts: BTreeMap<u64, u64>,
    /// NVML reported the GPU lost (it stays lost: NVML does not bring a lost GPU back).
    lost: bool,
    /// Seconds until the memory is full, while it grows ([`crate::diagnose::alerts`]).
    time_to_full_s: Option<f64>,
}

/// The exporter's view of the machine, fed with the sampler's batches.
#[derive(Clone, Debug)]
pub struct ExporterState {
    meta: CaptureMeta,
    devices: Vec<DeviceFacts>,
    gpus: Vec<GpuState>,
    simulated: bool,
}

impl ExporterState {
    /// An exporter for the machine the sampler describes; nothing is read yet.
    pub fn new(meta: CaptureMeta, devices: Vec<DeviceFacts>) -> Self {
        let simulated = meta.source.is_simulated() || devices.iter().any(|d| d.simulated);
        let gpus = vec![GpuState::default(); devices.len()];
        ExporterState {
            meta,
            devices,
            gpus,
            simulated,
        }
    }

    fn gpu_mut(&mut self, device_index: u32) -> Option<&mut GpuState> {
        let position = self.devices.iter().position(|d| d.index == device_index)?;
        self.gpus.get_mut(position)
    }

    /// Folds one batch in: the latest sample, health and process list per GPU replace the
    /// previous ones; Xid and lost-GPU events are counted.
    pub fn apply(&mut self, batch: &SampleBatch) {
        for sample in &batch.devices {
            if let Some(gpu) = self.gpu_mut(sample.device_index) {
                gpu.sample = Some(*sample);
            }
        }
        for health in &batch.health {
            if let Some(gpu) = self.gpu_mut(health.device_index) {
                gpu.health = Some(health.clone());
            }
        }
        if let Some(processes) = &batch.processes {
            // A polled tick lists every process of every GPU: GPUs without one have none.
            for gpu in &mut self.gpus {
                gpu.processes.clear();
            }
            for process in processes {
                if let Some(gpu) = self.gpu_mut(process.device_index) {
                    gpu.processes.push(process.clone());
                }
            }
        }
        for event in &batch.events {
            let Some(device_index) = event.device_index else {
                continue;
            };
            let Some(gpu) = self.gpu_mut(device_index) else {
                continue;
            };
            match event.kind {
                EventKind::Xid { code, .. } => *gpu.xid_counts.entry(code).or_insert(0) += 1,
                EventKind::DeviceLost { .. } => gpu.lost = true,
                _ => {}
            }
        }
    }

    /// Sets the time-to-full estimate of a GPU (`None` while its memory does not grow), from
    /// [`crate::diagnose::alerts::LiveAlerts`] fed with the same batches.
    pub fn set_time_to_full(&mut self, device_index: u32, seconds: Option<f64>) {
        if let Some(gpu) = self.gpu_mut(device_index) {
            gpu.time_to_full_s = seconds.filter(|s| s.is_finite());
        }
    }

    /// The GPU labels of device number `position`, as `{…}` content without the braces.
    fn gpu_labels(&self, device: &DeviceFacts) -> String {
        let mut labels = String::new();
        push_label(&mut labels, "gpu", &device.index.to_string());
        push_label(&mut labels, "UUID", &device.uuid);
        push_label(&mut labels, "pci_bus_id", &device.pci_bus_id);
        push_label(&mut labels, "device", &format!("nvidia{}", device.index));
        push_label(&mut labels, "modelName", &device.name);
        push_label(&mut labels, "Hostname", &self.meta.host);
        labels
    }

    /// The whole `/metrics` page: the memory readings, each process's memory, the Xid counts,
    /// the memory's health, the other readings, and the exporter's own line.
    pub fn render(&self) -> String {
        let mut page = String::with_capacity(4096 + 2048 * self.devices.len());
        let labels: Vec<String> = self.devices.iter().map(|d| self.gpu_labels(d)).collect();
        self.render_memory(&mut page, &labels);
        self.render_process_memory(&mut page, &labels);
        self.render_xid_counts(&mut page, &labels);
        self.render_health(&mut page, &labels);
        self.render_readings(&mut page, &labels);
        self.render_exporter_info(&mut page);
        page
    }

    /// One metric's header, then a line per GPU (labelled with its `labels`) that has a
    /// `value` for it.
    fn per_gpu(
        &self,
        page: &mut String,
        labels: &[String],
        name: &str,
        help: &str,
        kind: &str,
        value: &dyn Fn(&GpuState) -> Option<f64>,
    ) {
        header(page, name, help, kind);
        for (gpu, labels) in self.gpus.iter().zip(labels) {
            if let Some(v) = value(gpu) {
                line(page, name, labels, v);
            }
        }
    }

    /// The memory readings per GPU: used, reserved, free and total bytes.
    fn render_memory(&self, page: &mut String, labels: &[String]) {
        let memory = |gpu: &GpuState| gpu.sample.as_ref().and_then(|s| s.memory);
        self.per_gpu(
            page,
            labels,
            names::MEMORY_USED_BYTES,
            "GPU memory used by processes (NVML v2: without the driver's reserve).",
            "gauge",
            &|g| memory(g).map(|m| m.used_bytes as f64),
        );
        self.per_gpu(
            page,
            labels,
            names::MEMORY_RESERVED_BYTES,
            "GPU memory reserved by the driver and firmware.",
            "gauge",
            &|g| memory(g).map(|m| m.reserved_bytes as f64),
        );
        self.per_gpu(
            page,
            labels,
            names::MEMORY_FREE_BYTES,
            "GPU memory free for allocations.",
            "gauge",
            &|g| memory(g).map(|m| m.free_bytes as f64),
        );
        self.per_gpu(
            page,
            labels,
            names::MEMORY_TOTAL_BYTES,
            "GPU memory installed, as NVML reports it.",
            "gauge",
            &|g| memory(g).map(|m| m.total_bytes as f64),
        );
        self.per_gpu(
            page,
            labels,
            names::MEMORY_TIME_TO_FULL_SECONDS,
            "Seconds until the GPU's memory is full at the growth of its floor (vramscope's leak judgement); absent while it does not grow.",
            "gauge",
            &|g| g.time_to_full_s,
        );
    }

    /// The memory of each process (that reports it) per GPU, labelled with its PID and name.
    fn render_process_memory(&self, page: &mut String, labels: &[String]) {
        header(
            page,
            names::PROCESS_MEMORY_USED_BYTES,
            "GPU memory of one process: its allocator's reserved memory plus its CUDA context.",
            "gauge",
        );
        for (gpu, labels) in self.gpus.iter().zip(labels) {
            for process in &gpu.processes {
                let Some(used) = process.used_bytes else {
                    continue;
                };
                let mut with_process = labels.clone();
                push_label(&mut with_process, "pid", &process.pid.to_string());
                push_label(&mut with_process, "process_name", &process.name);
                line(
                    page,
                    names::PROCESS_MEMORY_USED_BYTES,
                    &with_process,
                    used as f64,
                );
            }
        }
    }

    /// The Xid errors counted per GPU, a line per Xid code.
    fn render_xid_counts(&self, page: &mut String, labels: &[String]) {
        header(
            page,
            names::XID_ERRORS_TOTAL,
            "Xid errors reported by the driver since the exporter started, per Xid code (every one is counted).",
            "counter",
        );
        for (gpu, labels) in self.gpus.iter().zip(labels) {
            for (code, count) in &gpu.xid_counts {
                let mut with_code = labels.clone();
                push_label(&mut with_code, "xid", &code.to_string());
                line(page, names::XID_ERRORS_TOTAL, &with_code, *count as f64);
            }
        }
    }

    /// The memory's health per GPU: ECC errors (since the driver loaded and over the GPU's
    /// lifetime) and remapped rows.
    fn render_health(&self, page: &mut String, labels: &[String]) {
        let sample = |gpu: &GpuState| gpu.sample;
        let health = |gpu: &GpuState| gpu.health.clone();
        self.per_gpu(
            page,
            labels,
            names::ECC_CORRECTED_VOLATILE_TOTAL,
            "Corrected (single-bit) ECC errors since the driver loaded.",
            "counter",
            &|g| sample(g)?.ecc_corrected_volatile.map(|v| v as f64),
        );
        self.per_gpu(
            page,
            labels,
            names::ECC_UNCORRECTED_VOLATILE_TOTAL,
            "Uncorrected (double-bit) ECC errors since the driver loaded.",
            "counter",
            &|g| sample(g)?.ecc_uncorrected_volatile.map(|v| v as f64),
        );
        self.per_gpu(
            page,
            labels,
            names::ECC_CORRECTED_AGGREGATE_TOTAL,
            "Corrected ECC errors over the GPU's lifetime.",
            "counter",
            &|g| health(g)?.ecc_corrected_aggregate.map(|v| v as f64),
        );
        self.per_gpu(
            page,
            labels,
            names::ECC_UNCORRECTED_AGGREGATE_TOTAL,
            "Uncorrected ECC errors over the GPU's lifetime.",
            "counter",
            &|g| health(g)?.ecc_uncorrected_aggregate.map(|v| v as f64),
        );
        self.per_gpu(
            page,
            labels,
            names::REMAPPED_ROWS_CORRECTABLE_TOTAL,
            "Memory rows remapped for correctable errors.",
            "counter",
            &|g| health(g)?.remapped_rows_correctable.map(|v| v as f64),
        );
        self.per_gpu(
            page,
            labels,
            names::REMAPPED_ROWS_UNCORRECTABLE_TOTAL,
            "Memory rows remapped for uncorrectable errors.",
            "counter",
            &|g| health(g)?.remapped_rows_uncorrectable.map(|v| v as f64),
        );
        self.per_gpu(
            page,
            labels,
            names::REMAPPED_ROWS_PENDING,
            "1 when a row remap waits for the next GPU reset.",
            "gauge",
            &|g| health(g)?.remapped_rows_pending.map(bool_value),
        );
        self.per_gpu(
            page,
            labels,
            names::REMAPPED_ROWS_FAILURE,
            "1 when row remapping failed (the GPU needs service).",
            "gauge",
            &|g| health(g)?.remapped_rows_failure.map(bool_value),
        );
    }

    /// The other readings per GPU: temperature, power, utilisation, whether it answers, and
    /// when it was last read.
    fn render_readings(&self, page: &mut String, labels: &[String]) {
        let sample = |gpu: &GpuState| gpu.sample;
        self.per_gpu(
            page,
            labels,
            names::TEMPERATURE_CELSIUS,
            "GPU temperature.",
            "gauge",
            &|g| sample(g)?.temperature_c.map(f64::from),
        );
        self.per_gpu(
            page,
            labels,
            names::POWER_WATTS,
            "GPU power draw.",
            "gauge",
            &|g| sample(g)?.power_mw.map(|mw| f64::from(mw) / 1000.0),
        );
        self.per_gpu(
            page,
            labels,
            names::UTILIZATION_RATIO,
            "Share of the last sample period a kernel ran (0 to 1).",
            "gauge",
            &|g| sample(g)?.gpu_util_pct.map(|p| f64::from(p) / 100.0),
        );
        self.per_gpu(
            page,
            labels,
            names::MEMORY_UTILIZATION_RATIO,
            "Share of the last sample period memory was read or written (0 to 1).",
            "gauge",
            &|g| sample(g)?.mem_util_pct.map(|p| f64::from(p) / 100.0),
        );
        header(
            page,
            names::CLOCK_EVENT_ACTIVE,
            "1 while the GPU holds its clocks down for this thermal or hardware reason (NVML clock-event reasons).",
            "gauge",
        );
        for (gpu, labels) in self.gpus.iter().zip(labels) {
            let Some(bits) = gpu.sample.as_ref().and_then(|s| s.throttle_reasons) else {
                continue;
            };
            for (bit, reason) in crate::diagnose::alerts::THROTTLE_ALERT_EVENTS {
                let mut with_reason = labels.clone();
                push_label(&mut with_reason, "clock_event", reason);
                line(
                    page,
                    names::CLOCK_EVENT_ACTIVE,
                    &with_reason,
                    bool_value(bits & bit != 0),
                );
            }
        }
        self.per_gpu(
            page,
            labels,
            names::UP,
            "1 while the GPU answers; 0 once it is lost or its memory cannot be read.",
            "gauge",
            &|g| {
                Some(bool_value(
                    !g.lost && g.sample.as_ref().is_some_and(|s| s.memory.is_some()),
                ))
            },
        );
        self.per_gpu(
            page,
            labels,
            names::SAMPLE_TIMESTAMP_SECONDS,
            "When the GPU's latest sample was read (Unix time).",
            "gauge",
            &|g| g.sample.as_ref().map(|s| s.t_ms as f64 / 1000.0),
        );
    }

    /// The exporter's own line: its version, the driver, the host, and whether the GPUs are
    /// simulated.
    fn render_exporter_info(&self, page: &mut String) {
        header(
            page,
            names::EXPORTER_INFO,
            "The exporter: its version, the driver, and whether the GPUs are simulated.",
            "gauge",
        );
        let mut info = String::new();
        push_label(&mut info, "version", env!("CARGO_PKG_VERSION"));
        push_label(&mut info, "driver_version", &self.meta.driver_version);
        push_label(&mut info, "Hostname", &self.meta.host);
        push_label(
            &mut info,
            "simulated",
            if self.simulated { "true" } else { "false" },
        );
        line(page, names::EXPORTER_INFO, &info, 1.0);
    }
}

fn bool_value(flag: bool) -> f64 {
    if flag { 1.0 } else { 0.0 }
}

fn header(page: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(page, "# HELP {name} {help}");
    let _ = writeln!(page, "# TYPE {name} {kind}");
}

fn line(page: &mut String, name: &str, labels: &str, value: f64) {
    let _ = writeln!(page, "{name}{{{labels}}} {value}");
}

/// Appends `key="value"` (comma-separated) with the value escaped as the text format requires:
/// backslash, double quote and line feed.
pub fn push_label(labels: &mut String, key: &str, value: &str) {
    if !labels.is_empty() {
        labels.push(',');
    }
    labels.push_str(key);
    labels.push_str("=\"");
    for c in value.chars() {
        match c {
            '\\' => labels.push_str("\\\\"),
            '"' => labels.push_str("\\\""),
            '\n' => labels.push_str("\\n"),
            c => labels.push(c),
        }
    }
    labels.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Event, MIB, MemoryReading, SourceKind};

    fn state() -> ExporterState {
        ExporterState::new(
            CaptureMeta {
                source: SourceKind::Live,
                host: "node-a".into(),
                driver_version: "580.159.04".into(),
                ..Default::default()
            },
            vec![DeviceFacts {
                index: 0,
                name: "NVIDIA H200".into(),
                uuid: "GPU-1".into(),
                pci_bus_id: "00000000:19:00.0".into(),
                ..Default::default()
            }],
        )
    }

    fn xid(code: u64) -> Event {
        Event {
            t_ms: 1,
            device_index: Some(0),
            kind: EventKind::Xid {
                code,
                mig_instance: None,
            },
        }
    }

    #[test]
    fn renders_memory_processes_and_every_xid_with_dcgm_labels() {
        let mut exporter = state();
        exporter.apply(&SampleBatch {
            devices: vec![DeviceSample {
                t_ms: 1_500,
                device_index: 0,
                memory: Some(MemoryReading {
                    used_bytes: 10 * MIB,
                    reserved_bytes: 616 * MIB,
                    free_bytes: 1000 * MIB,
                    total_bytes: 1626 * MIB,
                }),
                power_mw: Some(71_250),
                gpu_util_pct: Some(40),
                ..Default::default()
            }],
            processes: Some(vec![ProcessSample {
                t_ms: 1_500,
                device_index: 0,
                pid: 42,
                name: "python \"train\".py".into(),
                used_bytes: Some(8 * MIB),
                ..Default::default()
            }]),
            events: vec![xid(31), xid(31), xid(79)],
            ..Default::default()
        });
        let page = exporter.render();
        let gpu = r#"gpu="0",UUID="GPU-1",pci_bus_id="00000000:19:00.0",device="nvidia0",modelName="NVIDIA H200",Hostname="node-a""#;
        for expected in [
            format!("vramscope_gpu_memory_used_bytes{{{gpu}}} 10485760\n"),
            format!("vramscope_gpu_memory_reserved_bytes{{{gpu}}} 645922816\n"),
            format!("vramscope_gpu_memory_total_bytes{{{gpu}}} 1704984576\n"),
            format!(
                "vramscope_gpu_process_memory_used_bytes{{{gpu},pid=\"42\",process_name=\"python \\\"train\\\".py\"}} 8388608\n"
            ),
            format!("vramscope_gpu_xid_errors_total{{{gpu},xid=\"31\"}} 2\n"),
            format!("vramscope_gpu_xid_errors_total{{{gpu},xid=\"79\"}} 1\n"),
            format!("vramscope_gpu_power_watts{{{gpu}}} 71.25\n"),
            format!("vramscope_gpu_utilization_ratio{{{gpu}}} 0.4\n"),
            format!("vramscope_gpu_up{{{gpu}}} 1\n"),
            format!("vramscope_gpu_sample_timestamp_seconds{{{gpu}}} 1.5\n"),
            "# TYPE vramscope_gpu_xid_errors_total counter\n".to_owned(),
            "vramscope_exporter_info{version=\"".to_owned(),
            "simulated=\"false\"} 1\n".to_owned(),
        ] {
            assert!(page.contains(&expected), "missing {expected:?} in\n{page}");
        }
        assert!(
            !page.contains("temperature_celsius{"),
            "fields not read are left out, not shown as 0"
        );
    }

    #[test]
    fn a_lost_gpu_is_down_and_a_new_process_list_replaces_the_old() {
        let mut exporter = state();
        exporter.apply(&SampleBatch {
            devices: vec![DeviceSample {
                device_index: 0,
                memory: Some(MemoryReading::default()),
                ..Default::default()
            }],
            processes: Some(vec![ProcessSample {
                device_index: 0,
                pid: 7,
                used_bytes: Some(1),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert!(exporter.render().contains("pid=\"7\""));
        exporter.apply(&SampleBatch {
            processes: Some(Vec::new()),
            events: vec![Event {
                t_ms: 2,
                device_index: Some(0),
                kind: EventKind::DeviceLost {
                    detail: "GPU is lost".into(),
                },
            }],
            ..Default::default()
        });
        let page = exporter.render();
        assert!(!page.contains("pid=\"7\""), "the process exited");
        assert!(page.contains("vramscope_gpu_up{gpu=\"0\""));
        assert!(page.contains("\"} 0\n"), "the lost GPU is down:\n{page}");
    }
}
