//! `vramscope info [--json] [--demo]`: one snapshot of the machine's GPUs — devices, driver and
//! CUDA versions, current memory (used / reserved / free / total), load, temperature, power,
//! health (ECC, row remapping, retired pages, persistence, BAR1, PCIe replays) and processes.
//!
//! Without a usable NVIDIA driver, `info` does not silently show the simulated machine (a script
//! asking "what GPUs does this host have?" must not get invented ones): it exits with code 1 and
//! says why NVML could not be opened and that `--demo` shows the simulated machine. With
//! `--demo` it describes the simulated machine and says so.
//!
//! `--json` prints one object with a stable shape, versioned by its `schema` field
//! (`vramscope.info/1`): fields are only ever added within a schema version. Byte counts are
//! integers in bytes, power in milliwatts, temperatures in °C; a value that could not be read is
//! `null` and explained in the device's `unavailable` list.

use std::fmt::Write as _;
use std::process::ExitCode;

use serde::Serialize;

use vramscope_core::model::now_unix_ms;
use vramscope_core::model::{
    DeviceFacts, DeviceSample, FieldState, FieldStatus, HealthSample, ProcessSample, format_bytes,
};
use vramscope_core::source::{Source, Tiers};
use vramscope_gpu::open_real_or_demo;

/// Value of the `schema` field of `info --json`.
pub const INFO_SCHEMA: &str = "vramscope.info/1";

#[derive(Debug, clap::Args)]
pub struct InfoArgs {
    /// Print one JSON object (schema "vramscope.info/1") instead of text.
    #[arg(long)]
    pub json: bool,
    /// Describe the built-in simulated machine instead of real GPUs.
    #[arg(long)]
    pub demo: bool,
}

pub fn run(args: InfoArgs) -> ExitCode {
    let (mut source, notice) = match open_real_or_demo(args.demo) {
        Ok(opened) => opened,
        Err(err) => {
            return super::fail(format_args!(
                "{err}; run `vramscope info --demo` to see the simulated machine"
            ));
        }
    };
    let report = collect(source.as_mut(), notice, now_unix_ms());
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(err) => {
                return super::fail(format_args!("could not encode the report as JSON: {err}"));
            }
        }
    } else {
        print!("{}", render_text(&report));
    }
    ExitCode::SUCCESS
}

/// The whole `info --json` object.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InfoReport {
    pub schema: &'static str,
    /// True when the machine is the built-in simulation, not real GPUs.
    pub simulated: bool,
    /// Why a simulated machine is shown, when it is.
    pub notice: Option<String>,
    pub host: String,
    pub driver_version: Option<String>,
    /// CUDA driver API version as `major.minor`, e.g. `13.0`.
    pub cuda_driver_version: Option<String>,
    /// When the snapshot was read, Unix milliseconds.
    pub sampled_at_ms: i64,
    pub devices: Vec<DeviceInfo>,
}

/// One GPU in `info --json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeviceInfo {
    pub index: u32,
    pub name: String,
    pub uuid: String,
    pub pci_bus_id: String,
    /// `major.minor`, e.g. `9.0`.
    pub compute_capability: Option<String>,
    pub simulated: bool,
    pub memory: Option<MemoryInfo>,
    pub gpu_util_pct: Option<u32>,
    pub mem_util_pct: Option<u32>,
    pub temperature_c: Option<u32>,
    pub power_mw: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    pub mem_clock_mhz: Option<u32>,
    /// Raw `nvmlClocksEventReason*` bits.
    pub throttle_reasons: Option<u64>,
    /// Names of the set throttle bits, e.g. `["sw_power_cap"]`.
    pub throttle_reason_names: Vec<&'static str>,
    pub health: HealthInfo,
    /// Fields that could not be read, and why.
    pub unavailable: Vec<UnavailableField>,
    pub processes: Vec<ProcessInfo>,
}

/// Device memory with NVML v2 semantics: `used` excludes the driver's `reserved` memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MemoryInfo {
    pub used_bytes: u64,
    pub reserved_bytes: u64,
    pub free_bytes: u64,
    pub total_bytes: u64,
}

