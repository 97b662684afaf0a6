//! The PyTorch CUDA caching allocator's sizing rules: rounding, pools, segment sizes, splitting
//! and the "oversize" filters of its best-fit search.
//!
//! Time travel needs them to know how big a block was when the trace only recorded the size the
//! caller asked for; the OOM explainer needs them to say which free block could have served a
//! failed request. The constants and rules are those of `c10/cuda/CUDACachingAllocator.cpp`
//! (`round_size`, `get_pool`, `get_allocation_size`, `get_free_block`, `should_split`) in
//! github.com/pytorch/pytorch; `docs/sources.md` § "The caching allocator's rules".

use crate::model::allocator::{AllocatorSettings, PoolKind};

/// "all sizes are rounded to at least 512 bytes".
pub const MIN_BLOCK_BYTES: u64 = 512;
/// "largest 'small' allocation is 1 MiB".
pub const SMALL_SIZE_BYTES: u64 = 1 << 20;
/// "'small' allocations are packed in 2 MiB blocks".
pub const SMALL_BUFFER_BYTES: u64 = 2 << 20;
/// "'large' allocations may be packed in 20 MiB blocks"; also how far an oversize block may be
/// larger than the request it serves.
pub const LARGE_BUFFER_BYTES: u64 = 20 << 20;
/// "allocations between 1 and 10 MiB may use kLargeBuffer".
pub const MIN_LARGE_ALLOC_BYTES: u64 = 10 << 20;
/// "round up large allocations to 2 MiB".
pub const ROUND_LARGE_BYTES: u64 = 2 << 20;

/// Number of `roundup_power2_divisions` intervals: one per power of two from 1 MiB to 64 GiB.
pub const ROUNDUP_INTERVALS: usize = 16;

/// Why a free block of the right pool could not serve a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OversizeRejection {
    /// The request is below `max_split_size` but the block is at or above it: PyTorch never
    /// hands out an unsplittable oversize block for a normal request.
    OversizeBlockForNormalRequest,
    /// The request is oversize and the block exceeds it by `max_non_split_rounding_mb` (20 MiB
    /// unless set) or more.
    OversizeBlockTooLarge,
}

/// The allocator settings that change sizing, read from a snapshot's `allocator_settings`.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocatorRules {
    /// `max_split_size`; `None` when unlimited (PyTorch writes -1).
    pub max_split_size_bytes: Option<u64>,
    /// Divisions per power-of-two interval (index 0 = up to 2 MiB, 15 = 32 GiB and up); 0 = off.
    pub roundup_power2_divisions: [u64; ROUNDUP_INTERVALS],
    /// `expandable_segments`: segments grow by mapping pages, and blocks always split.
    pub expandable_segments: bool,
    /// `max_non_split_rounding_mb` in bytes: how much larger than an oversize request an
    /// unsplittable cached block may be and still serve it (20 MiB unless set).
    pub max_non_split_rounding_bytes: u64,
    /// `garbage_collection_threshold` (0 = off): with a per-process cap, cached blocks are
    /// released oldest first once reserved memory passes this fraction of the cap.
    pub garbage_collection_threshold: f64,
    /// `large_segment_size_mb` in bytes: the segment made for 1–10 MiB requests, and the page
    /// an expandable segment of the large pool maps (20 MiB unless set).
    pub large_segment_bytes: u64,
}

impl Default for AllocatorRules {
    /// PyTorch's defaults: no split limit, plain 512-byte rounding, classic segments.
    fn default() -> Self {
        AllocatorRules {
            max_split_size_bytes: None,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            expandable_segments: false,
            max_non_split_rounding_bytes: LARGE_BUFFER_BYTES,
            garbage_collection_threshold: 0.0,
            large_segment_bytes: LARGE_BUFFER_BYTES,
        }
    }
}

impl AllocatorRules {
    /// The rules a snapshot's `allocator_settings` describe (PyTorch's defaults when absent).
    pub fn from_settings(settings: Option<&AllocatorSettings>) -> Self {
        let mut rules = AllocatorRules::default();
        let Some(settings) = settings else {
            return rules;
        };
        rules.max_split_size_bytes = settings.max_split_size_bytes;
        rules.expandable_segments = settings.expandable_segments.unwrap_or(false);
        rules.garbage_collection_threshold = settings
            .garbage_collection_threshold
            .filter(|t| t.is_finite() && *t > 0.0 && *t < 1.0)
            .unwrap_or(0.0);
        for &(interval_start_mib, divisions) in &settings.roundup_power2_divisions {
            // Keys are interval starts in MiB: 1, 2, 4, ... 32768 -> indices 0..16.
            if interval_start_mib.is_power_of_two() {
                let index = interval_start_mib.trailing_zeros() as usize;
                if let Some(slot) = rules.roundup_power2_divisions.get_mut(index) {
                    *slot = divisions;
                }
            }
        }
        rules
    }

