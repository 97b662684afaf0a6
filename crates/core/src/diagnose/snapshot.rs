//! Snapshot facts for the rules, taken from a PyTorch allocator snapshot with the allocator
//! analysis (`analysis::timetravel`, `fragmentation`, `oom`): per device, what was reserved and
//! allocated, the largest cached free block, the last OOM with the numbers at that moment, the
//! live set's history up to it (`super::trajectory`), the allocated bytes per user call site
//! (for "what grew" between two snapshots), and where the live memory went by category
//! (`analysis::categories`).

use std::collections::HashMap;
use std::sync::Arc;

use super::finding::NamedWhatIf;
use super::leak::{SnapshotFacts, SnapshotIdentity, SnapshotOom};
use super::proof;
use super::trace_events::TraceEventCollector;
use super::trajectory::{self, TrajectoryBuild};
use crate::analysis::categories;
use crate::analysis::deadline::Step;
use crate::analysis::fragmentation;
use crate::analysis::replay::{WhatIfReport, WhatIfRequest, WhatIfSteps, what_if};
use crate::analysis::snapshot_analysis::{self, DeviceAnalysis};
use crate::analysis::timetravel::TimeTravel;
use crate::model::allocator::{AllocatorSnapshot, BlockState, DeviceAllocState};

/// Call sites listed per snapshot, largest first.
const MAX_CALL_SITES: usize = 50;

/// One [`SnapshotFacts`] per device of the snapshot.
pub fn facts(snapshot: &Arc<AllocatorSnapshot>) -> Vec<SnapshotFacts> {
    facts_from(snapshot, &snapshot_analysis::analyze(snapshot))
}

/// [`facts`] from the analyses already made of `snapshot` (the allocator view's, so that opening
/// a snapshot analyses its trace once).
pub fn facts_from(snapshot: &AllocatorSnapshot, analyses: &[DeviceAnalysis]) -> Vec<SnapshotFacts> {
    let mut build = FactsBuild {
        parts_in_one_step: true,
        ..FactsBuild::default()
    };
    while !build.step(snapshot, analyses) {}
    build.into_facts()
}

/// [`facts_from`] one piece of work at a time, for the web page's single thread: each
/// [`FactsBuild::step`] does one part of one device's facts (its final state, a range of its
/// history, a range of events of the what-if sweep's replays, its call sites, its identity), so
/// the page can draw and answer
/// Cancel in between. [`facts_from`] (the desktop's way, on its own thread) runs the same build
/// to the end with the sweep's settings replayed side by side in one step; both give the same
/// facts (tested).
#[derive(Default)]
pub struct FactsBuild {
    /// Devices of the snapshot started so far (`snapshot.devices[..next_device]`).
    next_device: usize,
    current: Option<(DeviceFacts, FactsPart)>,
    done: Vec<SnapshotFacts>,
    /// Each part in one step, the what-if sweep with its settings on all cores ([`what_if`]),
    /// instead of ranges of events of the history and of the sweep's replays ([`WhatIfSteps`]).
    parts_in_one_step: bool,
}

/// The part of a device's facts that the next step makes.
enum FactsPart {
    /// The history; `Some` once started a range of events at a time.
    History(Option<Box<TrajectoryBuild>>),
    /// The what-if sweep; `Some` once started a range of events at a time.
    Replay(Option<Box<WhatIfSteps>>),
    /// The allocated bytes per call site, and the live memory by category.
    CallSites,
    /// The identity; `Some` once its trace events are collected a range at a time.
    Identity(Option<Box<IdentityScan>>),
}

/// One device's facts while they are made: [`SnapshotFacts`] with the parts still missing.
struct DeviceFacts {
    facts: SnapshotFacts,
    /// Index of the device's analysis in the analyses.
    analysis: usize,
    /// Index of the device in the snapshot's devices.
    device: usize,
}

