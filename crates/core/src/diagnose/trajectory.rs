//! How the live set (allocated bytes) moved before a failure, from an allocator trace: did the job
//! complete an iteration, is the live set steady from iteration to iteration, or still growing?
//!
//! A frozen state at the failure cannot tell a batch that never fit from a job that ran for hours
//! and then fragmented: the trace can. Iterations come from the trace's `ProfilerStep#N`
//! annotations when the job used the profiler's step markers, and otherwise from the live set
//! itself: an iteration ends when the live set falls back by at least half of what it rose since
//! the last one, freeing a block allocated early in that rise (at least half of the rise was
//! allocated after it: a backward pass frees the forward's activations, an optimizer's
//! `zero_grad` the gradients of the whole backward pass). A layer's temporary buffer, freed right
//! after it was allocated, does not end an iteration, so the first forward pass through twelve
//! identical layers is one rise, not twelve iterations. Falls much smaller than the largest (the
//! next batch's input replacing the last) are merged into the iteration they belong to. This is a
//! heuristic: a step whose backward pass frees memory in several large waves can count as more
//! than one iteration.
//!
//! A job that keeps something from every step (a loss summed as a tensor, outputs appended to a
//! list, `retain_graph=True`) never falls back to a floor. When the falls show fewer than
//! [`MIN_ITERATIONS_FOR_TREND`] iterations, the steps are found from the repeating call-site
//! pattern instead (`analysis::repetition::step_starts`: a step's first allocation site
//! recurring at the outermost level of the user's code that varies), when it shows more.
//!
//! With at least [`MIN_ITERATIONS_FOR_TREND`] iterations, the floors of the iterations (the live
//! set each fell back to) are judged by [`super::growth::assess`]: growing, or steady. A growing
//! live set names the call site that kept the most of it ([`Trajectory::kept_by`]).

use std::collections::HashMap;

use super::growth::{self, Confidence, Shape};
use super::log::StepSeries;
use crate::analysis::categories::block_stack;
use crate::analysis::deadline::Step;
use crate::analysis::repetition::{self, Repetition};
use crate::analysis::timetravel::{BlockStatus, TimeTravel};
use crate::model::allocator::{StackId, TraceAction};
use crate::model::{MIB, format_bytes};

/// A growing live set whose new tensors hold less than this share of its growth grows by
/// enlarging the same tensors (see [`Trajectory::grows_by_enlarging`]).
const ENLARGING_MAX_NEW_TENSORS_SHARE: f64 = 0.5;

/// Iterations needed before their floors are judged for growth.
pub const MIN_ITERATIONS_FOR_TREND: usize = 4;
/// A fall must give back at least this share of the rise since the last iteration's end.
const FALL_SHARE: f64 = 0.5;
/// ... and free a block after which at least this share of the rise was allocated before the
/// peak (memory from early in the rise, not a temporary made just before the fall).
const REACH_SHARE: f64 = 0.5;
/// A rise of the iterations' floors smaller than [`growth::MIN_GROWTH_BYTES`] is growth when it
/// is at least this share of their highest peak: a tenth of the job matters to an
/// out-of-memory error, whatever the size of the job...
const MIN_GROWTH_SHARE_OF_PEAK: f64 = 0.1;
/// ... and then their line must fit at least this well, without slowing down.
const SMALL_GROWTH_MIN_R_SQUARED: f64 = 0.95;
/// Cycles rising less than this share of the largest one are merged into the next.
const SMALL_CYCLE_SHARE: f64 = 0.25;
/// Wiggles below this share of the range (or [`MIN_WIGGLE_BYTES`]) are ignored when finding the
/// live set's turning points.
const WIGGLE_SHARE: f64 = 0.01;
const MIN_WIGGLE_BYTES: u64 = MIB;

/// Where the iteration boundaries came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IterationSource {
    /// `ProfilerStep#N` annotations recorded with the snapshot.
    ProfilerSteps,
    /// Falls of the live set back towards its floor.
    LiveSetFalls,
    /// The figures a training log printed after each step.
    LoggedSteps,
    /// Steps found from the repeating call-site pattern, where the live set never fell back.
    CallSitePattern,
}

/// One completed iteration: trace event positions (state after that many events; for logged
/// steps, the log line) and the live set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Iteration {
    pub start_event: usize,
    pub end_event: usize,
    /// Lowest live set in the iteration.
    pub floor_bytes: u64,
    /// Highest live set in the iteration.
    pub peak_bytes: u64,
}

/// What the live set did across the iterations (or, without any, across the trace).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LiveGrowth {
    /// Too few iterations to tell.
    Unknown,
    /// The iterations' floors stay level (or levelled off after a warm-up): a steady state
    /// whose iterations peak at `peak_bytes`.
    Steady { peak_bytes: u64 },
    /// The floors keep rising by `per_iteration_bytes` per iteration.
    Growing {
        per_iteration_bytes: u64,
        r_squared: f64,
        decelerating: bool,
        confidence: Confidence,
    },
    /// No iteration completed: the live set rose from `from_bytes` to `to_bytes` without ever
    /// falling back (`bytes_per_second` when the trace recorded times).
    RoseWithoutFallingBack {
        from_bytes: u64,
        to_bytes: u64,
        bytes_per_second: Option<f64>,
    },
}

/// The live set's history up to the failure (or the end of the trace).
#[derive(Clone, Debug, PartialEq)]
pub struct Trajectory {
    /// Events looked at: up to the failure.
    pub events: usize,
    /// No tensor was alive when the trace begins: it shows the job from its start (no wrapped
    /// ring buffer, no tensor made before recording started).
    pub starts_empty: bool,
    pub source: IterationSource,
    /// Iterations completed before the failure.
    pub iterations: Vec<Iteration>,
    /// Live set just before the failure (or at the end).
    pub live_at_end_bytes: u64,
    /// Highest live set before the failure.
    pub peak_live_bytes: u64,
    /// Seconds the events span, when the trace recorded times.
    pub span_seconds: Option<f64>,
    pub growth: LiveGrowth,
    /// The share of the floors' growth that new tensors hold (see
    /// [`new_tensors_share_of_growth`]): about 1 when the job keeps new tensors, about 0 when
    /// the same tensors are replaced by larger ones; `None` without a trace or iterations, or
    /// when the live set is not growing.
    pub new_tensors_share_of_growth: Option<f64>,
    /// The call site (`analysis::frames::user_call_site`) that kept the most memory over the
    /// completed iterations of a growing live set (what they allocated and had not freed when the
    /// last one ended), with those bytes; `None` when the live set is not growing or there is no
    /// trace.
    pub kept_by: Option<(String, u64)>,
    /// The repetition inside the step that failed (`analysis::repetition::repetition_before`:
    /// the same call sites allocating layer after layer), from the last completed iteration's
    /// end (or the trace's start) to the failure; `None` when the events looked at do not end at
    /// a failure, or the step shows no repetition.
    pub failing_step: Option<Repetition>,
}

impl Trajectory {
    /// No iteration completed, and the trace shows everything since the allocator was empty: the
    /// job failed in its first step (or keeps everything it ever allocated).
    pub fn failed_in_first_step(&self) -> bool {
        self.starts_empty && self.iterations.is_empty()
    }

    /// The live set was still growing at the failure, with nothing to show it would level off:
    /// it grew from iteration to iteration, or it rose without ever falling back since the job
    /// began (a trace that starts mid-job shows only part of an iteration then).
    pub fn still_growing(&self) -> bool {
        match self.growth {
            LiveGrowth::Growing { decelerating, .. } => !decelerating,
            LiveGrowth::RoseWithoutFallingBack { .. } => self.starts_empty,
            LiveGrowth::Unknown | LiveGrowth::Steady { .. } => false,
        }
    }

