//! What live sampling costs: CPU time per second of wall time while `NvmlSource` polls at a
//! fixed rate, side by side with `nvidia-smi --query-gpu=… -lms N` sampling comparable fields
//! over the same window.
//!
//! `cargo bench --bench sampler -- [--seconds 30] [--interval-ms 100] [--configs tiers,everything]
//! [--profile-calls] [--compositions] [--out results.json]` runs each configuration for `--seconds`:
//! - `tiers`: fast tier every tick, slow tier every 5 s (what the app does);
//! - `everything`: fast and slow tier on every tick.
//!
//! vramscope's cost is this process's CPU time (`getrusage(RUSAGE_SELF)`, so the event thread
//! counts too; the polling and event threads are also reported apart). Two nvidia-smi
//! configurations run side by side in the same window: `full` (the comparable fields below) and
//! `issue` (the issue's verification query, `timestamp,memory.used,memory.reserved,memory.total`).
//! Each one's cost is the sum over all its threads of `/proc/<pid>/task/*/schedstat` (nanoseconds;
//! `stat`'s 10 ms ticks where schedstat is missing), read at the start and end of the window; its
//! thread count and its whole-process `stat` time (which keeps the time of threads that exited)
//! are reported too. `--profile-calls` first prints the cost of each NVML call and of whole polls.
//!
//! `--compositions` instead measures what one tick costs the polling thread
//! (`CLOCK_THREAD_CPUTIME_ID`) for `--seconds` each, with nvidia-smi (`full`) side by side:
//! `memory` (`memory_info` of every GPU), `basic` (memory, utilization, temperature, power),
//! `fast-every-tick` (the fast tier with process lists read every tick, the old behaviour) and
//! `fast-adaptive` (the fast tier as the app runs it, process lists read when memory changed or
//! after 1 s). With `--compositions`, `--configs` picks among these four (default: all).
//!
//! `--record-csv DIR` instead writes what the source reads (device memory and processes) at
//! `--interval-ms` for `--seconds` as CSV, for comparing a recording against nvidia-smi's log
//! (docs/gpu-verification.md); `--capture-csv FILE --csv-dir DIR` writes the same CSV files from
//! a `.vramcap` recorded by `vramscope record`.
//!
//! Without `--bench` (as `cargo test --all-targets` runs it) it only polls a few times, and on a
//! machine without an NVIDIA driver it prints why it cannot measure and exits successfully.
#![allow(
    clippy::unwrap_used,
    clippy::too_many_lines,
    reason = "test and bench code: a panic is the failure report, and a test reads best as one story"
)]

#[path = "common/mod.rs"]
mod common;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use vramscope_core::model::DeviceSample;
use vramscope_core::model::now_unix_ms;
use vramscope_core::source::{Source, Tiers};
use vramscope_gpu::nvml::NvmlSource;

/// Fields `nvidia-smi --query-gpu` shares with what vramscope samples.
const SMI_FIELDS: &str = "timestamp,memory.used,memory.reserved,memory.free,memory.total,\
utilization.gpu,utilization.memory,temperature.gpu,power.draw,clocks.sm,clocks.mem,\
clocks_event_reasons.active,ecc.errors.corrected.volatile.total,\
ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.aggregate.total,\
ecc.errors.uncorrected.aggregate.total,retired_pages.sbe,retired_pages.dbe,retired_pages.pending,\
remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,\
remapped_rows.failure,persistence_mode";
/// The issue's own verification query.
const SMI_ISSUE_FIELDS: &str = "timestamp,memory.used,memory.reserved,memory.total";
/// Used when this driver's nvidia-smi rejects one of [`SMI_FIELDS`].
const SMI_FALLBACK_FIELDS: &str = "timestamp,memory.used,memory.reserved,memory.free,memory.total,\
utilization.gpu,utilization.memory,temperature.gpu,power.draw,clocks.sm,clocks.mem";

const SLOW_TIER_MS: u64 = 5_000;

/// The `--compositions` measurements, in order.
const COMPOSITIONS: [&str; 4] = ["memory", "basic", "fast-every-tick", "fast-adaptive"];

