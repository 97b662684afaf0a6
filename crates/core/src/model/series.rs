//! A device's fast-tier samples stored by column, so a long capture stays small in memory.
//!
//! A [`DeviceSample`] is 152 bytes as a struct; a 24-hour, 8-GPU capture at 250 ms holds 2.76
//! million of them (420 MB, before `Vec` growth). Stored by column, a sample costs what its values
//! need: the time and used memory in full (8 bytes each), utilisation, temperature, clocks and
//! throttle reasons in 1 or 2 bytes, power in 4, and values that change rarely (total and reserved
//! memory, the gap between free and the rest, ECC counters) as runs of equal values. That is about
//! 29 bytes per sample, at most 40 with growth (`bytes_per_sample_is_at_most_40` and
//! `benches/capture.rs` measure it). Nothing is lost: every value, including `None` and values too
//! big for their narrow column, reads back exactly as it was pushed.

use serde::{Deserialize, Serialize};

use super::{DeviceSample, MemoryReading, UnixMs};

/// All fast-tier samples of one device, in time order, stored by column. Read them with
/// [`DeviceSeries::iter`], [`DeviceSeries::get`] or, for searches by time, [`DeviceSeries::times`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "SeriesRows", into = "SeriesRows")]
pub struct DeviceSeries {
    pub device_index: u32,
    t_ms: Vec<UnixMs>,
    /// Used memory; 0 where the sample has no memory reading (then `total_bytes` is `None`).
    used_bytes: Vec<u64>,
    /// `None` where the sample has no memory reading.
    total_bytes: Runs,
    reserved_bytes: Runs,
    /// `total - used - reserved - free` (wrapping): 0 on drivers where the four add up, else a
    /// constant, so it costs nothing per sample while keeping `free` exact.
    free_gap_bytes: Runs,
    gpu_util_pct: Narrow<u8>,
    mem_util_pct: Narrow<u8>,
    temperature_c: Narrow<u8>,
    power_mw: Narrow<u32>,
    sm_clock_mhz: Narrow<u16>,
    mem_clock_mhz: Narrow<u16>,
    throttle_reasons: Narrow<u16>,
    ecc_corrected_volatile: Runs,
    ecc_uncorrected_volatile: Runs,
}

impl DeviceSeries {
    /// An empty series for the device with NVML index `device_index`.
    pub fn new(device_index: u32) -> Self {
        DeviceSeries {
            device_index,
            ..Default::default()
        }
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.t_ms.len()
    }

    /// True when the device has no sample yet.
    pub fn is_empty(&self) -> bool {
        self.t_ms.is_empty()
    }

    /// Sample times in order, for binary searches by time (`partition_point`).
    pub fn times(&self) -> &[UnixMs] {
        &self.t_ms
    }

    /// Appends a sample (its `device_index` is not stored: it is the series').
    pub fn push(&mut self, sample: &DeviceSample) {
        let index = self.t_ms.len();
        grow_gently(&mut self.t_ms);
        self.t_ms.push(sample.t_ms);
        grow_gently(&mut self.used_bytes);
        match sample.memory {
            Some(m) => {
                self.used_bytes.push(m.used_bytes);
                self.total_bytes.push(index, Some(m.total_bytes));
                self.reserved_bytes.push(index, Some(m.reserved_bytes));
                let gap = m
                    .total_bytes
                    .wrapping_sub(m.used_bytes)
                    .wrapping_sub(m.reserved_bytes)
                    .wrapping_sub(m.free_bytes);
                self.free_gap_bytes.push(index, Some(gap));
            }
            None => {
                self.used_bytes.push(0);
                self.total_bytes.push(index, None);
                self.reserved_bytes.push(index, None);
                self.free_gap_bytes.push(index, None);
            }
        }
        self.gpu_util_pct
            .push(index, sample.gpu_util_pct.map(u64::from));
        self.mem_util_pct
            .push(index, sample.mem_util_pct.map(u64::from));
        self.temperature_c
            .push(index, sample.temperature_c.map(u64::from));
        self.power_mw.push(index, sample.power_mw.map(u64::from));
        self.sm_clock_mhz
            .push(index, sample.sm_clock_mhz.map(u64::from));
        self.mem_clock_mhz
            .push(index, sample.mem_clock_mhz.map(u64::from));
        self.throttle_reasons.push(index, sample.throttle_reasons);
        self.ecc_corrected_volatile
            .push(index, sample.ecc_corrected_volatile);
        self.ecc_uncorrected_volatile
            .push(index, sample.ecc_uncorrected_volatile);
    }

