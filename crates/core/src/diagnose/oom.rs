//! The out-of-memory rule: decides, from the numbers at the failure and from what happened before
//! it, why an allocation failed. The one verdict: `diagnose`, the wizards, the Allocator tab's OOM
//! explainer and `vramscope analyze` all classify with [`classify`] (the explainer through
//! [`judge_explanation`]), so they cannot contradict each other.
//!
//! The card at the failure is split into: other processes, this process (framework allocated +
//! reserved-but-unallocated + context), free, and any per-process cap. The live set's history
//! (an allocator trace's iterations, or the figures a log prints per step) says whether the job
//! had completed an iteration and whether its live set was still growing. Then, in order:
//! 1. a cap was set and the device still had room, or CUDA reported room at the failure that the
//!    allocator was refused → the cap stopped it (`memory-cap`); when the allocator also held
//!    enough cached bytes for the request in blocks too small, and fixing that would last
//!    (rule 2's conditions), fragmentation is the primary finding and the cap a second one;
//! 2. the allocator held enough cached-but-unallocated bytes usable for the request (its pool and
//!    stream, when a snapshot shows them) but no block large enough → `fragmentation`, unless the
//!    job failed in its first step (`capacity`: the step's peak is unknown, and a batch that does
//!    not fit does not fit whatever the allocator does) or its live set was growing by more than
//!    the cached bytes (packing them better only postpones the failure: `leak` on a sure trend of
//!    added tensors, `capacity` when the same tensors grow by design, such as a KV cache);
//! 3. other processes hold enough that freeing them would have made the request fit, and a notable
//!    share of the card → `other-process`;
//! 4. a live set that grew from iteration to iteration, on a sure trend (enough iterations and a
//!    good fit), until the card was full (without the growth, the request would have fit) →
//!    `leak`; a few rising cycles are what one step's forward pass looks like (capacity);
//! 5. otherwise the job needs more than the card has → `capacity`. Less cached memory than the
//!    request is never fragmentation: however it was packed, it could not hold the request, and
//!    cached blocks in partly used segments cannot be joined with free device memory (the
//!    Allocator tab's explainer has always said so). When free plus cached memory would add up to
//!    the request and the live set plus the request fits on the card, expandable segments (which
//!    can unmap and remap those pages) are offered as an unverified alternative.
//!
//! A reliable what-if replay of the allocation history (`super::proof`) overrides rules 1, 2 and 5
//! where it can: when no allocator setting would have avoided the failure, it is not
//! fragmentation; when one would have (and the job was neither in its first step nor growing), it
//! is — under a cap too, where the cap then stays a second finding. Allocator settings are recommended only as the replay proves them; without a replay they say
//! they are unverified and how to verify them. When the trace ends inside the step that failed
//! (a snapshot taken at the failure), a setting the replay saw serve the failing request only
//! *passes* it (`super::proof`), and the failing step's own pattern decides how far it carries
//! (`super::step_reach`): one more repetition of the step's call sites needing more than the
//! setting leaves keeps the verdict capacity (or the cap); a one-off request, or earlier
//! iterations that held as much, make it fragmentation; otherwise the finding says uncertain and
//! what settles it.
//!
//! PyTorch prints the `expandable_segments` hint on every OOM; it is only repeated when
//! fragmentation is the verdict, and otherwise the explanation says why it would not help.
//!
//! Where the live memory went at the failure (`super::categories`: parameters, gradients,
//! optimizer state, activations, caches, private pools, ...) is evidence of every finding, and
//! places its advice around the smaller batch: never a smaller batch first when the live set is
//! mostly batch-independent.

use crate::analysis::replay::DRIVER_SLACK_BYTES;
use std::sync::Arc;

use super::categories;
use super::finding::{
    Category, Evidence, EvidenceSource, Finding, Recommendation, Severity, Unit, Wizard,
};
use super::growth::Confidence;
use super::leak::SnapshotOom;
use super::log::{Framework, OomNumbers};
use super::proof::{self, ReplayEvidence};
use super::recommend::{self, NOTABLE_BYTES, NOTABLE_OTHER_PROCESS_FRACTION};
use super::step_reach::{self, StepReach};
use super::trajectory::{IterationSource, LiveGrowth, Trajectory};
use crate::analysis::categories::{MemoryBreakdown, MemoryCategory};
use crate::analysis::oom::OomExplanation;
use crate::analysis::repetition::Repetition;
use crate::model::format_bytes;

/// Everything known about one out-of-memory failure, merged from a log, a snapshot and a capture.
#[derive(Clone, Debug, PartialEq)]
pub struct OomCase {
    pub framework: Framework,
    pub numbers: OomNumbers,
    /// Where `numbers` came from.
    pub source: EvidenceSource,
    /// How many OOM lines or events were seen in all (ranks and retries print the same failure).
    pub occurrences: usize,
    /// Largest free (cached) block usable for the request at the failure, from a snapshot.
    pub largest_free_block: Option<(u64, EvidenceSource)>,
    /// Cached free bytes the request could use (its pool and stream, not excluded by
    /// `max_split_size`), from a snapshot; without one, all reserved-but-unallocated bytes count.
    pub usable_cached_bytes: Option<u64>,
    /// Other processes on the device seen by a capture at the failure, when the message had none:
    /// (pid, name, bytes).
    pub other_processes_from_capture: Vec<(u32, String, u64, EvidenceSource)>,
    /// Whether the allocator already used expandable segments (from a snapshot's settings).
    pub expandable_segments: Option<bool>,
    /// How the live set moved before the failure, and where that comes from.
    pub history: Option<(Trajectory, EvidenceSource)>,
    /// A what-if replay of the allocation history under other settings.
    pub replay: Option<ReplayEvidence>,
    /// The snapshot holding the allocation history, when there is one (its name, for "how to
    /// verify").
    pub history_file: Option<String>,
    /// Where the live memory went, by category, at the failure (and at the peak before it),
    /// and the snapshot it was read from.
    pub breakdown: Option<(Arc<MemoryBreakdown>, EvidenceSource)>,
    /// Out-of-memory errors the same process caught and went on from before this one (earlier
    /// OOM snapshots of it, e.g. cuDNN retrying with a smaller workspace): not the failure.
    pub recovered_before: usize,
    /// The one GPU a run's job used, by NVML's index (nvidia-smi's), when the failure names it
    /// otherwise: a job started with `CUDA_VISIBLE_DEVICES=3` calls that GPU "GPU 0".
    pub job_gpu_in_nvml: Option<u32>,
}

impl OomCase {
    /// A case with only `numbers` from `source`; everything else unknown.
    pub fn new(framework: Framework, numbers: OomNumbers, source: EvidenceSource) -> Self {
        OomCase {
            framework,
            numbers,
            source,
            occurrences: 1,
            largest_free_block: None,
            usable_cached_bytes: None,
            other_processes_from_capture: Vec::new(),
            expandable_segments: None,
            history: None,
            replay: None,
            history_file: None,
            breakdown: None,
            recovered_before: 0,
            job_gpu_in_nvml: None,
        }
    }

    fn trajectory(&self) -> Option<&Trajectory> {
        self.history.as_ref().map(|(t, _)| t)
    }
}

/// What the evidence says caused the failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OomCause {
    /// Fragmentation, and the cap is why the allocator could not reserve more.
    CapWithFragmentation,
    Cap,
    Fragmentation,
    OtherProcess,
    Capacity,
    /// The live set kept growing from iteration to iteration until it filled the card.
    Growth,
}

impl OomCause {
    /// The finding category of the primary finding.
    pub fn category(self) -> Category {
        match self {
            OomCause::CapWithFragmentation | OomCause::Fragmentation => Category::Fragmentation,
            OomCause::Cap => Category::MemoryCap,
            OomCause::OtherProcess => Category::OtherProcess,
            OomCause::Capacity => Category::Capacity,
            OomCause::Growth => Category::Leak,
        }
    }

    /// The verdict as a heading for people.
    pub fn heading(self) -> &'static str {
        match self {
            OomCause::CapWithFragmentation | OomCause::Fragmentation => "Fragmentation",
            OomCause::Cap => "Memory cap",
            OomCause::OtherProcess => "Other process",
            OomCause::Capacity => "Capacity",
            OomCause::Growth => "Growth",
        }
    }
}

/// The cause and the facts of the history and the replay that decided it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub cause: OomCause,
    /// The job had not completed an iteration (and the trace shows it from the start).
    pub first_step: bool,
    /// The live set grew by more than the cached bytes could ever give back.
    pub growth_outpaces_waste: bool,
    /// The replay changed the verdict of the numbers alone; why.
    pub replay_note: Option<String>,
    /// What the failing step's own pattern says about the settings that pass its failing
    /// request, when the trace ends inside that step ([`step_reach`]).
    pub step_reach: Option<StepReach>,
}

/// Expandable segments of the large pool grow and shrink in pages of this size (c10
/// `CUDACachingAllocator`: `kLargeBuffer`, 20 MiB): a free block smaller than a page holds no
/// whole page, so expandable segments can neither unmap nor remap any of it.
const EXPANDABLE_PAGE_BYTES: u64 = 20 * crate::model::MIB;

/// Requests up to this size come from the small pool (c10 `kSmallSize`, 1 MiB).
const SMALL_POOL_MAX_BYTES: u64 = crate::model::MIB;

/// Allowance for this process's CUDA context and libraries (cuBLAS/cuDNN workspaces) on top of
/// what its allocator reserved, when the message does not give the process's total.
const CONTEXT_ALLOWANCE_BYTES: u64 = 1 << 30;

/// Memory on the device that neither free memory, this process nor the listed processes account
/// for: processes the framework could not see (another container, no NVML access).
fn unlisted_bytes(n: &OomNumbers) -> Option<u64> {
    let total = n.total_bytes?;
    let free = n.free_bytes?;
    let reserved_with_context = n
        .reserved_bytes
        .map(|r| r.saturating_add(CONTEXT_ALLOWANCE_BYTES));
    let own = match (
        n.this_process_bytes.filter(|&p| p > 0),
        reserved_with_context,
    ) {
        (Some(p), Some(r)) => p.max(r.saturating_sub(CONTEXT_ALLOWANCE_BYTES)),
        (Some(p), None) => p,
        (None, Some(r)) => r,
        (None, None) => return None,
    };
    let listed: u64 = n.other_processes.iter().map(|p| p.used_bytes).sum();
    Some(
        total
            .saturating_sub(free)
            .saturating_sub(own)
            .saturating_sub(listed),
    )
    .filter(|&b| b >= NOTABLE_BYTES)
}

/// The `(pid, bytes)` of every other process: from the message, else the capture, else memory
/// nobody listed (pid 0).
pub fn other_processes(case: &OomCase) -> Vec<(u32, u64)> {
    if !case.numbers.other_processes.is_empty() {
        case.numbers
            .other_processes
            .iter()
            .map(|p| (p.pid, p.used_bytes))
            .collect()
    } else if !case.other_processes_from_capture.is_empty() {
        case.other_processes_from_capture
            .iter()
            .map(|(pid, _, b, _)| (*pid, *b))
            .collect()
    } else {
        unlisted_bytes(&case.numbers)
            .map(|b| vec![(0, b)])
            .unwrap_or_default()
    }
}

/// Whether the free figure was read by the framework at the failure (a log message or a
/// snapshot's OOM event), rather than by a sampler seconds before it.
fn free_is_exact(case: &OomCase) -> bool {
    matches!(
        case.source,
        EvidenceSource::LogLine { .. } | EvidenceSource::Snapshot { .. }
    )
}

/// Whether a per-process limit, not the GPU, refused an allocation that cached memory could not
/// serve: the device's free memory read at the failure (cudaMemGetInfo) covers the `needed_bytes`
/// cudaMalloc asked for, with [`DRIVER_SLACK_BYTES`] to spare.
pub fn refused_by_memory_cap(device_free_bytes: Option<u64>, needed_bytes: u64) -> bool {
    needed_bytes > 0
        && device_free_bytes
            .is_some_and(|free| free >= needed_bytes.saturating_add(DRIVER_SLACK_BYTES))
}

/// Applies the rules in the module comment.
pub fn classify(case: &OomCase) -> Verdict {
    let n = &case.numbers;
    let requested = n.requested_bytes.unwrap_or(0);
    let free = n.free_bytes;
    let unallocated = n.reserved_unallocated_bytes.unwrap_or(0);
    let usable = case.usable_cached_bytes.unwrap_or(unallocated);
    let largest_block = case.largest_free_block.as_ref().map(|(b, _)| *b);
    let others_sum: u64 = other_processes(case).iter().map(|(_, b)| b).sum();
    let device_had_room = free.is_some_and(|f| f >= requested);
    let cap_set = n
        .allowed_bytes
        .is_some_and(|c| n.total_bytes.is_none_or(|t| c < t));
    let cached_enough =
        requested > 0 && usable >= requested && largest_block.is_none_or(|l| l < requested);

    let history = case.trajectory();
    let first_step = history.is_some_and(Trajectory::failed_in_first_step);
    // The live set grew by more than the cached bytes could ever give back: packing them better
    // only postpones the failure, whether the growth is kept references or a working set that
    // grows by design (the same tensors made larger, a KV cache). Only the first is growth;
    // the second is capacity.
    let growth_outpaces_waste = history.is_some_and(|t| {
        t.still_growing()
            && !t.failed_in_first_step()
            && t.observed_growth_bytes()
                .is_some_and(|growth| growth >= unallocated)
    });
    let grows_by_design = history.is_some_and(Trajectory::grows_by_enlarging);
    // Growth is the cause only on a sure trend: fewer iterations than a trend needs (or a poor
    // fit) look the same as one step's forward pass through identical layers, where every
    // layer keeps its activation for the backward pass and frees a temporary: a live set that
    // rises within one step and then fails is capacity.
    let growth_is_sure = history.is_some_and(|t| match t.growth {
        LiveGrowth::Growing { confidence, .. } => confidence != Confidence::Low,
        LiveGrowth::RoseWithoutFallingBack { .. } => true,
        LiveGrowth::Steady { .. } | LiveGrowth::Unknown => false,
    });
    // Growth filled the card when, without it, the request would have fit.
    let growing_per_iteration = growth_is_sure
        && history.is_some_and(|t| {
            !t.grows_by_enlarging()
                && matches!(
                    t.growth,
                    LiveGrowth::Growing {
                        decelerating: false,
                        ..
                    }
                )
                && t.observed_growth_bytes()
                    .is_some_and(|growth| free.unwrap_or(0).saturating_add(growth) >= requested)
        });
    let fragmentation_would_last = !first_step && !growth_outpaces_waste;
    let verdict = |cause| Verdict {
        cause,
        first_step,
        growth_outpaces_waste,
        replay_note: None,
        step_reach: None,
    };

    if cap_set && (device_had_room || free.is_none())
        || free_is_exact(case) && refused_by_memory_cap(free, requested)
    {
        let mut verdict = verdict(if cached_enough && fragmentation_would_last {
            OomCause::CapWithFragmentation
        } else {
            OomCause::Cap
        });
        apply_replay(case, &mut verdict);
        return verdict;
    }
    let by_numbers = if cached_enough {
        if fragmentation_would_last {
            OomCause::Fragmentation
        } else if growth_outpaces_waste && !grows_by_design && growth_is_sure {
            OomCause::Growth
        } else {
            OomCause::Capacity
        }
    } else if other_process_stopped_it(case, others_sum) {
        OomCause::OtherProcess
    } else if growing_per_iteration {
        OomCause::Growth
    } else {
        OomCause::Capacity
    };
    let mut verdict = verdict(by_numbers);
    apply_replay(case, &mut verdict);
    verdict
}