struct Options {
    bench: bool,
    seconds: u64,
    interval_ms: u64,
    out: Option<PathBuf>,
    record_csv: Option<PathBuf>,
    capture_csv: Option<PathBuf>,
    csv_dir: Option<PathBuf>,
    profile_calls: bool,
    compositions: bool,
    /// Which configurations to measure: `tiers`, `everything` or both; with `--compositions`,
    /// which compositions.
    configs: Vec<String>,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut options = Options {
            bench: false,
            seconds: 30,
            interval_ms: 100,
            out: None,
            record_csv: None,
            capture_csv: None,
            csv_dir: None,
            profile_calls: false,
            compositions: false,
            configs: Vec::new(),
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value =
                |name: &str| args.next().cloned().ok_or(format!("{name} needs a value"));
            match arg.as_str() {
                "--bench" => options.bench = true,
                "--profile-calls" => options.profile_calls = true,
                "--compositions" => options.compositions = true,
                "--configs" => {
                    options.configs = value("--configs")?.split(',').map(str::to_owned).collect();
                }
                "--seconds" => options.seconds = parse_number("--seconds", &value("--seconds")?)?,
                "--interval-ms" => {
                    options.interval_ms = parse_number("--interval-ms", &value("--interval-ms")?)?
                }
                "--out" => options.out = Some(PathBuf::from(value("--out")?)),
                "--record-csv" => options.record_csv = Some(PathBuf::from(value("--record-csv")?)),
                "--capture-csv" => {
                    options.capture_csv = Some(PathBuf::from(value("--capture-csv")?))
                }
                "--csv-dir" => options.csv_dir = Some(PathBuf::from(value("--csv-dir")?)),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        let known: &[&str] = if options.compositions {
            &COMPOSITIONS
        } else {
            &["tiers", "everything"]
        };
        if options.configs.is_empty() {
            options.configs = known.iter().map(|&c| c.to_owned()).collect();
        }
        if let Some(bad) = options
            .configs
            .iter()
            .find(|c| !known.contains(&c.as_str()))
        {
            return Err(format!(
                "--configs: unknown configuration {bad:?} (known: {})",
                known.join(", ")
            ));
        }
        if options.interval_ms == 0 || options.seconds == 0 {
            return Err("--seconds and --interval-ms must be positive".to_owned());
        }
        Ok(options)
    }
}

fn parse_number(name: &str, text: &str) -> Result<u64, String> {
    text.parse()
        .map_err(|_| format!("{name}: {text:?} is not a whole number"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match Options::parse(&args) {
        Ok(options) => options,
        Err(err) => {
            eprintln!("sampler bench: {err}");
            return ExitCode::from(2);
        }
    };
    if let Some(capture) = &options.capture_csv {
        let Some(dir) = &options.csv_dir else {
            eprintln!("sampler bench: --capture-csv needs --csv-dir");
            return ExitCode::from(2);
        };
        return match capture_to_csv(capture, dir) {
            Ok(rows) => {
                println!(
                    "wrote {rows} device samples of {} to {}",
                    capture.display(),
                    dir.display()
                );
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("sampler bench: {err}");
                ExitCode::FAILURE
            }
        };
    }
    if !options.bench
        && let Err(err) = check_thread_sum()
    {
        eprintln!("sampler bench: {err}");
        return ExitCode::FAILURE;
    }
    let mut source = match NvmlSource::open() {
        Ok(source) => source,
        Err(err) => {
            println!("sampler bench: nothing to measure on this machine: {err}");
            return ExitCode::SUCCESS;
        }
    };
    if let Some(dir) = &options.record_csv {
        return match record_csv(&mut source, dir, &options) {
            Ok(rows) => {
                println!("recorded {rows} device samples to {}", dir.display());
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("sampler bench: {err}");
                ExitCode::FAILURE
            }
        };
    }
    if !options.bench {
        return smoke(&mut source);
    }
    if options.profile_calls {
        profile_calls(&mut source);
    }
    if options.compositions {
        return run_compositions(&mut source, &options);
    }
    let mut results = Vec::new();
    for (label, slow_every_tick) in [("tiers", false), ("everything", true)] {
        if !options.configs.iter().any(|c| c == label) {
            continue;
        }
        match measure(&mut source, &options, label, slow_every_tick) {
            Ok(result) => {
                println!("{}", result.line());
                results.push(result);
            }
            Err(err) => {
                eprintln!("sampler bench: {label}: {err}");
                return ExitCode::FAILURE;
            }
        }
    }
    let json = serde_json::Value::Array(results.iter().map(Measurement::json).collect());
    write_json(options.out.as_deref(), &json)
}

/// Writes `json` to `path` when one was given.
fn write_json(path: Option<&Path>, json: &serde_json::Value) -> ExitCode {
    if let Some(path) = path
        && let Err(err) = std::fs::write(path, format!("{json:#}\n"))
    {
        eprintln!("sampler bench: cannot write {}: {err}", path.display());
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Cost of each NVML call the source makes (GPU 0, 200 calls each), and of whole polls: median
/// wall time and mean CPU time of the calling thread, in microseconds.
fn profile_calls(source: &mut NvmlSource) {
    use nvml_wrapper::enum_wrappers::device::{
        Clock, EccCounter, MemoryError, RetirementCause, TemperatureSensor,
    };
    const CALLS: usize = 200;
    const SPACED_CALLS: usize = 20;
    /// Tight loop (NVML may answer from its caches) and calls 100 ms apart (as a 10 Hz sampler
    /// makes them): median wall time and mean CPU of this thread per call.
    fn time<T>(label: &str, mut call: impl FnMut() -> T) {
        let mut wall_us = Vec::with_capacity(CALLS);
        let cpu_start = thread_cpu_s();
        for _ in 0..CALLS {
            let start = Instant::now();
            std::hint::black_box(call());
            wall_us.push(start.elapsed().as_secs_f64() * 1e6);
        }
        let cpu_us = (thread_cpu_s() - cpu_start) * 1e6 / CALLS as f64;
        let wall_us = common::Samples::from_values(wall_us);
        let mut spaced_cpu_s = 0.0;
        for _ in 0..SPACED_CALLS {
            std::thread::sleep(Duration::from_millis(100));
            let start = thread_cpu_s();
            std::hint::black_box(call());
            spaced_cpu_s += thread_cpu_s() - start;
        }
        let spaced_us = spaced_cpu_s * 1e6 / SPACED_CALLS as f64;
        println!(
            "  {label:<42} tight: wall p50 {:>7.1} µs, CPU {cpu_us:>7.1} µs; 100 ms apart: CPU {spaced_us:>7.1} µs",
            wall_us.median()
        );
    }
    println!("per-call cost ({CALLS} calls each):");
    match nvml_wrapper::Nvml::init() {
        Ok(nvml) => match nvml.device_by_index(0) {
            Ok(gpu) => {
                time("memory_info (v2)", || gpu.memory_info());
                time("utilization_rates", || gpu.utilization_rates());
                time("temperature", || gpu.temperature(TemperatureSensor::Gpu));
                time("power_usage", || gpu.power_usage());
                time("clock_info(SM)", || gpu.clock_info(Clock::SM));
                time("clock_info(Memory)", || gpu.clock_info(Clock::Memory));
                time("current_throttle_reasons", || {
                    gpu.current_throttle_reasons()
                });
                time("total_ecc_errors(corrected, volatile)", || {
                    gpu.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
                });
                time("running_compute_processes", || {
                    gpu.running_compute_processes()
                });
                time("running_graphics_processes", || {
                    gpu.running_graphics_processes()
                });
                time("total_ecc_errors(corrected, aggregate)", || {
                    gpu.total_ecc_errors(MemoryError::Corrected, EccCounter::Aggregate)
                });
                time("retired_pages(DBE)", || {
                    gpu.retired_pages(RetirementCause::DoubleBitEccError)
                });
                time("are_pages_pending_retired", || {
                    gpu.are_pages_pending_retired()
                });
                time("bar1_memory_info", || gpu.bar1_memory_info());
                time("pcie_replay_counter", || gpu.pcie_replay_counter());
                time("is_in_persistent_mode", || gpu.is_in_persistent_mode());
            }
            Err(err) => println!("  GPU 0 could not be opened: {err}"),
        },
        Err(err) => println!("  NVML could not be initialized: {err}"),
    }
    time("NvmlSource::poll(fast)", || {
        source.poll(
            now_unix_ms(),
            Tiers {
                fast: true,
                slow: false,
            },
        )
    });
    time("NvmlSource::poll(fast + slow)", || {
        source.poll(
            now_unix_ms(),
            Tiers {
                fast: true,
                slow: true,
            },
        )
    });
}

/// A few polls, checking that a real GPU answers with memory readings.
fn smoke(source: &mut NvmlSource) -> ExitCode {
    let devices = source.describe().devices.len();
    for _ in 0..5 {
        let batch = source.poll(
            now_unix_ms(),
            Tiers {
                fast: true,
                slow: true,
            },
        );
        let with_memory = batch.devices.iter().filter(|d| d.memory.is_some()).count();
        if with_memory != devices {
            eprintln!("sampler bench: {with_memory} of {devices} GPUs returned memory");
            return ExitCode::FAILURE;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("sampler bench smoke run: {devices} GPU(s) polled 5 times");
    ExitCode::SUCCESS
}

/// What one nvidia-smi configuration cost over a window.
struct SmiCost {
    /// `full` or `issue`.
    label: &'static str,
    fields: &'static str,
    /// Sum over its threads of their schedstat run time (stat ticks where schedstat is missing).
    cpu_s: f64,
    /// utime + stime of the whole process (10 ms ticks; keeps threads that exited).
    stat_cpu_s: Option<f64>,
    /// Threads at the end of the window.
    threads: usize,
}

impl SmiCost {
    fn cpu_ms_per_s(&self, wall_s: f64) -> f64 {
        1000.0 * self.cpu_s / wall_s
    }
    /// `cpu_s` (of vramscope) over this nvidia-smi's CPU.
    fn ratio(&self, cpu_s: f64) -> Option<f64> {
        (self.cpu_s > 0.0).then(|| cpu_s / self.cpu_s)
    }
    fn text(&self, wall_s: f64, cpu_s: f64) -> String {
        let ratio = self
            .ratio(cpu_s)
            .map_or_else(|| "n/a".to_owned(), |r| format!("{r:.3}"));
        let stat = self.stat_cpu_s.map_or_else(
            || "n/a".to_owned(),
            |s| format!("{:.2}", 1000.0 * s / wall_s),
        );
        format!(
            "nvidia-smi[{}] {:.2} ms/s ({} threads; stat {stat}), ratio {ratio}",
            self.label,
            self.cpu_ms_per_s(wall_s),
            self.threads
        )
    }
    fn json(&self, wall_s: f64, cpu_s: f64) -> serde_json::Value {
        serde_json::json!({
            "label": self.label,
            "fields": self.fields,
            "threads": self.threads,
            "cpu_s": self.cpu_s,
            "cpu_ms_per_s": self.cpu_ms_per_s(wall_s),
            "stat_cpu_ms_per_s": self.stat_cpu_s.map(|s| 1000.0 * s / wall_s),
            "ratio": self.ratio(cpu_s),
        })
    }
}

struct Measurement {
    label: &'static str,
    interval_ms: u64,
    wall_s: f64,
    polls: u64,
    vramscope_cpu_s: f64,
    /// CPU of the thread calling `poll` (what the sampling thread costs).
    poll_thread_cpu_s: f64,
    /// CPU of the NVML event thread over the window, when it was found.
    event_thread_cpu_s: Option<f64>,
    poll_p50_us: f64,
    poll_p99_us: f64,
    /// Process-list reads (summed over GPUs) in the window.
    process_list_reads: u64,
    smi: Vec<SmiCost>,
}

impl Measurement {
    fn vramscope_cpu_ms_per_s(&self) -> f64 {
        1000.0 * self.vramscope_cpu_s / self.wall_s
    }
    fn line(&self) -> String {
        let smi: Vec<String> = self
            .smi
            .iter()
            .map(|smi| smi.text(self.wall_s, self.vramscope_cpu_s))
            .collect();
        format!(
            "{:<10} interval {} ms, {:.1} s, {} polls, {} process-list reads: vramscope CPU {:.2} ms/s (polling thread {:.2}, event thread {}; poll p50 {:.0} µs, p99 {:.0} µs); {}",
            self.label,
            self.interval_ms,
            self.wall_s,
            self.polls,
            self.process_list_reads,
            self.vramscope_cpu_ms_per_s(),
            1000.0 * self.poll_thread_cpu_s / self.wall_s,
            self.event_thread_cpu_s.map_or_else(
                || "n/a".to_owned(),
                |cpu| format!("{:.2}", 1000.0 * cpu / self.wall_s)
            ),
            self.poll_p50_us,
            self.poll_p99_us,
            if smi.is_empty() {
                "nvidia-smi n/a".to_owned()
            } else {
                smi.join("; ")
            },
        )
    }
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "label": self.label,
            "interval_ms": self.interval_ms,
            "wall_s": self.wall_s,
            "polls": self.polls,
            "process_list_reads": self.process_list_reads,
            "vramscope_cpu_s": self.vramscope_cpu_s,
            "vramscope_cpu_ms_per_s": self.vramscope_cpu_ms_per_s(),
            "poll_thread_cpu_ms_per_s": 1000.0 * self.poll_thread_cpu_s / self.wall_s,
            "event_thread_cpu_ms_per_s": self.event_thread_cpu_s.map(|cpu| 1000.0 * cpu / self.wall_s),
            "poll_p50_us": self.poll_p50_us,
            "poll_p99_us": self.poll_p99_us,
            "nvidia_smi": self.smi.iter().map(|smi| smi.json(self.wall_s, self.vramscope_cpu_s)).collect::<Vec<_>>(),
        })
    }
}

/// This process's user + system CPU time in seconds.
fn own_cpu_s() -> f64 {
    common::process_cpu_time().as_secs_f64()
}

/// The calling thread's CPU time in seconds (nanosecond clock, unlike /proc's 10 ms ticks).
fn thread_cpu_s() -> f64 {
    common::thread_cpu_time().as_secs_f64()
}

/// CPU time of this process's NVML event thread (named `vramscope-nvml-events`, which the
/// kernel truncates to 15 bytes), from `/proc/self/task/*/stat`.
fn event_thread_cpu_s() -> Option<f64> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    tasks.flatten().find_map(|task| {
        let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
        if !comm.starts_with("vramscope-nvml") {
            return None;
        }
        stat_cpu_s(&task.path().join("stat")).ok()
    })
}

/// A child's user + system CPU time in seconds, from `/proc/<pid>/stat`.
fn child_cpu_s(pid: u32) -> Result<f64, String> {
    stat_cpu_s(std::path::Path::new(&format!("/proc/{pid}/stat")))
}

/// CPU time of a process or thread from its `/proc/.../stat` path: `schedstat`'s nanosecond
/// run time when the kernel provides it, else `stat`'s utime + stime (10 ms ticks).
fn stat_cpu_s(path: &Path) -> Result<f64, String> {
    let schedstat = path.with_file_name("schedstat");
    if let Some(ns) = std::fs::read_to_string(schedstat)
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u64>().ok())
    {
        return Ok(ns as f64 / 1e9);
    }
    ticks_cpu_s(path)
}

/// utime + stime of a `/proc/.../stat` file, in seconds.
fn ticks_cpu_s(path: &Path) -> Result<f64, String> {
    let pid = path.display();
    let stat = std::fs::read_to_string(path).map_err(|err| format!("reading {pid}: {err}"))?;
    // Fields after the command name (which may contain spaces) start at field 3 (state);
    // utime and stime are fields 14 and 15.
    let after_name = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or("malformed stat")?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64, String> {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .map(|v| v as f64)
            .ok_or_else(|| format!("no CPU time in {pid}"))
    };
    // SAFETY: sysconf has no preconditions.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok((ticks(11)? + ticks(12)?) / ticks_per_s)
}

/// A process's CPU time summed over its threads (`/proc/<pid>/task/*/stat`, see
/// [`stat_cpu_s`]) and its thread count; the whole-process `stat` when the task list cannot
/// be read.
fn process_threads_cpu_s(pid: u32) -> Result<(f64, usize), String> {
    let task_dir = PathBuf::from(format!("/proc/{pid}/task"));
    let Ok(tasks) = std::fs::read_dir(&task_dir) else {
        return Ok((child_cpu_s(pid)?, 1));
    };
    let mut cpu_s = 0.0;
    let mut threads = 0;
    for task in tasks.flatten() {
        // A thread that exited in between is skipped (its time stays in the process's stat).
        if let Ok(thread_cpu) = stat_cpu_s(&task.path().join("stat")) {
            cpu_s += thread_cpu;
            threads += 1;
        }
    }
    if threads == 0 {
        return Err(format!("no readable thread under {}", task_dir.display()));
    }
    Ok((cpu_s, threads))
}

/// Checks [`process_threads_cpu_s`] on this process: a second thread burns CPU and stays alive;
/// the sum over threads must count it (the main thread's own `schedstat` alone would not).
fn check_thread_sum() -> Result<(), String> {
    let (burned_tx, burned_rx) = std::sync::mpsc::channel();
    let (exit_tx, exit_rx) = std::sync::mpsc::channel::<()>();
    let burner = std::thread::spawn(move || {
        let start = thread_cpu_s();
        let mut x = 0u64;
        while thread_cpu_s() - start < 0.05 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let _ = burned_tx.send(thread_cpu_s());
        let _ = exit_rx.recv();
    });
    let burned_s = burned_rx
        .recv()
        .map_err(|_| "the CPU-burning thread stopped early".to_owned())?;
    let measured = process_threads_cpu_s(std::process::id());
    let _ = exit_tx.send(());
    let _ = burner.join();
    let (cpu_s, threads) = measured?;
    // Schedstat can lag the thread clock by a scheduler tick; 90 % still needs the second thread.
    if threads < 2 || cpu_s < burned_s * 0.9 {
        return Err(format!(
            "summing threads' CPU is wrong: {cpu_s:.3} s over {threads} threads, but one thread alone burned {burned_s:.3} s"
        ));
    }
    println!(
        "thread CPU sum checked: {threads} threads, {:.1} ms (the burning thread {:.1} ms)",
        cpu_s * 1e3,
        burned_s * 1e3
    );
    Ok(())
}

/// One nvidia-smi configuration: a label and the field lists to try, best first.
struct SmiQuery {
    label: &'static str,
    field_lists: &'static [&'static str],
}

const SMI_FULL: SmiQuery = SmiQuery {
    label: "full",
    field_lists: &[SMI_FIELDS, SMI_FALLBACK_FIELDS],
};
const SMI_ISSUE: SmiQuery = SmiQuery {
    label: "issue",
    field_lists: &[SMI_ISSUE_FIELDS],
};

/// A running `nvidia-smi -lms` and its CPU time when the window opened.
struct RunningSmi {
    label: &'static str,
    fields: &'static str,
    child: Child,
    start_cpu_s: f64,
    start_stat_cpu_s: Option<f64>,
}

impl RunningSmi {
    /// Reads the CPU time now (call when the window opens).
    fn open_window(&mut self) -> Result<(), String> {
        self.start_cpu_s = process_threads_cpu_s(self.child.id())?.0;
        self.start_stat_cpu_s = child_cpu_s(self.child.id()).ok();
        Ok(())
    }

