//! The out-of-memory rule: decides, from the numbers, why an allocation failed.
//!
//! The card at the failure is split into: other processes, this process (framework allocated +
//! reserved-but-unallocated + context), free, and any per-process cap. Then, in order:
//! 1. a cap was set and the device still had room → the cap stopped it (`memory-cap`), unless the
//!    allocator already had enough cached bytes for the request, in which case those bytes were in
//!    blocks too small (`fragmentation`, with the cap as a second finding);
//! 2. the allocator had enough cached-but-unallocated bytes for the request but no block large
//!    enough → `fragmentation`;
//! 3. other processes hold enough that freeing them would have made the request fit, and a notable
//!    share of the card → `other-process`;
//! 4. free plus cached-but-unallocated would have fit the request → `fragmentation`;
//! 5. otherwise the job needs more than the card has → `capacity`.
//!
//! PyTorch prints the `expandable_segments` hint on every OOM; it is only repeated when rule 1, 2
//! or 4 says fragmentation is the cause, and otherwise the explanation says why it would not help.

use super::finding::{
    Category, Evidence, EvidenceSource, Finding, Recommendation, Severity, Wizard,
};
use super::log::{Framework, OomNumbers};
use super::recommend::{self, NOTABLE_BYTES, NOTABLE_OTHER_PROCESS_FRACTION};
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
    /// Largest free (cached) block of the allocator at the failure, from a snapshot.
    pub largest_free_block: Option<(u64, EvidenceSource)>,
    /// Other processes on the device seen by a capture at the failure, when the message had none:
    /// (pid, name, bytes).
    pub other_processes_from_capture: Vec<(u32, String, u64, EvidenceSource)>,
    /// Whether the allocator already used expandable segments (from a snapshot's settings).
    pub expandable_segments: Option<bool>,
}

/// What the numbers say, before the findings are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OomCause {
    CapWithFragmentation,
    Cap,
    Fragmentation,
    OtherProcess,
    Capacity,
}

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

