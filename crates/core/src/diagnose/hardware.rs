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
use crate::model::{Capture, Event, EventKind, HealthSample};

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

/// Xid, ECC, row-remap, thermal and persistence findings from a capture (or a live reading).
pub fn capture_findings(name: &str, capture: &Capture, out: &mut Vec<Finding>) {
    xid_events(name, capture, out);
    ecc_and_remap(name, capture, out);
    thermal(name, capture, out);
}

/// The hardware rules' verdict on one GPU, area by area: the worst severity of the findings each
/// area gives (`None`: nothing found). The device list's health badges show this instead of
/// judging the counters themselves, so a badge and the Hardware and driver wizard never disagree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceHealth {
    /// Uncorrectable ECC errors (this boot, during the capture or in the GPU's lifetime) and the
    /// corrected-error rate.
    pub ecc: Option<Severity>,
    /// Row remapping (failed or pending), rows remapped for uncorrectable errors and retired
    /// pages.
    pub row_remap: Option<Severity>,
    /// Xid errors and a GPU that stopped answering.
    pub xid: Option<Severity>,
}

/// [`DeviceHealth`] of GPU `d` in `capture`, from the same rules as [`capture_findings`]. Cheap
/// enough for every frame: the counters are read from the newest samples back.
pub fn device_health(capture: &Capture, d: u32) -> DeviceHealth {
    let worst = |findings: &[Option<Finding>]| findings.iter().flatten().map(|f| f.severity).min();
    let ecc = worst(&[
        uncorrectable_ecc("", capture, d),
        corrected_ecc_rate("", capture, d),
    ]);
    let row_remap = capture
        .health
        .iter()
        .rfind(|h| h.device_index == d)
        .and_then(|health| {
            let source = EvidenceSource::capture("", capture, Some(d), Some(health.t_ms));
            let gpu = capture.gpu_label(d);
            worst(&[
                row_remap(&gpu, health, &source),
                remapped_rows(&gpu, capture, d, health, &source),
                retired_pages(&gpu, health, &source),
            ])
        });
    let xid = capture
        .events
        .iter()
        .filter(|e| e.device_index == Some(d))
        .filter_map(|e| match e.kind {
            EventKind::Xid { code, .. } => {
                Some(xid_severity(u32::try_from(code).unwrap_or(u32::MAX)))
            }
            EventKind::DeviceLost { .. } => Some(Severity::Critical),
            _ => None,
        })
        .min();
    DeviceHealth {
        ecc,
        row_remap,
        xid,
    }
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
            EvidenceSource::capture(name, capture, device, times.first().copied()),
        )];
        if let Some(last) = times.last().filter(|_| times.len() > 1) {
            evidence.push(Evidence::number(
                "last seen",
                *last as f64,
                Unit::Code,
                format!("t={last} ms"),
                EvidenceSource::capture(name, capture, device, Some(*last)),
            ));
        }
        let label = device.map(|d| capture.gpu_label(d));
        out.push(xid_finding(code32, label.as_deref(), evidence));
    }
    for event in &capture.events {
        if let EventKind::DeviceLost { detail } = &event.kind {
            let gpu = event
                .device_index
                .map(|d| capture.gpu_label(d))
                .unwrap_or_else(|| "A GPU".into());
            out.push(
                Finding::new(
                    Category::Xid,
                    Severity::Critical,
                    format!("{gpu} stopped answering"),
                )
                .with_evidence(lost_evidence(name, capture, event, detail))
                .explained(
                    "NVML reported the GPU as lost (usually Xid 79, fallen off the bus): a \
                     hardware, power or thermal problem, not the application.",
                )
                .recommend([
                    recommend::reset_gpu("The GPU must be recovered before it can be used."),
                    recommend::check_hardware(),
                ])
                .in_wizard(Wizard::HardwareAndDriver),
            );
        }
    }
}

