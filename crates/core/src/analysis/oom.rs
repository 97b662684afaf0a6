//! OOM explainer: why each `oom` event of a trace happened, in numbers and plain words.
//!
//! At an `oom` event the allocator had failed, after releasing its cached segments, to find a
//! free block for the request and to cudaMalloc a new segment. The state at that event (from
//! [`TimeTravel`]) shows which free blocks existed and why none could serve it: too small, on
//! another stream, in the other pool, or ruled out by `max_split_size`. These are facts; the
//! verdict (fragmentation, memory cap, capacity, ...) is `diagnose`'s, from the same numbers
//! (`crate::diagnose::oom::judge_explanation`), so that the Allocator tab and the diagnosis never
//! disagree.

use super::allocator_rules::{AllocatorRules, OversizeRejection};
use super::timetravel::{AllocatorState, BlockStatus, TimeTravel};
use crate::model::allocator::{DeviceTrace, PoolId, PoolKind, TraceAction};
use crate::model::format_bytes;

/// How many of the largest free blocks an explanation lists one by one.
pub const LISTED_FREE_BLOCKS: usize = 12;

/// Why one free block could not serve the failed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FitFailure {
    /// Same pool and stream, but smaller than the rounded request.
    TooSmall,
    /// Big enough, but cached for another stream (free blocks are per stream).
    WrongStream,
    /// Big enough, but in the other pool (small vs large) or a private pool.
    WrongPool,
    /// Big enough, but the `max_split_size` rules exclude it.
    Oversize(OversizeRejection),
    /// It would have fit: the trace and the state disagree (or the block was freed by the
    /// allocator's own retry after the OOM was decided).
    WouldFit,
}

impl FitFailure {
    /// Short words for the UI.
    pub fn describe(self) -> &'static str {
        match self {
            FitFailure::TooSmall => "too small",
            FitFailure::WrongStream => "cached for another stream",
            FitFailure::WrongPool => "in another pool",
            FitFailure::Oversize(OversizeRejection::OversizeBlockForNormalRequest) => {
                "oversize block (max_split_size) not handed to a normal request"
            }
            FitFailure::Oversize(OversizeRejection::OversizeBlockTooLarge) => {
                "oversize block more than 20 MiB larger than the request"
            }
            FitFailure::WouldFit => "would have fit",
        }
    }
}

/// One free block at the OOM and why it did not help.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreeBlockFit {
    pub address: u64,
    pub size_bytes: u64,
    pub stream: u64,
    pub pool: PoolKind,
    pub pool_id: PoolId,
    pub failure: FitFailure,
}

/// Counts and bytes of free blocks per reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FailureTally {
    pub blocks: u64,
    pub bytes: u64,
    pub largest_bytes: u64,
}

impl FailureTally {
    fn add(&mut self, size_bytes: u64) {
        self.blocks += 1;
        self.bytes += size_bytes;
        self.largest_bytes = self.largest_bytes.max(size_bytes);
    }
}

/// Everything known about one `oom` event.
#[derive(Clone, Debug, PartialEq)]
pub struct OomExplanation {
    pub device: u32,
    /// Index of the `oom` event in the device's trace.
    pub event_index: usize,
    pub time_us: Option<i64>,
    pub stream: u64,
    /// The request after rounding (what the trace records).
    pub rounded_request_bytes: u64,
    /// The new segment cudaMalloc was asked for: "Tried to allocate …" in PyTorch's message.
    pub segment_request_bytes: u64,
    pub pool: PoolKind,
    pub pool_id: PoolId,
    /// Free device memory according to cudaMemGetInfo at the OOM.
    pub device_free_bytes: Option<u64>,
    /// "Of the allocated memory X is allocated by PyTorch".
    pub allocated_bytes: u64,
    pub reserved_bytes: u64,
    /// "… and Y is reserved by PyTorch but unallocated".
    pub reserved_unallocated_bytes: u64,
    /// Cached free bytes the request could use (its pool and stream, not excluded by the
    /// `max_split_size` rules), and the largest such block.
    pub usable_free_bytes: u64,
    pub usable_largest_free_bytes: u64,
    pub too_small: FailureTally,
    pub wrong_stream: FailureTally,
    pub wrong_pool: FailureTally,
    pub oversize: FailureTally,
    /// The largest free blocks (up to [`LISTED_FREE_BLOCKS`]) and why each failed.
    pub largest_free_blocks: Vec<FreeBlockFit>,
    /// Free bytes in entirely free segments at the OOM: what releasing cached blocks
    /// (`empty_cache()`) could still return.
    pub releasable_bytes: u64,
    /// Segments PyTorch already released (cudaFree) between the previous allocation and the
    /// OOM, while retrying.
    pub released_before_oom_bytes: u64,
    /// Usable free blocks big enough for the request: more than 0 means the reconstructed state
    /// disagrees with the allocator (or the block was freed by the allocator's own retry after
    /// the OOM was decided).
    pub fitting_blocks: u64,
}

