//! `vramscope pull`: a range of a Prometheus server's GPU series (dcgm-exporter, nvitop-exporter,
//! `vramscope exporter`) saved as a `.vramcap` capture that every command and the GUI open.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use super::prometheus::PrometheusArgs;
use vramscope_core::diagnose::finding::format_utc_ms as utc;
use vramscope_core::model::format_bytes;

#[derive(Debug, clap::Args)]
pub struct PullArgs {
    #[command(flatten)]
    pub prometheus: PrometheusArgs,
    /// Capture file to write (conventionally *.vramcap).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub out: PathBuf,
    /// Replace FILE if it already exists.
    #[arg(long)]
    pub force: bool,
}

pub fn run(args: PullArgs) -> ExitCode {
    if args.prometheus.prometheus.is_none() {
        return super::fail("pull: give the server to read with --prometheus URL");
    }
    if let Some(refused) = super::refuse_output(&args.out, args.force, "fleet.vramcap") {
        return refused;
    }
    let (reader, range, capture) = match args.prometheus.pull() {
        Ok(pulled) => pulled,
        Err(err) => return super::fail(err),
    };
    if reader.ignored_new_gpus > 0 {
        eprintln!(
            "vramscope: warning: {} GPU(s) appeared after the first read and were left out",
            reader.ignored_new_gpus
        );
    }
    if let Err(err) = vramscope_core::formats::vramcap::write_file(&args.out, &capture) {
        return super::fail(err);
    }
    let hosts: BTreeSet<&str> = capture.devices.iter().map(|d| d.host.as_str()).collect();
    let size = std::fs::metadata(&args.out).map(|m| m.len()).unwrap_or(0);
    println!(
        "pulled {} GPU(s) on {} host(s), {} samples from {} to {} every {} s, to {} ({}){}",
        capture.devices.len(),
        hosts.len(),
        capture.sample_count(),
        utc(range.start_ms),
        utc(range.end_ms),
        range.step_ms as f64 / 1000.0,
        args.out.display(),
        format_bytes(size),
        if capture.is_simulated() {
            "; SIMULATED GPUs (a vramscope exporter --demo)"
        } else {
            ""
        }
    );
    ExitCode::SUCCESS
}
