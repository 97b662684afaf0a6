//! The timeline as a Chrome / Perfetto trace (the JSON Trace Event Format), to open in
//! ui.perfetto.dev or chrome://tracing next to a PyTorch profiler trace.
//!
//! Layout: every GPU is a trace "process" (named with `process_name` metadata, ordered with
//! `process_sort_index`), holding counter tracks for its memory (used, reserved, free, total, in
//! MiB) and one counter track per OS process that used it. Perfetto names a counter track
//! `"<event name> <arg key>"`, so the events are named `memory` with keys `used (MiB)`, … and
//! `pid 4242 python3` with the key `memory (MiB)`. Xid errors, out-of-memory events, ECC
//! increases, lost GPUs and notes are instant events on their GPU (machine-wide ones global).
//!
//! Timestamps are Unix microseconds, as PyTorch's profiler (Kineto) writes them, so the two
//! traces line up. A counter is written only when its value changes (and at the last sample):
//! counters draw as steps, so nothing is lost, and a day of samples stays a file the browser can
//! open (huge JSON traces crash it, google/perfetto#99).

use serde_json::{Value, json};

use crate::model::{Capture, EventKind, MIB, UnixMs};

/// Trace "pid" of GPU `index`: small positive numbers, in device order.
fn gpu_track_pid(device_index: u32) -> u64 {
    u64::from(device_index) + 1
}

/// Microseconds since the Unix epoch.
fn ts_us(t_ms: UnixMs) -> i64 {
    t_ms.saturating_mul(1000)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}

/// The trace as a JSON value (`{"traceEvents": [...], "displayTimeUnit": "ms", ...}`). `name`
/// (the capture's file or source) goes into the metadata.
pub fn trace(capture: &Capture, name: &str) -> Value {
    let mut events: Vec<Value> = Vec::new();
    for (order, device) in capture.devices.iter().enumerate() {
        let pid = gpu_track_pid(device.index);
        let mut label = format!("GPU {}", device.index);
        if !device.name.is_empty() {
            label.push_str(&format!(" · {}", device.name));
        }
        if !capture.meta.host.is_empty() {
            label.push_str(&format!(" ({})", capture.meta.host));
        }
        if capture.is_simulated() {
            label.push_str(" [SIMULATED]");
        }
        events.push(json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}}));
        events.push(json!({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": order}}));
    }
    for series in &capture.series {
        let pid = gpu_track_pid(series.device_index);
        let mut last: Option<[u64; 4]> = None;
        let readings: Vec<(UnixMs, [u64; 4])> = series
            .iter()
            .filter_map(|s| {
                s.memory.map(|m| {
                    (
                        s.t_ms,
                        [m.used_bytes, m.reserved_bytes, m.free_bytes, m.total_bytes],
                    )
                })
            })
            .collect();
        for (i, &(t_ms, values)) in readings.iter().enumerate() {
            if last == Some(values) && i + 1 != readings.len() {
                continue;
            }
            last = Some(values);
            events.push(json!({
                "ph": "C", "name": "memory", "pid": pid, "tid": 0, "ts": ts_us(t_ms),
                "args": {
                    "used (MiB)": mib(values[0]),
                    "reserved (MiB)": mib(values[1]),
                    "free (MiB)": mib(values[2]),
                    "total (MiB)": mib(values[3]),
                }
            }));
        }
    }
    for track in &capture.processes {
        let pid = gpu_track_pid(track.device_index);
        let name = if track.name.is_empty() {
            format!("pid {}", track.pid)
        } else {
            format!("pid {} {}", track.pid, track.name)
        };
        let counter = |t_ms: UnixMs, bytes: u64| json!({"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": ts_us(t_ms), "args": {"memory (MiB)": mib(bytes)}});
        let mut last = None;
        let readings: Vec<(UnixMs, u64)> = track
            .t_ms
            .iter()
            .zip(&track.used_bytes)
            .filter_map(|(&t, b)| b.map(|b| (t, b)))
            .collect();
        for (i, &(t_ms, bytes)) in readings.iter().enumerate() {
            if last == Some(bytes) && i + 1 != readings.len() {
                continue;
            }
            last = Some(bytes);
            events.push(counter(t_ms, bytes));
        }
        // The first poll without the process: it had exited or released the GPU.
        if let Some(last_seen) = track.last_seen_ms() {
            let gone = capture.process_poll_ms.partition_point(|&t| t <= last_seen);
            if let Some(&gone_ms) = capture.process_poll_ms.get(gone) {
                events.push(counter(gone_ms, 0));
            }
        }
    }
    for event in &capture.events {
        let (pid, scope) = match event.device_index {
            Some(index) => (gpu_track_pid(index), "p"),
            None => (0, "g"),
        };
        let detail = match &event.kind {
            EventKind::Xid { code, .. } => format!("Xid {code}"),
            EventKind::Critical { name, data } => format!("{name} (data {data})"),
            EventKind::OutOfMemory {
                pid,
                requested_bytes,
                detail,
            } => {
                let mut text = detail.clone();
                if let Some(pid) = pid {
                    text.push_str(&format!(" (pid {pid})"));
                }
                if let Some(bytes) = requested_bytes {
                    text.push_str(&format!(
                        " requested {}",
                        crate::model::format_bytes(*bytes)
                    ));
                }
                text
            }
            EventKind::EccIncrease {
                corrected_delta,
                uncorrected_delta,
            } => format!("+{corrected_delta} corrected, +{uncorrected_delta} uncorrected"),
            EventKind::DeviceLost { detail } => detail.clone(),
            EventKind::DeviceReturned => "the GPU answers again".to_owned(),
            EventKind::Annotation { text } => text.clone(),
        };
        events.push(json!({
            "ph": "i", "s": scope, "name": event.kind.short_label(), "cat": "vramscope",
            "pid": pid, "tid": 0, "ts": ts_us(event.t_ms), "args": {"detail": detail}
        }));
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "source": name,
            "host": capture.meta.host,
            "driver_version": capture.meta.driver_version,
            "simulated": capture.is_simulated(),
            "writer": format!("vramscope {}", env!("CARGO_PKG_VERSION")),
        }
    })
}