/// What NVML said when the GPU was lost and, when it answered again later, after how long.
fn lost_evidence(name: &str, capture: &Capture, lost: &Event, detail: &str) -> Vec<Evidence> {
    let mut evidence = vec![Evidence::text(
        "event",
        detail.to_owned(),
        EvidenceSource::capture(name, capture, lost.device_index, Some(lost.t_ms)),
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
            EvidenceSource::capture(name, capture, returned.device_index, Some(returned.t_ms)),
        ));
    }
    evidence
}

/// `device` names the GPU (`GPU 3`, `node-a GPU 3`) when the Xid was on a known one.
fn xid_finding(code: u32, device: Option<&str>, evidence: Vec<Evidence>) -> Finding {
    let severity = xid_severity(code);
    let recommendations = match code {
        13 | 31 | 43 => vec![recommend::debug_kernel_fault()],
        48 | 63 | 64 | 92 | 94 | 95 | 140 | 171 | 172 => vec![
            recommend::reset_gpu("The memory error is contained to this GPU."),
            recommend::check_hardware(),
        ],
        _ if severity == Severity::Critical => vec![
            recommend::check_hardware(),
            recommend::reset_gpu("The GPU is in an error state."),
        ],
        _ => vec![recommend::check_hardware()],
    };
    let on_gpu = device.map(|d| format!(" on {d}")).unwrap_or_default();
    Finding::new(
        xid_category(code),
        severity,
        format!("Xid {code}{on_gpu}: {}", xid_title(code)),
    )
    .with_evidence(evidence)
    .explained(format!(
        "The NVIDIA driver logged Xid {code}: {}.",
        xid_meaning(code).trim_end_matches('.')
    ))
    .recommend(recommendations)
    .in_wizard(Wizard::HardwareAndDriver)
}

/// ECC, row-remap, retired-page and persistence findings, device by device.
fn ecc_and_remap(name: &str, capture: &Capture, out: &mut Vec<Finding>) {
    for device in &capture.devices {
        let d = device.index;
        let gpu = device.label();
        out.extend(uncorrectable_ecc(name, capture, d));
        out.extend(corrected_ecc_rate(name, capture, d));
        let Some(health) = capture.health.iter().rfind(|h| h.device_index == d) else {
            continue;
        };
        let source = EvidenceSource::capture(name, capture, Some(d), Some(health.t_ms));
        out.extend(row_remap(&gpu, health, &source));
        out.extend(remapped_rows(&gpu, capture, d, health, &source));
        out.extend(retired_pages(&gpu, health, &source));
        out.extend(persistence_off(&gpu, health, source));
    }
}

/// Uncorrectable ECC errors on GPU `d`: volatile (this boot) or during the capture is critical,
/// aggregate (lifetime) only a warning.
fn uncorrectable_ecc(name: &str, capture: &Capture, d: u32) -> Option<Finding> {
    let volatile = capture
        .series(d)
        .into_iter()
        .flat_map(|s| s.iter())
        .rev()
        .find_map(|s| s.ecc_uncorrected_volatile.map(|v| (v, s.t_ms)));
    let aggregate = capture
        .health
        .iter()
        .rfind(|h| h.device_index == d)
        .and_then(|h| h.ecc_uncorrected_aggregate.map(|v| (v, h.t_ms)));
    let during_capture: u64 = capture
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
    let recent = volatile.is_some_and(|(v, _)| v > 0) || during_capture > 0;
    if !recent && aggregate.is_none_or(|(v, _)| v == 0) {
        return None;
    }
    let mut evidence = Vec::new();
    if let Some((v, t)) = volatile {
        evidence.push(Evidence::count(
            "uncorrectable ECC errors since driver load",
            v,
            EvidenceSource::capture(name, capture, Some(d), Some(t)),
        ));
    }
    if let Some((v, t)) = aggregate {
        evidence.push(Evidence::count(
            "uncorrectable ECC errors, lifetime",
            v,
            EvidenceSource::capture(name, capture, Some(d), Some(t)),
        ));
    }
    if during_capture > 0 {
        evidence.push(Evidence::count(
            "uncorrectable ECC increases during the capture",
            during_capture,
            EvidenceSource::capture(name, capture, Some(d), None),
        ));
    }
    let (severity, title) = if recent {
        (
            Severity::Critical,
            format!(
                "{} had uncorrectable ECC errors since the driver loaded",
                capture.gpu_label(d)
            ),
        )
    } else {
        (
            Severity::Warning,
            format!(
                "{} has had uncorrectable ECC errors in its lifetime",
                capture.gpu_label(d)
            ),
        )
    };
    Some(
        Finding::new(Category::Ecc, severity, title)
            .with_evidence(evidence)
            .explained(
                "Uncorrectable (double-bit) ECC errors corrupt data and kill the process that \
                 touches the memory. On Ampere and newer the row is remapped at the next reset; \
                 recurring errors mean failing memory.",
            )
            .recommend([
                recommend::reset_gpu("Pending remaps are applied and the error state is cleared."),
                recommend::check_hardware(),
            ])
            .in_wizard(Wizard::HardwareAndDriver),
    )
}

