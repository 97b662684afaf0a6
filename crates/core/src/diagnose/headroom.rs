//! The near-full rule: a GPU whose occupied memory (used + driver-reserved, what `nvidia-smi`
//! shows) reached [`thresholds::NEAR_FULL_FRACTION`] of its size during a capture has no room
//! left for the next spike, a bigger batch or a second job. Fleets read from Prometheus are
//! judged GPU by GPU with it, as every other capture.

use super::finding::{Category, Evidence, EvidenceSource, Finding, Severity, Unit, Wizard};
use super::{recommend, thresholds};
use crate::analysis::threshold::{occupancy, time_at_or_above_ms};
use crate::model::{Capture, format_bytes};

/// One near-full finding per GPU of `capture` that reached the line, citing the peak.
pub fn capture_findings(name: &str, capture: &Capture, out: &mut Vec<Finding>) {
    for series in &capture.series {
        let d = series.device_index;
        let Some((peak_t_ms, peak)) = series
            .iter()
            .filter_map(|s| s.memory.map(|m| (s.t_ms, m)))
            .filter(|(_, m)| m.total_bytes > 0)
            .max_by(|a, b| a.1.occupied_fraction().total_cmp(&b.1.occupied_fraction()))
        else {
            continue;
        };
        let peak_fraction = peak.occupied_fraction();
        if peak_fraction < thresholds::NEAR_FULL_FRACTION {
            continue;
        }
        let above_ms = time_at_or_above_ms(occupancy(series), thresholds::NEAR_FULL_FRACTION);
        let line_pct = thresholds::NEAR_FULL_FRACTION * 100.0;
        let source = EvidenceSource::capture(name, capture, Some(d), Some(peak_t_ms));
        out.push(Finding {
            category: Category::Capacity,
            severity: Severity::Warning,
            title: format!(
                "{} ran near full: {:.1}% of {} in use at the peak, {} at or above {line_pct:.0}%",
                capture.gpu_label(d),
                peak_fraction * 100.0,
                format_bytes(peak.total_bytes),
                duration_text(above_ms)
            ),
            evidence: vec![
                Evidence::bytes("peak in use (used + driver-reserved)", peak.occupied_bytes(), source.clone()),
                Evidence::bytes("free at the peak", peak.free_bytes, source),
                Evidence::number(
                    format!("time at or above {line_pct:.0}%"),
                    above_ms as f64 / 1000.0,
                    Unit::Seconds,
                    duration_text(above_ms),
                    EvidenceSource::Derived,
                ),
            ],
            explanation: format!(
                "Memory in use reached {:.1}% of the GPU (the line is {line_pct:.0}%): the next allocation spike, a longer sequence, a bigger batch or a second process fails with out of memory. With PyTorch this is the allocator's cache plus the CUDA context, not only live tensors.",
                peak_fraction * 100.0
            ),
            recommendations: vec![recommend::leave_headroom(peak.occupied_bytes(), peak.total_bytes)],
            wizard: Some(Wizard::OutOfMemory),
        });
    }
}

/// `1 h 05 min`, `12 min`, `45 s`: durations of minutes to days, as a person reads them.
fn duration_text(ms: i64) -> String {
    let secs = ms / 1000;
    if secs < 60 {
        format!("{secs} s")
    } else if secs < 3600 {
        format!("{} min", secs / 60)
    } else {
        format!("{} h {:02} min", secs / 3600, secs / 60 % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CaptureMeta, DeviceFacts, DeviceSample, GIB, MemoryReading, SampleBatch};

    fn capture_with(occupied_gib: &[u64]) -> Capture {
        let mut capture = Capture::new(
            CaptureMeta::default(),
            vec![DeviceFacts {
                index: 0,
                host: "node-a".into(),
                labels: [("gpu".to_owned(), "3".to_owned())].into_iter().collect(),
                ..Default::default()
            }],
        );
        for (i, &gib) in occupied_gib.iter().enumerate() {
            capture.ingest(&SampleBatch {
                devices: vec![DeviceSample {
                    t_ms: i as i64 * 60_000,
                    device_index: 0,
                    memory: Some(MemoryReading {
                        used_bytes: gib * GIB - GIB / 2,
                        reserved_bytes: GIB / 2,
                        free_bytes: 100 * GIB - gib * GIB,
                        total_bytes: 100 * GIB,
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            });
        }
        capture
    }

    #[test]
    fn a_gpu_that_reached_the_line_is_near_full_with_its_time_above_it() {
        let mut findings = Vec::new();
        capture_findings("fleet", &capture_with(&[50, 96, 97, 60, 99]), &mut findings);
        assert_eq!(findings.len(), 1);
        let f = &findings[0];
        assert_eq!(
            (f.category, f.severity),
            (Category::Capacity, Severity::Warning)
        );
        assert_eq!(
            f.title,
            "node-a GPU 3 ran near full: 99.0% of 100 GiB in use at the peak, 2 min at or above 95%"
        );
        assert_eq!(f.evidence[0].value, Some((99 * GIB) as f64));
        assert_eq!(f.evidence[2].value, Some(120.0));
    }

    #[test]
    fn a_gpu_below_the_line_is_not_near_full() {
        let mut findings = Vec::new();
        capture_findings("fleet", &capture_with(&[50, 94, 90]), &mut findings);
        assert!(findings.is_empty());
        capture_findings("fleet", &capture_with(&[]), &mut findings);
        assert!(findings.is_empty());
    }
}