impl FactsBuild {
    /// Does the next part of the work on `snapshot` and its `analyses` (always the same ones);
    /// true once every device's facts are made ([`FactsBuild::into_facts`]).
    pub fn step(&mut self, snapshot: &AllocatorSnapshot, analyses: &[DeviceAnalysis]) -> bool {
        let Some((mut device, part)) = self.current.take() else {
            // Start the next device that has an analysis: its state at the end and the numbers.
            while let Some(state) = snapshot.devices.get(self.next_device) {
                self.next_device += 1;
                if let Some(started) = start_device(snapshot, state, analyses) {
                    let started = DeviceFacts {
                        device: self.next_device - 1,
                        ..started
                    };
                    self.current = Some((started, FactsPart::History(None)));
                    return false;
                }
            }
            return true;
        };
        // Both are there for the same snapshot and analyses (a device they lack is dropped).
        let (Some(analysis), Some(state)) = (
            analyses.get(device.analysis),
            snapshot.devices.get(device.device),
        ) else {
            return false;
        };
        let travel = &analysis.travel;
        let facts = &mut device.facts;
        let next = match part {
            FactsPart::History(history) => {
                // The history up to the failure the rules judge (the last OOM), else the whole
                // trace.
                let history = history.map_or_else(
                    || {
                        let events_per_step = if self.parts_in_one_step {
                            usize::MAX
                        } else {
                            trajectory::HISTORY_EVENTS_PER_STEP
                        };
                        let failure = facts.oom.as_ref().map(|o| o.event_index);
                        TrajectoryBuild::new(failure, events_per_step)
                    },
                    |history| *history,
                );
                match history.step(travel) {
                    Step::Done(trajectory) => {
                        facts.trajectory = trajectory;
                        Some(FactsPart::Replay(None))
                    }
                    Step::Pending(history) => Some(FactsPart::History(Some(Box::new(history)))),
                }
            }
            FactsPart::Replay(sweep) => {
                // One replay of the history under the sweep of candidate settings serves both
                // the reports' what-if table and, for a recorded failure, the proof every
                // allocator-setting recommendation must stand on (a replay error or a trace too
                // long to replay here leaves the settings unproven, and says why).
                let swept = match sweep {
                    _ if self.parts_in_one_step => Step::Done(what_if_sweep(travel)),
                    Some(steps) => sweep_step(travel, steps),
                    None => match sweep_request(travel) {
                        Some(request) => sweep_step(travel, Box::new(WhatIfSteps::new(request))),
                        None => Step::Done(None),
                    },
                };
                match swept {
                    Step::Done(what_if) => {
                        facts.what_if = what_if;
                        facts.replay = facts.oom.as_ref().and_then(|_| match &facts.what_if {
                            Some(named) => Some(proof::from_what_if_of(&named.report, travel)),
                            None => proof::replay_trace(travel, facts.device_index).ok(),
                        });
                        Some(FactsPart::CallSites)
                    }
                    Step::Pending(steps) => Some(FactsPart::Replay(Some(steps))),
                }
            }
            FactsPart::CallSites => {
                facts.allocated_by_call_site = allocated_by_call_site(snapshot, state);
                // Where the live memory went at the failure the rules judge (the last OOM).
                facts.breakdown = Some(Arc::new(categories::breakdown(
                    travel,
                    facts.oom.as_ref().map(|o| o.event_index),
                )));
                Some(FactsPart::Identity(None))
            }
            FactsPart::Identity(scan) => {
                let events_per_step = if self.parts_in_one_step {
                    usize::MAX
                } else {
                    IDENTITY_EVENTS_PER_STEP
                };
                match identity_step(snapshot, state, scan, events_per_step) {
                    Step::Done(identity) => {
                        facts.identity = identity;
                        None
                    }
                    Step::Pending(scan) => Some(FactsPart::Identity(Some(scan))),
                }
            }
        };
        match next {
            Some(part) => self.current = Some((device, part)),
            None => self.done.push(device.facts),
        }
        false
    }

    /// The facts made, one per device with an analysis (all of them once [`FactsBuild::step`]
    /// said it is done).
    pub fn into_facts(self) -> Vec<SnapshotFacts> {
        self.done
    }
}

/// A device's facts with the numbers of its final state; the rest is made by later steps.
/// `None` for a device without an analysis.
fn start_device(
    snapshot: &AllocatorSnapshot,
    device: &DeviceAllocState,
    analyses: &[DeviceAnalysis],
) -> Option<DeviceFacts> {
    let analysis = analyses
        .iter()
        .position(|a| a.travel.device() == device.device)?;
    let travel = &analyses.get(analysis)?.travel;
    let state = travel.state_at(travel.len());
    let report = fragmentation::analyze(&state);
    let oom = analyses
        .get(analysis)?
        .ooms
        .last()
        .map(SnapshotOom::from_explanation);
    Some(DeviceFacts {
        facts: SnapshotFacts {
            name: snapshot.name.clone(),
            device_index: device.device,
            reserved_bytes: report.device.reserved_bytes,
            allocated_bytes: report.device.allocated_bytes,
            largest_free_block_bytes: report.device.largest_free_bytes,
            oom,
            expandable_segments: snapshot
                .settings
                .as_ref()
                .and_then(|s| s.expandable_segments),
            allocated_by_call_site: Vec::new(),
            final_state: Some(Arc::new(state)),
            identity: SnapshotIdentity::default(),
            trajectory: None,
            replay: None,
            what_if: None,
            breakdown: None,
        },
        analysis,
        device: 0,
    })
}

