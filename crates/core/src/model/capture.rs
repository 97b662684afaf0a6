//! A whole recording held in memory: the live session grows one, opening a file yields one.
//!
//! The same structure backs the live view and a reopened `.vramcap` file, so every view works the
//! same on both. Device samples are kept per device in time order, by column
//! ([`DeviceSeries`]); processes are folded into one
//! track per (device, pid, name) so that the process table and the stacked view need no scan of
//! every tick.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    DeviceFacts, DeviceSeries, Event, EventKind, FieldStatus, HealthSample, ProcessKind,
    ProcessSample, SampleBatch, UnixMs,
};

/// Where the data came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SourceKind {
    /// Real GPUs through NVML.
    #[default]
    Live,
    /// The built-in simulated machine. Everything derived from it says "simulated".
    Demo,
    /// A Prometheus server's series (dcgm-exporter, nvitop-exporter or `vramscope exporter`),
    /// usually many machines; `CaptureMeta::host` holds the server's address.
    Prometheus,
}

impl SourceKind {
    /// True for the demo machine, so that everything derived from it can say "simulated".
    pub fn is_simulated(self) -> bool {
        matches!(self, SourceKind::Demo)
    }
}

/// Facts about the recording as a whole.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureMeta {
    pub source: SourceKind,
    /// Host name of the machine that was sampled.
    pub host: String,
    /// NVIDIA driver version string, e.g. `580.159.04`; empty when unknown.
    pub driver_version: String,
    /// CUDA driver API version as `1000 * major + 10 * minor` (e.g. 13000), when known.
    pub cuda_driver_version: Option<u32>,
    /// When recording started.
    pub started_ms: UnixMs,
    /// Fast-tier sampling interval in milliseconds.
    pub interval_ms: u32,
    /// Version of vramscope that wrote it.
    pub writer: String,
}

/// What had to be done to open a damaged file; `None` on a clean file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recovery {
    /// Human-readable description of the damage, e.g. "file ends inside chunk 812 (crc mismatch)".
    pub problem: String,
    /// Chunks read successfully before the damage.
    pub chunks_recovered: u64,
    /// Bytes at the end of the file that were ignored.
    pub bytes_discarded: u64,
}

/// One process's memory over time on one device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessTrack {
    pub device_index: u32,
    pub pid: u32,
    pub name: String,
    pub kind: ProcessKind,
    /// MIG (GPU instance, compute instance) the process runs in, when MIG is on.
    pub mig_instance: Option<(u32, u32)>,
    /// Tick times at which the process was listed.
    pub t_ms: Vec<UnixMs>,
    /// Memory at each of those ticks (`None`: not reported by the driver).
    pub used_bytes: Vec<Option<u64>>,
}

impl ProcessTrack {
    /// The first tick at which the process was listed.
    pub fn first_seen_ms(&self) -> Option<UnixMs> {
        self.t_ms.first().copied()
    }

    /// The last tick at which the process was listed.
    pub fn last_seen_ms(&self) -> Option<UnixMs> {
        self.t_ms.last().copied()
    }

    /// The most memory the driver reported for the process; `None` if it never reported any.
    pub fn peak_used_bytes(&self) -> Option<u64> {
        self.used_bytes.iter().flatten().copied().max()
    }

    /// The memory at the last tick; `None` when the driver did not report it then.
    pub fn latest_used_bytes(&self) -> Option<u64> {
        self.used_bytes.last().copied().flatten()
    }
}

/// A recording in memory, built by [`Capture::ingest`] from batches in arrival order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Capture {
    pub meta: CaptureMeta,
    pub devices: Vec<DeviceFacts>,
    /// One entry per device in `devices`, same order.
    pub series: Vec<DeviceSeries>,
    pub health: Vec<HealthSample>,
    pub processes: Vec<ProcessTrack>,
    /// Times of the ticks on which the process list was polled (a process absent from a polled
    /// tick had exited or released the device).
    pub process_poll_ms: Vec<UnixMs>,
    pub events: Vec<Event>,
    /// Latest state of every field that is not plainly readable, per device.
    pub field_status: Vec<FieldStatus>,
    pub recovery: Option<Recovery>,
    /// Index into `processes` by (device, pid, name), for ingesting in O(log n).
    #[serde(skip)]
    track_index: BTreeMap<(u32, u32, String), usize>,
}

impl Capture {
    /// An empty capture for the given devices.
    pub fn new(meta: CaptureMeta, devices: Vec<DeviceFacts>) -> Self {
        let series = devices.iter().map(|d| DeviceSeries::new(d.index)).collect();
        Capture {
            meta,
            devices,
            series,
            ..Default::default()
        }
    }

    /// True when any of the data is simulated (demo source or a simulated device), so reports
    /// and the window title can say so.
    pub fn is_simulated(&self) -> bool {
        self.meta.source.is_simulated() || self.devices.iter().any(|d| d.simulated)
    }

