//! Plot-ready series derived from a [`Capture`]: per device, the memory lines and the stacked
//! per-process layers, each with a min/max pyramid, extended incrementally as a live capture grows.
//!
//! Nothing here touches egui; the widget in the parent module turns these into plot items. The
//! x coordinate everywhere is seconds since [`TimelineData::origin_ms`].

use std::ops::Range;

use vramscope_core::analysis::lod::{MinMaxPyramid, visible_index_range};
use vramscope_core::model::{Capture, GIB, UnixMs};

/// Converts a byte count to the plot's y unit (GiB).
pub fn gib(bytes: u64) -> f64 {
    bytes as f64 / GIB as f64
}

/// One plotted series: y values (GiB) at the device's x positions, with its pyramid.
#[derive(Clone, Debug, Default)]
pub struct LodSeries {
    pub values: Vec<f64>,
    pub pyramid: MinMaxPyramid,
    /// Largest value so far (0 when empty), kept up to date so the plot's y range costs nothing.
    pub max_value: f64,
}

impl LodSeries {
    fn push(&mut self, value: f64) {
        self.values.push(value);
        self.max_value = self.max_value.max(value);
    }

    fn refresh(&mut self) {
        self.pyramid.extend(&self.values);
    }

    /// Points `[x, y]` to draw for the index range `range` within a budget of `max_buckets`
    /// min/max buckets (about 2 points per pixel when `max_buckets` is the pixel width).
    pub fn points(&self, xs: &[f64], range: Range<usize>, max_buckets: usize) -> Vec<[f64; 2]> {
        let mut indices = Vec::new();
        self.pyramid
            .select(&self.values, range, max_buckets, &mut indices);
        indices
            .into_iter()
            .map(|i| [xs[i as usize], self.values[i as usize]])
            .collect()
    }
}

/// A process's slice of the stacked view: where its band starts and ends on the device's process
/// ticks, with the bottom and top of the band (GiB) at each of its ticks.
#[derive(Clone, Debug, Default)]
pub struct StackLayer {
    /// Index of the process in `Capture::processes`.
    pub track_index: usize,
    /// Index (into [`ProcessStack::x_secs`]) of the first tick this layer covers.
    pub first_tick: usize,
    pub bottom: Vec<f64>,
    pub top: Vec<f64>,
}

impl StackLayer {
    /// Ticks covered, as indices into [`ProcessStack::x_secs`].
    pub fn tick_range(&self) -> Range<usize> {
        self.first_tick..self.first_tick + self.top.len()
    }
}

/// Per-process memory of one device, stacked in order of first appearance.
///
/// Layers are stored only over the ticks where the process was listed, so a day with hundreds of
/// short-lived processes costs memory in proportion to the process samples, not processes × ticks.
#[derive(Clone, Debug, Default)]
pub struct ProcessStack {
    /// x of every process poll tick (all devices share the ticks).
    pub x_secs: Vec<f64>,
    /// Sum of all processes at each tick, with its pyramid: the LOD of the stack's outline picks
    /// which ticks every layer is drawn at, so the layers stay consistent with each other.
    pub total: LodSeries,
    pub layers: Vec<StackLayer>,
    /// Layer of each track of this device, by track index (`None` for other devices' tracks).
    layer_of_track: Vec<Option<usize>>,
    /// How many samples of each track have been folded in, by track index.
    consumed: Vec<usize>,
}

/// Everything the timeline draws for one device.
#[derive(Clone, Debug, Default)]
pub struct DeviceTimeline {
    pub device_index: u32,
    /// x of every sample that has a memory reading.
    pub x_secs: Vec<f64>,
    /// Index of each of those samples in the device's [`vramscope_core::model::DeviceSeries`].
    pub sample_index: Vec<u32>,
    pub used: LodSeries,
    pub reserved: LodSeries,
    pub total: LodSeries,
    pub stack: ProcessStack,
    /// Samples of the device series already looked at.
    samples_seen: usize,
}

