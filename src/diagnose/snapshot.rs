//! Snapshot facts for the rules, taken from a PyTorch allocator snapshot with the allocator
//! analysis (`analysis::timetravel`, `fragmentation`, `oom`): per device, what was reserved and
//! allocated, the largest cached free block, the last OOM with the numbers at that moment, the
//! live set's history up to it (`super::trajectory`), and the allocated bytes per user call site
//! (for "what grew" between two snapshots).

use std::collections::HashMap;
use std::sync::Arc;

use super::leak::{SnapshotFacts, SnapshotIdentity, SnapshotOom};
use super::{proof, trajectory};
use crate::analysis::timetravel::TimeTravel;
use crate::analysis::{fragmentation, oom};
use crate::model::allocator::{AllocatorSnapshot, BlockState, DeviceAllocState, StackId};

/// Call sites listed per snapshot, largest first.
const MAX_CALL_SITES: usize = 50;

/// One [`SnapshotFacts`] per device of the snapshot.
pub fn facts(snapshot: &Arc<AllocatorSnapshot>) -> Vec<SnapshotFacts> {
    snapshot
        .devices
        .iter()
        .map(|device| {
            let travel = TimeTravel::new(Arc::clone(snapshot), device.device);
            let state = travel.state_at(travel.len());
            let report = fragmentation::analyze(&state);
            let oom = oom::explain_all(&travel)
                .last()
                .map(SnapshotOom::from_explanation);
            // The history up to the failure the rules judge (the last OOM), else the whole trace.
            let trajectory = trajectory::of_trace(&travel, oom.as_ref().map(|o| o.event_index));
            // A recorded failure with its history: replay it under the candidate settings, the
            // proof every allocator-setting recommendation must stand on. (The trace holds the
            // failure, so there is history; a replay error leaves the settings unproven.)
            let replay = oom
                .as_ref()
                .and_then(|_| proof::replay_trace(&travel, device.device).ok());
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
            SnapshotFacts {
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
            }
        })
        .collect()
}

/// The device's trace times and addresses, segments and allocator settings (the file time is
/// left to whoever read the file).
fn identity(snapshot: &AllocatorSnapshot, device: &DeviceAllocState) -> SnapshotIdentity {
    let trace = device.trace.and_then(|i| snapshot.traces.get(i));
    let mut trace_events: Vec<(i64, u64)> = trace
        .map(|t| {
            (0..t.len())
                .filter_map(|i| Some((t.time_us(i)?, *t.addresses.get(i)?)))
                .collect()
        })
        .unwrap_or_default();
    trace_events.sort_unstable();
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