    /// Reserves room for `additional` more samples exactly (a file reader knows how many come).
    pub fn reserve_exact(&mut self, additional: usize) {
        self.t_ms.reserve_exact(additional);
        self.used_bytes.reserve_exact(additional);
        for column in [
            &mut self.gpu_util_pct.values,
            &mut self.mem_util_pct.values,
            &mut self.temperature_c.values,
        ] {
            column.reserve_exact(additional);
        }
        self.power_mw.values.reserve_exact(additional);
        self.sm_clock_mhz.values.reserve_exact(additional);
        self.mem_clock_mhz.values.reserve_exact(additional);
        self.throttle_reasons.values.reserve_exact(additional);
    }

    /// Keeps the first `len` samples (a reader drops a chunk that turned out damaged).
    pub fn truncate(&mut self, len: usize) {
        self.t_ms.truncate(len);
        self.used_bytes.truncate(len);
        for runs in [
            &mut self.total_bytes,
            &mut self.reserved_bytes,
            &mut self.free_gap_bytes,
            &mut self.ecc_corrected_volatile,
            &mut self.ecc_uncorrected_volatile,
        ] {
            runs.truncate(len);
        }
        self.gpu_util_pct.truncate(len);
        self.mem_util_pct.truncate(len);
        self.temperature_c.truncate(len);
        self.power_mw.truncate(len);
        self.sm_clock_mhz.truncate(len);
        self.mem_clock_mhz.truncate(len);
        self.throttle_reasons.truncate(len);
    }

    /// The sample at `index`, rebuilt from the columns.
    pub fn get(&self, index: usize) -> Option<DeviceSample> {
        self.sample_at(index, &mut RunCursors::default())
    }

    /// The sample at `index`; `cursors` remember where the run columns were last read, so a walk
    /// in order costs no search.
    fn sample_at(&self, index: usize, cursors: &mut RunCursors) -> Option<DeviceSample> {
        let t_ms = *self.t_ms.get(index)?;
        let memory = self.memory_at(index, cursors);
        let narrow_u32 = |value: Option<u64>| value.and_then(|v| u32::try_from(v).ok());
        Some(DeviceSample {
            t_ms,
            device_index: self.device_index,
            memory,
            gpu_util_pct: narrow_u32(self.gpu_util_pct.get(index)),
            mem_util_pct: narrow_u32(self.mem_util_pct.get(index)),
            temperature_c: narrow_u32(self.temperature_c.get(index)),
            power_mw: narrow_u32(self.power_mw.get(index)),
            sm_clock_mhz: narrow_u32(self.sm_clock_mhz.get(index)),
            mem_clock_mhz: narrow_u32(self.mem_clock_mhz.get(index)),
            throttle_reasons: self.throttle_reasons.get(index),
            ecc_corrected_volatile: self
                .ecc_corrected_volatile
                .at(index, &mut cursors.ecc_corrected),
            ecc_uncorrected_volatile: self
                .ecc_uncorrected_volatile
                .at(index, &mut cursors.ecc_uncorrected),
        })
    }

    /// The memory reading of the sample at `index` (cheaper than [`DeviceSeries::get`]).
    pub fn memory(&self, index: usize) -> Option<MemoryReading> {
        self.memory_at(index, &mut RunCursors::default())
    }

    fn memory_at(&self, index: usize, cursors: &mut RunCursors) -> Option<MemoryReading> {
        let used_bytes = *self.used_bytes.get(index)?;
        let total_bytes = self.total_bytes.at(index, &mut cursors.total)?;
        let reserved_bytes = self
            .reserved_bytes
            .at(index, &mut cursors.reserved)
            .unwrap_or(0);
        let gap = self
            .free_gap_bytes
            .at(index, &mut cursors.free_gap)
            .unwrap_or(0);
        Some(MemoryReading {
            used_bytes,
            reserved_bytes,
            free_bytes: total_bytes
                .wrapping_sub(used_bytes)
                .wrapping_sub(reserved_bytes)
                .wrapping_sub(gap),
            total_bytes,
        })
    }

