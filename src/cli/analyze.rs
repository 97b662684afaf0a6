//! `vramscope analyze SNAPSHOT… [--json]`: what a PyTorch allocator snapshot holds, per device
//! and pool, how fragmented it is, and why each recorded OOM happened — for scripts and CI.
//! Numbers are exact bytes in JSON (the totals match `torch.cuda.memory_stats()`); the text form
//! rounds them for reading.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use serde::Serialize;

use vramscope_core::analysis::fragmentation::{self, FragmentationMetrics};
use vramscope_core::analysis::oom::OomExplanation;
use vramscope_core::analysis::timetravel::TimeTravel;
use vramscope_core::analysis::totals::{DeviceTotals, PoolTotals, device_totals};
use vramscope_core::diagnose::oom::{JudgedOom, judged_ooms};
use vramscope_core::evidence::{Unwatched, read_snapshot};
use vramscope_core::model::allocator::{
    AllocatorSnapshot, SnapshotContainer, SnapshotVintage, TraceAction,
};
use vramscope_core::model::format_bytes;

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
    /// Format generation (`docs/sources.md` § "Format vintages").
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
    /// Fragmentation of the final state, for the whole device.
    pub fragmentation: FragmentationSummary,
    /// The same per pool (small/large and private pool id).
    pub pools: Vec<PoolFragmentation>,
    /// One explanation per `oom` event of the trace.
    pub ooms: Vec<OomSummary>,
}

/// Where reserved memory goes (see `analysis::fragmentation`).
#[derive(Debug, Serialize)]
pub struct FragmentationSummary {
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    pub requested_bytes: u64,
    /// Internal free memory: lost to rounding inside allocated blocks.
    pub rounding_waste_bytes: u64,
    pub pending_free_bytes: u64,
    /// External free memory: cached free blocks.
    pub free_bytes: u64,
    pub largest_free_bytes: u64,
    /// Free bytes in partly used segments (cannot be returned to CUDA).
    pub stranded_bytes: u64,
    /// Free bytes in entirely free segments (what `empty_cache()` returns).
    pub releasable_bytes: u64,
    /// `1 - largest free block / free bytes`: the share of free memory outside the largest
    /// free block.
    pub fragmentation_ratio: f64,
    /// The ratio for the text report, naming the free bytes it describes (not in the JSON).
    #[serde(skip)]
    pub fragmentation_ratio_text: String,
    /// What dominates, in one sentence.
    pub summary: String,
}

impl FragmentationSummary {
    fn new(metrics: &FragmentationMetrics) -> FragmentationSummary {
        FragmentationSummary {
            reserved_bytes: metrics.reserved_bytes,
            allocated_bytes: metrics.allocated_bytes,
            requested_bytes: metrics.requested_bytes,
            rounding_waste_bytes: metrics.rounding_waste_bytes,
            pending_free_bytes: metrics.pending_free_bytes,
            free_bytes: metrics.free_bytes,
            largest_free_bytes: metrics.largest_free_bytes,
            stranded_bytes: metrics.stranded_bytes,
            releasable_bytes: metrics.releasable_bytes,
            fragmentation_ratio: metrics.fragmentation_ratio(),
            fragmentation_ratio_text: metrics.fragmentation_ratio_text(),
            summary: vramscope_core::diagnose::fragmentation::summarize(metrics),
        }
    }
}

/// Fragmentation of one pool.
#[derive(Debug, Serialize)]
pub struct PoolFragmentation {
    /// "small" or "large".
    pub pool: &'static str,
    /// `segment_pool_id`; `[0, 0]` is the default pool.
    pub pool_id: [i64; 2],
    pub fragmentation: FragmentationSummary,
}

/// One `oom` event, explained (see `analysis::oom`).
#[derive(Debug, Serialize)]
pub struct OomSummary {
    pub event_index: usize,
    pub time_us: Option<i64>,
    pub stream: u64,
    pub rounded_request_bytes: u64,
    /// The segment cudaMalloc was asked for ("Tried to allocate …").
    pub segment_request_bytes: u64,
    pub pool: &'static str,
    pub device_free_bytes: Option<u64>,
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    /// Cached free bytes usable for this request (same pool and stream), and the largest block.
    pub usable_free_bytes: u64,
    pub usable_largest_free_bytes: u64,
    pub releasable_bytes: u64,
    /// The diagnosis's category for this failure, the same `vramscope diagnose` gives the
    /// snapshot: "fragmentation", "memory-cap", "capacity", "other-process" or "leak".
    pub verdict: &'static str,
    /// The verdict's name for the text report (the JSON has `verdict`).
    #[serde(skip)]
    pub verdict_heading: &'static str,
    /// The verdict in plain words: the diagnosis's title for it.
    pub verdict_text: String,
    /// What the free blocks and the device held, without a verdict.
    pub facts_text: String,
    /// Set when the reconstructed state contradicts the allocator (a free block that should
    /// have fit): the verdict then rests on the totals.
    pub reconstruction_warning: Option<String>,
}