    /// The block size the allocator reserves for a request of `requested_bytes` (`round_size`).
    pub fn round_size(&self, requested_bytes: u64) -> u64 {
        if requested_bytes < MIN_BLOCK_BYTES {
            return MIN_BLOCK_BYTES;
        }
        let divisions = self.divisions_for(requested_bytes);
        // PyTorch rounds to divisions only for more than one division (`divisions > 1`): one
        // division means plain 512-byte rounding, not the next power of two.
        if divisions > 1 && requested_bytes > MIN_BLOCK_BYTES.saturating_mul(divisions) {
            return roundup_power2_next_division(requested_bytes, divisions);
        }
        requested_bytes
            .div_ceil(MIN_BLOCK_BYTES)
            .saturating_mul(MIN_BLOCK_BYTES)
    }

    fn divisions_for(&self, size_bytes: u64) -> u64 {
        let log_size = 63 - u64::from(size_bytes.max(1).leading_zeros());
        let interval_start = 20; // log2(1 MiB)
        let index = log_size.saturating_sub(interval_start) as usize;
        self.roundup_power2_divisions[index.min(ROUNDUP_INTERVALS - 1)]
    }

    /// The pool a rounded request is served from (`get_pool`, default pools).
    pub fn pool_for(rounded_bytes: u64) -> PoolKind {
        if rounded_bytes <= SMALL_SIZE_BYTES {
            PoolKind::Small
        } else {
            PoolKind::Large
        }
    }

    /// The size of the new segment `cudaMalloc` is asked for when no cached block fits
    /// (`get_allocation_size`) under PyTorch's default `large_segment_size_mb`; this is the
    /// size PyTorch's OOM message reports.
    pub fn segment_size_for(rounded_bytes: u64) -> u64 {
        AllocatorRules::default().allocation_size(rounded_bytes)
    }

    /// `get_allocation_size` under these rules: 2 MiB for the small pool, the large segment
    /// size for 1–10 MiB requests, else the request rounded up to 2 MiB.
    pub fn allocation_size(&self, rounded_bytes: u64) -> u64 {
        if rounded_bytes <= SMALL_SIZE_BYTES {
            SMALL_BUFFER_BYTES
        } else if rounded_bytes < MIN_LARGE_ALLOC_BYTES {
            self.large_segment_bytes
        } else {
            rounded_bytes
                .div_ceil(ROUND_LARGE_BYTES)
                .saturating_mul(ROUND_LARGE_BYTES)
        }
    }

    /// The pool a whole (non-expandable) segment belongs to, judged by its size: small-pool
    /// segments are exactly `SMALL_BUFFER_BYTES`, large-pool ones at least `MIN_LARGE_ALLOC_BYTES`.
    pub fn pool_of_segment(segment_bytes: u64) -> PoolKind {
        if segment_bytes <= SMALL_BUFFER_BYTES {
            PoolKind::Small
        } else {
            PoolKind::Large
        }
    }

    /// Whether the allocator splits the `remaining_bytes` left after carving `rounded_bytes`
    /// off a free block (`should_split`).
    pub fn should_split(
        &self,
        pool: PoolKind,
        expandable: bool,
        rounded_bytes: u64,
        remaining_bytes: u64,
    ) -> bool {
        if pool == PoolKind::Small || expandable {
            remaining_bytes >= MIN_BLOCK_BYTES
        } else {
            let below_limit = self
                .max_split_size_bytes
                .is_none_or(|limit| rounded_bytes < limit);
            below_limit && remaining_bytes > SMALL_SIZE_BYTES
        }
    }

    /// Whether the best-fit search skips a big-enough free block because of the oversize rules
    /// (`get_free_block`); `None` when the block is acceptable.
    pub fn oversize_rejection(
        &self,
        rounded_bytes: u64,
        candidate_bytes: u64,
    ) -> Option<OversizeRejection> {
        let limit = self.max_split_size_bytes?;
        if rounded_bytes < limit && candidate_bytes >= limit {
            return Some(OversizeRejection::OversizeBlockForNormalRequest);
        }
        if rounded_bytes >= limit
            && candidate_bytes >= rounded_bytes.saturating_add(self.max_non_split_rounding_bytes)
        {
            return Some(OversizeRejection::OversizeBlockTooLarge);
        }
        None
    }
}

