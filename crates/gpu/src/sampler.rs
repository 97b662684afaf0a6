//! The background sampling thread: polls a [`Source`] on a fixed schedule in two tiers and queues
//! the batches for the UI and the recorder.
//!
//! The fast tier (memory, utilization, processes, ...) runs every `fast_interval_ms`; the slow tier
//! (BAR1, PCIe replay, remapped rows, aggregate ECC) rides along on the first fast tick at or after
//! each `slow_interval_ms`. Ticks are scheduled from a fixed origin so that they do not drift; when
//! a poll overruns, the missed ticks are skipped rather than fired in a burst. The thread waits on a
//! condition variable, so `stop` (or dropping the [`Sampler`]) takes effect at once, not after a
//! sleep.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use vramscope_core::model::SampleBatch;
use vramscope_core::model::now_unix_ms;
use vramscope_core::source::{Source, SourceDescription, Tiers};

/// Fastest fast-tier interval: below this NVML calls would eat a core.
pub const MIN_FAST_INTERVAL_MS: u32 = 20;
/// Slowest fast-tier interval.
pub const MAX_FAST_INTERVAL_MS: u32 = 60_000;
/// Slowest slow-tier interval.
pub const MAX_SLOW_INTERVAL_MS: u32 = 3_600_000;
/// Batches kept for a consumer that does not drain (a minimized window, a stalled recorder).
/// Past this the oldest are dropped, so memory stays bounded: about 3.6 hours at 250 ms.
pub const MAX_QUEUED_BATCHES: usize = 1 << 16;

/// How often the two tiers are polled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplerConfig {
    /// Fast tier period; clamped to [`MIN_FAST_INTERVAL_MS`]..=[`MAX_FAST_INTERVAL_MS`].
    pub fast_interval_ms: u32,
    /// Slow tier period; clamped to at least the fast period and at most [`MAX_SLOW_INTERVAL_MS`].
    pub slow_interval_ms: u32,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            fast_interval_ms: 250,
            slow_interval_ms: 5_000,
        }
    }
}

impl SamplerConfig {
    /// The configuration with both periods brought into their allowed ranges.
    pub fn clamped(self) -> Self {
        let fast_interval_ms = self
            .fast_interval_ms
            .clamp(MIN_FAST_INTERVAL_MS, MAX_FAST_INTERVAL_MS);
        SamplerConfig {
            fast_interval_ms,
            slow_interval_ms: self
                .slow_interval_ms
                .clamp(fast_interval_ms, MAX_SLOW_INTERVAL_MS),
        }
    }

    fn fast(&self) -> Duration {
        Duration::from_millis(u64::from(self.fast_interval_ms))
    }

    fn slow(&self) -> Duration {
        Duration::from_millis(u64::from(self.slow_interval_ms))
    }
}

/// State shared between the sampling thread and its owner.
struct Shared {
    state: Mutex<State>,
    /// Wakes the sampling thread: stop requested or configuration changed.
    control_changed: Condvar,
    /// Wakes consumers waiting in [`Sampler::recv_timeout`].
    batch_queued: Condvar,
}

struct State {
    config: SamplerConfig,
    /// Bumped by every `set_config`, so the thread notices a change while it waits.
    config_generation: u64,
    stop: bool,
    /// Set when the sampling thread has ended, normally or by a panic in the source.
    finished: bool,
    queue: VecDeque<SampleBatch>,
    dropped_batches: u64,
}

impl Shared {
    /// Locks the state. A panic on the other side while holding the lock leaves plain data that is
    /// still consistent, so a poisoned lock is used as is rather than propagating the panic.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A running sampling thread. Dropping it stops and joins the thread.
pub struct Sampler {
    description: SourceDescription,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Starts the sampling thread. `on_batch` is called after each batch is queued (the UI passes a
    /// closure that calls `ctx.request_repaint()`).
    pub fn spawn(
        source: Box<dyn Source>,
        config: SamplerConfig,
        on_batch: Box<dyn Fn() + Send>,
    ) -> Sampler {
        let config = config.clamped();
        let mut description = source.describe();
        description.meta.started_ms = now_unix_ms();
        description.meta.interval_ms = config.fast_interval_ms;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                config,
                config_generation: 0,
                stop: false,
                finished: false,
                queue: VecDeque::new(),
                dropped_batches: 0,
            }),
            control_changed: Condvar::new(),
            batch_queued: Condvar::new(),
        });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("vramscope-sampler".to_owned())
            .spawn(move || {
                let _finished = FinishedGuard(&thread_shared);
                run(source, &thread_shared, on_batch);
            });
        let thread = match thread {
            Ok(handle) => Some(handle),
            Err(err) => {
                // Without a thread there is nothing to sample with; the UI shows an empty, idle view.
                log::error!("could not start the sampling thread: {err}");
                None
            }
        };
        Sampler {
            description,
            shared,
            thread,
        }
    }

    /// The source's devices and metadata, with `started_ms` and `interval_ms` filled in.
    pub fn description(&self) -> &SourceDescription {
        &self.description
    }

    /// Every batch queued since the last call, oldest first. Never blocks on the sampler.
    pub fn drain(&self) -> Vec<SampleBatch> {
        self.shared.lock().queue.drain(..).collect()
    }

    /// The oldest queued batch, waiting up to `timeout` for one (for the headless recorder).
    /// A timeout too large to represent (`Duration::MAX`) waits until a batch comes.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<SampleBatch> {
        let deadline = Instant::now().checked_add(timeout);
        let mut state = self.shared.lock();
        loop {
            if let Some(batch) = state.queue.pop_front() {
                return Some(batch);
            }
            let now = Instant::now();
            let remaining = match deadline {
                Some(deadline) if now >= deadline => return None,
                Some(deadline) => deadline - now,
                None => Duration::from_secs(3_600),
            };
            if state.finished || self.thread.is_none() {
                return None;
            }
            state = match self.shared.batch_queued.wait_timeout(state, remaining) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    /// Whether the sampling thread is still polling. It only ends on its own when the source
    /// panics (or the thread could not start), so a consumer that sees `false` before calling
    /// [`Sampler::stop`] knows no more batches will come and can stop with an error.
    pub fn is_running(&self) -> bool {
        self.thread.is_some() && !self.shared.lock().finished
    }

    /// Batches dropped because nobody drained the queue (see [`MAX_QUEUED_BATCHES`]).
    pub fn dropped_batches(&self) -> u64 {
        self.shared.lock().dropped_batches
    }

    /// Changes the intervals; the next tick comes one new fast interval after the previous tick.
    pub fn set_config(&self, config: SamplerConfig) {
        let mut state = self.shared.lock();
        state.config = config.clamped();
        state.config_generation += 1;
        drop(state);
        self.shared.control_changed.notify_all();
    }

    /// Stops the thread and waits for it to finish its current poll.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.lock().stop = true;
        self.shared.control_changed.notify_all();
        self.shared.batch_queued.notify_all();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            log::error!("the sampling thread panicked");
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Marks the thread finished when dropped, which also happens when the source panics, so that a
/// consumer waiting in [`Sampler::recv_timeout`] is woken instead of waiting forever.
struct FinishedGuard<'a>(&'a Shared);

