//! A GPU whose memory was nearly full in a capture: the next peak (a longer sequence, a bigger
//! batch, another process starting) has nowhere to go, even when nothing failed yet.
//!
//! Judged on the device's used memory (NVML, all processes and the driver's own) against its
//! total: from [`NEARLY_FULL_FRACTION`] on, a warning naming when it happened, for how long, and
//! which process held most then.

use super::finding::{Category, Evidence, EvidenceSource, Finding, Severity, Unit, Wizard};
use super::growth::duration_text;
use super::recommend;
use crate::model::{Capture, format_bytes};

/// Used share of a GPU's memory from which it counts as nearly full.
pub const NEARLY_FULL_FRACTION: f64 = 0.95;

/// One warning per device of `capture` whose used memory reached [`NEARLY_FULL_FRACTION`].
pub fn capture_findings(name: &str, capture: &Capture, out: &mut Vec<Finding>) {
    for series in &capture.series {
        let d = series.device_index;
        let readings: Vec<(i64, u64, u64)> = series
            .iter()
            .filter_map(|s| {
                s.memory
                    .filter(|m| m.total_bytes > 0)
                    .map(|m| (s.t_ms, m.used_bytes, m.total_bytes))
            })
            .collect();
        let full = |&(_, used, total): &(i64, u64, u64)| {
            used as f64 >= NEARLY_FULL_FRACTION * total as f64
        };
        let Some(&(peak_t, peak_used, total)) = readings
            .iter()
            .filter(|r| full(r))
            .max_by_key(|r| (r.1, std::cmp::Reverse(r.0)))
        else {
            continue;
        };
        // Time spent above the line: the gaps between consecutive readings both above it.
        let above_ms: i64 = readings
            .windows(2)
            .filter(|w| full(&w[0]) && full(&w[1]))
            .map(|w| w[1].0 - w[0].0)
            .sum();
        let source = EvidenceSource::Capture {
            file: name.to_owned(),
            device_index: Some(d),
            t_ms: Some(peak_t),
        };
        let mut evidence = vec![
            Evidence::bytes("peak used", peak_used, source.clone()),
            Evidence::bytes("device capacity", total, source.clone()),
            Evidence::number(
                "share used at the peak",
                peak_used as f64 / total as f64 * 100.0,
                Unit::Percent,
                format!("{:.1}%", peak_used as f64 / total as f64 * 100.0),
                source.clone(),
            ),
            Evidence::number(
                "time above 95%",
                above_ms as f64 / 1000.0,
                Unit::Seconds,
                duration_text(above_ms as f64 / 1000.0),
                EvidenceSource::Derived,
            ),
        ];
        let holder = capture
            .processes
            .iter()
            .filter(|p| p.device_index == d)
            .filter_map(|p| {
                let at = p.t_ms.iter().rposition(|t| *t <= peak_t)?;
                Some((p, p.used_bytes.get(at).copied().flatten()?))
            })
            .max_by_key(|(_, bytes)| *bytes);
        if let Some((p, bytes)) = holder {
            evidence.push(Evidence::bytes(
                if p.name.is_empty() {
                    format!("largest process {}", p.pid)
                } else {
                    format!("largest process {} ({})", p.pid, p.name)
                },
                bytes,
                source.clone(),
            ));
        }
        let free = total.saturating_sub(peak_used);
        out.push(Finding {
            category: Category::Capacity,
            severity: Severity::Warning,
            title: format!(
                "GPU {d} was {:.0}% full ({} of {}); {} left for the next peak",
                peak_used as f64 / total as f64 * 100.0,
                format_bytes(peak_used),
                format_bytes(total),
                format_bytes(free)
            ),
            evidence,
            explanation: format!(
                "Used memory reached {:.1}% of the card{}. Nothing failed in this recording, but a slightly larger batch, a longer sequence or another process now runs out of memory. PyTorch's reserved memory counts as used here: part of it may be cache the job would reuse.",
                peak_used as f64 / total as f64 * 100.0,
                if above_ms > 0 {
                    format!(" and stayed above 95% for {}", duration_text(above_ms as f64 / 1000.0))
                } else {
                    String::new()
                }
            ),
            recommendations: vec![
                recommend::reduce_batch_size(None, Some(peak_used)),
                recommend::mixed_precision(None),
            ],
            wizard: Some(Wizard::OutOfMemory),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CaptureMeta, DeviceFacts, DeviceSample, GIB, MemoryReading, SampleBatch};

    fn capture(used: impl Fn(i64) -> u64) -> Capture {
        let total = 140 * GIB;
        let mut c = Capture::new(
            CaptureMeta::default(),
            vec![DeviceFacts {
                index: 0,
                memory_total_bytes: total,
                ..Default::default()
            }],
        );
        for s in 0..120 {
            let u = used(s);
            c.ingest(&SampleBatch {
                devices: vec![DeviceSample {
                    t_ms: s * 1000,
                    device_index: 0,
                    memory: Some(MemoryReading {
                        used_bytes: u,
                        reserved_bytes: 0,
                        free_bytes: total - u,
                        total_bytes: total,
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            });
        }
        c
    }

    #[test]
    fn a_gpu_at_136_of_140_gib_is_a_warning() {
        let mut out = Vec::new();
        capture_findings("run.vramcap", &capture(|_| 136 * GIB), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].severity, Severity::Warning);
        assert!(
            out[0].title.starts_with("GPU 0 was 97% full"),
            "{}",
            out[0].title
        );
        assert!(out[0].explanation.contains("stayed above 95% for 119 s"));
    }

    #[test]
    fn below_95_percent_is_no_finding() {
        let mut out = Vec::new();
        capture_findings("run.vramcap", &capture(|_| 130 * GIB), &mut out);
        assert!(out.is_empty(), "{out:?}");
    }
}
