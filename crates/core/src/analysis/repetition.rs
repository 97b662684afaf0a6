//! Repetitions in an allocation trace, found from where its allocations were made: the steps of a
//! job and, inside one step, the same code allocating layer after layer.
//!
//! The live set alone cannot always tell them: a job that keeps something from every step (a
//! loss summed as a tensor, outputs appended to a list, `retain_graph=True`) never falls back to a
//! floor, and a forward pass through identical layers rises without falling back too. The call
//! sites can. Each allocation is keyed by the user frames of its stack (`frames::user_frames`,
//! outermost first); the sequence of keys is periodic where the code loops.
//!
//! - **Steps** ([`step_starts`]): the job's loop is the outermost level of the user's frames at
//!   which the keys vary. Keyed by that many outermost frames, the allocations up to the failure
//!   end in a stretch that repeats (a step's first allocation site recurring, the period found by
//!   [`periodic_tail`]) with at least two different keys per period. A constant tail at that
//!   level (the failing step's forward pass, one line of the loop's function, still running) or
//!   no repetition at all means the trace shows no steps this way; nor does a repetition whose
//!   call sites already ran as often before the stretch (an inner loop of iterations that fell
//!   back, such as the tokens of one request after another).
//! - **The repetition inside a step** ([`repetition_before`]): keyed by the whole user stack, the
//!   allocations of the step that failed end in a stretch that repeats at least
//!   [`MIN_LAYER_REPEATS`] times (layer after layer); each repetition's growth of the live set is
//!   measured between the starts of whole repetitions, and the failing request is in the
//!   repetition when its stack is one of the repetition's. Where that repetition is one key
//!   again and again (a layer's forward written in one line, a call into a library whose layers
//!   run below the user's code), the key and the size together find the layers: the same
//!   sizes from that line, in the same order, layer after layer.
//! - **A model's layers** ([`repeated_run`]): the sizes of its parameters, in the order they were
//!   allocated, repeat once per layer.

use std::collections::HashMap;

use super::frames;
use super::timetravel::TimeTravel;
use crate::model::allocator::{AllocatorSnapshot, FrameId, StackId, TraceAction};

/// Allocations looked at, at most, before the end of a stretch: the last ones count (a trace of
/// millions of allocations is judged on its last 200,000, a few hundred steps of a large model).
pub const MAX_ALLOCATIONS: usize = 200_000;
/// Earlier occurrences of the last key tried as the period: a key that occurs up to this many
/// times per repetition still finds it.
const MAX_PERIOD_CANDIDATES: usize = 64;
/// A periodic stretch tolerates one mismatch, plus one per this many matches (an allocation a
/// step makes only sometimes, a cuBLAS workspace made once). No more: a sequence of long runs
/// (a forward pass's allocations, then the backward pass's) matches itself one key back 90 %
/// of the time, and is no repetition of one allocation.
const MATCHES_PER_TOLERATED_MISMATCH: usize = 50;
/// Repetitions of a layer needed inside the failing step.
pub const MIN_LAYER_REPEATS: usize = 3;
/// A repetition whose call sites ran at least this many periods' worth of allocations before
/// the stretch is an inner loop of work that ended before, not the job's steps.
const EARLIER_RUNS_FOR_INNER_LOOP: usize = 2;

/// A stretch at the end of a key sequence that repeats with one period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Period {
    /// Keys per repetition.
    pub length: usize,
    /// Index of the stretch's first key.
    pub start: usize,
}

/// The longest stretch at the end of `keys` that repeats with one period at least `min_repeats`
/// times (the shortest period among equally long stretches); `None` when there is none. Periods
/// tried are the distances back to earlier occurrences of the last key.
pub fn periodic_tail(keys: &[u32], min_repeats: usize) -> Option<Period> {
    let (&last, body) = keys.split_last()?;
    let n = keys.len();
    let mut best: Option<Period> = None;
    let candidates = body
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, key)| **key == last)
        .take(MAX_PERIOD_CANDIDATES);
    for (at, _) in candidates {
        let length = n - 1 - at;
        let start = stretch_start(keys, length);
        if n - start < min_repeats.max(1) * length {
            continue;
        }
        if best.is_none_or(|b| start < b.start) {
            best = Some(Period { length, start });
        }
        if start == 0 {
            break;
        }
    }
    best
}

/// A pattern repeated back to back somewhere in a sequence: `repeats` copies of the `period`
/// keys at `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepeatedRun {
    pub start: usize,
    pub period: usize,
    pub repeats: usize,
}