    /// The cost since [`RunningSmi::open_window`]; stops the process.
    fn finish(mut self) -> Result<SmiCost, String> {
        let pid = self.child.id();
        let end = process_threads_cpu_s(pid);
        let stat_end = child_cpu_s(pid).ok();
        // Stopping our own child: it loops until killed.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (end_cpu_s, threads) = end?;
        Ok(SmiCost {
            label: self.label,
            fields: self.fields,
            cpu_s: end_cpu_s - self.start_cpu_s,
            stat_cpu_s: stat_end
                .zip(self.start_stat_cpu_s)
                .map(|(end, start)| end - start),
            threads,
        })
    }
}

/// Starts `nvidia-smi --query-gpu=… -lms interval` with its output discarded, trying the
/// query's field lists in order until this driver's nvidia-smi accepts one.
fn start_nvidia_smi(interval_ms: u64, query: &SmiQuery) -> Option<RunningSmi> {
    for &fields in query.field_lists {
        let probe = Command::new("nvidia-smi")
            .args([&format!("--query-gpu={fields}"), "--format=csv"])
            .output();
        match probe {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                eprintln!(
                    "nvidia-smi rejected the {} field list ({})",
                    query.label,
                    String::from_utf8_lossy(&out.stdout).trim()
                );
                continue;
            }
            Err(err) => {
                eprintln!("nvidia-smi not available ({err}): measuring vramscope alone");
                return None;
            }
        }
        let child = Command::new("nvidia-smi")
            .args([
                &format!("--query-gpu={fields}"),
                "--format=csv",
                "-lms",
                &interval_ms.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        return Some(RunningSmi {
            label: query.label,
            fields,
            child,
            start_cpu_s: 0.0,
            start_stat_cpu_s: None,
        });
    }
    None
}

/// Starts the given nvidia-smi configurations, waits for their start-up, and opens their window.
fn start_smis(interval_ms: u64, queries: &[SmiQuery]) -> Result<Vec<RunningSmi>, String> {
    let mut running: Vec<RunningSmi> = queries
        .iter()
        .filter_map(|query| start_nvidia_smi(interval_ms, query))
        .collect();
    // Let nvidia-smi finish its own start-up before the window opens.
    std::thread::sleep(Duration::from_secs(2));
    for smi in &mut running {
        smi.open_window()?;
    }
    Ok(running)
}

fn finish_smis(running: Vec<RunningSmi>) -> Result<Vec<SmiCost>, String> {
    running.into_iter().map(RunningSmi::finish).collect()
}

/// Calls `tick` every `interval_ms` for `seconds`; returns the wall time and each tick's wall
/// time in microseconds.
fn tick_loop(options: &Options, mut tick: impl FnMut()) -> (f64, Vec<f64>) {
    let interval = Duration::from_millis(options.interval_ms);
    let start = Instant::now();
    let end = start + Duration::from_secs(options.seconds);
    let mut next_tick = start;
    let mut tick_us = Vec::new();
    while Instant::now() < end {
        let before = Instant::now();
        tick();
        tick_us.push(before.elapsed().as_secs_f64() * 1e6);
        next_tick += interval;
        if let Some(wait) = next_tick.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    (start.elapsed().as_secs_f64(), tick_us)
}

fn measure(
    source: &mut NvmlSource,
    options: &Options,
    label: &'static str,
    slow_every_tick: bool,
) -> Result<Measurement, String> {
    let smis = start_smis(options.interval_ms, &[SMI_FULL, SMI_ISSUE])?;
    let cpu_start = own_cpu_s();
    let thread_start = thread_cpu_s();
    let events_start = event_thread_cpu_s();
    let reads_start = source.process_list_reads();
    let mut last_slow: Option<Instant> = None;
    let (wall_s, poll_us) = tick_loop(options, || {
        let slow = slow_every_tick
            || last_slow.is_none_or(|t| t.elapsed() >= Duration::from_millis(SLOW_TIER_MS));
        if slow {
            last_slow = Some(Instant::now());
        }
        std::hint::black_box(source.poll(now_unix_ms(), Tiers { fast: true, slow }));
    });
    let vramscope_cpu_s = own_cpu_s() - cpu_start;
    let poll_thread_cpu_s = thread_cpu_s() - thread_start;
    let event_thread_cpu_s = event_thread_cpu_s()
        .zip(events_start)
        .map(|(end, start)| end - start);
    let process_list_reads = source.process_list_reads() - reads_start;
    let smi = finish_smis(smis)?;
    let poll_us = common::Samples::from_values(poll_us);
    Ok(Measurement {
        label,
        interval_ms: options.interval_ms,
        wall_s,
        polls: poll_us.len() as u64,
        vramscope_cpu_s,
        poll_thread_cpu_s,
        event_thread_cpu_s,
        poll_p50_us: poll_us.median(),
        poll_p99_us: poll_us.percentile(0.99),
        process_list_reads,
        smi,
    })
}

/// What one tick of a given set of calls costs the polling thread, with nvidia-smi (`full`)
/// side by side.
struct Composition {
    label: &'static str,
    ticks: u64,
    wall_s: f64,
    /// CPU of the thread making the calls.
    thread_cpu_s: f64,
    /// CPU of this whole process (for the source: its event thread too).
    process_cpu_s: f64,
    /// Process-list reads in the window (the source's compositions).
    process_list_reads: Option<u64>,
    smi: Vec<SmiCost>,
}

impl Composition {
    fn us_per_tick(&self) -> f64 {
        1e6 * self.thread_cpu_s / self.ticks.max(1) as f64
    }
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "label": self.label,
            "ticks": self.ticks,
            "wall_s": self.wall_s,
            "thread_cpu_us_per_tick": self.us_per_tick(),
            "thread_cpu_ms_per_s": 1000.0 * self.thread_cpu_s / self.wall_s,
            "process_cpu_ms_per_s": 1000.0 * self.process_cpu_s / self.wall_s,
            "process_list_reads": self.process_list_reads,
            "nvidia_smi": self.smi.iter().map(|smi| smi.json(self.wall_s, self.thread_cpu_s)).collect::<Vec<_>>(),
        })
    }
}

