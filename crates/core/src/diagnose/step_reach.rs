//! How far an allocator setting that passes the failing request carries the job, judged from the
//! step that failed, when the trace ends inside it (a snapshot taken at the failure, so that the
//! replay shows nothing after the failing request: `super::proof`).
//!
//! A forward pass is a repetition: the same call sites allocate again layer after layer, each
//! repetition adding live memory (`analysis::repetition::repetition_before`, found in the failing
//! step by the live set's history, [`super::trajectory::Trajectory::failing_step`]). In order:
//! 1. the failing request makes the optimizer's state (its first step makes it, parameter by
//!    parameter, work no iteration before ran) and the state still to come, at least one tensor
//!    of each gradient's size less the state already made, needs more than the headroom the best
//!    setting leaves → **capacity**;
//! 2. iterations completed before the failure already held at least the live set at the failure
//!    plus the request: the rest of the step is what they ran under the same limit, and the
//!    failure is where the allocator put things → **placement** (a setting can fix it);
//! 3. the failing request is not one of the repetition's call sites (a one-off after it) →
//!    **placement**;
//! 4. the repetition is level (adds less than [`LEVEL_REPETITION_SHARE`] of the live set per
//!    repetition): one more needs nothing more → **placement**;
//! 5. one more repetition adds more than the headroom the best setting leaves in the replay →
//!    **capacity**: the setting does not fix the job;
//! 6. otherwise (no repetition found, a repetition only of allocations without recorded stacks,
//!    or headroom for a few more repetitions and no telling how many remain) → **uncertain**,
//!    with what settles it.

use super::categories;
use super::log::OomNumbers;
use super::proof::SettingsProof;
use super::trajectory::{IterationSource, Trajectory};
use crate::analysis::categories::MemoryBreakdown;
use crate::analysis::frames::NO_STACK;
use crate::analysis::repetition::Repetition;
use crate::model::format_bytes;

/// A repetition that adds less than this share of the live set at the failure is level: at that
/// rate the step would need a hundred more repetitions to add what it already holds.
pub const LEVEL_REPETITION_SHARE: f64 = 0.01;

/// What the failing step's pattern says about the settings that pass its failing request; each
/// with the reason in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepReach {
    /// The failure is where the allocator put things: a setting that serves the request fixes
    /// the job.
    Placement(String),
    /// One more repetition needs more than the best setting leaves: no setting fixes the job.
    Capacity(String),
    /// The pattern cannot decide.
    Uncertain(String),
}

impl StepReach {
    /// The reason in words.
    pub fn reason(&self) -> &str {
        match self {
            StepReach::Placement(why) | StepReach::Capacity(why) | StepReach::Uncertain(why) => why,
        }
    }
}