    /// The live set grows from iteration to iteration while the number of live blocks does not
    /// grow with it: the same tensors are replaced by larger ones (a KV cache concatenated with
    /// each token, a sequence that gets longer). That is a working set growing by design, which
    /// needs more memory at its largest (capacity), not references kept by mistake (a leak adds
    /// blocks that hold the growth).
    pub fn grows_by_enlarging(&self) -> bool {
        matches!(self.growth, LiveGrowth::Growing { .. })
            && self
                .new_tensors_share_of_growth
                .is_some_and(|share| share < ENLARGING_MAX_NEW_TENSORS_SHARE)
    }

    /// The live set's growth over the events looked at (bytes), when it is growing.
    pub fn observed_growth_bytes(&self) -> Option<u64> {
        match self.growth {
            LiveGrowth::Growing {
                per_iteration_bytes,
                ..
            } => Some(per_iteration_bytes.saturating_mul(self.iterations.len() as u64)),
            LiveGrowth::RoseWithoutFallingBack {
                from_bytes,
                to_bytes,
                ..
            } => Some(to_bytes.saturating_sub(from_bytes)),
            LiveGrowth::Unknown | LiveGrowth::Steady { .. } => None,
        }
    }

    /// A typical iteration's rise above its floor (activations and temporaries, what a smaller
    /// batch shrinks): the median over the iterations.
    pub fn typical_excursion_bytes(&self) -> Option<u64> {
        let mut rises: Vec<u64> = self
            .iterations
            .iter()
            .map(|i| i.peak_bytes.saturating_sub(i.floor_bytes))
            .collect();
        rises.sort_unstable();
        rises.get(rises.len() / 2).copied()
    }

    /// One sentence for explanations.
    pub fn describe(&self) -> String {
        let n = self.iterations.len();
        let how = match self.source {
            IterationSource::ProfilerSteps => "profiler steps",
            IterationSource::LiveSetFalls => "iterations (the live set fell back to its floor)",
            IterationSource::LoggedSteps => "steps printed by the log",
            IterationSource::CallSitePattern => {
                "steps (found from the repeating call-site pattern: the live set never fell back between them)"
            }
        };
        match self.growth {
            LiveGrowth::RoseWithoutFallingBack {
                from_bytes,
                to_bytes,
                bytes_per_second,
            } => format!(
                "The trace shows no completed iteration{}: the live set rose from {} to {}{} without ever falling back.",
                if self.starts_empty {
                    " since the allocator was empty"
                } else {
                    ""
                },
                format_bytes(from_bytes),
                format_bytes(to_bytes),
                bytes_per_second
                    .filter(|r| *r > 0.0)
                    .map(|r| format!(" ({}/s)", format_bytes(r as u64)))
                    .unwrap_or_default()
            ),
            LiveGrowth::Steady { peak_bytes } => format!(
                "The trace shows {n} completed {how} in a steady state: each fell back to the same floor and peaked at about {}.",
                format_bytes(peak_bytes)
            ),
            LiveGrowth::Growing {
                per_iteration_bytes,
                r_squared,
                decelerating,
                confidence,
            } => format!(
                "The trace shows {n} completed {how}, and the live set each fell back to rose by {} per iteration (fit R² {r_squared:.2}{}; confidence {}).",
                format_bytes(per_iteration_bytes),
                if decelerating { ", slowing down" } else { "" },
                confidence.as_str()
            ),
            LiveGrowth::Unknown => {
                format!("The trace shows {n} completed {how}, too few to tell steady from growing.")
            }
        }
    }
}

/// The trajectory of `travel`'s live set up to event `failure_event` (the whole trace when
/// `None`); `None` when the trace has no events or no reconstructed series.
pub fn of_trace(travel: &TimeTravel, failure_event: Option<usize>) -> Option<Trajectory> {
    let mut build = TrajectoryBuild::new(failure_event, usize::MAX);
    loop {
        match build.step(travel) {
            Step::Done(trajectory) => return trajectory,
            Step::Pending(more) => build = more,
        }
    }
}

/// Where the first iteration of recorded work after the trace's last failure ends (the trace
/// position of its boundary); `None` when the trace ends inside the step that failed.
///
/// A replay that serves the failing request proves that the job gets through only as far as the
/// trace goes. A snapshot taken at the failure ends there, or goes on only with the frees of the
/// failed step's tensors as the exception unwinds them: no work, so no iteration counts after it
/// unless an allocation came after the failure and an iteration boundary after that allocation.
pub fn iteration_after_failure(travel: &TimeTravel) -> Option<usize> {
    let actions = &travel.trace().actions;
    let failure = actions.iter().rposition(|&a| a == TraceAction::Oom)?;
    let first_work = failure
        + 1
        + actions
            .get(failure + 1..)?
            .iter()
            .position(|&a| a == TraceAction::Alloc)?;
    of_trace(travel, None)?
        .iterations
        .iter()
        .map(|i| i.end_event)
        .find(|&end| end > first_work)
}

/// Trace events a [`TrajectoryBuild::step`] of the web page scans: about 25 ms in the browser
/// (the one-step history took 134 ms for the 0.9 M events of a 66 MB file on a loaded core, and
/// 2^18 events per step 47-68 ms at 264.5 MB, profiled).
pub const HISTORY_EVENTS_PER_STEP: usize = 1 << 17;

/// [`of_trace`] over ranges of events, for the web page's single thread: each
/// [`TrajectoryBuild::step`] scans at most `events_per_step` events of the live set's turning
/// points and of which allocation each free undoes, or walks about as much work's worth of the
/// turning points for the falls that end iterations; then a step merges the small cycles and a
/// last one finds the iterations' extremes. Any range size gives the trajectory [`of_trace`]
/// gives (it runs this build in one range).
pub struct TrajectoryBuild {
    failure_event: Option<usize>,
    events_per_step: usize,
    stage: BuildStage,
}

/// What the next [`TrajectoryBuild::step`] does.
enum BuildStage {
    /// Starts: the profiler's step markers, or the first range of the scan.
    Start,
    /// Scans the next range of events.
    Scanning(Box<FallsScan>),
    /// Walks the next turning points for falls.
    Walking(Box<FallsWalk>),
    /// Merges the small cycles out of the falls found.
    Merging(Vec<usize>),
    /// Makes the trajectory from the iterations' boundaries.
    Finishing(Vec<usize>),
}

/// The live set's turning points and allocation history, scanned so far.
struct FallsScan {
    turns: TurningPoints,
    history: AllocationHistory,
}

impl FallsScan {
    /// Scans the next `events` events (up to `end`, the series having `end + 1` entries): still
    /// scanning, or walking once all are scanned.
    fn scan(
        mut self: Box<Self>,
        travel: &TimeTravel,
        series: &[u64],
        end: usize,
        events: usize,
    ) -> BuildStage {
        let to = self.history.scanned().saturating_add(events).min(end);
        self.history.extend(travel, to);
        // The series has one more entry than events: the state after the last one.
        self.turns
            .feed(series, if to == end { end + 1 } else { to });
        if to < end {
            return BuildStage::Scanning(self);
        }
        let FallsScan { turns, history } = *self;
        BuildStage::Walking(Box::new(FallsWalk::new(
            series,
            turns.finish(),
            history.finish(),
        )))
    }
}

impl TrajectoryBuild {
    /// The history up to `failure_event` (see [`of_trace`]), at most `events_per_step` events
    /// scanned (or as much work's worth walked) per step (at least one).
    pub fn new(failure_event: Option<usize>, events_per_step: usize) -> Self {
        TrajectoryBuild {
            failure_event,
            events_per_step: events_per_step.max(1),
            stage: BuildStage::Start,
        }
    }

    /// Events scanned so far, or `None` once the scan is over (tests check the size of a step
    /// with it).
    #[cfg(test)]
    fn events_scanned(&self) -> Option<usize> {
        match &self.stage {
            BuildStage::Start => Some(0),
            BuildStage::Scanning(scan) => Some(scan.history.scanned()),
            _ => None,
        }
    }

