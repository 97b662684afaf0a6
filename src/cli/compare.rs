//! `vramscope compare A B [C …]`: two or more PyTorch snapshots, captures or run folders side by
//! side. Snapshots: at each one's chosen moment (`--at`, default its peak), totals per pool and
//! stream and per category, call sites ranked by the change in live bytes, blocks in one and not
//! the other, fragmentation; snapshots of one run in time order also name the call sites that
//! grow from one to the next (`--growth`); one snapshot per rank gives a rank table (`--ranks`,
//! or when every file name carries a rank). Captures: per GPU and per process, peak, floor,
//! growth rate and time above the threshold, side by side.
//!
//! Exit codes: 0 when the comparison ran, 1 when fewer than two files could be read (each
//! unreadable file is named; the rest still compare).

use std::path::PathBuf;
use std::process::ExitCode;

use vramscope_core::analysis::compare::{Moment, rank_from_name};
use vramscope_core::evidence;
use vramscope_core::report::compare::{
    CompareKind, CompareReport, CompareRequest, build, render_text,
};

#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Two or more PyTorch snapshots (.pickle, .json), captures (.vramcap, nvidia-smi CSV) or
    /// folders holding snapshots (a run folder); told apart by content.
    #[arg(value_name = "FILE", num_args = 2.., required = true)]
    pub files: Vec<PathBuf>,
    /// The moment of each snapshot to compare: peak (the most allocated), oom (right before the
    /// last out-of-memory error), end, or an event number.
    #[arg(long, value_name = "MOMENT", default_value = "peak", value_parser = Moment::parse)]
    pub at: Moment,
    /// The snapshots are of one process in time order: name the call sites that grow from each
    /// to the next, with the bytes per step.
    #[arg(long, conflicts_with = "ranks")]
    pub growth: bool,
    /// The snapshots are one per rank of a job: a rank table against the median rank.
    #[arg(long)]
    pub ranks: bool,
    /// Print the comparison as JSON (schema vramscope.compare/1, docs/report-schema.md).
    #[arg(long)]
    pub json: bool,
    /// Also write the comparison as a report: OUT.html, OUT.md or OUT.json.
    #[arg(long, value_name = "OUT")]
    pub report: Option<PathBuf>,
    /// Threshold for "time above" in capture comparisons, in % of each GPU's memory.
    #[arg(long, value_name = "PERCENT", default_value_t = 90.0,
          value_parser = parse_percent)]
    pub threshold: f64,
}

pub fn run(args: CompareArgs) -> ExitCode {
    if let Some(path) = &args.report
        && vramscope_core::report::ReportFormat::from_path(path).is_none()
    {
        return super::fail(format!(
            "cannot tell the report format of {}: use a name ending in .html, .md or .json",
            path.display()
        ));
    }
    let evidence::ComparisonInputs {
        mut snapshots,
        captures,
        unreadable,
    } = evidence::open_for_comparison(&args.files);
    for message in &unreadable {
        eprintln!("vramscope: error: {message}");
    }
    if snapshots.len() + captures.len() < 2 {
        return super::fail("compare needs at least two readable snapshots or captures");
    }
    let kind = if args.ranks
        || (!args.growth
            && snapshots.len() > 2
            && snapshots.iter().all(|s| rank_from_name(&s.name).is_some()))
    {
        CompareKind::Ranks
    } else if args.growth || snapshots.len() > 2 {
        CompareKind::Growth
    } else {
        CompareKind::Pair
    };
    // Files without a rank in their name count by their position.
    for (position, snapshot) in snapshots.iter_mut().enumerate() {
        if snapshot.rank == u32::MAX {
            snapshot.rank = position as u32;
        }
    }
    let report: CompareReport = build(CompareRequest {
        snapshots,
        captures,
        moment: args.at,
        kind,
        threshold_fraction: args.threshold / 100.0,
        unreadable,
        generated_at_ms: vramscope_core::model::now_unix_ms(),
    });
    if args.json {
        println!("{}", vramscope_core::report::compare::render_json(&report));
    } else {
        print!("{}", render_text(&report));
    }
    if let Some(path) = &args.report {
        if let Err(e) = vramscope_core::report::compare::write(&report, path) {
            return super::fail(e);
        }
        eprintln!("vramscope: comparison written to {}", path.display());
    }
    ExitCode::SUCCESS
}

/// A threshold in percent, 1 to 100.
fn parse_percent(text: &str) -> Result<f64, String> {
    match text.trim().trim_end_matches('%').parse::<f64>() {
        Ok(p) if (1.0..=100.0).contains(&p) => Ok(p),
        _ => Err(format!("'{text}' is not a threshold from 1 to 100 (%)")),
    }
}