    /// Adds one poll's worth of data. Samples for devices the capture does not know are dropped.
    pub fn ingest(&mut self, batch: &SampleBatch) {
        for sample in &batch.devices {
            if let Some(series) = self.series_mut(sample.device_index) {
                series.push(sample);
            }
        }
        if let Some(processes) = &batch.processes {
            // One poll time per tick: a batch normally holds one tick, a time-lapse source
            // (`demo::Accelerated`) several, each with its complete process lists.
            let mut ticks: Vec<UnixMs> = batch.devices.iter().map(|d| d.t_ms).collect();
            ticks.dedup();
            if ticks.is_empty() {
                ticks.extend(processes.first().map(|p| p.t_ms));
            }
            self.process_poll_ms.extend(ticks);
            for p in processes {
                self.ingest_process(p);
            }
        }
        self.health.extend(batch.health.iter().cloned());
        self.events.extend(batch.events.iter().cloned());
        for change in &batch.field_changes {
            match self
                .field_status
                .iter_mut()
                .find(|f| f.device_index == change.device_index && f.field == change.field)
            {
                Some(existing) => existing.state = change.state.clone(),
                None => self.field_status.push(change.clone()),
            }
        }
    }

    fn ingest_process(&mut self, p: &ProcessSample) {
        let key = (p.device_index, p.pid, p.name.clone());
        let index = match self.track_index.get(&key) {
            Some(&i) => i,
            None => {
                self.processes.push(ProcessTrack {
                    device_index: p.device_index,
                    pid: p.pid,
                    name: p.name.clone(),
                    kind: p.kind,
                    mig_instance: p.mig_instance,
                    t_ms: Vec::new(),
                    used_bytes: Vec::new(),
                });
                let i = self.processes.len() - 1;
                self.track_index.insert(key, i);
                i
            }
        };
        let track = &mut self.processes[index];
        track.t_ms.push(p.t_ms);
        track.used_bytes.push(p.used_bytes);
        track.kind = p.kind;
    }

    /// Rebuilds the lookup index after deserializing or editing `processes` directly.
    pub fn reindex(&mut self) {
        self.track_index = self
            .processes
            .iter()
            .enumerate()
            .map(|(i, t)| ((t.device_index, t.pid, t.name.clone()), i))
            .collect();
    }

    /// The same capture restricted to one GPU: its facts, samples, health, processes, field
    /// states and events (machine-wide events, such as notes, are kept). Used when the user asks
    /// about one device of a multi-GPU capture.
    pub fn only_device(&self, device_index: u32) -> Capture {
        self.only_devices(&[device_index])
    }

    /// The same capture restricted to the GPUs with NVML indices in `keep`, as
    /// [`Capture::only_device`] does for one.
    pub fn only_devices(&self, keep: &[u32]) -> Capture {
        let kept = |d: u32| keep.contains(&d);
        let mut only = Capture {
            meta: self.meta.clone(),
            devices: self
                .devices
                .iter()
                .filter(|d| kept(d.index))
                .cloned()
                .collect(),
            series: self
                .series
                .iter()
                .filter(|s| kept(s.device_index))
                .cloned()
                .collect(),
            health: self
                .health
                .iter()
                .filter(|h| kept(h.device_index))
                .cloned()
                .collect(),
            processes: self
                .processes
                .iter()
                .filter(|p| kept(p.device_index))
                .cloned()
                .collect(),
            process_poll_ms: self.process_poll_ms.clone(),
            events: self
                .events
                .iter()
                .filter(|e| e.device_index.is_none_or(kept))
                .cloned()
                .collect(),
            field_status: self
                .field_status
                .iter()
                .filter(|f| kept(f.device_index))
                .cloned()
                .collect(),
            recovery: self.recovery.clone(),
            track_index: BTreeMap::new(),
        };
        only.reindex();
        only
    }

    /// The NVML indices of the GPUs on which any of `pids` was seen holding memory, in order:
    /// the GPUs a job used, from its process tree (`vramscope run`'s manifest).
    pub fn devices_of_processes(&self, pids: &[u32]) -> Vec<u32> {
        let mut devices: Vec<u32> = self
            .processes
            .iter()
            .filter(|p| pids.contains(&p.pid))
            .map(|p| p.device_index)
            .collect();
        devices.sort_unstable();
        devices.dedup();
        devices
    }

    /// The `DeviceLost` event of a GPU that has not answered since (no `DeviceReturned` after
    /// it), or `None` while it answers.
    pub fn lost_event(&self, device_index: u32) -> Option<&Event> {
        self.events
            .iter()
            .rev()
            .filter(|e| e.device_index == Some(device_index))
            .find(|e| {
                matches!(
                    e.kind,
                    EventKind::DeviceLost { .. } | EventKind::DeviceReturned
                )
            })
            .filter(|e| matches!(e.kind, EventKind::DeviceLost { .. }))
    }

    /// How findings and views name device `device_index`: [`DeviceFacts::label`] when the capture
    /// knows it (`node-a GPU 3` in a fleet), else `GPU <index>`.
    pub fn gpu_label(&self, device_index: u32) -> String {
        self.devices
            .iter()
            .find(|d| d.index == device_index)
            .map(DeviceFacts::label)
            .unwrap_or_else(|| format!("GPU {device_index}"))
    }