impl DeviceTimeline {
    /// Index range of the samples to consider for the x range `[x_min, x_max]`.
    pub fn visible_range(&self, x_min: f64, x_max: f64) -> Range<usize> {
        visible_index_range(&self.x_secs, x_min, x_max)
    }
}

/// The timeline's data for a whole capture.
#[derive(Clone, Debug, Default)]
pub struct TimelineData {
    /// Time of x = 0: the capture's first sample (or its start time when it has none).
    pub origin_ms: UnixMs,
    pub devices: Vec<DeviceTimeline>,
    /// Process poll ticks already folded in.
    ticks_seen: usize,
}

impl TimelineData {
    /// Builds the series for a whole capture. Costs O(samples); done off the UI thread when a file
    /// is opened.
    pub fn build(capture: &Capture) -> Self {
        let origin_ms = capture
            .time_span_ms()
            .map(|(first, _)| first)
            .unwrap_or(capture.meta.started_ms);
        let mut data = TimelineData {
            origin_ms,
            devices: Vec::new(),
            ticks_seen: 0,
        };
        data.extend(capture);
        data
    }

    /// x position of a Unix time.
    pub fn x_of(&self, t_ms: UnixMs) -> f64 {
        (t_ms - self.origin_ms) as f64 / 1000.0
    }

    /// Unix time of an x position, rounded to the millisecond.
    pub fn t_of(&self, x_secs: f64) -> UnixMs {
        self.origin_ms + (x_secs * 1000.0).round() as UnixMs
    }

    /// The device's series, if the capture has that device.
    pub fn device(&self, device_index: u32) -> Option<&DeviceTimeline> {
        self.devices.iter().find(|d| d.device_index == device_index)
    }

    /// x range covered by any sample, or `None` for an empty capture.
    pub fn x_span(&self) -> Option<(f64, f64)> {
        let first = self
            .devices
            .iter()
            .filter_map(|d| d.x_secs.first())
            .copied()
            .reduce(f64::min)?;
        let last = self
            .devices
            .iter()
            .filter_map(|d| d.x_secs.last())
            .copied()
            .reduce(f64::max)?;
        Some((first, last))
    }

    /// Folds in whatever the capture gained since the last call (new samples, new process ticks,
    /// new devices). Costs O(new data).
    pub fn extend(&mut self, capture: &Capture) {
        for series in &capture.series {
            let position = match self
                .devices
                .iter()
                .position(|d| d.device_index == series.device_index)
            {
                Some(position) => position,
                None => {
                    self.devices.push(DeviceTimeline {
                        device_index: series.device_index,
                        ..Default::default()
                    });
                    self.devices.len() - 1
                }
            };
            let origin_ms = self.origin_ms;
            let device = &mut self.devices[position];
            if series.len() < device.samples_seen {
                // The capture was replaced by a shorter one: start this device over.
                *device = DeviceTimeline {
                    device_index: series.device_index,
                    ..Default::default()
                };
            }
            let new_samples = series.iter_from(device.samples_seen);
            for (index, sample) in (device.samples_seen..).zip(new_samples) {
                if let Some(memory) = sample.memory {
                    device
                        .x_secs
                        .push((sample.t_ms - origin_ms) as f64 / 1000.0);
                    device.sample_index.push(index as u32);
                    device.used.push(gib(memory.used_bytes));
                    device.reserved.push(gib(memory.reserved_bytes));
                    device.total.push(gib(memory.total_bytes));
                }
            }
            device.samples_seen = series.len();
            device.used.refresh();
            device.reserved.refresh();
            device.total.refresh();
        }
        self.extend_stacks(capture);
    }

