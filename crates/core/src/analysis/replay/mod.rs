//! What-if replay: runs a snapshot's allocator trace again through a model of PyTorch's CUDA
//! caching allocator under other `PYTORCH_CUDA_ALLOC_CONF` settings (and caps), to tell which
//! change would have avoided an out-of-memory error, and by how much.
//!
//! The trace is read as the program's requests: every `alloc` asks for its unrounded size on
//! its stream, every `free_requested` gives a block back (waiting for other streams when the
//! trace shows its `free_completed` later), `empty_cache()` calls are recognised by their stacks
//! or by segment releases that no request needed, and a recorded `oom` is a request that failed.
//! Everything else the real allocator did (segments, splits, releases, retries) is what the model
//! decides again under the new settings.
//!
//! Every answer carries a self-check: replayed under the snapshot's own recorded settings, the
//! model must hand out the same addresses the trace shows, run out where the real run ran out,
//! and end in the snapshot's final state, segment by segment and block by block. A replay that
//! disagrees says where, and its results are marked unreliable.
//!
//! Approximated (said in the report when they matter): when another stream's work on a
//! cross-stream free finished is taken from the trace (`free_completed`), also under settings
//! that would not have synchronised; the memory the device could give the process is learned
//! from the real run's first out-of-memory event (free memory then + reserved) and assumed
//! constant.
//!
//! Private pools (CUDA graphs, `torch.cuda.MemPool`) are modelled: a request goes to the pool
//! the real run routed it to (the trace's `pool_id` where it records one, else the pool of the
//! segment its address lies in, segments that last to the end taking the snapshot's
//! `segment_pool_id`; routing depends on the program, not on the settings), blocks stay in their
//! pool after the capture, and a pool's cached segments are released only once the trace shows
//! the program released the pool (a segment of it freed).

mod allocator;
pub mod conf;

use std::ops::ControlFlow;
use std::sync::{Arc, OnceLock};

use foldhash::HashMap;
use foldhash::HashMapExt;
use foldhash::HashSet;

use crate::analysis::allocator_rules::AllocatorRules;
use crate::analysis::timetravel::{AllocatorState, BlockStatus, StateSegment, TimeTravel};
use crate::model::allocator::{
    AllocatorSnapshot, DeviceTrace, PoolId, PoolKind, StackId, TraceAction,
};
use crate::model::{GIB, MIB, format_bytes};

pub use allocator::{AddressHints, Limits, ModelOom, ReusedRange, SegmentHints};
use allocator::{AllocatorModel, BlockHandle, ChunkRuleRecord, pool_index};
pub use conf::{AllocConf, ConfError};

/// Free device memory this close to a request is no proof of room: the driver maps memory in
/// 2 MiB pages and takes its page tables from the same memory, so a cudaMalloc of N bytes can
/// fail on a full device that reports a little more than N free (seen on an H100: 20.0 MiB
/// refused with 20.2 MiB free and no cap anywhere, docs/gpu-verification/run-corpus/). A cap is
/// inferred only when more than this is free beyond the request: four pages.
pub const DRIVER_SLACK_BYTES: u64 = 8 << 20;

/// Virtual address space an expandable segment reserves when the device's memory is not known:
/// PyTorch reserves 1⅛ × device memory; 1 TiB exceeds that for every GPU made so far.
const DEFAULT_EXPANDABLE_VA_BYTES: u64 = 1 << 40;
/// How often (in events) a replay reports progress and checks for cancellation.
const PROGRESS_EVENTS: usize = 1 << 16;

/// C++ frames of PyTorch's code that catches an out-of-memory error on a scratch buffer and
/// tries again with one that needs less (each entry: parts the frame's name contains). A cuDNN
/// convolution's workspace requested under `at::native::run_single_conv` (cuDNN v8 API,
/// `aten/src/ATen/native/cudnn/Conv_v8.cpp`: a cached plan, the heuristics' `try_configs`, the
/// benchmark's `generate_and_filter_plans` and `try_plans`) or under v7's
/// `AlgoIterator::try_all` (`Conv_v7.cpp`). Seen on an H200 with PyTorch 2.11, each run going on
/// to the end (docs/gpu-verification/whatif-cpp-stacks/): 39 and 24 recorded failures under
/// `try_configs`, 24 under `generate_and_filter_plans` and 2 of a cached plan with
/// `cudnn.benchmark`, 3 under `try_all` with the v8 API off.
const RETRYING_FRAMES: &[&[&str]] = &[
    &["at::native::run_single_conv"],
    &["AlgoIterator<", ">::try_all"],
];

#[cfg(any(test, feature = "test-fixtures"))]
thread_local! {
    /// [`what_if`] calls on this thread: tests count how often opening a snapshot replays it.
    pub static WHAT_IF_CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Settings replayed on this thread (the self-check counts as one): tests count how many
    /// a step of [`WhatIfSteps`] replays.
    pub(crate) static SETTINGS_REPLAYED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// Trace events replayed on this thread, over every pass: tests count how many a step of
    /// [`WhatIfSteps`] replays.
    pub(crate) static EVENTS_REPLAYED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// [`TraceFacts`] learnt on this thread: a stepped sweep learns them once.
    static TRACE_FACTS_BUILT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// What to replay.
#[derive(Clone, Debug, PartialEq)]
pub struct WhatIfRequest {
    pub device: u32,
    /// Settings to try; empty means the sweep of [`sweep_candidates`].
    pub candidates: Vec<AllocConf>,
    /// Per-process cap in bytes (`set_per_process_memory_fraction` × device memory) for every
    /// replay, the self-check included; `None` lets the replay infer one when the real run was
    /// refused with memory still free on the device.
    pub cap_bytes: Option<u64>,
    /// Device memory in bytes, when known: sizes expandable segments' reservations.
    pub device_memory_bytes: Option<u64>,
}

/// Why no replay could be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayError {
    /// The snapshot has no trace for the device: history was not recorded.
    NoHistory { snapshot: String, device: u32 },
    /// The device is not in the snapshot.
    NoSuchDevice { device: u32, available: Vec<u32> },
    /// The caller cancelled.
    Cancelled,
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayError::NoHistory { snapshot, device } => write!(
                f,
                "{snapshot} has no allocation history for device {device}, so there is nothing \
                 to replay: record the job with torch.cuda.memory._record_memory_history() \
                 (e.g. max_entries=1000000) before the allocations you want to study, then dump \
                 the snapshot with torch.cuda.memory._dump_snapshot()"
            ),
            ReplayError::NoSuchDevice { device, available } => {
                let list: Vec<String> = available.iter().map(u32::to_string).collect();
                write!(
                    f,
                    "the snapshot has no device {device}; it has device(s) {}",
                    if list.is_empty() {
                        "none".to_string()
                    } else {
                        list.join(", ")
                    }
                )
            }
            ReplayError::Cancelled => write!(f, "the replay was cancelled"),
        }
    }
}

impl std::error::Error for ReplayError {}

/// Where the replay started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayStart {
    /// The trace begins with an empty allocator (history recorded from the start).
    Empty,
    /// The ring buffer wrapped (or history began late): the replay starts from the state
    /// reconstructed at the first recorded event; `exact` when that reconstruction reproduced
    /// the snapshot's final state.
    Seeded { segments: usize, exact: bool },
}

/// The self-check: does the model, under the snapshot's own settings, do what the real
/// allocator did?
#[derive(Clone, Debug, PartialEq)]
pub struct SelfCheck {
    /// Every check passed: the other settings' numbers can be trusted as far as the model goes.
    pub reliable: bool,
    /// The recorded settings the check ran under.
    pub recorded_conf: String,
    pub start: ReplayStart,
    /// Events of the trace.
    pub events: usize,
    /// Recorded `oom` events, and the events where the replay ran out.
    pub real_oom_events: Vec<usize>,
    pub replay_oom_events: Vec<usize>,
    /// The replay ended in the snapshot's final state (segments, blocks, sizes and addresses).
    pub final_state_matches: bool,
    /// The first event where the replay did something else than the real allocator.
    pub diverged_at: Option<usize>,
    /// What went wrong, in words (`None` when reliable).
    pub problem: Option<String>,
    /// Segments and blocks compared at the end.
    pub segments_compared: usize,
    pub blocks_compared: usize,
    /// The cap the check replayed under: the given cap when the trace fits under it, else the
    /// trace's own (inferred, or none); a given cap below what the trace itself reserved was
    /// not the recorded run's.
    pub cap_bytes: Option<u64>,
}

/// A recorded out-of-memory event, or the request a replay ran out on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OomPoint {
    pub event_index: usize,
    /// The rounded request.
    pub request_bytes: u64,
    /// The segment `cudaMalloc` was asked for (PyTorch's "Tried to allocate").
    pub segment_bytes: u64,
    /// Reserved and allocated bytes once the failure path had released what it could.
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    /// What the process was allowed: the cap, or the device's memory for the process.
    pub allowed_bytes: Option<u64>,
    /// Stack of the request (from the trace).
    pub stack: StackId,
}

/// Where the cap used by the replays came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapSource {
    /// No cap.
    None,
    /// Given by the caller.
    Given,
    /// The real run was refused with memory still free on the device, so a per-process cap
    /// refused it: every cap from `low_bytes` to `high_bytes` explains the trace. Replays use
    /// `high_bytes`; a verdict that would differ at `low_bytes` is marked uncertain.
    Inferred { low_bytes: u64, high_bytes: u64 },
}

/// The limits every replay ran against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitsUsed {
    pub cap_bytes: Option<u64>,
    pub cap_source: CapSource,
    /// Memory the device could give the process, learned from the first recorded OOM (free
    /// memory then plus reserved), `None` when the trace never ran out of device memory.
    pub device_limit_bytes: Option<u64>,
}

/// A replay that had to stop: the trace contradicts the state the model is in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incomplete {
    pub event_index: usize,
    pub reason: String,
}

/// The result of one setting.
#[derive(Clone, Debug, PartialEq)]
pub struct SettingOutcome {
    /// The setting as given (or built by the sweep).
    pub conf: String,
    /// This is the snapshot's own recorded setting.
    pub recorded: bool,
    pub peak_reserved_bytes: u64,
    pub peak_allocated_bytes: u64,
    /// First event at which reserved memory reached its peak.
    pub peak_event: usize,
    /// Reserved but not allocated at that moment (cached and fragmented memory).
    pub cached_at_peak_bytes: u64,
    pub segments_at_peak: u64,
    pub final_reserved_bytes: u64,
    /// Where it runs out, if it does.
    pub oom: Option<OomPoint>,
    /// Recorded OOM events this setting got past (the request succeeded).
    pub survived_real_ooms: usize,
    /// Recorded OOM events the real program caught and went on from that this setting ran
    /// into too: it went on as the real run did, so they are not where it runs out.
    pub shared_caught_ooms: usize,
    /// The cap was inferred and this verdict differs between its lowest and highest value.
    pub uncertain: bool,
    /// Peak reserved bytes (lowest, highest) over the GPU timings replayed, when some free in
    /// the trace waited for other streams' work: as the trace recorded it, and with that work
    /// finished by the allocator's next call (`None` when no free waited: the timing cannot
    /// change the replay).
    pub peak_reserved_range_bytes: Option<(u64, u64)>,
    /// Whether it runs out differs between those timings: the verdict depends on when the GPU
    /// finishes other streams' work.
    pub timing_uncertain: bool,
    /// The first request this setting could not serve that was a scratch buffer: the trace
    /// frees it before any other request or free, as a library's workspace (cuDNN's
    /// convolution workspace) is. PyTorch catches a failed cuDNN workspace and runs the convolution with an
    /// algorithm that needs less, so such a failure need not end the job; the replay goes on
    /// without the buffer, and `oom` holds only a failure past that doubt.
    pub scratch_oom: Option<OomPoint>,
    /// Every scratch buffer this setting could not serve was requested inside a loop of
    /// PyTorch's that catches the failure and tries again with less (see
    /// [`RETRYING_FRAMES`]), as the C++ frames of its stack show: the job goes on, so the
    /// failure casts no doubt. `false` when there was none, or a stack did not show it (a trace
    /// recorded with Python frames only).
    pub scratch_oom_caught: bool,
    /// The setting replayed again with segments placed in other orders, when the placement
    /// can decide whether it fits (see [`PlacementSpread`]); `None` when it cannot.
    pub placement: Option<PlacementSpread>,
    pub num_alloc_retries: u64,
    pub num_device_alloc: u64,
    pub num_device_free: u64,
    pub events_replayed: usize,
    pub incomplete: Option<Incomplete>,
    /// `garbage_collection_threshold` is set but there is no cap, so it has no effect (PyTorch
    /// collects only under `set_per_process_memory_fraction`).
    pub gc_without_cap: bool,
}

impl SettingOutcome {
    /// Ran the whole trace without running out (not even on a scratch buffer).
    pub fn runs(&self) -> bool {
        self.oom.is_none()
            && (self.scratch_oom.is_none() || self.scratch_oom_caught)
            && self.incomplete.is_none()
    }

    /// Whether it runs out is not settled: it depends on the exact (inferred) cap, on when
    /// the GPU finishes other streams' work, or on whether the program survives a failed
    /// scratch buffer (`scratch_oom`).
    pub fn verdict_uncertain(&self) -> bool {
        self.uncertain
            || self.timing_uncertain
            || self.placement_uncertain()
            || (self.only_scratch_failed() && !self.scratch_oom_caught)
    }

    /// Whether it runs out differs between the recorded run's placement of segments and
    /// another the driver could have chosen (see [`PlacementSpread`]).
    pub fn placement_uncertain(&self) -> bool {
        self.placement.is_some_and(|spread| {
            let ran_out = self.oom.is_some();
            spread.ran_out != if ran_out { spread.drawn } else { 0 }
        })
    }

    /// The peaks a real run can show: over the GPU timings replayed, widened by the drawn
    /// placements of segments when the placement decides whether it fits (`None`: one peak).
    pub fn peak_range_bytes(&self) -> Option<(u64, u64)> {
        let placement = self
            .placement
            .filter(|_| self.placement_uncertain())
            .map(|spread| spread.peak_range_bytes);
        match (self.peak_reserved_range_bytes, placement) {
            (Some(timing), Some(placement)) => {
                Some((timing.0.min(placement.0), timing.1.max(placement.1)))
            }
            (timing, placement) => timing.or(placement),
        }
    }

    /// It ran out only on scratch buffers a library may have caught (see `scratch_oom`).
    pub fn only_scratch_failed(&self) -> bool {
        self.oom.is_none() && self.scratch_oom.is_some() && self.incomplete.is_none()
    }

    /// Free room at the peak under the limit in force, when there is one.
    pub fn headroom_bytes(&self, limits: &LimitsUsed) -> Option<u64> {
        let allowed = limits.cap_bytes.or(limits.device_limit_bytes)?;
        Some(allowed.saturating_sub(self.peak_reserved_bytes))
    }
}

/// How many other placements of segments a setting is replayed under when the placement can
/// decide whether it fits.
pub const DRAWN_PLACEMENTS: u32 = 8;

/// The setting replayed with its segments where another run's driver could have put them.
/// Best fit gives a request the lowest-addressed of equal free blocks, so the order of
/// segments decides which stay whole and can be released under a cap. The replay places a new
/// segment as the driver was seen to (see [`TraceHints`] and `AllocatorModel::place_segment`),
/// but one of its choices the trace does not fix: where a segment made after a release goes
/// when released address space could hold it. The replay takes the smallest range that fits,
/// at its low end; the drawn placements go where the driver's 32 MiB chunks say (in 375 real
/// H200 runs they named the driver's choice 2,064 of 4,500 times; of the others fresh space
/// took 693, and no rule by range named more than 1,084) as often as the recorded run's driver
/// followed them, and otherwise choose at random. Where
/// a process's first segments go also differs between runs, but replayed from 6 real
/// placements of each of 9 workloads the verdicts never changed, while moving segments at
/// random changed verdicts that 6 or 7 real runs agreed on, so that is not drawn
/// (`docs/whatif-validation.md`, `scripts/whatif/placement_replay_check.py`). When a drawn
/// placement disagrees with the replay about running out, the verdict is uncertain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlacementSpread {
    /// Drawn placements replayed to the end (or to their out-of-memory).
    pub drawn: u32,
    /// How many of them ran out.
    pub ran_out: u32,
    /// Lowest and highest peak reserved over them and the recorded placement.
    pub peak_range_bytes: (u64, u64),
}