/// The verdict of the module comment's rules on the settings `proof` found passing the failing
/// request of `numbers`, with the live set's history `trajectory` and where the memory went at
/// the failure (`breakdown`); `None` when there is nothing to judge (no setting passes, or the
/// trace goes past the failure, which then proves them).
pub fn judge(
    numbers: &OomNumbers,
    trajectory: Option<&Trajectory>,
    breakdown: Option<&MemoryBreakdown>,
    proof: &SettingsProof,
) -> Option<StepReach> {
    let best = proof.helps.first()?;
    if !proof.ends_in_failed_step() {
        return None;
    }
    let request = numbers.requested_bytes.unwrap_or(0);
    let trajectory = trajectory.filter(|t| t.source != IterationSource::LoggedSteps);
    let live = trajectory.map_or(numbers.allocated_bytes.unwrap_or(0), |t| {
        t.live_at_end_bytes
    });
    let headroom = proof
        .limit_bytes
        .map(|limit| limit.saturating_sub(best.peak_reserved_bytes));
    // Before the iterations: the optimizer makes its state once, so no iteration before the
    // failure ran that work, whatever it held.
    if let (Some(breakdown), Some(headroom)) = (breakdown, headroom)
        && let Some(state_to_come) = categories::optimizer_state_to_come(breakdown)
        && state_to_come > headroom
    {
        return Some(StepReach::Capacity(format!(
            "the failing request makes the optimizer's state, which its first step makes parameter by parameter: at least {} more is to come ({}, less the state made so far), more than the {} the best setting ({}) leaves in the replay",
            format_bytes(state_to_come),
            categories::state_per_gradient_text(breakdown.state_tensors_per_parameter),
            format_bytes(headroom),
            best.conf
        )));
    }
    if let Some(peak) = trajectory
        .and_then(|t| t.iterations.iter().map(|i| i.peak_bytes).max())
        .filter(|&peak| live.saturating_add(request) <= peak)
    {
        return Some(StepReach::Placement(format!(
            "iterations completed before the failure held up to {} live, at least the {} this step needed with the request ({} + {}): the rest of the step is what they ran under the same limit",
            format_bytes(peak),
            format_bytes(live.saturating_add(request)),
            format_bytes(live),
            format_bytes(request)
        )));
    }
    let Some(repetition) = trajectory.and_then(|t| t.failing_step.as_ref()) else {
        return Some(StepReach::Uncertain(
            "the step that failed shows no repetition of call sites to tell how much more it needs"
                .to_owned(),
        ));
    };
    if repetition.call_sites.iter().all(|site| site == NO_STACK) {
        // A pattern of allocations without stacks is a pattern of sizes: nothing says it is the
        // same code repeating, nor whether the request belongs to it.
        return Some(StepReach::Uncertain(
            "the step that failed repeats only allocations without recorded stacks (the backward pass's or C++'s), which cannot tell whether it is the same code repeating, nor how much more the step needs"
                .to_owned(),
        ));
    }
    if repetition.allocations_per_repetition < 2 {
        // One allocation repeated is a line that allocates again and again (a call into a
        // library whose layers run below the user's code): its "repetitions" are single tensors
        // of whatever sizes come, neither layers nor steps.
        return Some(StepReach::Uncertain(format!(
            "the step that failed repeats only single allocations from {}, which cannot tell the layers inside that call apart, nor how much more the step needs",
            sites_text(repetition)
        )));
    }
    let sites = sites_text(repetition);
    // A repetition that spans what the failing stretch began with is the job's steps, kept one
    // after the other; otherwise layers inside the step.
    let unit = if repetition.spans_steps {
        "step"
    } else {
        "repetition"
    };
    let growth = repetition.growth_per_repetition_bytes;
    if !repetition.includes_request {
        return Some(StepReach::Placement(format!(
            "the failing request is a one-off: its stack is none of the repetition's the step ran before it ({} whole repetitions of {sites}), so the step's pattern does not ask for it again",
            repetition.whole_repetitions()
        )));
    }
    if (growth.max(0) as f64) < LEVEL_REPETITION_SHARE * live as f64 {
        return Some(StepReach::Placement(format!(
            "each repetition of {sites} frees about what it allocates ({} per repetition, under {:.0} % of the {} live): one more needs nothing more",
            signed_bytes(growth),
            LEVEL_REPETITION_SHARE * 100.0,
            format_bytes(live)
        )));
    }
    let growth = growth.unsigned_abs();
    match headroom {
        Some(headroom) if growth > headroom => Some(StepReach::Capacity(format!(
            "each {unit} of {sites} adds {} of live memory, and the failing request is the next {unit}'s; the best setting ({}) leaves {} in the replay, less than one more {unit} needs",
            format_bytes(growth),
            best.conf,
            format_bytes(headroom)
        ))),
        Some(headroom) => Some(StepReach::Uncertain(format!(
            "each {unit} of {sites} adds {} of live memory; the best setting ({}) leaves {} in the replay, about {} more {unit}(s), and how many the job still runs is not in the trace",
            format_bytes(growth),
            best.conf,
            format_bytes(headroom),
            headroom / growth.max(1)
        ))),
        None => Some(StepReach::Uncertain(format!(
            "each {unit} of {sites} adds {} of live memory, and what the allocator may reserve is not known",
            format_bytes(growth)
        ))),
    }
}

