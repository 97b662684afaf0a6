//! `vramscope run [OPTIONS] -- COMMAND [ARGS…]`: runs the command as the command would run (its
//! output streams through, its input is passed on, Ctrl+C and SIGTERM reach its process group,
//! vramscope exits with its status, 128+N for a signal), records the evidence into a run folder
//! with no change to the job's code, diagnoses it when it fails, and with `--prove` re-runs it
//! under candidate fixes until one is proven. The sequence is `vramscope_gpu::run::conclude`'s,
//! shared with the app's File › Run a command…; this file reads the arguments and prints.
//!
//! Exit codes: the job's; 127 when the command is not found, 126 when it cannot be executed,
//! 1 when the run folder cannot be made.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use vramscope_core::diagnose::finding::Diagnosis;
use vramscope_core::model::format_bytes;
use vramscope_core::model::run::ProofRun;
use vramscope_gpu::run::prove::{self, Candidate};
use vramscope_gpu::run::{
    Forwarder, HookOptions, ProveOptions, RunEvents, RunOptions, RunOutcome, Stacks,
    forward_signals_to, run_and_conclude,
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
    #[arg(long, value_name = "MS", default_value_t = vramscope_gpu::run::DEFAULT_INTERVAL_MS)]
    pub interval_ms: u32,
    /// Lines of the job's output kept in the run folder's log.
    #[arg(long, value_name = "N", default_value_t = vramscope_gpu::run::DEFAULT_LOG_LINES)]
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
        working_dir: None,
        output: None,
    };
    let prove = ProveOptions {
        enabled: args.prove,
        try_all: args.try_all,
        vary: args.vary,
        vary_arg: args.vary_arg,
        budget: args.budget.map(Duration::from_secs),
    };
    match run_and_conclude(&options, &prove, &forwarder, &mut Terminal) {
        Ok(outcome) => ExitCode::from(u8::try_from(outcome.manifest.exit.status).unwrap_or(1)),
        Err(e) => {
            eprintln!("vramscope: error: {e}");
            ExitCode::from(e.exit_status())
        }
    }
}

/// The run told on stderr (the job's own output has stdout and stderr as it writes them).
struct Terminal;

impl RunEvents for Terminal {
    fn job_ended(&mut self, _outcome: &RunOutcome) {}

    fn note(&mut self, text: &str) {
        eprintln!("vramscope: {text}");
    }

    fn proving(&mut self, candidates: &[Candidate]) {
        eprintln!(
            "vramscope: --prove: re-running the job under {} candidate(s)",
            candidates.len()
        );
        eprintln!(
            "  (speed against the original run: time per iteration, or allocations per second \
             where a run made fewer than two optimizer steps)"
        );
        eprintln!(
            "  {:<56} {:<10} {:>12} {:>16} {:>7}",
            "change", "outcome", "peak", "speed", "time"
        );
    }

    fn proof_result(&mut self, run: &ProofRun) {
        eprintln!(
            "  {:<56} {:<10} {:>12} {:>16} {:>6.0}s",
            run.change,
            run.outcome,
            run.peak_reserved_bytes.map_or("?".to_owned(), format_bytes),
            run.speed_text(),
            run.seconds
        );
        if let Some(why) = &run.ended_by {
            eprintln!("      ended by: {why}");
        }
    }

    /// The diagnosis in a few lines: each finding's title and its first recommendation.
    fn diagnosed(&mut self, diagnosis: &Diagnosis) {
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
}