    /// Whether the next step walks turning points (tests count the walk's steps with it).
    #[cfg(test)]
    fn walking(&self) -> bool {
        matches!(self.stage, BuildStage::Walking(_))
    }

    /// The next part of the work on `travel` (always the same one); the trajectory once all is
    /// done.
    pub fn step(mut self, travel: &TimeTravel) -> Step<Option<Trajectory>, Self> {
        let trace = travel.trace();
        let end = self.failure_event.unwrap_or(trace.len()).min(trace.len());
        let Some(series) = travel.allocated_series().get(..=end) else {
            return Step::Done(None);
        };
        if end == 0 {
            return Step::Done(None);
        }
        let work = self.events_per_step;
        self.stage = match std::mem::replace(&mut self.stage, BuildStage::Start) {
            BuildStage::Start => {
                // Iterations from the profiler's step markers need no scan.
                if let Some(boundaries) = profiler_step_boundaries(travel, end) {
                    return Step::Done(Some(trajectory(
                        travel,
                        series,
                        IterationSource::ProfilerSteps,
                        boundaries,
                    )));
                }
                let (lowest, highest) = travel.allocated_extremes(0, end);
                let range = highest.saturating_sub(lowest);
                if range == 0 {
                    return Step::Done(Some(trajectory(
                        travel,
                        series,
                        IterationSource::LiveSetFalls,
                        Vec::new(),
                    )));
                }
                let wiggle = ((range as f64 * WIGGLE_SHARE) as u64).max(MIN_WIGGLE_BYTES);
                let scan = FallsScan {
                    turns: TurningPoints::new(series, wiggle),
                    history: AllocationHistory::start(end),
                };
                Box::new(scan).scan(travel, series, end, work)
            }
            BuildStage::Scanning(scan) => scan.scan(travel, series, end, work),
            BuildStage::Walking(mut walk) => {
                if walk.walk(series, work) {
                    BuildStage::Merging(walk.boundaries)
                } else {
                    BuildStage::Walking(walk)
                }
            }
            // Merging and the trajectory each go over every cycle: a step each (the walk, the
            // merge and the extremes took 103 ms in one step at 13 M events in a browser).
            BuildStage::Merging(falls) => BuildStage::Finishing(merge_small_cycles(travel, falls)),
            BuildStage::Finishing(falls) => {
                let (source, boundaries) = falls_or_steps(travel, end, falls);
                return Step::Done(Some(trajectory(travel, series, source, boundaries)));
            }
        };
        Step::Pending(self)
    }
}

/// The iteration boundaries to judge the live set by: the `falls`' (trace positions before
/// `end`, the first where the first iteration began), or, when they show fewer than
/// [`MIN_ITERATIONS_FOR_TREND`] iterations, the steps of the repeating call-site pattern when it
/// shows more (module comment). A pattern that the live set fell back within is an inner loop
/// of the iterations the falls found (the tokens of one request after another), not the steps.
fn falls_or_steps(
    travel: &TimeTravel,
    end: usize,
    falls: Vec<usize>,
) -> (IterationSource, Vec<usize>) {
    let from_falls = falls.len().saturating_sub(1);
    if from_falls >= MIN_ITERATIONS_FOR_TREND {
        return (IterationSource::LiveSetFalls, falls);
    }
    let Some(starts) = repetition::step_starts(travel, end, MIN_ITERATIONS_FOR_TREND) else {
        return (IterationSource::LiveSetFalls, falls);
    };
    let (first, last) = (starts[0], starts[starts.len() - 1]);
    let fell_back_within = falls.iter().skip(1).any(|&b| b > first && b < last);
    if fell_back_within || starts.len() - 1 <= from_falls {
        return (IterationSource::LiveSetFalls, falls);
    }
    (IterationSource::CallSitePattern, starts)
}

/// The trajectory of the live set `series` (up to the failure) with its iteration `boundaries`.
fn trajectory(
    travel: &TimeTravel,
    series: &[u64],
    source: IterationSource,
    boundaries: Vec<usize>,
) -> Trajectory {
    let trace = travel.trace();
    let end = series.len() - 1;
    // Nothing was alive when recording began: no wrapped ring buffer, no earlier tensors.
    let starts_empty = series.first() == Some(&0);
    // The series' extremes over a stretch come from time travel's per-chunk summaries.
    let iterations: Vec<Iteration> = boundaries
        .windows(2)
        .map(|w| {
            let (floor_bytes, peak_bytes) = travel.allocated_extremes(w[0], w[1]);
            Iteration {
                start_event: w[0],
                end_event: w[1],
                floor_bytes,
                peak_bytes,
            }
        })
        .collect();
    let live_at_end_bytes = series[end];
    let peak_live_bytes = travel.allocated_extremes(0, end).1;
    let span_seconds = trace
        .time_us(0)
        .zip(trace.time_us(end.saturating_sub(1)))
        .map(|(a, b)| (b - a) as f64 / 1e6)
        .filter(|s| *s > 0.0);
    let growth = live_growth(&iterations, series, span_seconds);
    // Read only by `grows_by_enlarging`, which asks it of a growing live set: the per-stack
    // scan is not paid for steady jobs (the web page builds this in one step).
    let new_tensors_share_of_growth = matches!(growth, LiveGrowth::Growing { .. })
        .then(|| new_tensors_share_of_growth(travel, &iterations))
        .flatten();
    let kept_by = match (growth, iterations.first(), iterations.last()) {
        (LiveGrowth::Growing { .. }, Some(first), Some(last)) => {
            repetition::kept_by_call_site(travel, first.start_event, last.end_event)
                .into_iter()
                .next()
        }
        _ => None,
    };
    let failing_step = failing_step(travel, end, &iterations);
    Trajectory {
        new_tensors_share_of_growth,
        kept_by,
        failing_step,
        events: end,
        starts_empty,
        source,
        iterations,
        live_at_end_bytes,
        peak_live_bytes,
        span_seconds,
        growth,
    }
}

/// The repetition inside the step that failed at trace position `failure` (when the event there
/// is a failure): from the end of the last completed iteration, or the trace's start.
fn failing_step(
    travel: &TimeTravel,
    failure: usize,
    iterations: &[Iteration],
) -> Option<Repetition> {
    let trace = travel.trace();
    if trace.actions.get(failure) != Some(&TraceAction::Oom) {
        return None;
    }
    let from = iterations.last().map_or(0, |i| i.end_event);
    let request = trace.stacks.get(failure).copied().unwrap_or(StackId::EMPTY);
    repetition::repetition_before(travel, from, failure, request)
}