/// Rule 3: other processes hold what the request lacked, and a notable share of the card.
fn other_process_stopped_it(case: &OomCase, others_sum: u64) -> bool {
    let n = &case.numbers;
    let requested = n.requested_bytes.unwrap_or(0);
    let free = n.free_bytes.unwrap_or(0);
    let share_ok = n
        .total_bytes
        .is_none_or(|t| others_sum as f64 >= NOTABLE_OTHER_PROCESS_FRACTION * t as f64)
        || others_sum >= requested;
    others_sum >= NOTABLE_BYTES
        && free < requested
        && free.saturating_add(others_sum) >= requested
        && share_ok
}

/// Free plus cached memory would hold the request, and the live set plus the request fits in what
/// the card leaves this process: expandable segments might have served it (rule 5).
fn packing_would_fit(n: &OomNumbers, others_sum: u64) -> bool {
    let requested = n.requested_bytes.unwrap_or(0);
    let free = n.free_bytes.unwrap_or(0);
    let unallocated = n.reserved_unallocated_bytes.unwrap_or(0);
    let sum_fits = unallocated >= NOTABLE_BYTES
        && free < requested
        && free.saturating_add(unallocated) >= requested;
    let live_fits = match (n.allocated_bytes, n.total_bytes) {
        (Some(allocated), Some(total)) => {
            let context = n
                .this_process_bytes
                .zip(n.reserved_bytes)
                .map_or(CONTEXT_ALLOWANCE_BYTES, |(p, r)| p.saturating_sub(r));
            allocated.saturating_add(requested)
                <= total.saturating_sub(others_sum).saturating_sub(context)
        }
        _ => true,
    };
    sum_fits && live_fits
}

/// The live set at the failure plus the request fits under the cap (or a number is missing):
/// only then can an allocator setting, and not a larger cap, be what the job lacked.
fn live_set_fits_under_cap(n: &OomNumbers) -> bool {
    match (n.allocated_bytes, n.requested_bytes, n.allowed_bytes) {
        (Some(allocated), Some(requested), Some(allowed)) => {
            allocated.saturating_add(requested) <= allowed
        }
        _ => true,
    }
}

/// Where a reliable replay decides between fragmentation and a full card, or a full cap
/// (module comment). When the trace ends inside the step that failed, the settings that pass
/// the failing request are judged by the step's own pattern ([`step_reach`]): one more
/// repetition needing more than their headroom keeps the verdict capacity (or the cap).
fn apply_replay(case: &OomCase, verdict: &mut Verdict) {
    let Some(proof) = case.replay.as_ref().and_then(proof::judge) else {
        return;
    };
    let reach = step_reach::judge(
        &case.numbers,
        case.trajectory(),
        case.breakdown.as_ref().map(|(b, _)| b.as_ref()),
        &proof,
    );
    let not_enough = |why: &str| {
        format!(
            "The replay got past the failing request under {} other allocator setting(s), but the trace ends inside the step that failed, and the step's own pattern says that is not enough: {why}.",
            proof.helps.len()
        )
    };
    match verdict.cause {
        OomCause::Fragmentation | OomCause::CapWithFragmentation if proof.helps.is_empty() => {
            verdict.cause = if verdict.cause == OomCause::Fragmentation {
                OomCause::Capacity
            } else {
                OomCause::Cap
            };
            verdict.replay_note = Some(if proof.layout_only.is_empty() {
                format!(
                    "The replay of the allocation history under {} other allocator setting(s) ran out of memory every time: better packing would not have saved this run.",
                    proof.useless.len()
                )
            } else {
                format!(
                    "The replay of the allocation history under {} other allocator setting(s) ran out of memory every time, and {} got past the failure only through another order of segments (garbage collection thresholds, not counted as proof): better packing would not have saved this run.",
                    proof.useless.len(),
                    proof.layout_only.len()
                )
            });
        }
        OomCause::Fragmentation | OomCause::CapWithFragmentation => {
            if let Some(StepReach::Capacity(why)) = &reach {
                verdict.cause = if verdict.cause == OomCause::Fragmentation {
                    OomCause::Capacity
                } else {
                    OomCause::Cap
                };
                verdict.replay_note = Some(not_enough(why));
            }
            verdict.step_reach = reach;
        }
        OomCause::Capacity | OomCause::Cap
            if !verdict.first_step
                && !verdict.growth_outpaces_waste
                && (verdict.cause == OomCause::Capacity
                    || live_set_fits_under_cap(&case.numbers)) =>
        {
            let Some(best) = proof.helps.first() else {
                return;
            };
            if let Some(StepReach::Capacity(why)) = &reach {
                verdict.replay_note = Some(not_enough(why));
            } else {
                let (cause, what) = if verdict.cause == OomCause::Capacity {
                    (OomCause::Fragmentation, "the card")
                } else {
                    (OomCause::CapWithFragmentation, "what the memory cap allows")
                };
                verdict.cause = cause;
                let how_far = if proof.ends_in_failed_step() {
                    "served the failing request"
                } else {
                    "did not run out of memory"
                };
                verdict.replay_note = Some(format!(
                    "The replay of the allocation history under {} {how_far} ({}): the allocator's packing, not the live set, used up {what}.",
                    best.conf,
                    proof::proven_text(best, proof.limit_bytes)
                ));
            }
            verdict.step_reach = reach;
        }
        _ => {}
    }
}

fn process_label(pid: u32, bytes: u64) -> String {
    if pid == 0 {
        format!(
            "{} held by processes the message did not list",
            format_bytes(bytes)
        )
    } else {
        format!("PID {pid} {}", format_bytes(bytes))
    }
}

/// The evidence a finding about `case` shows, in this order: the device's figures and its
/// processes ([`device_evidence`]), the framework's ([`framework_evidence`]), where the live
/// memory went by category ([`categories::evidence`]), the live set's
/// history ([`history_evidence`]), what the what-if replay found ([`replay_evidence`]), and how
/// often the failure was reported.
fn evidence(case: &OomCase, verdict: &Verdict) -> Vec<Evidence> {
    let mut ev = Vec::new();
    device_evidence(case, &mut ev);
    framework_evidence(case, &mut ev);
    if let Some((breakdown, source)) = &case.breakdown {
        ev.extend(categories::evidence(breakdown, source));
    }
    if let Some((trajectory, source)) = &case.history {
        history_evidence(trajectory, source, &mut ev);
    }
    if let Some(replay) = &case.replay {
        replay_evidence(replay, verdict, &mut ev);
    }
    if case.recovered_before > 0 {
        ev.push(Evidence::number(
            "earlier out-of-memory errors this process went on from",
            case.recovered_before as f64,
            Unit::Count,
            format!(
                "{} (caught, e.g. by a library retrying with less memory; not the failure)",
                case.recovered_before
            ),
            case.source.clone(),
        ));
    }
    if case.occurrences > 1 {
        ev.push(Evidence::number(
            "out-of-memory reports",
            case.occurrences as f64,
            Unit::Count,
            format!("{} reports", case.occurrences),
            case.source.clone(),
        ));
    }
    ev
}

/// The device's side of the failure: the request, the capacity, what was free, the cap, this
/// process's use and the other processes' (as the message lists them, else as the capture
/// does, else what none of them accounts for).
fn device_evidence(case: &OomCase, ev: &mut Vec<Evidence>) {
    let n = &case.numbers;
    let src = || case.source.clone();
    if let Some(r) = n.requested_bytes {
        ev.push(Evidence::bytes("requested", r, src()));
    }
    if let Some(t) = n.total_bytes {
        ev.push(Evidence::bytes("device capacity", t, src()));
    }
    if let Some(f) = n.free_bytes {
        ev.push(Evidence::bytes("free on the device", f, src()));
    }
    if let Some(c) = n.allowed_bytes {
        ev.push(Evidence::bytes("per-process cap (allowed)", c, src()));
    }
    if let Some(p) = n.this_process_bytes {
        ev.push(Evidence::bytes(
            "this process in use (incl. CUDA context)",
            p,
            src(),
        ));
    }
    for p in &n.other_processes {
        ev.push(Evidence::bytes(
            format!("process {} in use", p.pid),
            p.used_bytes,
            src(),
        ));
    }
    if n.other_processes.is_empty()
        && case.other_processes_from_capture.is_empty()
        && let Some(unlisted) = unlisted_bytes(n)
    {
        ev.push(Evidence::bytes(
            "used by processes not listed (capacity - free - this process)",
            unlisted,
            EvidenceSource::Derived,
        ));
    }
    if n.other_processes.is_empty() {
        for (pid, name, bytes, source) in &case.other_processes_from_capture {
            let label = if name.is_empty() {
                format!("process {pid} in use")
            } else {
                format!("process {pid} ({name}) in use")
            };
            ev.push(Evidence::bytes(label, *bytes, source.clone()));
        }
    }
}

/// The framework's side: what its tensors held, its private pools, its cache (and how much of
/// it this request could use), and the largest free block in the cache.
fn framework_evidence(case: &OomCase, ev: &mut Vec<Evidence>) {
    let n = &case.numbers;
    let src = || case.source.clone();
    if let Some(a) = n.allocated_bytes {
        ev.push(Evidence::bytes(
            "allocated by the framework (live tensors)",
            a,
            src(),
        ));
    }
    if let Some(p) = n.private_pool_bytes {
        ev.push(Evidence::bytes(
            "of which in private pools (CUDA graphs)",
            p,
            src(),
        ));
    }
    if let Some(u) = n.reserved_unallocated_bytes {
        ev.push(Evidence::bytes(
            "reserved but unallocated (cached)",
            u,
            src(),
        ));
    }
    if let Some(usable) = case.usable_cached_bytes {
        ev.push(Evidence::bytes(
            "of which usable for this request (its pool and stream)",
            usable,
            src(),
        ));
    }
    if let Some((l, s)) = &case.largest_free_block {
        ev.push(Evidence::bytes("largest cached free block", *l, s.clone()));
    }
}

/// The live set's history before the failure (from `source`): how many iterations completed,
/// and how the live set grew.
fn history_evidence(trajectory: &Trajectory, source: &EvidenceSource, ev: &mut Vec<Evidence>) {
    ev.push(Evidence::number(
        "iterations completed before the failure",
        trajectory.iterations.len() as f64,
        Unit::Count,
        trajectory.iterations.len().to_string(),
        source.clone(),
    ));
    match trajectory.growth {
        LiveGrowth::Growing {
            per_iteration_bytes,
            r_squared,
            confidence,
            ..
        } => ev.push(Evidence::number(
            "live set growth per iteration",
            per_iteration_bytes as f64,
            Unit::Bytes,
            format!(
                "{} (R² {r_squared:.2}, confidence {})",
                format_bytes(per_iteration_bytes),
                confidence.as_str()
            ),
            source.clone(),
        )),
        LiveGrowth::Steady { peak_bytes } => ev.push(Evidence::bytes(
            "live set peak per iteration (steady)",
            peak_bytes,
            source.clone(),
        )),
        LiveGrowth::RoseWithoutFallingBack {
            from_bytes,
            to_bytes,
            ..
        } => ev.push(Evidence::text(
            "live set, never falling back",
            format!("{} → {}", format_bytes(from_bytes), format_bytes(to_bytes)),
            source.clone(),
        )),
        LiveGrowth::Unknown => {}
    }
}

/// What the what-if replay found: why it did not run, or (when reliable) each setting tried by
/// what it did, or that it was unreliable. Settings that only get past this request are
/// evidence here unless the verdict is fragmentation, which recommends them instead.
fn replay_evidence(replay: &ReplayEvidence, verdict: &Verdict, ev: &mut Vec<Evidence>) {
    if let Some(reason) = &replay.not_run {
        ev.push(Evidence::text(
            "what-if replay (not run)",
            reason.clone(),
            EvidenceSource::Derived,
        ));
    } else if let Some(proof) = proof::judge(replay) {
        // Settings that get past the failing request are recommended under a fragmentation
        // verdict; under any other the live set's growth or size uses up what they save.
        if verdict.cause.category() != Category::Fragmentation {
            for postpones in &proof.helps {
                ev.push(Evidence::text(
                    format!(
                        "tried by replay: only gets past this request: {}",
                        postpones.conf
                    ),
                    format!(
                        "{}; {}",
                        proof::proven_text(postpones, proof.limit_bytes),
                        still_fails_because(verdict)
                    ),
                    EvidenceSource::Derived,
                ));
            }
        }
        for useless in &proof.useless {
            ev.push(Evidence::text(
                format!("tried by replay: does not help: {}", useless.conf),
                proof::useless_text(useless),
                EvidenceSource::Derived,
            ));
        }
        for layout in &proof.layout_only {
            ev.push(Evidence::text(
                format!("tried by replay: not counted as proof: {}", layout.conf),
                format!(
                    "{}; {}",
                    proof::proven_text(layout, proof.limit_bytes),
                    proof::LAYOUT_ONLY_WHY
                ),
                EvidenceSource::Derived,
            ));
        }
    } else {
        ev.push(Evidence::text(
            "what-if replay (unreliable, not used)",
            replay.self_check.clone(),
            EvidenceSource::Derived,
        ));
    }
}

