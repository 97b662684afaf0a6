//! What the fleet view draws for each GPU of a large capture: its occupied memory as a share of
//! the GPU over time (with a min/max pyramid, so that a strip a few hundred pixels wide draws a
//! day of 15-second steps from a few hundred points) and its peak.
//!
//! Strips grow incrementally as a live capture grows; nothing here judges: health and growth
//! come from `diagnose::fleet`.

use crate::model::{DeviceSeries, UnixMs};

use super::lod::MinMaxPyramid;

/// One GPU's occupied fraction over time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetStrip {
    /// Times of the samples that had a memory reading.
    pub t_ms: Vec<UnixMs>,
    /// Occupied (used + driver-reserved) share of the GPU at those times, 0 to 1.
    pub fraction: Vec<f64>,
    pub pyramid: MinMaxPyramid,
    /// Highest occupied bytes and the GPU size at that moment.
    pub peak_occupied_bytes: u64,
    pub peak_total_bytes: u64,
    /// Samples of the device already folded in.
    samples_seen: usize,
}

impl FleetStrip {
    /// The strip of a device's samples.
    pub fn build(series: &DeviceSeries) -> Self {
        let mut strip = FleetStrip::default();
        strip.extend(series);
        strip
    }

    /// Folds in the samples the series gained since the last call (a series replaced by a
    /// shorter one starts the strip over). Costs O(new samples).
    pub fn extend(&mut self, series: &DeviceSeries) {
        if series.len() < self.samples_seen {
            *self = FleetStrip::default();
        }
        for sample in series.iter_from(self.samples_seen) {
            let Some(memory) = sample.memory else {
                continue;
            };
            self.t_ms.push(sample.t_ms);
            self.fraction.push(memory.occupied_fraction());
            if memory.occupied_bytes() > self.peak_occupied_bytes {
                self.peak_occupied_bytes = memory.occupied_bytes();
                self.peak_total_bytes = memory.total_bytes;
            }
        }
        self.samples_seen = series.len();
        self.pyramid.extend(&self.fraction);
    }

    /// Samples of the device folded in so far (with or without memory).
    pub fn samples_seen(&self) -> usize {
        self.samples_seen
    }

    /// The peak as a share of the GPU (0 when the size is unknown).
    pub fn peak_fraction(&self) -> f64 {
        if self.peak_total_bytes == 0 {
            0.0
        } else {
            self.peak_occupied_bytes as f64 / self.peak_total_bytes as f64
        }
    }

    /// The newest occupied share.
    pub fn latest_fraction(&self) -> Option<f64> {
        self.fraction.last().copied()
    }

    /// Appends to `out` the indices of the samples that draw the strip faithfully `width_px`
    /// pixels wide: every sample when few, else the min and max of each two-pixel bucket (about
    /// one point per pixel: a strip is a few pixels high, so finer buckets add vertices, not
    /// detail).
    pub fn select(&self, width_px: usize, out: &mut Vec<u32>) {
        self.pyramid.select(
            &self.fraction,
            0..self.fraction.len(),
            (width_px / 2).max(1),
            out,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeviceSample, MemoryReading};

    fn series(per_mille: &[u64]) -> DeviceSeries {
        let mut series = DeviceSeries::new(0);
        for (i, &p) in per_mille.iter().enumerate() {
            series.push(&DeviceSample {
                t_ms: i as i64 * 1000,
                memory: (p > 0).then_some(MemoryReading {
                    used_bytes: p,
                    reserved_bytes: 0,
                    free_bytes: 1000 - p,
                    total_bytes: 1000,
                }),
                ..Default::default()
            });
        }
        series
    }

    #[test]
    fn strips_grow_with_the_series_and_keep_the_peak() {
        let mut whole = series(&[100, 0, 900, 300]);
        let mut strip = FleetStrip::build(&series(&[100, 0]));
        assert_eq!(
            strip.fraction,
            vec![0.1],
            "a sample without memory is skipped"
        );
        strip.extend(&whole);
        assert_eq!(strip.fraction, vec![0.1, 0.9, 0.3]);
        assert_eq!(strip.t_ms, vec![0, 2000, 3000]);
        assert_eq!(
            (strip.peak_occupied_bytes, strip.peak_fraction()),
            (900, 0.9)
        );
        assert_eq!(strip.latest_fraction(), Some(0.3));
        assert_eq!(
            strip,
            FleetStrip::build(&whole),
            "extending equals building at once"
        );
        whole.truncate(1);
        strip.extend(&whole);
        assert_eq!(strip.fraction, vec![0.1], "a replaced series starts over");
    }

    #[test]
    fn a_long_strip_selects_about_two_points_per_pixel_and_keeps_spikes() {
        let mut per_mille = vec![200; 5760];
        per_mille[4321] = 990;
        let strip = FleetStrip::build(&series(&per_mille));
        let mut picked = Vec::new();
        strip.select(200, &mut picked);
        assert!(picked.len() <= 200 + 64, "{} points", picked.len());
        assert!(picked.contains(&4321), "the one-step spike survives");
    }
}