/// The share of the floors' rise over the later half of the iterations (from the middle one's
/// end to the last's) that new tensors hold: for each call stack, the blocks it added in between
/// (its allocations minus the frees of blocks it made, less one) times the median size of its
/// blocks allocated in between, summed, over the rise.
///
/// The later half, because a cache's first version often comes from another line (the prompt's
/// keys, then `torch.cat` for each token): the first replacement frees a block of that other
/// line, and the growing line seems to add one, once per cache.
///
/// Per call stack (per stack and size for blocks without frames, [`maker`]) and in bytes, over
/// a span of steps: a cache grown by `torch.cat` frees its old
/// version at the line that makes the new one (its stack adds nothing, however large it grows),
/// while small tensors kept beside it (generated tokens) add blocks too small to hold the rise;
/// a leak adds blocks at the line that makes them, whose size holds the rise. Not per iteration:
/// the falls can cut one step into many iterations (an inference loop's layers each free the
/// last one's output).
fn new_tensors_share_of_growth(travel: &TimeTravel, iterations: &[Iteration]) -> Option<f64> {
    if iterations.len() < 3 {
        return None;
    }
    // The later half: what a cache's first version came from (another line) is past.
    let (first, last) = (&iterations[iterations.len() / 2], iterations.last()?);
    let rise = last.floor_bytes.checked_sub(first.floor_bytes)?;
    if rise == 0 {
        return None;
    }
    // The maker of every live block by address, from the span's start on: its call stack, and
    // for the backward thread's blocks (no frames) its size too.
    let mut maker_at: HashMap<u64, (StackId, u64)> = travel
        .state_at(first.end_event)
        .segments
        .iter()
        .flat_map(|segment| &segment.blocks)
        .filter(|block| block.status == BlockStatus::Allocated)
        .map(|block| {
            let maker = maker(block_stack(travel, block), block.size_bytes);
            (block.address, maker)
        })
        .collect();
    let trace = travel.trace();
    let mut added: HashMap<(StackId, u64), (i64, Vec<u64>)> = HashMap::new();
    for i in first.end_event..last.end_event.min(trace.len()) {
        let address = trace.addresses[i];
        match trace.actions[i] {
            TraceAction::Alloc => {
                let maker = maker(trace.stacks[i], trace.sizes_bytes[i]);
                maker_at.insert(address, maker);
                let entry = added.entry(maker).or_default();
                entry.0 += 1;
                entry.1.push(trace.sizes_bytes[i]);
            }
            TraceAction::FreeRequested => {
                if let Some(maker) = maker_at.remove(&address) {
                    added.entry(maker).or_default().0 -= 1;
                }
            }
            _ => {}
        }
    }
    // One block more is where the span's ends cut a replacement (the new version made, the
    // old not yet freed): a stack keeps tensors when it added at least two.
    let held: f64 = added
        .into_values()
        .filter(|(blocks, _)| *blocks > 1)
        .map(|(blocks, mut sizes)| {
            sizes.sort_unstable();
            let median = sizes.get(sizes.len() / 2).copied().unwrap_or(0);
            (blocks - 1) as f64 * median as f64
        })
        .sum();
    Some(held / rise as f64)
}

/// Who made a block, for [`new_tensors_share_of_growth`]: its call stack, and for a block
/// without frames (the autograd engine's thread, which makes every backward temporary) its size
/// as well, so that a gradient kept every step by a backward hook or a custom autograd
/// Function counts apart from the temporaries of every size made beside it.
fn maker(stack: StackId, size_bytes: u64) -> (StackId, u64) {
    if stack == StackId::EMPTY {
        (stack, size_bytes)
    } else {
        (stack, 0)
    }
}

fn live_growth(iterations: &[Iteration], series: &[u64], span_seconds: Option<f64>) -> LiveGrowth {
    if iterations.is_empty() {
        let from_bytes = series.first().copied().unwrap_or(0);
        let to_bytes = series.last().copied().unwrap_or(0);
        if to_bytes <= from_bytes {
            return LiveGrowth::Unknown;
        }
        return LiveGrowth::RoseWithoutFallingBack {
            from_bytes,
            to_bytes,
            bytes_per_second: span_seconds.map(|s| (to_bytes - from_bytes) as f64 / s),
        };
    }
    if iterations.len() < MIN_ITERATIONS_FOR_TREND {
        return LiveGrowth::Unknown;
    }
    let floors: Vec<(f64, f64)> = iterations
        .iter()
        .enumerate()
        .map(|(i, it)| (i as f64, it.floor_bytes as f64))
        .collect();
    let peak_bytes = iterations.iter().map(|i| i.peak_bytes).max().unwrap_or(0);
    // The trace's live set is exact, so a growth smaller than the rule for a whole GPU's
    // readings still counts when it is a tenth of the job and a clean line (a leak adds the same
    // every step; a first step's warm-up or sub-step cycles rise unevenly).
    let judged = |min_growth_bytes| {
        growth::assess_with(&floors, 0.0, MIN_ITERATIONS_FOR_TREND, min_growth_bytes)
    };
    let small_growth_bytes =
        ((peak_bytes as f64 * MIN_GROWTH_SHARE_OF_PEAK) as u64).min(growth::MIN_GROWTH_BYTES);
    let shape = match judged(growth::MIN_GROWTH_BYTES) {
        Shape::Growing(g) => Shape::Growing(g),
        shape => match judged(small_growth_bytes) {
            Shape::Growing(g)
                if g.line.r_squared >= SMALL_GROWTH_MIN_R_SQUARED && !g.decelerating =>
            {
                Shape::Growing(g)
            }
            _ => shape,
        },
    };
    match shape {
        Shape::Growing(g) => LiveGrowth::Growing {
            per_iteration_bytes: g.slope().max(0.0) as u64,
            r_squared: g.line.r_squared,
            decelerating: g.decelerating,
            // Ten iterations are needed before a per-iteration trend counts as sure.
            confidence: g.confidence(10.0),
        },
        Shape::Flat | Shape::LevelledOff { .. } => LiveGrowth::Steady { peak_bytes },
        Shape::TooShort { .. } => LiveGrowth::Unknown,
    }
}

/// The trajectory a log's per-step figures show (`step 12 allocated 4.06 GiB`): every printed
/// step completed, and the figure is the live set it left behind. `None` without points.
pub fn of_logged_steps(series: &StepSeries) -> Option<Trajectory> {
    let last = series.points.last()?;
    let iterations: Vec<Iteration> = series
        .points
        .iter()
        .map(|p| Iteration {
            start_event: p.line,
            end_event: p.line,
            floor_bytes: p.bytes,
            peak_bytes: p.bytes,
        })
        .collect();
    let growth = live_growth(&iterations, &[], None);
    Some(Trajectory {
        new_tensors_share_of_growth: None,
        kept_by: None,
        failing_step: None,
        events: series.points.len(),
        starts_empty: false,
        source: IterationSource::LoggedSteps,
        live_at_end_bytes: last.bytes,
        peak_live_bytes: iterations.iter().map(|i| i.peak_bytes).max().unwrap_or(0),
        iterations,
        span_seconds: None,
        growth,
    })
}

/// Event positions where `ProfilerStep#N` annotations of this device START, up to `end`, with the
/// trace's start first; `None` when the snapshot has fewer than two usable markers.
fn profiler_step_boundaries(travel: &TimeTravel, end: usize) -> Option<Vec<usize>> {
    let snapshot = travel.snapshot();
    let trace = travel.trace();
    if !travel.times_are_monotonic() {
        return None;
    }
    let mut starts: Vec<usize> = snapshot
        .annotations
        .iter()
        .filter(|a| a.device.is_none_or(|d| d == travel.device()))
        .filter(|a| {
            snapshot.string(a.name).starts_with("ProfilerStep#")
                && snapshot.string(a.stage).eq_ignore_ascii_case("START")
        })
        .filter_map(|a| a.time_us)
        .map(|t| trace.times_us.partition_point(|&x| x < t))
        .filter(|&i| i > 0 && i < end)
        .collect();
    starts.sort_unstable();
    starts.dedup();
    if starts.len() < 2 {
        return None;
    }
    let mut boundaries = vec![0];
    boundaries.extend(starts);
    Some(boundaries)
}

/// The walk over the live set's turning points that finds the iteration boundaries (event
/// positions, the first being where the first iteration began) from its falls, by the rule in
/// the module comment; resumable, so that the web page can walk a part per step.
struct FallsWalk {
    /// The series' turning points.
    turns: Vec<(usize, u64)>,
    /// Which allocation each free undid.
    history: AllocationHistory,
    /// The next turning point to look at.
    next_turn: usize,
    /// The boundaries found so far.
    boundaries: Vec<usize>,
    /// The floor the current rise started from (the last boundary).
    base: (usize, u64),
    /// The highest point since.
    high: (usize, u64),
    /// Events still to look back through for where the first rise began.
    look_back_budget: usize,
}