    /// The samples of the device with NVML index `device_index`, if it was recorded.
    pub fn series(&self, device_index: u32) -> Option<&DeviceSeries> {
        self.series.iter().find(|s| s.device_index == device_index)
    }

    fn series_mut(&mut self, device_index: u32) -> Option<&mut DeviceSeries> {
        self.series
            .iter_mut()
            .find(|s| s.device_index == device_index)
    }

    /// Number of fast-tier device samples over all devices.
    pub fn sample_count(&self) -> usize {
        self.series.iter().map(DeviceSeries::len).sum()
    }

    /// First and last timestamp of any device sample.
    pub fn time_span_ms(&self) -> Option<(UnixMs, UnixMs)> {
        let first = self
            .series
            .iter()
            .filter_map(|s| s.times().first().copied())
            .min()?;
        let last = self
            .series
            .iter()
            .filter_map(|s| s.times().last().copied())
            .max()?;
        Some((first, last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DeviceSample, MemoryReading};

    fn sample(t_ms: i64, device_index: u32, used_bytes: u64) -> DeviceSample {
        DeviceSample {
            t_ms,
            device_index,
            memory: Some(MemoryReading {
                used_bytes,
                reserved_bytes: 10,
                free_bytes: 1000 - used_bytes - 10,
                total_bytes: 1000,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn ingest_folds_processes_into_tracks_and_finds_peaks() {
        let devices = vec![
            DeviceFacts {
                index: 0,
                ..Default::default()
            },
            DeviceFacts {
                index: 1,
                ..Default::default()
            },
        ];
        let mut capture = Capture::new(CaptureMeta::default(), devices);
        for (t, used) in [(0, 100), (250, 400), (500, 300)] {
            capture.ingest(&SampleBatch {
                devices: vec![sample(t, 0, used), sample(t, 1, used / 2), sample(t, 7, 1)],
                processes: Some(vec![ProcessSample {
                    t_ms: t,
                    device_index: 0,
                    pid: 42,
                    name: "python".into(),
                    used_bytes: Some(used),
                    ..Default::default()
                }]),
                ..Default::default()
            });
        }
        assert_eq!(capture.sample_count(), 6, "unknown device 7 is dropped");
        assert_eq!(
            capture.series(0).and_then(|s| s.peak_used()),
            Some((250, 400))
        );
        assert_eq!(capture.time_span_ms(), Some((0, 500)));
        assert_eq!(capture.processes.len(), 1);
        let track = &capture.processes[0];
        assert_eq!(track.peak_used_bytes(), Some(400));
        assert_eq!(track.latest_used_bytes(), Some(300));
        assert_eq!(
            (track.first_seen_ms(), track.last_seen_ms()),
            (Some(0), Some(500))
        );
        assert_eq!(capture.process_poll_ms, vec![0, 250, 500]);
    }

    #[test]
    fn only_device_keeps_one_gpu_and_machine_wide_events() {
        let devices = vec![
            DeviceFacts {
                index: 0,
                ..Default::default()
            },
            DeviceFacts {
                index: 1,
                ..Default::default()
            },
        ];
        let mut capture = Capture::new(CaptureMeta::default(), devices);
        let note = Event {
            t_ms: 0,
            device_index: None,
            kind: crate::model::EventKind::Annotation {
                text: "start".into(),
            },
        };
        let xid_on_1 = Event {
            t_ms: 250,
            device_index: Some(1),
            kind: crate::model::EventKind::Xid {
                code: 31,
                mig_instance: None,
            },
        };
        capture.ingest(&SampleBatch {
            devices: vec![sample(0, 0, 100), sample(0, 1, 200)],
            processes: Some(vec![
                ProcessSample {
                    t_ms: 0,
                    device_index: 0,
                    pid: 1,
                    ..Default::default()
                },
                ProcessSample {
                    t_ms: 0,
                    device_index: 1,
                    pid: 2,
                    ..Default::default()
                },
            ]),
            events: vec![note.clone(), xid_on_1.clone()],
            ..Default::default()
        });
        let gpu1 = capture.only_device(1);
        assert_eq!(gpu1.devices.len(), 1);
        assert_eq!(gpu1.devices[0].index, 1);
        assert_eq!(gpu1.sample_count(), 1);
        assert_eq!(gpu1.series(1).and_then(|s| s.peak_used()), Some((0, 200)));
        assert_eq!(
            gpu1.processes.iter().map(|p| p.pid).collect::<Vec<_>>(),
            vec![2]
        );
        assert_eq!(gpu1.events, vec![note.clone(), xid_on_1]);
        let gpu0 = capture.only_device(0);
        assert_eq!(gpu0.events, vec![note]);
        assert_eq!(
            gpu0.processes.iter().map(|p| p.pid).collect::<Vec<_>>(),
            vec![1]
        );
    }
}