impl OomSummary {
    fn new(oom: &OomExplanation, judged: &JudgedOom) -> OomSummary {
        OomSummary {
            event_index: oom.event_index,
            time_us: oom.time_us,
            stream: oom.stream,
            rounded_request_bytes: oom.rounded_request_bytes,
            segment_request_bytes: oom.segment_request_bytes,
            pool: oom.pool.as_str(),
            device_free_bytes: oom.device_free_bytes,
            allocated_bytes: oom.allocated_bytes,
            reserved_bytes: oom.reserved_bytes,
            usable_free_bytes: oom.usable_free_bytes,
            usable_largest_free_bytes: oom.usable_largest_free_bytes,
            releasable_bytes: oom.releasable_bytes,
            verdict: judged.category.as_str(),
            verdict_heading: judged.heading,
            verdict_text: judged.title.clone(),
            facts_text: oom.facts_text(),
            reconstruction_warning: judged.reconstruction_warning.clone(),
        }
    }
}

impl SnapshotReport {
    /// Summarizes a snapshot read from `path`.
    pub fn new(path: &Path, snapshot: &Arc<AllocatorSnapshot>) -> SnapshotReport {
        let totals = device_totals(snapshot);
        let expandable_segments = snapshot
            .settings
            .as_ref()
            .and_then(|s| s.expandable_segments);
        let devices = snapshot
            .devices
            .iter()
            .zip(totals)
            .map(|(device, totals)| {
                let trace = device.trace.and_then(|t| snapshot.traces.get(t));
                let travel = TimeTravel::new(Arc::clone(snapshot), device.device);
                let report = fragmentation::analyze(&travel.state_at(travel.len()));
                DeviceReport {
                    device: device.device,
                    totals,
                    trace_event_count: trace.map_or(0, |t| t.len()),
                    oom_event_count: trace.map_or(0, |t| {
                        t.actions.iter().filter(|a| **a == TraceAction::Oom).count()
                    }),
                    fragmentation: FragmentationSummary::new(&report.device),
                    pools: report
                        .pools
                        .iter()
                        .map(|(key, metrics)| PoolFragmentation {
                            pool: key.pool.as_str(),
                            pool_id: [key.pool_id.0, key.pool_id.1],
                            fragmentation: FragmentationSummary::new(metrics),
                        })
                        .collect(),
                    ooms: judged_ooms(&travel, expandable_segments)
                        .iter()
                        .map(|(e, judged)| OomSummary::new(e, judged))
                        .collect(),
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
            let f = &device.fragmentation;
            out += &format!(
                "    fragmentation: {} free in cached blocks, largest {}, {} stranded in partly \
                 used segments, {} releasable, {} lost to rounding; fragmentation ratio (share of \
                 free memory outside the largest free block): {}\n",
                format_bytes(f.free_bytes),
                format_bytes(f.largest_free_bytes),
                format_bytes(f.stranded_bytes),
                format_bytes(f.releasable_bytes),
                format_bytes(f.rounding_waste_bytes),
                f.fragmentation_ratio_text
            );
            out += &format!("    {}\n", f.summary);
            for oom in &device.ooms {
                out += &format!(
                    "    OOM at event {}: {} requested ({} pool, stream {:#x}). {}: {}. {}\n",
                    oom.event_index,
                    format_bytes(oom.rounded_request_bytes),
                    oom.pool,
                    oom.stream,
                    oom.verdict_heading,
                    oom.verdict_text,
                    oom.facts_text
                );
                if let Some(warning) = &oom.reconstruction_warning {
                    out += &format!("      warning: {warning}\n");
                }
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
        // Read through the evidence pipeline's reader: the same errors as everywhere else.
        match read_snapshot(path, &Unwatched) {
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