/// The pattern repeated back to back, exactly, over the most keys of `keys` (a model's
/// parameter sizes: its layers), the shortest period among equals; `None` when nothing repeats.
/// Unlike [`periodic_tail`] it looks anywhere, not only at the end, and tolerates no mismatch.
pub fn repeated_run<K: PartialEq>(keys: &[K]) -> Option<RepeatedRun> {
    let n = keys.len();
    let mut best: Option<RepeatedRun> = None;
    for period in 1..=n / 2 {
        // Maximal stretches where each key equals the one a period later.
        let mut i = 0;
        while i + period < n {
            if keys[i] != keys[i + period] {
                i += 1;
                continue;
            }
            let begin = i;
            while i + period < n && keys[i] == keys[i + period] {
                i += 1;
            }
            let repeats = (i - begin) / period + 1;
            let covered = repeats * period;
            if repeats >= 2 && best.is_none_or(|b| covered > b.repeats * b.period) {
                best = Some(RepeatedRun {
                    start: begin,
                    period,
                    repeats,
                });
            }
        }
    }
    best
}

/// Where the stretch that repeats with period `length` at the end of `keys` begins: walking
/// back, each key against the one a period earlier, until the mismatches exceed what
/// [`MATCHES_PER_TOLERATED_MISMATCH`] allows.
fn stretch_start(keys: &[u32], length: usize) -> usize {
    let n = keys.len();
    let (mut matched, mut mismatched) = (0usize, 0usize);
    let mut earliest = n;
    for i in (length..n).rev() {
        if keys[i] == keys[i - length] {
            matched += 1;
            earliest = i;
        } else {
            mismatched += 1;
            if mismatched > 1 + matched / MATCHES_PER_TOLERATED_MISMATCH {
                break;
            }
        }
    }
    if earliest == n { n } else { earliest - length }
}

/// The allocations of a stretch of a trace: their positions and stacks.
struct Allocations {
    positions: Vec<usize>,
    stacks: Vec<StackId>,
}

/// The allocations of `travel`'s trace at positions `from..to`, the last [`MAX_ALLOCATIONS`].
fn allocations(travel: &TimeTravel, from: usize, to: usize) -> Allocations {
    let trace = travel.trace();
    let to = to.min(trace.len());
    let mut positions: Vec<usize> = (from.min(to)..to)
        .rev()
        .filter(|&i| trace.actions[i] == TraceAction::Alloc)
        .take(MAX_ALLOCATIONS)
        .collect();
    positions.reverse();
    let stacks = positions
        .iter()
        .map(|&i| trace.stacks.get(i).copied().unwrap_or(StackId::EMPTY))
        .collect();
    Allocations { positions, stacks }
}

/// Keys for stacks: the user frames of each stack (outermost first), cut to a depth, numbered
/// in order of first appearance.
struct Keys<'a> {
    snapshot: &'a AllocatorSnapshot,
    frames_of: HashMap<StackId, Vec<FrameId>>,
}

impl<'a> Keys<'a> {
    fn new(snapshot: &'a AllocatorSnapshot) -> Self {
        Keys {
            snapshot,
            frames_of: HashMap::new(),
        }
    }

    fn frames(&mut self, stack: StackId) -> &[FrameId] {
        let snapshot = self.snapshot;
        self.frames_of
            .entry(stack)
            .or_insert_with(|| frames::user_frames(snapshot, stack))
    }

    /// The deepest user stack among `stacks`.
    fn max_depth(&mut self, stacks: &[StackId]) -> usize {
        let mut deepest = 0;
        for &stack in stacks {
            deepest = deepest.max(self.frames(stack).len());
        }
        deepest
    }

    /// The loop level of `stacks`: the outermost depth at which their keys differ, with the keys
    /// at that depth; `None` when they never differ.
    fn loop_level(&mut self, stacks: &[StackId]) -> Option<(usize, Vec<u32>)> {
        let deepest = self.max_depth(stacks);
        (1..=deepest).find_map(|depth| {
            let sequence = self.keys(stacks, depth);
            sequence
                .iter()
                .any(|&k| k != sequence[0])
                .then_some((depth, sequence))
        })
    }