/// The corrected (single-bit) ECC rate of GPU `d` over the capture, when it is above the
/// warning threshold.
fn corrected_ecc_rate(name: &str, capture: &Capture, d: u32) -> Option<Finding> {
    let mut corrected = capture
        .series(d)?
        .iter()
        .filter_map(|s| s.ecc_corrected_volatile.map(|v| (s.t_ms, v)));
    let first = corrected.next()?;
    let last = corrected.next_back()?;
    let hours = (last.0 - first.0) as f64 / 3_600_000.0;
    let delta = last.1.saturating_sub(first.1);
    if hours <= 0.0 || delta == 0 {
        return None;
    }
    let per_hour = delta as f64 / hours;
    if per_hour < thresholds::CORRECTED_ECC_PER_HOUR_WARNING {
        return None;
    }
    Some(
        Finding::new(
            Category::Ecc,
            Severity::Warning,
            format!(
                "{} corrects {per_hour:.0} single-bit ECC errors per hour",
                capture.gpu_label(d)
            ),
        )
        .with_evidence([
            Evidence::count(
                "corrected ECC errors during the capture",
                delta,
                EvidenceSource::capture(name, capture, Some(d), Some(last.0)),
            ),
            Evidence::number(
                "rate",
                per_hour,
                Unit::Count,
                format!("{per_hour:.0} per hour"),
                EvidenceSource::Derived,
            ),
        ])
        .explained(format!(
            "Corrected errors do no harm by themselves, but a rate above {} per hour (our \
             threshold; the driver raises Xid 92 for an excessive rate) is an early sign of \
             failing memory.",
            thresholds::CORRECTED_ECC_PER_HOUR_WARNING
        ))
        .recommend([recommend::check_hardware()])
        .in_wizard(Wizard::HardwareAndDriver),
    )
}

/// A failed row remap (critical) or one pending until the next reset (warning), from the
/// latest health sample of GPU `d`.
fn row_remap(gpu: &str, health: &HealthSample, source: &EvidenceSource) -> Option<Finding> {
    if health.remapped_rows_failure == Some(true) {
        return Some(
            Finding::new(
                Category::RowRemap,
                Severity::Critical,
                format!("{gpu}: row remapping failed"),
            )
            .with_evidence([Evidence::text(
                "remapping failure flag",
                "set",
                source.clone(),
            )])
            .explained(
                "The GPU ran out of spare rows or could not remap a failing row; DCGM fails the \
                 memory health check. The GPU needs service.",
            )
            .recommend([
                recommend::check_hardware(),
                recommend::reset_gpu("A reset retries the remap."),
            ])
            .in_wizard(Wizard::HardwareAndDriver),
        );
    }
    if health.remapped_rows_pending != Some(true) && health.retired_pages_pending != Some(true) {
        return None;
    }
    let mut evidence = vec![Evidence::text(
        "remap or retirement pending",
        "yes",
        source.clone(),
    )];
    if let Some(rows) = health.remapped_rows_uncorrectable {
        evidence.push(Evidence::count(
            "rows remapped for uncorrectable errors",
            rows,
            source.clone(),
        ));
    }
    Some(
        Finding::new(
            Category::RowRemap,
            Severity::Warning,
            format!("{gpu}: a memory row remap is pending until the next reset"),
        )
        .with_evidence(evidence)
        .explained(
            "A failing memory row was recorded and will be replaced at the next GPU reset. \
             Unaffected applications can keep running (NVIDIA), but the faulty row stays in use \
             until then.",
        )
        .recommend([recommend::reset_gpu("The pending remap takes effect.")])
        .in_wizard(Wizard::HardwareAndDriver),
    )
}