/// `roundup_power2_next_division`: powers of two stay; anything else rounds up to the next of
/// `divisions` equal steps between the surrounding powers of two.
fn roundup_power2_next_division(size_bytes: u64, divisions: u64) -> u64 {
    if size_bytes.is_power_of_two() {
        return size_bytes;
    }
    let power2_floor = 1u64 << (63 - size_bytes.leading_zeros());
    let division_shift = 63 - divisions.max(1).leading_zeros();
    let step = power2_floor >> division_shift;
    if step == 0 {
        return power2_floor << 1;
    }
    let floor = size_bytes & !(step - 1);
    if floor == size_bytes {
        size_bytes
    } else {
        floor + step
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::model::MIB;

    #[test]
    fn rounds_to_512_byte_multiples_by_default() {
        let rules = AllocatorRules::default();
        assert_eq!(rules.round_size(1), 512);
        assert_eq!(rules.round_size(512), 512);
        assert_eq!(rules.round_size(513), 1024);
        assert_eq!(rules.round_size(31 * MIB), 31 * MIB);
        assert_eq!(rules.round_size(31 * MIB + 1), 31 * MIB + 512);
    }

    #[test]
    fn power2_divisions_round_to_the_next_step() {
        let rules = AllocatorRules {
            roundup_power2_divisions: [4; ROUNDUP_INTERVALS],
            ..AllocatorRules::default()
        };
        // PyTorch only uses divisions when size > 512 * divisions: 1200 is not above 2048, so
        // plain 512-byte rounding applies.
        assert_eq!(rules.round_size(1200), 1536);
        // 5 MiB + 1 with 4 divisions: steps of 1 MiB between 4 and 8 MiB -> 6 MiB.
        assert_eq!(rules.round_size(5 * MIB + 1), 6 * MIB);
        assert_eq!(rules.round_size(8 * MIB), 8 * MIB);
    }

    #[test]
    fn one_division_means_plain_rounding() {
        // `[256:1,...]` is common: one division must not round up to the next power of two.
        let rules = AllocatorRules {
            roundup_power2_divisions: [1; ROUNDUP_INTERVALS],
            ..AllocatorRules::default()
        };
        assert_eq!(rules.round_size(300 * MIB + 1), 300 * MIB + 512);
    }

    #[test]
    fn pools_and_segment_sizes_follow_the_allocator() {
        assert_eq!(AllocatorRules::pool_for(MIB), PoolKind::Small);
        assert_eq!(AllocatorRules::pool_for(MIB + 512), PoolKind::Large);
        assert_eq!(AllocatorRules::segment_size_for(512), 2 * MIB);
        assert_eq!(AllocatorRules::segment_size_for(5 * MIB), 20 * MIB);
        // frag_oom: the trace's 31 MiB request makes PyTorch "try to allocate 32.00 MiB".
        assert_eq!(AllocatorRules::segment_size_for(31 * MIB), 32 * MIB);
    }

    #[test]
    fn large_blocks_split_only_above_one_mebibyte_of_remainder() {
        let rules = AllocatorRules::default();
        assert!(!rules.should_split(PoolKind::Large, false, 19 * MIB, MIB));
        assert!(rules.should_split(PoolKind::Large, false, 19 * MIB, MIB + 512));
        assert!(rules.should_split(PoolKind::Small, false, 512, 512));
        assert!(!rules.should_split(PoolKind::Small, false, 512, 0));
        assert!(rules.should_split(PoolKind::Large, true, 19 * MIB, 512));
        let limited = AllocatorRules {
            max_split_size_bytes: Some(100 * MIB),
            ..AllocatorRules::default()
        };
        assert!(!limited.should_split(PoolKind::Large, false, 200 * MIB, 50 * MIB));
    }

    #[test]
    fn oversize_filters_need_a_split_limit() {
        let rules = AllocatorRules::default();
        assert_eq!(rules.oversize_rejection(10 * MIB, 1000 * MIB), None);
        let limited = AllocatorRules {
            max_split_size_bytes: Some(100 * MIB),
            ..AllocatorRules::default()
        };
        assert_eq!(
            limited.oversize_rejection(10 * MIB, 200 * MIB),
            Some(OversizeRejection::OversizeBlockForNormalRequest)
        );
        assert_eq!(
            limited.oversize_rejection(150 * MIB, 170 * MIB),
            Some(OversizeRejection::OversizeBlockTooLarge)
        );
        assert_eq!(limited.oversize_rejection(150 * MIB, 160 * MIB), None);
    }
}
