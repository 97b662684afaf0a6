//! Threshold crossings derived from samples (the threshold is a view setting, not data).
//!
//! Occupied memory (used + reserved, what `nvidia-smi` shows) is compared with a fraction of the
//! total. A crossing upwards happens when occupancy reaches the threshold; the way back down only
//! counts once occupancy falls a further [`HYSTERESIS_FRACTION`] below it, so that a series
//! hovering at the line (noise, a training step's ripple) does not mark a storm of crossings.

use std::borrow::Borrow;

use crate::model::{DeviceSample, UnixMs};

/// How far below the threshold occupancy must fall before it counts as having dropped back:
/// one percentage point.
pub const HYSTERESIS_FRACTION: f64 = 0.01;

/// Occupancy went over (or back under) the threshold at `t_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crossing {
    /// Time of the first sample on the new side of the threshold.
    pub t_ms: UnixMs,
    /// `true` when occupancy rose to the threshold, `false` when it fell back below it.
    pub rising: bool,
}

/// Crossings of `threshold_fraction` (e.g. 0.9) by the occupied fraction of `samples` (one
/// device, in time order). Samples without a memory reading are skipped. A series that starts above
/// the threshold does not produce a crossing at its first sample: only changes are reported.
pub fn crossings<S: Borrow<DeviceSample>>(
    samples: impl IntoIterator<Item = S>,
    threshold_fraction: f64,
) -> Vec<Crossing> {
    let mut scan = CrossingScan::new(threshold_fraction);
    scan.extend(samples);
    scan.found
}

/// [`crossings`] of a series that keeps growing (a live capture): each call of
/// [`CrossingScan::extend`] looks only at the samples added since, so following a day-long
/// capture costs the same per new sample as following a minute.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CrossingScan {
    threshold_fraction: f64,
    /// Whether occupancy was last above the line; `None` before the first reading.
    above: Option<bool>,
    /// Samples looked at so far.
    pub samples_seen: usize,
    /// The crossings found so far.
    pub found: Vec<Crossing>,
}

impl CrossingScan {
    /// A scan for crossings of `threshold_fraction` that has seen nothing yet.
    pub fn new(threshold_fraction: f64) -> Self {
        CrossingScan {
            threshold_fraction,
            ..Default::default()
        }
    }

    /// The threshold this scan looks for.
    pub fn threshold_fraction(&self) -> f64 {
        self.threshold_fraction
    }

    /// Continues the scan with the next samples of the series.
    pub fn extend<S: Borrow<DeviceSample>>(&mut self, samples: impl IntoIterator<Item = S>) {
        let threshold = self.threshold_fraction;
        for sample in samples {
            self.samples_seen += 1;
            let sample = sample.borrow();
            let Some(memory) = sample.memory else {
                continue;
            };
            let fraction = memory.occupied_fraction();
            match self.above {
                None => self.above = Some(fraction >= threshold),
                Some(false) if fraction >= threshold => {
                    self.above = Some(true);
                    self.found.push(Crossing {
                        t_ms: sample.t_ms,
                        rising: true,
                    });
                }
                Some(true) if fraction < threshold - HYSTERESIS_FRACTION => {
                    self.above = Some(false);
                    self.found.push(Crossing {
                        t_ms: sample.t_ms,
                        rising: false,
                    });
                }
                Some(_) => {}
            }
        }
    }
}

/// How long occupancy was at or above `threshold_fraction`, from one device's `(t_ms, occupied
/// fraction)` readings in time order: each reading counts until the next one (the last counts for
/// nothing, as its span is unknown).
pub fn time_at_or_above_ms(
    readings: impl IntoIterator<Item = (UnixMs, f64)>,
    threshold_fraction: f64,
) -> i64 {
    let mut readings = readings.into_iter();
    let Some(mut previous) = readings.next() else {
        return 0;
    };
    let mut total_ms = 0;
    for reading in readings {
        if previous.1 >= threshold_fraction {
            total_ms += (reading.0 - previous.0).max(0);
        }
        previous = reading;
    }
    total_ms
}

