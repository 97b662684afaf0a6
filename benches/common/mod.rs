//! Measuring helpers shared by the benches, so that every number in `docs/benchmarks.md` is a
//! median or percentile computed the same way. Each bench includes this file with
//! `#[path = "common/mod.rs"] mod common;`.
#![allow(
    dead_code,
    reason = "each bench binary uses a different part of this module"
)]

use std::time::{Duration, Instant};

/// Whether this is a measuring run (`cargo bench` passes `--bench`). `cargo test --all-targets`
/// runs every bench binary without it: the benches then do a quick smoke run.
pub fn measuring() -> bool {
    std::env::args().any(|arg| arg == "--bench")
}

/// The value at `fraction` (0 = smallest, 0.5 = median, 1 = largest) of `sorted`, by the nearest
/// rank: index `round((len - 1) × fraction)`. For the median that is the middle value, the upper
/// one of an even count. `None` when there are no values.
pub fn percentile<T: Copy>(sorted: &[T], fraction: f64) -> Option<T> {
    let last = sorted.len().checked_sub(1)?;
    let index = (last as f64 * fraction.clamp(0.0, 1.0)).round() as usize;
    sorted.get(index.min(last)).copied()
}

/// Timings (or any measurements) sorted once, for their median and percentiles.
pub struct Samples<T> {
    sorted: Vec<T>,
}

impl Samples<Duration> {
    /// Sorts `durations`.
    pub fn from_durations(mut durations: Vec<Duration>) -> Self {
        durations.sort();
        Samples { sorted: durations }
    }
}

impl Samples<f64> {
    /// Sorts `values` (NaN last).
    pub fn from_values(mut values: Vec<f64>) -> Self {
        values.sort_by(f64::total_cmp);
        Samples { sorted: values }
    }
}

impl<T: Copy + Default> Samples<T> {
    /// The value at `fraction` (see [`percentile`]); the default (zero) when there are none.
    pub fn percentile(&self, fraction: f64) -> T {
        percentile(&self.sorted, fraction).unwrap_or_default()
    }

    /// The middle value.
    pub fn median(&self) -> T {
        self.percentile(0.5)
    }

    /// The smallest value.
    pub fn min(&self) -> T {
        self.percentile(0.0)
    }

    /// The largest value.
    pub fn max(&self) -> T {
        self.percentile(1.0)
    }

    /// How many values there are.
    pub fn len(&self) -> usize {
        self.sorted.len()
    }
}

/// Runs `work` `runs` times (at least once); returns the wall times and the last run's result.
pub fn time_runs<T>(runs: usize, mut work: impl FnMut() -> T) -> (Samples<Duration>, T) {
    let mut times = Vec::with_capacity(runs.max(1));
    let mut started = Instant::now();
    let mut result = work();
    times.push(started.elapsed());
    for _ in 1..runs {
        // The previous result is dropped before the next run, as a caller dropping it would.
        drop(result);
        started = Instant::now();
        result = work();
        times.push(started.elapsed());
    }
    (Samples::from_durations(times), result)
}

/// Milliseconds, for printing.
pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// CPU time of the calling thread. The build machine is shared, so wall time partly measures
/// waiting for a core; CPU time measures the work.
#[cfg(target_os = "linux")]
pub fn thread_cpu_time() -> Duration {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a valid, writable timespec; the call only writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(time.tv_sec).unwrap_or(0),
        u32::try_from(time.tv_nsec).unwrap_or(0),
    )
}

/// This process's user + system CPU time.
#[cfg(target_os = "linux")]
pub fn process_cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct we pass; an all-zero rusage is a valid value.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// Peak resident memory of this process so far in KiB (`VmHWM` in `/proc/self/status`; Linux).
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
