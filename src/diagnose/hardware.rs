//! Hardware and driver rules: Xid errors, ECC, row remapping and retired pages, thermal and power
//! throttling, persistence mode, and driver ↔ CUDA compatibility — from capture health samples and
//! events, live readings, and the hardware lines of logs.

use std::collections::BTreeMap;

use super::compat::{self, Compatibility, DriverVersion};
use super::finding::{Category, Evidence, EvidenceSource, Finding, Severity, Unit, Wizard};
use super::log::{LineKind, LogAnalysis};
use super::recommend;
use super::thresholds::{self, throttle};
use super::xid::XidSeverity;
use crate::model::{Capture, Event, EventKind};

/// The finding category of an Xid: memory-error Xids are `ecc` or `row-remap`, the rest `xid`.
pub fn xid_category(code: u32) -> Category {
    match code {
        48 | 92 | 94 | 95 | 140 | 171 | 172 => Category::Ecc,
        63 | 64 => Category::RowRemap,
        _ => Category::Xid,
    }
}

/// How serious an Xid is: DCGM's failures (rated in the Xid table) are critical, everything else
/// a warning (an Xid always means something went wrong).
pub fn xid_severity(code: u32) -> Severity {
    match super::xid::lookup(u64::from(code)).map(|i| i.severity) {
        Some(XidSeverity::Failure) => Severity::Critical,
        Some(_) | None => Severity::Warning,
    }
}

/// What an Xid means and what to do, from the Xid knowledge table (`xid.rs`).
pub fn xid_meaning(code: u32) -> String {
    match super::xid::lookup(u64::from(code)) {
        Some(info) => format!(
            "{} ({}). {}",
            info.description, info.mnemonic, info.what_to_do
        ),
        None => {
            "not in vramscope's table; see NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)"
                .to_owned()
        }
    }
}

/// The catalog description of an Xid, short enough for a title.
fn xid_title(code: u32) -> String {
    super::xid::lookup(u64::from(code))
        .map(|info| info.description.to_owned())
        .unwrap_or_else(|| "unknown Xid".to_owned())
}

fn capture_source(name: &str, device_index: Option<u32>, t_ms: Option<i64>) -> EvidenceSource {
    EvidenceSource::Capture {
        file: name.to_owned(),
        device_index,
        t_ms,
    }
}

/// Xid, ECC, row-remap, thermal and persistence findings from a capture (or a live reading).
pub fn capture_findings(name: &str, capture: &Capture, out: &mut Vec<Finding>) {
    xid_events(name, capture, out);
    ecc_and_remap(name, capture, out);
    thermal(name, capture, out);
}

fn xid_events(name: &str, capture: &Capture, out: &mut Vec<Finding>) {
    let mut by_code: BTreeMap<(u64, Option<u32>), Vec<i64>> = BTreeMap::new();
    for event in &capture.events {
        if let EventKind::Xid { code, .. } = event.kind {
            by_code
                .entry((code, event.device_index))
                .or_default()
                .push(event.t_ms);
        }
    }
    for ((code, device), times) in by_code {
        let code32 = u32::try_from(code).unwrap_or(u32::MAX);
        let mut evidence = vec![Evidence::number(
            "occurrences",
            times.len() as f64,
            Unit::Count,
            format!("{} × Xid {code}", times.len()),
            capture_source(name, device, times.first().copied()),
        )];
        if let Some(last) = times.last().filter(|_| times.len() > 1) {
            evidence.push(Evidence::number(
                "last seen",
                *last as f64,
                Unit::Code,
                format!("t={last} ms"),
                capture_source(name, device, Some(*last)),
            ));
        }
        out.push(xid_finding(code32, device, evidence));
    }
    for event in &capture.events {
        if let EventKind::DeviceLost { detail } = &event.kind {
            out.push(Finding {
                category: Category::Xid,
                severity: Severity::Critical,
                title: format!("GPU {} stopped answering", event.device_index.map(|d| d.to_string()).unwrap_or_else(|| "?".into())),
                evidence: lost_evidence(name, capture, event, detail),
                explanation: "NVML reported the GPU as lost (usually Xid 79, fallen off the bus): a hardware, power or thermal problem, not the application.".into(),
                recommendations: vec![recommend::reset_gpu("The GPU must be recovered before it can be used."), recommend::check_hardware()],
                wizard: Some(Wizard::HardwareAndDriver),
            });
        }
    }
}

