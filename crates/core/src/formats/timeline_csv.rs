//! The timeline as CSV tables (RFC 4180), for spreadsheets, pandas and anything else that reads
//! CSV: one table of GPU readings (one row per GPU per sample) and one of process memory (one row
//! per process per poll). Times are given twice: ISO 8601 UTC for people, Unix milliseconds for
//! programs. Memory is in bytes; a value the GPU did not report is an empty cell.

use std::fmt::Write as _;

use crate::model::{Capture, UnixMs, UtcDateTime};

/// The GPU table's header.
pub const GPU_HEADER: &str = "timestamp_utc,unix_ms,gpu,used_bytes,reserved_bytes,free_bytes,total_bytes,gpu_util_pct,mem_util_pct,temperature_c,power_w,sm_clock_mhz,mem_clock_mhz";
/// The process table's header.
pub const PROCESS_HEADER: &str = "timestamp_utc,unix_ms,gpu,pid,process_name,used_bytes";

/// `2026-11-30T08:43:28.733Z`: ISO 8601 with milliseconds, which spreadsheets and pandas parse.
pub fn iso8601_utc_ms(t_ms: UnixMs) -> String {
    let utc = UtcDateTime::from_unix_ms(t_ms);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second, utc.millisecond
    )
}

/// A field quoted when it holds a comma, a quote or a line break (RFC 4180).
fn field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

fn optional<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

/// Every GPU sample, in time order (GPUs of one instant in index order).
pub fn gpu_table(capture: &Capture) -> String {
    let mut rows: Vec<crate::model::DeviceSample> =
        capture.series.iter().flat_map(|s| s.iter()).collect();
    rows.sort_by_key(|s| (s.t_ms, s.device_index));
    let mut out = String::with_capacity(GPU_HEADER.len() + rows.len() * 96);
    out.push_str(GPU_HEADER);
    out.push_str("\r\n");
    for s in rows {
        let memory = s.memory;
        let _ = write!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}\r\n",
            iso8601_utc_ms(s.t_ms),
            s.t_ms,
            s.device_index,
            optional(memory.map(|m| m.used_bytes)),
            optional(memory.map(|m| m.reserved_bytes)),
            optional(memory.map(|m| m.free_bytes)),
            optional(memory.map(|m| m.total_bytes)),
            optional(s.gpu_util_pct),
            optional(s.mem_util_pct),
            optional(s.temperature_c),
            optional(s.power_mw.map(|mw| f64::from(mw) / 1000.0)),
            optional(s.sm_clock_mhz),
            optional(s.mem_clock_mhz),
        );
    }
    out
}

/// Every process reading, in time order (then GPU, then pid).
pub fn process_table(capture: &Capture) -> String {
    let mut rows: Vec<(UnixMs, u32, u32, &str, Option<u64>)> =
        capture
            .processes
            .iter()
            .flat_map(|track| {
                track.t_ms.iter().zip(&track.used_bytes).map(|(&t, &used)| {
                    (t, track.device_index, track.pid, track.name.as_str(), used)
                })
            })
            .collect();
    rows.sort_by_key(|&(t, gpu, pid, _, _)| (t, gpu, pid));
    let mut out = String::with_capacity(PROCESS_HEADER.len() + rows.len() * 64);
    out.push_str(PROCESS_HEADER);
    out.push_str("\r\n");
    for (t_ms, gpu, pid, name, used) in rows {
        let _ = write!(
            out,
            "{},{t_ms},{gpu},{pid},{},{}\r\n",
            iso8601_utc_ms(t_ms),
            field(name),
            optional(used)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{
        CaptureMeta, DeviceFacts, DeviceSample, MemoryReading, ProcessSample, SampleBatch,
    };

    fn capture() -> Capture {
        let devices = (0..2)
            .map(|index| DeviceFacts {
                index,
                ..Default::default()
            })
            .collect();
        let mut capture = Capture::new(CaptureMeta::default(), devices);
        for t in [1000, 0] {
            capture.ingest(&SampleBatch {
                devices: vec![
                    DeviceSample {
                        t_ms: t,
                        device_index: 1,
                        memory: Some(MemoryReading {
                            used_bytes: 10,
                            reserved_bytes: 1,
                            free_bytes: 89,
                            total_bytes: 100,
                        }),
                        power_mw: Some(82_600),
                        ..Default::default()
                    },
                    DeviceSample {
                        t_ms: t,
                        device_index: 0,
                        ..Default::default()
                    },
                ],
                processes: Some(vec![ProcessSample {
                    t_ms: t,
                    device_index: 1,
                    pid: 42,
                    name: "train \"big\", v2".into(),
                    used_bytes: Some(7),
                    ..Default::default()
                }]),
                ..Default::default()
            });
        }
        capture
    }

    #[test]
    fn gpu_rows_are_in_time_then_gpu_order_with_empty_cells_for_missing_values() {
        let table = gpu_table(&capture());
        let lines: Vec<&str> = table.split("\r\n").collect();
        assert_eq!(lines[0], GPU_HEADER);
        assert_eq!(lines[1], "1970-01-01T00:00:00.000Z,0,0,,,,,,,,,,");
        assert_eq!(
            lines[2],
            "1970-01-01T00:00:00.000Z,0,1,10,1,89,100,,,,82.6,,"
        );
        assert_eq!(
            lines.len(),
            6,
            "header, four rows, and the end of the last line"
        );
        assert!(
            lines
                .iter()
                .all(|l| l.is_empty() || l.split(',').count() == 13)
        );
    }

    #[test]
    fn process_names_are_quoted() {
        let table = process_table(&capture());
        let lines: Vec<&str> = table.split("\r\n").collect();
        assert_eq!(lines[0], PROCESS_HEADER);
        assert_eq!(
            lines[1],
            "1970-01-01T00:00:00.000Z,0,1,42,\"train \"\"big\"\", v2\",7"
        );
        assert_eq!(
            iso8601_utc_ms(1_796_028_208_733),
            "2026-11-30T08:43:28.733Z"
        );
    }
}