/// Health counters of one GPU.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HealthInfo {
    pub ecc_enabled: Option<bool>,
    pub ecc_corrected_volatile: Option<u64>,
    pub ecc_uncorrected_volatile: Option<u64>,
    pub ecc_corrected_aggregate: Option<u64>,
    pub ecc_uncorrected_aggregate: Option<u64>,
    pub remapped_rows_correctable: Option<u64>,
    pub remapped_rows_uncorrectable: Option<u64>,
    pub remapped_rows_pending: Option<bool>,
    pub remapped_rows_failure: Option<bool>,
    pub retired_pages_sbe: Option<u64>,
    pub retired_pages_dbe: Option<u64>,
    pub retired_pages_pending: Option<bool>,
    pub persistence_mode: Option<bool>,
    pub bar1_used_bytes: Option<u64>,
    pub bar1_total_bytes: Option<u64>,
    pub pcie_replay_count: Option<u64>,
}

/// A field that could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnavailableField {
    pub field: String,
    /// `not_supported` or `failed`.
    pub state: &'static str,
    /// Why it failed (empty when not supported).
    pub reason: String,
}

/// One process on one GPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProcessInfo {
    pub pid: u32,
    /// Empty when the process is not visible from here (e.g. another PID namespace).
    pub name: String,
    /// `compute`, `graphics` or `compute+graphics`.
    pub kind: &'static str,
    /// The process's whole footprint (allocator reserve plus CUDA context); `null` when the
    /// driver does not report it.
    pub used_bytes: Option<u64>,
    /// `[gpu_instance, compute_instance]` when MIG is enabled.
    pub mig_instance: Option<[u32; 2]>,
}

/// Reads both tiers of `source` once and assembles the report.
pub fn collect(source: &mut dyn Source, notice: Option<String>, now_ms: i64) -> InfoReport {
    let description = source.describe();
    let batch = source.poll(
        now_ms,
        Tiers {
            fast: true,
            slow: true,
        },
    );
    let meta = &description.meta;
    let simulated = meta.source.is_simulated() || description.devices.iter().any(|d| d.simulated);
    let devices = description
        .devices
        .iter()
        .map(|facts| {
            let sample = batch.devices.iter().find(|s| s.device_index == facts.index);
            let health = batch.health.iter().find(|h| h.device_index == facts.index);
            let processes = batch.processes.as_deref().unwrap_or_default();
            device_info(facts, sample, health, &batch.field_changes, processes)
        })
        .collect();
    InfoReport {
        schema: INFO_SCHEMA,
        simulated,
        notice,
        host: meta.host.clone(),
        driver_version: Some(meta.driver_version.clone()).filter(|v| !v.is_empty()),
        cuda_driver_version: meta
            .cuda_driver_version
            .map(|v| format!("{}.{}", v / 1000, (v % 1000) / 10)),
        sampled_at_ms: now_ms,
        devices,
    }
}