/// What NVML said when the GPU was lost and, when it answered again later, after how long.
fn lost_evidence(name: &str, capture: &Capture, lost: &Event, detail: &str) -> Vec<Evidence> {
    let mut evidence = vec![Evidence::text(
        "event",
        detail.to_owned(),
        capture_source(name, lost.device_index, Some(lost.t_ms)),
    )];
    let returned = capture.events.iter().find(|e| {
        e.t_ms >= lost.t_ms
            && e.device_index == lost.device_index
            && matches!(e.kind, EventKind::DeviceReturned)
    });
    if let Some(returned) = returned {
        evidence.push(Evidence::text(
            "answered again",
            format!(
                "after {:.1} s (samples resume there)",
                (returned.t_ms - lost.t_ms) as f64 / 1000.0
            ),
            capture_source(name, returned.device_index, Some(returned.t_ms)),
        ));
    }
    evidence
}

fn xid_finding(code: u32, device: Option<u32>, evidence: Vec<Evidence>) -> Finding {
    let category = xid_category(code);
    let severity = xid_severity(code);
    let mut recommendations = Vec::new();
    match code {
        13 | 31 | 43 => recommendations.push(recommend::debug_kernel_fault()),
        48 | 63 | 64 | 92 | 94 | 95 | 140 | 171 | 172 => {
            recommendations.push(recommend::reset_gpu(
                "The memory error is contained to this GPU.",
            ));
            recommendations.push(recommend::check_hardware());
        }
        _ => {
            recommendations.push(recommend::check_hardware());
            if severity == Severity::Critical {
                recommendations.push(recommend::reset_gpu("The GPU is in an error state."));
            }
        }
    }
    Finding {
        category,
        severity,
        title: format!(
            "Xid {code}{}: {}",
            device.map(|d| format!(" on GPU {d}")).unwrap_or_default(),
            xid_title(code)
        ),
        evidence,
        explanation: format!(
            "The NVIDIA driver logged Xid {code}: {}.",
            xid_meaning(code).trim_end_matches('.')
        ),
        recommendations,
        wizard: Some(Wizard::HardwareAndDriver),
    }
}

