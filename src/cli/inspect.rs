//! `vramscope inspect`: what a capture holds, as text for people or JSON for scripts.
//!
//! The JSON layout is part of the product's interface (documented in `docs/capture-format.md`):
//! fields are only ever added, never renamed or removed.

use std::path::PathBuf;
use std::process::ExitCode;

use serde::Serialize;

use vramscope_core::model::{
    Capture, EventKind, Recovery, SourceKind, UnixMs, UtcDateTime, format_bytes,
};

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// Capture to describe: a .vramcap, or nvidia-smi CSV logs (a --query-compute-apps log given
    /// with the --query-gpu log of the same run is joined to it).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Print a stable JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: InspectArgs) -> ExitCode {
    let (name, capture) = match vramscope_core::formats::capture::read_one(&args.files) {
        Ok(one) => one,
        Err(err) => return super::fail(err),
    };
    let summary = CaptureSummary::of(&name, &capture);
    if args.json {
        match serde_json::to_string_pretty(&summary) {
            Ok(text) => println!("{text}"),
            Err(err) => return super::fail(format!("cannot encode the summary as JSON: {err}")),
        }
    } else {
        print!("{}", summary.to_text());
    }
    ExitCode::SUCCESS
}

/// Most events listed in the text output; JSON lists them all.
const TEXT_EVENT_LIMIT: usize = 20;

/// Everything `inspect` reports. Serialized as is for `--json`.
#[derive(Debug, Serialize)]
struct CaptureSummary {
    file: String,
    simulated: bool,
    source: &'static str,
    host: String,
    driver_version: String,
    /// "13.0", as `info --json` and `check --json` write it.
    cuda_driver_version: Option<String>,
    /// The driver's number (1000 × major + 10 × minor), as `check --json` also gives it.
    cuda_driver_version_raw: Option<u32>,
    writer: String,
    started_ms: UnixMs,
    interval_ms: u32,
    first_sample_ms: Option<UnixMs>,
    last_sample_ms: Option<UnixMs>,
    duration_ms: Option<i64>,
    sample_count: usize,
    devices: Vec<DeviceSummary>,
    processes: Vec<ProcessSummary>,
    events: Vec<EventSummary>,
    recovery: Option<Recovery>,
}

#[derive(Debug, Serialize)]
struct DeviceSummary {
    index: u32,
    name: String,
    uuid: String,
    pci_bus_id: String,
    memory_total_bytes: u64,
    simulated: bool,
    /// The GPU's machine in a fleet capture (Prometheus); "" for the capture's own host.
    host: String,
    /// Labels the GPU carried in Prometheus (`gpu`, `UUID`, `pod`, ...); empty for local GPUs.
    labels: std::collections::BTreeMap<String, String>,
    /// How findings, reports and the fleet view name the GPU (`node-a GPU 3` in a fleet):
    /// `DeviceFacts::label`, so that this listing names it the same way.
    label: String,
    sample_count: usize,
    peak_used_bytes: Option<u64>,
    peak_used_ms: Option<UnixMs>,
}