impl FallsWalk {
    fn new(series: &[u64], turns: Vec<(usize, u64)>, history: AllocationHistory) -> Self {
        let base = turns.first().copied().unwrap_or((0, series[0]));
        FallsWalk {
            turns,
            history,
            next_turn: 1,
            boundaries: Vec::new(),
            base,
            high: base,
            look_back_budget: MAX_EVENTS_SCANNED,
        }
    }

    /// Looks at the next turning points until about `work` events' worth was done (one per
    /// turning point, per event looked back through and per value a fall's frees are judged
    /// by); true once every turning point was looked at.
    fn walk(&mut self, series: &[u64], work: usize) -> bool {
        let mut spent = 0usize;
        while let Some(&(index, level)) = self.turns.get(self.next_turn) {
            if spent >= work {
                return false;
            }
            self.next_turn += 1;
            spent += 1;
            if level >= self.high.1 {
                self.high = (index, level);
                continue;
            }
            // Where the rise began: the last boundary; before the first one, the last event
            // before the peak at or below this trough (a model load before the first step is
            // not part of the step).
            let start = if self.boundaries.is_empty() && self.look_back_budget > 0 {
                let mut j = self.high.0;
                while j > self.base.0 && series[j] > level && self.look_back_budget > 0 {
                    j -= 1;
                    self.look_back_budget -= 1;
                    spent += 1;
                }
                (j, series[j])
            } else {
                self.base
            };
            let rise = self.high.1.saturating_sub(start.1) as f64;
            let fall = self.high.1.saturating_sub(level) as f64;
            if rise > 0.0 && fall >= FALL_SHARE * rise {
                spent += AllocationHistory::reaches_back_cost(self.high.0, index);
                if self.history.reaches_back(self.high.0, index, rise) {
                    if self.boundaries.is_empty() {
                        self.boundaries.push(start.0);
                    }
                    self.boundaries.push(index);
                    self.base = (index, level);
                    self.high = self.base;
                    continue;
                }
            }
            if level < self.base.1 {
                self.base = (index, level);
                self.high = self.base;
            }
        }
        true
    }
}

/// Events looked back through, in all, for where the first rise began: bounds the cost of a
/// trace in which no iteration ends.
const MAX_EVENTS_SCANNED: usize = 1 << 22;

/// Boundaries without the cycles whose rise is under [`SMALL_CYCLE_SHARE`] of the largest: the
/// next batch's input replacing the last one is a fall, but not an iteration.
/// (`travel`'s allocated series gives each cycle's rise, from its per-chunk summaries.)
fn merge_small_cycles(travel: &TimeTravel, boundaries: Vec<usize>) -> Vec<usize> {
    if boundaries.len() <= 2 {
        return boundaries;
    }
    // Each cycle's extremes once; a run of merged cycles is the union of theirs.
    let cycles: Vec<(u64, u64)> = boundaries
        .windows(2)
        .map(|w| travel.allocated_extremes(w[0], w[1]))
        .collect();
    let largest = cycles
        .iter()
        .map(|(low, high)| high.saturating_sub(*low))
        .max()
        .unwrap_or(0);
    let mut kept = vec![boundaries[0]];
    // Extremes since the last kept boundary.
    let (mut low, mut high) = (u64::MAX, 0);
    for (i, &(cycle_low, cycle_high)) in cycles.iter().enumerate() {
        (low, high) = (low.min(cycle_low), high.max(cycle_high));
        let last = i == cycles.len() - 1;
        if last || high.saturating_sub(low) as f64 >= SMALL_CYCLE_SHARE * largest as f64 {
            kept.push(boundaries[i + 1]);
            (low, high) = (u64::MAX, 0);
        }
    }
    kept
}

/// Which allocation each free undoes, and how many bytes were allocated before each position:
/// what "a fall frees memory allocated early in the rise" is measured with.
struct AllocationHistory {
    /// Per event position: for a free, the position of the alloc it undoes (0 for blocks
    /// allocated before the trace); `usize::MAX` for other events.
    alloc_of: Vec<usize>,
    /// The smallest `alloc_of` of each whole chunk of [`HISTORY_CHUNK`] positions: the earliest
    /// allocation a stretch of frees undoes, found without looking at every free (a 1 GB
    /// file's falls looked at millions, 66 ms in a browser).
    earliest_undone_per_chunk: Vec<usize>,
    /// Bytes handed out by `alloc` events before each position (`len + 1` entries once
    /// finished).
    allocated_before: Vec<u64>,
    /// While scanning: the position of the alloc of each live address.
    allocated_at: foldhash::HashMap<u64, usize>,
    /// While scanning: bytes handed out so far.
    total_bytes: u64,
}

impl AllocationHistory {
    /// An empty history of the first `end` events, to [`AllocationHistory::extend`].
    fn start(end: usize) -> Self {
        AllocationHistory {
            alloc_of: Vec::with_capacity(end),
            earliest_undone_per_chunk: Vec::with_capacity(end / HISTORY_CHUNK),
            allocated_before: Vec::with_capacity(end + 1),
            allocated_at: foldhash::HashMap::default(),
            total_bytes: 0,
        }
    }

    /// Events scanned so far.
    fn scanned(&self) -> usize {
        self.alloc_of.len()
    }

    /// Scans the events of `travel`'s trace up to position `to`.
    fn extend(&mut self, travel: &TimeTravel, to: usize) {
        let trace = travel.trace();
        for position in self.alloc_of.len()..to {
            self.allocated_before.push(self.total_bytes);
            let address = trace.addresses.get(position).copied().unwrap_or(0);
            let undoes = match trace.actions.get(position) {
                Some(TraceAction::Alloc) => {
                    self.allocated_at.insert(address, position);
                    self.total_bytes = self
                        .total_bytes
                        .saturating_add(trace.sizes_bytes.get(position).copied().unwrap_or(0));
                    usize::MAX
                }
                Some(TraceAction::FreeRequested) => {
                    self.allocated_at.get(&address).copied().unwrap_or(0)
                }
                Some(TraceAction::FreeCompleted) => self.allocated_at.remove(&address).unwrap_or(0),
                _ => usize::MAX,
            };
            self.alloc_of.push(undoes);
            if self.alloc_of.len().is_multiple_of(HISTORY_CHUNK) {
                let chunk = &self.alloc_of[self.alloc_of.len() - HISTORY_CHUNK..];
                let earliest = chunk.iter().copied().min().unwrap_or(usize::MAX);
                self.earliest_undone_per_chunk.push(earliest);
            }
        }
    }

    /// The history once every event is scanned.
    fn finish(mut self) -> Self {
        self.allocated_before.push(self.total_bytes);
        self.allocated_at = foldhash::HashMap::default();
        self
    }

    /// Whether the events from the peak (`peak` events applied) to the trough free a block after
    /// whose allocation at least [`REACH_SHARE`] of `rise` bytes were still allocated before the
    /// peak: memory from early in the rise, not a temporary freed right after it was made.
    ///
    /// Bytes allocated before a position only grow with it, so if any free reaches back far
    /// enough, the one undoing the earliest allocation does: only that one is looked at.
    fn reaches_back(&self, peak: usize, trough: usize, rise: f64) -> bool {
        if peak > trough || trough > self.alloc_of.len() {
            return false;
        }
        let Some(&at_peak) = self.allocated_before.get(peak) else {
            return false;
        };
        let earliest = self.earliest_undone(peak, trough);
        if earliest == usize::MAX {
            return false;
        }
        let after = self
            .allocated_before
            .get(earliest + 1)
            .copied()
            .unwrap_or(at_peak);
        at_peak.saturating_sub(after) as f64 >= REACH_SHARE * rise
    }

    /// Values [`AllocationHistory::reaches_back`] reads at most for a fall from `peak` to
    /// `trough`.
    fn reaches_back_cost(peak: usize, trough: usize) -> usize {
        trough.saturating_sub(peak) / HISTORY_CHUNK + 2 * HISTORY_CHUNK
    }

