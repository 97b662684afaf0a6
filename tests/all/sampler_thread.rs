//! The sampling thread with a real clock: rate, slow tier, skipping after overruns, reconfiguring,
//! stopping. Bounds are loose on purpose (CI shares 2 cores between many builds): these check
//! behaviour, not timing precision.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vramscope_core::model::{SampleBatch, SourceKind, UnixMs};
use vramscope_core::source::demo::DemoSource;
use vramscope_core::source::{Source, SourceDescription, Tiers};
use vramscope_gpu::sampler::{Sampler, SamplerConfig};

/// One poll as the test source saw it.
#[derive(Clone, Copy, Debug)]
struct Poll {
    at: Instant,
    tiers: Tiers,
}

/// A source that records its polls, can stall once, and reports when it is dropped.
struct RecordingSource {
    polls: Arc<Mutex<Vec<Poll>>>,
    stall_on_poll: Option<(usize, Duration)>,
    panic_on_poll: Option<usize>,
    dropped: Arc<AtomicBool>,
}

impl Source for RecordingSource {
    fn describe(&self) -> SourceDescription {
        SourceDescription::default()
    }

    fn poll(&mut self, _now_ms: UnixMs, tiers: Tiers) -> SampleBatch {
        let mut polls = self.polls.lock().expect("polls lock");
        polls.push(Poll {
            at: Instant::now(),
            tiers,
        });
        let count = polls.len();
        drop(polls);
        assert_ne!(
            self.panic_on_poll,
            Some(count),
            "simulated failure inside a source"
        );
        if let Some((n, stall)) = self.stall_on_poll
            && n == count
        {
            std::thread::sleep(stall);
        }
        SampleBatch::default()
    }
}

impl Drop for RecordingSource {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

struct Harness {
    polls: Arc<Mutex<Vec<Poll>>>,
    dropped: Arc<AtomicBool>,
    notified: Arc<AtomicUsize>,
    sampler: Sampler,
}

fn spawn(
    fast_interval_ms: u32,
    slow_interval_ms: u32,
    stall_on_poll: Option<(usize, Duration)>,
) -> Harness {
    spawn_failing(fast_interval_ms, slow_interval_ms, stall_on_poll, None)
}

/// Like [`spawn`], with a source that panics on poll number `panic_on_poll` (counting from 1).
fn spawn_failing(
    fast_interval_ms: u32,
    slow_interval_ms: u32,
    stall_on_poll: Option<(usize, Duration)>,
    panic_on_poll: Option<usize>,
) -> Harness {
    let polls = Arc::new(Mutex::new(Vec::new()));
    let dropped = Arc::new(AtomicBool::new(false));
    let notified = Arc::new(AtomicUsize::new(0));
    let source = RecordingSource {
        polls: Arc::clone(&polls),
        stall_on_poll,
        panic_on_poll,
        dropped: Arc::clone(&dropped),
    };
    let counter = Arc::clone(&notified);
    let sampler = Sampler::spawn(
        Box::new(source),
        SamplerConfig {
            fast_interval_ms,
            slow_interval_ms,
        },
        Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        }),
    );
    Harness {
        polls,
        dropped,
        notified,
        sampler,
    }
}

fn polls(recorded: &Mutex<Vec<Poll>>) -> Vec<Poll> {
    recorded.lock().expect("polls lock").clone()
}

#[test]
fn ticks_at_the_fast_rate_with_the_slow_tier_less_often_and_notifies_each_batch() {
    let harness = spawn(20, 200, None);
    std::thread::sleep(Duration::from_millis(1_000));
    let batches = harness.sampler.drain();
    let seen = polls(&harness.polls);
    let fast = seen.len();
    let slow = seen.iter().filter(|p| p.tiers.slow).count();
    // 50 ticks expected; allow a loaded machine to miss some, but never run faster than asked.
    assert!(
        (15..=52).contains(&fast),
        "{fast} fast ticks in 1 s at 20 ms"
    );
    assert!(
        (2..=7).contains(&slow),
        "{slow} slow ticks in 1 s at 200 ms"
    );
    assert!(
        seen.iter().all(|p| p.tiers.fast),
        "processes and memory are read every tick"
    );
    assert!(seen[0].tiers.slow, "the first tick reads the slow tier too");
    // A tick records its poll, then queues its batch: the batches drained are the polls seen
    // (read after the drain), less those of ticks that ran in between on a loaded machine.
    assert!(
        batches.len() <= fast && batches.len() >= 15,
        "{} batches, {fast} polls",
        batches.len()
    );
    harness.sampler.stop();
    // Stopped, every tick that ran notified once.
    assert_eq!(
        harness.notified.load(Ordering::SeqCst),
        polls(&harness.polls).len()
    );
}