impl OomExplanation {
    /// What cudaMalloc needed at the failure: the new segment, never less than the request.
    pub fn needed_bytes(&self) -> u64 {
        self.segment_request_bytes.max(self.rounded_request_bytes)
    }
}

/// Explains every `oom` event of a device's trace.
pub fn explain_all(travel: &TimeTravel) -> Vec<OomExplanation> {
    oom_events(travel.trace())
        .into_iter()
        .map(|i| explain(travel, i))
        .collect()
}

/// Indices of the `oom` events of `trace`, in order.
pub fn oom_events(trace: &DeviceTrace) -> Vec<usize> {
    trace
        .actions
        .iter()
        .enumerate()
        .filter(|(_, action)| **action == TraceAction::Oom)
        .map(|(index, _)| index)
        .collect()
}

/// Explains the `oom` event at `event_index` (the state is the one just before it; an `oom`
/// event changes nothing).
pub fn explain(travel: &TimeTravel, event_index: usize) -> OomExplanation {
    let trace = travel.trace();
    let state = travel.state_at(event_index);
    let rounded_request_bytes = trace.sizes_bytes.get(event_index).copied().unwrap_or(0);
    let stream = trace.streams.get(event_index).copied().unwrap_or(0);
    let pool_id = trace.pool_id(event_index);
    let pool = AllocatorRules::pool_for(rounded_request_bytes);
    let released_before_oom_bytes = (0..event_index)
        .rev()
        .take_while(|&i| !matches!(trace.actions[i], TraceAction::Alloc | TraceAction::Oom))
        .filter(|&i| {
            matches!(
                trace.actions[i],
                TraceAction::SegmentFree | TraceAction::SegmentUnmap
            )
        })
        .map(|i| trace.sizes_bytes.get(i).copied().unwrap_or(0))
        .sum();
    let mut explanation = OomExplanation {
        device: travel.device(),
        event_index,
        time_us: trace.time_us(event_index),
        stream,
        rounded_request_bytes,
        segment_request_bytes: AllocatorRules::segment_size_for(rounded_request_bytes),
        pool,
        pool_id,
        device_free_bytes: trace.device_free_bytes(event_index),
        allocated_bytes: state.allocated_bytes,
        reserved_bytes: state.reserved_bytes,
        reserved_unallocated_bytes: state.reserved_bytes.saturating_sub(state.allocated_bytes),
        usable_free_bytes: 0,
        usable_largest_free_bytes: 0,
        too_small: FailureTally::default(),
        wrong_stream: FailureTally::default(),
        wrong_pool: FailureTally::default(),
        oversize: FailureTally::default(),
        largest_free_blocks: Vec::new(),
        releasable_bytes: 0,
        released_before_oom_bytes,
        fitting_blocks: 0,
    };
    explanation.fitting_blocks = classify_free_blocks(&state, travel.rules(), &mut explanation);
    explanation
}