    /// Every sample in time order.
    pub fn iter(&self) -> SeriesIter<'_> {
        self.iter_from(0)
    }

    /// The samples from `start` on (for views that add only what arrived since they last looked).
    pub fn iter_from(&self, start: usize) -> SeriesIter<'_> {
        SeriesIter {
            series: self,
            front: start.min(self.len()),
            back: self.len(),
            cursors: RunCursors::default(),
        }
    }

    /// The newest sample, for live readouts.
    pub fn latest(&self) -> Option<DeviceSample> {
        self.get(self.len().checked_sub(1)?)
    }

    /// Highest `used_bytes` seen, with its time (the earliest of equal peaks).
    pub fn peak_used(&self) -> Option<(UnixMs, u64)> {
        let mut cursors = RunCursors::default();
        (0..self.len())
            .filter_map(|i| {
                self.memory_at(i, &mut cursors)
                    .map(|m| (self.t_ms[i], m.used_bytes))
            })
            .max_by_key(|&(t, used)| (used, std::cmp::Reverse(t)))
    }

    /// Heap bytes the series holds (capacity, not just length), for the memory budget of long
    /// captures.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.t_ms.capacity() * size_of::<UnixMs>()
            + self.used_bytes.capacity() * size_of::<u64>()
            + self.total_bytes.heap_bytes()
            + self.reserved_bytes.heap_bytes()
            + self.free_gap_bytes.heap_bytes()
            + self.gpu_util_pct.heap_bytes()
            + self.mem_util_pct.heap_bytes()
            + self.temperature_c.heap_bytes()
            + self.power_mw.heap_bytes()
            + self.sm_clock_mhz.heap_bytes()
            + self.mem_clock_mhz.heap_bytes()
            + self.throttle_reasons.heap_bytes()
            + self.ecc_corrected_volatile.heap_bytes()
            + self.ecc_uncorrected_volatile.heap_bytes()
    }
}

/// Grows a column by an eighth instead of doubling, so a long live capture wastes at most about
/// 12% of its columns in spare capacity (doubling wastes up to half). Large reallocations are
/// remapped by the allocator rather than copied, so the extra reallocations cost little.
fn grow_gently<T>(column: &mut Vec<T>) {
    if column.len() == column.capacity() {
        column.reserve_exact(column.len() / 8 + 64);
    }
}

/// Where a walk over a series last was in each run column ([`Runs::at`]).
#[derive(Clone, Copy, Debug)]
struct RunCursors {
    total: usize,
    reserved: usize,
    free_gap: usize,
    ecc_corrected: usize,
    ecc_uncorrected: usize,
}

impl Default for RunCursors {
    /// Nowhere yet: the first read searches.
    fn default() -> Self {
        RunCursors {
            total: usize::MAX,
            reserved: usize::MAX,
            free_gap: usize::MAX,
            ecc_corrected: usize::MAX,
            ecc_uncorrected: usize::MAX,
        }
    }
}

/// Iterator over a series' samples, rebuilt one at a time; forwards it costs no search.
#[derive(Clone, Debug)]
pub struct SeriesIter<'a> {
    series: &'a DeviceSeries,
    front: usize,
    back: usize,
    cursors: RunCursors,
}

impl Iterator for SeriesIter<'_> {
    type Item = DeviceSample;

    fn next(&mut self) -> Option<DeviceSample> {
        if self.front >= self.back {
            return None;
        }
        self.front += 1;
        self.series.sample_at(self.front - 1, &mut self.cursors)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.back - self.front;
        (left, Some(left))
    }

    fn nth(&mut self, n: usize) -> Option<DeviceSample> {
        self.front = self.front.saturating_add(n).min(self.back);
        self.next()
    }
}

impl DoubleEndedIterator for SeriesIter<'_> {
    fn next_back(&mut self) -> Option<DeviceSample> {
        if self.front >= self.back {
            return None;
        }
        self.back -= 1;
        self.series.get(self.back)
    }
}

impl ExactSizeIterator for SeriesIter<'_> {}

impl<'a> IntoIterator for &'a DeviceSeries {
    type Item = DeviceSample;
    type IntoIter = SeriesIter<'a>;

    fn into_iter(self) -> SeriesIter<'a> {
        self.iter()
    }
}

/// A column of values that change rarely: runs of equal values, each stored once with the index
/// of its first sample.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Runs {
    /// (index of the first sample of the run, value), by index.
    starts: Vec<(u32, Option<u64>)>,
}