/// Everything a what-if replay found.
#[derive(Clone, Debug, PartialEq)]
pub struct WhatIfReport {
    pub snapshot: String,
    pub device: u32,
    pub events: usize,
    pub self_check: SelfCheck,
    pub limits: LimitsUsed,
    /// The recorded settings replayed as a what-if (the reference row).
    pub recorded: SettingOutcome,
    /// One per requested setting, ranked: those that run first, then by peak reserved.
    pub results: Vec<SettingOutcome>,
    /// Notes for the reader (settings skipped by the sweep and why, approximations in play).
    pub notes: Vec<String>,
}

/// The settings a sweep tries when none are given: the recorded settings with one change
/// each — expandable segments, `max_split_size_mb` around the failing (or largest) request,
/// garbage collection (only under a cap), and power-of-two rounding with 4 and 8 divisions.
pub fn sweep_candidates(travel: &TimeTravel, cap_known: bool) -> (Vec<AllocConf>, Vec<String>) {
    let recorded = AllocConf::recorded(travel.snapshot().settings.as_ref());
    let trace = travel.trace();
    // The failure the run ended with (earlier ones were caught by the program).
    let failing = trace
        .actions
        .iter()
        .rposition(|&a| a == TraceAction::Oom)
        .and_then(|i| trace.sizes_bytes.get(i).copied());
    let largest = trace
        .actions
        .iter()
        .zip(&trace.sizes_bytes)
        .filter(|(a, _)| **a == TraceAction::Alloc)
        .map(|(_, &s)| s)
        .max()
        .unwrap_or(0);
    let reference = failing.unwrap_or(largest);
    let mut changes = Vec::new();
    if !recorded.rules.expandable_segments {
        changes.push("expandable_segments:True".to_string());
    }
    // The largest power of two MiB at or below the reference request, so that the request
    // is oversize and big cached blocks stay whole; and its neighbours.
    let reference_mib = (reference / MIB).max(1);
    let floor_mib = 1u64 << (63 - reference_mib.leading_zeros());
    let mut split_values: Vec<u64> = [floor_mib / 2, floor_mib, floor_mib * 2]
        .into_iter()
        .map(|v| v.max(20))
        .collect();
    split_values.dedup();
    for value in split_values {
        if recorded.rules.max_split_size_bytes != Some(value * MIB) {
            changes.push(format!("max_split_size_mb:{value}"));
        }
    }
    let mut notes = Vec::new();
    if cap_known {
        changes.push("garbage_collection_threshold:0.6".to_string());
        changes.push("garbage_collection_threshold:0.8".to_string());
    } else {
        notes.push(
            "garbage_collection_threshold was not tried: PyTorch collects cached blocks only \
             under a per-process cap (set_per_process_memory_fraction); give --cap to try it"
                .to_string(),
        );
    }
    changes.push("roundup_power2_divisions:4".to_string());
    changes.push("roundup_power2_divisions:8".to_string());
    let candidates = changes
        .iter()
        .filter_map(|change| recorded.with_change(change).ok())
        .collect();
    (candidates, notes)
}

/// Replays `request` on a snapshot (builds its time travel first).
pub fn what_if_snapshot(
    snapshot: Arc<AllocatorSnapshot>,
    request: &WhatIfRequest,
    progress: &(dyn Fn(f32) -> bool + Sync),
) -> Result<WhatIfReport, ReplayError> {
    check_device(&snapshot, request.device)?;
    let travel = TimeTravel::new(snapshot, request.device);
    what_if(&travel, request, progress)
}

fn check_device(snapshot: &AllocatorSnapshot, device: u32) -> Result<(), ReplayError> {
    let has_device = snapshot.devices.iter().any(|d| d.device == device)
        || snapshot.traces.iter().any(|t| t.device == device);
    if has_device {
        return Ok(());
    }
    let mut available: Vec<u32> = snapshot.devices.iter().map(|d| d.device).collect();
    available.extend(snapshot.traces.iter().map(|t| t.device));
    available.sort_unstable();
    available.dedup();
    Err(ReplayError::NoSuchDevice { device, available })
}

/// Replays the trace of `travel` under the recorded settings (the self-check) and under every
/// requested setting. `progress` gets the fraction done (0..1) and returns false to cancel.
/// The settings are replayed side by side on the machine's cores; [`WhatIfSteps`] makes the
/// same report a range of events at a time, for the web page's single thread.
pub fn what_if(
    travel: &TimeTravel,
    request: &WhatIfRequest,
    progress: &(dyn Fn(f32) -> bool + Sync),
) -> Result<WhatIfReport, ReplayError> {
    #[cfg(any(test, feature = "test-fixtures"))]
    WHAT_IF_CALLS.with(|calls| calls.set(calls.get() + 1));
    let facts = replay_facts(travel, request)?;
    let input = ReplayInput::new(travel, &facts);
    let plan = SweepPlan::new(travel, request, &input);
    let total_runs = plan.total_runs();
    let done = std::sync::atomic::AtomicUsize::new(0);
    let events = input.trace.len().max(1);
    let run_progress = |position: usize| {
        let finished = done.load(std::sync::atomic::Ordering::Relaxed);
        progress((finished as f32 + position as f32 / events as f32) / total_runs as f32)
    };
    let finished_run = || done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let self_check = plan.self_check(&input, &run_progress)?;
    finished_run();
    let recorded_outcome = plan.outcome_of(&input, &plan.recorded, true, &run_progress)?;
    finished_run();
    let results = parallel_map(&plan.candidates, |conf| {
        let outcome = plan.outcome_of(&input, conf, false, &run_progress);
        finished_run();
        outcome
    })?;
    progress(1.0);
    Ok(plan.into_report(
        &input,
        request.device,
        self_check,
        recorded_outcome,
        results,
    ))
}

/// Checks the request against `travel` and learns what the replays need from the trace.
fn replay_facts(travel: &TimeTravel, request: &WhatIfRequest) -> Result<TraceFacts, ReplayError> {
    let snapshot = travel.snapshot();
    check_device(snapshot, request.device)?;
    if travel.is_empty() {
        return Err(ReplayError::NoHistory {
            snapshot: snapshot.name.clone(),
            device: request.device,
        });
    }
    Ok(TraceFacts::new(travel, request.device_memory_bytes))
}

/// [`what_if`] a range of events per [`WhatIfSteps::step`]: the plan (limits from the trace's
/// evidence, the settings to try), then the self-check, the recorded settings and each setting,
/// each a few passes over the trace made [`EVENTS_PER_STEP`] events at a time, so that the web
/// page can draw and answer Cancel in between. It runs the same code as [`what_if`] (one setting
/// after another instead of side by side), so the report is the same.
pub struct WhatIfSteps {
    request: WhatIfRequest,
    /// Learnt from the trace in the first step, used by every later one.
    facts: Option<TraceFacts>,
    plan: Option<SweepPlan>,
    self_check: Option<SelfCheck>,
    recorded: Option<SettingOutcome>,
    results: Vec<SettingOutcome>,
    /// The replay under way.
    current: Option<StepWork>,
    events_per_step: usize,
}

/// The replay a [`WhatIfSteps`] has under way.
enum StepWork {
    SelfCheck(Box<Pass>),
    Setting(Box<SettingReplay>),
}

impl std::fmt::Debug for WhatIfSteps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhatIfSteps")
            .field("request", &self.request)
            .field("settings_done", &self.results.len())
            .field("fraction_done", &self.fraction_done())
            .finish_non_exhaustive()
    }
}

impl WhatIfSteps {
    /// The steps of [`what_if`] for `request`; nothing is replayed yet.
    pub fn new(request: WhatIfRequest) -> Self {
        Self::with_events_per_step(request, EVENTS_PER_STEP)
    }

    /// [`WhatIfSteps::new`] replaying about `events_per_step` events per step (tests use
    /// small ranges to make many steps of a small trace).
    pub fn with_events_per_step(request: WhatIfRequest, events_per_step: usize) -> Self {
        WhatIfSteps {
            request,
            facts: None,
            plan: None,
            self_check: None,
            recorded: None,
            results: Vec::new(),
            current: None,
            events_per_step: events_per_step.max(1),
        }
    }

    /// How much of the work is done, from 0 to 1 (the number of settings is known once the
    /// plan is made, after the first step).
    pub fn fraction_done(&self) -> f32 {
        let Some(plan) = &self.plan else {
            return 0.0;
        };
        let done = 1
            + usize::from(self.self_check.is_some())
            + usize::from(self.recorded.is_some())
            + self.results.len();
        done as f32 / (3 + plan.candidates.len()) as f32
    }

    /// Does the next piece of work on `travel` (always the same one): the plan, or about
    /// `events_per_step` events of the replay under way. `Ok(Some(report))` once the last
    /// setting is replayed.
    pub fn step(&mut self, travel: &TimeTravel) -> Result<Option<WhatIfReport>, ReplayError> {
        let facts = match self.facts.take() {
            Some(facts) => facts,
            None => replay_facts(travel, &self.request)?,
        };
        let facts = self.facts.insert(facts);
        let input = ReplayInput::new(travel, facts);
        let Some(plan) = &self.plan else {
            #[cfg(any(test, feature = "test-fixtures"))]
            WHAT_IF_CALLS.with(|calls| calls.set(calls.get() + 1));
            self.plan = Some(SweepPlan::new(travel, &self.request, &input));
            return Ok(None);
        };
        let events = self.events_per_step;
        let Some(self_check) = &self.self_check else {
            let mut check = match self.current.take() {
                Some(StepWork::SelfCheck(check)) => check,
                _ => Box::new(plan.check_pass(&input)),
            };
            if input.advance(&mut check, events, &|_| true)? {
                self.self_check = Some(plan.self_check_of(&input, &check));
            } else {
                self.current = Some(StepWork::SelfCheck(check));
            }
            return Ok(None);
        };
        let recorded_row = self.recorded.is_none();
        let conf = if recorded_row {
            Some(&plan.recorded)
        } else {
            plan.candidates.get(self.results.len())
        };
        if let Some(conf) = conf {
            let mut replay = match self.current.take() {
                Some(StepWork::Setting(replay)) => replay,
                _ => Box::new(plan.setting_replay(&input, conf, recorded_row)),
            };
            let Some(outcome) = replay.advance(&input, events, &|_| true)? else {
                self.current = Some(StepWork::Setting(replay));
                return Ok(None);
            };
            let outcome = plan.finish_outcome(outcome);
            if recorded_row {
                self.recorded = Some(outcome);
            } else {
                self.results.push(outcome);
            }
        }
        let Some(recorded) = &self.recorded else {
            return Ok(None);
        };
        if self.results.len() < plan.candidates.len() {
            return Ok(None);
        }
        Ok(Some(plan.clone().into_report(
            &input,
            self.request.device,
            self_check.clone(),
            recorded.clone(),
            std::mem::take(&mut self.results),
        )))
    }
}

/// What every replay of one [`what_if`] request shares: the limits the trace's evidence gives,
/// the settings to try, the notes for the reader.
#[derive(Clone, Debug)]
struct SweepPlan {
    recorded: AllocConf,
    candidates: Vec<AllocConf>,
    notes: Vec<String>,
    /// The limits of the self-check (the trace's own when a given cap is below what the trace
    /// needed) and the cap it reports.
    check_limits: Limits,
    limits: LimitsUsed,
    run_limits: Limits,
    /// The given cap or that of a setting's `per_process_memory_fraction`.
    cap_given: Option<u64>,
    device_memory_bytes: Option<u64>,
    inferred_low: Option<u64>,
    /// Where the trace contradicts the snapshot's own state (time travel could not make the
    /// two agree): every replay stops there, since what follows rests on a state that did not
    /// exist.
    contradiction: Option<Incomplete>,
}

impl SweepPlan {
    fn new(travel: &TimeTravel, request: &WhatIfRequest, input: &ReplayInput) -> Self {
        let recorded = AllocConf::recorded(travel.snapshot().settings.as_ref());
        let mut notes = Vec::new();
        for conf in std::iter::once(&recorded).chain(&request.candidates) {
            if conf.memory_fraction.is_some()
                && request.cap_bytes.is_none()
                && request.device_memory_bytes.is_none()
            {
                notes.push(format!(
                    "per_process_memory_fraction in '{}' was not applied: the device's memory is \
                     not known (give --device-memory)",
                    conf.text
                ));
            }
        }
        // The limits the real run ran against, from the trace's own evidence (see
        // `ReplayInput::limit_evidence`); a cap given by the caller wins, as long as the trace
        // fits under it. A given cap below what the trace itself needed (see
        // `LimitEvidence::most_reserved_bytes`) cannot be the cap the recorded run ran under:
        // the self-check then replays under the trace's own limits and only the settings'
        // replays run under the given cap.
        let evidence = input.limit_evidence(&recorded.rules);
        let given_cap = cap_for(request.cap_bytes, request.device_memory_bytes, &recorded);
        let cap_is_recorded_runs = given_cap.is_none_or(|cap| cap >= evidence.most_reserved_bytes);
        let (cap_bytes, cap_source, device_limit_bytes) =
            limits_from_evidence(&evidence, given_cap);
        if let (Some(cap), false) = (given_cap, cap_is_recorded_runs) {
            notes.push(format!(
                "the recorded run needed up to {} reserved itself, more than the given cap of {}, \
                 so it did not run under that cap: the self-check replays the recorded settings \
                 under the trace's own limits, and only the settings' replays run under the given \
                 cap",
                format_bytes(evidence.most_reserved_bytes),
                format_bytes(cap)
            ));
        } else if let CapSource::Inferred {
            low_bytes,
            high_bytes,
        } = cap_source
        {
            notes.push(format!(
                "the real run was refused with {} still free on the device, so a per-process \
                 cap refused it; the trace fits any cap from {} to {}, and the replays use {} \
                 (give --cap for the exact value)",
                format_bytes(evidence.free_at_cap_refusal_bytes),
                format_bytes(low_bytes),
                format_bytes(high_bytes),
                format_bytes(high_bytes)
            ));
        }
        let (check_cap_bytes, _, check_device_limit_bytes) = if cap_is_recorded_runs {
            (cap_bytes, cap_source, device_limit_bytes)
        } else {
            limits_from_evidence(&evidence, None)
        };
        let check_limits = Limits {
            cap_bytes: check_cap_bytes,
            device_limit_bytes: check_device_limit_bytes,
            expandable_va_bytes: input.facts.expandable_va_bytes,
        };
        let (candidates, sweep_notes) = if request.candidates.is_empty() {
            sweep_candidates(travel, cap_bytes.is_some())
        } else {
            (request.candidates.clone(), Vec::new())
        };
        notes.extend(sweep_notes);
        let limits = LimitsUsed {
            cap_bytes,
            cap_source,
            device_limit_bytes,
        };
        if let Some(limit) = limits.device_limit_bytes {
            notes.push(if evidence.device_limit_bytes.is_some() {
                format!(
                    "the device could give this process about {} (free memory at the recorded \
                     OOM plus what the allocator held then); every replay runs against that",
                    format_bytes(limit)
                )
            } else {
                format!(
                    "the allocator released cached memory to make room during the run, so memory \
                     was short: every replay runs against a limit of {} (the most the trace \
                     allows)",
                    format_bytes(limit)
                )
            });
        }
        let run_limits = Limits {
            cap_bytes,
            device_limit_bytes: limits.device_limit_bytes,
            expandable_va_bytes: input.facts.expandable_va_bytes,
        };
        let inferred_low = match cap_source {
            CapSource::Inferred { low_bytes, .. } => Some(low_bytes),
            _ => None,
        };
        SweepPlan {
            recorded,
            candidates,
            notes,
            check_limits,
            limits,
            run_limits,
            cap_given: request.cap_bytes,
            device_memory_bytes: request.device_memory_bytes,
            inferred_low,
            contradiction: contradiction(travel),
        }
    }

    /// Replays: the self-check, the recorded settings and each candidate (for progress, at
    /// least ten candidates are counted, the sweep's usual number).
    fn total_runs(&self) -> usize {
        2 + self.candidates.len().max(10)
    }

