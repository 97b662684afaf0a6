//! Snapshot facts for the rules, taken from a PyTorch allocator snapshot with the allocator
//! analysis (`analysis::timetravel`, `fragmentation`, `oom`): per device, what was reserved and
//! allocated, the largest cached free block, the last OOM with the numbers at that moment, the
//! live set's history up to it (`super::trajectory`), and the allocated bytes per user call site
//! (for "what grew" between two snapshots).

use std::collections::HashMap;
use std::sync::Arc;

use super::finding::NamedWhatIf;
use super::leak::{SnapshotFacts, SnapshotIdentity, SnapshotOom};
use super::{proof, trajectory};
use crate::analysis::fragmentation;
use crate::analysis::replay::{WhatIfRequest, what_if};
use crate::analysis::snapshot_analysis::{self, DeviceAnalysis};
use crate::analysis::timetravel::TimeTravel;
use crate::model::allocator::{AllocatorSnapshot, BlockState, DeviceAllocState, StackId};

/// Call sites listed per snapshot, largest first.
const MAX_CALL_SITES: usize = 50;

/// One [`SnapshotFacts`] per device of the snapshot.
pub fn facts(snapshot: &Arc<AllocatorSnapshot>) -> Vec<SnapshotFacts> {
    facts_from(snapshot, &snapshot_analysis::analyze(snapshot))
}

/// [`facts`] from the analyses already made of `snapshot` (the allocator view's, so that opening
/// a snapshot analyses its trace once).
pub fn facts_from(snapshot: &AllocatorSnapshot, analyses: &[DeviceAnalysis]) -> Vec<SnapshotFacts> {
    snapshot
        .devices
        .iter()
        .filter_map(|device| {
            let analysis = analyses
                .iter()
                .find(|a| a.travel.device() == device.device)?;
            let travel = &analysis.travel;
            let state = travel.state_at(travel.len());
            let report = fragmentation::analyze(&state);
            let oom = analysis.ooms.last().map(SnapshotOom::from_explanation);
            // The history up to the failure the rules judge (the last OOM), else the whole trace.
            let trajectory = trajectory::of_trace(travel, oom.as_ref().map(|o| o.event_index));
            // One replay of the history under the sweep of candidate settings serves both the
            // reports' what-if table and, for a recorded failure, the proof every
            // allocator-setting recommendation must stand on (a replay error or a trace too long
            // to replay here leaves the settings unproven, and says why).
            let what_if = what_if_sweep(travel);
            let replay = oom.as_ref().and_then(|_| match &what_if {
                Some(named) => Some(proof::from_what_if(&named.report)),
                None => proof::replay_trace(travel, device.device).ok(),
            });
            let mut by_site: HashMap<String, u64> = HashMap::new();
            for segment in snapshot.device_segments(device) {
                for block in snapshot.segment_blocks(segment) {
                    if block.state == BlockState::ActiveAllocated {
                        *by_site.entry(call_site(snapshot, block.stack)).or_default() +=
                            block.size_bytes;
                    }
                }
            }
            let mut allocated_by_call_site: Vec<(String, u64)> = by_site.into_iter().collect();
            allocated_by_call_site.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            allocated_by_call_site.truncate(MAX_CALL_SITES);
            Some(SnapshotFacts {
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
                allocated_by_call_site,
                final_state: Some(Arc::new(state)),
                identity: identity(snapshot, device),
                trajectory,
                replay,
                what_if,
            })
        })
        .collect()
}

/// The sweep of candidate settings (`analysis::replay::sweep_candidates`) replayed over the
/// device's trace, for reports and the diagnosis's proof; `None` without an allocation history,
/// for a trace longer than a diagnosis replays ([`proof::too_long_to_replay`]), or when the
/// replay could not be made: reports then simply have no table, and `vramscope whatif` says why.
fn what_if_sweep(travel: &TimeTravel) -> Option<NamedWhatIf> {
    if travel.is_empty() || proof::too_long_to_replay(travel).is_some() {
        return None;
    }
    let request = WhatIfRequest {
        device: travel.device(),
        candidates: Vec::new(),
        cap_bytes: None,
        device_memory_bytes: None,
    };
    let report = what_if(travel, &request, &|_| true).ok()?;
    let snapshot = travel.snapshot();
    Some(NamedWhatIf {
        name: snapshot.name.clone(),
        snapshot: Arc::clone(snapshot),
        report: Arc::new(report),
    })
}

/// The device's trace times and addresses, segments and allocator settings (the file time is
/// left to whoever read the file).
fn identity(snapshot: &AllocatorSnapshot, device: &DeviceAllocState) -> SnapshotIdentity {
    let trace = device.trace.and_then(|i| snapshot.traces.get(i));
    let mut trace_events: Vec<(i64, u64)> = Vec::new();
    if let Some(t) = trace {
        trace_events.reserve_exact(t.len());
        trace_events
            .extend((0..t.len()).filter_map(|i| Some((t.time_us(i)?, *t.addresses.get(i)?))));
    }
    sort_trace_events(&mut trace_events);
    trace_events.dedup();
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
    SnapshotIdentity {
        last_trace_time_us: trace_events.iter().map(|e| e.0).max(),
        file_modified_ms: None,
        trace_events,
        trace_wrapped,
        segments,
        settings,
    }
}

/// Sorts `(time, address)` pairs taken from a trace in its order. Traces record events in time
/// order, so then only events with the same time need sorting (by address): linear time on
/// millions of events instead of a full sort.
fn sort_trace_events(events: &mut [(i64, u64)]) {
    if events.windows(2).all(|w| w[0].0 <= w[1].0) {
        for same_time in events.chunk_by_mut(|a, b| a.0 == b.0) {
            same_time.sort_unstable();
        }
    } else {
        events.sort_unstable();
    }
}

/// The innermost frame of user code (a `.py` file outside torch and site-packages), as
/// `file.py:line name`; the innermost Python frame when all are library code.
fn call_site(snapshot: &AllocatorSnapshot, stack: StackId) -> String {
    let frames: Vec<_> = snapshot
        .frames
        .stack(stack)
        .iter()
        .filter_map(|&id| snapshot.frames.frame(id))
        .filter(|f| snapshot.string(f.filename).ends_with(".py"))
        .collect();
    let is_library = |filename: &str| {
        filename.contains("/torch/")
            || filename.contains("site-packages")
            || filename.starts_with('<')
    };
    let chosen = frames
        .iter()
        .find(|f| !is_library(snapshot.string(f.filename)))
        .or_else(|| frames.first());
    match chosen {
        Some(f) => {
            let file = snapshot.string(f.filename);
            let base = file.rsplit('/').next().unwrap_or(file);
            format!("{base}:{} {}", f.line, snapshot.string(f.name))
        }
        None => "(no stack recorded)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_events_sort_like_a_full_sort_in_time_order_or_not() {
        let in_time_order = vec![(1, 0x300), (1, 0x100), (2, 0x200), (2, 0x200), (5, 0x50)];
        let shuffled = vec![(5, 0x50), (1, 0x300), (2, 0x200), (1, 0x100), (2, 0x200)];
        for events in [in_time_order, shuffled] {
            let mut expected = events.clone();
            expected.sort_unstable();
            let mut sorted = events;
            sort_trace_events(&mut sorted);
            assert_eq!(sorted, expected);
        }
    }
}