/// Why a setting that gets past the failing request does not save the run, by the verdict: the
/// live set keeps growing, or the job needs more than the cap, the other processes or the card
/// leave it.
fn still_fails_because(verdict: &Verdict) -> String {
    match (&verdict.step_reach, verdict.cause.category()) {
        _ if verdict.growth_outpaces_waste => {
            "the live set keeps growing, so the next iterations run out anyway".to_owned()
        }
        (Some(StepReach::Capacity(why)), _) => format!("the step's own pattern: {why}"),
        (_, Category::MemoryCap) => "the job still needs more than its memory cap".to_owned(),
        (_, Category::OtherProcess) => {
            "the job still needs more than the other processes leave it".to_owned()
        }
        _ => "the job still needs more than the card".to_owned(),
    }
}

/// How much more the request needed than was free; `None` when unknown or not positive.
fn shortfall(n: &OomNumbers) -> Option<u64> {
    Some(n.requested_bytes?.saturating_sub(n.free_bytes?)).filter(|&s| s > 0)
}

/// Why PyTorch's standing advice (expandable segments) does not apply, when the cache is
/// smaller than the request; nothing when a reliable replay proved some allocator setting gets
/// the job past the failure: the replay then shows the packing was at fault, whatever the cache
/// held at the end (another finding of the same diagnosis says so).
fn hint_not_echoed(case: &OomCase) -> String {
    let n = &case.numbers;
    let replay_proves_a_setting = case
        .replay
        .as_ref()
        .and_then(proof::judge)
        .is_some_and(|proof| !proof.helps.is_empty());
    match (n.reserved_unallocated_bytes, n.requested_bytes) {
        (Some(u), Some(r)) if u < r && !replay_proves_a_setting => format!(
            " PyTorch's message suggests expandable_segments on every OOM; here only {} is cached but unallocated, less than the {} requested, so fragmentation is not the cause and that setting would not help.",
            format_bytes(u),
            format_bytes(r)
        ),
        _ => String::new(),
    }
}

/// What the history adds to an explanation: the trajectory in one sentence, and what it means
/// for this verdict.
fn history_text(case: &OomCase, verdict: &Verdict) -> String {
    let Some(t) = case.trajectory() else {
        return String::new();
    };
    let mut text = format!(" {}", t.describe());
    if t.grows_by_enlarging() {
        text.push_str(" The number of live tensors stayed the same while they grew: the same tensors were replaced by larger ones (a cache or a sequence that grows by design), so the job needs more memory at its largest than the card has; a leak would add tensors every iteration.");
    }
    let unsure_growth = matches!(
        t.growth,
        LiveGrowth::Growing {
            confidence: Confidence::Low,
            ..
        }
    );
    if unsure_growth && verdict.cause == OomCause::Capacity {
        text.push_str(" That is too little history for a sure trend: a single step's forward pass through identical layers (each keeping its activation for the backward pass) rises the same way, so the failure is judged as the job needing more than the card, not as a leak.");
    }
    if verdict.first_step {
        text.push_str(" The job failed in its first step: the step's peak is unknown and at least the live set plus the failing request, so no allocator setting makes it fit.");
    } else if verdict.growth_outpaces_waste {
        text.push_str(&format!(
            " The live set grew by more than the {} the allocator held cached: packing memory better would only postpone the failure.",
            format_bytes(case.numbers.reserved_unallocated_bytes.unwrap_or(0))
        ));
    }
    if let Some(note) = &verdict.replay_note {
        text.push(' ');
        text.push_str(note);
    }
    text
}

/// The activations a smaller batch shrinks, when the trace shows them: what the failing step
/// had risen above the floor the last completed iteration left, plus the failing request (or a
/// typical iteration's rise, when larger).
fn activation_bytes(case: &OomCase) -> Option<u64> {
    // A log's step figures are taken after each step: they hold no step's rise.
    let t = case
        .trajectory()
        .filter(|t| t.source != IterationSource::LoggedSteps)?;
    let floor = t.iterations.last()?.floor_bytes;
    let failing_step = t
        .live_at_end_bytes
        .saturating_sub(floor)
        .saturating_add(case.numbers.requested_bytes.unwrap_or(0));
    Some(failing_step.max(t.typical_excursion_bytes().unwrap_or(0))).filter(|&b| b > 0)
}

/// `recs` with what the live set's categories advise ([`categories::advice`], for a failure that
/// lacked `shortfall_bytes`) placed around the smaller-batch recommendation: what must come
/// before a smaller batch (a live set mostly of weights, gradients and optimizer state, a
/// private pool holding the shortfall) right before it, the rest right after it.
fn with_category_advice(
    case: &OomCase,
    shortfall_bytes: Option<u64>,
    mut recs: Vec<Recommendation>,
) -> Vec<Recommendation> {
    let Some((breakdown, _)) = &case.breakdown else {
        return recs;
    };
    let advice = categories::advice(breakdown, shortfall_bytes, case.numbers.requested_bytes);
    match recs.iter().position(|r| r.id == "reduce-batch-size") {
        Some(at) => {
            let rest = recs.split_off(at + 1);
            let batch = recs.pop();
            recs.extend(advice.first);
            recs.extend(batch);
            recs.extend(advice.after_batch);
            recs.extend(rest);
        }
        None => {
            recs.extend(advice.first);
            recs.extend(advice.after_batch);
        }
    }
    recs
}

/// The rest of a first step's forward pass, where it failed inside its layers: the model's
/// layers counted from its parameters (`MemoryBreakdown::parameter_layers`), the layers the
/// trace saw begin, and what the layers still to come add at the growth each one showed.
#[derive(Clone, Copy, Debug, PartialEq)]
struct ForwardToCome {
    layers: u64,
    started: u64,
    per_layer_bytes: u64,
    /// What the layers not yet begun add: (layers - started) x per layer.
    to_come_bytes: u64,
    /// The parameters' gradients, none of which the trace shows made yet: the backward pass
    /// makes them.
    gradient_bytes: u64,
}

impl ForwardToCome {
    /// What the rest of a training step adds that a smaller batch shrinks: the layers still to
    /// come, and one more layer's worth for the backward pass's first layer (the gradients of
    /// that layer's activations, made before its saved tensors are freed).
    fn scaling_bytes(&self) -> u64 {
        self.to_come_bytes + self.per_layer_bytes
    }

    /// What the rest of a training step adds in all: [`Self::scaling_bytes`] and the
    /// parameters' gradients, counted in full (the backward makes them while it frees the
    /// layers' saved tensors, whose cached blocks are of other sizes), which no batch shrinks.
    fn more_bytes(&self) -> u64 {
        self.scaling_bytes() + self.gradient_bytes
    }

    fn text(&self) -> String {
        format!(
            "The model has {} layers (its parameters' sizes repeat {} times), and the forward pass failed in layer {} of them, each keeping {}: the {} layers still to come add about {}, and the backward pass one layer's worth and the parameters' {} of gradients more, so this cut is sized on the whole step, not on the failing request (still a lower bound: the backward's own peak is not in the trace). Activation checkpointing keeps about one layer's worth instead of all {}; `vramscope run --prove --vary-arg` with the batch settles which is enough.",
            self.layers,
            self.layers,
            self.started,
            format_bytes(self.per_layer_bytes),
            self.layers - self.started,
            format_bytes(self.to_come_bytes),
            format_bytes(self.gradient_bytes),
            self.layers
        )
    }
}

/// The activations of a first step that failed in its forward pass: the step's rise above its
/// floor ([`activation_bytes`]), or, where no iteration gave a floor (the live set rose from an
/// empty allocator), the activations live at the failure plus the failing request.
fn forward_activation_bytes(case: &OomCase) -> Option<u64> {
    activation_bytes(case).or_else(|| {
        let (breakdown, _) = case.breakdown.as_ref()?;
        let at_failure = breakdown.at_failure.as_ref()?;
        let activations = at_failure.totals.bytes(MemoryCategory::Activations);
        Some(activations + case.numbers.requested_bytes.unwrap_or(0)).filter(|&b| b > 0)
    })
}

/// [`ForwardToCome`] of a job that failed in its first step inside a repetition of layers that
/// the failing request belongs to, when its parameters tell how many layers there are and more
/// are to come. Layers begun: the repetitions the trace saw begin, or, when more, the
/// activations over one layer's growth (a repetition found only in the trace's tail).
fn forward_to_come(case: &OomCase) -> Option<ForwardToCome> {
    let repetition = case.trajectory().and_then(first_step_layers)?;
    let breakdown = &case.breakdown.as_ref()?.0;
    let layers = breakdown.parameter_layers?.layers;
    let per_layer_bytes = repetition.growth_per_repetition_bytes.unsigned_abs();
    let by_bytes = forward_activation_bytes(case).unwrap_or(0) / per_layer_bytes;
    let started = (repetition.starts.len() as u64).max(by_bytes);
    let totals = &breakdown.judged().totals;
    let gradient_bytes = if totals.bytes(MemoryCategory::Gradients) == 0 {
        totals.bytes(MemoryCategory::Parameters)
    } else {
        0
    };
    (layers > started).then(|| ForwardToCome {
        layers,
        started,
        per_layer_bytes,
        to_come_bytes: (layers - started) * per_layer_bytes,
        gradient_bytes,
    })
}

fn framework_capacity_recs(case: &OomCase, verdict: &Verdict) -> Vec<Recommendation> {
    let n = &case.numbers;
    let forward = forward_to_come(case);
    let mut smaller_batch = match forward {
        // The whole forward pass and the backward's first layer, not only the failing request.
        Some(forward) => recommend::reduce_batch_size_within(
            shortfall(n).map(|s| s + forward.more_bytes()),
            n.allocated_bytes,
            forward_activation_bytes(case).map(|a| a + forward.scaling_bytes()),
        ),
        None => recommend::reduce_batch_size_within(
            shortfall(n),
            n.allocated_bytes,
            activation_bytes(case),
        ),
    };
    let caveat = match forward {
        Some(forward) => Some(forward.text()),
        None => case.trajectory().and_then(first_step_layers_to_come),
    };
    if let Some(caveat) = caveat {
        smaller_batch.expected_effect = format!("{} {caveat}", smaller_batch.expected_effect);
    }
    let mut recs = vec![smaller_batch];
    let others_sum: u64 = other_processes(case).iter().map(|(_, b)| b).sum();
    let worth_a_try = case.framework == Framework::PyTorch
        && case.expandable_segments != Some(true)
        && !verdict.first_step
        && !verdict.growth_outpaces_waste
        // With an allocation history only the replay may recommend a setting: a reliable one
        // found none that helps (or the verdict would be fragmentation), an unreliable one
        // proves nothing.
        && case.history_file.is_none()
        && packing_would_fit(n, others_sum);
    if worth_a_try {
        let mut rec = recommend::expandable_segments(n.reserved_unallocated_bytes);
        rec.expected_effect = format!(
            "Free and cached memory together ({} + {}) would hold the {} request: with expandable segments the allocator can unmap cached pages of partly used segments and map them where the request needs them. Whether the whole run then fits is not known.",
            format_bytes(n.free_bytes.unwrap_or(0)),
            format_bytes(n.reserved_unallocated_bytes.unwrap_or(0)),
            format_bytes(n.requested_bytes.unwrap_or(0))
        );
        rec.verification = Some(proof::unverified(&unverified_reason(case)));
        recs.push(rec);
    }
    match case.framework {
        Framework::Jax => recs.push(recommend::jax_preallocation()),
        Framework::TensorFlow => recs.push(recommend::tensorflow_memory_growth()),
        Framework::PyTorch | Framework::Cuda => {}
    }
    recs.push(recommend::mixed_precision(
        activation_bytes(case).or(n.allocated_bytes),
    ));
    recs.push(recommend::activation_checkpointing());
    recs.push(recommend::inference_mode());
    recs.push(recommend::shard_model(n.total_bytes));
    let mut recs = with_category_advice(case, shortfall(n), recs);
    if let Some(forward) = forward {
        checkpointing_before_a_deep_cut(case, &forward, &mut recs);
    }
    recs
}

/// Where the rest of the step needs the batch cut by more than half ([`ForwardToCome`]: the
/// layers still to come, the backward's first layer and the parameters' gradients), and keeping one
/// layer's activations instead of every layer's covers what it lacks: activation checkpointing,
/// with that saving, goes right before the smaller batch. A cut sized on a lower bound of the
/// step leaves no margin for the backward's peak, which the trace does not show, while
/// checkpointing keeps the batch and saves all layers but one; a cut by half or less stays first
/// (no recomputation).
fn checkpointing_before_a_deep_cut(
    case: &OomCase,
    forward: &ForwardToCome,
    recs: &mut Vec<Recommendation>,
) {
    let (Some(short), Some(activations)) =
        (shortfall(&case.numbers), forward_activation_bytes(case))
    else {
        return;
    };
    let needed = short + forward.more_bytes();
    let halving_frees = (activations + forward.scaling_bytes()) / 2;
    let checkpointing_frees = (forward.layers - 1) * forward.per_layer_bytes;
    if halving_frees >= needed || checkpointing_frees < needed {
        return;
    }
    let (Some(batch_at), Some(at)) = (
        recs.iter().position(|r| r.id == "reduce-batch-size"),
        recs.iter().position(|r| r.id == "activation-checkpointing"),
    ) else {
        return;
    };
    if at < batch_at {
        return;
    }
    let mut checkpointing = recs.remove(at);
    checkpointing.expected_effect = format!(
        "Checkpointing each of the model's {} layers keeps about one layer's {} of saved activations (plus each layer's input) instead of all {}: up to {} less, more than the {} the rest of the step lacks (the layers still to come, the backward's first layer and the parameters' gradients). A smaller batch would have to be cut by more than half on a lower bound of the step. The layers' activations are recomputed in the backward pass, for ~30% more compute.",
        forward.layers,
        format_bytes(forward.per_layer_bytes),
        forward.layers,
        format_bytes(checkpointing_frees),
        format_bytes(needed)
    );
    checkpointing.estimated_saving_bytes = Some(checkpointing_frees);
    recs.insert(batch_at, checkpointing);
}