fn device_info(
    facts: &DeviceFacts,
    sample: Option<&DeviceSample>,
    health: Option<&HealthSample>,
    field_changes: &[FieldStatus],
    processes: &[ProcessSample],
) -> DeviceInfo {
    let unavailable = field_changes
        .iter()
        .filter(|f| f.device_index == facts.index)
        .filter_map(|f| match &f.state {
            FieldState::Ok => None,
            FieldState::NotSupported => Some(UnavailableField {
                field: f.field.clone(),
                state: "not_supported",
                reason: String::new(),
            }),
            FieldState::Failed(reason) => Some(UnavailableField {
                field: f.field.clone(),
                state: "failed",
                reason: reason.clone(),
            }),
        })
        .collect();
    let mut processes: Vec<ProcessInfo> = processes
        .iter()
        .filter(|p| p.device_index == facts.index)
        .map(|p| ProcessInfo {
            pid: p.pid,
            name: p.name.clone(),
            kind: p.kind.label(),
            used_bytes: p.used_bytes,
            mig_instance: p.mig_instance.map(|(gi, ci)| [gi, ci]),
        })
        .collect();
    processes.sort_by_key(|p| (std::cmp::Reverse(p.used_bytes), p.pid));
    let throttle_reasons = sample.and_then(|s| s.throttle_reasons);
    DeviceInfo {
        index: facts.index,
        name: facts.name.clone(),
        uuid: facts.uuid.clone(),
        pci_bus_id: facts.pci_bus_id.clone(),
        compute_capability: facts
            .compute_capability
            .map(|(major, minor)| format!("{major}.{minor}")),
        simulated: facts.simulated,
        memory: sample.and_then(|s| s.memory).map(|m| MemoryInfo {
            used_bytes: m.used_bytes,
            reserved_bytes: m.reserved_bytes,
            free_bytes: m.free_bytes,
            total_bytes: m.total_bytes,
        }),
        gpu_util_pct: sample.and_then(|s| s.gpu_util_pct),
        mem_util_pct: sample.and_then(|s| s.mem_util_pct),
        temperature_c: sample.and_then(|s| s.temperature_c),
        power_mw: sample.and_then(|s| s.power_mw),
        sm_clock_mhz: sample.and_then(|s| s.sm_clock_mhz),
        mem_clock_mhz: sample.and_then(|s| s.mem_clock_mhz),
        throttle_reasons,
        throttle_reason_names: throttle_reasons
            .map(throttle_reason_names)
            .unwrap_or_default(),
        health: HealthInfo {
            ecc_enabled: facts.ecc_enabled,
            ecc_corrected_volatile: sample.and_then(|s| s.ecc_corrected_volatile),
            ecc_uncorrected_volatile: sample.and_then(|s| s.ecc_uncorrected_volatile),
            ecc_corrected_aggregate: health.and_then(|h| h.ecc_corrected_aggregate),
            ecc_uncorrected_aggregate: health.and_then(|h| h.ecc_uncorrected_aggregate),
            remapped_rows_correctable: health.and_then(|h| h.remapped_rows_correctable),
            remapped_rows_uncorrectable: health.and_then(|h| h.remapped_rows_uncorrectable),
            remapped_rows_pending: health.and_then(|h| h.remapped_rows_pending),
            remapped_rows_failure: health.and_then(|h| h.remapped_rows_failure),
            retired_pages_sbe: health.and_then(|h| h.retired_pages_sbe),
            retired_pages_dbe: health.and_then(|h| h.retired_pages_dbe),
            retired_pages_pending: health.and_then(|h| h.retired_pages_pending),
            persistence_mode: health
                .and_then(|h| h.persistence_mode)
                .or(facts.persistence_mode),
            bar1_used_bytes: health.and_then(|h| h.bar1_used_bytes),
            bar1_total_bytes: health
                .and_then(|h| h.bar1_total_bytes)
                .or(facts.bar1_total_bytes),
            pcie_replay_count: health.and_then(|h| h.pcie_replay_count),
        },
        unavailable,
        processes,
    }
}

/// Names of the set `nvmlClocksEventReason*` bits (nvml.h), in bit order.
pub fn throttle_reason_names(bits: u64) -> Vec<&'static str> {
    vramscope_core::diagnose::thresholds::throttle::ids(bits)
}