/// Sorts every free block into a reason; returns how many would have fit.
fn classify_free_blocks(
    state: &AllocatorState,
    rules: &AllocatorRules,
    out: &mut OomExplanation,
) -> u64 {
    let mut fits = 0;
    let mut listed: Vec<FreeBlockFit> = Vec::new();
    for segment in &state.segments {
        let free_blocks = segment
            .blocks
            .iter()
            .filter(|b| b.status == BlockStatus::Free);
        let mut segment_free = 0;
        for block in free_blocks {
            segment_free += block.size_bytes;
            let same_pool = segment.pool == out.pool && segment.pool_id == out.pool_id;
            let same_stream = segment.stream == out.stream;
            let size = block.size_bytes;
            let failure = if !same_pool {
                out.wrong_pool.add(size);
                FitFailure::WrongPool
            } else if !same_stream {
                out.wrong_stream.add(size);
                FitFailure::WrongStream
            } else if let Some(rejection) =
                rules.oversize_rejection(out.rounded_request_bytes, size)
            {
                out.oversize.add(size);
                FitFailure::Oversize(rejection)
            } else {
                // A block the best-fit search could use, had it been big enough.
                out.usable_free_bytes += size;
                out.usable_largest_free_bytes = out.usable_largest_free_bytes.max(size);
                if size < out.rounded_request_bytes {
                    out.too_small.add(size);
                    FitFailure::TooSmall
                } else {
                    fits += 1;
                    FitFailure::WouldFit
                }
            };
            listed.push(FreeBlockFit {
                address: block.address,
                size_bytes: block.size_bytes,
                stream: segment.stream,
                pool: segment.pool,
                pool_id: segment.pool_id,
                failure,
            });
        }
        if segment_free == segment.size_bytes {
            out.releasable_bytes += segment_free;
        }
    }
    listed.sort_by(|a, b| {
        b.size_bytes
            .cmp(&a.size_bytes)
            .then(a.address.cmp(&b.address))
    });
    listed.truncate(LISTED_FREE_BLOCKS);
    out.largest_free_blocks = listed;
    fits
}

impl OomExplanation {
    /// What the free blocks and the device had, in plain words (no verdict): where the cached
    /// memory was, what max_split_size excluded, what the GPU had free, what releasing could
    /// still return.
    pub fn facts_text(&self) -> String {
        let request = format_bytes(self.rounded_request_bytes);
        let place = format!(
            "the {} pool on stream {:#x}",
            self.pool.as_str(),
            self.stream
        );
        let mut text = format!(
            "{} cached free in {place} for the {request} request, the largest block {}; live tensors hold {}.",
            format_bytes(self.usable_free_bytes),
            format_bytes(self.usable_largest_free_bytes),
            format_bytes(self.allocated_bytes),
        );
        let elsewhere = self.wrong_stream.bytes + self.wrong_pool.bytes + self.oversize.bytes;
        if self.wrong_stream.largest_bytes >= self.rounded_request_bytes {
            text.push_str(&format!(
                " A {} block was free on another stream.",
                format_bytes(self.wrong_stream.largest_bytes)
            ));
        } else if elsewhere > 0 {
            text.push_str(&format!(
                " Another {} was free but in other pools or streams.",
                format_bytes(elsewhere)
            ));
        }
        if self.oversize.blocks > 0 {
            text.push_str(&format!(
                " {} oversize free block(s) ({}) were excluded by max_split_size.",
                self.oversize.blocks,
                format_bytes(self.oversize.bytes)
            ));
        }
        if let Some(device_free) = self.device_free_bytes {
            text.push_str(&format!(
                " The GPU had {} free for the {} segment the allocator needed.",
                format_bytes(device_free),
                format_bytes(self.needed_bytes())
            ));
        }
        if self.releasable_bytes > 0 {
            text.push_str(&format!(
                " Releasing cached blocks could still return {}.",
                format_bytes(self.releasable_bytes)
            ));
        } else if self.released_before_oom_bytes > 0 {
            text.push_str(&format!(
                " PyTorch had already released {} of cached segments while retrying; nothing more \
                 was releasable.",
                format_bytes(self.released_before_oom_bytes)
            ));
        }
        text
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::allocator::{
        AllocatorSettings, AllocatorSnapshot, Block, BlockState, DeviceAllocState, DeviceTrace,
        Segment, StackId, StringId, TIME_UNKNOWN_US,
    };

    use crate::model::MIB;

    pub(crate) type SegmentSpec<'a> = (u64, PoolKind, &'a [(u64, BlockState)]);