/// Applies the rules in the module comment.
pub fn classify(case: &OomCase) -> OomCause {
    let n = &case.numbers;
    let requested = n.requested_bytes.unwrap_or(0);
    let free = n.free_bytes;
    let unallocated = n.reserved_unallocated_bytes.unwrap_or(0);
    let largest_block = case.largest_free_block.as_ref().map(|(b, _)| *b);
    let others_sum: u64 = other_processes(case).iter().map(|(_, b)| b).sum();
    let device_had_room = free.is_some_and(|f| f >= requested);
    let cap_set = n
        .allowed_bytes
        .is_some_and(|c| n.total_bytes.is_none_or(|t| c < t));
    let cached_enough =
        requested > 0 && unallocated >= requested && largest_block.is_none_or(|l| l < requested);

    if cap_set && (device_had_room || free.is_none()) {
        return if cached_enough {
            OomCause::CapWithFragmentation
        } else {
            OomCause::Cap
        };
    }
    if cached_enough {
        return OomCause::Fragmentation;
    }
    // The device had room at the failure, yet the allocator refused: a limit it must obey (the
    // criterion the allocator view's OOM explainer uses for its memory-cap verdict).
    if free_is_exact(case) && crate::analysis::oom::refused_by_memory_cap(free, requested) {
        return OomCause::Cap;
    }
    let free = free.unwrap_or(0);
    let share_ok = n
        .total_bytes
        .is_none_or(|t| others_sum as f64 >= NOTABLE_OTHER_PROCESS_FRACTION * t as f64)
        || others_sum >= requested;
    if others_sum >= NOTABLE_BYTES
        && free < requested
        && free.saturating_add(others_sum) >= requested
        && share_ok
    {
        return OomCause::OtherProcess;
    }
    if unallocated >= NOTABLE_BYTES
        && free < requested
        && free.saturating_add(unallocated) >= requested
    {
        return OomCause::Fragmentation;
    }
    OomCause::Capacity
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

fn evidence(case: &OomCase) -> Vec<Evidence> {
    let n = &case.numbers;
    let src = || case.source.clone();
    let mut ev = Vec::new();
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
    if let Some((l, s)) = &case.largest_free_block {
        ev.push(Evidence::bytes("largest cached free block", *l, s.clone()));
    }
    if case.occurrences > 1 {
        ev.push(Evidence::number(
            "out-of-memory reports",
            case.occurrences as f64,
            super::finding::Unit::Count,
            format!("{} reports", case.occurrences),
            src(),
        ));
    }
    ev
}

/// How much more the request needed than was free; `None` when unknown or not positive.
fn shortfall(n: &OomNumbers) -> Option<u64> {
    Some(n.requested_bytes?.saturating_sub(n.free_bytes?)).filter(|&s| s > 0)
}

fn hint_not_echoed(n: &OomNumbers) -> String {
    match (n.reserved_unallocated_bytes, n.requested_bytes) {
        (Some(u), Some(r)) if u < r => format!(
            " PyTorch's message suggests expandable_segments on every OOM; here only {} is cached but unallocated, less than the {} requested, so fragmentation is not the cause and that setting would not help.",
            format_bytes(u),
            format_bytes(r)
        ),
        _ => String::new(),
    }
}

fn framework_capacity_recs(case: &OomCase) -> Vec<Recommendation> {
    let n = &case.numbers;
    let mut recs = vec![recommend::reduce_batch_size(
        shortfall(n),
        n.allocated_bytes,
    )];
    match case.framework {
        Framework::Jax => recs.push(recommend::jax_preallocation()),
        Framework::TensorFlow => recs.push(recommend::tensorflow_memory_growth()),
        Framework::PyTorch | Framework::Cuda => {}
    }
    recs.push(recommend::mixed_precision(n.allocated_bytes));
    recs.push(recommend::activation_checkpointing());
    recs.push(recommend::inference_mode());
    recs.push(recommend::shard_model(n.total_bytes));
    recs
}

/// The findings for one OOM case: the primary cause first, then contributing causes.
pub fn findings(case: &OomCase) -> Vec<Finding> {
    let cause = classify(case);
    let words = Wording::of(case);
    let evidence = evidence(case);
    let mut out = Vec::new();
    match cause {
        OomCause::CapWithFragmentation | OomCause::Fragmentation => {
            out.push(fragmentation_finding(case, cause, &words, evidence.clone()));
            if cause == OomCause::CapWithFragmentation {
                out.push(cap_finding(
                    case,
                    Severity::Warning,
                    &words,
                    evidence.clone(),
                ));
            }
        }
        OomCause::Cap => out.push(cap_finding(
            case,
            Severity::Critical,
            &words,
            evidence.clone(),
        )),
        OomCause::OtherProcess => out.push(other_process_finding(case, &words, evidence.clone())),
        OomCause::Capacity => out.push(capacity_finding(case, &words, evidence.clone())),
    }
    // A notable other process is worth mentioning even when it is not the primary cause.
    if cause != OomCause::OtherProcess {
        out.extend(notable_other_processes(case, &words, evidence));
    }
    out
}

/// How the findings of one OOM name the GPU and the request.
struct Wording {
    /// "GPU 0", or "the GPU" when the message did not say.
    gpu: String,
    /// "2.00 GiB", or "an allocation".
    request: String,
}

impl Wording {
    fn of(case: &OomCase) -> Self {
        let n = &case.numbers;
        Wording {
            gpu: n
                .device_index
                .map(|d| format!("GPU {d}"))
                .unwrap_or_else(|| "the GPU".to_owned()),
            request: n
                .requested_bytes
                .map(format_bytes)
                .unwrap_or_else(|| "an allocation".to_owned()),
        }
    }
}

/// A per-process cap (memory fraction, MPS or container limit) refused the allocation.
fn cap_finding(
    case: &OomCase,
    severity: Severity,
    words: &Wording,
    evidence: Vec<Evidence>,
) -> Finding {
    let n = &case.numbers;
    let Wording { gpu, request: req } = words;
    let needed = n
        .reserved_bytes
        .or(n.allowed_bytes)
        .unwrap_or(0)
        .saturating_add(n.requested_bytes.unwrap_or(0));
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
                "The process may use at most {} (torch.cuda.set_per_process_memory_fraction or an equivalent setting). The allocator had reserved {} and needed {req} more, which exceeds the cap, although {gpu} had room.{}",
                format_bytes(cap),
                n.reserved_bytes
                    .map(format_bytes)
                    .unwrap_or_else(|| "its share".into()),
                hint_not_echoed(n)
            ),
        ),
        None => (
            format!(
                "The allocator refused {req} while {free_text} was free on {gpu}: a memory cap is in force"
            ),
            format!(
                "CUDA reported {free_text} free at the failure, more than the {req} requested, and the cached memory could not explain it: a per-process limit stopped the allocation (torch.cuda.set_per_process_memory_fraction, an MPS memory limit or a container limit).{}",
                hint_not_echoed(n)
            ),
        ),
    };
    Finding::new(Category::MemoryCap, severity, title)
        .with_evidence(evidence)
        .explained(explanation)
        .recommend([
            recommend::raise_memory_fraction(n.allowed_bytes, needed, n.total_bytes),
            recommend::reduce_batch_size(n.requested_bytes, n.allocated_bytes),
            recommend::mixed_precision(n.allocated_bytes),
        ])
        .in_wizard(Wizard::OutOfMemory)
}