/// The human-readable form of the report.
pub fn render_text(report: &InfoReport) -> String {
    let mut out = String::new();
    let na = || "n/a".to_owned();
    // Writing to a String cannot fail; `let _` keeps the formatting code readable.
    let _ = writeln!(
        out,
        "host {}  driver {}  CUDA {}",
        if report.host.is_empty() {
            "?"
        } else {
            &report.host
        },
        report.driver_version.clone().unwrap_or_else(na),
        report.cuda_driver_version.clone().unwrap_or_else(na),
    );
    if report.simulated {
        let why = report.notice.as_deref().unwrap_or("simulated machine");
        let _ = writeln!(out, "SIMULATED: {why}");
    }
    for device in &report.devices {
        let _ = writeln!(out);
        let capability = device
            .compute_capability
            .as_deref()
            .map(|c| format!(", compute {c}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "GPU {}: {}  ({}, PCI {}{capability})",
            device.index, device.name, device.uuid, device.pci_bus_id
        );
        match device.memory {
            Some(m) => {
                let occupied = m.used_bytes.saturating_add(m.reserved_bytes);
                let percent = if m.total_bytes == 0 {
                    0.0
                } else {
                    100.0 * occupied as f64 / m.total_bytes as f64
                };
                let _ = writeln!(
                    out,
                    "  memory    used {}  reserved {}  free {}  total {}  ({percent:.1}% occupied)",
                    format_bytes(m.used_bytes),
                    format_bytes(m.reserved_bytes),
                    format_bytes(m.free_bytes),
                    format_bytes(m.total_bytes),
                );
            }
            None => {
                let _ = writeln!(out, "  memory    n/a");
            }
        }
        let pct = |v: Option<u32>| v.map_or_else(na, |v| format!("{v}%"));
        let throttle = match device.throttle_reasons {
            None => na(),
            Some(0) => "none".to_owned(),
            Some(bits) => format!("{} (0x{bits:x})", device.throttle_reason_names.join(", ")),
        };
        let _ = writeln!(
            out,
            "  load      GPU {}  memory bandwidth {}  temp {}  power {}  clocks SM {} / mem {}  throttle {throttle}",
            pct(device.gpu_util_pct),
            pct(device.mem_util_pct),
            device.temperature_c.map_or_else(na, |t| format!("{t} °C")),
            device
                .power_mw
                .map_or_else(na, |p| format!("{:.1} W", f64::from(p) / 1000.0)),
            device.sm_clock_mhz.map_or_else(na, |c| format!("{c} MHz")),
            device.mem_clock_mhz.map_or_else(na, |c| format!("{c} MHz")),
        );
        for (label, line) in health_lines(&device.health) {
            let _ = writeln!(out, "  {label:<9} {line}");
        }
        for field in &device.unavailable {
            let why = if field.reason.is_empty() {
                "not supported on this GPU"
            } else {
                &field.reason
            };
            let _ = writeln!(out, "  n/a       {}: {why}", field.field);
        }
        if device.processes.is_empty() {
            let _ = writeln!(out, "  processes none");
        } else {
            let _ = writeln!(
                out,
                "  processes {:>8}  {:<28} {:<17} {:>10}",
                "PID", "NAME", "KIND", "MEMORY"
            );
            for p in &device.processes {
                let name = if p.name.is_empty() {
                    "(not visible)"
                } else {
                    &p.name
                };
                let mig = p
                    .mig_instance
                    .map(|[gi, ci]| format!("  MIG {gi}/{ci}"))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "            {:>8}  {:<28} {:<17} {:>10}{mig}",
                    p.pid,
                    name,
                    p.kind,
                    p.used_bytes.map_or_else(na, format_bytes),
                );
            }
        }
    }
    if report.devices.iter().any(|d| !d.processes.is_empty()) {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Process memory is what the driver charges the process: its allocator's reserved \
             memory plus its CUDA context, not its live tensors."
        );
    }
    out
}