    /// One key per stack: its `depth` outermost user frames (all of them with `usize::MAX`).
    fn keys(&mut self, stacks: &[StackId], depth: usize) -> Vec<u32> {
        let mut numbers: HashMap<Vec<FrameId>, u32> = HashMap::new();
        let mut key_of: HashMap<StackId, u32> = HashMap::new();
        let mut keys = Vec::with_capacity(stacks.len());
        for &stack in stacks {
            let key = match key_of.get(&stack) {
                Some(&key) => key,
                None => {
                    let frames = self.frames(stack);
                    let cut = frames[..depth.min(frames.len())].to_vec();
                    let next = numbers.len() as u32;
                    let key = *numbers.entry(cut).or_insert(next);
                    key_of.insert(stack, key);
                    key
                }
            };
            keys.push(key);
        }
        keys
    }
}

/// Where the steps of `travel`'s trace before position `end` begin, found from the repeating
/// call-site pattern (module comment): the trace positions of the first allocation of each step
/// that completed, and of the step still running at `end` last; `None` when the pattern shows
/// fewer than `min_steps` whole steps.
pub fn step_starts(travel: &TimeTravel, end: usize, min_steps: usize) -> Option<Vec<usize>> {
    let allocations = allocations(travel, 0, end);
    let mut keys = Keys::new(travel.snapshot());
    // The outermost level at which the program's allocations differ is the loop's.
    let (_, sequence) = keys.loop_level(&allocations.stacks)?;
    let period = periodic_tail(&sequence, min_steps.saturating_add(1))?;
    let one = &sequence[sequence.len() - period.length..];
    if one.iter().all(|&k| k == one[0]) {
        return None;
    }
    let earlier = sequence[..period.start]
        .iter()
        .filter(|k| one.contains(k))
        .count();
    if earlier >= EARLIER_RUNS_FOR_INNER_LOOP * period.length {
        return None;
    }
    let starts: Vec<usize> = (period.start..sequence.len())
        .step_by(period.length)
        .map(|i| allocations.positions[i])
        .collect();
    (starts.len() > min_steps).then_some(starts)
}

/// Whether the allocations `one` (one repetition's stacks) come from at least two call sites at
/// the job's loop level: the outermost level of user frames at which the allocations of the
/// trace before `to` differ ([`Keys::loop_level`]). Whole steps do (the batch made, the forward
/// called, the backward without frames, the optimizer stepped, each from its own line of the
/// loop); the layers of one forward pass do not: they all run inside the one line of the loop
/// that called the model.
fn varies_at_loop_level(travel: &TimeTravel, keys: &mut Keys, to: usize, one: &[StackId]) -> bool {
    let before = allocations(travel, 0, to);
    let Some((depth, _)) = keys.loop_level(&before.stacks) else {
        return false;
    };
    let at_loop_level = keys.keys(one, depth);
    at_loop_level.iter().any(|&k| k != at_loop_level[0])
}

/// A repetition at the end of a stretch of allocations: the same call sites allocating again,
/// layer after layer.
#[derive(Clone, Debug, PartialEq)]
pub struct Repetition {
    /// Allocations per repetition.
    pub allocations_per_repetition: usize,
    /// Trace positions where each repetition begins (its first allocation), the one still
    /// running last.
    pub starts: Vec<usize>,
    /// The median growth of the live set from the start of one whole repetition to the next
    /// (negative: a repetition frees more than it keeps).
    pub growth_per_repetition_bytes: i64,
    /// The call sites of one repetition (`frames::user_call_site`), each once, in order.
    pub call_sites: Vec<String>,
    /// The stack of the request at the end of the stretch (the failing one) is one of the
    /// repetition's: the request is the repetition's next allocation, not a one-off after it.
    pub includes_request: bool,
    /// The repetition is whole steps of the job, not layers inside one step: the stack of the
    /// stretch's first allocation is one of the repetition's (a stretch that begins where the
    /// last iteration ended and repeats its first allocation site), and one repetition
    /// allocates from at least two lines of the job's loop (a forward pass's layers all run
    /// inside the one line that called the model, however the live set fell back before them).
    pub spans_steps: bool,
    /// The call site whose allocations the whole repetitions kept (still alive when the last one
    /// began), with those bytes: what the repetition adds, where it is made.
    pub kept_by: Option<(String, u64)>,
}

impl Repetition {
    /// Whole repetitions seen.
    pub fn whole_repetitions(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }
}