/// Allocated bytes per call site of `device`'s blocks, largest first (at most
/// [`MAX_CALL_SITES`]).
fn allocated_by_call_site(
    snapshot: &AllocatorSnapshot,
    device: &DeviceAllocState,
) -> Vec<(String, u64)> {
    let mut by_site: HashMap<String, u64> = HashMap::new();
    for segment in snapshot.device_segments(device) {
        for block in snapshot.segment_blocks(segment) {
            if block.state == BlockState::ActiveAllocated {
                *by_site
                    .entry(crate::analysis::frames::user_call_site(
                        snapshot,
                        block.stack,
                    ))
                    .or_default() += block.size_bytes;
            }
        }
    }
    let mut sites: Vec<(String, u64)> = by_site.into_iter().collect();
    sites.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    sites.truncate(MAX_CALL_SITES);
    sites
}

/// The sweep of candidate settings (`analysis::replay::sweep_candidates`) replayed over the
/// device's trace, for reports and the diagnosis's proof; `None` without an allocation history,
/// for a trace longer than a diagnosis replays ([`proof::too_long_to_replay`]), or when the
/// replay could not be made: reports then simply have no table, and `vramscope whatif` says why.
fn what_if_sweep(travel: &TimeTravel) -> Option<NamedWhatIf> {
    let report = what_if(travel, &sweep_request(travel)?, &|_| true).ok()?;
    Some(named_what_if(travel, report))
}

/// The next range of events of [`what_if_sweep`]'s replays: the sweep once it is done
/// (`None` where [`what_if_sweep`] gives none), else the steps to go on with.
fn sweep_step(
    travel: &TimeTravel,
    mut steps: Box<WhatIfSteps>,
) -> Step<Option<NamedWhatIf>, Box<WhatIfSteps>> {
    match steps.step(travel) {
        Ok(Some(report)) => Step::Done(Some(named_what_if(travel, report))),
        Ok(None) => Step::Pending(steps),
        Err(_) => Step::Done(None),
    }
}

/// The sweep's request for `travel`'s device; `None` without an allocation history or for a
/// trace longer than a diagnosis replays.
fn sweep_request(travel: &TimeTravel) -> Option<WhatIfRequest> {
    if travel.is_empty() || proof::too_long_to_replay(travel).is_some() {
        return None;
    }
    Some(WhatIfRequest {
        device: travel.device(),
        candidates: Vec::new(),
        cap_bytes: None,
        device_memory_bytes: None,
    })
}

fn named_what_if(travel: &TimeTravel, report: WhatIfReport) -> NamedWhatIf {
    let snapshot = travel.snapshot();
    NamedWhatIf {
        name: snapshot.name.clone(),
        snapshot: Arc::clone(snapshot),
        report: Arc::new(report),
    }
}

/// Trace events whose (time, address) pairs an identity step of the web page collects: a 1 GB
/// snapshot's 13.3 M in one step took ~350 ms of the page's thread, and 2^20 per step still
/// 56-70 ms at 264.5 MB (profiled).
const IDENTITY_EVENTS_PER_STEP: usize = 1 << 19;

/// The (time, address) pairs of a device's trace collected so far for its identity.
struct IdentityScan {
    trace_events: TraceEventCollector,
    /// Events looked at so far.
    next: usize,
}

