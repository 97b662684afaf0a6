//! Command line: `vramscope [FILES…] [--demo]` starts the GUI; subcommands run headless.
//!
//! Exit codes: 0 success, 1 the command failed (bad file, no GPU, ...), 2 usage error (clap),
//! 3 a check ran and found a problem (`vramscope check`), 130 interrupted before anything useful
//! was done.

mod alerts;
mod analyze;
mod check;
mod compare;
mod diagnose;
mod export;
mod exporter;
mod gui;
mod info;
mod inspect;
mod prometheus;
mod pull;
mod record;
mod run;
mod whatif;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Parser, Subcommand};

/// vramscope: GPU-memory profiler and doctor.
#[derive(Debug, Parser)]
#[command(name = "vramscope", version, about, long_about = None)]
pub struct Cli {
    /// Files to open in the GUI (.vramcap captures, nvidia-smi CSV logs, PyTorch snapshots, logs).
    pub files: Vec<PathBuf>,
    /// Use the built-in simulated machine instead of real GPUs.
    #[arg(long)]
    pub demo: bool,
    /// Play the simulated machine's day N times faster than real time (its out-of-memory error
    /// comes after about 8 minutes at 1, 8 seconds at 60); implies --demo. View › Demo speed
    /// changes it while the app runs.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(vramscope_core::source::demo::MAX_DEMO_PACE)))]
    pub demo_speed: Option<u32>,
    /// Watch this folder in the GUI: allocator snapshots written into it open as they appear
    /// (as File › Watch folder… does).
    #[arg(long, value_name = "DIR")]
    pub watch: Option<PathBuf>,
    /// In the GUI: show the GPUs of a Prometheus server (--since back) and follow it live.
    #[command(flatten)]
    pub prometheus: prometheus::PrometheusArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The headless commands; without one, `vramscope` opens the GUI.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Record GPU memory to a .vramcap file without a display.
    Record(record::RecordArgs),
    /// Describe what a .vramcap capture holds.
    Inspect(inspect::InspectArgs),
    /// Show devices, driver and CUDA versions, current memory and health.
    Info(info::InfoArgs),
    /// Check the GPU: driver facts, CUDA vs NVML, largest allocatable block, optional memory test.
    Check(check::CheckArgs),
    /// Summarize PyTorch allocator snapshots: totals per device and pool.
    Analyze(analyze::AnalyzeArgs),
    /// Run a command (`vramscope run -- python train.py`) recording its GPU memory, its
    /// allocator history and its output into a run folder, with no change to its code; diagnose
    /// it when it fails and, with --prove, re-run it under candidate fixes.
    Run(run::RunArgs),
    /// Compare snapshots, captures or run folders: what grew, where, and why; snapshots of one
    /// run in time order name the call site that grows; one snapshot per rank gives a rank table.
    Compare(compare::CompareArgs),
    /// Find out why memory ran out or a GPU misbehaves, from logs, captures, snapshots or the live GPUs.
    Diagnose(diagnose::DiagnoseArgs),
    /// Export a capture's timeline as CSV, a Chrome/Perfetto trace or a PNG image for a review.
    Export(export::ExportArgs),
    /// Replay a snapshot's allocator trace under other PYTORCH_CUDA_ALLOC_CONF settings: which
    /// would have avoided the OOM, and with how much headroom.
    Whatif(whatif::WhatIfArgs),
    /// Serve this machine's GPUs at /metrics for Prometheus (memory, processes, Xid, ECC, remaps).
    Exporter(exporter::ExporterArgs),
    /// Save a range of a Prometheus server's GPU series (dcgm-exporter, nvitop-exporter,
    /// vramscope exporter) as a .vramcap capture.
    Pull(pull::PullArgs),
    /// Write Prometheus alerting rules (memory near full, full within the hour, Xid, ECC, row
    /// remaps, lost GPU, throttling, exporter gone) for vramscope exporter, dcgm-exporter or
    /// nvitop-exporter.
    Alerts(alerts::AlertsArgs),
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Some(
            Command::Inspect(_)
                | Command::Info(_)
                | Command::Check(_)
                | Command::Analyze(_)
                | Command::Diagnose(_)
                | Command::Compare(_)
                | Command::Whatif(_)
        )
    ) {
        exit_quietly_on_closed_pipe();
    }
    match cli.command {
        None => gui::run(
            cli.files,
            cli.demo,
            cli.demo_speed,
            cli.watch,
            cli.prometheus,
        ),
        Some(Command::Record(args)) => record::run(args),
        Some(Command::Inspect(args)) => inspect::run(args),
        Some(Command::Info(args)) => info::run(args),
        Some(Command::Check(args)) => check::run(args),
        Some(Command::Analyze(args)) => analyze::run(args),
        Some(Command::Diagnose(args)) => diagnose::run(args),
        Some(Command::Compare(args)) => compare::run(args),
        Some(Command::Run(args)) => run::run(args),
        Some(Command::Export(args)) => export::run(args),
        Some(Command::Whatif(args)) => whatif::run(args),
        Some(Command::Exporter(args)) => exporter::run(args),
        Some(Command::Pull(args)) => pull::run(args),
        Some(Command::Alerts(args)) => alerts::run(args),
    }
}

/// Commands that print a report end quietly when their reader goes away (`vramscope analyze … |
/// head`), like other Unix tools, instead of panicking in `println!` on the broken pipe. Rust
/// ignores SIGPIPE by default; this restores the default action. Not for the GUI or `record`,
/// which must not die because some socket or pipe they use closed.
fn exit_quietly_on_closed_pipe() {
    // SAFETY: called on the main thread before any other thread exists; it only changes the
    // disposition of SIGPIPE back to the system default.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Refuses to write `out` when it is a folder, or exists and `force` is not set; `example` is a
/// file name to suggest inside a folder. `Some(exit code)` when refused (the message is printed).
pub(crate) fn refuse_output(out: &Path, force: bool, example: &str) -> Option<ExitCode> {
    if out.is_dir() {
        return Some(fail(format!(
            "{} is a directory; give a file name such as {}",
            out.display(),
            out.join(example).display()
        )));
    }
    if out.exists() && !force {
        return Some(fail(format!(
            "{} already exists; pass --force to replace it",
            out.display()
        )));
    }
    None
}

/// A flag set by Ctrl+C or SIGTERM, for commands that run until stopped (`record`, `exporter`).
pub(crate) fn stop_on_ctrl_c() -> Result<Arc<AtomicBool>, ExitCode> {
    let stop_requested = Arc::new(AtomicBool::new(false));
    let handler_flag = Arc::clone(&stop_requested);
    match ctrlc::set_handler(move || handler_flag.store(true, Ordering::SeqCst)) {
        Ok(()) => Ok(stop_requested),
        Err(err) => Err(fail(format!(
            "cannot install the Ctrl+C/SIGTERM handler: {err}"
        ))),
    }
}

/// Prints an error the way every command does (`vramscope: error: …`) and returns exit code 1.
pub(crate) fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("vramscope: error: {message}");
    ExitCode::FAILURE
}
