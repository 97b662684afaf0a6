//! What live sampling costs: CPU time per second of wall time while `NvmlSource` polls at a
//! fixed rate, side by side with `nvidia-smi --query-gpu=… -lms N` sampling comparable fields
//! over the same window.
//!
//! `cargo bench --bench sampler -- [--seconds 30] [--interval-ms 100] [--configs tiers,everything]
//! [--profile-calls] [--out results.json]` runs each configuration for `--seconds`:
//! - `tiers`: fast tier every tick, slow tier every 5 s (what the app does);
//! - `everything`: fast and slow tier on every tick.
//!
//! vramscope's cost is this process's CPU time (`getrusage(RUSAGE_SELF)`, so the event thread
//! counts too; the polling and event threads are also reported apart); nvidia-smi's is its CPU
//! time from `/proc/<pid>/schedstat` (nanoseconds; `stat`'s 10 ms ticks where schedstat is
//! missing), read at the start and end of the same window. `--profile-calls` first prints the
//! cost of each NVML call and of whole polls.
//!
//! `--record-csv DIR` instead writes what the source reads (device memory and processes) at
//! `--interval-ms` for `--seconds` as CSV, for comparing a recording against nvidia-smi's log
//! (docs/gpu-verification.md); `--capture-csv FILE --csv-dir DIR` writes the same CSV files from
//! a `.vramcap` recorded by `vramscope record`.
//!
//! Without `--bench` (as `cargo test --all-targets` runs it) it only polls a few times, and on a
//! machine without an NVIDIA driver it prints why it cannot measure and exits successfully.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use vramscope::model::DeviceSample;
use vramscope::source::nvml::NvmlSource;
use vramscope::source::{Source, Tiers, now_unix_ms};

/// Fields `nvidia-smi --query-gpu` shares with what vramscope samples.
const SMI_FIELDS: &str = "timestamp,memory.used,memory.reserved,memory.free,memory.total,\
utilization.gpu,utilization.memory,temperature.gpu,power.draw,clocks.sm,clocks.mem,\
clocks_event_reasons.active,ecc.errors.corrected.volatile.total,\
ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.aggregate.total,\
ecc.errors.uncorrected.aggregate.total,retired_pages.sbe,retired_pages.dbe,retired_pages.pending,\
remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,\
remapped_rows.failure,persistence_mode";
/// Used when this driver's nvidia-smi rejects one of [`SMI_FIELDS`].
const SMI_FALLBACK_FIELDS: &str = "timestamp,memory.used,memory.reserved,memory.free,memory.total,\
utilization.gpu,utilization.memory,temperature.gpu,power.draw,clocks.sm,clocks.mem";

const SLOW_TIER_MS: u64 = 5_000;

struct Options {
    bench: bool,
    seconds: u64,
    interval_ms: u64,
    out: Option<PathBuf>,
    record_csv: Option<PathBuf>,
    capture_csv: Option<PathBuf>,
    csv_dir: Option<PathBuf>,
    profile_calls: bool,
    /// Which configurations to measure: `tiers`, `everything` or both.
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
            configs: vec!["tiers".to_owned(), "everything".to_owned()],
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value =
                |name: &str| args.next().cloned().ok_or(format!("{name} needs a value"));
            match arg.as_str() {
                "--bench" => options.bench = true,
                "--profile-calls" => options.profile_calls = true,
                "--configs" => {
                    options.configs = value("--configs")?.split(',').map(str::to_owned).collect();
                    if let Some(bad) = options
                        .configs
                        .iter()
                        .find(|c| !["tiers", "everything"].contains(&c.as_str()))
                    {
                        return Err(format!("--configs: unknown configuration {bad:?}"));
                    }
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
    if let Some(path) = &options.out {
        let json = serde_json::Value::Array(results.iter().map(Measurement::json).collect());
        if let Err(err) = std::fs::write(path, format!("{json:#}\n")) {
            eprintln!("sampler bench: cannot write {}: {err}", path.display());
            return ExitCode::FAILURE;
        }
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
        wall_us.sort_by(f64::total_cmp);
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
            wall_us[CALLS / 2]
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
    smi_fields: &'static str,
    smi_cpu_s: Option<f64>,
}

impl Measurement {
    fn vramscope_cpu_ms_per_s(&self) -> f64 {
        1000.0 * self.vramscope_cpu_s / self.wall_s
    }
    fn smi_cpu_ms_per_s(&self) -> Option<f64> {
        self.smi_cpu_s.map(|cpu| 1000.0 * cpu / self.wall_s)
    }
    fn ratio(&self) -> Option<f64> {
        self.smi_cpu_s
            .filter(|&cpu| cpu > 0.0)
            .map(|cpu| self.vramscope_cpu_s / cpu)
    }
    fn line(&self) -> String {
        let smi = self
            .smi_cpu_ms_per_s()
            .map_or_else(|| "n/a".to_owned(), |v| format!("{v:.2} ms/s"));
        let ratio = self
            .ratio()
            .map_or_else(|| "n/a".to_owned(), |r| format!("{r:.3}"));
        format!(
            "{:<10} interval {} ms, {:.1} s, {} polls: vramscope CPU {:.2} ms/s (polling thread {:.2}, event thread {}; poll p50 {:.0} µs, p99 {:.0} µs); nvidia-smi CPU {smi}; ratio {ratio}",
            self.label,
            self.interval_ms,
            self.wall_s,
            self.polls,
            self.vramscope_cpu_ms_per_s(),
            1000.0 * self.poll_thread_cpu_s / self.wall_s,
            self.event_thread_cpu_s.map_or_else(
                || "n/a".to_owned(),
                |cpu| format!("{:.2}", 1000.0 * cpu / self.wall_s)
            ),
            self.poll_p50_us,
            self.poll_p99_us,
        )
    }
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "label": self.label,
            "interval_ms": self.interval_ms,
            "wall_s": self.wall_s,
            "polls": self.polls,
            "vramscope_cpu_s": self.vramscope_cpu_s,
            "vramscope_cpu_ms_per_s": self.vramscope_cpu_ms_per_s(),
            "poll_thread_cpu_ms_per_s": 1000.0 * self.poll_thread_cpu_s / self.wall_s,
            "event_thread_cpu_ms_per_s": self.event_thread_cpu_s.map(|cpu| 1000.0 * cpu / self.wall_s),
            "poll_p50_us": self.poll_p50_us,
            "poll_p99_us": self.poll_p99_us,
            "nvidia_smi_fields": self.smi_fields,
            "nvidia_smi_cpu_s": self.smi_cpu_s,
            "nvidia_smi_cpu_ms_per_s": self.smi_cpu_ms_per_s(),
            "ratio": self.ratio(),
        })
    }
}