fn ecc_and_remap(name: &str, capture: &Capture, out: &mut Vec<Finding>) {
    for device in &capture.devices {
        let d = device.index;
        let health: Vec<_> = capture
            .health
            .iter()
            .filter(|h| h.device_index == d)
            .collect();
        let series = capture.series(d);
        let samples = || series.into_iter().flat_map(|s| s.iter());
        let last_health = health.last();

        // Uncorrectable ECC: volatile (this boot) is critical, aggregate (lifetime) a warning.
        let volatile_unc = samples()
            .rev()
            .find_map(|s| s.ecc_uncorrected_volatile.map(|v| (v, s.t_ms)));
        let aggregate_unc =
            last_health.and_then(|h| h.ecc_uncorrected_aggregate.map(|v| (v, h.t_ms)));
        let ecc_events: u64 = capture
            .events
            .iter()
            .filter(|e| e.device_index == Some(d))
            .filter_map(|e| match e.kind {
                EventKind::EccIncrease {
                    uncorrected_delta, ..
                } => Some(uncorrected_delta),
                _ => None,
            })
            .sum();
        if volatile_unc.is_some_and(|(v, _)| v > 0)
            || ecc_events > 0
            || aggregate_unc.is_some_and(|(v, _)| v > 0)
        {
            let mut evidence = Vec::new();
            if let Some((v, t)) = volatile_unc {
                evidence.push(Evidence::number(
                    "uncorrectable ECC errors since driver load",
                    v as f64,
                    Unit::Count,
                    v.to_string(),
                    capture_source(name, Some(d), Some(t)),
                ));
            }
            if let Some((v, t)) = aggregate_unc {
                evidence.push(Evidence::number(
                    "uncorrectable ECC errors, lifetime",
                    v as f64,
                    Unit::Count,
                    v.to_string(),
                    capture_source(name, Some(d), Some(t)),
                ));
            }
            if ecc_events > 0 {
                evidence.push(Evidence::number(
                    "uncorrectable ECC increases during the capture",
                    ecc_events as f64,
                    Unit::Count,
                    ecc_events.to_string(),
                    capture_source(name, Some(d), None),
                ));
            }
            let recent = volatile_unc.is_some_and(|(v, _)| v > 0) || ecc_events > 0;
            out.push(Finding {
                category: Category::Ecc,
                severity: if recent { Severity::Critical } else { Severity::Warning },
                title: if recent {
                    format!("GPU {d} had uncorrectable ECC errors since the driver loaded")
                } else {
                    format!("GPU {d} has had uncorrectable ECC errors in its lifetime")
                },
                evidence,
                explanation: "Uncorrectable (double-bit) ECC errors corrupt data and kill the process that touches the memory. On Ampere and newer the row is remapped at the next reset; recurring errors mean failing memory.".into(),
                recommendations: vec![recommend::reset_gpu("Pending remaps are applied and the error state is cleared."), recommend::check_hardware()],
                wizard: Some(Wizard::HardwareAndDriver),
            });
        }

        // Corrected ECC rate over the capture.
        let corrected: Vec<(i64, u64)> = samples()
            .filter_map(|s| s.ecc_corrected_volatile.map(|v| (s.t_ms, v)))
            .collect();
        if let (Some(first), Some(last)) = (corrected.first(), corrected.last()) {
            let hours = (last.0 - first.0) as f64 / 3_600_000.0;
            let delta = last.1.saturating_sub(first.1);
            if hours > 0.0 && delta > 0 {
                let per_hour = delta as f64 / hours;
                if per_hour >= thresholds::CORRECTED_ECC_PER_HOUR_WARNING {
                    out.push(Finding {
                        category: Category::Ecc,
                        severity: Severity::Warning,
                        title: format!("GPU {d} corrects {per_hour:.0} single-bit ECC errors per hour"),
                        evidence: vec![
                            Evidence::number("corrected ECC errors during the capture", delta as f64, Unit::Count, delta.to_string(), capture_source(name, Some(d), Some(last.0))),
                            Evidence::number("rate", per_hour, Unit::Count, format!("{per_hour:.0} per hour"), EvidenceSource::Derived),
                        ],
                        explanation: format!(
                            "Corrected errors do no harm by themselves, but a rate above {} per hour (our threshold; the driver raises Xid 92 for an excessive rate) is an early sign of failing memory.",
                            thresholds::CORRECTED_ECC_PER_HOUR_WARNING
                        ),
                        recommendations: vec![recommend::check_hardware()],
                        wizard: Some(Wizard::HardwareAndDriver),
                    });
                }
            }
        }

        let Some(h) = last_health else { continue };
        let src = capture_source(name, Some(d), Some(h.t_ms));
        if h.remapped_rows_failure == Some(true) {
            out.push(Finding {
                category: Category::RowRemap,
                severity: Severity::Critical,
                title: format!("GPU {d}: row remapping failed"),
                evidence: vec![Evidence::text("remapping failure flag", "set", src.clone())],
                explanation: "The GPU ran out of spare rows or could not remap a failing row; DCGM fails the memory health check. The GPU needs service.".into(),
                recommendations: vec![recommend::check_hardware(), recommend::reset_gpu("A reset retries the remap.")],
                wizard: Some(Wizard::HardwareAndDriver),
            });
        } else if h.remapped_rows_pending == Some(true) || h.retired_pages_pending == Some(true) {
            let mut evidence = vec![Evidence::text(
                "remap or retirement pending",
                "yes",
                src.clone(),
            )];
            if let Some(u) = h.remapped_rows_uncorrectable {
                evidence.push(Evidence::number(
                    "rows remapped for uncorrectable errors",
                    u as f64,
                    Unit::Count,
                    u.to_string(),
                    src.clone(),
                ));
            }
            out.push(Finding {
                category: Category::RowRemap,
                severity: Severity::Warning,
                title: format!("GPU {d}: a memory row remap is pending until the next reset"),
                evidence,
                explanation: "A failing memory row was recorded and will be replaced at the next GPU reset. Unaffected applications can keep running (NVIDIA), but the faulty row stays in use until then.".into(),
                recommendations: vec![recommend::reset_gpu("The pending remap takes effect.")],
                wizard: Some(Wizard::HardwareAndDriver),
            });
        }
        let retired = h.retired_pages_sbe.unwrap_or(0) + h.retired_pages_dbe.unwrap_or(0);
        let dbe = h.retired_pages_dbe.unwrap_or(0);
        if retired >= thresholds::MAX_RETIRED_PAGES
            || dbe >= thresholds::DBE_RETIRED_PAGES_SOFT_LIMIT
        {
            out.push(Finding {
                category: Category::RowRemap,
                severity: Severity::Critical,
                title: format!(
                    "GPU {d} has retired {retired} memory pages ({dbe} for double-bit errors)"
                ),
                evidence: vec![
                    Evidence::number(
                        "retired pages",
                        retired as f64,
                        Unit::Count,
                        retired.to_string(),
                        src.clone(),
                    ),
                    Evidence::number(
                        "retired pages (double-bit)",
                        dbe as f64,
                        Unit::Count,
                        dbe.to_string(),
                        src.clone(),
                    ),
                ],
                explanation: format!(
                    "DCGM fails a GPU at {} retired pages or {} double-bit retirements.",
                    thresholds::MAX_RETIRED_PAGES,
                    thresholds::DBE_RETIRED_PAGES_SOFT_LIMIT
                ),
                recommendations: vec![recommend::check_hardware()],
                wizard: Some(Wizard::HardwareAndDriver),
            });
        }
        if h.persistence_mode == Some(false) {
            out.push(Finding {
                category: Category::Ecc,
                severity: Severity::Info,
                title: format!("GPU {d}: persistence mode is off, volatile ECC counters reset with each job"),
                evidence: vec![Evidence::text("persistence mode", "off", src)],
                explanation: "Without persistence mode the driver unloads when no process uses the GPU, and volatile ECC counts start from zero each time: errors from earlier jobs are not visible in them.".into(),
                recommendations: vec![recommend::persistence_mode()],
                wizard: Some(Wizard::HardwareAndDriver),
            });
        }
    }
}