/// The repetition at the end of the allocations at trace positions `from..to` of `travel`
/// (module comment), with at least [`MIN_LAYER_REPEATS`] repetitions; `request` is the stack of
/// the request at `to` (the failing one), checked against the repetition's stacks.
pub fn repetition_before(
    travel: &TimeTravel,
    from: usize,
    to: usize,
    request: StackId,
) -> Option<Repetition> {
    let allocations = allocations(travel, from, to);
    let snapshot = travel.snapshot();
    let mut keys = Keys::new(snapshot);
    let mut stacks = allocations.stacks.clone();
    stacks.push(request);
    let mut sequence = keys.keys(&stacks, usize::MAX);
    let mut request_key = sequence.pop()?;
    let mut period = periodic_tail(&sequence, MIN_LAYER_REPEATS)?;
    if period.length == 1 {
        // One line allocating again and again (a model's forward written in one line, a call
        // into a library): its layers show in the sizes, the same ones in the same order.
        let trace = travel.trace();
        let request_bytes = trace.sizes_bytes.get(to).copied().unwrap_or(0);
        let mut sizes: Vec<u64> = allocations
            .positions
            .iter()
            .map(|&i| trace.sizes_bytes.get(i).copied().unwrap_or(0))
            .collect();
        sizes.push(request_bytes);
        let sized = sized_keys(&sequence, &sizes);
        if let Some((&request, body)) = sized.split_last()
            && let Some(by_size) = periodic_tail(body, MIN_LAYER_REPEATS)
            && by_size.length > 1
        {
            sequence = body.to_vec();
            request_key = request;
            period = by_size;
        }
    }
    let one_start = sequence.len() - period.length;
    let starts: Vec<usize> = (period.start..sequence.len())
        .step_by(period.length)
        .map(|i| allocations.positions[i])
        .collect();
    let series = travel.allocated_series();
    let live = |position: usize| series.get(position).copied().unwrap_or(0) as i64;
    let mut growths: Vec<i64> = starts.windows(2).map(|w| live(w[1]) - live(w[0])).collect();
    growths.sort_unstable();
    let growth_per_repetition_bytes = growths.get(growths.len() / 2).copied().unwrap_or(0);
    let mut call_sites: Vec<String> = Vec::new();
    for &stack in &allocations.stacks[one_start..] {
        let site = frames::user_call_site(snapshot, stack);
        if !call_sites.contains(&site) {
            call_sites.push(site);
        }
    }
    let one = &sequence[one_start..];
    let kept_by = match (starts.first(), starts.last()) {
        (Some(&first), Some(&last)) if first < last => {
            kept_by_call_site(travel, first, last).into_iter().next()
        }
        _ => None,
    };
    Some(Repetition {
        allocations_per_repetition: period.length,
        growth_per_repetition_bytes,
        call_sites,
        includes_request: one.contains(&request_key),
        spans_steps: sequence.first().is_some_and(|first| one.contains(first))
            && varies_at_loop_level(travel, &mut keys, to, &allocations.stacks[one_start..]),
        kept_by,
        starts,
    })
}

/// Keys of (`keys[i]`, `sizes[i]`) pairs, numbered in order of first appearance: the same call
/// site allocating a different size is a different key. `sizes` may be one longer than `keys`
/// (a request whose key is the last of `keys`' run), and the pairs stop where either ends
/// otherwise.
fn sized_keys(keys: &[u32], sizes: &[u64]) -> Vec<u32> {
    let mut numbered: HashMap<(u32, u64), u32> = HashMap::new();
    let last_key = keys.last().copied().unwrap_or(0);
    sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let key = keys.get(i).copied().unwrap_or(last_key);
            let next = numbered.len() as u32;
            *numbered.entry((key, size)).or_insert(next)
        })
        .collect()
}

