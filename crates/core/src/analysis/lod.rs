//! Level-of-detail pyramids (min/max per bucket) so that long timelines draw quickly.
//!
//! A 24-hour capture of 8 GPUs at 250 ms holds 2.76 million samples; a plot is a couple of
//! thousand pixels wide. Handing every sample to the plot costs tens of milliseconds per frame
//! (`docs/sources.md` § "Measured": about 30 ns per point in egui_plot 0.38), so the timeline asks
//! a [`MinMaxPyramid`] which
//! samples to draw: for each bucket of consecutive samples it keeps the index of the lowest and the
//! highest value, at bucket sizes 4, 8, 16, … samples. Drawing the min and the max of every bucket
//! keeps every peak and every dip visible (unlike averaging or striding), and because the result is
//! a list of *indices*, a caller can look up any aligned series at those samples (the stacked
//! per-process view does exactly that).
//!
//! The pyramid is built once per series and extended incrementally as live samples arrive; only
//! complete buckets are stored, and the incomplete tail is covered by finer levels at query time.
//! Memory: one pair of `u32` per bucket, i.e. about 4 bytes per sample over all levels.

use std::ops::Range;

/// Smallest stored bucket, as a power of two: buckets of 4 samples. Smaller pieces are emitted as
/// raw samples, which costs at most 3 points per gap.
const FINEST_LEVEL_LOG2: u32 = 2;

/// The lowest and the highest sample of one bucket, as indices into the series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MinMaxBucket {
    min_index: u32,
    max_index: u32,
}

/// Min/max pyramid over one series of values in time order.
///
/// The pyramid does not own the values: every method takes the series as a slice, which must be
/// the same series it was built from (extended at the end only). Values should be finite; a NaN
/// never wins a comparison, so it is simply never chosen as a min or max.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MinMaxPyramid {
    /// `levels[k]` holds complete buckets of `1 << (k + FINEST_LEVEL_LOG2)` samples, in order.
    levels: Vec<Vec<MinMaxBucket>>,
    /// Number of values the pyramid has seen.
    len: usize,
}

impl MinMaxPyramid {
    /// Builds the pyramid for a whole series.
    pub fn build(values: &[f64]) -> Self {
        let mut pyramid = MinMaxPyramid::default();
        pyramid.extend(values);
        pyramid
    }

    /// Number of values covered.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the pyramid covers no values.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Brings the pyramid up to date after `values` grew at the end. Costs O(new values).
    ///
    /// If `values` is shorter than what the pyramid has seen (the series was replaced), the
    /// pyramid is rebuilt from scratch instead.
    pub fn extend(&mut self, values: &[f64]) {
        if values.len() < self.len {
            *self = MinMaxPyramid::default();
        }
        // Indices are stored as u32: clamp so that an absurdly long series degrades to "not
        // covered" rather than wrapping around.
        let len = values.len().min(u32::MAX as usize);
        self.len = len;
        let finest_size = 1usize << FINEST_LEVEL_LOG2;
        let mut level = 0;
        loop {
            let complete_buckets = len >> (level as u32 + FINEST_LEVEL_LOG2);
            if complete_buckets == 0 {
                self.levels.truncate(level);
                break;
            }
            if self.levels.len() == level {
                self.levels.push(Vec::new());
            }
            let already = self.levels[level].len();
            for bucket in already..complete_buckets {
                let merged = if level == 0 {
                    let start = bucket * finest_size;
                    bucket_of_raw(values, start..start + finest_size)
                } else {
                    let finer = &self.levels[level - 1];
                    merge(values, finer[2 * bucket], finer[2 * bucket + 1])
                };
                self.levels[level].push(merged);
            }
            level += 1;
        }
    }

    /// Appends to `out` the indices (strictly increasing) of the samples in `range` that draw the
    /// series faithfully with at most about `2 * max_buckets` points.
    ///
    /// When the range holds at most `2 * max_buckets` samples, every index is returned. Otherwise
    /// the coarsest useful bucket size is chosen and the min and max sample of every bucket is
    /// returned, in time order; the ends of the range, where buckets do not line up, are covered
    /// by finer buckets, which adds at most a few points per pyramid level.
    pub fn select(
        &self,
        values: &[f64],
        range: Range<usize>,
        max_buckets: usize,
        out: &mut Vec<u32>,
    ) {
        let end = range.end.min(self.len).min(values.len());
        let start = range.start.min(end);
        let count = end - start;
        let max_buckets = max_buckets.max(1);
        if count <= 2 * max_buckets || self.levels.is_empty() {
            out.extend((start..end).map(|i| i as u32));
            return;
        }
        // Coarsest level allowed: the smallest bucket size that keeps the bucket count in budget.
        let mut target_log2 = FINEST_LEVEL_LOG2;
        while (count >> target_log2) > max_buckets {
            target_log2 += 1;
        }
        let target_level = (target_log2 - FINEST_LEVEL_LOG2) as usize;

        let mut i = start;
        while i < end {
            match self.level_at(i, end, target_level) {
                Some(level) => {
                    let size = bucket_size(level);
                    let bucket = self.levels[level][i / size];
                    let first = bucket.min_index.min(bucket.max_index);
                    let second = bucket.min_index.max(bucket.max_index);
                    out.push(first);
                    if second != first {
                        out.push(second);
                    }
                    i += size;
                }
                None => {
                    out.push(i as u32);
                    i += 1;
                }
            }
        }
    }