fn thermal(name: &str, capture: &Capture, out: &mut Vec<Finding>) {
    for series in &capture.series {
        let d = series.device_index;
        let with_reasons: Vec<_> = series
            .iter()
            .filter_map(|s| s.throttle_reasons.map(|r| (s.t_ms, r)))
            .collect();
        let throttled: Vec<_> = with_reasons
            .iter()
            .filter(|(_, r)| r & throttle::THERMAL_OR_HARDWARE != 0)
            .collect();
        let hottest = series
            .iter()
            .filter_map(|s| s.temperature_c.map(|c| (c, s.t_ms)))
            .max();
        let fraction = if with_reasons.is_empty() {
            0.0
        } else {
            throttled.len() as f64 / with_reasons.len() as f64
        };
        let hot = hottest.is_some_and(|(c, _)| c >= thresholds::TEMPERATURE_WARNING_C);
        if fraction < thresholds::THROTTLED_SAMPLE_FRACTION_WARNING && !hot {
            continue;
        }
        let mut evidence = Vec::new();
        if !throttled.is_empty() {
            let bits =
                throttled.iter().fold(0, |acc, (_, r)| acc | r) & throttle::THERMAL_OR_HARDWARE;
            evidence.push(Evidence::number(
                "samples with thermal/hardware slowdown",
                fraction * 100.0,
                Unit::Percent,
                format!(
                    "{:.0}% of {} samples ({})",
                    fraction * 100.0,
                    with_reasons.len(),
                    throttle::names(bits).join(", ")
                ),
                capture_source(name, Some(d), throttled.first().map(|(t, _)| *t)),
            ));
        }
        if let Some((c, t)) = hottest {
            evidence.push(Evidence::number(
                "highest temperature",
                c as f64,
                Unit::Celsius,
                format!("{c} °C"),
                capture_source(name, Some(d), Some(t)),
            ));
        }
        out.push(Finding {
            category: Category::Thermal,
            severity: Severity::Warning,
            title: format!("GPU {d} is thermally or power throttled ({:.0}% of samples)", fraction * 100.0),
            evidence,
            explanation: format!(
                "Clocks were cut for heat or power in {:.0}% of the samples (warning from {:.0}%; or from {} °C). This slows jobs but does not cause out-of-memory errors.",
                fraction * 100.0,
                thresholds::THROTTLED_SAMPLE_FRACTION_WARNING * 100.0,
                thresholds::TEMPERATURE_WARNING_C
            ),
            recommendations: vec![recommend::cooling()],
            wizard: Some(Wizard::HardwareAndDriver),
        });
    }
}