    /// A snapshot of device 0 whose trace is one `oom` event.
    pub(crate) fn snapshot_with_oom(
        segments: &[SegmentSpec],
        settings: Option<AllocatorSettings>,
        request_bytes: u64,
        device_free_bytes: u64,
    ) -> Arc<AllocatorSnapshot> {
        let mut snapshot = AllocatorSnapshot {
            settings,
            ..Default::default()
        };
        let mut address = 0x7f00_0000_0000;
        for &(stream, pool, blocks) in segments {
            let first_block = snapshot.blocks.len() as u32;
            let segment_address = address;
            for &(size_bytes, state) in blocks {
                snapshot.blocks.push(Block {
                    address,
                    size_bytes,
                    requested_bytes: Some(size_bytes),
                    state,
                    stack: StackId::EMPTY,
                });
                address += size_bytes;
            }
            let total_bytes = address - segment_address;
            snapshot.segments.push(Segment {
                device: 0,
                address: segment_address,
                total_bytes,
                allocated_bytes: 0,
                active_bytes: 0,
                requested_bytes: None,
                stream,
                pool,
                pool_id: PoolId::default(),
                is_expandable: false,
                first_block,
                block_count: blocks.len() as u32,
                stack: StackId::EMPTY,
            });
            address += 64 * MIB;
        }
        snapshot.traces.push(DeviceTrace {
            device: 0,
            actions: vec![TraceAction::Oom],
            addresses: vec![0],
            sizes_bytes: vec![request_bytes],
            streams: vec![0],
            times_us: vec![TIME_UNKNOWN_US],
            stacks: vec![StackId::EMPTY],
            user_metadata: vec![StringId(0)],
            compile_context: vec![StringId(0)],
            device_free_bytes: vec![(0, device_free_bytes)],
            pool_ids: Vec::new(),
        });
        snapshot.devices.push(DeviceAllocState {
            device: 0,
            segments: 0..snapshot.segments.len(),
            trace: Some(0),
        });
        Arc::new(snapshot)
    }

    pub(crate) fn explain_only(snapshot: Arc<AllocatorSnapshot>) -> OomExplanation {
        let travel = TimeTravel::new(snapshot, 0);
        let mut all = explain_all(&travel);
        assert_eq!(all.len(), 1);
        all.remove(0)
    }

    #[test]
    fn live_tensors_filling_the_gpu_leave_only_small_blocks() {
        let e = explain_only(snapshot_with_oom(
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
        ));
        assert_eq!(e.usable_free_bytes, 4 * MIB);
        assert_eq!(e.too_small.blocks, 1);
        assert_eq!(e.allocated_bytes, 60 * MIB);
        assert_eq!(e.fitting_blocks, 0);
        let text = e.facts_text();
        assert!(text.starts_with("4.00 MiB cached free"), "{text}");
        assert!(
            text.contains("The GPU had 10.0 MiB free for the 40.0 MiB segment"),
            "{text}"
        );
    }

    #[test]
    fn a_fitting_block_on_another_stream_is_named() {
        let e = explain_only(snapshot_with_oom(
            &[
                (
                    0,
                    PoolKind::Large,
                    &[(20 * MIB, BlockState::ActiveAllocated)],
                ),
                (7, PoolKind::Large, &[(100 * MIB, BlockState::Inactive)]),
            ],
            None,
            40 * MIB,
            MIB,
        ));
        assert_eq!(e.wrong_stream.blocks, 1);
        assert_eq!(e.largest_free_blocks[0].failure, FitFailure::WrongStream);
        assert_eq!(e.releasable_bytes, 100 * MIB);
        let text = e.facts_text();
        assert!(
            text.contains("A 100 MiB block was free on another stream."),
            "{text}"
        );
        assert!(
            text.contains("Releasing cached blocks could still return 100 MiB."),
            "{text}"
        );
    }

    #[test]
    fn oversize_blocks_are_excluded_by_max_split_size() {
        let settings = AllocatorSettings {
            max_split_size_bytes: Some(50 * MIB),
            ..Default::default()
        };
        let e = explain_only(snapshot_with_oom(
            &[(
                0,
                PoolKind::Large,
                &[
                    (200 * MIB, BlockState::Inactive),
                    (10 * MIB, BlockState::ActiveAllocated),
                ],
            )],
            Some(settings),
            40 * MIB,
            MIB,
        ));
        assert_eq!(e.oversize.blocks, 1);
        assert_eq!(
            e.largest_free_blocks[0].failure,
            FitFailure::Oversize(OversizeRejection::OversizeBlockForNormalRequest)
        );
        assert_eq!(e.usable_free_bytes, 0);
        assert!(
            e.facts_text()
                .contains("1 oversize free block(s) (200 MiB) were excluded"),
            "{}",
            e.facts_text()
        );
    }

    #[test]
    fn a_block_that_fits_is_counted() {
        let e = explain_only(snapshot_with_oom(
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
        ));
        assert_eq!(e.fitting_blocks, 1);
        assert_eq!(e.largest_free_blocks[0].failure, FitFailure::WouldFit);
    }
}