    /// The self-check's pass: the recorded settings under the check's limits, compared with
    /// the trace event by event.
    fn check_pass(&self, input: &ReplayInput) -> Pass {
        #[cfg(any(test, feature = "test-fixtures"))]
        SETTINGS_REPLAYED.with(|count| count.set(count.get() + 1));
        input.start_pass(
            &self.recorded.rules,
            self.check_limits,
            Mode::Check,
            Assumed::RECORDED,
            None,
        )
    }

    /// The self-check once its pass is over.
    fn self_check_of(&self, input: &ReplayInput, check: &Pass) -> SelfCheck {
        let mut self_check = input.self_check(&self.recorded, &check.result);
        self_check.cap_bytes = self.check_limits.cap_bytes;
        self_check
    }

    /// The recorded settings replayed under the check's limits and compared with the trace.
    fn self_check(
        &self,
        input: &ReplayInput,
        progress: &dyn Fn(usize) -> bool,
    ) -> Result<SelfCheck, ReplayError> {
        let mut check = self.check_pass(input);
        input.advance(&mut check, usize::MAX, progress)?;
        Ok(self.self_check_of(input, &check))
    }

    /// The passes that tell what `conf` does: its replay (more near a limit or under unknown GPU
    /// timing), stopped at a contradiction of the trace, and checked against the lowest
    /// inferred cap. [`SweepPlan::finish_outcome`] completes what they find.
    fn setting_replay(
        &self,
        input: &ReplayInput,
        conf: &AllocConf,
        recorded_row: bool,
    ) -> SettingReplay {
        let run_limits = Limits {
            cap_bytes: cap_for(self.cap_given, self.device_memory_bytes, conf)
                .or(self.run_limits.cap_bytes),
            ..self.run_limits
        };
        let stop_at = self.contradiction.as_ref().map(|c| c.event_index);
        // The recorded settings under the recorded run's own limits are what happened (the
        // trace is the answer): other placements of segments are asked about other runs.
        let draw_placements = !(recorded_row && run_limits == self.check_limits);
        SettingReplay::new(
            input,
            conf,
            recorded_row,
            run_limits,
            stop_at,
            draw_placements,
            self.inferred_low,
        )
    }

    /// A setting's outcome marked incomplete where its replay reached the trace's
    /// contradiction of the snapshot's state.
    fn finish_outcome(&self, mut outcome: SettingOutcome) -> SettingOutcome {
        if let Some(contradiction) = &self.contradiction
            && outcome.incomplete.is_none()
            && outcome.events_replayed >= contradiction.event_index
        {
            outcome.incomplete = Some(contradiction.clone());
        }
        outcome
    }

    /// What `conf` does ([`SweepPlan::setting_replay`] made in one go).
    fn outcome_of(
        &self,
        input: &ReplayInput,
        conf: &AllocConf,
        recorded_row: bool,
        progress: &dyn Fn(usize) -> bool,
    ) -> Result<SettingOutcome, ReplayError> {
        let outcome = self
            .setting_replay(input, conf, recorded_row)
            .replay_to_end(input, progress)?;
        Ok(self.finish_outcome(outcome))
    }

    /// The report, with the settings ranked: those that run first, then by peak reserved.
    fn into_report(
        self,
        input: &ReplayInput,
        device: u32,
        self_check: SelfCheck,
        recorded: SettingOutcome,
        mut results: Vec<SettingOutcome>,
    ) -> WhatIfReport {
        results.sort_by(|a, b| {
            (!a.runs(), a.peak_reserved_bytes).cmp(&(!b.runs(), b.peak_reserved_bytes))
        });
        WhatIfReport {
            snapshot: input.snapshot.name.clone(),
            device,
            events: input.trace.len(),
            self_check,
            limits: self.limits,
            recorded,
            results,
            notes: self.notes,
        }
    }
}

/// The cap a replay of `conf` runs under: the one given by the caller, else that of the
/// setting's `per_process_memory_fraction` when the device's memory is known.
fn cap_for(
    cap_bytes: Option<u64>,
    device_memory_bytes: Option<u64>,
    conf: &AllocConf,
) -> Option<u64> {
    cap_bytes.or_else(|| {
        let fraction = conf.memory_fraction?;
        let total = device_memory_bytes?;
        Some((fraction * total as f64) as u64)
    })
}

/// The cap, where it came from, and the device's limit for the replays, from the trace's own
/// evidence and the cap the caller gave (which wins over an inferred one).
fn limits_from_evidence(
    evidence: &LimitEvidence,
    given_cap: Option<u64>,
) -> (Option<u64>, CapSource, Option<u64>) {
    let (cap_bytes, cap_source) = match (given_cap, evidence.cap) {
        (Some(cap), _) => (Some(cap), CapSource::Given),
        (None, Some((low_bytes, high_bytes))) => (
            Some(high_bytes),
            CapSource::Inferred {
                low_bytes,
                high_bytes,
            },
        ),
        (None, None) => (None, CapSource::None),
    };
    // Memory pressure the trace shows is a device limit only where no cap explains it.
    let device_limit_bytes = if cap_bytes.is_none() {
        evidence
            .device_limit_bytes
            .or(evidence.pressure_limit_bytes)
    } else {
        evidence.device_limit_bytes
    };
    (cap_bytes, cap_source, device_limit_bytes)
}

/// The first event where the trace contradicts the snapshot's state, as time travel found it,
/// or `None` when the trace and the state agree.
fn contradiction(travel: &TimeTravel) -> Option<Incomplete> {
    let check = travel.check();
    if check.matches_final_state {
        return None;
    }
    let event_index = check.replay_stopped_at?;
    Some(Incomplete {
        event_index,
        reason: check.first_problem.clone().unwrap_or_else(|| {
            format!("the trace does not fit the snapshot's state at event {event_index}")
        }),
    })
}

/// Replays one setting against the limits a [`what_if`] report established (a single what-if
/// from the GUI, or a throughput measurement).
pub fn replay_setting(
    travel: &TimeTravel,
    conf: &AllocConf,
    limits: &LimitsUsed,
    progress: &dyn Fn(f32) -> bool,
) -> Result<SettingOutcome, ReplayError> {
    let facts = TraceFacts::new(travel, None);
    let input = ReplayInput::new(travel, &facts);
    let run_limits = Limits {
        cap_bytes: limits.cap_bytes,
        device_limit_bytes: limits.device_limit_bytes,
        expandable_va_bytes: input.facts.expandable_va_bytes,
    };
    let events = input.trace.len().max(1);
    SettingReplay::new(&input, conf, false, run_limits, None, true, None)
        .replay_to_end(&input, &|position| {
            progress(position as f32 / events as f32)
        })
}

/// The model's state under `conf` right before event `stop_at` is applied (or at the end, or
/// where the replay stopped): the block map at a predicted peak or failure.
pub fn replay_state_at(
    travel: &TimeTravel,
    conf: &AllocConf,
    limits: &LimitsUsed,
    stop_at: usize,
) -> Result<AllocatorState, ReplayError> {
    let facts = TraceFacts::new(travel, None);
    let input = ReplayInput::new(travel, &facts);
    let run_limits = Limits {
        cap_bytes: limits.cap_bytes,
        device_limit_bytes: limits.device_limit_bytes,
        expandable_va_bytes: input.facts.expandable_va_bytes,
    };
    let run = input.run(
        &conf.rules,
        run_limits,
        Mode::WhatIf,
        Assumed::RECORDED,
        Some(stop_at),
        &|_| true,
    )?;
    Ok(run.model.state(travel.device(), &input.facts.streams))
}

/// Maps `items` with `f` on up to as many threads as the machine has cores (in order).
fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    f: impl Fn(&T) -> Result<R, ReplayError> + Sync,
) -> Result<Vec<R>, ReplayError> {
    #[cfg(target_arch = "wasm32")]
    {
        items.iter().map(f).collect()
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .min(items.len().max(1));
        if threads <= 1 {
            return items.iter().map(f).collect();
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let mut slots: Vec<Option<Result<R, ReplayError>>> =
            (0..items.len()).map(|_| None).collect();
        let results = std::sync::Mutex::new(&mut slots);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    loop {
                        let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(index) else {
                            break;
                        };
                        let result = f(item);
                        if let Ok(mut guard) = results.lock() {
                            guard[index] = Some(result);
                        }
                    }
                });
            }
        });
        slots
            .into_iter()
            .map(|slot| slot.unwrap_or(Err(ReplayError::Cancelled)))
            .collect()
    }
}

// ----- the replay driver --------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Under the recorded settings: compare every decision with the trace.
    Check,
    /// Under another setting: stop at the first out-of-memory.
    WhatIf,
}

/// When the GPU finishes the work other streams still had queued on a freed block (the
/// `cudaEvent`s PyTorch's `insert_events` records at such a free). The trace's `free_completed`
/// events tell it for the recorded run only; another run, and another setting, can see it
/// differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timing {
    /// As the trace recorded it (completions inside a request's failure path at the
    /// allocator's own synchronisation, see `completes_in_failure_path`).
    Recorded,
    /// The GPU finished every other stream's use of a freed block by the allocator's next
    /// call: `malloc` starts with `process_events`, which completes every free whose events
    /// have all finished.
    Early,
}

/// Where the driver puts a new segment. Best fit breaks ties between equal free blocks by
/// address, so this can decide which segments stay whole and can be released under a cap. The
/// trace records where the recorded run's driver put them; another process making the same
/// `cudaMalloc` calls need not get the same order (see `docs/whatif-validation.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placement {
    /// Where the recorded run's driver put its segments (see [`TraceHints`]).
    Recorded,
    /// The driver's choices in released address space drawn from this seed: a placement the
    /// trace does not rule out (see [`PlacementSpread`]).
    Drawn(u64),
}

/// What a replay assumes of what the trace does not fix for another run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Assumed {
    timing: Timing,
    placement: Placement,
}

impl Assumed {
    /// As the recorded run had it.
    const RECORDED: Assumed = Assumed {
        timing: Timing::Recorded,
        placement: Placement::Recorded,
    };
}

/// The trace and the starting state, shared by every replay of one request.
struct ReplayInput<'a> {
    travel: &'a TimeTravel,
    trace: &'a DeviceTrace,
    snapshot: &'a AllocatorSnapshot,
    facts: &'a TraceFacts,
}

/// What every replay of a trace needs that takes scans of the whole trace to learn, learnt
/// once: [`WhatIfSteps`] keeps it between its steps, so that a stepped sweep does not rebuild
/// the starting state and rescan the trace for every setting.
#[derive(Debug)]
struct TraceFacts {
    /// Distinct raw stream values, sorted: a stream's rank keeps PyTorch's ordering.
    streams: Vec<u64>,
    start: AllocatorState,
    expandable_va_bytes: u64,
    /// The settings the trace was recorded under (what the real allocator did decides how
    /// the trace's events are read).
    recorded_rules: AllocatorRules,
    /// Addresses of the trace's new segments by size, in trace order (see [`TraceHints`]).
    segments_by_size: HashMap<u64, Vec<u64>>,
    /// Some free in the trace waited for other streams' work (its `free_completed` does not
    /// follow its `free_requested` at once): the outcome can depend on the GPU's timing, so
    /// each setting is also replayed under [`Timing::Early`].
    has_deferred_frees: bool,
    /// Some request of the trace has a stack: one without is then made by C++ code.
    stacks_recorded: bool,
    /// Where the real run routed requests to private pools (see [`PoolRouting`]).
    routing: PoolRouting,
    /// The most the real run ever had reserved: with the device's memory assumed constant, the
    /// device could give the process at least this much at any time.
    peak_reserved_bytes: u64,
    /// How often the driver of the recorded run put a segment in released address space
    /// where its chunks say (see [`TraceHints::reuse_released`]): learnt by the first drawn
    /// placement, as only those use it.
    chunk_rule: OnceLock<ChunkRuleRecord>,
}

/// Which requests of a trace the real run routed to private pools (CUDA graphs, `MemPool`), and
/// which segment releases were of private pools. Routing is the program's (a capture under way,
/// a `use_mem_pool` block), not the allocator's: every setting routes the same requests.
#[derive(Debug, Default)]
struct PoolRouting {
    /// The private pools' ids; pool number `n` is `ids[n - 1]` (0: the default pools).
    ids: Vec<PoolId>,
    /// Pool number of each request (`alloc`, `oom` event) routed to a private pool.
    requests: HashMap<usize, u16>,
    /// Pool number of each `segment_free` of a private pool's segment: the program had released
    /// the pool by then.
    releases: HashMap<usize, u16>,
    /// Pool number of the starting state's segments by address.
    start: HashMap<u64, u16>,
}

impl PoolRouting {
    /// Learns the routing of `trace` from its `pool_id`s, else from the addresses its requests
    /// got: a request served inside a private pool's segment was routed there. A segment takes
    /// the pool the trace gives its `segment_alloc`, else, when it lasts to the end, the one
    /// the snapshot gives it (`final_state`); segments of the starting state keep theirs.
    fn learn(trace: &DeviceTrace, start: &AllocatorState, final_state: &AllocatorState) -> Self {
        let final_pools: HashMap<u64, PoolId> = final_state
            .segments
            .iter()
            .filter(|s| !s.pool_id.is_default())
            .map(|s| (s.address, s.pool_id))
            .collect();
        let mut routing = PoolRouting::default();
        // The `segment_alloc` events whose segment is never freed: they last to the end.
        let mut made_at: HashMap<u64, usize> = HashMap::new();
        let mut freed: HashSet<usize> = HashSet::default();
        for (index, action) in trace.actions.iter().enumerate() {
            let address = trace.addresses.get(index).copied().unwrap_or(0);
            match action {
                TraceAction::SegmentAlloc => {
                    made_at.insert(address, index);
                }
                TraceAction::SegmentFree => {
                    if let Some(made) = made_at.remove(&address) {
                        freed.insert(made);
                    }
                }
                _ => {}
            }
        }
        // Live segments: start address → (end, pool number).
        let mut live: std::collections::BTreeMap<u64, (u64, u16)> = Default::default();
        for segment in &start.segments {
            let number = routing.number(segment.pool_id);
            if number != 0 {
                routing.start.insert(segment.address, number);
            }
            live.insert(segment.address, (segment.end_address(), number));
        }
        for (index, action) in trace.actions.iter().enumerate() {
            let address = trace.addresses.get(index).copied().unwrap_or(0);
            let recorded = trace.pool_id(index);
            match action {
                TraceAction::SegmentAlloc => {
                    let pool = if !recorded.is_default() {
                        recorded
                    } else if freed.contains(&index) {
                        PoolId::default()
                    } else {
                        final_pools.get(&address).copied().unwrap_or_default()
                    };
                    let size = trace.sizes_bytes.get(index).copied().unwrap_or(0);
                    let number = routing.number(pool);
                    live.insert(address, (address.saturating_add(size), number));
                }
                TraceAction::SegmentFree => {
                    if let Some((_, number)) = live.remove(&address)
                        && number != 0
                    {
                        routing.releases.insert(index, number);
                    }
                }
                TraceAction::Alloc | TraceAction::Oom => {
                    let number = if recorded.is_default() && *action == TraceAction::Alloc {
                        live.range(..=address)
                            .next_back()
                            .filter(|(_, (end, _))| *end > address)
                            .map_or(0, |(_, (_, number))| *number)
                    } else {
                        routing.number(recorded)
                    };
                    if number != 0 {
                        routing.requests.insert(index, number);
                    }
                }
                _ => {}
            }
        }
        routing
    }

    /// The number of pool `id` (0 for the default pools), numbering it when new.
    fn number(&mut self, id: PoolId) -> u16 {
        if id.is_default() {
            return 0;
        }
        let index = match self.ids.iter().position(|known| *known == id) {
            Some(index) => index,
            None => {
                self.ids.push(id);
                self.ids.len() - 1
            }
        };
        u16::try_from(index + 1).unwrap_or(u16::MAX)
    }

    /// The private pool number the request at `index` was routed to (0: the default pools).
    #[inline]
    fn of_request(&self, index: usize) -> u16 {
        if self.requests.is_empty() {
            return 0;
        }
        self.requests.get(&index).copied().unwrap_or(0)
    }
}