    fn extend_stacks(&mut self, capture: &Capture) {
        let ticks = &capture.process_poll_ms;
        if ticks.len() < self.ticks_seen {
            for device in &mut self.devices {
                device.stack = ProcessStack::default();
            }
            self.ticks_seen = 0;
        }
        if ticks.len() == self.ticks_seen {
            return;
        }
        let origin_ms = self.origin_ms;
        for device in &mut self.devices {
            let stack = &mut device.stack;
            stack.layer_of_track.resize(capture.processes.len(), None);
            stack.consumed.resize(capture.processes.len(), 0);
            // Tracks of this device that still have samples to fold in. `waiting` holds those
            // whose next sample is in the future, soonest last (popped from the end); `active`
            // those being stacked, in track order (first appearance), so that layers keep their
            // place in the stack. Only active tracks are looked at on each tick.
            let mut waiting: Vec<usize> = capture
                .processes
                .iter()
                .enumerate()
                .filter(|(i, track)| {
                    track.device_index == device.device_index
                        && stack.consumed[*i] < track.t_ms.len()
                })
                .map(|(i, _)| i)
                .collect();
            let next_ms = |i: usize| capture.processes[i].t_ms[stack.consumed[i]];
            waiting.sort_by_key(|&i| std::cmp::Reverse((next_ms(i), i)));
            let mut active: Vec<usize> = Vec::new();
            for (tick, &tick_ms) in ticks.iter().enumerate().skip(self.ticks_seen) {
                stack.x_secs.push((tick_ms - origin_ms) as f64 / 1000.0);
                while let Some(&next) = waiting.last() {
                    if capture.processes[next].t_ms[stack.consumed[next]] > tick_ms {
                        break;
                    }
                    waiting.pop();
                    let at = active.partition_point(|&i| i < next);
                    active.insert(at, next);
                }
                let mut running_bytes = 0u64;
                active.retain(|&track_index| {
                    let track = &capture.processes[track_index];
                    let cursor = stack.consumed[track_index];
                    // A track sample at or before this tick belongs to it (tracks are stamped with
                    // the tick's time by the sampler; `<=` also tolerates a sample off the grid).
                    if track.t_ms[cursor] > tick_ms {
                        return true;
                    }
                    let used_bytes = track.used_bytes[cursor].unwrap_or(0);
                    let layer_index = match stack.layer_of_track[track_index] {
                        Some(layer) if stack.layers[layer].tick_range().end == tick => layer,
                        _ => {
                            // First sample, or the process came back after a gap: a new layer.
                            stack.layers.push(StackLayer {
                                track_index,
                                first_tick: tick,
                                ..Default::default()
                            });
                            stack.layer_of_track[track_index] = Some(stack.layers.len() - 1);
                            stack.layers.len() - 1
                        }
                    };
                    let layer = &mut stack.layers[layer_index];
                    layer.bottom.push(gib(running_bytes));
                    running_bytes = running_bytes.saturating_add(used_bytes);
                    layer.top.push(gib(running_bytes));
                    stack.consumed[track_index] = cursor + 1;
                    cursor + 1 < track.t_ms.len()
                });
                stack.total.push(gib(running_bytes));
            }
            stack.total.refresh();
        }
        self.ticks_seen = ticks.len();
    }
}

/// The polygon of one stacked layer to draw: x, bottom and top at the chosen ticks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LayerPolygon {
    pub xs: Vec<f64>,
    pub bottoms: Vec<f64>,
    pub tops: Vec<f64>,
}

impl ProcessStack {
    /// The ticks to draw for the x range, chosen from the stack outline's pyramid (min and max of
    /// the total per bucket), as indices into `x_secs`.
    pub fn visible_ticks(&self, x_min: f64, x_max: f64, max_buckets: usize) -> Vec<u32> {
        let range = visible_index_range(&self.x_secs, x_min, x_max);
        let mut ticks = Vec::new();
        self.total
            .pyramid
            .select(&self.total.values, range, max_buckets, &mut ticks);
        ticks
    }

