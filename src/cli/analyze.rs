//! `vramscope analyze SNAPSHOT… [--json]`: what a PyTorch allocator snapshot holds, per device
//! and pool, for scripts and CI. Numbers are exact bytes in JSON and match
//! `torch.cuda.memory_stats()`; the text form rounds them for reading.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde::Serialize;

use crate::analysis::totals::{DeviceTotals, PoolTotals, device_totals};
use crate::formats::pytorch::read_file;
use crate::model::allocator::{AllocatorSnapshot, SnapshotContainer, SnapshotVintage, TraceAction};
use crate::model::format_bytes;

#[derive(Debug, clap::Args)]
pub struct AnalyzeArgs {
    /// PyTorch allocator snapshots (`torch.cuda.memory._dump_snapshot()` pickles or JSON).
    #[arg(required = true)]
    pub snapshots: Vec<PathBuf>,
    /// Print one JSON document (an array with one entry per snapshot) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `analyze` reports about one snapshot.
#[derive(Debug, Serialize)]
pub struct SnapshotReport {
    pub file: String,
    /// "pickle protocol N" or "json".
    pub format: String,
    /// Format generation (reference pytorch-snapshots.md §1.8).
    pub vintage: String,
    pub segment_count: usize,
    pub block_count: usize,
    pub trace_event_count: usize,
    pub distinct_stack_count: usize,
    /// `PYTORCH_CUDA_ALLOC_CONF` at snapshot time, when recorded.
    pub alloc_conf: Option<String>,
    pub expandable_segments: Option<bool>,
    pub devices: Vec<DeviceReport>,
    pub warnings: Vec<String>,
}

/// One device of a [`SnapshotReport`].
#[derive(Debug, Serialize)]
pub struct DeviceReport {
    pub device: u32,
    pub totals: DeviceTotals,
    pub trace_event_count: usize,
    pub oom_event_count: usize,
}

impl SnapshotReport {
    /// Summarizes a snapshot read from `path`.
    pub fn new(path: &Path, snapshot: &AllocatorSnapshot) -> SnapshotReport {
        let totals = device_totals(snapshot);
        let devices = snapshot
            .devices
            .iter()
            .zip(totals)
            .map(|(device, totals)| {
                let trace = device.trace.and_then(|t| snapshot.traces.get(t));
                DeviceReport {
                    device: device.device,
                    totals,
                    trace_event_count: trace.map_or(0, |t| t.len()),
                    oom_event_count: trace.map_or(0, |t| {
                        t.actions.iter().filter(|a| **a == TraceAction::Oom).count()
                    }),
                }
            })
            .collect();
        SnapshotReport {
            file: path.display().to_string(),
            format: match snapshot.container {
                Some(SnapshotContainer::Pickle { protocol }) => {
                    format!("pickle protocol {protocol}")
                }
                Some(SnapshotContainer::Json) => "json".to_owned(),
                None => "unknown".to_owned(),
            },
            vintage: vintage_name(snapshot.vintage).to_owned(),
            segment_count: snapshot.segments.len(),
            block_count: snapshot.blocks.len(),
            trace_event_count: snapshot.event_count(),
            distinct_stack_count: snapshot.frames.stack_count(),
            alloc_conf: snapshot
                .settings
                .as_ref()
                .and_then(|s| s.alloc_conf.clone()),
            expandable_segments: snapshot
                .settings
                .as_ref()
                .and_then(|s| s.expandable_segments),
            devices,
            warnings: snapshot.warnings.clone(),
        }
    }

    /// The report as text for a terminal.
    pub fn to_text(&self) -> String {
        let mut out = format!("{}: {}, {}\n", self.file, self.format, self.vintage);
        out += &format!(
            "  {} segments, {} blocks, {} trace events, {} distinct stacks\n",
            self.segment_count, self.block_count, self.trace_event_count, self.distinct_stack_count
        );
        if let Some(conf) = self.alloc_conf.as_deref().filter(|c| !c.is_empty()) {
            out += &format!("  PYTORCH_CUDA_ALLOC_CONF={conf}\n");
        }
        for device in &self.devices {
            out += &format!(
                "  device {}: {} trace events, {} OOM events\n",
                device.device, device.trace_event_count, device.oom_event_count
            );
            out += &format!(
                "    {:<12}{:>11}{:>11}{:>11}{:>11}{:>16}{:>10}{:>13}\n",
                "pool",
                "reserved",
                "allocated",
                "active",
                "requested",
                "non-releasable",
                "segments",
                "allocations"
            );
            for (name, pool) in [
                ("small", &device.totals.small_pool),
                ("large", &device.totals.large_pool),
                ("all", &device.totals.all),
            ] {
                out += &pool_row(name, pool);
            }
            let ranges = device.totals.all.expandable_range_count;
            if ranges > 0 {
                out += &format!(
                    "    expandable segments: {ranges} mapped ranges (not in PyTorch's segment count)\n"
                );
            }
        }
        for warning in &self.warnings {
            out += &format!("  warning: {warning}\n");
        }
        out
    }
}

fn pool_row(name: &str, pool: &PoolTotals) -> String {
    format!(
        "    {:<12}{:>11}{:>11}{:>11}{:>11}{:>16}{:>10}{:>13}\n",
        name,
        format_bytes(pool.reserved_bytes),
        format_bytes(pool.allocated_bytes),
        format_bytes(pool.active_bytes),
        format_bytes(pool.requested_bytes),
        format_bytes(pool.inactive_split_bytes),
        pool.segment_count,
        pool.allocation_count
    )
}

fn vintage_name(vintage: Option<SnapshotVintage>) -> &'static str {
    match vintage {
        Some(SnapshotVintage::BareSegmentList) => "bare segment list (torch.cuda.memory_snapshot)",
        Some(SnapshotVintage::BlockHistory) => "PyTorch 2.0-era format (block history)",
        Some(SnapshotVintage::BlockFrames) => "PyTorch 2.1+ format (block frames)",
        Some(SnapshotVintage::TimedEvents) => "late-2023 format (timed events)",
        Some(SnapshotVintage::AllocatorSettings) => "2024+ format (with allocator settings)",
        None => "unknown format",
    }
}

/// Runs the command: exit code 1 if any snapshot could not be read (the others are still
/// reported).
pub fn run(args: AnalyzeArgs) -> ExitCode {
    let mut reports = Vec::new();
    let mut failed = false;
    for path in &args.snapshots {
        match read_file(path, &|_| true) {
            Ok(snapshot) => reports.push(SnapshotReport::new(path, &snapshot)),
            Err(error) => {
                eprintln!("vramscope: error: {error}");
                failed = true;
            }
        }
    }
    if args.json {
        match serde_json::to_string_pretty(&reports) {
            Ok(json) => println!("{json}"),
            Err(error) => return super::fail(format!("analyze: cannot write JSON: {error}")),
        }
    } else {
        for report in &reports {
            print!("{}", report.to_text());
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