    /// The smallest `alloc_of` over positions `from..to` (within the scanned events), from the
    /// per-chunk summaries where a chunk lies wholly inside; `usize::MAX` when no event there
    /// frees anything.
    fn earliest_undone(&self, from: usize, to: usize) -> usize {
        let smallest = |values: &[usize]| values.iter().copied().min().unwrap_or(usize::MAX);
        let to = to.min(self.alloc_of.len());
        let from = from.min(to);
        let full_from = from.div_ceil(HISTORY_CHUNK);
        let full_to = to / HISTORY_CHUNK;
        if full_from >= full_to {
            return smallest(&self.alloc_of[from..to]);
        }
        let whole = self
            .earliest_undone_per_chunk
            .get(full_from..full_to)
            .map_or(usize::MAX, smallest);
        smallest(&self.alloc_of[from..full_from * HISTORY_CHUNK])
            .min(whole)
            .min(smallest(&self.alloc_of[full_to * HISTORY_CHUNK..to]))
    }
}

/// Positions per summary in [`AllocationHistory`]'s `earliest_undone_per_chunk`.
const HISTORY_CHUNK: usize = 256;

/// The series' alternating peaks and troughs, ignoring moves smaller than `wiggle`: `(position,
/// level)`, the first point included.
#[cfg(test)]
fn turning_points(series: &[u64], wiggle: u64) -> Vec<(usize, u64)> {
    let mut turns = TurningPoints::new(series, wiggle);
    turns.feed(series, series.len());
    turns.finish()
}

/// [`turning_points`] over ranges of the series.
struct TurningPoints {
    turns: Vec<(usize, u64)>,
    wiggle: u64,
    /// The next position to look at.
    next: usize,
    /// +1 rising, -1 falling, 0 not yet known.
    direction: i8,
    low: (usize, u64),
    high: (usize, u64),
    /// The extreme of the current move.
    candidate: (usize, u64),
}

impl TurningPoints {
    fn new(series: &[u64], wiggle: u64) -> Self {
        let first = series.first().copied();
        let start = (0, first.unwrap_or(0));
        TurningPoints {
            turns: first.map(|level| (0, level)).into_iter().collect(),
            wiggle,
            next: 1,
            direction: 0,
            low: start,
            high: start,
            candidate: start,
        }
    }

    /// Looks at the series' points up to position `to`.
    fn feed(&mut self, series: &[u64], to: usize) {
        let wiggle = self.wiggle;
        let to = to.min(series.len());
        let from = self.next.min(to);
        for (index, &level) in series.iter().enumerate().take(to).skip(from) {
            match self.direction {
                0 => {
                    if level < self.low.1 {
                        self.low = (index, level);
                    }
                    if level > self.high.1 {
                        self.high = (index, level);
                    }
                    if self.high.1 - self.low.1 >= wiggle {
                        self.direction = if self.high.0 > self.low.0 { 1 } else { -1 };
                        let (start, extreme) = if self.direction > 0 {
                            (self.low, self.high)
                        } else {
                            (self.high, self.low)
                        };
                        if start.0 > 0 {
                            self.turns.push(start);
                        }
                        self.candidate = extreme;
                    }
                }
                1 => {
                    if level >= self.candidate.1 {
                        self.candidate = (index, level);
                    } else if self.candidate.1 - level >= wiggle {
                        self.turns.push(self.candidate);
                        self.direction = -1;
                        self.candidate = (index, level);
                    }
                }
                _ => {
                    if level <= self.candidate.1 {
                        self.candidate = (index, level);
                    } else if level - self.candidate.1 >= wiggle {
                        self.turns.push(self.candidate);
                        self.direction = 1;
                        self.candidate = (index, level);
                    }
                }
            }
        }
        self.next = self.next.max(to);
    }