/// "jobs.py:181 forward, jobs.py:183 forward and 2 more": a repetition's call sites for a
/// sentence.
pub fn sites_text(repetition: &Repetition) -> String {
    const SHOWN: usize = 3;
    let sites = &repetition.call_sites;
    let shown = sites[..sites.len().min(SHOWN)].join(", ");
    match sites.len() {
        0 => "its call sites".to_owned(),
        n if n > SHOWN => format!("{shown} and {} more", n - SHOWN),
        _ => shown,
    }
}

/// "-4.00 MiB" or "12.0 MiB".
fn signed_bytes(bytes: i64) -> String {
    if bytes < 0 {
        format!("-{}", format_bytes(bytes.unsigned_abs()))
    } else {
        format_bytes(bytes.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::proof::{ReplayEvidence, ReplayedOom};
    use crate::diagnose::proof::{ReplayedSetting, judge as judge_replay};
    use crate::diagnose::trajectory::{Iteration, LiveGrowth};
    use crate::model::MIB;

    /// A replay under a 1000 MiB limit: the recorded settings ran out at event 900, one other
    /// setting passed with a peak of `best_peak_mib`; the trace ends in the failed step unless
    /// `iteration_after_failure`.
    fn evidence(best_peak_mib: u64, iteration_after_failure: Option<usize>) -> ReplayEvidence {
        let setting = |conf: &str, peak_mib: u64, oom: bool| ReplayedSetting {
            conf: conf.to_owned(),
            peak_reserved_bytes: peak_mib * MIB,
            peak_allocated_bytes: 0,
            oom: oom.then_some(ReplayedOom {
                event_index: 900,
                request_bytes: 64 * MIB,
                reserved_bytes: 990 * MIB,
                allowed_bytes: Some(1000 * MIB),
            }),
            num_alloc_retries: 0,
            incomplete: None,
            uncertain: false,
        };
        ReplayEvidence {
            reliable: true,
            self_check: "ok".into(),
            limit_bytes: Some(1000 * MIB),
            recorded_conf: "default".into(),
            settings: vec![
                setting("default", 990, true),
                setting("expandable_segments:True", best_peak_mib, false),
            ],
            not_run: None,
            iteration_after_failure,
        }
    }

    /// A failing step after `iterations` iterations peaking at `peak_mib`, with `live_mib` live
    /// at the failure, and a repetition adding `growth_mib` per repetition (none: `None`).
    fn history(
        iterations: usize,
        peak_mib: u64,
        live_mib: u64,
        repetition: Option<(i64, bool, bool)>,
    ) -> Trajectory {
        Trajectory {
            events: 900,
            starts_empty: true,
            source: IterationSource::LiveSetFalls,
            iterations: (0..iterations)
                .map(|i| Iteration {
                    start_event: i * 100,
                    end_event: i * 100 + 100,
                    floor_bytes: 100 * MIB,
                    peak_bytes: peak_mib * MIB,
                })
                .collect(),
            live_at_end_bytes: live_mib * MIB,
            peak_live_bytes: live_mib * MIB,
            span_seconds: None,
            growth: LiveGrowth::Unknown,
            new_tensors_share_of_growth: None,
            kept_by: None,
            failing_step: repetition.map(|(growth_mib, includes_request, spans_steps)| {
                Repetition {
                    allocations_per_repetition: 4,
                    starts: vec![500, 600, 700, 800],
                    growth_per_repetition_bytes: growth_mib * MIB as i64,
                    call_sites: vec!["model.py:12 forward".into(), "model.py:13 forward".into()],
                    includes_request,
                    spans_steps,
                    kept_by: None,
                }
            }),
        }
    }

    fn numbers() -> OomNumbers {
        OomNumbers {
            requested_bytes: Some(64 * MIB),
            allocated_bytes: Some(800 * MIB),
            ..Default::default()
        }
    }

    fn reach(t: &Trajectory, best_peak_mib: u64) -> Option<StepReach> {
        let e = evidence(best_peak_mib, None);
        let proof = judge_replay(&e).unwrap_or_else(|| panic!("reliable"));
        judge(&numbers(), Some(t), None, &proof)
    }

    #[test]
    fn earlier_iterations_that_held_as_much_make_it_placement() {
        let t = history(5, 900, 800, Some((50, true, false)));
        let reach = reach(&t, 960);
        assert!(
            matches!(&reach, Some(StepReach::Placement(why)) if why.contains("iterations completed before the failure held up to 900 MiB")),
            "{reach:?}"
        );
    }

    #[test]
    fn a_one_off_request_or_a_level_repetition_is_placement() {
        // The step grew past the earlier iterations (800 + 64 > 700): the repetition decides.
        let one_off = history(5, 700, 800, Some((50, false, false)));
        assert!(
            matches!(reach(&one_off, 960), Some(StepReach::Placement(why)) if why.contains("one-off")),
            "{:?}",
            reach(&one_off, 960)
        );
        // 4 MiB per repetition is under 1 % of the 800 MiB live: level.
        let level = history(5, 700, 800, Some((4, true, false)));
        assert!(
            matches!(reach(&level, 960), Some(StepReach::Placement(why)) if why.contains("frees about what it allocates")),
            "{:?}",
            reach(&level, 960)
        );
    }

    /// A real H100 job's failing step (`long_tail_lengths` of the run corpus's second fresh
    /// batch): the whole transformer forward is one line of user code, so the repetition found
    /// was that line's allocations one by one, "level" at 1 MiB each, and the setting was judged
    /// enough; re-run, it ran out 168 MiB short. Single allocations decide nothing.
    #[test]
    fn a_repetition_of_single_allocations_of_one_line_is_uncertain() {
        let mut one_line = history(5, 700, 800, Some((1, true, true)));
        if let Some(repetition) = one_line.failing_step.as_mut() {
            repetition.allocations_per_repetition = 1;
            repetition.call_sites = vec!["train.py:43 <module>".into()];
        }
        assert!(
            matches!(reach(&one_line, 960), Some(StepReach::Uncertain(why)) if why.contains("single allocations from train.py:43")),
            "{:?}",
            reach(&one_line, 960)
        );
    }

    #[test]
    fn a_repetition_growing_by_more_than_the_headroom_is_capacity() {
        // 50 MiB per layer, and the best setting leaves 40 MiB.
        let t = history(0, 0, 800, Some((50, true, false)));
        let reach = reach(&t, 960);
        assert!(
            matches!(&reach, Some(StepReach::Capacity(why)) if why.contains("each repetition of model.py:12 forward, model.py:13 forward adds 50.0 MiB")
                && why.contains("leaves 40.0 MiB")),
            "{reach:?}"
        );
        // The same, when the repetition is the job's steps.
        let steps = history(0, 0, 800, Some((50, true, true)));
        assert!(
            matches!(self::reach(&steps, 960), Some(StepReach::Capacity(why)) if why.contains("each step of")),
            "{:?}",
            self::reach(&steps, 960)
        );
    }

    #[test]
    fn without_a_pattern_or_with_headroom_for_a_few_more_it_is_uncertain() {
        let none = history(0, 0, 800, None);
        assert!(
            matches!(reach(&none, 960), Some(StepReach::Uncertain(why)) if why.contains("no repetition")),
            "{:?}",
            reach(&none, 960)
        );
        // 30 MiB per layer, 200 MiB left: about 6 more layers, and no telling how many remain.
        let few = history(0, 0, 800, Some((30, true, false)));
        assert!(
            matches!(reach(&few, 800), Some(StepReach::Uncertain(why)) if why.contains("about 6 more repetition(s)")),
            "{:?}",
            reach(&few, 800)
        );
    }

    /// A repetition of allocations without stacks (a backward pass under `--stacks python`)
    /// decides nothing, however level: it is uncertain.
    #[test]
    fn a_repetition_without_stacks_is_uncertain() {
        let mut level = history(5, 700, 800, Some((0, true, false)));
        if let Some(r) = level.failing_step.as_mut() {
            r.call_sites = vec![NO_STACK.to_owned()];
        }
        assert!(
            matches!(reach(&level, 960), Some(StepReach::Uncertain(why)) if why.contains("without recorded stacks")),
            "{:?}",
            reach(&level, 960)
        );
    }

    #[test]
    fn a_trace_that_goes_past_the_failure_needs_no_judging() {
        let t = history(0, 0, 800, Some((50, true, false)));
        let e = evidence(960, Some(1200));
        let proof = judge_replay(&e).unwrap_or_else(|| panic!("reliable"));
        assert_eq!(judge(&numbers(), Some(&t), None, &proof), None);
        // Nor does a replay in which no setting passes.
        let mut e = evidence(960, None);
        e.settings.truncate(1);
        let proof = judge_replay(&e).unwrap_or_else(|| panic!("reliable"));
        assert_eq!(judge(&numbers(), Some(&t), None, &proof), None);
    }

    /// A failure while the optimizer makes its state: 600 MiB of gradients and 100 MiB of
    /// state made, so at least 500 MiB is to come, more than the 10 MiB the best setting
    /// leaves: capacity, whatever the iterations before held. With the state nearly made
    /// (less to come than the headroom) the rule says nothing and the pattern decides, unless
    /// the optimizer makes more than one state tensor per parameter.
    #[test]
    fn optimizer_state_still_to_come_beyond_the_headroom_is_capacity() {
        use crate::analysis::categories::{
            CategoryMoment, CategoryTotals, FailingRequest, MemoryBreakdown, MemoryCategory,
        };
        let making_state = |gradients_mib: u64, state_mib: u64, per_parameter: u64| {
            let totals = CategoryTotals::for_test(
                &[
                    (MemoryCategory::Gradients, gradients_mib * MIB),
                    (MemoryCategory::OptimizerState, state_mib * MIB),
                ],
                0,
            );
            MemoryBreakdown {
                at_failure: Some(CategoryMoment {
                    position: 900,
                    totals: totals.clone(),
                }),
                at_peak: CategoryMoment {
                    position: 900,
                    totals,
                },
                failing_request: Some(FailingRequest {
                    category: MemoryCategory::OptimizerState,
                    in_optimizer_step: true,
                }),
                largest_parameter_bytes: 64 * MIB,
                private_pools: Vec::new(),
                concatenating: Vec::new(),
                failing_site: None,
                state_tensors_per_parameter: per_parameter,
                parameter_layers: None,
                failing_site_history: None,
            }
        };
        let e = evidence(990, None);
        let proof = judge_replay(&e).unwrap_or_else(|| panic!("reliable"));
        // Iterations before the failure that held more than the step needs (placement, but for
        // the state to come: no iteration made it).
        let t = history(3, 2000, 800, Some((40, false, false)));
        let verdict = judge(
            &numbers(),
            Some(&t),
            Some(&making_state(600, 100, 1)),
            &proof,
        );
        assert!(
            matches!(&verdict, Some(StepReach::Capacity(why)) if why.contains("500 MiB")),
            "{verdict:?}"
        );
        let verdict = judge(
            &numbers(),
            Some(&t),
            Some(&making_state(600, 595, 1)),
            &proof,
        );
        assert!(
            matches!(verdict, Some(StepReach::Placement(_))),
            "{verdict:?}"
        );
        // The same state made, by an optimizer seen making three tensors per parameter (Adam
        // with amsgrad): 3 x 600 - 595 = 1205 MiB to come, capacity.
        let verdict = judge(
            &numbers(),
            Some(&t),
            Some(&making_state(600, 595, 3)),
            &proof,
        );
        assert!(
            matches!(&verdict, Some(StepReach::Capacity(why)) if why.contains("1.18 GiB") && why.contains("3 state tensors of each gradient's size")),
            "{verdict:?}"
        );
    }
}