/// "No single change covers the shortfall" when every recommendation with an estimate saves less
/// than the request lacked; empty otherwise.
fn combine_note(recs: &[Recommendation], shortfall_bytes: Option<u64>) -> String {
    let Some(short) = shortfall_bytes else {
        return String::new();
    };
    let bounded: Vec<&Recommendation> = recs
        .iter()
        .filter(|r| r.estimated_saving_bytes.is_some())
        .collect();
    if bounded.is_empty()
        || bounded
            .iter()
            .any(|r| r.estimated_saving_bytes.is_some_and(|s| s >= short))
    {
        return String::new();
    }
    let list = bounded
        .iter()
        .map(|r| {
            format!(
                "{} at most {}",
                r.id,
                format_bytes(r.estimated_saving_bytes.unwrap_or(0))
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        " No single change covers the {} shortfall ({list}): combine them, e.g. a smaller batch with bf16 and activation checkpointing.",
        format_bytes(short)
    )
}

/// The allocator-setting recommendations for a fragmentation verdict: those a reliable replay
/// proved (or saw pass the failing request), best first, the first saying what the failing
/// step's pattern judged of it; when that is uncertain, a smaller batch second (the cheapest
/// change if the step needs more than the card) and how to settle it third. Without a usable
/// replay, the usual settings marked unverified with the reason.
fn allocator_setting_recs(case: &OomCase, verdict: &Verdict) -> Vec<Recommendation> {
    let n = &case.numbers;
    let growth = case.trajectory().and_then(|t| match t.growth {
        LiveGrowth::Growing {
            per_iteration_bytes,
            ..
        } => Some(per_iteration_bytes),
        _ => None,
    });
    if let Some(proof) = case.replay.as_ref().and_then(proof::judge) {
        let mut recs: Vec<Recommendation> = proof
            .helps
            .iter()
            .map(|setting| {
                let mut rec = recommend::allocator_setting(&setting.conf);
                let mut verification = proof::proven(setting, &proof);
                if let Some(iterations) =
                    proof::headroom_lasts(setting, proof.limit_bytes, growth)
                {
                    verification.detail.push_str(&format!(
                        "; the live set grows by {} per iteration, so the spare memory lasts about {iterations} more iteration(s)",
                        format_bytes(growth.unwrap_or(0))
                    ));
                }
                rec.expected_effect = format!(
                    "{} {}",
                    verification.detail, rec.expected_effect
                );
                rec.verification = Some(verification);
                rec
            })
            .collect();
        let first_conf = proof.helps.first().map(|s| s.conf.clone());
        if let (Some(first), Some(reach)) = (recs.first_mut(), &verdict.step_reach) {
            let judged = match reach {
                StepReach::Placement(why) => {
                    format!("Judged enough from the step that failed: {why}.")
                }
                StepReach::Uncertain(why) | StepReach::Capacity(why) => {
                    format!("It may not be enough: {why}.")
                }
            };
            first.expected_effect = format!("{} {judged}", first.expected_effect);
        }
        if let (Some(StepReach::Uncertain(_)), Some(conf)) = (&verdict.step_reach, first_conf) {
            // Either the setting is enough or the job needs more than the card: the cheapest
            // change of each kind first, then how to tell which.
            let mut smaller = recommend::reduce_batch_size_within(
                shortfall(n),
                n.allocated_bytes,
                activation_bytes(case),
            );
            smaller.expected_effect = format!(
                "If the setting is not enough (the step needs more than the card; what follows is sized on this failure, and the rest of the step may need more): {}",
                smaller.expected_effect
            );
            // `first_conf` is a setting's: `recs` holds at least that one.
            recs.insert(1, smaller);
            recs.insert(2, recommend::prove_by_rerun(&conf));
        }
        recs.push(recommend::empty_cache());
        return recs;
    }
    let why = unverified_reason(case);
    if case.history_file.is_some() {
        // There is a history, and it did not prove a setting (no replay, or an unreliable
        // one): none is recommended on the state at the failure alone (issue 10: such guesses
        // failed as often as they worked when re-run). How to check one by hand is said.
        let mut whatif = recommend::verify_with_whatif(case.history_file.as_deref());
        whatif.verification = Some(proof::unverified(&why));
        return vec![whatif, recommend::empty_cache()];
    }
    let unverified = |mut rec: Recommendation| {
        rec.verification = Some(proof::unverified(&why));
        rec
    };
    let holes_below_a_page = case
        .largest_free_block
        .as_ref()
        .is_some_and(|(largest, _)| *largest < EXPANDABLE_PAGE_BYTES)
        && n.requested_bytes.is_some_and(|r| r > SMALL_POOL_MAX_BYTES);
    let settings: Vec<Recommendation> = if case.expandable_segments == Some(true) {
        // Already on (the snapshot's settings say so): limit splitting instead.
        recommend::max_split_size(n.requested_bytes)
            .into_iter()
            .collect()
    } else if holes_below_a_page {
        // Expandable segments return and remap free memory in whole pages; free blocks smaller
        // than a page hold none, so they cannot help here.
        recommend::max_split_size(n.requested_bytes)
            .into_iter()
            .map(|mut rec| {
                rec.expected_effect = format!(
                    "Expandable segments would not help: the largest cached free block ({}) is smaller than the {} pages they map and unmap, so none of the cached memory could be returned. {}",
                    format_bytes(case.largest_free_block.as_ref().map_or(0, |(l, _)| *l)),
                    format_bytes(EXPANDABLE_PAGE_BYTES),
                    rec.expected_effect
                );
                rec
            })
            .collect()
    } else {
        std::iter::once(recommend::expandable_segments(n.reserved_unallocated_bytes))
            .chain(recommend::max_split_size(n.requested_bytes))
            .collect()
    };
    settings
        .into_iter()
        .map(unverified)
        .chain([recommend::empty_cache()])
        .collect()
}

/// Why an allocator setting could not be proven for this case.
fn unverified_reason(case: &OomCase) -> String {
    match (&case.replay, &case.history_file) {
        (Some(replay), _) if replay.not_run.is_some() => replay.not_run.clone().unwrap_or_default(),
        (Some(replay), _) if !replay.reliable => format!(
            "the what-if replay's self-check failed ({}), so its numbers are not proof",
            replay.self_check
        ),
        (Some(_), _) => "the what-if replay did not try this setting".to_owned(),
        (None, Some(file)) => format!("{file} was not replayed"),
        (None, None) => {
            "there is no allocation history to replay (a log or a snapshot without a trace)"
                .to_owned()
        }
    }
}

/// What the job needs under a cap, from its history: `(needed bytes, why)`. A failing step whose
/// own pattern kept the settings that pass its request from being the fix (each repetition
/// adding more than they leave) needs at least one more repetition's growth, and more with every
/// repetition it still runs: one request's shortfall is no measure of it.
fn cap_need(case: &OomCase, verdict: &Verdict) -> (u64, Option<String>) {
    let n = &case.numbers;
    let at_failure = n
        .reserved_bytes
        .or(n.allowed_bytes)
        .unwrap_or(0)
        .saturating_add(n.requested_bytes.unwrap_or(0));
    let Some(t) = case.trajectory() else {
        return (at_failure, None);
    };
    if let (Some(StepReach::Capacity(why)), Some(repetition), false) = (
        &verdict.step_reach,
        &t.failing_step,
        matches!(t.growth, LiveGrowth::Growing { .. }),
    ) {
        let growth = repetition.growth_per_repetition_bytes.unsigned_abs();
        let again = at_failure.saturating_add(growth);
        return (
            again,
            Some(format!(
                "The failing step's own pattern: {why}. A cap raised by one request's shortfall lasts less than one more repetition; one more needs about {}, and every further one {} more.",
                format_bytes(again),
                format_bytes(growth)
            )),
        );
    }
    let limit = n.allowed_bytes.unwrap_or(at_failure);
    match t.growth {
        LiveGrowth::Growing {
            per_iteration_bytes,
            r_squared,
            confidence,
            ..
        } if per_iteration_bytes > 0 => {
            let done = t.iterations.len() as u64;
            let again = at_failure.saturating_add(per_iteration_bytes.saturating_mul(done));
            let card = n
                .total_bytes
                .map(|total| {
                    format!(
                        " the whole {} card lasts about {} more iteration(s);",
                        format_bytes(total),
                        total.saturating_sub(limit) / per_iteration_bytes
                    )
                })
                .unwrap_or_default();
            (
                again,
                Some(format!(
                    "The live set grew by {} per iteration over {done} iteration(s) without levelling off (R² {r_squared:.2}, confidence {}): a cap just above the failure lasts less than one more iteration. Running as many iterations again needs about {};{card} the trend cannot tell when the growth stops.",
                    format_bytes(per_iteration_bytes),
                    confidence.as_str(),
                    format_bytes(again)
                )),
            )
        }
        LiveGrowth::RoseWithoutFallingBack {
            from_bytes,
            to_bytes,
            bytes_per_second,
        } => (
            at_failure,
            Some(format!(
                "The live set rose from {} to {}{} without ever falling back: what the rest of the run needs cannot be told from one request's shortfall, only that it is more than {}.",
                format_bytes(from_bytes),
                format_bytes(to_bytes),
                bytes_per_second
                    .filter(|r| *r > 0.0)
                    .map(|r| format!(" ({}/s)", format_bytes(r as u64)))
                    .unwrap_or_default(),
                format_bytes(at_failure)
            )),
        ),
        LiveGrowth::Steady { peak_bytes } => (
            at_failure.max(peak_bytes),
            Some(format!(
                "The iterations before the failure were steady, peaking at {}: the job needs at least {}.",
                format_bytes(peak_bytes),
                format_bytes(at_failure.max(peak_bytes))
            )),
        ),
        _ => (at_failure, None),
    }
}

/// The findings for one OOM case: the primary cause first, then contributing causes.
pub fn findings(case: &OomCase) -> Vec<Finding> {
    let verdict = classify(case);
    let cause = verdict.cause;
    let words = Wording::of(case, &verdict);
    let evidence = evidence(case, &verdict);
    let mut out = Vec::new();
    match cause {
        OomCause::CapWithFragmentation | OomCause::Fragmentation => {
            out.push(fragmentation_finding(
                case,
                &verdict,
                &words,
                evidence.clone(),
            ));
            if cause == OomCause::CapWithFragmentation {
                out.push(cap_finding(
                    case,
                    &verdict,
                    Severity::Warning,
                    &words,
                    evidence.clone(),
                ));
            }
        }
        OomCause::Cap => {
            out.push(cap_finding(
                case,
                &verdict,
                Severity::Critical,
                &words,
                evidence.clone(),
            ));
            // A cap under a live set that grows step after step: no cap is the fix, the leak is.
            if step_leak(case, &verdict).is_some_and(|l| l.deserves_a_finding(case, false)) {
                out.push(growth_finding(
                    case,
                    &verdict,
                    Severity::Warning,
                    &words,
                    evidence.clone(),
                ));
            }
        }
        OomCause::OtherProcess => out.push(other_process_finding(case, &words, evidence.clone())),
        OomCause::Growth => {
            out.push(growth_finding(
                case,
                &verdict,
                Severity::Critical,
                &words,
                evidence.clone(),
            ));
            // What ran out, with its numbers.
            out.push(capacity_finding(
                case,
                &verdict,
                Severity::Warning,
                &words,
                evidence.clone(),
            ));
        }
        OomCause::Capacity => {
            out.push(capacity_finding(
                case,
                &verdict,
                Severity::Critical,
                &words,
                evidence.clone(),
            ));
            if step_leak(case, &verdict).is_some_and(|l| l.deserves_a_finding(case, true)) {
                out.push(growth_finding(
                    case,
                    &verdict,
                    Severity::Warning,
                    &words,
                    evidence.clone(),
                ));
            }
        }
    }
    // A notable other process is worth mentioning even when it is not the primary cause.
    if cause != OomCause::OtherProcess {
        out.extend(notable_other_processes(case, &words, evidence));
    }
    out
}

/// How the findings of one OOM name the GPU and the request, and what the live set's history
/// adds to every explanation.
struct Wording {
    /// "GPU 0", or "the GPU" when the message did not say; with the GPU's nvidia-smi index
    /// where a run's job counted it otherwise ([`OomCase::job_gpu_in_nvml`]).
    gpu: String,
    /// "2.00 GiB", or "an allocation".
    request: String,
    /// The trajectory's sentence ([`history_text`]), empty without one.
    history: String,
}

impl Wording {
    fn of(case: &OomCase, verdict: &Verdict) -> Self {
        let n = &case.numbers;
        Wording {
            gpu: match (n.device_index, case.job_gpu_in_nvml) {
                (Some(d), Some(nvml)) => format!("GPU {d} (GPU {nvml} in nvidia-smi)"),
                (None, Some(nvml)) => format!("the GPU (GPU {nvml} in nvidia-smi)"),
                (Some(d), None) => format!("GPU {d}"),
                (None, None) => "the GPU".to_owned(),
            },
            request: n
                .requested_bytes
                .map(format_bytes)
                .unwrap_or_else(|| "an allocation".to_owned()),
            history: format!(
                "{}{}",
                history_text(case, verdict),
                case.breakdown
                    .as_ref()
                    .map(|(b, _)| categories::explanation(b))
                    .unwrap_or_default()
            ),
        }
    }
}

/// A live set that the trace shows growing step after step on a sure trend by keeping tensors
/// (not the same tensors made larger, which is capacity): a leak, whatever stopped the failing
/// request.
struct StepLeak<'a> {
    per_step_bytes: u64,
    steps: usize,
    /// The call site whose allocations the completed steps kept, with those bytes.
    kept_by: Option<&'a (String, u64)>,
    /// Measured on the repetition of whole steps inside the failing stretch, not from iteration
    /// to iteration.
    from_repetition: bool,
}

impl StepLeak<'_> {
    /// Whether the leak deserves its own finding beside a capacity or cap verdict: measured on
    /// an allocator trace (a log's per-step figures have the log's own leak finding), and, beside
    /// capacity, only where the failing stretch's repetition showed it (a live set growing from
    /// iteration to iteration that did not fill the card is not what stopped the job).
    fn deserves_a_finding(&self, case: &OomCase, beside_capacity: bool) -> bool {
        let on_a_trace = case
            .trajectory()
            .is_some_and(|t| t.source != IterationSource::LoggedSteps);
        on_a_trace && (self.from_repetition || !beside_capacity)
    }

    /// ", most of it allocated at SITE (4.00 GiB kept)", or nothing without a call site.
    fn kept_text(&self) -> String {
        self.kept_by
            .map(|(site, bytes)| {
                format!(
                    ", kept by {site} ({} of its allocations still alive)",
                    format_bytes(*bytes)
                )
            })
            .unwrap_or_default()
    }
}