impl Drop for FinishedGuard<'_> {
    fn drop(&mut self) {
        self.0.lock().finished = true;
        self.0.batch_queued.notify_all();
    }
}

/// The next tick of a schedule with period `period` that started at `origin`, strictly after
/// `after`: ticks missed during an overrun are skipped, and the grid never drifts.
fn next_tick(origin: Instant, period: Duration, after: Instant) -> Instant {
    let period_ns = period.as_nanos().max(1);
    let elapsed_ns = after.saturating_duration_since(origin).as_nanos();
    let ticks = elapsed_ns / period_ns + 1;
    let offset_ns = u64::try_from(ticks * period_ns).unwrap_or(u64::MAX);
    origin + Duration::from_nanos(offset_ns)
}

/// The sampling thread's loop.
fn run(mut source: Box<dyn Source>, shared: &Shared, on_batch: Box<dyn Fn() + Send>) {
    let mut state = shared.lock();
    let mut config = state.config;
    let mut generation = state.config_generation;
    drop(state);

    // Fast ticks lie on a grid from `fast_origin`; the slow tier is due at `next_slow`.
    let mut fast_origin = Instant::now();
    let mut next_fast = fast_origin;
    let mut next_slow = fast_origin;
    let mut last_tick = fast_origin;
    loop {
        // Wait for the next tick, a stop, or a new configuration.
        state = shared.lock();
        loop {
            if state.stop {
                return;
            }
            if state.config_generation != generation {
                config = state.config;
                generation = state.config_generation;
                fast_origin = last_tick;
                next_fast = last_tick + config.fast();
                next_slow = next_slow.min(last_tick + config.slow());
            }
            let now = Instant::now();
            if now >= next_fast {
                break;
            }
            state = match shared.control_changed.wait_timeout(state, next_fast - now) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        drop(state);

        let tick = Instant::now();
        // Half a fast period of slack, so that wake-up jitter does not push the slow tier onto
        // the following fast tick.
        let slow = tick + config.fast() / 2 >= next_slow;
        let batch = source.poll(now_unix_ms(), Tiers { fast: true, slow });
        if slow {
            next_slow = next_tick(next_slow, config.slow(), tick);
        }
        last_tick = tick;
        next_fast = next_tick(fast_origin, config.fast(), Instant::now());

        let mut state = shared.lock();
        if state.queue.len() >= MAX_QUEUED_BATCHES {
            state.queue.pop_front();
            if state.dropped_batches == 0 {
                log::warn!("sample queue full ({MAX_QUEUED_BATCHES} batches): dropping the oldest");
            }
            state.dropped_batches += 1;
        }
        state.queue.push_back(batch);
        drop(state);
        shared.batch_queued.notify_all();
        on_batch();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_clamped() {
        let tiny = SamplerConfig {
            fast_interval_ms: 1,
            slow_interval_ms: 0,
        };
        assert_eq!(
            tiny.clamped(),
            SamplerConfig {
                fast_interval_ms: 20,
                slow_interval_ms: 20
            }
        );
        let huge = SamplerConfig {
            fast_interval_ms: u32::MAX,
            slow_interval_ms: u32::MAX,
        };
        assert_eq!(
            huge.clamped(),
            SamplerConfig {
                fast_interval_ms: 60_000,
                slow_interval_ms: 3_600_000
            }
        );
        assert_eq!(SamplerConfig::default().clamped(), SamplerConfig::default());
    }

    #[test]
    fn next_tick_skips_missed_ticks_on_the_same_grid() {
        let origin = Instant::now();
        let period = Duration::from_millis(100);
        assert_eq!(next_tick(origin, period, origin), origin + period);
        // An overrun to 350 ms lands on 400 ms, not on 200 ms (no burst) and not on 450 ms (no drift).
        let late = origin + Duration::from_millis(350);
        assert_eq!(
            next_tick(origin, period, late),
            origin + Duration::from_millis(400)
        );
        let exactly = origin + Duration::from_millis(200);
        assert_eq!(
            next_tick(origin, period, exactly),
            origin + Duration::from_millis(300)
        );
    }
}