/// Bytes allocated at trace positions `from..to` of `travel` and still live at `to`, by user
/// call site (`frames::user_call_site`), most first: what a stretch of steps kept.
pub fn kept_by_call_site(travel: &TimeTravel, from: usize, to: usize) -> Vec<(String, u64)> {
    let trace = travel.trace();
    let to = to.min(trace.len());
    let mut live: HashMap<u64, usize> = HashMap::new();
    for i in from.min(to)..to {
        match trace.actions[i] {
            TraceAction::Alloc => {
                live.insert(trace.addresses[i], i);
            }
            TraceAction::FreeRequested | TraceAction::FreeCompleted => {
                live.remove(&trace.addresses[i]);
            }
            _ => {}
        }
    }
    let snapshot = travel.snapshot();
    let mut by_site: HashMap<String, u64> = HashMap::new();
    for &i in live.values() {
        let stack = trace.stacks.get(i).copied().unwrap_or(StackId::EMPTY);
        *by_site
            .entry(frames::user_call_site(snapshot, stack))
            .or_default() += trace.sizes_bytes.get(i).copied().unwrap_or(0);
    }
    let mut sites: Vec<(String, u64)> = by_site.into_iter().collect();
    sites.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    sites
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_lines_allocations_are_told_apart_by_their_sizes() {
        // Line 7 allocates 4, 16, 4 MiB per layer: by line alone a period of one, by line and
        // size a period of three. The request (one longer) takes the last line's key.
        let keys = [7, 7, 7, 7, 7, 7, 7, 7, 7];
        let sizes = [4, 16, 4, 4, 16, 4, 4, 16, 4, 4];
        let sized = sized_keys(&keys, &sizes);
        assert_eq!(sized, [0, 1, 0, 0, 1, 0, 0, 1, 0, 0]);
        assert_eq!(periodic_tail(&keys, 3).map(|p| p.length), Some(1));
        let (request, body) = sized.split_last().unwrap_or_else(|| panic!("not empty"));
        assert_eq!(*request, 0);
        assert_eq!(
            periodic_tail(body, 3),
            Some(Period {
                length: 3,
                start: 0
            })
        );
        // Another line with the same size is another key.
        assert_eq!(sized_keys(&[1, 2], &[8, 8]), [0, 1]);
    }

    #[test]
    fn a_models_layers_are_the_pattern_repeated_over_the_most_parameters() {
        // Embedding and position (10, 11), four layers of (w, b, norm, norm), a head (12, 13).
        let mut sizes = vec![10, 11];
        for _ in 0..4 {
            sizes.extend([40, 4, 2, 2]);
        }
        sizes.extend([12, 13]);
        assert_eq!(
            repeated_run(&sizes),
            Some(RepeatedRun {
                start: 2,
                period: 4,
                repeats: 4
            })
        );
        // Equal layers of one tensor each: a period of one.
        assert_eq!(
            repeated_run(&[9, 5, 5, 5, 5, 5, 9]),
            Some(RepeatedRun {
                start: 1,
                period: 1,
                repeats: 5
            })
        );
        // Half a layer more does not count; nothing repeated is nothing.
        assert_eq!(
            repeated_run(&[1, 2, 3, 1, 2, 3, 1]).map(|r| r.repeats),
            Some(2)
        );
        assert_eq!(repeated_run(&[1, 2, 3, 4]), None);
        assert_eq!(repeated_run::<u64>(&[]), None);
    }

    #[test]
    fn the_period_is_the_shortest_that_covers_the_longest_tail() {
        // Setup (7, 8), then the step 1 2 3 repeated, the last one cut short.
        let keys = [7, 8, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2];
        assert_eq!(
            periodic_tail(&keys, 3),
            Some(Period {
                length: 3,
                start: 2
            })
        );
        // Too few repetitions for what is asked.
        assert_eq!(periodic_tail(&keys, 5), None);
        // A constant run is a period of one.
        assert_eq!(
            periodic_tail(&[4, 5, 9, 9, 9, 9], 3),
            Some(Period {
                length: 1,
                start: 2
            })
        );
        assert_eq!(periodic_tail(&[1, 2, 3, 4], 2), None);
        assert_eq!(periodic_tail(&[], 2), None);
    }

    #[test]
    fn a_stray_allocation_does_not_break_a_long_repetition() {
        let mut keys: Vec<u32> = Vec::new();
        for step in 0..30 {
            keys.extend([1, 2, 3, 4]);
            if step == 12 {
                keys[step * 4 + 2] = 9; // made elsewhere once
            }
        }
        let period = periodic_tail(&keys, 3).unwrap_or_else(|| panic!("no period"));
        assert_eq!(period.length, 4);
        assert_eq!(period.start, 0);
    }

    /// Runs of one key (the forward pass's allocations at one line, then the backward pass's
    /// without a stack) are no period of one: the steps they make up are.
    #[test]
    fn long_runs_are_not_a_period_of_one() {
        let mut keys: Vec<u32> = Vec::new();
        for _ in 0..12 {
            keys.extend(std::iter::repeat_n(1, 11));
            keys.extend(std::iter::repeat_n(0, 14));
            keys.push(2);
        }
        keys.extend(std::iter::repeat_n(1, 5));
        let period = periodic_tail(&keys, 3).unwrap_or_else(|| panic!("no period"));
        assert_eq!(period.length, 26);
        assert_eq!(period.start, 0);
    }
}