/// The four compositions (see the module doc), each for `--seconds` at `--interval-ms`: a table
/// on stdout and JSON to `--out`.
fn run_compositions(source: &mut NvmlSource, options: &Options) -> ExitCode {
    use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
    let nvml = match nvml_wrapper::Nvml::init() {
        Ok(nvml) => nvml,
        Err(err) => {
            eprintln!("sampler bench: NVML could not be initialized: {err}");
            return ExitCode::FAILURE;
        }
    };
    let gpus: Vec<_> = match nvml
        .device_count()
        .and_then(|count| (0..count).map(|i| nvml.device_by_index(i)).collect())
    {
        Ok(gpus) => gpus,
        Err(err) => {
            eprintln!("sampler bench: GPUs could not be opened: {err}");
            return ExitCode::FAILURE;
        }
    };
    let fast = Tiers {
        fast: true,
        slow: false,
    };
    let mut results = Vec::new();
    for label in COMPOSITIONS {
        if !options.configs.iter().any(|c| c == label) {
            continue;
        }
        let result = match label {
            "memory" => composition(options, label, None, || {
                for gpu in &gpus {
                    std::hint::black_box(gpu.memory_info().ok());
                }
            }),
            "basic" => composition(options, label, None, || {
                for gpu in &gpus {
                    std::hint::black_box((
                        gpu.memory_info().ok(),
                        gpu.utilization_rates().ok(),
                        gpu.temperature(TemperatureSensor::Gpu).ok(),
                        gpu.power_usage().ok(),
                    ));
                }
            }),
            _ => {
                let every_tick = label == "fast-every-tick";
                source.set_process_refresh_max_ms(if every_tick {
                    0
                } else {
                    vramscope_gpu::nvml::DEFAULT_PROCESS_REFRESH_MAX_MS
                });
                let reads_start = source.process_list_reads();
                let reads = std::cell::Cell::new(0);
                composition(options, label, Some(&reads), || {
                    std::hint::black_box(source.poll(now_unix_ms(), fast));
                    reads.set(source.process_list_reads() - reads_start);
                })
            }
        };
        match result {
            Ok(result) => {
                let smi: Vec<String> = result
                    .smi
                    .iter()
                    .map(|smi| smi.text(result.wall_s, result.thread_cpu_s))
                    .collect();
                println!(
                    "{:<16} {} ticks, thread CPU {:>6.1} µs/tick = {:.2} ms/s (process {:.2} ms/s), process-list reads {}; {}",
                    result.label,
                    result.ticks,
                    result.us_per_tick(),
                    1000.0 * result.thread_cpu_s / result.wall_s,
                    1000.0 * result.process_cpu_s / result.wall_s,
                    result
                        .process_list_reads
                        .map_or_else(|| "n/a".to_owned(), |r| r.to_string()),
                    if smi.is_empty() {
                        "nvidia-smi n/a".to_owned()
                    } else {
                        smi.join("; ")
                    }
                );
                results.push(result);
            }
            Err(err) => {
                eprintln!("sampler bench: {label}: {err}");
                return ExitCode::FAILURE;
            }
        }
    }
    source.set_process_refresh_max_ms(vramscope_gpu::nvml::DEFAULT_PROCESS_REFRESH_MAX_MS);
    let json = serde_json::Value::Array(results.iter().map(Composition::json).collect());
    write_json(options.out.as_deref(), &json)
}