/// Rows remapped for uncorrectable errors (dcgm-exporter's `DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS`,
/// NVML's remapping counters) when no failure or pending remap was reported for them already:
/// new ones during the capture are a warning (the memory failed while it was watched), old ones a
/// note (the GPU is using spare rows). `latest` is GPU `d`'s newest slow-tier reading, cited by
/// `source`; the first one with a count gives the start of the capture.
fn remapped_rows(
    gpu: &str,
    capture: &Capture,
    d: u32,
    latest: &HealthSample,
    source: &EvidenceSource,
) -> Option<Finding> {
    if latest.remapped_rows_failure == Some(true) || latest.remapped_rows_pending == Some(true) {
        return None;
    }
    let mut counts = capture
        .health
        .iter()
        .filter(|h| h.device_index == d)
        .filter_map(|h| h.remapped_rows_uncorrectable);
    let first = counts.next()?;
    let last = counts.next_back().unwrap_or(first);
    if last == 0 {
        return None;
    }
    let new_rows = last.saturating_sub(first);
    let mut evidence = vec![Evidence::count(
        "rows remapped for uncorrectable errors",
        last,
        source.clone(),
    )];
    if new_rows > 0 {
        evidence.push(Evidence::number(
            "remapped during the capture",
            new_rows as f64,
            Unit::Count,
            format!("{new_rows} (from {first} to {last})"),
            source.clone(),
        ));
    }
    let (severity, title) = if new_rows > 0 {
        (
            Severity::Warning,
            format!(
                "{gpu}: {new_rows} memory row(s) remapped for uncorrectable errors during the \
                 capture ({last} in all)"
            ),
        )
    } else {
        (
            Severity::Info,
            format!("{gpu} has {last} memory row(s) remapped for uncorrectable errors"),
        )
    };
    Some(
        Finding::new(Category::RowRemap, severity, title)
            .with_evidence(evidence)
            .explained(
                "Each remapped row replaced memory that had an uncorrectable (double-bit) error; \
                 the GPU has a few spare rows per bank. Rows that keep being remapped mean \
                 failing memory: a remap failure follows once the spares of a bank run out, and \
                 DCGM then fails the GPU.",
            )
            .recommend([recommend::check_hardware()])
            .in_wizard(Wizard::HardwareAndDriver),
    )
}

/// Retired pages (pre-Ampere GPUs) at DCGM's failure limits.
fn retired_pages(gpu: &str, health: &HealthSample, source: &EvidenceSource) -> Option<Finding> {
    let dbe = health.retired_pages_dbe.unwrap_or(0);
    let retired = health.retired_pages_sbe.unwrap_or(0) + dbe;
    if retired < thresholds::MAX_RETIRED_PAGES && dbe < thresholds::DBE_RETIRED_PAGES_SOFT_LIMIT {
        return None;
    }
    Some(
        Finding::new(
            Category::RowRemap,
            Severity::Critical,
            format!("{gpu} has retired {retired} memory pages ({dbe} for double-bit errors)"),
        )
        .with_evidence([
            Evidence::count("retired pages", retired, source.clone()),
            Evidence::count("retired pages (double-bit)", dbe, source.clone()),
        ])
        .explained(format!(
            "DCGM fails a GPU at {} retired pages or {} double-bit retirements.",
            thresholds::MAX_RETIRED_PAGES,
            thresholds::DBE_RETIRED_PAGES_SOFT_LIMIT
        ))
        .recommend([recommend::check_hardware()])
        .in_wizard(Wizard::HardwareAndDriver),
    )
}