    /// The stored level to use at position `i`: the coarsest level ≤ `max_level` whose bucket
    /// starts at `i`, ends by `end` and is complete. `None` means "emit the raw sample".
    fn level_at(&self, i: usize, end: usize, max_level: usize) -> Option<usize> {
        let top = max_level.min(self.levels.len().checked_sub(1)?);
        (0..=top).rev().find(|&level| {
            let size = bucket_size(level);
            i.is_multiple_of(size) && i + size <= end && (i / size) < self.levels[level].len()
        })
    }
}

/// Number of samples in one bucket of stored level `level`.
fn bucket_size(level: usize) -> usize {
    1usize << (level as u32 + FINEST_LEVEL_LOG2)
}

fn bucket_of_raw(values: &[f64], range: Range<usize>) -> MinMaxBucket {
    let mut bucket = MinMaxBucket {
        min_index: range.start as u32,
        max_index: range.start as u32,
    };
    for i in range {
        if values[i] < values[bucket.min_index as usize] {
            bucket.min_index = i as u32;
        }
        if values[i] > values[bucket.max_index as usize] {
            bucket.max_index = i as u32;
        }
    }
    bucket
}

fn merge(values: &[f64], left: MinMaxBucket, right: MinMaxBucket) -> MinMaxBucket {
    MinMaxBucket {
        min_index: if values[right.min_index as usize] < values[left.min_index as usize] {
            right.min_index
        } else {
            left.min_index
        },
        max_index: if values[right.max_index as usize] > values[left.max_index as usize] {
            right.max_index
        } else {
            left.max_index
        },
    }
}

/// Indices of the samples to consider for the x range `[x_min, x_max]` of a series whose `xs`
/// are in ascending order: those inside the range plus one on each side, so that lines enter and
/// leave the view instead of stopping at its edge.
pub fn visible_index_range(xs: &[f64], x_min: f64, x_max: f64) -> Range<usize> {
    let first_inside = xs.partition_point(|&x| x < x_min);
    let first_after = xs.partition_point(|&x| x <= x_max);
    first_inside.saturating_sub(1)..(first_after + 1).min(xs.len())
}