/// Runs `tick` at `--interval-ms` for `--seconds` with nvidia-smi (`full`) side by side.
fn composition(
    options: &Options,
    label: &'static str,
    process_list_reads: Option<&std::cell::Cell<u64>>,
    tick: impl FnMut(),
) -> Result<Composition, String> {
    let smis = start_smis(options.interval_ms, &[SMI_FULL])?;
    let cpu_start = own_cpu_s();
    let thread_start = thread_cpu_s();
    let (wall_s, tick_us) = tick_loop(options, tick);
    let thread_cpu_s = thread_cpu_s() - thread_start;
    let process_cpu_s = own_cpu_s() - cpu_start;
    Ok(Composition {
        label,
        ticks: tick_us.len() as u64,
        wall_s,
        thread_cpu_s,
        process_cpu_s,
        process_list_reads: process_list_reads.map(std::cell::Cell::get),
        smi: finish_smis(smis)?,
    })
}

/// Writes `vramscope-memory.csv` and `vramscope-processes.csv` under `dir`; returns the number
/// of device rows.
fn record_csv(source: &mut NvmlSource, dir: &Path, options: &Options) -> Result<u64, String> {
    let (mut memory, mut processes) = create_csv_files(dir)?;
    let interval = Duration::from_millis(options.interval_ms);
    let start = Instant::now();
    let end = start + Duration::from_secs(options.seconds);
    let mut next_tick = start;
    let mut rows = 0;
    while Instant::now() < end {
        let batch = source.poll(
            now_unix_ms(),
            Tiers {
                fast: true,
                slow: false,
            },
        );
        for sample in &batch.devices {
            rows += u64::from(write_memory_row(&mut memory, sample)?);
        }
        for p in batch.processes.iter().flatten() {
            let kind = p.kind.label();
            write_process_row(
                &mut processes,
                p.t_ms,
                p.device_index,
                p.pid,
                &p.name,
                kind,
                p.used_bytes,
            )?;
        }
        next_tick += interval;
        if let Some(wait) = next_tick.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    memory.flush().map_err(csv_error)?;
    processes.flush().map_err(csv_error)?;
    Ok(rows)
}

/// Converts a `.vramcap` into the same two CSV files.
fn capture_to_csv(path: &Path, dir: &Path) -> Result<u64, String> {
    let capture =
        vramscope_core::formats::vramcap::read_file(path).map_err(|err| err.to_string())?;
    let (mut memory, mut processes) = create_csv_files(dir)?;
    let mut rows = 0;
    for sample in capture.series.iter().flat_map(|s| s.iter()) {
        rows += u64::from(write_memory_row(&mut memory, &sample)?);
    }
    for track in &capture.processes {
        for (&t_ms, &used) in track.t_ms.iter().zip(&track.used_bytes) {
            let kind = track.kind.label();
            write_process_row(
                &mut processes,
                t_ms,
                track.device_index,
                track.pid,
                &track.name,
                kind,
                used,
            )?;
        }
    }
    memory.flush().map_err(csv_error)?;
    processes.flush().map_err(csv_error)?;
    Ok(rows)
}

type CsvFile = BufWriter<File>;

fn csv_error(err: std::io::Error) -> String {
    format!("writing CSV: {err}")
}

/// Creates `vramscope-memory.csv` and `vramscope-processes.csv` under `dir`, headers written.
fn create_csv_files(dir: &Path) -> Result<(CsvFile, CsvFile), String> {
    std::fs::create_dir_all(dir)
        .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    let open = |name: &str, header: &str| -> Result<CsvFile, String> {
        let path = dir.join(name);
        let mut file = File::create(&path)
            .map(BufWriter::new)
            .map_err(|err| format!("cannot create {}: {err}", path.display()))?;
        writeln!(file, "{header}").map_err(csv_error)?;
        Ok(file)
    };
    Ok((
        open(
            "vramscope-memory.csv",
            "t_ms,device,used_bytes,reserved_bytes,free_bytes,total_bytes",
        )?,
        open(
            "vramscope-processes.csv",
            "t_ms,device,pid,name,kind,used_bytes",
        )?,
    ))
}

/// Writes one device sample's memory; returns whether it had any.
fn write_memory_row(file: &mut CsvFile, sample: &DeviceSample) -> Result<bool, String> {
    let Some(m) = sample.memory else {
        return Ok(false);
    };
    writeln!(
        file,
        "{},{},{},{},{},{}",
        sample.t_ms,
        sample.device_index,
        m.used_bytes,
        m.reserved_bytes,
        m.free_bytes,
        m.total_bytes
    )
    .map_err(csv_error)?;
    Ok(true)
}

fn write_process_row(
    file: &mut CsvFile,
    t_ms: i64,
    device_index: u32,
    pid: u32,
    name: &str,
    kind: &str,
    used_bytes: Option<u64>,
) -> Result<(), String> {
    let used = used_bytes.map(|b| b.to_string()).unwrap_or_default();
    let name = name.replace(',', " ");
    writeln!(file, "{t_ms},{device_index},{pid},{name},{kind},{used}").map_err(csv_error)
}