/// Findings for the hardware, CUDA-error and library lines of a log (OOM lines are handled by
/// the OOM rule). Lines of the same kind are grouped into one finding.
pub fn log_findings(log: &LogAnalysis, out: &mut Vec<Finding>) {
    let mut groups: BTreeMap<String, Vec<&super::log::LineMatch>> = BTreeMap::new();
    for m in &log.matches {
        let key = match &m.kind {
            LineKind::OutOfMemory { .. } => continue,
            LineKind::CudaError { code, name } => format!("cuda:{}:{name}", code.unwrap_or(0)),
            LineKind::Xid { code, .. } => format!("xid:{code:05}"),
            LineKind::FallenOffBus => "bus".to_owned(),
            LineKind::Ecc => "ecc".to_owned(),
            LineKind::RowRemap { failed } => format!("remap:{failed}"),
            LineKind::Cudnn { status } => format!("cudnn:{status}"),
            LineKind::Cublas { status } => format!("cublas:{status}"),
        };
        groups.entry(key).or_default().push(m);
    }
    for lines in groups.values() {
        let first = lines[0];
        let mut evidence: Vec<Evidence> = lines
            .iter()
            .take(5)
            .map(|m| {
                Evidence::text(
                    "log line",
                    m.text.clone(),
                    EvidenceSource::LogLine {
                        file: log.name.clone(),
                        line: m.line,
                    },
                )
            })
            .collect();
        if lines.len() > 5 {
            evidence.push(Evidence::number(
                "further lines",
                (lines.len() - 5) as f64,
                Unit::Count,
                format!("{} more", lines.len() - 5),
                EvidenceSource::LogLine {
                    file: log.name.clone(),
                    line: lines[5].line,
                },
            ));
        }
        let count = if lines.len() > 1 {
            format!(" ({} lines)", lines.len())
        } else {
            String::new()
        };
        let finding = match &first.kind {
            LineKind::Xid { code, pci, .. } => {
                let mut f = xid_finding(*code, None, evidence);
                f.title = format!("Xid {code} on PCI {pci}{count}: {}", xid_title(*code));
                f
            }
            LineKind::FallenOffBus => Finding {
                category: Category::Xid,
                severity: Severity::Critical,
                title: format!("A GPU fell off the bus{count}"),
                evidence,
                explanation: first.meaning.clone(),
                recommendations: vec![
                    recommend::reset_gpu("The GPU must be recovered (usually a node reboot)."),
                    recommend::check_hardware(),
                ],
                wizard: Some(Wizard::HardwareAndDriver),
            },
            LineKind::RowRemap { failed } => Finding {
                category: Category::RowRemap,
                severity: if *failed {
                    Severity::Critical
                } else {
                    Severity::Warning
                },
                title: if *failed {
                    format!("Memory repair failed on a GPU{count}")
                } else {
                    format!("A memory row remap is pending or was recorded{count}")
                },
                evidence,
                explanation: first.meaning.clone(),
                recommendations: if *failed {
                    vec![
                        recommend::check_hardware(),
                        recommend::reset_gpu("A reset retries the remap."),
                    ]
                } else {
                    vec![recommend::reset_gpu("The pending remap takes effect.")]
                },
                wizard: Some(Wizard::HardwareAndDriver),
            },
            LineKind::Ecc => Finding {
                category: Category::Ecc,
                severity: Severity::Warning,
                title: format!("The log reports ECC errors{count}"),
                evidence,
                explanation: first.meaning.clone(),
                recommendations: vec![recommend::check_hardware()],
                wizard: Some(Wizard::HardwareAndDriver),
            },
            LineKind::CudaError { code, name } => {
                let recommendations = match code {
                    Some(35 | 36 | 222 | 803 | 804) => {
                        vec![recommend::upgrade_driver("see the error")]
                    }
                    Some(214 | 226) => vec![
                        recommend::reset_gpu("The memory error is contained to this GPU."),
                        recommend::check_hardware(),
                    ],
                    Some(700 | 710 | 715 | 716 | 719) | None => {
                        vec![recommend::debug_kernel_fault()]
                    }
                    _ => vec![recommend::check_hardware()],
                };
                Finding {
                    category: first.category,
                    severity: Severity::Critical,
                    title: format!(
                        "CUDA error{}{}{count}",
                        code.map(|c| format!(" {c}")).unwrap_or_default(),
                        if name.is_empty() {
                            String::new()
                        } else {
                            format!(" ({name})")
                        }
                    ),
                    evidence,
                    explanation: first.meaning.clone(),
                    recommendations,
                    wizard: Some(first.wizard),
                }
            }
            LineKind::Cudnn { status } | LineKind::Cublas { status } => {
                let library = if matches!(first.kind, LineKind::Cudnn { .. }) {
                    "cuDNN"
                } else {
                    "cuBLAS"
                };
                Finding {
                    category: first.category,
                    severity: Severity::Critical,
                    title: format!(
                        "{library} failure{}{count}",
                        if status.is_empty() {
                            String::new()
                        } else {
                            format!(" {status}")
                        }
                    ),
                    evidence,
                    explanation: first.meaning.clone(),
                    recommendations: if first.category == Category::Capacity {
                        vec![
                            recommend::reduce_batch_size(None, None),
                            recommend::mixed_precision(None),
                        ]
                    } else {
                        vec![recommend::debug_kernel_fault()]
                    },
                    wizard: Some(first.wizard),
                }
            }
            LineKind::OutOfMemory { .. } => continue,
        };
        out.push(finding);
    }
}