/// Index of the sample whose x is nearest to `x` in ascending `xs`; `None` when `xs` is empty.
/// This is the timeline's hover lookup: O(log n), where egui_plot's own hover scans every point.
pub fn nearest_index(xs: &[f64], x: f64) -> Option<usize> {
    if xs.is_empty() {
        return None;
    }
    let after = xs.partition_point(|&v| v < x);
    if after == 0 {
        return Some(0);
    }
    if after == xs.len() {
        return Some(xs.len() - 1);
    }
    let before = after - 1;
    if (x - xs[before]) <= (xs[after] - x) {
        Some(before)
    } else {
        Some(after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic wiggly series with a few isolated spikes.
    fn series(len: usize) -> Vec<f64> {
        (0..len)
            .map(|i| {
                let base = ((i as f64) * 0.01).sin() * 100.0;
                let spike = if i % 9973 == 17 { 5000.0 } else { 0.0 };
                let dip = if i % 7919 == 3 { -5000.0 } else { 0.0 };
                base + spike + dip + (i % 7) as f64
            })
            .collect()
    }

    /// Brute-force min/max over a range, for checking.
    fn extremes(values: &[f64], range: Range<usize>) -> (f64, f64) {
        values[range]
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
                (lo.min(v), hi.max(v))
            })
    }

    #[test]
    fn small_ranges_return_every_index() {
        let values = series(100);
        let pyramid = MinMaxPyramid::build(&values);
        let mut out = Vec::new();
        pyramid.select(&values, 10..60, 100, &mut out);
        assert_eq!(out, (10..60).map(|i| i as u32).collect::<Vec<_>>());
    }

    #[test]
    fn selection_is_bounded_sorted_and_keeps_extremes() {
        let values = series(1_000_003);
        let pyramid = MinMaxPyramid::build(&values);
        for (range, max_buckets) in [
            (0..values.len(), 1000),
            (12_345..987_654, 1500),
            (500..40_000, 333),
        ] {
            let mut out = Vec::new();
            pyramid.select(&values, range.clone(), max_buckets, &mut out);
            assert!(
                out.len() <= 2 * max_buckets + 64,
                "{} points for {max_buckets} buckets",
                out.len()
            );
            assert!(
                out.windows(2).all(|w| w[0] < w[1]),
                "indices strictly increasing"
            );
            assert!(out.iter().all(|&i| range.contains(&(i as usize))));
            let (lo, hi) = extremes(&values, range.clone());
            let picked: Vec<f64> = out.iter().map(|&i| values[i as usize]).collect();
            let (picked_lo, picked_hi) = extremes(&picked, 0..picked.len());
            assert_eq!(
                (picked_lo, picked_hi),
                (lo, hi),
                "global min and max survive in {range:?}"
            );
        }
    }

    #[test]
    fn every_sample_lies_within_nearby_selected_extremes() {
        // Each sample's bucket contributes its min and max, both within one bucket of it: so for
        // every sample there is a selected sample at least as high and one at least as low nearby.
        let values = series(200_000);
        let pyramid = MinMaxPyramid::build(&values);
        let max_buckets = 500;
        let mut out = Vec::new();
        pyramid.select(&values, 0..values.len(), max_buckets, &mut out);
        let reach = (values.len() / max_buckets).next_power_of_two() * 2;
        for (j, &v) in values.iter().enumerate() {
            let lo = out.partition_point(|&i| (i as usize) + reach < j);
            let hi = out.partition_point(|&i| (i as usize) <= j + reach);
            let near = &out[lo..hi];
            assert!(
                near.iter().any(|&i| values[i as usize] >= v),
                "no selected sample above {j}"
            );
            assert!(
                near.iter().any(|&i| values[i as usize] <= v),
                "no selected sample below {j}"
            );
        }
    }

    #[test]
    fn extending_matches_building_at_once() {
        let values = series(123_457);
        let mut grown = MinMaxPyramid::default();
        for end in [0, 1, 3, 4, 5, 1000, 1001, 65_536, 65_537, 99_999, 123_457] {
            grown.extend(&values[..end]);
            assert_eq!(grown.len(), end);
        }
        assert_eq!(grown, MinMaxPyramid::build(&values));
        let mut a = Vec::new();
        let mut b = Vec::new();
        grown.select(&values, 0..values.len(), 700, &mut a);
        MinMaxPyramid::build(&values).select(&values, 0..values.len(), 700, &mut b);
        assert_eq!(a, b);
    }

    #[test]
    fn shorter_series_rebuilds() {
        let values = series(10_000);
        let mut pyramid = MinMaxPyramid::build(&values);
        pyramid.extend(&values[..5000]);
        assert_eq!(pyramid, MinMaxPyramid::build(&values[..5000]));
    }

    #[test]
    fn incomplete_tail_is_covered() {
        // 1000 samples: the top levels hold no bucket for the last 232 samples; they must still be
        // selected, via finer buckets.
        let mut values = vec![0.0; 1000];
        values[999] = 7.0;
        values[990] = -7.0;
        let pyramid = MinMaxPyramid::build(&values);
        let mut out = Vec::new();
        pyramid.select(&values, 0..1000, 10, &mut out);
        assert!(out.contains(&999) && out.contains(&990), "{out:?}");
        assert!(out.len() <= 40, "{} points", out.len());
    }

    #[test]
    fn visible_range_includes_one_neighbour_each_side() {
        let xs = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(visible_index_range(&xs, 1.5, 3.5), 1..5);
        assert_eq!(visible_index_range(&xs, -10.0, 0.5), 0..2);
        assert_eq!(visible_index_range(&xs, 4.5, 10.0), 4..6);
        assert_eq!(visible_index_range(&xs, 10.0, 20.0), 5..6);
        assert_eq!(visible_index_range(&[], 0.0, 1.0), 0..0);
    }

    #[test]
    fn nearest_index_by_binary_search() {
        let xs = [0.0, 1.0, 2.0, 10.0];
        assert_eq!(nearest_index(&xs, -5.0), Some(0));
        assert_eq!(nearest_index(&xs, 1.4), Some(1));
        assert_eq!(nearest_index(&xs, 1.6), Some(2));
        assert_eq!(nearest_index(&xs, 7.0), Some(3));
        assert_eq!(nearest_index(&xs, 50.0), Some(3));
        assert_eq!(nearest_index(&[], 1.0), None);
    }
}