/// The trace as compact JSON text.
pub fn trace_json(capture: &Capture, name: &str) -> String {
    trace(capture, name).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        CaptureMeta, DeviceFacts, DeviceSample, Event, MemoryReading, ProcessSample, SampleBatch,
    };

    fn sample(t_ms: UnixMs, used_mib: u64) -> DeviceSample {
        DeviceSample {
            t_ms,
            device_index: 0,
            memory: Some(MemoryReading {
                used_bytes: used_mib * MIB,
                reserved_bytes: MIB,
                free_bytes: (99 - used_mib) * MIB,
                total_bytes: 100 * MIB,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn counters_change_only_when_values_do_and_processes_drop_to_zero_when_gone() {
        let mut capture = Capture::new(
            CaptureMeta::default(),
            vec![DeviceFacts {
                index: 0,
                name: "NVIDIA H200".into(),
                ..Default::default()
            }],
        );
        for (t, used, listed) in [
            (0, 10, true),
            (1000, 10, true),
            (2000, 20, false),
            (3000, 20, false),
        ] {
            capture.ingest(&SampleBatch {
                devices: vec![sample(t, used)],
                processes: Some(if listed {
                    vec![ProcessSample {
                        t_ms: t,
                        pid: 7,
                        name: "python3".into(),
                        used_bytes: Some(5 * MIB),
                        ..Default::default()
                    }]
                } else {
                    Vec::new()
                }),
                events: if t == 2000 {
                    vec![Event {
                        t_ms: t,
                        device_index: Some(0),
                        kind: EventKind::Xid {
                            code: 79,
                            mig_instance: None,
                        },
                    }]
                } else {
                    Vec::new()
                },
                ..Default::default()
            });
        }
        let trace = trace(&capture, "run.vramcap");
        let events = trace["traceEvents"].as_array().expect("events");
        let memory: Vec<i64> = events
            .iter()
            .filter(|e| e["name"] == "memory")
            .map(|e| e["ts"].as_i64().expect("ts"))
            .collect();
        assert_eq!(
            memory,
            vec![0, 2_000_000, 3_000_000],
            "unchanged samples skipped, last kept"
        );
        let process: Vec<(i64, f64)> = events
            .iter()
            .filter(|e| e["name"] == "pid 7 python3")
            .map(|e| {
                (
                    e["ts"].as_i64().expect("ts"),
                    e["args"]["memory (MiB)"].as_f64().expect("value"),
                )
            })
            .collect();
        assert_eq!(process, vec![(0, 5.0), (1_000_000, 5.0), (2_000_000, 0.0)]);
        let name = events
            .iter()
            .find(|e| e["ph"] == "M" && e["name"] == "process_name")
            .expect("process name");
        assert_eq!(name["args"]["name"], "GPU 0 · NVIDIA H200");
        let xid = events.iter().find(|e| e["ph"] == "i").expect("instant");
        assert_eq!(
            (xid["name"].as_str(), xid["s"].as_str()),
            (Some("Xid 79"), Some("p"))
        );
    }
}
