//! Log analyzer throughput: a synthetic 256 MiB training log (step lines with memory figures,
//! warnings, a PyTorch OOM every 100,000 lines, an Xid every 50,000) analysed from memory.
//! Target: at least 50 MiB/s on one core, so a 1 GiB log is analysed in under 20 s.
//!
//! Run: `cargo bench --bench log_analyzer`
#![allow(
    clippy::unwrap_used,
    clippy::too_many_lines,
    reason = "test and bench code: a panic is the failure report, and a test reads best as one story"
)]

#[path = "common/mod.rs"]
mod common;

use vramscope_core::diagnose::log::analyze_reader;

/// Size of the measured log.
const BENCH_BYTES: usize = 256 << 20;
/// `cargo test --all-targets` also runs this binary (without `--bench`): a quick smoke run then.
const SMOKE_BYTES: usize = 1 << 20;

fn synthetic_log(target_bytes: usize) -> Vec<u8> {
    let mut text = String::with_capacity(target_bytes + 4096);
    let mut i: u64 = 0;
    while text.len() < target_bytes {
        i += 1;
        match i {
            i if i % 100_000 == 0 => text.push_str("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 27.86 GiB. GPU 0 has a total capacity of 139.80 GiB of which 13.93 GiB is free. Including non-PyTorch memory, this process has 125.87 GiB memory in use. Of the allocated memory 125.36 GiB is allocated by PyTorch, and 1.79 MiB is reserved by PyTorch but unallocated.\n"),
            i if i % 50_000 == 0 => text.push_str("[ 1812.101022] NVRM: Xid (PCI:0000:00:06): 31, pid=951, name=python3, channel 0x0000000a, intr 00000000.\n"),
            i if i % 7 == 0 => text.push_str(&format!("2026-11-30 08:00:{:02} WARNING dataloader worker {} slow: batch took {} ms\n", i % 60, i % 8, 100 + i % 50)),
            _ => text.push_str(&format!("[rank0] step {i} loss {:.4} lr 3.0e-4 allocated {:.2} GiB reserved {:.2} GiB tokens/s 18234\n", 1.0 / (i as f64), 3.19 + (i % 3) as f64 * 0.01, 4.0)),
        }
    }
    text.into_bytes()
}

fn main() {
    let measuring = common::measuring();
    let log = synthetic_log(if measuring { BENCH_BYTES } else { SMOKE_BYTES });
    let mib = log.len() as f64 / (1 << 20) as f64;
    let runs = if measuring { 3 } else { 1 };
    let (times, analysis) =
        common::time_runs(runs, || analyze_reader(log.as_slice(), "synthetic.log"));
    let matches = match analysis {
        Ok(analysis) => analysis.matches.len(),
        Err(e) => {
            eprintln!("log_analyzer: {e}");
            std::process::exit(1);
        }
    };
    let best = times.min().as_secs_f64();
    println!(
        "log_analyzer: {mib:.0} MiB in {best:.2} s = {:.0} MiB/s ({matches} recognised lines; best of {runs})",
        mib / best
    );
}
