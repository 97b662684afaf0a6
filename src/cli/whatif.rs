//! `vramscope whatif SNAPSHOT [--setting CONF]... [--cap SIZE] [--device N] [--json]`: replays a
//! snapshot's allocator trace under other `PYTORCH_CUDA_ALLOC_CONF` settings and says which would
//! have avoided running out of memory, with the self-check that makes the answer trustworthy.
//!
//! Exit codes: 0 an answer (whatever it says), 1 the snapshot could not be read or replayed,
//! 2 a bad argument (an unknown setting, a size without a number).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vramscope_core::analysis::replay::{AllocConf, WhatIfRequest, what_if_snapshot};
use vramscope_core::diagnose::size::parse_size;
use vramscope_core::formats::pytorch::read_file;
use vramscope_core::report::whatif;

#[derive(Debug, clap::Args)]
pub struct WhatIfArgs {
    /// A PyTorch allocator snapshot with history (`torch.cuda.memory._record_memory_history()`
    /// before the run, `torch.cuda.memory._dump_snapshot()` after).
    pub snapshot: PathBuf,
    /// A PYTORCH_CUDA_ALLOC_CONF value to try, in PyTorch's syntax (`expandable_segments:True`,
    /// `garbage_collection_threshold:0.6,max_split_size_mb:128`,
    /// `roundup_power2_divisions:[256:1,>:8]`) or `default`. Repeat to try several; without
    /// it, a sweep of sensible candidates.
    #[arg(long = "setting", value_name = "CONF")]
    pub settings: Vec<String>,
    /// Per-process cap (what set_per_process_memory_fraction allows), e.g. `2.1GiB`, `512MiB`
    /// or bytes (GiB = 2^30). Applies to every replay, the self-check included.
    #[arg(long, value_name = "SIZE")]
    pub cap: Option<String>,
    /// Device memory, e.g. `141GiB` (sizes expandable segments' reservations; optional).
    #[arg(long, value_name = "SIZE")]
    pub device_memory: Option<String>,
    /// CUDA device whose trace to replay.
    #[arg(long, default_value_t = 0)]
    pub device: u32,
    /// Print one `vramscope.whatif/1` JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

fn usage_error(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("vramscope whatif: error: {message}");
    ExitCode::from(2)
}

fn parse_size_arg(flag: &str, text: &str) -> Result<u64, String> {
    parse_size(text).filter(|&b| b > 0).ok_or_else(|| {
        format!("--{flag} '{text}' is not a size; give e.g. 2.1GiB, 512MiB or a number of bytes")
    })
}

pub fn run(args: WhatIfArgs) -> ExitCode {
    let mut candidates = Vec::new();
    for text in &args.settings {
        match AllocConf::parse(text) {
            Ok(conf) => candidates.push(conf),
            Err(error) => return usage_error(format!("--setting '{text}': {error}")),
        }
    }
    let cap_bytes = match args
        .cap
        .as_deref()
        .map(|t| parse_size_arg("cap", t))
        .transpose()
    {
        Ok(cap) => cap,
        Err(message) => return usage_error(message),
    };
    let device_memory_bytes = match args
        .device_memory
        .as_deref()
        .map(|t| parse_size_arg("device-memory", t))
        .transpose()
    {
        Ok(total) => total,
        Err(message) => return usage_error(message),
    };
    let snapshot = match read_file(&args.snapshot, &|_| true) {
        Ok(snapshot) => Arc::new(snapshot),
        Err(error) => return super::fail(error),
    };
    let request = WhatIfRequest {
        device: args.device,
        candidates,
        cap_bytes,
        device_memory_bytes,
    };
    // Progress on stderr when a person is watching (replays of millions of events take seconds).
    let show_progress = std::io::stderr().is_terminal();
    let started = Instant::now();
    let last_shown = std::sync::Mutex::new(Instant::now());
    let progress = |fraction: f32| {
        if show_progress
            && let Ok(mut last) = last_shown.lock()
            && last.elapsed() > Duration::from_millis(250)
        {
            *last = Instant::now();
            eprint!("\rreplaying… {:>3.0}%", fraction * 100.0);
            let _ = std::io::stderr().flush();
        }
        true
    };
    let result = what_if_snapshot(Arc::clone(&snapshot), &request, &progress);
    if show_progress && started.elapsed() > Duration::from_millis(250) {
        eprint!("\r                 \r");
    }
    let report = match result {
        Ok(report) => report,
        Err(error) => return super::fail(error),
    };
    if args.json {
        println!("{}", whatif::to_json(&report, &snapshot));
    } else {
        print!("{}", whatif::to_text(&report, &snapshot));
    }
    ExitCode::SUCCESS
}