/// Limits the trace's own events reveal (see `ReplayInput::limit_evidence`).
#[derive(Clone, Copy, Debug, Default)]
struct LimitEvidence {
    /// `(low, high)`: a per-process cap refused a recorded request with room on the device.
    cap: Option<(u64, u64)>,
    free_at_cap_refusal_bytes: u64,
    /// The device's memory for the process at a recorded OOM (reserved then + free).
    device_limit_bytes: Option<u64>,
    /// The allocator released memory for requests but never ran out: the highest limit that
    /// explains it.
    pressure_limit_bytes: Option<u64>,
    /// The most any request that grew the reservation needed under PyTorch's cap check
    /// (reserved then + the request's allocation size): the real run's cap, if it had one,
    /// was at least this. (With expandable segments the pages mapped can take reserved a
    /// little past it, and past the cap.)
    most_reserved_bytes: u64,
}

/// The result of one pass over the trace.
struct RunResult {
    model: AllocatorModel,
    oom: Option<OomPoint>,
    incomplete: Option<Incomplete>,
    divergence: Option<(usize, String)>,
    real_ooms: Vec<usize>,
    replay_ooms: Vec<usize>,
    survived_real_ooms: usize,
    shared_caught_ooms: usize,
    /// See [`SettingOutcome::scratch_oom`].
    scratch_oom: Option<OomPoint>,
    /// A scratch buffer failed whose stack does not show PyTorch catching it.
    scratch_oom_uncaught: bool,
    events_replayed: usize,
}

/// Events of the trace one step of [`WhatIfSteps`] replays: 10-20 ms of the web page's thread.
/// Freshly loaded wasm replays slowly: headless Chromium on the 2-core machine, profiled, took
/// 50-64 ms for 32768 events of the first replays of a 7.6 MB snapshot. A step costs little else
/// (the page posts itself a message to go on), so small steps do not slow the replay.
pub(crate) const EVENTS_PER_STEP: usize = 1 << 13;

/// The passes over the trace that make one setting's outcome, made a range of events at a time
/// ([`SettingReplay::advance`]). The setting is replayed with other streams' work finishing as
/// the trace recorded it and, when some free waited for such work, again with it finished by the
/// allocator's next call. The two bound what the GPU's timing can change as far as the
/// allocator's own rules tell (a GPU slower than the recorded run's is not bounded by anything
/// the trace shows): the outcome carries their peaks as a range and marks a verdict that
/// differs between them. Near a limit it is replayed again under drawn placements of segments
/// ([`PlacementSpread`]), and under the lowest inferred cap when the cap was inferred.
struct SettingReplay {
    conf: AllocConf,
    recorded_row: bool,
    limits: Limits,
    stop_at: Option<usize>,
    draw_placements: bool,
    /// The lowest cap the trace allows, when the cap was inferred: a verdict that differs
    /// under it is uncertain.
    strict_cap_bytes: Option<u64>,
    /// The pass being made and which one it is.
    pass: Pass,
    kind: PassKind,
    /// What the first pass found, once it is over.
    main: Option<MainPass>,
}

/// Which of a [`SettingReplay`]'s passes a pass is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PassKind {
    /// Recorded timing and placement: the outcome's numbers.
    Main,
    /// Other streams' work finished early ([`Timing::Early`]).
    Early,
    /// Segments placed from this seed ([`Placement::Drawn`]).
    Drawn(u64),
    /// Under the lowest inferred cap.
    Strict,
}

/// What a [`SettingReplay`]'s first pass found, for the passes after it.
struct MainPass {
    outcome: SettingOutcome,
    ran_out: bool,
    complete: bool,
    placement_can_matter: bool,
}

impl SettingReplay {
    fn new(
        input: &ReplayInput,
        conf: &AllocConf,
        recorded_row: bool,
        limits: Limits,
        stop_at: Option<usize>,
        draw_placements: bool,
        strict_cap_bytes: Option<u64>,
    ) -> Self {
        #[cfg(any(test, feature = "test-fixtures"))]
        SETTINGS_REPLAYED.with(|count| count.set(count.get() + 1));
        SettingReplay {
            pass: input.start_pass(
                &conf.rules,
                limits,
                Mode::WhatIf,
                Assumed::RECORDED,
                stop_at,
            ),
            conf: conf.clone(),
            recorded_row,
            limits,
            stop_at,
            draw_placements,
            strict_cap_bytes,
            kind: PassKind::Main,
            main: None,
        }
    }

    /// Replays about `events` more events (at least the rest of a pass that ends in the
    /// range); the outcome once the last pass is over. `progress` gets the position in the
    /// first pass, and the trace's end in the others.
    fn advance(
        &mut self,
        input: &ReplayInput,
        events: usize,
        progress: &dyn Fn(usize) -> bool,
    ) -> Result<Option<SettingOutcome>, ReplayError> {
        let end = input.trace.len();
        let mut left = events.max(1);
        loop {
            let before = self.pass.next_event;
            let finished = if self.kind == PassKind::Main {
                input.advance(&mut self.pass, left, progress)?
            } else {
                input.advance(&mut self.pass, left, &|_| progress(end))?
            };
            left = left.saturating_sub(self.pass.next_event.saturating_sub(before).max(1));
            if !finished {
                return Ok(None);
            }
            let Some(next) = self.finish_pass(input) else {
                return Ok(self.main.take().map(|main| main.outcome));
            };
            self.kind = next;
            let (limits, assumed, stop_at) = match next {
                PassKind::Main => (self.limits, Assumed::RECORDED, self.stop_at),
                PassKind::Early => (
                    self.limits,
                    Assumed {
                        timing: Timing::Early,
                        ..Assumed::RECORDED
                    },
                    self.stop_at,
                ),
                PassKind::Drawn(seed) => (
                    self.limits,
                    Assumed {
                        placement: Placement::Drawn(seed),
                        ..Assumed::RECORDED
                    },
                    self.stop_at,
                ),
                PassKind::Strict => (
                    Limits {
                        cap_bytes: self.strict_cap_bytes,
                        ..self.limits
                    },
                    Assumed::RECORDED,
                    None,
                ),
            };
            self.pass = input.start_pass(&self.conf.rules, limits, Mode::WhatIf, assumed, stop_at);
            if left == 0 {
                return Ok(None);
            }
        }
    }

    /// Every pass made in one go: the outcome.
    fn replay_to_end(
        mut self,
        input: &ReplayInput,
        progress: &dyn Fn(usize) -> bool,
    ) -> Result<SettingOutcome, ReplayError> {
        loop {
            if let Some(outcome) = self.advance(input, usize::MAX, progress)? {
                return Ok(outcome);
            }
        }
    }

    /// Takes what the pass just over found into the outcome; the next pass to make, if any.
    fn finish_pass(&mut self, input: &ReplayInput) -> Option<PassKind> {
        let run = &self.pass.result;
        match self.kind {
            PassKind::Main => {
                let outcome = run.outcome(&self.conf, self.recorded_row, &self.limits);
                self.main = Some(MainPass {
                    placement_can_matter: ReplayInput::placement_can_matter(
                        run,
                        &outcome,
                        &self.limits,
                    ),
                    ran_out: run.oom.is_some(),
                    complete: run.incomplete.is_none(),
                    outcome,
                });
            }
            PassKind::Early => {
                let main = self.main.as_mut()?;
                let early_peak = run.model.stats.peak_reserved_bytes;
                let peak = main.outcome.peak_reserved_bytes;
                main.outcome.peak_reserved_range_bytes =
                    Some((early_peak.min(peak), early_peak.max(peak)));
                main.outcome.timing_uncertain =
                    main.complete && run.incomplete.is_none() && main.ran_out != run.oom.is_some();
            }
            PassKind::Drawn(_) => {
                let main = self.main.as_mut()?;
                let peak = main.outcome.peak_reserved_bytes;
                let spread = main.outcome.placement.get_or_insert(PlacementSpread {
                    drawn: DRAWN_PLACEMENTS,
                    ran_out: 0,
                    peak_range_bytes: (peak, peak),
                });
                if run.incomplete.is_some() {
                    // A drawn placement the trace cannot be replayed under tells nothing.
                    spread.drawn -= 1;
                } else {
                    spread.ran_out += u32::from(run.oom.is_some());
                    let drawn_peak = run.model.stats.peak_reserved_bytes;
                    spread.peak_range_bytes.0 = spread.peak_range_bytes.0.min(drawn_peak);
                    spread.peak_range_bytes.1 = spread.peak_range_bytes.1.max(drawn_peak);
                }
            }
            PassKind::Strict => {
                let main = self.main.as_mut()?;
                main.outcome.uncertain = run.oom.is_some() != main.ran_out;
            }
        }
        let main = self.main.as_ref()?;
        let draws = self.draw_placements && main.complete && main.placement_can_matter;
        let strict = self.strict_cap_bytes.map(|_| PassKind::Strict);
        let after_early = || {
            if draws {
                Some(PassKind::Drawn(0))
            } else {
                strict
            }
        };
        match self.kind {
            PassKind::Main if input.facts.has_deferred_frees => Some(PassKind::Early),
            PassKind::Main | PassKind::Early => after_early(),
            PassKind::Drawn(seed) if seed + 1 < u64::from(DRAWN_PLACEMENTS) => {
                Some(PassKind::Drawn(seed + 1))
            }
            PassKind::Drawn(_) => strict,
            PassKind::Strict => None,
        }
    }
}

/// A pass over the trace while it is made (see [`ReplayInput::advance`]): the model and
/// everything else the replay carries from one event to the next, so that a pass can stop after
/// a range of events and go on from there.
struct Pass {
    result: RunResult,
    mode: Mode,
    timing: Timing,
    limits: Limits,
    stop_at: Option<usize>,
    /// The model's block for each address the trace holds allocated.
    live: HashMap<u64, BlockHandle>,
    /// Scratch buffers this setting could not serve and went on without: their frees are
    /// skipped.
    skipped: HashSet<u64>,
    /// First event after the previous request: segment events from here on belong to the
    /// request being replayed.
    window_start: usize,
    /// Frees the real allocator completed inside the next request's failure path (see
    /// `completes_in_failure_path`): the model completes them at its own synchronisation, or
    /// right after the request when it never needs one.
    sync_completions: Vec<BlockHandle>,
    /// The run of completions being replayed: its end and whether it is such a run.
    completion_run: (usize, bool),
    /// Under `Timing::Early`: frees that waited for other streams, completed at the start of
    /// the next request (`process_events`).
    early_completions: Vec<BlockHandle>,
    /// Reserved bytes as the trace's segment events say (the self-check compares).
    real_reserved: u64,
    /// New segments the model made so far, by size (see `TraceHints`).
    segments_made: HashMap<u64, usize>,
    /// Under [`Placement::Drawn`]: the state of the generator addresses are drawn from.
    drawn_state: Option<u64>,
    /// The last request of the trace: a recorded OOM before it was caught by the program,
    /// which went on allocating.
    last_alloc: usize,
    /// The next event to replay.
    next_event: usize,
    finished: bool,
}

/// A [`Pass`] while [`ReplayInput::advance`] replays a slice of its events: the pass's
/// collections borrowed apart, its settings copied, and where it stands held by value (so that
/// the hot loop keeps it in registers); `advance` writes the position back into the pass when
/// the slice ends.
struct Replaying<'p> {
    result: &'p mut RunResult,
    live: &'p mut HashMap<u64, BlockHandle>,
    skipped: &'p mut HashSet<u64>,
    sync_completions: &'p mut Vec<BlockHandle>,
    early_completions: &'p mut Vec<BlockHandle>,
    segments_made: &'p mut HashMap<u64, usize>,
    mode: Mode,
    timing: Timing,
    limits: Limits,
    last_alloc: usize,
    /// The event being replayed.
    index: usize,
    window_start: usize,
    completion_run: (usize, bool),
    real_reserved: u64,
    drawn_state: Option<u64>,
}

/// Where [`ReplayInput::advance`] goes after an event it replayed and the pass goes on (a
/// `ControlFlow::Break` ends the pass).
#[derive(Clone, Copy)]
enum Then {
    /// On to the event after [`Replaying::index`].
    NextEvent,
    /// [`Replaying::index`] already names the next event to replay (a run of releases was
    /// taken whole).
    Jumped,
}

impl Replaying<'_> {
    /// Under [`Mode::Check`], the divergence when the model's reserved bytes after event
    /// `index` are not the trace's.
    #[inline]
    fn reserved_differs(&self, index: usize) -> Option<(usize, String)> {
        let model = &self.result.model;
        let real = self.real_reserved;
        (self.mode == Mode::Check && model.reserved_bytes() != real).then(|| {
            (
                index,
                format!(
                    "after this event the real allocator held {} reserved, the replay {}",
                    format_bytes(real),
                    format_bytes(model.reserved_bytes())
                ),
            )
        })
    }
}

impl RunResult {
    fn outcome(&self, conf: &AllocConf, recorded: bool, limits: &Limits) -> SettingOutcome {
        let stats = self.model.stats;
        SettingOutcome {
            conf: conf.text.clone(),
            recorded,
            peak_reserved_bytes: stats.peak_reserved_bytes,
            peak_allocated_bytes: stats.peak_allocated_bytes,
            peak_event: stats.peak_reserved_event,
            cached_at_peak_bytes: stats
                .peak_reserved_bytes
                .saturating_sub(stats.allocated_at_peak_bytes),
            segments_at_peak: stats.segments_at_peak,
            final_reserved_bytes: self.model.reserved_bytes(),
            oom: self.oom,
            survived_real_ooms: self.survived_real_ooms,
            shared_caught_ooms: self.shared_caught_ooms,
            uncertain: false,
            peak_reserved_range_bytes: None,
            timing_uncertain: false,
            scratch_oom: self.scratch_oom,
            scratch_oom_caught: self.scratch_oom.is_some() && !self.scratch_oom_uncaught,
            placement: None,
            num_alloc_retries: stats.num_alloc_retries,
            num_device_alloc: stats.num_device_alloc,
            num_device_free: stats.num_device_free,
            events_replayed: self.events_replayed,
            incomplete: self.incomplete.clone(),
            gc_without_cap: conf.rules.garbage_collection_threshold > 0.0
                && limits.cap_bytes.is_none(),
        }
    }
}

/// Whether some free of `trace` waited for other streams' work: a `free_requested` not followed
/// at once by the `free_completed` of the same address.
fn has_deferred_frees(trace: &DeviceTrace) -> bool {
    trace.actions.iter().enumerate().any(|(index, &action)| {
        action == TraceAction::FreeRequested
            && !(trace.actions.get(index + 1) == Some(&TraceAction::FreeCompleted)
                && trace.addresses.get(index + 1) == trace.addresses.get(index))
    })
}

/// Offers the addresses the real run's `cudaMalloc` returned. First that of a segment event
/// between the previous request and the current one (the same request made the same segment;
/// one of another size when none has this size: a setting that rounds differently asks for
/// another size at the same point, and the driver often gives it the same place). Then, after
/// the allocator's own choice of released address space, the address the real run got for its
/// segment of the same size with the same ordinal: the n-th new segment of a size takes the
/// real run's n-th segment of that size. Which of two equal cached blocks best fit takes is
/// decided by address, so where a setting makes a segment a few requests earlier or later than
/// the recorded run, an address unrelated to the real run's would lose or win every such tie.
/// On the real H200 runs the driver, asked for the same sizes in the same order, often hands out
/// the same addresses relative to the first segment: all 18 segments of `kv_cache` under
/// `roundup_power2_divisions:4` sit where the default-settings run put its segment of that size
/// and ordinal, though several were made at other requests. Under [`Placement::Drawn`] the
/// choice among released ranges is drawn ([`AddressHints::reuse_released`]).
struct TraceHints<'a> {
    trace: &'a DeviceTrace,
    from: usize,
    to: usize,
    /// What the replays learnt of the trace: the real run's segment addresses by size, and
    /// how often its driver followed its chunks in released address space.
    facts: &'a TraceFacts,
    /// New segments the replay made so far, by size.
    made_by_size: &'a mut HashMap<u64, usize>,
    /// Under [`Placement::Drawn`]: the state of the generator the addresses are drawn from.
    drawn: Option<&'a mut u64>,
}

