//! Judgements for the fleet view: for every GPU of a capture, the findings that name it (as
//! health badges) and its memory growth per hour. The rules are the capture rules every diagnosis
//! runs ([`super::engine::capture_findings`]); the view only shows what comes out.

use super::engine::{capture_findings, finding_device};
use super::finding::{Finding, Severity};
use super::{growth, leak};
use crate::model::Capture;

/// What the doctor says about one GPU of a fleet.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuVerdict {
    pub device_index: u32,
    /// How fast the floor of the GPU's used memory grows while a job runs, in bytes per hour
    /// ([`super::leak::gpu_growth`]); `None` when no job ran long enough to judge. A number, not a
    /// verdict: whether the growth is a leak is a finding (the leak rule) among `findings`.
    pub growth_bytes_per_hour: Option<f64>,
    /// Findings that name this GPU, most severe first.
    pub findings: Vec<Finding>,
}

impl GpuVerdict {
    /// The most severe finding's severity; `None` when nothing was found.
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).min()
    }
}

/// One verdict per device of `capture`, in device order.
pub fn gpu_verdicts(name: &str, capture: &Capture) -> Vec<GpuVerdict> {
    let mut verdicts: Vec<GpuVerdict> = capture
        .devices
        .iter()
        .map(|device| GpuVerdict {
            device_index: device.index,
            growth_bytes_per_hour: growth_bytes_per_hour(capture, device.index),
            findings: Vec::new(),
        })
        .collect();
    let mut findings = capture_findings(name, capture);
    findings.sort_by_key(|f| f.severity);
    for finding in findings {
        let Some(device) = finding_device(&finding) else {
            continue;
        };
        if let Some(verdict) = verdicts.iter_mut().find(|v| v.device_index == device) {
            verdict.findings.push(finding);
        }
    }
    verdicts
}

/// The used-memory trend of one device, per hour: the leak rule's own judgement of the GPU
/// ([`leak::gpu_growth`]: the stretch while a job ran, its start-up ramp and its end left out),
/// so the number and the badge never disagree; 0 when flat or levelled off, `None` when no job
/// ran long enough to judge.
fn growth_bytes_per_hour(capture: &Capture, device_index: u32) -> Option<f64> {
    match leak::gpu_growth(capture, device_index)?.shape {
        growth::Shape::Growing(trend) => Some(trend.slope() * 3600.0),
        growth::Shape::Flat | growth::Shape::LevelledOff { .. } => Some(0.0),
        growth::Shape::TooShort { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::Category;
    use crate::model::{
        CaptureMeta, DeviceFacts, DeviceSample, Event, EventKind, GIB, MemoryReading, SampleBatch,
    };

    fn fleet() -> Capture {
        let devices = (0..3)
            .map(|index| DeviceFacts {
                index,
                host: format!("node-{index}"),
                labels: [("gpu".to_owned(), "0".to_owned())].into_iter().collect(),
                memory_total_bytes: 100 * GIB,
                ..Default::default()
            })
            .collect();
        let mut capture = Capture::new(CaptureMeta::default(), devices);
        for minute in 0..60_i64 {
            let reading = |used_gib: u64| MemoryReading {
                used_bytes: used_gib * GIB,
                reserved_bytes: 0,
                free_bytes: (100 - used_gib) * GIB,
                total_bytes: 100 * GIB,
            };
            capture.ingest(&SampleBatch {
                devices: [10, 97, 10 + minute as u64]
                    .into_iter()
                    .enumerate()
                    .map(|(d, gib)| DeviceSample {
                        t_ms: minute * 60_000,
                        device_index: d as u32,
                        memory: Some(reading(gib)),
                        ..Default::default()
                    })
                    .collect(),
                events: if minute == 30 {
                    vec![Event {
                        t_ms: minute * 60_000,
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
        capture
    }

    #[test]
    fn each_gpu_gets_the_findings_that_name_it_and_its_growth() {
        let verdicts = gpu_verdicts("fleet", &fleet());
        assert_eq!(verdicts.len(), 3);
        let categories = |v: &GpuVerdict| v.findings.iter().map(|f| f.category).collect::<Vec<_>>();
        assert_eq!(categories(&verdicts[0]), vec![Category::Xid]);
        assert!(
            verdicts[0].findings[0].title.contains("node-0 GPU 0"),
            "{}",
            verdicts[0].findings[0].title
        );
        assert_eq!(
            categories(&verdicts[1]),
            vec![Category::Capacity],
            "97% is near full"
        );
        assert!(
            verdicts[1].findings[0]
                .title
                .starts_with("node-1 GPU 0 ran near full")
        );
        assert_eq!(
            categories(&verdicts[2]),
            vec![Category::Leak],
            "a steady climb of 1 GiB a minute"
        );
        // Named as the fleet view names the GPU (its host and its own index), in the title
        // and where the evidence comes from.
        let leak = &verdicts[2].findings[0];
        assert!(
            leak.title.starts_with("Used memory of node-2 GPU 0 grows"),
            "{}",
            leak.title
        );
        assert!(
            leak.evidence
                .iter()
                .all(|e| !e.source.describe().contains(", GPU 2")),
            "{:?}",
            leak.evidence
        );
        let growth = verdicts[2].growth_bytes_per_hour.unwrap_or(0.0);
        assert!((growth - 60.0 * GIB as f64).abs() < 1.0, "{growth}");
        assert_eq!(verdicts[0].growth_bytes_per_hour, Some(0.0));
        assert_eq!(
            verdicts[0].worst(),
            Some(Severity::Critical),
            "Xid 79: fallen off the bus"
        );
    }
}