#[derive(Debug, Serialize)]
struct ProcessSummary {
    device_index: u32,
    pid: u32,
    name: String,
    kind: &'static str,
    mig_instance: Option<(u32, u32)>,
    first_seen_ms: Option<UnixMs>,
    last_seen_ms: Option<UnixMs>,
    peak_used_bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
struct EventSummary {
    t_ms: UnixMs,
    device_index: Option<u32>,
    kind: &'static str,
    label: String,
    detail: String,
}

impl CaptureSummary {
    fn of(file: &str, capture: &Capture) -> Self {
        let span = capture.time_span_ms();
        CaptureSummary {
            file: file.to_owned(),
            simulated: capture.is_simulated(),
            source: match capture.meta.source {
                SourceKind::Live => "live",
                SourceKind::Demo => "demo",
                SourceKind::Prometheus => "prometheus",
            },
            host: capture.meta.host.clone(),
            driver_version: capture.meta.driver_version.clone(),
            cuda_driver_version: capture
                .meta
                .cuda_driver_version
                .map(|v| format!("{}.{}", v / 1000, v % 1000 / 10)),
            cuda_driver_version_raw: capture.meta.cuda_driver_version,
            writer: capture.meta.writer.clone(),
            started_ms: capture.meta.started_ms,
            interval_ms: capture.meta.interval_ms,
            first_sample_ms: span.map(|(first, _)| first),
            last_sample_ms: span.map(|(_, last)| last),
            duration_ms: span.map(|(first, last)| last.saturating_sub(first)),
            sample_count: capture.sample_count(),
            devices: capture
                .devices
                .iter()
                .map(|device| {
                    let series = capture.series(device.index);
                    let peak = series.and_then(|s| s.peak_used());
                    DeviceSummary {
                        index: device.index,
                        name: device.name.clone(),
                        uuid: device.uuid.clone(),
                        pci_bus_id: device.pci_bus_id.clone(),
                        memory_total_bytes: device.memory_total_bytes,
                        simulated: device.simulated,
                        host: device.host.clone(),
                        labels: device.labels.clone(),
                        label: device.label(),
                        sample_count: series.map_or(0, |s| s.len()),
                        peak_used_bytes: peak.map(|(_, used)| used),
                        peak_used_ms: peak.map(|(t, _)| t),
                    }
                })
                .collect(),
            processes: capture
                .processes
                .iter()
                .map(|track| ProcessSummary {
                    device_index: track.device_index,
                    pid: track.pid,
                    name: track.name.clone(),
                    kind: track.kind.label(),
                    mig_instance: track.mig_instance,
                    first_seen_ms: track.first_seen_ms(),
                    last_seen_ms: track.last_seen_ms(),
                    peak_used_bytes: track.peak_used_bytes(),
                })
                .collect(),
            events: capture
                .events
                .iter()
                .map(|event| {
                    let (kind, detail) = describe_event(&event.kind);
                    EventSummary {
                        t_ms: event.t_ms,
                        device_index: event.device_index,
                        kind,
                        label: event.kind.short_label(),
                        detail,
                    }
                })
                .collect(),
            recovery: capture.recovery.clone(),
        }
    }

    fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let since_start = |t: UnixMs| format_offset(t.saturating_sub(self.started_ms));
        // Writing to a String cannot fail.
        let _ = (|| -> std::fmt::Result {
            writeln!(out, "{}", self.file)?;
            if self.simulated {
                writeln!(
                    out,
                    "  SIMULATED: recorded from the built-in demo machine, not real GPUs"
                )?;
            }
            writeln!(
                out,
                "  source       {} on {}",
                self.source,
                or_unknown(&self.host)
            )?;
            let cuda = self
                .cuda_driver_version
                .as_ref()
                .map(|v| format!(", CUDA {v}"))
                .unwrap_or_default();
            writeln!(
                out,
                "  driver       {}{cuda}",
                or_unknown(&self.driver_version)
            )?;
            writeln!(out, "  written by   {}", or_unknown(&self.writer))?;
            writeln!(out, "  started      {}", format_utc(self.started_ms))?;
            writeln!(out, "  interval     {} ms", self.interval_ms)?;
            match (self.first_sample_ms, self.last_sample_ms) {
                (Some(first), Some(last)) => writeln!(
                    out,
                    "  time span    {} to {} ({})",
                    since_start(first),
                    since_start(last),
                    format_offset(last.saturating_sub(first)).trim_start_matches('+')
                )?,
                _ => writeln!(out, "  time span    no samples")?,
            }
            writeln!(out, "  samples      {}", self.sample_count)?;
            match &self.recovery {
                None => writeln!(out, "  recovery     not needed (the file is complete)")?,
                Some(r) => writeln!(
                    out,
                    "  recovery     NEEDED: {} ({} chunks recovered, {} bytes discarded)",
                    r.problem, r.chunks_recovered, r.bytes_discarded
                )?,
            }
            writeln!(out, "\nDevices ({})", self.devices.len())?;
            for d in &self.devices {
                let peak = match (d.peak_used_bytes, d.peak_used_ms) {
                    (Some(used), Some(t)) => {
                        format!("peak used {} at {}", format_bytes(used), since_start(t))
                    }
                    _ => "no memory readings".to_owned(),
                };
                writeln!(
                    out,
                    "  GPU {}{}  {}  {} total  {}  ({} samples)",
                    d.index,
                    if d.host.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", d.label)
                    },
                    or_unknown(&d.name),
                    format_bytes(d.memory_total_bytes),
                    peak,
                    d.sample_count
                )?;
            }
            writeln!(out, "\nProcesses ({})", self.processes.len())?;
            for p in &self.processes {
                let mig = p
                    .mig_instance
                    .map(|(gi, ci)| format!("  MIG {gi}/{ci}"))
                    .unwrap_or_default();
                let seen = match (p.first_seen_ms, p.last_seen_ms) {
                    (Some(first), Some(last)) => {
                        format!("seen {} to {}", since_start(first), since_start(last))
                    }
                    _ => "never seen".to_owned(),
                };
                writeln!(
                    out,
                    "  GPU {}  pid {}  {}  {}{mig}  peak {}  {seen}",
                    p.device_index,
                    p.pid,
                    if p.name.is_empty() {
                        "(name not visible)"
                    } else {
                        &p.name
                    },
                    p.kind,
                    p.peak_used_bytes
                        .map_or_else(|| "unknown".to_owned(), format_bytes),
                )?;
            }
            writeln!(out, "\nEvents ({})", self.events.len())?;
            for e in self.events.iter().take(TEXT_EVENT_LIMIT) {
                let device = e
                    .device_index
                    .map_or_else(|| "machine".to_owned(), |i| format!("GPU {i}"));
                let detail = if e.detail.is_empty() {
                    String::new()
                } else {
                    format!("  {}", e.detail)
                };
                writeln!(
                    out,
                    "  {}  {device}  {}{detail}",
                    since_start(e.t_ms),
                    e.label
                )?;
            }
            if self.events.len() > TEXT_EVENT_LIMIT {
                writeln!(
                    out,
                    "  … and {} more (use --json for all)",
                    self.events.len() - TEXT_EVENT_LIMIT
                )?;
            }
            Ok(())
        })();
        out
    }
}