/// The health section as (label, text) lines: ECC, memory repair, and the rest.
fn health_lines(h: &HealthInfo) -> [(&'static str, String); 3] {
    let na = || "n/a".to_owned();
    let count = |v: Option<u64>| v.map_or_else(na, |v| v.to_string());
    let yes_no = |v: Option<bool>| v.map_or_else(na, |v| if v { "yes" } else { "no" }.to_owned());
    let ecc = match h.ecc_enabled {
        Some(false) => "off".to_owned(),
        enabled => format!(
            "{}: corrected {} volatile / {} aggregate, uncorrected {} volatile / {} aggregate",
            if enabled == Some(true) { "on" } else { "?" },
            count(h.ecc_corrected_volatile),
            count(h.ecc_corrected_aggregate),
            count(h.ecc_uncorrected_volatile),
            count(h.ecc_uncorrected_aggregate),
        ),
    };
    let repair = format!(
        "remapped rows {} correctable, {} uncorrectable, pending {}, failure {}; \
         retired pages {} SBE, {} DBE, pending {}",
        count(h.remapped_rows_correctable),
        count(h.remapped_rows_uncorrectable),
        yes_no(h.remapped_rows_pending),
        yes_no(h.remapped_rows_failure),
        count(h.retired_pages_sbe),
        count(h.retired_pages_dbe),
        yes_no(h.retired_pages_pending),
    );
    let bar1 = match (h.bar1_used_bytes, h.bar1_total_bytes) {
        (Some(used), Some(total)) => format!("{} / {}", format_bytes(used), format_bytes(total)),
        (None, Some(total)) => format!("? / {}", format_bytes(total)),
        _ => na(),
    };
    let other = format!(
        "persistence {}; BAR1 {bar1}; PCIe replays {}",
        h.persistence_mode
            .map_or_else(na, |on| if on { "on" } else { "off" }.to_owned()),
        count(h.pcie_replay_count),
    );
    [("ECC", ecc), ("repair", repair), ("other", other)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_core::model::{
        CaptureMeta, GIB, MIB, MemoryReading, ProcessKind, SampleBatch, SourceKind,
    };
    use vramscope_core::source::SourceDescription;

    /// A one-GPU machine with fixed readings, standing in for NVML.
    struct FixedSource;

    impl Source for FixedSource {
        fn describe(&self) -> SourceDescription {
            SourceDescription {
                meta: CaptureMeta {
                    source: SourceKind::Live,
                    host: "node-7".into(),
                    driver_version: "580.159.04".into(),
                    cuda_driver_version: Some(13000),
                    ..Default::default()
                },
                devices: vec![DeviceFacts {
                    index: 0,
                    name: "NVIDIA H200".into(),
                    uuid: "GPU-1234".into(),
                    pci_bus_id: "00000000:19:00.0".into(),
                    memory_total_bytes: 143_771 * MIB,
                    bar1_total_bytes: Some(256 * GIB),
                    persistence_mode: Some(true),
                    ecc_enabled: Some(true),
                    compute_capability: Some((9, 0)),
                    simulated: false,
                    ..Default::default()
                }],
            }
        }

        fn poll(&mut self, now_ms: i64, tiers: Tiers) -> SampleBatch {
            assert!(tiers.fast && tiers.slow, "info reads both tiers");
            SampleBatch {
                devices: vec![DeviceSample {
                    t_ms: now_ms,
                    device_index: 0,
                    memory: Some(MemoryReading {
                        used_bytes: 4 * GIB,
                        reserved_bytes: 615 * MIB,
                        free_bytes: 143_771 * MIB - 4 * GIB - 615 * MIB,
                        total_bytes: 143_771 * MIB,
                    }),
                    gpu_util_pct: Some(45),
                    mem_util_pct: Some(12),
                    temperature_c: Some(38),
                    power_mw: Some(121_500),
                    sm_clock_mhz: Some(1980),
                    mem_clock_mhz: Some(3201),
                    throttle_reasons: Some(0x5),
                    ecc_corrected_volatile: Some(0),
                    ecc_uncorrected_volatile: Some(0),
                }],
                processes: Some(vec![
                    ProcessSample {
                        t_ms: now_ms,
                        device_index: 0,
                        pid: 11,
                        name: String::new(),
                        used_bytes: Some(GIB),
                        kind: ProcessKind::Compute,
                        mig_instance: None,
                    },
                    ProcessSample {
                        t_ms: now_ms,
                        device_index: 0,
                        pid: 4242,
                        name: "python3".into(),
                        used_bytes: Some(3 * GIB),
                        kind: ProcessKind::ComputeAndGraphics,
                        mig_instance: Some((1, 0)),
                    },
                ]),
                health: vec![HealthSample {
                    t_ms: now_ms,
                    device_index: 0,
                    remapped_rows_correctable: Some(0),
                    remapped_rows_uncorrectable: Some(0),
                    remapped_rows_pending: Some(false),
                    remapped_rows_failure: Some(false),
                    bar1_used_bytes: Some(2 * MIB),
                    bar1_total_bytes: Some(256 * GIB),
                    pcie_replay_count: Some(0),
                    persistence_mode: Some(true),
                    ..Default::default()
                }],
                events: Vec::new(),
                field_changes: vec![FieldStatus {
                    device_index: 0,
                    field: "retired_pages".into(),
                    state: FieldState::NotSupported,
                }],
            }
        }
    }

    #[test]
    fn collects_every_section_from_one_poll() {
        let report = collect(&mut FixedSource, None, 1_000);
        assert!(!report.simulated);
        assert_eq!(report.cuda_driver_version.as_deref(), Some("13.0"));
        assert_eq!(report.driver_version.as_deref(), Some("580.159.04"));
        let gpu = &report.devices[0];
        assert_eq!(gpu.compute_capability.as_deref(), Some("9.0"));
        assert_eq!(gpu.throttle_reason_names, ["gpu_idle", "sw_power_cap"]);
        assert_eq!(gpu.memory.map(|m| m.reserved_bytes), Some(615 * MIB));
        let pids: Vec<u32> = gpu.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [4242, 11], "largest first");
        assert_eq!(gpu.processes[0].mig_instance, Some([1, 0]));
        assert_eq!(gpu.unavailable[0].state, "not_supported");
        assert_eq!(gpu.health.retired_pages_sbe, None);
        assert_eq!(gpu.health.remapped_rows_pending, Some(false));
    }

    #[test]
    fn json_shape_is_stable() {
        let report = collect(&mut FixedSource, None, 1_000);
        let json = serde_json::to_value(&report).expect("report serializes");
        let keys = |v: &serde_json::Value| -> Vec<String> {
            v.as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default()
        };
        assert_eq!(json["schema"], "vramscope.info/1");
        assert_eq!(
            keys(&json),
            [
                "cuda_driver_version",
                "devices",
                "driver_version",
                "host",
                "notice",
                "sampled_at_ms",
                "schema",
                "simulated"
            ]
        );
        let device = &json["devices"][0];
        assert_eq!(device["memory"]["used_bytes"], 4 * GIB);
        assert_eq!(device["power_mw"], 121_500);
        assert_eq!(device["processes"][0]["kind"], "compute+graphics");
        assert_eq!(
            device["processes"][0]["mig_instance"],
            serde_json::json!([1, 0])
        );
        assert_eq!(
            device["health"]["retired_pages_pending"],
            serde_json::Value::Null
        );
        assert_eq!(device["unavailable"][0]["field"], "retired_pages");
    }

    #[test]
    fn text_shows_memory_health_and_processes() {
        let text = render_text(&collect(&mut FixedSource, None, 1_000));
        assert!(
            text.starts_with("host node-7  driver 580.159.04  CUDA 13.0\n"),
            "{text}"
        );
        assert!(!text.contains("SIMULATED"));
        assert!(
            text.contains("GPU 0: NVIDIA H200  (GPU-1234, PCI 00000000:19:00.0, compute 9.0)"),
            "{text}"
        );
        assert!(text.contains("used 4.00 GiB  reserved 615 MiB"), "{text}");
        assert!(text.contains("power 121.5 W"), "{text}");
        assert!(
            text.contains("throttle gpu_idle, sw_power_cap (0x5)"),
            "{text}"
        );
        assert!(
            text.contains("  ECC       on: corrected 0 volatile"),
            "{text}"
        );
        assert!(
            text.contains("  repair    remapped rows 0 correctable"),
            "{text}"
        );
        assert!(text.contains("retired pages n/a SBE, n/a DBE"), "{text}");
        assert!(
            text.contains("  other     persistence on; BAR1 2.00 MiB / 256 GiB; PCIe replays 0"),
            "{text}"
        );
        assert!(text.contains("not its live tensors"), "{text}");
        assert!(
            text.contains("n/a       retired_pages: not supported on this GPU"),
            "{text}"
        );
        assert!(text.contains("(not visible)"), "{text}");
        assert!(text.contains("python3"), "{text}");
        assert!(text.contains("MIG 1/0"), "{text}");
    }

    #[test]
    fn throttle_bits_are_named() {
        assert!(throttle_reason_names(0).is_empty());
        assert_eq!(
            throttle_reason_names(0x48),
            ["hw_slowdown", "hw_thermal_slowdown"]
        );
        assert_eq!(
            throttle_reason_names(0x1000),
            Vec::<&str>::new(),
            "unknown bits have no name"
        );
    }
}