/// Persistence mode off: volatile ECC counters start from zero with every job.
fn persistence_off(gpu: &str, health: &HealthSample, source: EvidenceSource) -> Option<Finding> {
    if health.persistence_mode != Some(false) {
        return None;
    }
    Some(
        Finding::new(
            Category::Ecc,
            Severity::Info,
            format!("{gpu}: persistence mode is off, volatile ECC counters reset with each job"),
        )
        .with_evidence([Evidence::text("persistence mode", "off", source)])
        .explained(
            "Without persistence mode the driver unloads when no process uses the GPU, and \
             volatile ECC counts start from zero each time: errors from earlier jobs are not \
             visible in them.",
        )
        .recommend([recommend::persistence_mode()])
        .in_wizard(Wizard::HardwareAndDriver),
    )
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
                EvidenceSource::capture(name, capture, Some(d), throttled.first().map(|(t, _)| *t)),
            ));
        }
        if let Some((c, t)) = hottest {
            evidence.push(Evidence::number(
                "highest temperature",
                c as f64,
                Unit::Celsius,
                format!("{c} °C"),
                EvidenceSource::capture(name, capture, Some(d), Some(t)),
            ));
        }
        out.push(
            Finding::new(
                Category::Thermal,
                Severity::Warning,
                format!(
                    "{} is thermally or power throttled ({:.0}% of samples)",
                    capture.gpu_label(d),
                    fraction * 100.0
                ),
            )
            .with_evidence(evidence)
            .explained(format!(
                "Clocks were cut for heat or power in {:.0}% of the samples (warning from {:.0}%; \
                 or from {} °C). This slows jobs but does not cause out-of-memory errors.",
                fraction * 100.0,
                thresholds::THROTTLED_SAMPLE_FRACTION_WARNING * 100.0,
                thresholds::TEMPERATURE_WARNING_C
            ))
            .recommend([recommend::cooling()])
            .in_wizard(Wizard::HardwareAndDriver),
        );
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
        if let LineKind::Xid { code, pci, .. } = &first.kind {
            let mut finding = xid_finding(*code, None, evidence);
            finding.title = format!("Xid {code} on PCI {pci}{count}: {}", xid_title(*code));
            out.push(finding);
            continue;
        }
        let finding = match &first.kind {
            LineKind::Xid { .. } | LineKind::OutOfMemory { .. } => continue,
            LineKind::FallenOffBus => Finding::new(
                Category::Xid,
                Severity::Critical,
                format!("A GPU fell off the bus{count}"),
            )
            .recommend([
                recommend::reset_gpu("The GPU must be recovered (usually a node reboot)."),
                recommend::check_hardware(),
            ])
            .in_wizard(Wizard::HardwareAndDriver),
            LineKind::RowRemap { failed: true } => Finding::new(
                Category::RowRemap,
                Severity::Critical,
                format!("Memory repair failed on a GPU{count}"),
            )
            .recommend([
                recommend::check_hardware(),
                recommend::reset_gpu("A reset retries the remap."),
            ])
            .in_wizard(Wizard::HardwareAndDriver),
            LineKind::RowRemap { failed: false } => Finding::new(
                Category::RowRemap,
                Severity::Warning,
                format!("A memory row remap is pending or was recorded{count}"),
            )
            .recommend([recommend::reset_gpu("The pending remap takes effect.")])
            .in_wizard(Wizard::HardwareAndDriver),
            LineKind::Ecc => Finding::new(
                Category::Ecc,
                Severity::Warning,
                format!("The log reports ECC errors{count}"),
            )
            .recommend([recommend::check_hardware()])
            .in_wizard(Wizard::HardwareAndDriver),
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
                let code = code.map(|c| format!(" {c}")).unwrap_or_default();
                let name = if name.is_empty() {
                    String::new()
                } else {
                    format!(" ({name})")
                };
                Finding::new(
                    first.category,
                    Severity::Critical,
                    format!("CUDA error{code}{name}{count}"),
                )
                .recommend(recommendations)
                .in_wizard(first.wizard)
            }
            LineKind::Cudnn { status } | LineKind::Cublas { status } => {
                let library = if matches!(first.kind, LineKind::Cudnn { .. }) {
                    "cuDNN"
                } else {
                    "cuBLAS"
                };
                let status = if status.is_empty() {
                    String::new()
                } else {
                    format!(" {status}")
                };
                let recommendations = if first.category == Category::Capacity {
                    vec![
                        recommend::reduce_batch_size(None, None),
                        recommend::mixed_precision(None),
                    ]
                } else {
                    vec![recommend::debug_kernel_fault()]
                };
                Finding::new(
                    first.category,
                    Severity::Critical,
                    format!("{library} failure{status}{count}"),
                )
                .recommend(recommendations)
                .in_wizard(first.wizard)
            }
        };
        // Every log finding shows its lines and explains them with the lines' meaning.
        let finding = finding
            .with_evidence(evidence)
            .explained(first.meaning.clone());
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
        out.push(
            Finding::new(
                Category::DriverMismatch,
                Severity::Critical,
                format!(
                    "The driver supports CUDA {dmaj}.{dmin}, the framework needs CUDA \
                     {major}.{minor}"
                ),
            )
            .with_evidence([
                cuda_evidence,
                Evidence::text(
                    "CUDA supported by the driver",
                    format!("{dmaj}.{dmin}"),
                    dsrc.clone(),
                ),
            ])
            .explained(
                "A CUDA runtime of a newer major version than the driver supports cannot start \
                 (\"CUDA driver version is insufficient for CUDA runtime version\").",
            )
            .recommend([recommend::upgrade_driver(&format!("CUDA {major}.{minor}"))])
            .in_wizard(Wizard::HardwareAndDriver),
        );
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
        Compatibility::TooOld {
            minimum_driver_branch,
        } => out.push(
            Finding::new(
                Category::DriverMismatch,
                Severity::Critical,
                format!(
                    "Driver {driver_text} is too old for CUDA {major}.{minor} (needs \
                     {minimum_driver_branch} or newer)"
                ),
            )
            .with_evidence([driver_evidence, cuda_evidence])
            .explained(format!(
                "NVIDIA's compatibility table requires driver branch {minimum_driver_branch} or \
                 newer for CUDA {major}.x; older drivers fail at start-up."
            ))
            .recommend([recommend::upgrade_driver(&format!("CUDA {major}.{minor}"))])
            .in_wizard(Wizard::HardwareAndDriver),
        ),
        Compatibility::MinorVersionCompatible { toolkit_driver } => out.push(
            Finding::new(
                Category::DriverMismatch,
                Severity::Warning,
                format!(
                    "Driver {driver_text} runs CUDA {major}.{minor} in minor-version \
                     compatibility (full support from {toolkit_driver})"
                ),
            )
            .with_evidence([driver_evidence, cuda_evidence])
            .explained(
                "Minor-version compatibility runs with a limited feature set: JIT of newer PTX \
                 fails and some APIs report \"call requires newer driver\".",
            )
            .recommend([recommend::upgrade_driver(&format!(
                "CUDA {major}.{minor}, driver {toolkit_driver}"
            ))])
            .in_wizard(Wizard::HardwareAndDriver),
        ),
        Compatibility::Full | Compatibility::Unknown => {}
    }
}