fn or_unknown(text: &str) -> &str {
    if text.is_empty() { "unknown" } else { text }
}

/// A stable machine name for each event kind, and the details its short label leaves out.
fn describe_event(kind: &EventKind) -> (&'static str, String) {
    match kind {
        EventKind::Xid { mig_instance, .. } => (
            "xid",
            mig_instance
                .map(|(gi, ci)| format!("MIG instance {gi}/{ci}"))
                .unwrap_or_default(),
        ),
        EventKind::Critical { data, .. } => ("critical", format!("data {data}")),
        EventKind::OutOfMemory {
            pid,
            requested_bytes,
            detail,
        } => {
            let mut parts = Vec::new();
            if let Some(pid) = pid {
                parts.push(format!("pid {pid}"));
            }
            if let Some(bytes) = requested_bytes {
                parts.push(format!("requested {}", format_bytes(*bytes)));
            }
            if !detail.is_empty() {
                parts.push(detail.clone());
            }
            ("out_of_memory", parts.join(", "))
        }
        EventKind::EccIncrease {
            corrected_delta,
            uncorrected_delta,
        } => (
            "ecc_increase",
            format!("+{corrected_delta} corrected, +{uncorrected_delta} uncorrected"),
        ),
        EventKind::DeviceLost { detail } => ("device_lost", detail.clone()),
        EventKind::DeviceReturned => ("device_returned", String::new()),
        EventKind::Annotation { .. } => ("annotation", String::new()),
    }
}

/// `+h:mm:ss.mmm` relative to the start of the recording (negative before it).
fn format_offset(offset_ms: i64) -> String {
    let sign = if offset_ms < 0 { "-" } else { "+" };
    let ms = offset_ms.unsigned_abs();
    let secs = ms / 1000;
    format!(
        "{sign}{}:{:02}:{:02}.{:03}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        ms % 1000
    )
}

/// `YYYY-MM-DD hh:mm:ss UTC` from Unix milliseconds (proleptic Gregorian calendar).
fn format_utc(t_ms: UnixMs) -> String {
    let utc = UtcDateTime::from_unix_ms(t_ms);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates_match_known_instants() {
        assert_eq!(format_utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(format_utc(951_782_400_000), "2000-02-29 00:00:00 UTC");
        assert_eq!(format_utc(1_764_490_261_000), "2025-11-30 08:11:01 UTC");
        assert_eq!(format_utc(-1000), "1969-12-31 23:59:59 UTC");
    }

    #[test]
    fn offsets_show_sign_and_milliseconds() {
        assert_eq!(format_offset(3_723_004), "+1:02:03.004");
        assert_eq!(format_offset(-250), "-0:00:00.250");
    }
}