/// Enough memory was cached, but in blocks too small for the request.
fn fragmentation_finding(
    case: &OomCase,
    cause: OomCause,
    words: &Wording,
    evidence: Vec<Evidence>,
) -> Finding {
    let n = &case.numbers;
    let Wording { gpu, request: req } = words;
    let unallocated = n.reserved_unallocated_bytes;
    let u = unallocated.unwrap_or(0);
    let block = case
        .largest_free_block
        .as_ref()
        .map(|(l, _)| format!(" (largest free block {})", format_bytes(*l)))
        .unwrap_or_default();
    let cached_enough = u >= n.requested_bytes.unwrap_or(0);
    let title = if cached_enough {
        format!(
            "{} cached on {gpu} but no free block fits the {req} request{block}",
            format_bytes(u)
        )
    } else {
        format!(
            "{} cached plus {} free would fit the {req} request",
            format_bytes(u),
            n.free_bytes.map(format_bytes).unwrap_or_default()
        )
    };
    let explanation = if cause == OomCause::CapWithFragmentation {
        format!(
            "The allocator held {} reserved but unallocated, more than the {req} requested, yet in blocks too small to hold it; it could not reserve more because of the {} cap. Free blocks stranded in partly used segments are what fragmentation costs.",
            format_bytes(u),
            n.allowed_bytes.map(format_bytes).unwrap_or_default()
        )
    } else {
        format!(
            "The allocator held {} reserved but unallocated{block}; the request needed one contiguous block of {req}. Cached blocks stranded in partly used segments could not be combined or returned.",
            format_bytes(u)
        )
    };
    let recommendations: Vec<_> = if case.expandable_segments == Some(true) {
        // Already on (the snapshot's settings say so): limit splitting instead.
        recommend::max_split_size(n.requested_bytes)
            .into_iter()
            .chain([recommend::empty_cache()])
            .collect()
    } else {
        std::iter::once(recommend::expandable_segments(unallocated))
            .chain(recommend::max_split_size(n.requested_bytes))
            .chain([recommend::empty_cache()])
            .collect()
    };
    Finding::new(Category::Fragmentation, Severity::Critical, title)
        .with_evidence(evidence)
        .explained(explanation)
        .recommend(recommendations)
        .in_wizard(Wizard::Fragmentation)
}

/// Other processes held the memory the request needed.
fn other_process_finding(case: &OomCase, words: &Wording, evidence: Vec<Evidence>) -> Finding {
    let n = &case.numbers;
    let Wording { gpu, request: req } = words;
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
        "Only {} was free{}. The other processes hold {}; without them the request would have fit.{}",
        n.free_bytes.map(format_bytes).unwrap_or_else(|| "little".into()),
        n.total_bytes
            .map(|t| format!(" of {}", format_bytes(t)))
            .unwrap_or_default(),
        format_bytes(sum),
        hint_not_echoed(n)
    ))
    .recommend([
        recommend::free_other_process(&others, shortfall(n)),
        recommend::reduce_batch_size(shortfall(n), n.allocated_bytes),
        recommend::mixed_precision(n.allocated_bytes),
    ])
    .in_wizard(Wizard::OutOfMemory)
}

/// The job's peak is larger than the GPU (or a single request is).
fn capacity_finding(case: &OomCase, words: &Wording, evidence: Vec<Evidence>) -> Finding {
    let n = &case.numbers;
    let Wording { gpu, request: req } = words;
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
        _ => "The message carries no breakdown; add a snapshot or a capture for one.".to_owned(),
    };
    let too_big = matches!((n.requested_bytes, n.total_bytes), (Some(r), Some(t)) if r > t);
    let title = if too_big {
        format!("A single {req} allocation is larger than {gpu}'s whole memory")
    } else {
        format!(
            "Out of memory on {gpu}: {req} requested{}",
            n.free_bytes
                .map(|f| format!(", {} free", format_bytes(f)))
                .unwrap_or_default()
        )
    };
    Finding::new(Category::Capacity, Severity::Critical, title)
        .with_evidence(evidence)
        .explained(format!("{detail}{}", hint_not_echoed(n)))
        .recommend(framework_capacity_recs(case))
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