impl Runs {
    fn push(&mut self, index: usize, value: Option<u64>) {
        if self.starts.last().is_none_or(|&(_, last)| last != value) {
            // A series longer than 4 billion samples (34 years at 250 ms) is not recorded.
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            self.starts.push((index, value));
        }
    }

    fn truncate(&mut self, len: usize) {
        let keep = self
            .starts
            .partition_point(|&(start, _)| (start as usize) < len);
        self.starts.truncate(keep);
    }

    /// The value at `index`, starting from `cursor` (a position in `starts`, or `usize::MAX` for
    /// none) and leaving it at the run read: reading indices in order walks the runs once.
    fn at(&self, index: usize, cursor: &mut usize) -> Option<u64> {
        let behind = self
            .starts
            .get(*cursor)
            .is_none_or(|&(start, _)| start as usize > index);
        if behind {
            let after = self
                .starts
                .partition_point(|&(start, _)| start as usize <= index);
            *cursor = after.checked_sub(1)?;
        }
        while self
            .starts
            .get(*cursor + 1)
            .is_some_and(|&(start, _)| start as usize <= index)
        {
            *cursor += 1;
        }
        self.starts.get(*cursor)?.1
    }

    fn heap_bytes(&self) -> usize {
        self.starts.capacity() * std::mem::size_of::<(u32, Option<u64>)>()
    }
}

/// An integer type narrower than `u64` for a column whose values are nearly always small.
trait NarrowInt: Copy + Default + PartialEq + Eq + std::fmt::Debug {
    /// Marks "no value" (`None`).
    const NONE: Self;
    /// Marks "the value is in the wide list".
    const WIDE: Self;
    fn narrow(value: u64) -> Option<Self>;
    fn widen(self) -> u64;
}

macro_rules! narrow_int {
    ($($t:ty),*) => {$(
        impl NarrowInt for $t {
            const NONE: Self = <$t>::MAX;
            const WIDE: Self = <$t>::MAX - 1;
            fn narrow(value: u64) -> Option<Self> {
                <$t>::try_from(value).ok().filter(|v| *v < Self::WIDE)
            }
            fn widen(self) -> u64 {
                u64::from(self)
            }
        }
    )*};
}
narrow_int!(u8, u16, u32);

/// A column of optional values stored in a narrow integer, with the rare value that does not fit
/// kept in full on the side (so nothing is clipped).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Narrow<N> {
    values: Vec<N>,
    /// (sample index, value) of the values that did not fit, by index.
    wide: Vec<(u32, u64)>,
}

impl<N: NarrowInt> Narrow<N> {
    fn push(&mut self, index: usize, value: Option<u64>) {
        grow_gently(&mut self.values);
        match value {
            None => self.values.push(N::NONE),
            Some(v) => match N::narrow(v) {
                Some(narrow) => self.values.push(narrow),
                None => {
                    self.values.push(N::WIDE);
                    self.wide
                        .push((u32::try_from(index).unwrap_or(u32::MAX), v));
                }
            },
        }
    }

    fn truncate(&mut self, len: usize) {
        self.values.truncate(len);
        let keep = self.wide.partition_point(|&(i, _)| (i as usize) < len);
        self.wide.truncate(keep);
    }

    fn get(&self, index: usize) -> Option<u64> {
        let value = *self.values.get(index)?;
        if value == N::NONE {
            None
        } else if value == N::WIDE {
            let at = self
                .wide
                .binary_search_by_key(&index, |&(i, _)| i as usize)
                .ok()?;
            Some(self.wide[at].1)
        } else {
            Some(value.widen())
        }
    }

    fn heap_bytes(&self) -> usize {
        self.values.capacity() * std::mem::size_of::<N>()
            + self.wide.capacity() * std::mem::size_of::<(u32, u64)>()
    }
}

/// The row form of a series: what serde reads and writes, so the columns are an in-memory detail.
#[derive(Serialize, Deserialize)]
struct SeriesRows {
    device_index: u32,
    samples: Vec<DeviceSample>,
}

impl From<DeviceSeries> for SeriesRows {
    fn from(series: DeviceSeries) -> Self {
        SeriesRows {
            device_index: series.device_index,
            samples: series.iter().collect(),
        }
    }
}