/// The [`StepLeak`] of `case`, if its history shows one: a live set growing from iteration to
/// iteration, or, where the failing step's own pattern kept the verdict from the settings that
/// pass the failing request, a repetition of whole steps each adding memory.
fn step_leak<'a>(case: &'a OomCase, verdict: &Verdict) -> Option<StepLeak<'a>> {
    let t = case.trajectory()?;
    match t.growth {
        LiveGrowth::Growing {
            per_iteration_bytes,
            decelerating: false,
            confidence,
            ..
        } if confidence != Confidence::Low
            && per_iteration_bytes > 0
            && !t.grows_by_enlarging() =>
        {
            return Some(StepLeak {
                per_step_bytes: per_iteration_bytes,
                steps: t.iterations.len(),
                kept_by: t.kept_by.as_ref(),
                from_repetition: false,
            });
        }
        _ => {}
    }
    let steps = t.failing_step.as_ref().filter(|r| {
        r.spans_steps
            && r.growth_per_repetition_bytes > 0
            && matches!(verdict.step_reach, Some(StepReach::Capacity(_)))
    })?;
    Some(StepLeak {
        per_step_bytes: steps.growth_per_repetition_bytes.unsigned_abs(),
        steps: steps.whole_repetitions(),
        kept_by: steps.kept_by.as_ref(),
        from_repetition: true,
    })
}

/// A per-process cap (memory fraction, MPS or container limit) refused the allocation. The cap
/// to ask for comes from the live set's history when there is one ([`cap_need`]); a live set
/// that grows step after step ([`StepLeak`]) is said to be a leak, since no cap sized from one
/// request's shortfall lasts.
fn cap_finding(
    case: &OomCase,
    verdict: &Verdict,
    severity: Severity,
    words: &Wording,
    evidence: Vec<Evidence>,
) -> Finding {
    let n = &case.numbers;
    let Wording {
        gpu,
        request: req,
        history,
    } = words;
    let (needed, need_why) = cap_need(case, verdict);
    // Still growing: from iteration to iteration, or repetition after repetition inside the
    // failing step, by more than the settings that pass its request leave.
    let growing = case.trajectory().is_some_and(Trajectory::still_growing)
        || matches!(verdict.step_reach, Some(StepReach::Capacity(_)));
    let free_text = n
        .free_bytes
        .map(format_bytes)
        .unwrap_or_else(|| "memory".into());
    let (title, explanation) = match n.allowed_bytes {
        Some(cap) => (
            format!(
                "A per-process cap of {} stopped the {req} allocation while {free_text} was free",
                format_bytes(cap)
            ),
            format!(
                "The process may use at most {} (torch.cuda.set_per_process_memory_fraction or an equivalent setting). The allocator had reserved {} and needed {req} more, which exceeds the cap, although {gpu} had room.{}{history}",
                format_bytes(cap),
                n.reserved_bytes
                    .map(format_bytes)
                    .unwrap_or_else(|| "its share".into()),
                cached_under_cap_text(case)
            ),
        ),
        None => (
            format!(
                "The allocator refused {req} while {free_text} was free on {gpu}: a memory cap is in force"
            ),
            format!(
                "CUDA reported {free_text} free at the failure, more than the {req} requested, and the cached memory could not explain it: a per-process limit stopped the allocation (torch.cuda.set_per_process_memory_fraction, an MPS memory limit or a container limit).{}{history}",
                cached_under_cap_text(case)
            ),
        ),
    };
    let leak = step_leak(case, verdict);
    let mut recommendations = cap_recommendations(case, needed, need_why.as_deref(), growing);
    match &leak {
        Some(leak) => recommendations.insert(
            1,
            recommend::find_leak_per_step(leak.per_step_bytes, leak.kept_by),
        ),
        None if growing => recommendations.insert(1, recommend::find_leak(None)),
        None => {}
    }
    let explanation = match &leak {
        Some(leak) => format!(
            "{explanation} It is a leak, not a cap too small: over {} steps, every step kept {} more{}, so a cap raised by one request's shortfall is used up within the next step, and any cap only postpones the failure.",
            leak.steps,
            format_bytes(leak.per_step_bytes),
            leak.kept_text()
        ),
        None => explanation,
    };
    Finding::new(Category::MemoryCap, severity, title)
        .with_evidence(evidence)
        .explained(explanation)
        .recommend(recommendations)
        .in_wizard(Wizard::OutOfMemory)
}

/// The recommendations of a cap finding, first the one the failure's numbers support: a cap
/// raised to what is `needed` (`need_why`: from the history; `growing`: remove it), within what
/// the card leaves the process (what it holds plus the free memory); when even that is less than
/// needed, a smaller job comes first. From the numbers alone (no history to replay), cached memory
/// that would have held the request with the cap's room ([`CachedUnderCap::WithRoom`]) adds
/// expandable segments, unverified, after the cap.
fn cap_recommendations(
    case: &OomCase,
    needed: u64,
    need_why: Option<&str>,
    growing: bool,
) -> Vec<Recommendation> {
    let n = &case.numbers;
    let room = n
        .free_bytes
        .zip(n.reserved_bytes)
        .map(|(f, r)| f.saturating_add(r));
    let mut raise = recommend::raise_memory_fraction_within(
        n.allowed_bytes,
        needed,
        n.total_bytes,
        growing && need_why.is_some(),
        need_why,
        room,
    );
    raise.verification = Some(proof::unverified(if growing {
        "a replay ends where the recorded run ended, and this live set was still growing"
    } else {
        "a raised cap is not replayed yet"
    }));
    let smaller = recommend::reduce_batch_size_within(
        n.requested_bytes,
        n.allocated_bytes,
        activation_bytes(case),
    );
    let card_too_small = !growing && room.is_some_and(|room| room < needed);
    let mut recs = if card_too_small {
        vec![smaller, raise]
    } else {
        vec![raise, smaller]
    };
    let from_numbers_alone = case.history_file.is_none() && case.replay.is_none();
    if let CachedUnderCap::WithRoom { cached, room } = cached_under_cap(n)
        && from_numbers_alone
        && case.framework == Framework::PyTorch
        && case.expandable_segments != Some(true)
    {
        let mut rec = recommend::expandable_segments(Some(cached));
        rec.expected_effect = format!(
            "The {} cached plus the {} the cap still left would have held the {} request: with expandable segments the allocator can unmap cached pages of partly used segments and map them where the request needs them, within the cap. Whether the whole run then fits is not known.",
            format_bytes(cached),
            format_bytes(room),
            n.requested_bytes.map(format_bytes).unwrap_or_default()
        );
        rec.verification = Some(proof::unverified(&unverified_reason(case)));
        recs.insert(1, rec);
    }
    recs.push(recommend::mixed_precision(
        activation_bytes(case).or(n.allocated_bytes),
    ));
    with_category_advice(case, n.requested_bytes, recs)
}

/// What the cached-but-unallocated memory could have done for a request that a cap refused,
/// from the failure's numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CachedUnderCap {
    /// The numbers lack the cache or the request.
    Unknown,
    /// More cached than requested, yet no cached block held the request.
    Enough { cached: u64 },
    /// Less cached than requested, but with the `room` the cap still left the allocator it
    /// would have held the request, and the live set plus the request fits under the cap.
    WithRoom { cached: u64, room: u64 },
    /// Less cached than requested, even with the cap's room.
    TooLittle,
}

fn cached_under_cap(n: &OomNumbers) -> CachedUnderCap {
    let (Some(cached), Some(requested)) = (n.reserved_unallocated_bytes, n.requested_bytes) else {
        return CachedUnderCap::Unknown;
    };
    if cached >= requested {
        return CachedUnderCap::Enough { cached };
    }
    let room = n
        .allowed_bytes
        .zip(n.reserved_bytes)
        .map_or(0, |(cap, reserved)| cap.saturating_sub(reserved));
    if cached >= NOTABLE_BYTES
        && cached.saturating_add(room) >= requested
        && live_set_fits_under_cap(n)
    {
        CachedUnderCap::WithRoom { cached, room }
    } else {
        CachedUnderCap::TooLittle
    }
}

/// The cached-but-unallocated memory at a cap's refusal in words: how much, and whether it could
/// have held the request (PyTorch's standing advice, expandable segments, is judged by
/// [`hint_not_echoed`] where it could not).
fn cached_under_cap_text(case: &OomCase) -> String {
    let n = &case.numbers;
    let request = n.requested_bytes.map(format_bytes).unwrap_or_default();
    match cached_under_cap(n) {
        CachedUnderCap::Enough { cached } => format!(
            " {} was cached but unallocated, more than the {request} requested, yet no cached block held it: memory the allocator had under the cap but could not use for this request.",
            format_bytes(cached)
        ),
        CachedUnderCap::WithRoom { cached, room } => format!(
            " {} was cached but unallocated, less than the {request} requested, but with the {} the cap still left the allocator it would have held the request, had the cached memory been usable where the request needed it.",
            format_bytes(cached),
            format_bytes(room)
        ),
        CachedUnderCap::TooLittle | CachedUnderCap::Unknown => hint_not_echoed(case),
    }
}

/// Enough memory was cached (in the request's pool and stream), but in blocks too small for it.
fn fragmentation_finding(
    case: &OomCase,
    verdict: &Verdict,
    words: &Wording,
    evidence: Vec<Evidence>,
) -> Finding {
    let cause = verdict.cause;
    let n = &case.numbers;
    let Wording {
        gpu,
        request: req,
        history,
    } = words;
    let u = n.reserved_unallocated_bytes.unwrap_or(0);
    let block = case
        .largest_free_block
        .as_ref()
        .map(|(l, _)| format!(" (largest free block {})", format_bytes(*l)))
        .unwrap_or_default();
    let usable = case.usable_cached_bytes.unwrap_or(u);
    let cached_enough = usable >= n.requested_bytes.unwrap_or(0);
    let title = if cached_enough {
        format!(
            "{} cached on {gpu} but no free block fits the {req} request{block}",
            format_bytes(usable)
        )
    } else {
        format!(
            "{} cached plus {} free would fit the {req} request",
            format_bytes(u),
            n.free_bytes.map(format_bytes).unwrap_or_default()
        )
    };
    let explanation = if cause == OomCause::CapWithFragmentation {
        let cap = match (n.allowed_bytes, n.free_bytes) {
            (Some(allowed), _) => format!("the {} cap", format_bytes(allowed)),
            (None, Some(free)) => format!(
                "a per-process limit (the GPU still had {} free)",
                format_bytes(free)
            ),
            (None, None) => "a per-process limit".to_owned(),
        };
        format!(
            "The allocator held {} reserved but unallocated, more than the {req} requested, yet in blocks too small to hold it; it could not reserve more because of {cap}. Free blocks stranded in partly used segments are what fragmentation costs.{history}",
            format_bytes(usable)
        )
    } else {
        format!(
            "The allocator held {} reserved but unallocated{block}; the request needed one contiguous block of {req}. Cached blocks stranded in partly used segments could not be combined or returned.{history}",
            format_bytes(u)
        )
    };
    // Where the failing step's pattern cannot tell whether the settings that pass the failing
    // request are enough, the finding says so, and what settles it.
    let (title, explanation) = match &verdict.step_reach {
        Some(StepReach::Uncertain(why)) => (
            format!("Uncertain: {title}; whether an allocator setting is enough"),
            format!(
                "{explanation} Whether a setting that passes the failing request gets the job through is uncertain: {why}. {}.",
                proof::SETTLES_IT
            ),
        ),
        _ => (title, explanation),
    };
    Finding::new(Category::Fragmentation, Severity::Critical, title)
        .with_evidence(evidence)
        .explained(explanation)
        .recommend(allocator_setting_recs(case, verdict))
        .in_wizard(Wizard::Fragmentation)
}

/// Other processes held the memory the request needed.
fn other_process_finding(case: &OomCase, words: &Wording, evidence: Vec<Evidence>) -> Finding {
    let n = &case.numbers;
    let Wording {
        gpu,
        request: req,
        history,
    } = words;
    let others = other_processes(case);
    let sum: u64 = others.iter().map(|(_, b)| b).sum();
    let list = others
        .iter()
        .map(|(pid, b)| process_label(*pid, *b))
        .collect::<Vec<_>>()
        .join(", ");
    Finding::new(
        Category::OtherProcess,
        Severity::Critical,
        format!(
            "Other processes hold {} of {gpu} ({list}); the {req} request did not fit",
            format_bytes(sum)
        ),
    )
    .with_evidence(evidence)
    .explained(format!(
        "Only {} was free{}. The other processes hold {}; without them the request would have fit.{}{history}",
        n.free_bytes.map(format_bytes).unwrap_or_else(|| "little".into()),
        n.total_bytes
            .map(|t| format!(" of {}", format_bytes(t)))
            .unwrap_or_default(),
        format_bytes(sum),
        hint_not_echoed(case)
    ))
    .recommend(with_category_advice(
        case,
        shortfall(n),
        vec![
            recommend::free_other_process(&others, shortfall(n)),
            recommend::reduce_batch_size_within(
                shortfall(n),
                n.allocated_bytes,
                activation_bytes(case),
            ),
            recommend::mixed_precision(activation_bytes(case).or(n.allocated_bytes)),
        ],
    ))
    .in_wizard(Wizard::OutOfMemory)
}

/// The repetition of layers a job failed inside with at most one iteration completed (too few
/// to show what a whole step needs): the request one of the repetition's, the repetition no
/// whole steps, each one adding memory. `None` otherwise.
fn first_step_layers(trajectory: &Trajectory) -> Option<&Repetition> {
    let layers = trajectory.failing_step.as_ref()?;
    (trajectory.iterations.len() <= 1
        && layers.includes_request
        && !layers.spans_steps
        && layers.growth_per_repetition_bytes > 0)
        .then_some(layers)
}

/// What a smaller batch sized on the failing request does not know, when the job failed with at
/// most one iteration completed (too few to show what a whole step needs) inside a repetition
/// of layers (the request one of the repetition's, each repetition adding memory): the
/// repetitions still to come, and in training the backward pass, are not in the trace. `None`
/// otherwise.
fn first_step_layers_to_come(trajectory: &Trajectory) -> Option<String> {
    let layers = first_step_layers(trajectory)?;
    let growth = layers.growth_per_repetition_bytes;
    Some(format!(
        "It failed before a whole step was seen, in the repetition of {} that adds {} each time ({} seen): the repetitions still to come, and in training the backward pass, are not in the trace, so this cut is sized on the failing request, not on the whole step. Activation checkpointing bounds what each repetition keeps; `vramscope run --prove --vary-arg` with the batch settles which is enough.",
        step_reach::sites_text(layers),
        format_bytes(growth.unsigned_abs()),
        layers.whole_repetitions()
    ))
}