    /// One polygon per layer that has a tick among `ticks` (from [`Self::visible_ticks`]). Each
    /// layer also gets its own first and last tick when they fall inside the drawn range, so a
    /// process appears and disappears at the right time at any zoom.
    pub fn layer_polygons(&self, ticks: &[u32]) -> Vec<(usize, LayerPolygon)> {
        let (Some(&first_drawn), Some(&last_drawn)) = (ticks.first(), ticks.last()) else {
            return Vec::new();
        };
        let drawn = first_drawn as usize..last_drawn as usize + 1;
        let mut polygons = Vec::new();
        for (layer_index, layer) in self.layers.iter().enumerate() {
            let covered = layer.tick_range();
            if covered.end <= drawn.start || covered.start >= drawn.end {
                continue;
            }
            let lo = ticks.partition_point(|&t| (t as usize) < covered.start);
            let hi = ticks.partition_point(|&t| (t as usize) < covered.end);
            let mut chosen: Vec<usize> = Vec::with_capacity(hi - lo + 2);
            if drawn.contains(&covered.start) {
                chosen.push(covered.start);
            }
            chosen.extend(ticks[lo..hi].iter().map(|&t| t as usize));
            if drawn.contains(&(covered.end - 1)) {
                chosen.push(covered.end - 1);
            }
            chosen.dedup();
            let mut polygon = LayerPolygon::default();
            for tick in chosen {
                let offset = tick - layer.first_tick;
                polygon.xs.push(self.x_secs[tick]);
                polygon.bottoms.push(layer.bottom[offset]);
                polygon.tops.push(layer.top[offset]);
            }
            polygons.push((layer_index, polygon));
        }
        polygons
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_core::model::{
        CaptureMeta, DeviceFacts, DeviceSample, MemoryReading, ProcessSample, SampleBatch,
    };

    fn batch(t_ms: i64, used: [u64; 2], processes: Vec<(u32, u32, u64)>) -> SampleBatch {
        SampleBatch {
            devices: (0..2)
                .map(|device_index| DeviceSample {
                    t_ms,
                    device_index,
                    memory: Some(MemoryReading {
                        used_bytes: used[device_index as usize],
                        reserved_bytes: GIB / 2,
                        free_bytes: 80 * GIB - used[device_index as usize] - GIB / 2,
                        total_bytes: 80 * GIB,
                    }),
                    ..Default::default()
                })
                .collect(),
            processes: Some(
                processes
                    .into_iter()
                    .map(|(device_index, pid, used_bytes)| ProcessSample {
                        t_ms,
                        device_index,
                        pid,
                        name: format!("proc{pid}"),
                        used_bytes: Some(used_bytes),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn capture() -> Capture {
        let devices = (0..2)
            .map(|index| DeviceFacts {
                index,
                memory_total_bytes: 80 * GIB,
                ..Default::default()
            })
            .collect();
        Capture::new(
            CaptureMeta {
                started_ms: 1000,
                ..Default::default()
            },
            devices,
        )
    }

    #[test]
    fn builds_memory_series_in_gib_from_the_first_sample() {
        let mut capture = capture();
        capture.ingest(&batch(1000, [GIB, 2 * GIB], vec![]));
        capture.ingest(&batch(1250, [3 * GIB, 2 * GIB], vec![]));
        let data = TimelineData::build(&capture);
        assert_eq!(data.origin_ms, 1000);
        let d0 = data.device(0).expect("device 0");
        assert_eq!(d0.x_secs, vec![0.0, 0.25]);
        assert_eq!(d0.used.values, vec![1.0, 3.0]);
        assert_eq!(d0.total.values, vec![80.0, 80.0]);
        assert_eq!(data.x_span(), Some((0.0, 0.25)));
        assert_eq!(data.t_of(0.25), 1250);
    }

    #[test]
    fn stacks_processes_in_first_appearance_order_and_splits_gaps() {
        let mut capture = capture();
        capture.ingest(&batch(1000, [0, 0], vec![(0, 10, GIB)]));
        capture.ingest(&batch(
            2000,
            [0, 0],
            vec![(0, 10, GIB), (0, 20, 2 * GIB), (1, 30, GIB)],
        ));
        capture.ingest(&batch(3000, [0, 0], vec![(0, 20, 2 * GIB)]));
        capture.ingest(&batch(
            4000,
            [0, 0],
            vec![(0, 10, 4 * GIB), (0, 20, 2 * GIB)],
        ));
        let data = TimelineData::build(&capture);
        let stack = &data.device(0).expect("device 0").stack;
        assert_eq!(stack.x_secs, vec![0.0, 1.0, 2.0, 3.0]);
        assert_eq!(stack.total.values, vec![1.0, 3.0, 2.0, 6.0]);
        // pid 10 is first at ticks 0-1, then absent, then back on top of... its own new layer.
        assert_eq!(stack.layers.len(), 3);
        assert_eq!(
            (stack.layers[0].first_tick, stack.layers[0].top.clone()),
            (0, vec![1.0, 1.0])
        );
        assert_eq!(stack.layers[1].bottom, vec![1.0, 0.0, 4.0]);
        assert_eq!(stack.layers[1].top, vec![3.0, 2.0, 6.0]);
        assert_eq!(
            (stack.layers[2].first_tick, stack.layers[2].top.clone()),
            (3, vec![4.0])
        );
        let other = &data.device(1).expect("device 1").stack;
        assert_eq!(other.total.values, vec![0.0, 1.0, 0.0, 0.0]);
    }

    #[test]
    fn extending_equals_building_at_once() {
        let mut capture = capture();
        let mut grown = TimelineData::build(&capture);
        for tick in 0..500i64 {
            let processes = if tick % 50 < 40 {
                vec![(0, 7, (tick as u64 % 13) * GIB), (1, 8, GIB)]
            } else {
                vec![]
            };
            capture.ingest(&batch(
                1000 + tick * 250,
                [tick as u64 * 1000, 5],
                processes,
            ));
            if tick % 37 == 0 {
                grown.extend(&capture);
            }
        }
        grown.extend(&capture);
        let built = TimelineData::build(&capture);
        for (a, b) in grown.devices.iter().zip(&built.devices) {
            assert_eq!(a.x_secs, b.x_secs);
            assert_eq!(a.used.values, b.used.values);
            assert_eq!(a.used.pyramid, b.used.pyramid);
            assert_eq!(a.stack.total.values, b.stack.total.values);
            assert_eq!(a.stack.layers.len(), b.stack.layers.len());
            for (la, lb) in a.stack.layers.iter().zip(&b.stack.layers) {
                assert_eq!(
                    (la.first_tick, &la.top, &la.bottom),
                    (lb.first_tick, &lb.top, &lb.bottom)
                );
            }
        }
    }

    #[test]
    fn layer_polygons_include_layer_edges() {
        let mut capture = capture();
        for tick in 0..1000i64 {
            let mut processes = vec![(0, 1, GIB)];
            if (400..600).contains(&tick) {
                processes.push((0, 2, 3 * GIB));
            }
            capture.ingest(&batch(tick * 1000, [0, 0], processes));
        }
        let data = TimelineData::build(&capture);
        let stack = &data.device(0).expect("device 0").stack;
        let ticks = stack.visible_ticks(f64::MIN, f64::MAX, 10);
        assert!(ticks.len() <= 40, "{} ticks", ticks.len());
        let polygons = stack.layer_polygons(&ticks);
        assert_eq!(polygons.len(), 2);
        let (_, short) = &polygons[1];
        assert_eq!(short.xs.first(), Some(&400.0));
        assert_eq!(short.xs.last(), Some(&599.0));
        assert!(short.tops.iter().all(|&top| top == 4.0));
        assert!(short.bottoms.iter().all(|&bottom| bottom == 1.0));
    }
}