/// Driver ↔ CUDA compatibility, when both a driver version and the CUDA version a framework was
/// built for are known.
pub fn driver_findings(
    driver: Option<(String, EvidenceSource)>,
    framework_cuda: Option<((u32, u32), EvidenceSource)>,
    driver_cuda: Option<((u32, u32), EvidenceSource)>,
    out: &mut Vec<Finding>,
) {
    let Some(((major, minor), cuda_source)) = framework_cuda else {
        return;
    };
    let cuda_evidence = Evidence::text(
        "CUDA the framework was built for",
        format!("{major}.{minor}"),
        cuda_source,
    );
    // The driver's own CUDA version (NVML) answers "too old" directly.
    if let Some(((dmaj, dmin), dsrc)) = &driver_cuda
        && major > *dmaj
    {
        out.push(Finding {
            category: Category::DriverMismatch,
            severity: Severity::Critical,
            title: format!("The driver supports CUDA {dmaj}.{dmin}, the framework needs CUDA {major}.{minor}"),
            evidence: vec![cuda_evidence, Evidence::text("CUDA supported by the driver", format!("{dmaj}.{dmin}"), dsrc.clone())],
            explanation: "A CUDA runtime of a newer major version than the driver supports cannot start (\"CUDA driver version is insufficient for CUDA runtime version\").".into(),
            recommendations: vec![recommend::upgrade_driver(&format!("CUDA {major}.{minor}"))],
            wizard: Some(Wizard::HardwareAndDriver),
        });
        return;
    }
    let Some((driver_text, driver_source)) = driver else {
        return;
    };
    let Some(version) = DriverVersion::parse(&driver_text) else {
        return;
    };
    let driver_evidence = Evidence::text("driver version", driver_text.clone(), driver_source);
    match compat::check(&version, (major, minor)) {
        Compatibility::TooOld { minimum_driver_branch } => out.push(Finding {
            category: Category::DriverMismatch,
            severity: Severity::Critical,
            title: format!("Driver {driver_text} is too old for CUDA {major}.{minor} (needs {minimum_driver_branch} or newer)"),
            evidence: vec![driver_evidence, cuda_evidence],
            explanation: format!("NVIDIA's compatibility table requires driver branch {minimum_driver_branch} or newer for CUDA {major}.x; older drivers fail at start-up."),
            recommendations: vec![recommend::upgrade_driver(&format!("CUDA {major}.{minor}"))],
            wizard: Some(Wizard::HardwareAndDriver),
        }),
        Compatibility::MinorVersionCompatible { toolkit_driver } => out.push(Finding {
            category: Category::DriverMismatch,
            severity: Severity::Warning,
            title: format!("Driver {driver_text} runs CUDA {major}.{minor} in minor-version compatibility (full support from {toolkit_driver})"),
            evidence: vec![driver_evidence, cuda_evidence],
            explanation: "Minor-version compatibility runs with a limited feature set: JIT of newer PTX fails and some APIs report \"call requires newer driver\".".into(),
            recommendations: vec![recommend::upgrade_driver(&format!("CUDA {major}.{minor}, driver {toolkit_driver}"))],
            wizard: Some(Wizard::HardwareAndDriver),
        }),
        Compatibility::Full | Compatibility::Unknown => {}
    }
}