/// The device's trace times and addresses, segments and allocator settings (the file time is
/// left to whoever read the file), collected `events_per_step` trace events at a time: the
/// identity once every event is looked at, else the scan to go on with.
fn identity_step(
    snapshot: &AllocatorSnapshot,
    device: &DeviceAllocState,
    scan: Option<Box<IdentityScan>>,
    events_per_step: usize,
) -> Step<SnapshotIdentity, Box<IdentityScan>> {
    let trace = device.trace.and_then(|i| snapshot.traces.get(i));
    let mut scan = scan.unwrap_or_else(|| {
        Box::new(IdentityScan {
            trace_events: TraceEventCollector::default(),
            next: 0,
        })
    });
    if let Some(t) = trace {
        let to = scan.next.saturating_add(events_per_step).min(t.len());
        for i in scan.next..to {
            if let (Some(time), Some(&address)) = (t.time_us(i), t.addresses.get(i)) {
                scan.trace_events.add((time, address));
            }
        }
        scan.next = to;
        if to < t.len() {
            return Step::Pending(scan);
        }
    }
    let trace_events = scan.trace_events.finish();
    let settings = snapshot.settings.clone();
    let ring_full = match (
        trace,
        settings.as_ref().and_then(|s| s.trace_alloc_max_entries),
    ) {
        (Some(t), Some(max)) => t.len() as u64 >= max,
        _ => false,
    };
    let trace_wrapped = ring_full
        || settings
            .as_ref()
            .and_then(|s| s.trace_alloc_overflowed)
            .unwrap_or(false);
    let mut segments: Vec<(u64, u64)> = snapshot
        .device_segments(device)
        .iter()
        .map(|s| (s.address, s.total_bytes))
        .collect();
    segments.sort_unstable();
    Step::Done(SnapshotIdentity {
        last_trace_time_us: trace_events.last().map(|e| e.0),
        file_modified_ms: None,
        trace_events,
        trace_wrapped,
        segments,
        settings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each step of [`FactsBuild`] makes one part of one device's facts (at most a range of
    /// events of the what-if sweep's replays), so the web page gets its turn between parts; run
    /// to the end they are the facts [`facts`] gives (the desktop's, with the sweep in one step).
    #[test]
    fn facts_are_made_a_part_of_a_device_at_a_time() {
        let snapshot = Arc::new(crate::test_fixtures::pytorch_snapshot("frag_oom.pickle"));
        let analyses = snapshot_analysis::analyze(&snapshot);
        assert!(!analyses.is_empty());
        let sweeps = || crate::analysis::replay::WHAT_IF_CALLS.with(std::cell::Cell::get);
        let settings = || crate::analysis::replay::SETTINGS_REPLAYED.with(std::cell::Cell::get);
        let events = || crate::analysis::replay::EVENTS_REPLAYED.with(std::cell::Cell::get);
        let (sweeps_before, settings_before) = (sweeps(), settings());
        let mut build = FactsBuild::default();
        let (mut steps, mut most_events_in_a_step) = (0, 0);
        loop {
            let before = events();
            let done = build.step(&snapshot, &analyses);
            most_events_in_a_step = most_events_in_a_step.max(events() - before);
            steps += 1;
            if done {
                break;
            }
            assert!(steps < 10_000, "never done");
        }
        let in_steps = build.into_facts();
        // One sweep per device; its replays a range of events per step.
        assert_eq!(sweeps() - sweeps_before, analyses.len());
        assert!(most_events_in_a_step > 0);
        assert!(most_events_in_a_step <= crate::analysis::replay::EVENTS_PER_STEP + 64);
        let settings_replayed = settings() - settings_before;
        // Per device: its final state, history (three steps here: the range of events, the
        // iterations found from the live set's falls, their extremes), the sweep's plan, at
        // least one step per replayed setting (self-check and recorded included), call sites
        // and identity; then one step that finds nothing left.
        assert!(steps > 7 * analyses.len() + settings_replayed);
        assert!(settings_replayed >= 3 * analyses.len());
        assert!(in_steps.iter().any(|f| f.replay.is_some()));
        assert_eq!(format!("{in_steps:?}"), format!("{:?}", facts(&snapshot)));
    }

    /// The identity collected a range of events per step (the web page's way) is the one made
    /// in one step, and no step looks at more events than asked.
    #[test]
    fn an_identity_made_in_ranges_of_events_is_the_one_made_in_one_go() {
        let snapshot = crate::test_fixtures::pytorch_snapshot("frag_oom.pickle");
        let device = &snapshot.devices[0];
        let Step::Done(in_one_go) = identity_step(&snapshot, device, None, usize::MAX) else {
            panic!("one step looks at every event");
        };
        assert!(!in_one_go.trace_events.is_empty());
        for events_per_step in [1, 7, 1000] {
            let mut scan = None;
            let mut steps = 0;
            let in_ranges = loop {
                match identity_step(&snapshot, device, scan, events_per_step) {
                    Step::Done(identity) => break identity,
                    Step::Pending(more) => {
                        assert_eq!(more.next, (steps + 1) * events_per_step);
                        scan = Some(more);
                    }
                }
                steps += 1;
            };
            assert!(steps >= in_one_go.trace_events.len() / events_per_step);
            assert_eq!(format!("{in_ranges:?}"), format!("{in_one_go:?}"));
        }
    }
}