/// The live set grew every iteration until the GPU (or the cap) ran out: a leak, not a peak;
/// `severity` is lower when it stands behind another finding (the cap that refused the
/// request).
fn growth_finding(
    case: &OomCase,
    verdict: &Verdict,
    severity: Severity,
    words: &Wording,
    evidence: Vec<Evidence>,
) -> Finding {
    let n = &case.numbers;
    let Wording {
        gpu,
        request: req,
        history,
    } = words;
    let leak = step_leak(case, verdict);
    let (per_iteration, iterations) = match &leak {
        Some(leak) => (leak.per_step_bytes, leak.steps),
        None => case
            .trajectory()
            .map(|t| match t.growth {
                LiveGrowth::Growing {
                    per_iteration_bytes,
                    ..
                } => (per_iteration_bytes, t.iterations.len()),
                _ => (0, t.iterations.len()),
            })
            .unwrap_or((0, 0)),
    };
    let what_ran_out = match n.allowed_bytes {
        Some(cap) if n.total_bytes.is_none_or(|t| cap < t) => {
            format!("the {} cap on {gpu}", format_bytes(cap))
        }
        _ => gpu.clone(),
    };
    let kept = leak.as_ref().map(StepLeak::kept_text).unwrap_or_default();
    let find_leak = match &leak {
        Some(leak) => recommend::find_leak_per_step(leak.per_step_bytes, leak.kept_by),
        None => recommend::find_leak(None),
    };
    Finding::new(
        Category::Leak,
        severity,
        format!(
            "The live set grew by {} per iteration for {iterations} iterations until {what_ran_out} ran out ({req} requested){kept}",
            format_bytes(per_iteration)
        ),
    )
    .with_evidence(evidence)
    .explained(format!(
        "Every iteration left more memory allocated than the one before, and the failure came when the growth reached the limit. A smaller batch, a larger cap or an allocator setting only buys a few iterations.{history}{}",
        hint_not_echoed(case)
    ))
    .recommend(with_category_advice(
        case,
        shortfall(n),
        vec![
            find_leak,
            recommend::reduce_batch_size_within(
                shortfall(n),
                n.allocated_bytes,
                activation_bytes(case),
            ),
        ],
    ))
    .in_wizard(Wizard::Leak)
}

/// The job's peak is larger than the GPU (or a single request is); `severity` is lower when it
/// only gives the numbers of what a growing live set ran out of.
fn capacity_finding(
    case: &OomCase,
    verdict: &Verdict,
    severity: Severity,
    words: &Wording,
    evidence: Vec<Evidence>,
) -> Finding {
    let n = &case.numbers;
    let Wording {
        gpu,
        request: req,
        history,
    } = words;
    let detail = match (n.free_bytes, n.allocated_bytes, n.total_bytes) {
        (Some(f), Some(a), Some(t)) => format!(
            "Only {} of {} was free and live tensors already took {} ({:.0}% of the card): the job's peak is larger than the GPU.",
            format_bytes(f),
            format_bytes(t),
            format_bytes(a),
            a as f64 / t.max(1) as f64 * 100.0
        ),
        (Some(f), _, _) if n.requested_bytes.is_some_and(|r| r <= f) => format!(
            "The closest reading showed {} free, more than the {req} requested: the peak that failed came between two samples, or memory was taken by a process the reading did not see.",
            format_bytes(f)
        ),
        (Some(f), _, _) => format!("Only {} was free.", format_bytes(f)),
        (None, Some(a), _) => format!(
            "Live tensors held {} and the allocator could not get the {req} it needed.",
            format_bytes(a)
        ),
        _ => "The message carries no breakdown; add a snapshot or a capture for one.".to_owned(),
    };
    let too_big = matches!((n.requested_bytes, n.total_bytes), (Some(r), Some(t)) if r > t);
    let title = if too_big {
        format!("A single {req} allocation is larger than {gpu}'s whole memory")
    } else if n.requested_bytes.is_none() && case.framework == Framework::Cuda {
        // `CUDA error: out of memory`: a CUDA call outside the framework's allocator (a stream,
        // a cuBLAS handle, a context, NCCL) found the device full; no size is printed.
        format!(
            "Out of memory on {gpu} outside the framework's allocator (CUDA error: out of memory)"
        )
    } else if n.requested_bytes.is_none() {
        format!("Out of memory on {gpu} (the message gives no size)")
    } else {
        format!(
            "Out of memory on {gpu}: {req} requested{}",
            n.free_bytes
                .map(|f| format!(", {} free", format_bytes(f)))
                .unwrap_or_default()
        )
    };
    let recommendations = framework_capacity_recs(case, verdict);
    let combine = combine_note(&recommendations, shortfall(n));
    Finding::new(Category::Capacity, severity, title)
        .with_evidence(evidence)
        .explained(format!(
            "{detail}{}{history}{combine}",
            hint_not_echoed(case)
        ))
        .recommend(recommendations)
        .in_wizard(Wizard::OutOfMemory)
}

/// Other processes holding at least [`NOTABLE_BYTES`] and a tenth of the GPU, when they are not
/// the cause: they still reduce what the job can use.
fn notable_other_processes(
    case: &OomCase,
    words: &Wording,
    evidence: Vec<Evidence>,
) -> Option<Finding> {
    let n = &case.numbers;
    let others = other_processes(case);
    let sum: u64 = others.iter().map(|(_, b)| b).sum();
    let notable =
        sum >= NOTABLE_BYTES && n.total_bytes.is_some_and(|t| sum as f64 >= 0.1 * t as f64);
    notable.then(|| {
        Finding::new(
            Category::OtherProcess,
            Severity::Warning,
            format!(
                "Other processes also hold {} of {}",
                format_bytes(sum),
                words.gpu
            ),
        )
        .with_evidence(evidence)
        .explained(
            "They are not what stopped this allocation, but they reduce what the job can use.",
        )
        .recommend([recommend::free_other_process(&others, None)])
        .in_wizard(Wizard::OutOfMemory)
    })
}

/// The OOM case of an `oom` event of a snapshot's trace, on the snapshot's own numbers: the one
/// path by which `diagnose` and the Allocator tab's explainer turn a snapshot into a case.
pub fn case_from_snapshot(
    oom: &SnapshotOom,
    snapshot_name: &str,
    device: u32,
    expandable_segments: Option<bool>,
    trajectory: Option<Trajectory>,
) -> OomCase {
    let source = EvidenceSource::Snapshot {
        file: snapshot_name.to_owned(),
        device_index: Some(device),
    };
    let mut case = OomCase::new(
        Framework::PyTorch,
        OomNumbers {
            device_index: Some(device),
            requested_bytes: Some(oom.requested_bytes),
            free_bytes: oom.device_free_bytes,
            allocated_bytes: Some(oom.allocated_bytes),
            reserved_bytes: Some(oom.reserved_bytes),
            reserved_unallocated_bytes: Some(
                oom.reserved_bytes.saturating_sub(oom.allocated_bytes),
            ),
            ..Default::default()
        },
        source.clone(),
    );
    // A block the reconstruction says would have fit means the reconstructed state is not the
    // allocator's: judge on totals then, not on its blocks.
    if oom.fitting_blocks == 0 {
        case.largest_free_block = Some((oom.largest_usable_free_bytes, source.clone()));
        case.usable_cached_bytes = Some(oom.usable_free_bytes);
    }
    case.expandable_segments = expandable_segments;
    case.history = trajectory.map(|t| (t, source));
    case.history_file = Some(snapshot_name.to_owned());
    case
}

/// The verdict on one explained `oom` event, as the Allocator tab and `vramscope analyze` show
/// it: the same [`classify`] as `diagnose`, on the same evidence.
#[derive(Clone, Debug, PartialEq)]
pub struct JudgedOom {
    pub cause: OomCause,
    pub category: Category,
    /// Short name of the verdict ("Capacity").
    pub heading: &'static str,
    /// The primary finding's title and explanation, as `diagnose` words them.
    pub title: String,
    pub explanation: String,
    /// Where the reconstruction contradicts the allocator (a free block that should have fit).
    pub reconstruction_warning: Option<String>,
}

/// Judges one explained `oom` event of a snapshot (`trajectory` up to that event).
pub fn judge_explanation(
    e: &OomExplanation,
    snapshot_name: &str,
    expandable_segments: Option<bool>,
    trajectory: Option<Trajectory>,
    replay: Option<ReplayEvidence>,
) -> JudgedOom {
    judge_explanation_with(
        e,
        snapshot_name,
        expandable_segments,
        LastFailureEvidence {
            history: trajectory,
            replay,
            breakdown: None,
        },
    )
}

/// [`judge_explanation`] with where the live memory went at the failure, when known: the
/// explanation then says what the categories add, as `diagnose`'s does.
fn judge_explanation_with(
    e: &OomExplanation,
    snapshot_name: &str,
    expandable_segments: Option<bool>,
    evidence: LastFailureEvidence,
) -> JudgedOom {
    let LastFailureEvidence {
        history,
        replay,
        breakdown,
    } = evidence;
    let mut case = case_from_snapshot(
        &SnapshotOom::from_explanation(e),
        snapshot_name,
        e.device,
        expandable_segments,
        history,
    );
    case.replay = replay;
    case.breakdown = breakdown.map(|b| (b, case.source.clone()));
    let verdict = classify(&case);
    let primary = findings(&case).into_iter().next();
    JudgedOom {
        cause: verdict.cause,
        category: verdict.cause.category(),
        heading: verdict.cause.heading(),
        title: primary.as_ref().map(|f| f.title.clone()).unwrap_or_default(),
        explanation: primary.map(|f| f.explanation).unwrap_or_default(),
        reconstruction_warning: (e.fitting_blocks > 0).then(|| {
            format!(
                "{} free block(s) in the request's pool and stream should have fit: the reconstructed state differs from the allocator's (a wrapped trace?), so the verdict rests on the totals.",
                e.fitting_blocks
            )
        }),
    }
}

/// Every `oom` event of a device's trace, explained and judged as the Allocator tab and
/// `vramscope analyze` show them (see [`judge_all`]).
pub fn judged_ooms(
    travel: &crate::analysis::timetravel::TimeTravel,
    expandable_segments: Option<bool>,
) -> Vec<(OomExplanation, JudgedOom)> {
    let explanations = crate::analysis::oom::explain_all(travel);
    let judged = judge_all(travel, &explanations, expandable_segments);
    explanations.into_iter().zip(judged).collect()
}

/// The verdict on each of `explanations` (a device's `oom` events, explained in trace order), in
/// the same order. The last one (the failure that was raised; earlier ones were caught by the
/// job) is judged with the live set's history up to it, exactly as `diagnose` judges the
/// snapshot; earlier ones on their numbers alone, so that a trace with thousands of caught
/// failures costs one history, not thousands. Separate from explaining so that a view whose
/// analysis explained the OOMs in steps (the web viewer's) judges them without explaining again.
pub fn judge_all(
    travel: &crate::analysis::timetravel::TimeTravel,
    explanations: &[OomExplanation],
    expandable_segments: Option<bool>,
) -> Vec<JudgedOom> {
    judge_all_with(travel, explanations, expandable_segments, None)
}

/// What the diagnosis worked out about the last failure of a device's trace: the live set's
/// history up to it and the replay of the trace under the sweep of settings, as
/// [`super::snapshot::facts_from`] gives them in [`super::leak::SnapshotFacts`]. Opening a
/// snapshot hands them to [`judge_all_with`], so that the trace is replayed once, not once for
/// the doctor's facts and again for the Allocator tab's verdicts.
pub struct LastFailureEvidence {
    pub history: Option<Trajectory>,
    pub replay: Option<ReplayEvidence>,
    /// Where the live memory went at the failure (`analysis::categories::breakdown`).
    pub breakdown: Option<Arc<MemoryBreakdown>>,
}

impl LastFailureEvidence {
    /// Works out the evidence of the failure at trace event `event` of `travel`, as
    /// [`super::snapshot::facts_from`] does: the history up to it, the replay of the trace and
    /// where the memory went.
    pub fn of(travel: &crate::analysis::timetravel::TimeTravel, event: usize) -> Self {
        LastFailureEvidence {
            history: super::trajectory::of_trace(travel, Some(event)),
            replay: proof::replay_trace(travel, travel.device()).ok(),
            breakdown: Some(Arc::new(crate::analysis::categories::breakdown(
                travel,
                Some(event),
            ))),
        }
    }
}