/// The `(t_ms, occupied fraction)` readings of one device's samples (those with memory).
pub fn occupancy<S: Borrow<DeviceSample>>(
    samples: impl IntoIterator<Item = S>,
) -> impl Iterator<Item = (UnixMs, f64)> {
    samples.into_iter().filter_map(|s| {
        let s = s.borrow();
        s.memory.map(|m| (s.t_ms, m.occupied_fraction()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::MemoryReading;

    /// A sample whose occupied memory is `per_mille` thousandths of a 1000-byte device.
    fn at_per_mille(t_ms: UnixMs, per_mille: u64) -> DeviceSample {
        DeviceSample {
            t_ms,
            memory: Some(MemoryReading {
                used_bytes: per_mille - 10,
                reserved_bytes: 10,
                free_bytes: 1000 - per_mille,
                total_bytes: 1000,
            }),
            ..Default::default()
        }
    }

    fn series(per_mille: &[u64]) -> Vec<DeviceSample> {
        per_mille
            .iter()
            .enumerate()
            .map(|(i, &p)| at_per_mille(i as i64 * 100, p))
            .collect()
    }

    #[test]
    fn rising_and_falling_crossings_are_found_at_the_first_sample_past_the_line() {
        let found = crossings(series(&[500, 899, 900, 950, 700, 910]), 0.9);
        assert_eq!(
            found,
            vec![
                Crossing {
                    t_ms: 200,
                    rising: true
                },
                Crossing {
                    t_ms: 400,
                    rising: false
                },
                Crossing {
                    t_ms: 500,
                    rising: true
                },
            ]
        );
    }

    #[test]
    fn noise_around_the_line_does_not_produce_a_storm() {
        // Hovers between 89.1% and 90.5%: one rise, and never 1 point below, so no fall.
        let found = crossings(series(&[850, 905, 891, 903, 895, 901, 892, 904]), 0.9);
        assert_eq!(
            found,
            vec![Crossing {
                t_ms: 100,
                rising: true
            }]
        );
        // Falling 1 point below does count.
        let found = crossings(series(&[905, 889]), 0.9);
        assert_eq!(
            found,
            vec![Crossing {
                t_ms: 100,
                rising: false
            }]
        );
    }

    #[test]
    fn starting_above_is_not_a_crossing_and_missing_readings_are_skipped() {
        let mut samples = series(&[950, 960, 500]);
        samples.insert(
            1,
            DeviceSample {
                t_ms: 50,
                ..Default::default()
            },
        );
        assert_eq!(
            crossings(&samples, 0.9),
            vec![Crossing {
                t_ms: 200,
                rising: false
            }]
        );
        assert!(crossings(&[] as &[DeviceSample], 0.9).is_empty());
        // Scanning in pieces finds what one scan finds.
        let whole = series(&[850, 905, 891, 903, 880, 901, 892, 904, 870]);
        let mut scan = CrossingScan::new(0.9);
        for piece in whole.chunks(2) {
            scan.extend(piece);
        }
        assert_eq!(scan.found, crossings(&whole, 0.9));
        assert_eq!(scan.samples_seen, whole.len());
        assert!(
            crossings(series(&[500, 990]), f64::NAN).is_empty(),
            "a NaN threshold crosses nothing"
        );
    }

    #[test]
    fn time_above_counts_each_reading_until_the_next() {
        // 100 ms apart: 960 at 0 and 950 at 100 count (200 ms), 500 at 200 does not, 990 at 300
        // is the last reading and its span is unknown.
        assert_eq!(
            time_at_or_above_ms(occupancy(&series(&[960, 950, 500, 990])), 0.95),
            200
        );
        let mut gapped = series(&[960, 960]);
        gapped.insert(
            1,
            DeviceSample {
                t_ms: 50,
                ..Default::default()
            },
        );
        assert_eq!(
            time_at_or_above_ms(occupancy(&gapped), 0.95),
            100,
            "a sample without memory does not cut the span"
        );
        assert_eq!(
            time_at_or_above_ms(occupancy(&[] as &[DeviceSample]), 0.9),
            0
        );
        assert_eq!(time_at_or_above_ms(occupancy(&series(&[100, 200])), 0.9), 0);
    }
}