impl AddressHints for TraceHints<'_> {
    fn segment_addresses(&mut self, size_bytes: u64) -> SegmentHints {
        let made = self.made_by_size.entry(size_bytes).or_insert(0);
        let ordinal = *made;
        *made += 1;
        // The segment the real run made at this request: one of this size, else one of any
        // size (a setting that rounds differently asks for another size at the same point,
        // and the driver often gives it the same place: 58 of 124 such segments in the real
        // runs, against 2,670 of 3,623 of the same size).
        let made_here = |size: Option<u64>| {
            (self.from..self.to).find(|&index| {
                self.trace.actions[index] == TraceAction::SegmentAlloc
                    && size.is_none_or(|size| self.trace.sizes_bytes.get(index) == Some(&size))
            })
        };
        let same_request = made_here(Some(size_bytes))
            .or_else(|| made_here(None))
            .and_then(|index| {
                // Each segment event serves one new segment.
                self.from = index + 1;
                self.trace.addresses.get(index).copied()
            });
        SegmentHints {
            same_request,
            same_size: self
                .facts
                .segments_by_size
                .get(&size_bytes)
                .and_then(|recorded| recorded.get(ordinal))
                .copied(),
        }
    }

    fn reuse_released(&mut self) -> Option<ReusedRange> {
        match self.drawn.as_deref_mut() {
            // The smallest range that fits, at its low end. The driver's chunks name its
            // choice more often (2,064 of 4,500 surveyed times, against 1,084), but taken as
            // the replay's own choice they made verdicts that every real run agreed on turn on
            // where a process's first segments went
            // (`docs/gpu-verification/whatif-placement/README.md`), so they are drawn.
            None => Some(ReusedRange::Range {
                pick: 0,
                at_top: false,
            }),
            Some(state) => {
                // Where the driver's chunks put it, as often as the driver went there.
                let followed = self.facts.chunk_rule(self.trace).odds_followed();
                if unit_interval(split_mix64(state)) < followed {
                    return Some(ReusedRange::Chunked);
                }
                // Else fresh address space as often as the surveyed driver took it when the
                // chunks did not name its choice, and otherwise no one rule picked its range:
                // any of them, at either end.
                if unit_interval(split_mix64(state)) < ChunkRuleRecord::ODDS_FRESH_WHEN_NOT_FOLLOWED
                {
                    return None;
                }
                Some(ReusedRange::Range {
                    pick: split_mix64(state),
                    at_top: split_mix64(state).is_multiple_of(2),
                })
            }
        }
    }

    fn mapped_addresses(&mut self) -> Vec<u64> {
        (self.from..self.to)
            .filter(|&i| self.trace.actions[i] == TraceAction::SegmentMap)
            .filter_map(|i| self.trace.addresses.get(i).copied())
            .collect()
    }
}

/// PyTorch's `malloc` for the trace's request of `size` bytes on `stream` at event `index`
/// (routed to private pool `private`, 0 for the default pools), in
/// the order the real allocator did its work around it: frees whose other-stream work had ended
/// complete first (`early`: the `process_events` a request starts with, under `Timing::Early`),
/// new segments take addresses from `hints`, and frees the real run completed inside the
/// request's failure path complete after it (`sync`) unless the model's own synchronisation
/// completed them already.
fn malloc_in_trace_order(
    model: &mut AllocatorModel,
    (size, stream, private, index): (u64, u16, u16, usize),
    hints: &mut TraceHints,
    early: &mut Vec<BlockHandle>,
    sync: &mut Vec<BlockHandle>,
) -> Result<BlockHandle, ModelOom> {
    for handle in early.drain(..) {
        model.complete_free(handle);
    }
    let served = model.malloc_in_pool(size, stream, private, index as u32, hints);
    for handle in sync.drain(..) {
        model.complete_free(handle);
    }
    served
}

impl TraceFacts {
    /// How often the recorded run's driver put a segment where its chunks say, learnt from
    /// `trace` (the one these facts are of) on first use.
    fn chunk_rule(&self, trace: &DeviceTrace) -> ChunkRuleRecord {
        *self.chunk_rule.get_or_init(|| {
            ChunkRuleRecord::of_run(
                self.start
                    .segments
                    .iter()
                    .filter(|s| !s.expandable)
                    .map(|s| (s.address, s.size_bytes)),
                trace
                    .actions
                    .iter()
                    .enumerate()
                    .filter_map(|(index, action)| {
                        let made = match action {
                            TraceAction::SegmentAlloc => true,
                            TraceAction::SegmentFree => false,
                            _ => return None,
                        };
                        Some((
                            made,
                            *trace.addresses.get(index)?,
                            *trace.sizes_bytes.get(index)?,
                        ))
                    }),
            )
        })
    }

    fn new(travel: &TimeTravel, device_memory_bytes: Option<u64>) -> Self {
        #[cfg(any(test, feature = "test-fixtures"))]
        TRACE_FACTS_BUILT.with(|built| built.set(built.get() + 1));
        let trace = travel.trace();
        let start = travel.state_at(0);
        let mut streams: Vec<u64> = trace.streams.clone();
        streams.extend(start.segments.iter().map(|s| s.stream));
        streams.sort_unstable();
        streams.dedup();
        let mut segments_by_size: HashMap<u64, Vec<u64>> = HashMap::new();
        for (index, action) in trace.actions.iter().enumerate() {
            if *action == TraceAction::SegmentAlloc
                && let (Some(&size), Some(&address)) =
                    (trace.sizes_bytes.get(index), trace.addresses.get(index))
            {
                segments_by_size.entry(size).or_default().push(address);
            }
        }
        let expandable_va_bytes = device_memory_bytes
            .map(|total| total.saturating_add(total / 8))
            .unwrap_or(DEFAULT_EXPANDABLE_VA_BYTES);
        let recorded_rules = AllocConf::recorded(travel.snapshot().settings.as_ref()).rules;
        let has_private_pools = !trace.pool_ids.is_empty()
            || travel
                .snapshot()
                .segments
                .iter()
                .any(|s| !s.pool_id.is_default());
        let routing = if has_private_pools {
            PoolRouting::learn(trace, &start, &travel.state_at(trace.len()))
        } else {
            PoolRouting::default()
        };
        let peak_reserved_bytes = travel.reserved_series().iter().copied().max().unwrap_or(0);
        TraceFacts {
            streams,
            start,
            expandable_va_bytes,
            recorded_rules,
            segments_by_size,
            routing,
            peak_reserved_bytes,
            chunk_rule: OnceLock::new(),
            has_deferred_frees: has_deferred_frees(trace),
            stacks_recorded: trace.stacks.iter().any(|&stack| stack != StackId::EMPTY),
        }
    }
}

impl<'a> ReplayInput<'a> {
    fn new(travel: &'a TimeTravel, facts: &'a TraceFacts) -> Self {
        ReplayInput {
            travel,
            trace: travel.trace(),
            snapshot: travel.snapshot(),
            facts,
        }
    }

    fn stream_rank(&self, stream: u64) -> u16 {
        self.facts
            .streams
            .binary_search(&stream)
            .map_or(0, |rank| rank.min(u16::MAX as usize) as u16)
    }

    /// The stack recorded with event `index` (empty when the trace has none for it).
    fn stack_of(&self, index: usize) -> StackId {
        self.trace
            .stacks
            .get(index)
            .copied()
            .unwrap_or(StackId::EMPTY)
    }

    /// Whether the request at `index` was made inside PyTorch's own code: the innermost Python
    /// frame of its stack is in torch's files, or it has no Python frame at all (made by C++,
    /// e.g. autograd's backward) while the trace records stacks for other requests.
    fn made_inside_torch(&self, index: usize) -> bool {
        let stack = self.stack_of(index);
        let frames = self.snapshot.frames.stack(stack);
        let innermost_python = frames
            .iter()
            .filter_map(|&frame| self.snapshot.frames.frame(frame))
            .map(|frame| self.snapshot.string(frame.filename))
            .find(|file| file.ends_with(".py"));
        match innermost_python {
            Some(file) => file.contains("/torch/"),
            None => !frames.is_empty() || self.facts.stacks_recorded,
        }
    }

