//! `vramscope run [OPTIONS] -- COMMAND [ARGS…]`: runs the command as the command would run (its
//! output streams through, its input is passed on, Ctrl+C and SIGTERM reach its process group,
//! vramscope exits with its status, 128+N for a signal), records the evidence into a run folder
//! with no change to the job's code, diagnoses it when it fails, and with `--prove` re-runs it
//! under candidate fixes until one is proven. See `vramscope_gpu::run`.
//!
//! Exit codes: the job's; 127 when the command is not found, 126 when it cannot be executed,
//! 1 when the run folder cannot be made.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use vramscope_core::diagnose::finding::{Category, Diagnosis};
use vramscope_core::evidence::{self, Evidence, Unwatched};
use vramscope_core::model::format_bytes;
use vramscope_core::model::run::ProofRun;
use vramscope_core::report::{self, Report};
use vramscope_gpu::run::prove::{self, Candidate};
use vramscope_gpu::run::{
    Forwarder, HookOptions, RunOptions, RunOutcome, Stacks, forward_signals_to, write_manifest,
};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum StacksArg {
    /// Python frames of every allocation (the default).
    Python,
    /// Python and C++ frames (the costliest).
    All,
    /// Every allocation and free, no frames (the cheapest).
    None,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Where run folders go.
    #[arg(long, value_name = "DIR", default_value = "vramscope-runs")]
    pub out: PathBuf,
    /// The run's name (the folder's suffix); from the command by default.
    #[arg(long)]
    pub name: Option<String>,
    /// Stack frames recorded with each allocation.
    #[arg(long, value_enum, default_value = "python")]
    pub stacks: StacksArg,
    /// Events the allocator's trace ring buffer keeps.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub max_entries: u64,
    /// Also write a snapshot every N seconds.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub periodic: u32,
    /// Record no allocator history (timeline and log only).
    #[arg(long)]
    pub no_hook: bool,
    /// NVML sampling interval.
    #[arg(long, value_name = "MS", default_value_t = 250)]
    pub interval_ms: u32,
    /// Lines of the job's output kept in the run folder's log.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub log_lines: usize,
    /// When the job runs out of memory, re-run it under the candidate fixes and keep the one
    /// that works.
    #[arg(long)]
    pub prove: bool,
    /// With --prove: try every candidate instead of stopping at the first that works.
    #[arg(long, requires = "prove")]
    pub try_all: bool,
    /// With --prove: an environment variable's values to try, NAME=V1,V2 (repeatable).
    #[arg(long, value_name = "NAME=V1,V2", value_parser = prove::parse_vary, requires = "prove")]
    pub vary: Vec<(String, Vec<String>)>,
    /// With --prove: a command-line value to try, FLAG=V1,V2 (e.g. --batch-size=16,8; repeatable).
    #[arg(long, value_name = "FLAG=V1,V2", value_parser = prove::parse_vary, requires = "prove", allow_hyphen_values = true)]
    pub vary_arg: Vec<(String, Vec<String>)>,
    /// With --prove: the longest a re-run may take (default: twice the failed run's time).
    #[arg(long, value_name = "SECS")]
    pub budget: Option<u64>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

pub fn run(args: RunArgs) -> ExitCode {
    let forwarder = Forwarder::default();
    forward_signals_to(&forwarder);
    let options = RunOptions {
        command: args.command.clone(),
        runs_dir: args.out.clone(),
        name: args.name.clone(),
        hook: HookOptions {
            enabled: !args.no_hook,
            stacks: match args.stacks {
                StacksArg::Python => Stacks::Python,
                StacksArg::All => Stacks::All,
                StacksArg::None => Stacks::None,
            },
            max_entries: args.max_entries,
            periodic_s: args.periodic,
        },
        interval_ms: args.interval_ms,
        log_lines: args.log_lines,
        extra_env: Vec::new(),
        echo: true,
        budget: None,
    };
    let mut outcome = match vramscope_gpu::run::run(&options, &forwarder) {
        Ok(outcome) => outcome,
        Err(e) => {
            eprintln!("vramscope: error: {e}");
            return ExitCode::from(e.exit_status());
        }
    };
    let status = outcome.manifest.exit.status;
    eprintln!("vramscope: run folder: {}", outcome.folder.display());
    for note in &outcome.manifest.not_recorded {
        eprintln!("vramscope: not recorded: {note}");
    }
    if !outcome.manifest.exit.succeeded() && !forwarder.interrupted() {
        conclude_failure(&args, &options, &mut outcome, &forwarder);
    }
    ExitCode::from(u8::try_from(status).unwrap_or(1))
}

/// The evidence of a run folder, read through the evidence pipeline.
fn run_evidence(folder: &Path) -> Evidence {
    let mut evidence = Evidence::default();
    let files = evidence::run_folder_files(folder).unwrap_or_default();
    for (path, kind) in files {
        let name = path
            .strip_prefix(folder)
            .unwrap_or(&path)
            .display()
            .to_string();
        let opened = match kind {
            Some(kind) => evidence::open_path_as(&path, &name, kind, &Unwatched),
            None => evidence::open_path(&path, &name, &Unwatched),
        };
        match opened {
            Ok(opened) => evidence.add(&opened),
            Err(e) => eprintln!("vramscope: warning: {e}"),
        }
    }
    evidence
}

/// A failed job: diagnose it, prove a fix when asked, write the reports.
fn conclude_failure(
    args: &RunArgs,
    options: &RunOptions,
    outcome: &mut RunOutcome,
    forwarder: &Forwarder,
) {
    let evidence = run_evidence(&outcome.folder);
    let mut report = evidence.report("vramscope run", vramscope_core::model::now_unix_ms());
    let ran_out = prove::hook_records(&outcome.folder)
        .oom_at_allocation
        .is_some()
        || report
            .diagnosis
            .findings
            .iter()
            .any(|f| is_out_of_memory(f.category));
    if args.prove && ran_out {
        let candidates = prove::candidates(
            &evidence,
            &report.diagnosis,
            &args.command,
            &args.vary,
            &args.vary_arg,
        );
        let proof = prove_fix(args, options, outcome, forwarder, &candidates);
        let category = report
            .diagnosis
            .findings
            .first()
            .map_or(Category::Capacity, |f| f.category);
        if let Some(finding) = vramscope_core::diagnose::real_runs::finding(&proof, category) {
            report.diagnosis.findings.insert(0, finding);
        }
        outcome.manifest.proof = proof;
    } else if args.prove {
        eprintln!(
            "vramscope: --prove: the job did not run out of memory, so there is no fix to prove"
        );
    }
    print_short(&report.diagnosis);
    write_reports(&report, outcome);
}

fn is_out_of_memory(category: Category) -> bool {
    matches!(
        category,
        Category::OtherProcess
            | Category::MemoryCap
            | Category::Capacity
            | Category::Fragmentation
            | Category::Leak
    )
}

/// Re-runs the job under `candidates`, printing a row per re-run as it ends.
fn prove_fix(
    args: &RunArgs,
    options: &RunOptions,
    outcome: &RunOutcome,
    forwarder: &Forwarder,
    candidates: &[Candidate],
) -> Vec<ProofRun> {
    if candidates.is_empty() {
        eprintln!(
            "vramscope: --prove: no candidate to try (no allocator setting the replay did not refute; \
             declare changes with --vary or --vary-arg)"
        );
        return Vec::new();
    }
    eprintln!(
        "vramscope: --prove: re-running the job under {} candidate(s)",
        candidates.len()
    );
    eprintln!(
        "  {:<56} {:<10} {:>12} {:>8} {:>7}",
        "change", "outcome", "peak", "speed", "time"
    );
    let base = RunOptions {
        budget: args.budget.map(Duration::from_secs),
        ..options.clone()
    };
    prove::prove(
        outcome,
        candidates,
        &base,
        forwarder,
        args.try_all,
        &mut |run| {
            eprintln!(
                "  {:<56} {:<10} {:>12} {:>8} {:>6.0}s",
                run.change,
                run.outcome,
                run.peak_reserved_bytes.map_or("?".to_owned(), format_bytes),
                run.relative_speed
                    .map_or("?".to_owned(), |s| format!("×{s:.2}")),
                run.seconds
            );
        },
    )
}

/// The diagnosis in a few lines: each finding's title and its first recommendation.
fn print_short(diagnosis: &Diagnosis) {
    eprintln!("vramscope: diagnosis:");
    for (i, finding) in diagnosis.findings.iter().take(3).enumerate() {
        eprintln!(
            "  {}. [{}] {}",
            i + 1,
            finding.severity.as_str().to_uppercase(),
            finding.title
        );
        if let Some(r) = finding.recommendations.first() {
            let label = r
                .verification_label()
                .map(|l| format!(" ({l})"))
                .unwrap_or_default();
            eprintln!("     → {}{label}", r.title);
        }
    }
}

/// `report.html` and `report.json` in the run folder, and the manifest updated with them.
fn write_reports(report: &Report, outcome: &mut RunOutcome) {
    for name in ["report.html", "report.json"] {
        let path = outcome.folder.join(name);
        match report::write(report, &path) {
            Ok(()) => outcome.manifest.files.push(name.to_owned()),
            Err(e) => outcome
                .manifest
                .not_recorded
                .push(format!("{name} could not be written ({e})")),
        }
    }
    outcome.manifest.files.sort();
    outcome.manifest.files.dedup();
    if let Err(why) = write_manifest(&outcome.folder, &outcome.manifest) {
        eprintln!("vramscope: warning: {why}");
    }
    eprintln!(
        "vramscope: report: {}",
        outcome.folder.join("report.html").display()
    );
}