/// [`judge_all`] with the last failure's history and replay already worked out (`None`: work
/// them out here). They must be those of `travel`'s last OOM, i.e. the facts of the same device.
pub fn judge_all_with(
    travel: &crate::analysis::timetravel::TimeTravel,
    explanations: &[OomExplanation],
    expandable_segments: Option<bool>,
    last_failure: Option<LastFailureEvidence>,
) -> Vec<JudgedOom> {
    let last = explanations.len().saturating_sub(1);
    let name = &travel.snapshot().name;
    let mut last_failure = last_failure;
    explanations
        .iter()
        .enumerate()
        .map(|(i, e)| {
            // The last failure is the one `diagnose` judges: the same history, replay and
            // categories.
            let evidence = if i != last {
                LastFailureEvidence {
                    history: None,
                    replay: None,
                    breakdown: None,
                }
            } else if let Some(known) = last_failure.take() {
                known
            } else {
                LastFailureEvidence::of(travel, e.event_index)
            };
            judge_explanation_with(e, name, expandable_segments, evidence)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::proof::{ReplayedOom, ReplayedSetting};
    use crate::diagnose::trajectory::Iteration;
    use crate::model::{GIB, MIB};

    fn snapshot_case(numbers: OomNumbers) -> OomCase {
        OomCase::new(
            Framework::PyTorch,
            numbers,
            EvidenceSource::Snapshot {
                file: "oom.pickle".into(),
                device_index: Some(0),
            },
        )
    }

    fn trajectory(iterations: usize, growth: LiveGrowth, starts_empty: bool) -> Trajectory {
        Trajectory {
            events: 1000,
            starts_empty,
            source: IterationSource::LiveSetFalls,
            iterations: (0..iterations)
                .map(|i| Iteration {
                    start_event: i * 10,
                    end_event: i * 10 + 10,
                    floor_bytes: GIB,
                    peak_bytes: 3 * GIB,
                })
                .collect(),
            live_at_end_bytes: 0,
            peak_live_bytes: 0,
            span_seconds: None,
            growth,
            new_tensors_share_of_growth: Some(1.0),
            kept_by: None,
            failing_step: None,
        }
    }

    fn with_history(mut case: OomCase, t: Trajectory) -> OomCase {
        case.history = Some((t, EvidenceSource::Derived));
        case
    }

    /// The transformer whose first forward pass asks for 24 GiB with 22.5 GiB cached.
    fn first_forward_pass() -> OomCase {
        let total = 140 * GIB;
        snapshot_case(OomNumbers {
            device_index: Some(0),
            requested_bytes: Some(24 * GIB),
            total_bytes: Some(total),
            free_bytes: Some(2 * GIB),
            allocated_bytes: Some(114 * GIB),
            reserved_bytes: Some(114 * GIB + 22 * GIB + GIB / 2),
            reserved_unallocated_bytes: Some(22 * GIB + GIB / 2),
            ..Default::default()
        })
    }

    #[test]
    fn free_memory_within_the_drivers_slack_of_the_request_is_a_full_card_not_a_cap() {
        const MIB: u64 = 1 << 20;
        // The real H100 case: 20.0 MiB refused with 20.2 MiB free, no cap set.
        assert!(!refused_by_memory_cap(Some(20 * MIB + MIB / 5), 20 * MIB));
        assert!(!refused_by_memory_cap(
            Some(20 * MIB + DRIVER_SLACK_BYTES - 1),
            20 * MIB
        ));
        assert!(refused_by_memory_cap(
            Some(20 * MIB + DRIVER_SLACK_BYTES),
            20 * MIB
        ));
        assert!(refused_by_memory_cap(Some(60 << 30), 20 * MIB));
        assert!(!refused_by_memory_cap(None, 20 * MIB));
        assert!(!refused_by_memory_cap(Some(60 << 30), 0));
    }

    #[test]
    fn a_first_step_failure_is_capacity_even_when_cached_plus_free_would_add_up() {
        // 22.5 GiB cached for a 24 GiB request: less cached than requested is never
        // fragmentation, whatever the free memory adds.
        let f = &findings(&first_forward_pass())[0];
        assert_eq!(f.category, Category::Capacity);
        // A smaller live set, so that free and cached memory together could hold the request:
        // still capacity, with expandable segments as an unverified alternative further down.
        let mut case = first_forward_pass();
        case.numbers.allocated_bytes = Some(80 * GIB);
        let f = &findings(&case)[0];
        assert_eq!(f.category, Category::Capacity);
        assert_eq!(f.recommendations[0].id, "reduce-batch-size");
        let alternative = f
            .recommendations
            .iter()
            .find(|r| r.id == "expandable-segments")
            .unwrap_or_else(|| panic!("{:?}", f.recommendations));
        assert_eq!(
            alternative.verification.as_ref().map(|v| v.status),
            Some(crate::diagnose::finding::VerificationStatus::Unverified)
        );
        // The history shows the first step never completed: no allocator setting is offered.
        let rising = LiveGrowth::RoseWithoutFallingBack {
            from_bytes: 0,
            to_bytes: 80 * GIB,
            bytes_per_second: None,
        };
        let case = with_history(case, trajectory(0, rising, true));
        let verdict = classify(&case);
        assert_eq!(verdict.cause, OomCause::Capacity);
        assert!(verdict.first_step);
        let f = &findings(&case)[0];
        assert_eq!(f.category, Category::Capacity);
        assert_eq!(f.recommendations[0].id, "reduce-batch-size");
        assert!(f.explanation.contains("first step"), "{}", f.explanation);
        assert!(
            f.recommendations
                .iter()
                .all(|r| r.id != "expandable-segments"),
            "no allocator setting for a first-step failure"
        );
    }

    /// A 4 GiB cap, expandable segments on, a 36 MiB request failing with 280 MiB cached, a live
    /// set growing by 512 MiB per iteration.
    /// A log's OOM message under a 4 GiB cap on a 140 GiB card with `free_gib` free: 3.5 GiB
    /// live, `cached_mib` cached, a `request_mib` request.
    fn capped_log(free_gib: u64, cached_mib: u64, request_mib: u64) -> OomCase {
        OomCase::new(
            Framework::PyTorch,
            OomNumbers {
                device_index: Some(0),
                requested_bytes: Some(request_mib * MIB),
                total_bytes: Some(140 * GIB),
                free_bytes: Some(free_gib * GIB),
                allowed_bytes: Some(4 * GIB),
                allocated_bytes: Some(3 * GIB + GIB / 2),
                reserved_bytes: Some(3 * GIB + GIB / 2 + cached_mib * MIB),
                reserved_unallocated_bytes: Some(cached_mib * MIB),
                ..Default::default()
            },
            EvidenceSource::LogLine {
                file: "train.log".into(),
                line: 3,
            },
        )
    }

    /// From a log alone, a cap that refused while the card had room: the cap and the cached
    /// memory are both named, and the first recommendation is one the numbers support.
    #[test]
    fn a_cap_refusal_from_a_log_names_the_cap_and_the_cached_memory() {
        // 400 MiB cached, less than the 500 MiB request, but with the 112 MiB the cap still left
        // it would have held it: expandable segments is no "would not help".
        let f = &findings(&capped_log(3, 400, 500))[0];
        assert_eq!(f.category, Category::MemoryCap);
        assert!(f.title.contains("cap of 4.00 GiB"), "{}", f.title);
        assert!(
            f.explanation
                .contains("400 MiB was cached but unallocated, less than the 500 MiB requested, but with the 112 MiB the cap still left")
                && !f.explanation.contains("would not help"),
            "{}",
            f.explanation
        );
        let ids: Vec<&str> = f.recommendations.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids[..2], ["raise-memory-fraction", "expandable-segments"]);
        // The raised cap stops at what the card leaves the process (3.89 GiB held + 3 GiB free):
        // a 5 % margin above the need would ask for more than is free.
        assert!(
            f.recommendations[0]
                .action
                .contains("set_per_process_memory_fraction(0.04)"),
            "{}",
            f.recommendations[0].action
        );
        // Too little cached even with the cap's room: named, and it would not help.
        let f = &findings(&capped_log(100, 1, 1200))[0];
        assert_eq!(f.category, Category::MemoryCap);
        assert!(
            f.explanation.contains(
                "only 1.00 MiB is cached but unallocated, less than the 1.17 GiB requested"
            ),
            "{}",
            f.explanation
        );
        assert_eq!(f.recommendations[0].id, "raise-memory-fraction");
        assert!(
            !f.recommendations
                .iter()
                .any(|r| r.id == "expandable-segments"),
            "{:?}",
            f.recommendations
        );
        // More cached than requested: fragmentation under the cap, and the cap finding names
        // the cached memory it could not use.
        let d = findings(&capped_log(100, 400, 200));
        assert_eq!(d[0].category, Category::Fragmentation);
        assert_eq!(d[0].recommendations[0].id, "expandable-segments");
        let cap = d
            .iter()
            .find(|f| f.category == Category::MemoryCap)
            .unwrap_or_else(|| panic!("no cap finding"));
        assert!(
            cap.explanation
                .contains("400 MiB was cached but unallocated, more than the 200 MiB requested, yet no cached block held it"),
            "{}",
            cap.explanation
        );
    }

    /// A history whose steady iterations peaked above what the card leaves the process: a
    /// raised cap alone cannot make it fit, so a smaller job comes first.
    #[test]
    fn a_cap_need_beyond_what_the_card_has_free_leads_with_a_smaller_job() {
        let mut t = trajectory(
            6,
            LiveGrowth::Steady {
                peak_bytes: 9 * GIB,
            },
            true,
        );
        t.source = IterationSource::ProfilerSteps;
        let case = with_history(capped_log(2, 1, 600), t);
        let f = &findings(&case)[0];
        assert_eq!(f.category, Category::MemoryCap);
        let ids: Vec<&str> = f.recommendations.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids[..2], ["reduce-batch-size", "raise-memory-fraction"]);
        assert!(
            f.recommendations[1]
                .expected_effect
                .contains("a raised cap alone cannot make it fit"),
            "{}",
            f.recommendations[1].expected_effect
        );
    }

    fn growth_under_cap() -> OomCase {
        let mut case = snapshot_case(OomNumbers {
            device_index: Some(0),
            requested_bytes: Some(36 * MIB),
            total_bytes: Some(140 * GIB),
            free_bytes: Some(130 * GIB),
            allowed_bytes: Some(4 * GIB),
            allocated_bytes: Some(4 * GIB - 280 * MIB),
            reserved_bytes: Some(4 * GIB),
            reserved_unallocated_bytes: Some(280 * MIB),
            ..Default::default()
        });
        case.usable_cached_bytes = Some(200 * MIB);
        case.largest_free_block = Some((30 * MIB, EvidenceSource::Derived));
        case.expandable_segments = Some(true);
        with_history(
            case,
            trajectory(
                7,
                LiveGrowth::Growing {
                    per_iteration_bytes: 512 * MIB,
                    r_squared: 0.99,
                    decelerating: false,
                    confidence: crate::diagnose::growth::Confidence::Medium,
                },
                true,
            ),
        )
    }

    #[test]
    fn growth_under_a_cap_is_the_cap_with_a_need_from_the_trend() {
        let case = growth_under_cap();
        let verdict = classify(&case);
        assert_eq!(verdict.cause, OomCause::Cap);
        assert!(verdict.growth_outpaces_waste);
        let f = &findings(&case)[0];
        assert_eq!(f.category, Category::MemoryCap);
        let raise = &f.recommendations[0];
        assert_eq!(raise.id, "raise-memory-fraction");
        // Never "8.8 MiB more": the need comes from the growth, and removing the cap is advised.
        assert!(
            raise.expected_effect.contains("per iteration"),
            "{}",
            raise.expected_effect
        );
        assert!(
            raise
                .action
                .contains("set_per_process_memory_fraction(1.0)"),
            "{}",
            raise.action
        );
        assert!(
            f.recommendations.iter().all(|r| r.id != "max-split-size"),
            "{:?}",
            f.recommendations
        );
        // The same numbers without the growth: the fragmentation is real and comes first.
        let mut steady = case.clone();
        steady.history = None;
        assert_eq!(classify(&steady).cause, OomCause::CapWithFragmentation);
    }

    fn replayed(conf: &str, oom: bool) -> ReplayedSetting {
        ReplayedSetting {
            conf: conf.into(),
            peak_reserved_bytes: 61 * GIB,
            peak_allocated_bytes: 50 * GIB,
            oom: oom.then_some(ReplayedOom {
                event_index: 99,
                request_bytes: 2 * GIB,
                reserved_bytes: 63 * GIB,
                allowed_bytes: Some(64 * GIB),
            }),
            num_alloc_retries: 0,
            incomplete: None,
            uncertain: false,
        }
    }

    fn fragmented() -> OomCase {
        let mut case = snapshot_case(OomNumbers {
            device_index: Some(0),
            requested_bytes: Some(2 * GIB),
            total_bytes: Some(64 * GIB),
            free_bytes: Some(MIB),
            allocated_bytes: Some(40 * GIB),
            reserved_bytes: Some(63 * GIB),
            reserved_unallocated_bytes: Some(23 * GIB),
            ..Default::default()
        });
        case.usable_cached_bytes = Some(23 * GIB);
        case.largest_free_block = Some((GIB, EvidenceSource::Derived));
        case.history_file = Some("oom.pickle".into());
        case
    }

    fn replay(settings: Vec<ReplayedSetting>, reliable: bool) -> ReplayEvidence {
        ReplayEvidence {
            reliable,
            self_check: if reliable {
                "ok"
            } else {
                "block at 0x10 differs at event 5"
            }
            .into(),
            limit_bytes: Some(64 * GIB),
            recorded_conf: "default".into(),
            settings,
            not_run: None,
            iteration_after_failure: None,
        }
    }

    #[test]
    fn settings_are_recommended_only_as_the_replay_proves_them() {
        let mut case = fragmented();
        case.replay = Some(replay(
            vec![
                replayed("default", true),
                replayed("max_split_size_mb:4096", true),
                replayed("expandable_segments:True", false),
            ],
            true,
        ));
        let f = &findings(&case)[0];
        assert_eq!(f.category, Category::Fragmentation);
        let first = &f.recommendations[0];
        assert_eq!(first.id, "expandable-segments");
        assert!(
            first
                .expected_effect
                .starts_with("replayed: peak 61.0 GiB of 64.0 GiB allowed"),
            "{}",
            first.expected_effect
        );
        assert!(f.recommendations.iter().all(|r| r.id != "max-split-size"));
        assert!(
            f.evidence
                .iter()
                .any(|e| e.label == "tried by replay: does not help: max_split_size_mb:4096"),
            "{:?}",
            f.evidence
        );
    }

    #[test]
    fn under_a_cap_a_replay_that_gets_past_with_a_steady_live_set_makes_it_fragmentation() {
        // A 2.1 GiB cap, a 256 MiB request refused with 1.88 GiB reserved (too little cached
        // for the numbers alone to say fragmentation), iterations steady before the failure.
        let case = |settings: Vec<ReplayedSetting>| {
            let mut case = with_history(
                snapshot_case(OomNumbers {
                    device_index: Some(0),
                    requested_bytes: Some(256 * MIB),
                    total_bytes: Some(140 * GIB),
                    free_bytes: Some(130 * GIB),
                    allowed_bytes: Some(2150 * MIB),
                    allocated_bytes: Some(1800 * MIB),
                    reserved_bytes: Some(1925 * MIB),
                    reserved_unallocated_bytes: Some(125 * MIB),
                    ..Default::default()
                }),
                trajectory(
                    4,
                    LiveGrowth::Steady {
                        peak_bytes: 1990 * MIB,
                    },
                    true,
                ),
            );
            case.replay = Some(replay(settings, true));
            case
        };
        let helped = case(vec![
            replayed("default", true),
            replayed("expandable_segments:True", false),
            replayed("max_split_size_mb:512", true),
        ]);
        assert_eq!(classify(&helped).cause, OomCause::CapWithFragmentation);
        let found = findings(&helped);
        assert_eq!(found[0].category, Category::Fragmentation);
        assert_eq!(found[0].recommendations[0].id, "expandable-segments");
        assert!(
            found.iter().any(|f| f.category == Category::MemoryCap),
            "the cap stays a finding: {found:?}"
        );
        // No setting gets past: the cap stays the cause.
        let refuted = case(vec![
            replayed("default", true),
            replayed("expandable_segments:True", true),
        ]);
        assert_eq!(classify(&refuted).cause, OomCause::Cap);
        assert_eq!(findings(&refuted)[0].category, Category::MemoryCap);
    }

    #[test]
    fn a_working_set_that_grows_by_enlarging_is_capacity_not_a_leak() {
        // The live set grows by 8 GiB an iteration until a 4.25 GiB request finds 4.2 GiB free.
        let growing = LiveGrowth::Growing {
            per_iteration_bytes: 8 * GIB,
            r_squared: 1.0,
            decelerating: false,
            confidence: crate::diagnose::growth::Confidence::High,
        };
        let case = |share| {
            let mut t = trajectory(16, growing, true);
            t.new_tensors_share_of_growth = Some(share);
            with_history(
                snapshot_case(OomNumbers {
                    device_index: Some(0),
                    requested_bytes: Some(4352 * MIB),
                    total_bytes: Some(140 * GIB),
                    free_bytes: Some(4300 * MIB),
                    allocated_bytes: Some(131 * GIB),
                    reserved_bytes: Some(135 * GIB),
                    reserved_unallocated_bytes: Some(4 * GIB),
                    ..Default::default()
                }),
                t,
            )
        };
        // New tensors every iteration: growth (a leak or an accumulation).
        assert_eq!(classify(&case(1.0)).cause, OomCause::Growth);
        // The same tensors, larger each time (torch.cat of a cache): capacity.
        let enlarging = case(0.0);
        assert_eq!(classify(&enlarging).cause, OomCause::Capacity);
        let f = &findings(&enlarging)[0];
        assert!(
            f.explanation.contains("grows by design"),
            "{}",
            f.explanation
        );
        assert_eq!(f.recommendations[0].id, "reduce-batch-size");
    }

    #[test]
    fn a_setting_that_only_gets_past_the_request_of_a_growing_working_set_is_not_the_fix() {
        // A KV cache grows by 256 MiB an iteration (the same tensors, larger); 3.75 GiB cached
        // plus 4.2 GiB free for a 4.25 GiB request. The replay shows expandable segments get
        // past this request, with 423 MiB to spare: the next iterations use that up (re-run on
        // the H200: still out of memory), so it is capacity and the setting is evidence only.
        let mut t = trajectory(
            170,
            LiveGrowth::Growing {
                per_iteration_bytes: 256 * MIB,
                r_squared: 1.0,
                decelerating: false,
                confidence: crate::diagnose::growth::Confidence::High,
            },
            true,
        );
        t.new_tensors_share_of_growth = Some(0.0);
        let mut case = with_history(
            snapshot_case(OomNumbers {
                device_index: Some(0),
                requested_bytes: Some(4352 * MIB),
                total_bytes: Some(140 * GIB),
                free_bytes: Some(4300 * MIB),
                allocated_bytes: Some(131 * GIB),
                reserved_bytes: Some(135 * GIB),
                reserved_unallocated_bytes: Some(3850 * MIB),
                ..Default::default()
            }),
            t,
        );
        case.history_file = Some("oom.pickle".into());
        case.replay = Some(replay(
            vec![
                replayed("default", true),
                replayed("expandable_segments:True", false),
            ],
            true,
        ));
        let verdict = classify(&case);
        assert_eq!(verdict.cause, OomCause::Capacity);
        assert!(verdict.growth_outpaces_waste);
        let f = &findings(&case)[0];
        assert_eq!(f.recommendations[0].id, "reduce-batch-size");
        assert!(
            f.recommendations
                .iter()
                .all(|r| r.id != "expandable-segments"),
            "{:?}",
            f.recommendations
        );
        assert!(
            f.evidence.iter().any(|e| e.label
                == "tried by replay: only gets past this request: expandable_segments:True"),
            "{:?}",
            f.evidence
        );
    }

    #[test]
    fn a_setting_that_gets_past_a_caps_request_says_the_cap_is_still_too_small() {
        // A steady live set under a 4 GiB cap with little cached: the replay gets past this
        // request with expandable segments, but the job needs more than its cap, not the card.
        let mut case = with_history(
            snapshot_case(OomNumbers {
                device_index: Some(0),
                requested_bytes: Some(GIB),
                total_bytes: Some(140 * GIB),
                free_bytes: Some(130 * GIB),
                allowed_bytes: Some(4 * GIB),
                allocated_bytes: Some(4 * GIB - 100 * MIB),
                reserved_bytes: Some(4 * GIB),
                reserved_unallocated_bytes: Some(100 * MIB),
                ..Default::default()
            }),
            trajectory(
                12,
                LiveGrowth::Steady {
                    peak_bytes: 4 * GIB - 100 * MIB,
                },
                true,
            ),
        );
        case.replay = Some(replay(
            vec![
                replayed("default", true),
                replayed("expandable_segments:True", false),
            ],
            true,
        ));
        let verdict = classify(&case);
        assert_eq!(verdict.cause, OomCause::Cap);
        let f = &findings(&case)[0];
        let evidence = f
            .evidence
            .iter()
            .find(|e| {
                e.label
                    .starts_with("tried by replay: only gets past this request")
            })
            .unwrap_or_else(|| panic!("{:?}", f.evidence));
        let text = format!("{evidence:?}");
        assert!(text.contains("more than its memory cap"), "{text}");
        assert!(!text.contains("more than the card"), "{text}");
    }

    #[test]
    fn a_few_rising_cycles_are_capacity_not_a_leak() {
        // Eight cycles each keeping 13.3 GiB, then a 13.3 GiB request fails: what one forward
        // pass through eight layers looks like (each keeps its activation, frees a temporary).
        // Too few iterations for a sure trend: capacity, saying why; ten or more with a good
        // fit are growth.
        let case = |confidence| {
            with_history(
                snapshot_case(OomNumbers {
                    device_index: Some(0),
                    requested_bytes: Some(13 * GIB),
                    total_bytes: Some(140 * GIB),
                    free_bytes: Some(6 * GIB),
                    allocated_bytes: Some(133 * GIB),
                    reserved_bytes: Some(133 * GIB),
                    reserved_unallocated_bytes: Some(MIB),
                    ..Default::default()
                }),
                trajectory(
                    8,
                    LiveGrowth::Growing {
                        per_iteration_bytes: 13 * GIB,
                        r_squared: 1.0,
                        decelerating: false,
                        confidence,
                    },
                    true,
                ),
            )
        };
        let few = case(crate::diagnose::growth::Confidence::Low);
        assert_eq!(classify(&few).cause, OomCause::Capacity);
        let f = &findings(&few)[0];
        assert!(
            f.explanation.contains("too little history"),
            "{}",
            f.explanation
        );
        assert_eq!(f.recommendations[0].id, "reduce-batch-size");
        assert_eq!(
            classify(&case(crate::diagnose::growth::Confidence::High)).cause,
            OomCause::Growth
        );
    }

    #[test]
    fn with_a_history_but_no_proof_no_setting_is_recommended() {
        // The snapshot has a trace, but no replay proved anything: the user is shown how to
        // replay it, not a setting picked from the state at the failure.
        let case = fragmented();
        let f = &findings(&case)[0];
        assert_eq!(f.category, Category::Fragmentation);
        let ids: Vec<&str> = f.recommendations.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["replay-settings", "empty-cache"]);
        assert!(
            f.recommendations[0]
                .action
                .contains("vramscope whatif oom.pickle")
        );
    }

    #[test]
    fn holes_smaller_than_a_page_rule_out_expandable_segments() {
        // No history: 18 MiB requests failed with 352 MiB cached in pieces below 18 MiB.
        let mut case = fragmented();
        case.history_file = None;
        case.numbers.requested_bytes = Some(18 * MIB);
        case.numbers.reserved_unallocated_bytes = Some(352 * MIB);
        case.usable_cached_bytes = Some(352 * MIB);
        case.largest_free_block = Some((9 * MIB, EvidenceSource::Derived));
        let f = &findings(&case)[0];
        assert_eq!(f.category, Category::Fragmentation);
        let first = &f.recommendations[0];
        assert_eq!(first.id, "max-split-size");
        assert!(
            first.action.ends_with("max_split_size_mb:32"),
            "{}",
            first.action
        );
        assert!(
            first
                .expected_effect
                .contains("Expandable segments would not help"),
            "{}",
            first.expected_effect
        );
        assert!(
            f.recommendations
                .iter()
                .all(|r| r.id != "expandable-segments")
        );
        // With a 30 MiB block (a whole page in it) for a 40 MiB request, expandable segments
        // stay the first guess.
        case.numbers.requested_bytes = Some(40 * MIB);
        case.largest_free_block = Some((30 * MIB, EvidenceSource::Derived));
        assert_eq!(
            findings(&case)[0].recommendations[0].id,
            "expandable-segments"
        );
    }

    #[test]
    fn a_replay_where_nothing_helps_is_not_fragmentation() {
        let mut case = fragmented();
        case.replay = Some(replay(
            vec![
                replayed("default", true),
                replayed("expandable_segments:True", true),
            ],
            true,
        ));
        let verdict = classify(&case);
        assert_eq!(verdict.cause, OomCause::Capacity);
        assert!(verdict.replay_note.is_some());
    }

    #[test]
    fn an_unreliable_replay_leaves_the_settings_unverified_with_the_reason() {
        let mut case = fragmented();
        case.replay = Some(replay(
            vec![replayed("expandable_segments:True", false)],
            false,
        ));
        let f = &findings(&case)[0];
        assert_eq!(f.category, Category::Fragmentation);
        let detail = f.recommendations[0]
            .verification
            .as_ref()
            .map(|v| v.detail.clone())
            .unwrap_or_default();
        assert!(detail.contains("self-check failed"), "{detail}");
        assert!(detail.contains("block at 0x10 differs"), "{detail}");
        // From a log alone: no history at all, said so with how to record one.
        let mut log_only = fragmented();
        log_only.history_file = None;
        let detail = findings(&log_only)[0].recommendations[0]
            .verification
            .as_ref()
            .map(|v| v.detail.clone())
            .unwrap_or_default();
        assert!(detail.contains("no allocation history"), "{detail}");
        assert!(detail.contains("vramscope whatif"), "{detail}");
    }

    #[test]
    fn a_live_set_growing_per_iteration_until_the_card_is_full_is_growth() {
        let case = with_history(
            snapshot_case(OomNumbers {
                device_index: Some(0),
                requested_bytes: Some(GIB),
                total_bytes: Some(80 * GIB),
                free_bytes: Some(100 * MIB),
                allocated_bytes: Some(78 * GIB),
                reserved_bytes: Some(79 * GIB),
                reserved_unallocated_bytes: Some(GIB),
                ..Default::default()
            }),
            trajectory(
                30,
                LiveGrowth::Growing {
                    per_iteration_bytes: 2 * GIB,
                    r_squared: 0.99,
                    decelerating: false,
                    confidence: crate::diagnose::growth::Confidence::High,
                },
                true,
            ),
        );
        let f = &findings(&case)[0];
        assert_eq!(f.category, Category::Leak);
        assert_eq!(f.recommendations[0].id, "fix-leak");
    }

    /// The verdict of the explainer (the Allocator tab) and of `diagnose` on a snapshot alone.
    fn tab_and_diagnose(
        snapshot: std::sync::Arc<crate::model::allocator::AllocatorSnapshot>,
    ) -> (Category, Category) {
        let travel = crate::analysis::timetravel::TimeTravel::new(snapshot.clone(), 0);
        let explanations = crate::analysis::oom::explain_all(&travel);
        let e = explanations.last().unwrap_or_else(|| panic!("no OOM"));
        let tab = judge_explanation(
            e,
            &snapshot.name,
            None,
            crate::diagnose::trajectory::of_trace(&travel, Some(e.event_index)),
            crate::diagnose::proof::replay_trace(&travel, 0).ok(),
        );
        let d = crate::diagnose::diagnose(&crate::diagnose::DiagnosisInput {
            snapshots: crate::diagnose::snapshot::facts(&snapshot),
            ..Default::default()
        });
        let primary = d.primary().map_or(Category::Healthy, |f| f.category);
        (tab.category, primary)
    }

    #[test]
    fn cached_bytes_in_another_pool_do_not_make_a_cap_refusal_fragmentation() {
        use crate::analysis::oom::tests::snapshot_with_oom;
        use crate::model::allocator::{BlockState, PoolKind};
        // 100 MiB cached in the small pool's 2 MiB blocks, a 40 MiB request in the large pool,
        // the GPU with 1000 MiB free: a cap refused it. The old rules counted all cached bytes
        // and called it fragmentation while the explainer said "memory cap".
        type Segment<'a> = (u64, PoolKind, &'a [(u64, BlockState)]);
        let small_segment = [(2 * MIB, BlockState::Inactive)];
        let mut segments: Vec<Segment> = vec![(
            0,
            PoolKind::Large,
            &[
                (60 * MIB, BlockState::ActiveAllocated),
                (4 * MIB, BlockState::Inactive),
            ],
        )];
        for _ in 0..50 {
            segments.push((0, PoolKind::Small, &small_segment));
        }
        let snapshot = snapshot_with_oom(&segments, None, 40 * MIB, 1000 * MIB);
        assert_eq!(
            tab_and_diagnose(snapshot),
            (Category::MemoryCap, Category::MemoryCap)
        );
    }

    #[test]
    fn live_tensors_filling_the_gpu_are_capacity_in_the_tab_and_in_diagnose() {
        use crate::analysis::oom::tests::snapshot_with_oom;
        use crate::model::allocator::{BlockState, PoolKind};
        let snapshot = snapshot_with_oom(
            &[(
                0,
                PoolKind::Large,
                &[
                    (60 * MIB, BlockState::ActiveAllocated),
                    (4 * MIB, BlockState::Inactive),
                ],
            )],
            None,
            40 * MIB,
            10 * MIB,
        );
        assert_eq!(
            tab_and_diagnose(snapshot),
            (Category::Capacity, Category::Capacity)
        );
    }

    #[test]
    fn a_block_that_should_have_fit_is_judged_on_totals_with_a_warning() {
        use crate::analysis::oom::tests::{explain_only, snapshot_with_oom};
        use crate::model::allocator::{BlockState, PoolKind};
        let snapshot = snapshot_with_oom(
            &[(
                0,
                PoolKind::Large,
                &[
                    (100 * MIB, BlockState::Inactive),
                    (10 * MIB, BlockState::ActiveAllocated),
                ],
            )],
            None,
            40 * MIB,
            MIB,
        );
        let e = explain_only(snapshot);
        let judged = judge_explanation(&e, "x.pickle", None, None, None);
        assert!(judged.reconstruction_warning.is_some());
        // 100 MiB cached + 1 MiB free for a 40 MiB request, 10 MiB live: packing would fit.
        assert_eq!(judged.category, Category::Fragmentation);
    }
}