impl From<SeriesRows> for DeviceSeries {
    fn from(rows: SeriesRows) -> Self {
        let mut series = DeviceSeries::new(rows.device_index);
        series.reserve_exact(rows.samples.len());
        for sample in &rows.samples {
            series.push(sample);
        }
        series
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample in which every field is set from `i`, with values that change every sample.
    fn busy_sample(i: u64) -> DeviceSample {
        let total = 150_000_000_000;
        let used = 1_000_000_000 + i * 4_096 % 90_000_000_000;
        let reserved = 600_000_000;
        DeviceSample {
            t_ms: 1_767_225_600_000 + (i as i64) * 250,
            device_index: 3,
            memory: Some(MemoryReading {
                used_bytes: used,
                reserved_bytes: reserved,
                free_bytes: total - used - reserved,
                total_bytes: total,
            }),
            gpu_util_pct: Some((i % 101) as u32),
            mem_util_pct: Some((i * 7 % 101) as u32),
            temperature_c: Some(30 + (i % 60) as u32),
            power_mw: Some(80_000 + (i * 977 % 620_000) as u32),
            sm_clock_mhz: Some(345 + (i * 13 % 1_635) as u32),
            mem_clock_mhz: Some(2_619 + (i % 3) as u32),
            throttle_reasons: Some([0, 1, 4, 0x20][(i % 4) as usize]),
            ecc_corrected_volatile: Some(i / 10_000),
            ecc_uncorrected_volatile: Some(0),
        }
    }

    #[test]
    fn every_value_reads_back_exactly_including_none_and_wide_values() {
        let mut samples: Vec<DeviceSample> = (0..500).map(busy_sample).collect();
        samples[10].memory = None;
        samples[11].gpu_util_pct = None;
        samples[12].power_mw = Some(u32::MAX);
        samples[13].power_mw = Some(u32::MAX - 1);
        samples[14].temperature_c = Some(300);
        samples[15].throttle_reasons = Some(u64::MAX);
        samples[16].sm_clock_mhz = Some(70_000);
        samples[17] = DeviceSample {
            t_ms: samples[17].t_ms,
            device_index: 3,
            ..Default::default()
        };
        samples[18].memory = Some(MemoryReading {
            used_bytes: 10,
            reserved_bytes: 5,
            free_bytes: 99,
            total_bytes: 50,
        });
        let mut series = DeviceSeries::new(3);
        for sample in &samples {
            series.push(sample);
        }
        assert_eq!(series.len(), samples.len());
        assert_eq!(series.iter().collect::<Vec<_>>(), samples);
        assert_eq!(series.iter().rev().collect::<Vec<_>>().len(), samples.len());
        assert_eq!(series.iter_from(498).collect::<Vec<_>>(), samples[498..]);
        assert_eq!(series.latest(), samples.last().copied());
        assert_eq!(series.memory(10), None);
        assert_eq!(series.memory(18), samples[18].memory);
        assert_eq!(series.get(500), None);

        let mut cut = series.clone();
        cut.truncate(16);
        assert_eq!(cut.iter().collect::<Vec<_>>(), samples[..16]);
        for sample in &samples[16..] {
            cut.push(sample);
        }
        assert_eq!(
            cut, series,
            "truncating and pushing again gives the same columns"
        );
    }

    #[test]
    fn bytes_per_sample_is_at_most_40() {
        // A day at 250 ms is 345,600 samples; the budget must hold for a long series whose
        // every fast field changes every sample, not only for an idle GPU.
        let count = 345_600;
        let mut series = DeviceSeries::new(0);
        for i in 0..count {
            series.push(&busy_sample(i));
        }
        let per_sample = series.heap_bytes() as f64 / count as f64;
        assert!(
            per_sample <= 40.0,
            "{per_sample:.1} bytes per sample in memory"
        );
        assert!(
            std::mem::size_of::<DeviceSample>() >= 100,
            "the struct it replaces"
        );
    }

    #[test]
    fn serde_keeps_the_row_form() {
        let mut series = DeviceSeries::new(1);
        series.push(&busy_sample(1));
        let json = serde_json::to_value(&series).expect("a series serializes");
        assert_eq!(json["samples"][0]["t_ms"], 1_767_225_600_250_i64);
        let back: DeviceSeries = serde_json::from_value(json).expect("and reads back");
        assert_eq!(back, series);
    }
}