/// This process's user + system CPU time in seconds.
fn own_cpu_s() -> f64 {
    // SAFETY: getrusage only writes the struct we pass; an all-zero rusage is a valid value.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// The calling thread's CPU time in seconds (nanosecond clock, unlike /proc's 10 ms ticks).
fn thread_cpu_s() -> f64 {
    // SAFETY: clock_gettime only writes the struct we pass.
    let time = unsafe {
        let mut time: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time);
        time
    };
    time.tv_sec as f64 + time.tv_nsec as f64 / 1e9
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

/// Starts `nvidia-smi --query-gpu=… -lms interval` with its output discarded, trying the full
/// field list first and the basic one if this driver rejects a field.
fn start_nvidia_smi(interval_ms: u64) -> Option<(Child, &'static str)> {
    for fields in [SMI_FIELDS, SMI_FALLBACK_FIELDS] {
        let probe = Command::new("nvidia-smi")
            .args([&format!("--query-gpu={fields}"), "--format=csv"])
            .output();
        match probe {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                eprintln!(
                    "nvidia-smi rejected the field list ({}); trying fewer fields",
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
        return Some((child, fields));
    }
    None
}

fn measure(
    source: &mut NvmlSource,
    options: &Options,
    label: &'static str,
    slow_every_tick: bool,
) -> Result<Measurement, String> {
    let smi = start_nvidia_smi(options.interval_ms);
    // Let nvidia-smi finish its own start-up before the window opens.
    std::thread::sleep(Duration::from_secs(2));
    let interval = Duration::from_millis(options.interval_ms);
    let smi_start = match &smi {
        Some((child, _)) => Some(child_cpu_s(child.id())?),
        None => None,
    };
    let cpu_start = own_cpu_s();
    let thread_start = thread_cpu_s();
    let events_start = event_thread_cpu_s();
    let start = Instant::now();
    let end = start + Duration::from_secs(options.seconds);
    let mut next_tick = start;
    let mut last_slow: Option<Instant> = None;
    let mut poll_us = Vec::new();
    while Instant::now() < end {
        let slow = slow_every_tick
            || last_slow.is_none_or(|t| t.elapsed() >= Duration::from_millis(SLOW_TIER_MS));
        if slow {
            last_slow = Some(Instant::now());
        }
        let before = Instant::now();
        let batch = source.poll(now_unix_ms(), Tiers { fast: true, slow });
        poll_us.push(before.elapsed().as_secs_f64() * 1e6);
        std::hint::black_box(batch);
        next_tick += interval;
        if let Some(wait) = next_tick.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    let wall_s = start.elapsed().as_secs_f64();
    let vramscope_cpu_s = own_cpu_s() - cpu_start;
    let poll_thread_cpu_s = thread_cpu_s() - thread_start;
    let event_thread_cpu_s = event_thread_cpu_s()
        .zip(events_start)
        .map(|(end, start)| end - start);
    let (smi_cpu_s, smi_fields) = match smi {
        Some((mut child, fields)) => {
            let cpu = child_cpu_s(child.id()).map(|end| end - smi_start.unwrap_or(end));
            // Stopping our own child: it loops until killed.
            let _ = child.kill();
            let _ = child.wait();
            (Some(cpu?), fields)
        }
        None => (None, ""),
    };
    poll_us.sort_by(f64::total_cmp);
    let percentile = |p: f64| {
        let index = ((poll_us.len() as f64 - 1.0) * p).round() as usize;
        poll_us.get(index).copied().unwrap_or(f64::NAN)
    };
    Ok(Measurement {
        label,
        interval_ms: options.interval_ms,
        wall_s,
        polls: poll_us.len() as u64,
        vramscope_cpu_s,
        poll_thread_cpu_s,
        event_thread_cpu_s,
        poll_p50_us: percentile(0.5),
        poll_p99_us: percentile(0.99),
        smi_fields,
        smi_cpu_s,
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
    let capture = vramscope::formats::vramcap::read_file(path).map_err(|err| err.to_string())?;
    let (mut memory, mut processes) = create_csv_files(dir)?;
    let mut rows = 0;
    for sample in capture.series.iter().flat_map(|s| &s.samples) {
        rows += u64::from(write_memory_row(&mut memory, sample)?);
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