#[test]
fn an_overrun_skips_missed_ticks_instead_of_bursting() {
    let stall = Duration::from_millis(200);
    let harness = spawn(20, 5_000, Some((3, stall)));
    std::thread::sleep(Duration::from_millis(600));
    harness.sampler.stop();
    let seen = polls(&harness.polls);
    let stalled_at = seen[2].at;
    let resumed: Vec<_> = seen.iter().filter(|p| p.at > stalled_at + stall).collect();
    assert!(!resumed.is_empty());
    // Ten ticks were missed; a bursting scheduler would fire them back to back right now.
    let burst = resumed
        .iter()
        .filter(|p| p.at < resumed[0].at + Duration::from_millis(15))
        .count();
    assert!(burst <= 2, "{burst} polls within 15 ms after the overrun");
}

#[test]
fn stop_is_prompt_even_with_a_long_interval_and_drop_stops_too() {
    let harness = spawn(60_000, 60_000, None);
    let first = harness.sampler.recv_timeout(Duration::from_secs(5));
    assert!(first.is_some(), "the first tick comes at once");
    let started = Instant::now();
    harness.sampler.stop();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "stop took {:?}",
        started.elapsed()
    );
    assert!(
        harness.dropped.load(Ordering::SeqCst),
        "the thread ended and dropped its source"
    );

    let harness = spawn(60_000, 60_000, None);
    let dropped = Arc::clone(&harness.dropped);
    let started = Instant::now();
    drop(harness);
    assert!(started.elapsed() < Duration::from_millis(500));
    assert!(dropped.load(Ordering::SeqCst));
}

#[test]
fn set_config_takes_effect_on_the_next_tick() {
    let harness = spawn(60_000, 60_000, None);
    assert!(
        harness
            .sampler
            .recv_timeout(Duration::from_secs(5))
            .is_some()
    );
    assert!(
        harness
            .sampler
            .recv_timeout(Duration::from_millis(200))
            .is_none(),
        "nothing for a minute at 60 s"
    );
    harness.sampler.set_config(SamplerConfig {
        fast_interval_ms: 20,
        slow_interval_ms: 60_000,
    });
    std::thread::sleep(Duration::from_millis(500));
    let fast = polls(&harness.polls).len();
    assert!(
        fast >= 10,
        "only {fast} ticks in 0.5 s after switching to 20 ms"
    );
    harness.sampler.stop();
}

#[test]
fn recv_timeout_waits_for_a_batch_and_gives_up_after_the_timeout() {
    let harness = spawn(100, 5_000, None);
    assert!(
        harness.sampler.is_running(),
        "a healthy source keeps running"
    );
    let started = Instant::now();
    let mut received = 0;
    while received < 3 {
        assert!(
            harness
                .sampler
                .recv_timeout(Duration::from_secs(5))
                .is_some()
        );
        received += 1;
    }
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "three ticks at 100 ms span 200 ms"
    );
    harness.sampler.set_config(SamplerConfig {
        fast_interval_ms: 60_000,
        slow_interval_ms: 60_000,
    });
    harness.sampler.drain();
    let waited = Instant::now();
    // At most one tick can still be due from the old schedule.
    let _ = harness.sampler.recv_timeout(Duration::from_millis(150));
    assert!(
        harness
            .sampler
            .recv_timeout(Duration::from_millis(150))
            .is_none()
    );
    assert!(waited.elapsed() >= Duration::from_millis(150));
}

#[test]
fn description_carries_start_time_and_interval_and_demo_batches_flow() {
    let before_ms = vramscope_core::model::now_unix_ms();
    let sampler = Sampler::spawn(
        Box::new(DemoSource::new(before_ms)),
        SamplerConfig {
            fast_interval_ms: 5,
            slow_interval_ms: 1_000,
        },
        Box::new(|| {}),
    );
    let meta = &sampler.description().meta;
    assert_eq!(meta.source, SourceKind::Demo);
    assert_eq!(meta.interval_ms, 20, "fast interval clamped to 20 ms");
    assert!(meta.started_ms >= before_ms && meta.started_ms <= before_ms + 5_000);
    assert_eq!(sampler.description().devices.len(), 2);
    let batch = sampler
        .recv_timeout(Duration::from_secs(5))
        .expect("a demo batch");
    assert_eq!(batch.devices.len(), 2);
    assert_eq!(batch.health.len(), 2, "first tick includes the slow tier");
    assert_eq!(sampler.dropped_batches(), 0);
    sampler.stop();
}

#[test]
fn a_source_that_panics_ends_the_thread_without_leaving_a_waiter_hanging() {
    let harness = spawn_failing(20, 5_000, None, Some(2));
    assert!(
        harness.sampler.recv_timeout(Duration::MAX).is_some(),
        "the first poll succeeds"
    );
    let started = Instant::now();
    assert!(harness.sampler.recv_timeout(Duration::MAX).is_none());
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        !harness.sampler.is_running(),
        "a consumer can tell the thread is gone"
    );
    harness.sampler.stop();
}