    /// The function names of the stack of event `index`, innermost first.
    fn frame_names(&self, index: usize) -> impl Iterator<Item = &str> + '_ {
        self.snapshot
            .frames
            .stack(self.stack_of(index))
            .iter()
            .filter_map(|&frame| self.snapshot.frames.frame(frame))
            .map(|frame| self.snapshot.string(frame.name))
    }

    /// Does the stack of event `index` come from `torch.cuda.empty_cache()`?
    fn stack_is_empty_cache(&self, index: usize) -> bool {
        self.frame_names(index).any(|name| name == "empty_cache")
    }

    /// What the trace itself says about the limits the real run ran against. A new segment
    /// that succeeded shows the limit was at least reserved + its size; releases the allocator
    /// made for a request show that request's segment did not fit at first (reserved + segment
    /// above the limit); a recorded OOM with the device's free memory either fixes the device's
    /// limit (the segment did not fit in the free memory) or, when it would have fit, shows a
    /// per-process cap refused it.
    fn limit_evidence(&self, rules: &AllocatorRules) -> LimitEvidence {
        let trace = self.trace;
        let size_at = |i: usize| trace.sizes_bytes.get(i).copied().unwrap_or(0);
        let mut reserved = self.facts.start.reserved_bytes;
        let mut lowest = 0u64;
        let mut pressure_high = u64::MAX;
        let mut cap_high: Option<u64> = None;
        let mut evidence = LimitEvidence::default();
        // Reserved bytes when the current request first grew the reservation: PyTorch's cap
        // check (`alloc_block`) compares reserved + the request's allocation size with the cap
        // once, before mapping or allocating (an expandable segment may then map more).
        let mut reserved_at_growth: Option<u64> = None;
        let mut index = 0;
        while index < trace.len() {
            match trace.actions[index] {
                TraceAction::SegmentAlloc | TraceAction::SegmentMap => {
                    lowest = lowest.max(reserved.saturating_add(size_at(index)));
                    reserved_at_growth.get_or_insert(reserved);
                    reserved = reserved.saturating_add(size_at(index));
                }
                TraceAction::Alloc => {
                    if let Some(before) = reserved_at_growth.take() {
                        let needed = rules.allocation_size(rules.round_size(size_at(index)));
                        evidence.most_reserved_bytes = evidence
                            .most_reserved_bytes
                            .max(before.saturating_add(needed));
                    }
                }
                TraceAction::SegmentFree | TraceAction::SegmentUnmap => {
                    let end = self.release_run_end(index);
                    let released: u64 = (index..end).map(size_at).sum();
                    let stackless = self.stack_of(index) == StackId::EMPTY;
                    let by_allocator = !self.stack_is_empty_cache(index)
                        && self.followed_by_request(end)
                        && rules.garbage_collection_threshold == 0.0
                        && !self.next_request_routed(end)
                        && !(stackless && self.room_without_releasing(index, end));
                    if by_allocator
                        && let Some(request) = (end..trace.len()).find(|&i| {
                            matches!(trace.actions[i], TraceAction::Alloc | TraceAction::Oom)
                        })
                    {
                        let segment = rules.allocation_size(rules.round_size(size_at(request)));
                        pressure_high =
                            pressure_high.min(reserved.saturating_add(segment).saturating_sub(1));
                    }
                    reserved = reserved.saturating_sub(released);
                    index = end;
                    continue;
                }
                TraceAction::Oom => {
                    reserved_at_growth = None;
                    let segment = rules.allocation_size(size_at(index));
                    let refused = reserved.saturating_add(segment).saturating_sub(1);
                    match trace.device_free_bytes(index) {
                        // Free memory within the driver's slack of the segment is a full
                        // device, not a cap (see DRIVER_SLACK_BYTES).
                        Some(free) if free >= segment.saturating_add(DRIVER_SLACK_BYTES) => {
                            cap_high = Some(cap_high.map_or(refused, |c| c.min(refused)));
                            evidence.free_at_cap_refusal_bytes = free;
                        }
                        Some(free) => {
                            let limit = reserved.saturating_add(free);
                            evidence.device_limit_bytes =
                                Some(evidence.device_limit_bytes.map_or(limit, |l| l.min(limit)));
                        }
                        None => pressure_high = pressure_high.min(refused),
                    }
                }
                _ => {}
            }
            index += 1;
        }
        if let Some(high) = cap_high {
            let high = high.min(pressure_high);
            evidence.cap = Some((lowest.min(high), high));
        } else if pressure_high != u64::MAX && evidence.device_limit_bytes.is_none() {
            evidence.pressure_limit_bytes = Some(pressure_high.max(lowest));
        }
        evidence
    }

    /// End of the run of segment releases starting at `index`.
    fn release_run_end(&self, index: usize) -> usize {
        let mut end = index;
        while end < self.trace.len()
            && matches!(
                self.trace.actions[end],
                TraceAction::SegmentFree | TraceAction::SegmentUnmap
            )
        {
            end += 1;
        }
        end
    }

    /// Whether the completed free at `index` was recorded inside the next request's failure
    /// path rather than before it. `malloc` first completes the frees whose other-stream work is
    /// done (`process_events`) and searches the cache; only when no cached block fits and no new
    /// segment can be had does `release_cached_blocks` wait for every outstanding free
    /// (`synchronize_and_free_events`, each logged as a completed free) and release the whole
    /// cached segments. So completions that lead straight into the allocator's own releases, or
    /// into a recorded out-of-memory, happened after the search: applied before it, they would
    /// hand the request a block the real allocator could not use yet.
    ///
    /// One exception: with `garbage_collection_threshold` under a cap, the collector releases
    /// old cached segments before the first new-segment attempt, after `process_events`. When
    /// the request's new segment would have fitted under the cap at the window's start
    /// (`reserved_bytes`, the real run's reserved memory then), that attempt could not fail,
    /// so the window's first releases are the collector's and the completions before them came
    /// from `process_events`.
    ///
    /// Returns the end of the run of completions `index` belongs to and the answer for all of
    /// them.
    fn completes_in_failure_path(
        &self,
        index: usize,
        window_start: usize,
        reserved_bytes: u64,
        limits: &Limits,
    ) -> (usize, bool) {
        let actions = &self.trace.actions;
        let mut next = index;
        while actions.get(next) == Some(&TraceAction::FreeCompleted) {
            next += 1;
        }
        let late = match actions.get(next) {
            Some(TraceAction::Oom) => true,
            Some(TraceAction::SegmentFree | TraceAction::SegmentUnmap) => {
                let end = self.release_run_end(next);
                let by_allocator = !self.releases_are_empty_cache(next, end, limits);
                let first_release_of_request = !actions[window_start..index]
                    .iter()
                    .any(|a| matches!(a, TraceAction::SegmentFree | TraceAction::SegmentUnmap));
                let rules = &self.facts.recorded_rules;
                let collector_first = match limits.cap_bytes {
                    Some(cap) if rules.garbage_collection_threshold > 0.0 => {
                        let request = (end..self.trace.len())
                            .find(|&i| matches!(actions[i], TraceAction::Alloc | TraceAction::Oom));
                        request.is_some_and(|i| {
                            let size = self.trace.sizes_bytes.get(i).copied().unwrap_or(0);
                            let segment = rules.allocation_size(rules.round_size(size));
                            reserved_bytes.saturating_add(segment) <= cap
                        })
                    }
                    _ => false,
                };
                by_allocator && !(first_release_of_request && collector_first)
            }
            _ => false,
        };
        (next, late)
    }

    /// Whether event `end` continues a request: a new segment, or an out-of-memory.
    fn followed_by_request(&self, end: usize) -> bool {
        matches!(
            self.trace.actions.get(end),
            Some(TraceAction::SegmentAlloc | TraceAction::SegmentMap | TraceAction::Oom)
        )
    }

    /// Whether the releases `index..end` are the program's `torch.cuda.empty_cache()` rather than
    /// the allocator's own. The allocator releases only inside a request that could not get a
    /// new segment (a cap, or a full device) or under garbage collection (a cap), so its releases
    /// are followed by that request's new segment or OOM. With stacks recorded for every event
    /// (`context="all"`, PyTorch's default) the call names itself; without, releases followed by
    /// a request count as the allocator's only where memory pressure was possible: a cap, or a
    /// trace that ran out of memory somewhere.
    fn releases_are_empty_cache(&self, index: usize, end: usize, limits: &Limits) -> bool {
        if !self.followed_by_request(end) || self.next_request_routed(end) {
            return true;
        }
        let stack = self.stack_of(index);
        if stack != StackId::EMPTY {
            return self.stack_is_empty_cache(index);
        }
        let pressure_possible = limits.cap_bytes.is_some() || limits.device_limit_bytes.is_some();
        !pressure_possible || self.room_without_releasing(index, end)
    }

    /// Whether the first request from `end` on was routed to a private pool: PyTorch releases no
    /// cached memory for such a request (not while a capture is under way), so releases right
    /// before it are the program's (`torch.cuda.graph` empties the cache as a capture begins).
    fn next_request_routed(&self, end: usize) -> bool {
        (end..self.trace.len())
            .find(|&i| matches!(self.trace.actions[i], TraceAction::Alloc | TraceAction::Oom))
            .is_some_and(|request| self.facts.routing.of_request(request) != 0)
    }

    /// Whether the device had room for the next request's segment without the releases
    /// `index..end`: the reserved memory before them plus that segment is no more than the run
    /// had reserved at some time (the device's memory assumed constant, as everywhere here).
    /// The allocator releases for a request only when its new segment did not fit, so such
    /// releases are the program's. Not judged under garbage collection, which releases with
    /// room to spare.
    fn room_without_releasing(&self, index: usize, end: usize) -> bool {
        let rules = &self.facts.recorded_rules;
        if rules.garbage_collection_threshold > 0.0 {
            return false;
        }
        let Some(request) = (end..self.trace.len())
            .find(|&i| matches!(self.trace.actions[i], TraceAction::Alloc | TraceAction::Oom))
        else {
            return false;
        };
        let segment = rules.allocation_size(rules.round_size(self.size_at(request)));
        let before = self
            .travel
            .reserved_series()
            .get(index)
            .copied()
            .unwrap_or(u64::MAX);
        before.saturating_add(segment) <= self.facts.peak_reserved_bytes
    }

    /// Whether where the driver puts segments can decide if this run fits: only under a known
    /// limit, when the run ran out, released cached memory to make room (`num_alloc_retries`),
    /// or peaked within a tenth of the limit. Elsewhere a different order of segments changes
    /// which block a tie goes to, not whether there is room.
    fn placement_can_matter(run: &RunResult, outcome: &SettingOutcome, limits: &Limits) -> bool {
        let Some(allowed) = limits.cap_bytes.or(limits.device_limit_bytes) else {
            return false;
        };
        run.oom.is_some()
            || run.scratch_oom.is_some()
            || run.model.stats.num_alloc_retries > 0
            || allowed.saturating_sub(outcome.peak_reserved_bytes) < allowed / 10
    }

    /// Seeds the model with the state at the first recorded event.
    fn seed(&self, model: &mut AllocatorModel, live: &mut HashMap<u64, BlockHandle>) {
        model.name_private_pools(&self.facts.routing.ids);
        let private = |segment: &StateSegment| {
            self.facts
                .routing
                .start
                .get(&segment.address)
                .copied()
                .unwrap_or(0)
        };
        let mut expandable: Vec<((u16, u16), u32)> = Vec::new();
        // Expandable reservations start at their lowest mapped range.
        let mut bases: Vec<((u16, u16), u64)> = Vec::new();
        for segment in self.facts.start.segments.iter().filter(|s| s.expandable) {
            let key = (
                self.stream_rank(segment.stream),
                pool_index(private(segment), segment.pool != PoolKind::Small),
            );
            match bases.iter_mut().find(|(k, _)| *k == key) {
                Some((_, base)) => *base = (*base).min(segment.address),
                None => bases.push((key, segment.address)),
            }
        }
        for (key, base) in bases {
            let es = model.seed_expandable_va(base, key.0, key.1);
            expandable.push((key, es));
        }
        for segment in &self.facts.start.segments {
            let stream = self.stream_rank(segment.stream);
            let mut lookup = |s: u16, p: u16| {
                expandable
                    .iter()
                    .find(|(k, _)| *k == (s, p))
                    .map(|(_, es)| *es)
            };
            for (address, handle) in
                model.seed_segment(segment, stream, private(segment), &mut lookup)
            {
                live.insert(address, handle);
            }
        }
        for ((stream, pool), es) in expandable {
            model.link_seeded_expandable(es, stream, pool);
        }
    }

    /// One pass over the trace under `rules` and `limits`, with other streams' work finishing
    /// and new segments placed as `assumed` says.
    fn run(
        &self,
        rules: &AllocatorRules,
        limits: Limits,
        mode: Mode,
        assumed: Assumed,
        stop_at: Option<usize>,
        progress: &dyn Fn(usize) -> bool,
    ) -> Result<RunResult, ReplayError> {
        let mut pass = self.start_pass(rules, limits, mode, assumed, stop_at);
        self.advance(&mut pass, usize::MAX, progress)?;
        Ok(pass.result)
    }

    /// A pass over the trace (see [`ReplayInput::run`]) with nothing replayed yet: the model
    /// seeded with the starting state.
    fn start_pass(
        &self,
        rules: &AllocatorRules,
        limits: Limits,
        mode: Mode,
        assumed: Assumed,
        stop_at: Option<usize>,
    ) -> Pass {
        let Assumed { timing, placement } = assumed;
        let mut model = AllocatorModel::new(rules.clone(), limits);
        let mut live: HashMap<u64, BlockHandle> = HashMap::with_capacity(1024);
        self.seed(&mut model, &mut live);
        Pass {
            result: RunResult {
                model,
                oom: None,
                incomplete: None,
                divergence: None,
                real_ooms: Vec::new(),
                replay_ooms: Vec::new(),
                survived_real_ooms: 0,
                shared_caught_ooms: 0,
                scratch_oom: None,
                scratch_oom_uncaught: false,
                events_replayed: 0,
            },
            mode,
            timing,
            limits,
            stop_at,
            live,
            skipped: HashSet::default(),
            window_start: 0,
            sync_completions: Vec::new(),
            completion_run: (0, false),
            early_completions: Vec::new(),
            real_reserved: self.facts.start.reserved_bytes,
            segments_made: HashMap::new(),
            drawn_state: match placement {
                Placement::Recorded => None,
                Placement::Drawn(seed) => Some(seed),
            },
            last_alloc: self
                .trace
                .actions
                .iter()
                .rposition(|a| *a == TraceAction::Alloc)
                .unwrap_or(0),
            next_event: 0,
            finished: false,
        }
    }

    /// Where the request at event `to` puts new segments: the trace's segment events since
    /// `from`, else the recorded run's segments by size and ordinal (see [`TraceHints`]).
    fn trace_hints<'h>(
        &'h self,
        from: usize,
        to: usize,
        made_by_size: &'h mut HashMap<u64, usize>,
        drawn: Option<&'h mut u64>,
    ) -> TraceHints<'h> {
        TraceHints {
            trace: self.trace,
            from,
            to,
            facts: self.facts,
            made_by_size,
            drawn,
        }
    }

    /// Replays up to `events` more events of `pass` (from where the last call stopped); true
    /// once the pass is over (the trace's end, a stop, an out-of-memory or a contradiction).
    /// The web page replays a range of events per step this way; a pass made in one call and
    /// one made a range at a time end in the same state.
    fn advance(
        &self,
        pass: &mut Pass,
        events: usize,
        progress: &dyn Fn(usize) -> bool,
    ) -> Result<bool, ReplayError> {
        if pass.finished {
            return Ok(true);
        }
        let Pass {
            result,
            mode,
            timing,
            limits,
            stop_at,
            live,
            skipped,
            window_start: saved_window_start,
            sync_completions,
            completion_run: saved_completion_run,
            early_completions,
            real_reserved: saved_real_reserved,
            segments_made,
            drawn_state: saved_drawn_state,
            last_alloc,
            next_event,
            finished,
        } = pass;
        let stop_at = *stop_at;
        let mut slice = Replaying {
            result,
            live,
            skipped,
            sync_completions,
            early_completions,
            segments_made,
            mode: *mode,
            timing: *timing,
            limits: *limits,
            last_alloc: *last_alloc,
            index: *next_event,
            window_start: *saved_window_start,
            completion_run: *saved_completion_run,
            real_reserved: *saved_real_reserved,
            drawn_state: *saved_drawn_state,
        };
        let len = self.trace.len();
        let slice_end = slice.index.saturating_add(events);
        let mut paused = false;
        while slice.index < len {
            let index = slice.index;
            if index >= slice_end {
                paused = true;
                break;
            }
            if index.is_multiple_of(PROGRESS_EVENTS) && !progress(index) {
                return Err(ReplayError::Cancelled);
            }
            if stop_at == Some(index) {
                break;
            }
            slice.result.model.event = index;
            match self.replay_event(&mut slice) {
                ControlFlow::Continue(Then::NextEvent) => {
                    slice.index += 1;
                    slice.result.events_replayed = slice.index;
                }
                ControlFlow::Continue(Then::Jumped) => {}
                ControlFlow::Break(()) => break,
            }
        }
        let index = slice.index;
        slice.result.events_replayed = index.min(len);
        *saved_window_start = slice.window_start;
        *saved_completion_run = slice.completion_run;
        *saved_real_reserved = slice.real_reserved;
        *saved_drawn_state = slice.drawn_state;
        #[cfg(any(test, feature = "test-fixtures"))]
        EVENTS_REPLAYED.with(|count| count.set(count.get() + (index - *next_event)));
        *next_event = index;
        *finished = !paused;
        Ok(*finished)
    }

    /// The step [`Self::advance`] takes per event: replays the event at `s.index`, one step of
    /// its own per kind of event. A break ends the pass (the result says why).
    #[inline]
    fn replay_event(&self, s: &mut Replaying) -> ControlFlow<(), Then> {
        let index = s.index;
        match self.trace.actions[index] {
            TraceAction::Alloc => self.replay_request(s),
            TraceAction::FreeRequested if s.skipped.contains(&self.address_at(index)) => {
                self.skip_scratch_free(s)
            }
            TraceAction::FreeCompleted if s.skipped.remove(&self.address_at(index)) => {
                s.window_start = index + 1;
                ControlFlow::Continue(Then::NextEvent)
            }
            TraceAction::FreeRequested => self.replay_free(s),
            TraceAction::FreeCompleted => self.replay_free_completion(s),
            TraceAction::SegmentFree | TraceAction::SegmentUnmap => self.replay_release_run(s),
            TraceAction::Oom => self.replay_recorded_oom(s),
            TraceAction::SegmentAlloc | TraceAction::SegmentMap => {
                s.real_reserved = s.real_reserved.saturating_add(self.size_at(index));
                ControlFlow::Continue(Then::NextEvent)
            }
            TraceAction::Snapshot
            | TraceAction::UserDefined
            | TraceAction::Annotate
            | TraceAction::Unknown(_) => ControlFlow::Continue(Then::NextEvent),
        }
    }

    /// The address of event `index` (0 when the trace has none for it).
    #[inline]
    fn address_at(&self, index: usize) -> u64 {
        self.trace.addresses.get(index).copied().unwrap_or(0)
    }

    /// The size of event `index` in bytes (0 when the trace has none for it).
    #[inline]
    fn size_at(&self, index: usize) -> u64 {
        self.trace.sizes_bytes.get(index).copied().unwrap_or(0)
    }

    /// The rank of event `index`'s stream among the trace's (see [`Self::stream_rank`]).
    #[inline]
    fn stream_at(&self, index: usize) -> u16 {
        self.stream_rank(self.trace.streams.get(index).copied().unwrap_or(0))
    }

    /// Whether the event after `index` completes the free of `address` that event `index`
    /// requested: a free with no other stream's work to wait for, done at once.
    #[inline]
    fn completed_next(&self, index: usize, address: u64) -> bool {
        self.trace.actions.get(index + 1) == Some(&TraceAction::FreeCompleted)
            && self.address_at(index + 1) == address
    }

    /// The request of `size` bytes at `s.index` (an allocation, or one the real run failed),
    /// served in the real allocator's order (see [`malloc_in_trace_order`]), its new segments
    /// placed where the trace's segment events since the previous request say.
    #[inline]
    fn serve(&self, s: &mut Replaying, size: u64) -> Result<BlockHandle, ModelOom> {
        let index = s.index;
        malloc_in_trace_order(
            &mut s.result.model,
            (
                size,
                self.stream_at(index),
                self.facts.routing.of_request(index),
                index,
            ),
            &mut self.trace_hints(
                s.window_start,
                index,
                s.segments_made,
                s.drawn_state.as_mut(),
            ),
            s.early_completions,
            s.sync_completions,
        )
    }

    /// The trace's allocation at `s.index`: served ([`Self::serve`]) and held live
    /// ([`Self::hold_served`]), or failed ([`Self::request_failed`]).
    #[inline]
    fn replay_request(&self, s: &mut Replaying) -> ControlFlow<(), Then> {
        let index = s.index;
        let address = self.address_at(index);
        let served = self.serve(s, self.size_at(index));
        match served {
            Ok(handle) => self.hold_served(s, address, handle)?,
            Err(oom) => self.request_failed(s, address, oom)?,
        }
        s.window_start = index + 1;
        ControlFlow::Continue(Then::NextEvent)
    }

    /// Checks the block the model served for the allocation at `s.index` against the trace
    /// (under [`Mode::Check`]: the trace's address, the trace's reserved bytes), then holds it
    /// live at the trace's `address`. A break records the divergence, or the contradiction of
    /// an address allocated twice.
    #[inline]
    fn hold_served(&self, s: &mut Replaying, address: u64, handle: BlockHandle) -> ControlFlow<()> {
        let index = s.index;
        let model = &s.result.model;
        if s.mode == Mode::Check && model.block_address(handle) != Some(address) {
            s.result.divergence = Some((
                index,
                format!(
                    "the trace's allocation got address {address:#x}, the replay handed out {:#x}",
                    model.block_address(handle).unwrap_or(0)
                ),
            ));
            return ControlFlow::Break(());
        }
        if let Some(difference) = s.reserved_differs(index) {
            s.result.divergence = Some(difference);
            return ControlFlow::Break(());
        }
        if s.live.insert(address, handle).is_some() {
            s.result.incomplete = Some(Incomplete {
                event_index: index,
                reason: format!(
                    "the trace allocates at {address:#x}, which an earlier allocation still holds"
                ),
            });
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    /// The model could not serve the allocation at `s.index` (at the trace's `address`). Under
    /// [`Mode::WhatIf`] a library's scratch buffer may have been caught (a workspace): the
    /// replay goes on without it and skips its frees. Anything else ends the pass at this
    /// out-of-memory, a divergence under [`Mode::Check`] (the real run served it).
    fn request_failed(&self, s: &mut Replaying, address: u64, oom: ModelOom) -> ControlFlow<()> {
        let index = s.index;
        let point = self.oom_point(index, oom, &mut s.result.model, self.stack_of(index));
        s.result.replay_ooms.push(index);
        if s.mode == Mode::WhatIf && self.is_scratch(index) {
            // Perhaps caught (a library's workspace): go on without it.
            s.result.scratch_oom.get_or_insert(point);
            s.result.scratch_oom_uncaught |= !self.retried_by_torch(index);
            s.skipped.insert(address);
            return ControlFlow::Continue(());
        }
        s.result.oom = Some(point);
        if s.mode == Mode::Check {
            s.result.divergence = Some((
                index,
                format!(
                    "the replay ran out of memory on a {} request that the real run served",
                    format_bytes(oom.request_bytes)
                ),
            ));
        }
        ControlFlow::Break(())
    }

    /// The free at `s.index` of a scratch buffer this setting went on without (see
    /// [`Self::request_failed`]): the program never had it, so nothing is freed; a completion
    /// right after it is taken along.
    #[inline]
    fn skip_scratch_free(&self, s: &mut Replaying) -> ControlFlow<(), Then> {
        let address = self.address_at(s.index);
        if self.completed_next(s.index, address) {
            s.skipped.remove(&address);
            s.index += 1;
        }
        s.window_start = s.index + 1;
        ControlFlow::Continue(Then::NextEvent)
    }

    /// The free the trace requests at `s.index`: completed at once when the next event
    /// completes it (both events taken), else deferred until the trace's completion (under
    /// [`Timing::Early`], until the next request). A break records a free of a block the
    /// replay does not know.
    #[inline]
    fn replay_free(&self, s: &mut Replaying) -> ControlFlow<(), Then> {
        let index = s.index;
        let address = self.address_at(index);
        let immediate = self.completed_next(index, address);
        let handle = s.live.get(&address).copied();
        let freed = handle.is_some_and(|handle| s.result.model.free(handle, !immediate));
        if let Some(handle) = handle
            && freed
            && !immediate
            && s.timing == Timing::Early
        {
            s.early_completions.push(handle);
        }
        if !freed {
            s.result.incomplete = Some(Incomplete {
                event_index: index,
                reason: format!(
                    "the trace frees {address:#x}, which no allocation the replay knows holds"
                ),
            });
            return ControlFlow::Break(());
        }
        if immediate {
            s.live.remove(&address);
            s.index += 1;
        }
        s.window_start = s.index + 1;
        ControlFlow::Continue(Then::NextEvent)
    }

    /// The completion at `s.index` of a deferred free: the model completes it now, or (in a
    /// run of completions the real allocator made inside the next request's failure path, see
    /// [`Self::completes_in_failure_path`]) at that request; under [`Timing::Early`] the free
    /// completed already, and this only ends the allocation's life. A break records a
    /// completion of a free the replay does not know.
    #[inline]
    fn replay_free_completion(&self, s: &mut Replaying) -> ControlFlow<(), Then> {
        let index = s.index;
        let address = self.address_at(index);
        if index >= s.completion_run.0 && s.timing == Timing::Recorded {
            s.completion_run =
                self.completes_in_failure_path(index, s.window_start, s.real_reserved, &s.limits);
        }
        match s.live.remove(&address) {
            // Completed at the request after its free already; the trace's completion only
            // ends the allocation's life.
            Some(_) if s.timing == Timing::Early => {}
            Some(handle) if s.completion_run.1 => {
                s.sync_completions.push(handle);
            }
            Some(handle) => s.result.model.complete_free(handle),
            None => {
                s.result.incomplete = Some(Incomplete {
                    event_index: index,
                    reason: format!(
                        "the trace completes a free of {address:#x}, which the replay does not \
                         know"
                    ),
                });
                return ControlFlow::Break(());
            }
        }
        s.window_start = index + 1;
        ControlFlow::Continue(Then::NextEvent)
    }

    /// The run of segment releases starting at `s.index`, taken whole: the allocator's own
    /// (inside a request that needed memory, which the model makes itself) or the program's
    /// `empty_cache()`, which the model is told. Releases of a private pool's segments tell the
    /// model the program released that pool. The cursor moves past the run; a break records
    /// a divergence of the reserved bytes after an `empty_cache()` (under [`Mode::Check`]).
    #[inline]
    fn replay_release_run(&self, s: &mut Replaying) -> ControlFlow<(), Then> {
        let index = s.index;
        let end = self.release_run_end(index);
        s.real_reserved = s
            .real_reserved
            .saturating_sub((index..end).map(|i| self.size_at(i)).sum::<u64>());
        // A private pool's segment released: the program had released the pool (deleted its
        // graph or its `MemPool`), so releasing cached memory frees its cached segments now.
        for release in index..end {
            if let Some(&pool) = self.facts.routing.releases.get(&release) {
                s.result.model.release_pool(pool);
            }
        }
        if self.releases_are_empty_cache(index, end, &s.limits) {
            s.result.model.empty_cache();
            s.window_start = end;
            if let Some(difference) = s.reserved_differs(end - 1) {
                s.result.divergence = Some(difference);
                return ControlFlow::Break(());
            }
        }
        s.index = end;
        ControlFlow::Continue(Then::Jumped)
    }

    /// An out-of-memory the real run hit at `s.index`: the model tries the request too.
    /// Served, it is a divergence under [`Mode::Check`]; otherwise it stays allocated (the
    /// real program never got it, so it never frees it). Failed too, see
    /// [`Self::recorded_oom_failed_too`].
    #[inline]
    fn replay_recorded_oom(&self, s: &mut Replaying) -> ControlFlow<(), Then> {
        let index = s.index;
        let size = self.size_at(index);
        s.result.real_ooms.push(index);
        let served = self.serve(s, size);
        match served {
            Ok(_) => {
                if s.mode == Mode::Check {
                    s.result.divergence = Some((
                        index,
                        format!(
                            "the real run ran out of memory on a {} request here, the replay did \
                             not",
                            format_bytes(size)
                        ),
                    ));
                    return ControlFlow::Break(());
                }
                // The request this setting served stays allocated: the real program never got
                // it, so it never frees it.
                s.result.survived_real_ooms += 1;
            }
            Err(oom) => self.recorded_oom_failed_too(s, oom)?,
        }
        s.window_start = index + 1;
        ControlFlow::Continue(Then::NextEvent)
    }

    /// The model failed the request at `s.index` that the real run failed too. Under
    /// [`Mode::WhatIf`] the replay goes on as the real run did when the program caught it
    /// (allocated again later), and ends at it otherwise; a self-check goes on, breaking only
    /// where the reserved bytes differ.
    fn recorded_oom_failed_too(&self, s: &mut Replaying, oom: ModelOom) -> ControlFlow<()> {
        let index = s.index;
        let point = self.oom_point(index, oom, &mut s.result.model, self.stack_of(index));
        s.result.replay_ooms.push(index);
        if s.mode == Mode::WhatIf {
            if index < s.last_alloc {
                // The real program caught this failure and went on (it allocated again
                // later): failing here too, the setting goes on exactly as the real run did.
                // Only a failure the real run did not survive ends the what-if.
                s.result.shared_caught_ooms += 1;
                return ControlFlow::Continue(());
            }
            s.result.oom = Some(point);
            return ControlFlow::Break(());
        }
        s.result.oom.get_or_insert(point);
        if let Some(difference) = s.reserved_differs(index) {
            s.result.divergence = Some(difference);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    /// Whether the request at `index` is a library's scratch buffer: made inside PyTorch's own
    /// code (see [`ReplayInput::made_inside_torch`]) and given back before any other request or
    /// free, as a kernel's workspace is. A user's tensor is not one, even when it is freed
    /// first (CPython frees a list's items last to first).
    fn is_scratch(&self, index: usize) -> bool {
        if !self.made_inside_torch(index) {
            return false;
        }
        let trace = self.trace;
        let Some(&address) = trace.addresses.get(index) else {
            return false;
        };
        for later in index + 1..trace.len() {
            match trace.actions[later] {
                TraceAction::FreeRequested => {
                    return trace.addresses.get(later) == Some(&address);
                }
                TraceAction::Alloc | TraceAction::Oom => return false,
                _ => {}
            }
        }
        false
    }

    /// Whether the C++ frames of the stack of event `index` show it requested inside a loop
    /// of PyTorch's that catches an out-of-memory error and tries again with less
    /// ([`RETRYING_FRAMES`]).
    fn retried_by_torch(&self, index: usize) -> bool {
        self.frame_names(index).any(|name| {
            RETRYING_FRAMES
                .iter()
                .any(|parts| parts.iter().all(|part| name.contains(part)))
        })
    }

    fn oom_point(
        &self,
        index: usize,
        oom: ModelOom,
        model: &mut AllocatorModel,
        stack: StackId,
    ) -> OomPoint {
        let limits = *model.limits_mut();
        OomPoint {
            event_index: index,
            request_bytes: oom.request_bytes,
            segment_bytes: oom.segment_bytes,
            reserved_bytes: oom.reserved_bytes,
            allocated_bytes: oom.allocated_bytes,
            allowed_bytes: limits.cap_bytes.or(limits.device_limit_bytes),
            stack,
        }
    }

    /// Turns the check run into the self-check.
    fn self_check(&self, recorded: &AllocConf, run: &RunResult) -> SelfCheck {
        let start = if self.facts.start.segments.is_empty() {
            ReplayStart::Empty
        } else {
            ReplayStart::Seeded {
                segments: self.facts.start.segments.len(),
                exact: self.travel.check().matches_final_state,
            }
        };
        let mut check = SelfCheck {
            reliable: false,
            recorded_conf: recorded.text.clone(),
            start,
            events: self.trace.len(),
            real_oom_events: run.real_ooms.clone(),
            replay_oom_events: run.replay_ooms.clone(),
            final_state_matches: false,
            diverged_at: None,
            problem: None,
            segments_compared: 0,
            blocks_compared: 0,
            cap_bytes: None,
        };
        if let Some(incomplete) = &run.incomplete {
            check.diverged_at = Some(incomplete.event_index);
            check.problem = Some(format!(
                "the trace contradicts the replayed state at event {}: {}",
                incomplete.event_index, incomplete.reason
            ));
            return check;
        }
        if let Some((index, why)) = &run.divergence {
            check.diverged_at = Some(*index);
            check.problem = Some(format!(
                "under the recorded settings ({}) the replay did something else than the real \
                 allocator at event {index}: {why}",
                recorded.text
            ));
            return check;
        }
        let replayed = run.model.state(self.travel.device(), &self.facts.streams);
        let real = self.travel.state_at(self.trace.len());
        check.segments_compared = real.segments.len();
        check.blocks_compared = real.block_count();
        match first_difference(&real, &replayed) {
            None => {
                check.final_state_matches = true;
                check.reliable = matches!(
                    start,
                    ReplayStart::Empty | ReplayStart::Seeded { exact: true, .. }
                );
                if !check.reliable {
                    check.problem = Some(
                        "the trace does not reach back to an empty allocator and the state at \
                         its first event could only be estimated"
                            .to_string(),
                    );
                }
            }
            Some(difference) => {
                check.problem = Some(format!(
                    "under the recorded settings ({}) the replay does not end in the snapshot's \
                     final state: {difference}",
                    recorded.text
                ));
            }
        }
        check
    }
}

/// The first difference between the real final state and the replayed one, in words.
fn first_difference(real: &AllocatorState, replayed: &AllocatorState) -> Option<String> {
    let describe = |s: &StateSegment| {
        format!(
            "{} segment at {:#x} of {}{}{}",
            s.pool.as_str(),
            s.address,
            format_bytes(s.size_bytes),
            if s.expandable { " (expandable)" } else { "" },
            if s.pool_id.is_default() {
                String::new()
            } else {
                format!(" in private pool ({}, {})", s.pool_id.0, s.pool_id.1)
            }
        )
    };
    for (index, real_segment) in real.segments.iter().enumerate() {
        let Some(replayed_segment) = replayed.segments.get(index) else {
            return Some(format!("the replay lacks the {}", describe(real_segment)));
        };
        if real_segment.address != replayed_segment.address
            || real_segment.size_bytes != replayed_segment.size_bytes
            || real_segment.expandable != replayed_segment.expandable
            || real_segment.pool_id != replayed_segment.pool_id
        {
            return Some(format!(
                "the snapshot has a {}, the replay a {}",
                describe(real_segment),
                describe(replayed_segment)
            ));
        }
        let blocks_match = real_segment.blocks.len() == replayed_segment.blocks.len()
            && real_segment
                .blocks
                .iter()
                .zip(&replayed_segment.blocks)
                .all(|(a, b)| {
                    a.address == b.address && a.size_bytes == b.size_bytes && a.status == b.status
                });
        if !blocks_match {
            let count = |s: &StateSegment, status: BlockStatus| {
                s.blocks.iter().filter(|b| b.status == status).count()
            };
            return Some(format!(
                "the blocks of the {} differ: {} allocated and {} free in the snapshot, {} and {} \
                 in the replay",
                describe(real_segment),
                count(real_segment, BlockStatus::Allocated),
                count(real_segment, BlockStatus::Free),
                count(replayed_segment, BlockStatus::Allocated),
                count(replayed_segment, BlockStatus::Free)
            ));
        }
    }
    if let Some(extra) = replayed.segments.get(real.segments.len()) {
        return Some(format!("the replay has an extra {}", describe(extra)));
    }
    None
}

/// Bytes as the what-if table shows them (GiB with two decimals above 1 GiB).
pub fn format_table_bytes(bytes: u64) -> String {
    if bytes >= GIB {
        format!("{:.2} GiB", bytes as f64 / GIB as f64)
    } else {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    }
}

/// `bits` as a number in `0..1` (its upper 53 bits).
fn unit_interval(bits: u64) -> f64 {
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// SplitMix64: a small, fast generator for drawn placements (reproducible from its seed).
fn split_mix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(all(test, feature = "native"))]
mod tests {
    use super::*;
    use crate::formats::pytorch::read_file;

    /// A real H200 snapshot of `tests/fixtures/whatif/`.
    fn travel(name: &str) -> TimeTravel {
        let path = crate::test_fixtures::fixture_path("whatif").join(name);
        let snapshot = read_file(&path, &|_| true).unwrap_or_else(|e| panic!("{name}: {e}"));
        TimeTravel::new(Arc::new(snapshot), 0)
    }

    fn request(conf: &str, cap_bytes: Option<u64>) -> WhatIfRequest {
        WhatIfRequest {
            device: 0,
            candidates: vec![AllocConf::parse(conf).unwrap_or_else(|e| panic!("{conf}: {e}"))],
            cap_bytes,
            device_memory_bytes: None,
        }
    }

    /// The web page's sweep, a range of events per step: no step replays much more than its
    /// range of events (over every pass it makes), the trace is scanned once, and the report is
    /// exactly what [`what_if`] gives with its settings side by side — for the sweep, for a
    /// given setting under a cap the trace itself could not have run under, for a trace whose
    /// frees waited for other streams (two passes per setting), and for a sweep under a cap
    /// (passes under drawn placements), each with ranges smaller than a pass and larger than
    /// several.
    #[test]
    fn what_if_in_steps_replays_a_range_of_events_a_step_and_reports_the_same() {
        let sweep = |cap_bytes| WhatIfRequest {
            device: 0,
            candidates: Vec::new(),
            cap_bytes,
            device_memory_bytes: None,
        };
        let cases = [
            ("kv_cache.pickle", sweep(None)),
            ("two_streams.pickle", sweep(None)),
            (
                "two_streams.pickle",
                request("garbage_collection_threshold:0.6", Some(296 * MIB)),
            ),
            ("frag_longlived.pickle", sweep(Some(400 * MIB))),
        ];
        let replayed = || EVENTS_REPLAYED.with(std::cell::Cell::get);
        let facts_built = || TRACE_FACTS_BUILT.with(std::cell::Cell::get);
        for (name, request) in cases {
            let travel = travel(name);
            let in_one_go =
                what_if(&travel, &request, &|_| true).unwrap_or_else(|e| panic!("{name}: {e}"));
            let events = travel.trace().len();
            for events_per_step in [events / 3, 4 * events] {
                let facts_before = facts_built();
                let replayed_before = replayed();
                let mut steps = WhatIfSteps::with_events_per_step(request.clone(), events_per_step);
                let mut counted = 0;
                let mut most_in_a_step = 0;
                let in_steps = loop {
                    let before = replayed();
                    let stepped = steps
                        .step(&travel)
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                    most_in_a_step = most_in_a_step.max(replayed() - before);
                    counted += 1;
                    if let Some(report) = stepped {
                        break report;
                    }
                    assert!(counted < 10_000, "{name}: never done");
                };
                // A range ends after the event it reaches (a release run is one event).
                assert!(
                    most_in_a_step <= events_per_step + 64,
                    "{name}: {most_in_a_step} events in a step of {events_per_step}"
                );
                let all_replayed = replayed() - replayed_before;
                assert!(counted > all_replayed / (events_per_step + 64), "{name}");
                // The trace is scanned and the start state built in the first step only.
                assert_eq!(facts_built() - facts_before, 1, "{name}");
                assert_eq!(in_steps, in_one_go, "{name} by {events_per_step}");
            }
        }
    }

    /// A pass made a range of events at a time ends exactly where a pass made in one go does,
    /// whatever the ranges (one event at a time included).
    #[test]
    fn a_pass_made_in_ranges_ends_in_the_same_state() {
        let travel = travel("two_streams.pickle");
        let facts = TraceFacts::new(&travel, None);
        let input = ReplayInput::new(&travel, &facts);
        let rules = AllocConf::parse("expandable_segments:True")
            .unwrap_or_else(|e| panic!("{e}"))
            .rules;
        let limits = Limits {
            cap_bytes: None,
            device_limit_bytes: None,
            expandable_va_bytes: facts.expandable_va_bytes,
        };
        let whole = input
            .run(
                &rules,
                limits,
                Mode::WhatIf,
                Assumed::RECORDED,
                None,
                &|_| true,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        for range in [1, 7, 1000] {
            let mut pass = input.start_pass(&rules, limits, Mode::WhatIf, Assumed::RECORDED, None);
            let mut calls = 0;
            while !input
                .advance(&mut pass, range, &|_| true)
                .unwrap_or_else(|e| panic!("{e}"))
            {
                calls += 1;
            }
            assert!(
                calls >= travel.trace().len() / (range + 64),
                "range {range}"
            );
            let (a, b) = (&pass.result, &whole);
            assert_eq!(a.events_replayed, b.events_replayed, "range {range}");
            assert_eq!(a.model.stats, b.model.stats, "range {range}");
            let state =
                |run: &RunResult| format!("{:?}", run.model.state(travel.device(), &facts.streams));
            assert_eq!(state(a), state(b), "range {range}");
        }
    }

    #[test]
    fn a_given_cap_below_what_the_trace_reserved_is_not_the_recorded_runs() {
        // The uncapped two-stream run reserved up to 380 MiB itself.
        let travel = travel("two_streams.pickle");
        let facts = TraceFacts::new(&travel, None);
        let input = ReplayInput::new(&travel, &facts);
        let evidence = input.limit_evidence(&input.facts.recorded_rules);
        assert_eq!(evidence.most_reserved_bytes, 380 * MIB);
        // Under 296 MiB the recorded run could not have run: the self-check keeps the trace's
        // own limits (none) and passes; the setting still runs under the given cap.
        let cap = 296 * MIB;
        let report = what_if(
            &travel,
            &request("garbage_collection_threshold:0.6", Some(cap)),
            &|_| true,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            report.self_check.reliable,
            "{:?}",
            report.self_check.problem
        );
        assert_eq!(report.self_check.cap_bytes, None);
        assert_eq!(report.limits.cap_bytes, Some(cap));
        assert!(report.results[0].peak_reserved_bytes <= cap);
        assert!(
            report
                .notes
                .iter()
                .any(|n| n.contains("did not run under that cap")),
            "{:?}",
            report.notes
        );
        // A cap the trace fits under is still the recorded run's: the self-check replays under
        // it (and passes: the trace never needed more).
        let roomy = 400 * MIB;
        let report = what_if(&travel, &request("default", Some(roomy)), &|_| true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            report.self_check.reliable,
            "{:?}",
            report.self_check.problem
        );
        assert_eq!(report.self_check.cap_bytes, Some(roomy));
        assert!(
            !report
                .notes
                .iter()
                .any(|n| n.contains("did not run under that cap")),
            "{:?}",
            report.notes
        );
    }

    #[test]
    fn frees_that_wait_for_other_streams_give_a_peak_range() {
        let travel = travel("two_streams.pickle");
        assert!(has_deferred_frees(travel.trace()));
        let report = what_if(&travel, &request("default", None), &|_| true)
            .unwrap_or_else(|e| panic!("{e}"));
        let outcome = &report.results[0];
        // As recorded the replay is the real run (380 MiB); with every other-stream use done by
        // the next request, the blocks come back sooner and far less is reserved.
        assert_eq!(outcome.peak_reserved_bytes, 380 * MIB);
        let (low, high) = outcome
            .peak_reserved_range_bytes
            .unwrap_or_else(|| panic!("a two-stream trace has a range"));
        assert_eq!(high, 380 * MIB);
        assert!(low < 300 * MIB, "{low}");
        assert!(low >= outcome.peak_allocated_bytes.min(208 * MIB));
        assert!(!outcome.timing_uncertain);
    }

    #[test]
    fn a_verdict_that_differs_between_gpu_timings_is_uncertain() {
        // Under 220 MiB the recorded timing runs out; with the side stream's work finished
        // sooner the verdict differs.
        let travel = travel("two_streams.pickle");
        let report = what_if(&travel, &request("default", Some(220 * MIB)), &|_| true)
            .unwrap_or_else(|e| panic!("{e}"));
        let outcome = &report.results[0];
        assert!(outcome.oom.is_some());
        assert!(outcome.timing_uncertain);
        assert!(outcome.verdict_uncertain());
        // Under 260 MiB both timings run: certain, with a range.
        let report = what_if(&travel, &request("default", Some(260 * MIB)), &|_| true)
            .unwrap_or_else(|e| panic!("{e}"));
        let outcome = &report.results[0];
        assert!(outcome.runs());
        assert!(!outcome.verdict_uncertain());
        assert!(outcome.peak_reserved_range_bytes.is_some());
    }

    #[test]
    fn a_convolution_workspace_pytorch_retries_is_no_doubt() {
        // The same CNN, traced with C++ frames (`stacks="all"`): the workspace is requested
        // under at::native::run_single_conv, whose failure PyTorch catches (the real run
        // recorded 24 caught failures there and finished at 1784 MiB).
        let (travel, outcome, scratch) = cnn_workspace_failure("heldout/cnn_train.pickle");
        assert!(outcome.scratch_oom_caught);
        assert!(outcome.runs());
        assert!(!outcome.verdict_uncertain());
        // Its peak is the Python-stack trace's: the frames change the verdict's doubt only.
        let (_, python, _) = cnn_workspace_failure("python_stacks/cnn_train.pickle");
        assert_eq!(outcome.peak_reserved_bytes, python.peak_reserved_bytes);
        // A reduction's scratch buffer in the same trace is no convolution's: not retried.
        let facts = TraceFacts::new(&travel, None);
        let input = ReplayInput::new(&travel, &facts);
        assert!(input.retried_by_torch(scratch.event_index));
        let trace = travel.trace();
        let reduction = (0..trace.len())
            .find(|&i| {
                trace.actions[i] == TraceAction::Alloc
                    && input.is_scratch(i)
                    && !input.retried_by_torch(i)
            })
            .unwrap_or_else(|| panic!("no other scratch buffer in the trace"));
        let names: Vec<&str> = input.frame_names(reduction).collect();
        assert!(
            names.iter().any(|name| name.contains("reduce_kernel")),
            "{names:?}"
        );
    }

    /// The held-out CNN's trace `name` replayed under roundup_power2_divisions:4 and its
    /// 1.99 GiB cap, where a 576 MiB convolution workspace, rounded to 640 MiB, does not fit:
    /// the trace, the outcome and that failure.
    fn cnn_workspace_failure(name: &str) -> (TimeTravel, SettingOutcome, OomPoint) {
        let travel = travel(name);
        let report = what_if(
            &travel,
            &request("roundup_power2_divisions:4", Some(2_134_900_736)),
            &|_| true,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let outcome = report.results[0].clone();
        let scratch = outcome
            .scratch_oom
            .unwrap_or_else(|| panic!("the workspace does not fit: {outcome:?}"));
        assert_eq!(scratch.request_bytes, 640 * MIB);
        (travel, outcome, scratch)
    }

    #[test]
    fn a_failed_scratch_buffer_is_uncertain_and_the_replay_goes_on() {
        // The held-out CNN (cuDNN convolutions) under roundup_power2_divisions:4 and a 1.99 GiB
        // cap: a 576 MiB convolution workspace, rounded to 640 MiB, does not fit. The real run
        // of that setting and cap recorded 24 failures of it, went on without it and finished.
        // Recorded with Python frames only, the trace cannot tell a convolution's workspace
        // from another kernel's scratch buffer, whose failure would end the job.
        let (travel, outcome, scratch) = cnn_workspace_failure("python_stacks/cnn_train.pickle");
        let facts = TraceFacts::new(&travel, None);
        let input = ReplayInput::new(&travel, &facts);
        assert!(input.is_scratch(scratch.event_index));
        assert!(outcome.oom.is_none(), "{:?}", outcome.oom);
        assert_eq!(outcome.events_replayed, travel.len());
        assert!(outcome.only_scratch_failed());
        assert!(outcome.verdict_uncertain());
        assert!(!outcome.runs());
        // A request the trace keeps (activations) still ends the run.
        let report = what_if(&travel, &request("default", Some(256 * MIB)), &|_| true)
            .unwrap_or_else(|e| panic!("{e}"));
        let outcome = &report.results[0];
        let oom = outcome
            .oom
            .unwrap_or_else(|| panic!("256 MiB is too little: {outcome:?}"));
        assert!(!input.is_scratch(oom.event_index));
        assert!(!outcome.verdict_uncertain());
    }

    #[test]
    fn a_single_stream_trace_is_replayed_once_and_has_no_range() {
        let travel = travel("kv_cache.pickle");
        assert!(!has_deferred_frees(travel.trace()));
        let report = what_if(&travel, &request("expandable_segments:True", None), &|_| {
            true
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(report.results[0].peak_reserved_range_bytes, None);
        assert!(!report.results[0].timing_uncertain);
    }

    #[test]
    fn a_segment_made_after_a_release_goes_where_the_driver_puts_it() {
        // The real transformer step (H200) under a 3353 MiB cap: every real run ran out, after
        // 1653 allocations (7 of 7, docs/whatif-validation.md). With the segments made after
        // the cap's releases placed where the recorded uncapped run had segments of their
        // size, or above every address, the replay fitted; placed as the driver places them
        // (into released address space, else fresh space below the live segments), it runs
        // out where the real runs did.
        let travel = travel("transformer_step.pickle");
        let report = what_if(&travel, &request("default", Some(3353 << 20)), &|_| true)
            .unwrap_or_else(|e| panic!("{e}"));
        let outcome = &report.results[0];
        let oom = outcome
            .oom
            .unwrap_or_else(|| panic!("runs out, as every real run did: {outcome:?}"));
        let allocations_before = travel.trace().actions[..oom.event_index]
            .iter()
            .filter(|&&action| action == TraceAction::Alloc)
            .count();
        assert_eq!(allocations_before, 1653);
        assert!(!outcome.verdict_uncertain(), "{:?}", outcome.placement);
    }

    #[test]
    fn a_verdict_that_depends_on_which_released_range_is_reused_is_uncertain() {
        // The held-out checkpointed transformer under max_split_size_mb:64 and a 777 MiB cap:
        // its ground truth fit, 3 of 6 repeats ran out. Which released range the driver gives
        // a new segment follows no rule the trace shows; the drawn choices disagree.
        let travel = travel("heldout2/ckpt_transformer.pickle");
        let cap_bytes = 814_743_552;
        let report = what_if(
            &travel,
            &request("max_split_size_mb:64", Some(cap_bytes)),
            &|_| true,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let outcome = &report.results[0];
        let spread = outcome
            .placement
            .unwrap_or_else(|| panic!("a peak within a tenth of the cap is replayed again"));
        assert_eq!(spread.drawn, DRAWN_PLACEMENTS);
        assert!(outcome.placement_uncertain(), "{spread:?}");
        assert!(outcome.verdict_uncertain());
        let (low, high) = outcome
            .peak_range_bytes()
            .unwrap_or_else(|| panic!("a range"));
        assert!(low <= outcome.peak_reserved_bytes && outcome.peak_reserved_bytes <= high);
        assert!(high <= cap_bytes, "a peak past the cap: {high}");
        // The drawn choices come from fixed seeds: the same question gets the same answer.
        let again = what_if(
            &travel,
            &request("max_split_size_mb:64", Some(cap_bytes)),
            &|_| true,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again.results[0].placement, outcome.placement);
    }

    #[test]
    fn far_from_every_limit_the_placement_is_not_replayed() {
        // No cap and no recorded OOM: no limit the order of segments could make it reach.
        let travel = travel("transformer_step.pickle");
        let uncapped = what_if(&travel, &request("default", None), &|_| true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(uncapped.results[0].placement, None);
        // Twice the peak as a cap: far from it, nothing to replay either.
        let peak = uncapped.results[0].peak_reserved_bytes;
        let roomy = what_if(&travel, &request("default", Some(2 * peak)), &|_| true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(roomy.results[0].placement, None);
        assert!(!roomy.results[0].verdict_uncertain());
    }

    #[test]
    fn a_verdict_every_placement_agrees_on_stays_certain() {
        // kv_cache under a 230 MiB cap with roundup 4 runs out in every order of segments
        // (real run: ran out, docs/whatif-validation.md).
        let travel = travel("kv_cache.pickle");
        let report = what_if(
            &travel,
            &request("roundup_power2_divisions:4", Some(230 << 20)),
            &|_| true,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let outcome = &report.results[0];
        assert!(outcome.oom.is_some());
        let spread = outcome
            .placement
            .unwrap_or_else(|| panic!("replayed again"));
        assert_eq!(spread.ran_out, spread.drawn);
        assert!(!outcome.placement_uncertain());
        assert!(!outcome.verdict_uncertain());
    }

    #[test]
    fn the_recorded_run_itself_is_not_asked_about_other_placements() {
        // frag_oom ran out for real under its (inferred) cap: that row is what happened. The
        // same settings asked as a candidate are a question about another run.
        let snapshot = crate::test_fixtures::pytorch_snapshot("frag_oom.pickle");
        let travel = TimeTravel::new(Arc::new(snapshot), 0);
        let report = what_if(&travel, &request("default", None), &|_| true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(report.recorded.oom.is_some());
        assert_eq!(report.recorded.placement, None);
        assert!(!report.recorded.verdict_uncertain());
        let asked = &report.results[0];
        assert!(asked.placement.is_some(), "{asked:?}");
    }

    /// A real run that captures a CUDA graph and fills a `torch.cuda.MemPool`
    /// (`tests/fixtures/pytorch/graphs.pickle`, H200, PyTorch 2.11: a trace without pool ids
    /// or stacks). With its private pools modelled the self-check passes, block by block and
    /// pool by pool, and no limit is read into the `empty_cache()` that `torch.cuda.graph` makes
    /// as the capture begins. Replayed like the default pools, the capture's first request gets
    /// a cached block of the default pool and the self-check fails.
    #[test]
    fn a_program_that_captures_a_graph_passes_the_self_check() {
        let path = crate::test_fixtures::pytorch_path("graphs.pickle");
        let snapshot = read_file(&path, &|_| true).unwrap_or_else(|e| panic!("{e}"));
        let travel = TimeTravel::new(Arc::new(snapshot), 0);
        let report = what_if(
            &travel,
            &WhatIfRequest {
                device: 0,
                candidates: Vec::new(),
                cap_bytes: None,
                device_memory_bytes: None,
            },
            &|_| true,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let check = &report.self_check;
        assert!(check.reliable, "{:?}", check.problem);
        assert!(check.final_state_matches && check.segments_compared == 12);
        assert_eq!(report.limits.device_limit_bytes, None);
        assert!(report.results.iter().all(SettingOutcome::runs));

        let mut facts = TraceFacts::new(&travel, None);
        assert_eq!(facts.routing.ids, [PoolId(1, 0), PoolId(0, 1)]);
        // The capture's requests (on its stream) and the MemPool's are routed; the RNG state
        // the capture allocates before it begins is not.
        let routed: Vec<usize> = {
            let mut r: Vec<usize> = facts.routing.requests.keys().copied().collect();
            r.sort_unstable();
            r
        };
        assert_eq!(routed, [45, 47, 48, 50, 51, 53, 55, 57]);
        // A trace that records each event's pool (PyTorch with `pool_id` on trace entries) is
        // routed by it: the same requests, though the segments no longer say.
        let mut recorded = (**travel.snapshot()).clone();
        let pools = facts.routing.ids.clone();
        recorded.traces[0].pool_ids = routed
            .iter()
            .map(|&i| (i as u32, pools[usize::from(facts.routing.requests[&i]) - 1]))
            .collect();
        for segment in &mut recorded.segments {
            segment.pool_id = PoolId::default();
        }
        let by_ids = TimeTravel::new(Arc::new(recorded), 0);
        let by_ids = PoolRouting::learn(
            by_ids.trace(),
            &by_ids.state_at(0),
            &by_ids.state_at(by_ids.len()),
        );
        assert_eq!(by_ids.requests, facts.routing.requests);
        facts.routing = PoolRouting::default();
        let input = ReplayInput::new(&travel, &facts);
        let rules = AllocConf::recorded(travel.snapshot().settings.as_ref());
        let limits = Limits {
            cap_bytes: None,
            device_limit_bytes: None,
            expandable_va_bytes: facts.expandable_va_bytes,
        };
        let run = input
            .run(
                &rules.rules,
                limits,
                Mode::Check,
                Assumed::RECORDED,
                None,
                &|_| true,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!input.self_check(&rules, &run).reliable);
    }
}