    /// The turning points, once the whole series was fed.
    fn finish(mut self) -> Vec<(usize, u64)> {
        let candidate = self.candidate;
        if candidate.0 > 0 && self.turns.last().map(|t| t.0) != Some(candidate.0) {
            self.turns.push(candidate);
        }
        self.turns
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::allocator::{AllocatorSnapshot, DeviceTrace, StackId, StringId};

    /// What a synthetic job does, event by event.
    #[derive(Clone, Copy)]
    pub enum Op {
        Alloc(u64, u64),
        Free(u64),
        /// A request of this many bytes that ran out of memory (the job caught it and went on).
        Oom(u64),
    }

    /// A snapshot whose device-0 trace performs `ops` from an empty allocator, each block in a
    /// segment of its own (reserved just before, released just after), ending in an `oom` event
    /// when `oom_request` is given. Addresses are offsets from a base.
    pub fn trace_snapshot(ops: &[Op], oom_request: Option<u64>) -> Arc<AllocatorSnapshot> {
        use crate::model::allocator::{BlockState, PoolId};
        let base = 0x7f00_0000_0000u64;
        let mut trace = DeviceTrace::default();
        let mut live: std::collections::BTreeMap<u64, u64> = Default::default();
        let push = |trace: &mut DeviceTrace, action, address, size| {
            trace.actions.push(action);
            trace.addresses.push(address);
            trace.sizes_bytes.push(size);
            trace.streams.push(0);
            trace
                .times_us
                .push(1_000_000 + trace.actions.len() as i64 * 1000);
            trace.stacks.push(StackId::EMPTY);
            trace.user_metadata.push(StringId(0));
            trace.compile_context.push(StringId(0));
        };
        for op in ops {
            match *op {
                Op::Alloc(offset, size) => {
                    push(&mut trace, TraceAction::SegmentAlloc, base + offset, size);
                    push(&mut trace, TraceAction::Alloc, base + offset, size);
                    live.insert(base + offset, size);
                }
                Op::Free(offset) => {
                    let size = live.remove(&(base + offset)).unwrap_or(0);
                    push(&mut trace, TraceAction::FreeRequested, base + offset, size);
                    push(&mut trace, TraceAction::FreeCompleted, base + offset, size);
                    push(&mut trace, TraceAction::SegmentFree, base + offset, size);
                }
                Op::Oom(request) => {
                    push(&mut trace, TraceAction::Oom, 0, request);
                    let index = (trace.actions.len() - 1) as u32;
                    trace.device_free_bytes.push((index, 0));
                }
            }
        }
        if let Some(request) = oom_request {
            push(&mut trace, TraceAction::Oom, 0, request);
            let index = (trace.actions.len() - 1) as u32;
            trace.device_free_bytes.push((index, 0));
        }
        let mut snapshot = AllocatorSnapshot {
            traces: vec![trace],
            ..Default::default()
        };
        for (&address, &size) in &live {
            snapshot.push_one_block_segment(
                address,
                size,
                BlockState::ActiveAllocated,
                StackId::EMPTY,
                PoolId::default(),
            );
        }
        snapshot.finish_as_device_zero()
    }

    const M: u64 = MIB;

    /// `steps` training steps: `layers` activations of `act` kept through the forward pass, a
    /// temporary of `temp` per layer, then the backward frees them newest first; each step also
    /// keeps `leak` bytes.
    pub fn training(steps: u64, layers: u64, act: u64, temp: u64, leak: u64) -> Vec<Op> {
        training_keeping(steps, layers, act, temp, &|_| leak)
    }

    /// [`training`] keeping `kept(step)` bytes in each step.
    pub fn training_keeping(
        steps: u64,
        layers: u64,
        act: u64,
        temp: u64,
        kept: &dyn Fn(u64) -> u64,
    ) -> Vec<Op> {
        let mut ops = vec![Op::Alloc(0, 512 * M)]; // the weights
        let mut next = 1 << 30;
        for step in 0..steps {
            let mut acts = Vec::new();
            for _ in 0..layers {
                ops.push(Op::Alloc(next, act));
                acts.push(next);
                next += act;
                ops.push(Op::Alloc(next, temp));
                ops.push(Op::Free(next));
                next += temp;
            }
            let leak = kept(step);
            if leak > 0 {
                ops.push(Op::Alloc(next, leak));
                next += leak;
            }
            for a in acts.into_iter().rev() {
                ops.push(Op::Free(a));
            }
        }
        ops
    }

    fn trajectory(ops: &[Op], oom: Option<u64>) -> Trajectory {
        let snapshot = trace_snapshot(ops, oom);
        let travel = TimeTravel::new(snapshot, 0);
        assert!(travel.check().matches_final_state, "{:?}", travel.check());
        let failure = oom.map(|_| travel.len() - 1);
        of_trace(&travel, failure).unwrap_or_else(|| panic!("no trajectory"))
    }

    #[test]
    fn a_first_forward_pass_through_identical_layers_is_one_rise() {
        // Twelve layers, each keeping 1 GiB and using a 3 GiB temporary, failing in the forward
        // pass: no completed iteration however the temporaries wiggle.
        let mut ops = training(1, 12, 1024 * M, 3072 * M, 0);
        ops.truncate(1 + 12 * 3);
        let t = trajectory(&ops, Some(4096 * M));
        assert!(t.iterations.is_empty(), "{:?}", t.iterations);
        assert!(t.failed_in_first_step());
        assert!(t.still_growing());
        assert!(matches!(
            t.growth,
            LiveGrowth::RoseWithoutFallingBack { .. }
        ));
        assert!(
            t.describe().contains("no completed iteration"),
            "{}",
            t.describe()
        );
    }

    /// A job of under 1 GiB whose steps each keep 8 MiB (less than the rule for a whole GPU's
    /// readings over the trace, but more than a tenth of the job) grows; the same job keeping nothing is steady,
    /// and so is one whose floors rise unevenly by as much (a warm-up, not a leak).
    #[test]
    fn a_small_job_keeping_a_little_every_step_grows() {
        let ops = |kept: &dyn Fn(u64) -> u64| training_keeping(20, 4, 64 * M, 16 * M, kept);
        let leaking = trajectory(&ops(&|_| 8 * M), Some(GIB_TEST));
        match leaking.growth {
            LiveGrowth::Growing {
                per_iteration_bytes,
                ..
            } => assert!(
                per_iteration_bytes.abs_diff(8 * M) < M,
                "{per_iteration_bytes}"
            ),
            other => panic!("{other:?}"),
        }
        let steady = trajectory(&ops(&|_| 0), Some(GIB_TEST));
        assert!(
            matches!(steady.growth, LiveGrowth::Steady { .. }),
            "{:?}",
            steady.growth
        );
        // The same 160 MiB kept in three lumps at uneven steps: no clean line.
        let uneven = trajectory(
            &ops(&|step| match step {
                3 => 100 * M,
                4 => 40 * M,
                16 => 20 * M,
                _ => 0,
            }),
            Some(GIB_TEST),
        );
        assert!(
            !matches!(uneven.growth, LiveGrowth::Growing { .. }),
            "{:?}",
            uneven.growth
        );
    }

    #[test]
    fn steady_training_steps_are_iterations_in_a_steady_state() {
        let t = trajectory(&training(8, 6, 256 * M, 512 * M, 0), None);
        assert_eq!(t.iterations.len(), 8, "{:?}", t.iterations);
        assert_eq!(t.source, IterationSource::LiveSetFalls);
        assert!(!t.failed_in_first_step());
        assert!(
            matches!(t.growth, LiveGrowth::Steady { .. }),
            "{:?}",
            t.growth
        );
        assert!(!t.still_growing());
        // A step's rise: six kept activations plus the last temporary.
        assert_eq!(t.typical_excursion_bytes(), Some((6 * 256 + 512) * M));
    }

    #[test]
    fn a_step_that_keeps_memory_grows_per_iteration() {
        let t = trajectory(&training(12, 4, 512 * M, 256 * M, 300 * M), Some(GIB_TEST));
        assert_eq!(t.iterations.len(), 12);
        match t.growth {
            LiveGrowth::Growing {
                per_iteration_bytes,
                decelerating,
                ..
            } => {
                assert!(
                    per_iteration_bytes.abs_diff(300 * M) < M,
                    "{per_iteration_bytes}"
                );
                assert!(!decelerating);
            }
            other => panic!("{other:?}"),
        }
        assert!(t.still_growing());
        assert_eq!(t.observed_growth_bytes(), Some(12 * 300 * M));
    }

    /// A replay is proof only through an iteration of work completed after the failure: a
    /// trace that ends at the failure, or goes on only with the failed step's frees (the
    /// exception unwinding its tensors), shows none.
    #[test]
    fn an_iteration_after_the_failure_needs_work_after_it() {
        let steps = training(8, 4, 256 * M, 128 * M, 0);
        // Caught in step 4's forward pass (after its first layer); the job went on.
        let caught_at = 1 + 4 * 16 + 3;
        let mut went_on = steps.clone();
        went_on.insert(caught_at, Op::Oom(GIB_TEST));
        let travel = TimeTravel::new(trace_snapshot(&went_on, None), 0);
        let failure = travel
            .trace()
            .actions
            .iter()
            .position(|&a| a == TraceAction::Oom)
            .unwrap_or_else(|| panic!("no oom"));
        let end = iteration_after_failure(&travel).unwrap_or_else(|| panic!("none found"));
        assert!(end > failure, "{end} after {failure}");
        // The same failure, then only the frees of the failed step: no work after it.
        let mut unwound = steps[..caught_at].to_vec();
        unwound.push(Op::Oom(GIB_TEST));
        unwound.extend(
            steps[caught_at..]
                .iter()
                .filter(|op| matches!(op, Op::Free(_))),
        );
        let travel = TimeTravel::new(trace_snapshot(&unwound, None), 0);
        assert_eq!(iteration_after_failure(&travel), None);
        // A trace that ends at the failure, and real snapshots taken at one (the second goes
        // on with 250 frees as the exception unwinds the step).
        let travel = TimeTravel::new(trace_snapshot(&steps[..caught_at], Some(GIB_TEST)), 0);
        assert_eq!(iteration_after_failure(&travel), None);
        for name in [
            "cases2/cap_fragmentation.pickle",
            "whatif/heldout2/oom/ckpt_transformer__default__cap814743552.pickle",
        ] {
            let path = crate::test_fixtures::fixture_path(name);
            let snapshot = crate::formats::pytorch::read_file(&path, &|_| true)
                .unwrap_or_else(|e| panic!("{e}"));
            let travel = TimeTravel::new(Arc::new(snapshot), 0);
            assert_eq!(iteration_after_failure(&travel), None, "{name}");
        }
    }

    fn real_trajectory(name: &str) -> Trajectory {
        let path = crate::test_fixtures::fixture_path(name);
        let snapshot =
            crate::formats::pytorch::read_file(&path, &|_| true).unwrap_or_else(|e| panic!("{e}"));
        let travel = TimeTravel::new(Arc::new(snapshot), 0);
        let failure = travel
            .trace()
            .actions
            .iter()
            .rposition(|&a| a == TraceAction::Oom);
        of_trace(&travel, failure).unwrap_or_else(|| panic!("{name}: no trajectory"))
    }

    /// A real H200 job that keeps every step's 36 MiB output (`cases2/cap_growth`): its live set
    /// never falls back, so the falls show no iteration; the repeating call sites show the
    /// steps, growing by the output, kept by the line that makes it.
    #[test]
    fn steps_that_never_fall_back_are_found_from_the_call_sites() {
        let t = real_trajectory("cases2/cap_growth.pickle");
        assert_eq!(t.source, IterationSource::CallSitePattern);
        assert!(t.iterations.len() >= 100, "{}", t.iterations.len());
        match t.growth {
            LiveGrowth::Growing {
                per_iteration_bytes,
                decelerating,
                ..
            } => {
                assert!(
                    per_iteration_bytes.abs_diff(36 * M) < M,
                    "{per_iteration_bytes}"
                );
                assert!(!decelerating);
            }
            other => panic!("{other:?}"),
        }
        assert!(!t.grows_by_enlarging());
        let (site, kept) = t.kept_by.clone().unwrap_or_else(|| panic!("no call site"));
        assert_eq!(site, "jobs.py:433 job_growth");
        assert!(kept > 100 * 36 * M, "{kept}");
        assert!(t.describe().contains("repeating call-site pattern"));
    }

    /// A real first forward pass through identical transformer layers
    /// (`cases2/capacity_first_step`): the layers repeat their call sites, but inside one line of
    /// the job's loop that never ran to its end: they are not steps.
    #[test]
    fn the_layers_of_a_first_forward_pass_are_not_steps() {
        let t = real_trajectory("cases2/capacity_first_step.pickle");
        assert!(t.iterations.is_empty(), "{:?}", t.iterations);
        assert!(t.failed_in_first_step());
    }

    /// The web page's history, a range of events per step: no step scans more events than
    /// asked, and whatever the range, the trajectory is the one made in one go — for a steady
    /// job, a growing one that fails, and real snapshots (one with the profiler's step markers).
    #[test]
    fn a_history_made_in_ranges_of_events_is_the_one_made_in_one_go() {
        let mut travels = vec![
            (
                TimeTravel::new(
                    trace_snapshot(&training(8, 6, 256 * M, 512 * M, 0), None),
                    0,
                ),
                false,
            ),
            (
                TimeTravel::new(
                    trace_snapshot(&training(12, 4, 512 * M, 256 * M, 300 * M), Some(GIB_TEST)),
                    0,
                ),
                true,
            ),
        ];
        for name in ["frag_oom.pickle", "train.pickle", "leak.pickle"] {
            let snapshot = crate::test_fixtures::pytorch_snapshot(name);
            travels.push((TimeTravel::new(Arc::new(snapshot), 0), false));
        }
        let mut stepped_somewhere = false;
        let mut walked_in_steps = false;
        let mut finished_apart = 0;
        for (travel, fails) in &travels {
            let failure = fails.then(|| travel.len() - 1);
            let in_one_go = of_trace(travel, failure);
            assert!(in_one_go.is_some());
            for events_per_step in [1, 7, 100, 4096, usize::MAX] {
                let mut build = TrajectoryBuild::new(failure, events_per_step);
                let mut steps = 0;
                let mut walk_steps = 0;
                let mut scanned_any = false;
                let in_ranges = loop {
                    let before = build.events_scanned();
                    walk_steps += usize::from(build.walking());
                    match build.step(travel) {
                        Step::Done(trajectory) => break trajectory,
                        Step::Pending(more) => build = more,
                    }
                    let after = build.events_scanned();
                    if let (Some(before), Some(after)) = (before, after) {
                        assert!(after - before <= events_per_step);
                    }
                    scanned_any |= before == Some(0) && after != Some(0);
                    steps += 1;
                    assert!(steps <= 3 * travel.len() + 4, "never done");
                };
                stepped_somewhere |= steps > 1;
                walked_in_steps |= walk_steps > 1;
                assert_eq!(in_ranges, in_one_go, "{events_per_step} events per step");
                if scanned_any && events_per_step == usize::MAX {
                    // One range scans all, one step walks all; merging the small cycles and
                    // finding the iterations' extremes are steps of their own.
                    assert_eq!((steps, walk_steps), (3, 1), "scan, walk, merge, extremes");
                    finished_apart += 1;
                }
            }
        }
        assert!(stepped_somewhere);
        assert!(walked_in_steps, "the walk never took more than one step");
        assert!(finished_apart > 0);
    }

    /// Whether a fall reaches back is what looking at every free in it says (the definition),
    /// on real traces' stretches that start and end inside, on and across the history's chunks,
    /// with rises that make the answer go both ways.
    #[test]
    fn a_fall_reaches_back_as_looking_at_every_free_says() {
        let mut answers = [0; 2];
        for name in ["frag_oom.pickle", "train.pickle"] {
            let snapshot = crate::test_fixtures::pytorch_snapshot(name);
            let travel = TimeTravel::new(Arc::new(snapshot), 0);
            let end = travel.len();
            let mut history = AllocationHistory::start(end);
            history.extend(&travel, end);
            let history = history.finish();
            assert!(end > 4 * HISTORY_CHUNK, "{name}: {end} events");
            let by_every_free = |peak: usize, trough: usize, rise: f64| {
                let at_peak = history.allocated_before[peak];
                history.alloc_of[peak..trough]
                    .iter()
                    .filter(|&&a| a != usize::MAX)
                    .any(|&a| {
                        let after = history.allocated_before[a + 1];
                        at_peak.saturating_sub(after) as f64 >= REACH_SHARE * rise
                    })
            };
            let c = HISTORY_CHUNK;
            let mut positions = vec![
                0,
                1,
                c - 1,
                c,
                c + 1,
                2 * c,
                3 * c - 1,
                end / 2,
                end - 1,
                end,
            ];
            positions.extend((1..40).map(|i| i * end / 40));
            for &peak in &positions {
                for &trough in positions.iter().filter(|&&t| t >= peak) {
                    let allocated =
                        history.allocated_before[trough] - history.allocated_before[peak];
                    for rise in [1.0, 64.0 * 1024.0, 1e7, 1e8, 1e9, 2.0 * allocated as f64] {
                        let reaches = history.reaches_back(peak, trough, rise);
                        assert_eq!(
                            reaches,
                            by_every_free(peak, trough, rise),
                            "{name}: {peak}..{trough} rise {rise}"
                        );
                        answers[usize::from(reaches)] += 1;
                    }
                }
            }
            assert!(!history.reaches_back(end, end + 1, 1.0));
        }
        assert!(answers[0] > 100 && answers[1] > 100, "{answers:?}");
    }

    const GIB_TEST: u64 = 1 << 30;

    #[test]
    fn turning_points_ignore_wiggles() {
        let series = [0, 10, 9, 20, 5, 6, 30];
        assert_eq!(
            turning_points(&series, 3),
            vec![(0, 0), (3, 20), (4, 5), (6, 30)]
        );
    }

    /// Merging small cycles keeps the boundaries a scan of the series for each run of cycles
    /// keeps, on a real trace's live set cut into cycles of several lengths (many of them
    /// merged).
    #[test]
    fn small_cycles_merge_as_a_scan_of_the_series_says() {
        let snapshot = crate::test_fixtures::pytorch_snapshot("frag_oom.pickle");
        let travel = TimeTravel::new(std::sync::Arc::new(snapshot), 0);
        let series = travel.allocated_series();
        let scanned = |boundaries: &[usize]| {
            let rise = |from: usize, to: usize| {
                let stretch = &series[from..=to];
                let high = stretch.iter().copied().max().unwrap_or(0);
                high.saturating_sub(stretch.iter().copied().min().unwrap_or(0))
            };
            let largest = boundaries
                .windows(2)
                .map(|w| rise(w[0], w[1]))
                .max()
                .unwrap_or(0);
            let mut kept = vec![boundaries[0]];
            for (i, &end) in boundaries.iter().enumerate().skip(1) {
                let start = kept.last().copied().unwrap_or(0);
                let last = i == boundaries.len() - 1;
                if last || rise(start, end) as f64 >= SMALL_CYCLE_SHARE * largest as f64 {
                    kept.push(end);
                }
            }
            kept
        };
        let mut merged_some = 0;
        for step in [2, 3, 5, 37, 300] {
            let boundaries: Vec<usize> = (0..series.len()).step_by(step).collect();
            let merged = merge_small_cycles(&travel, boundaries.clone());
            merged_some += usize::from(merged.len() < boundaries.len());
            assert_eq!(merged, scanned(&boundaries), "step {step}");
        }
        assert!(merged_some >= 2, "{merged_some}");
    }
}
