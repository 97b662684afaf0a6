//! The GPU checks' results judged: the [`CheckReport`] of `crate::model::checks::check::run_checks` (run by
//! `vramscope check`, the Hardware checks panel and the "Hardware and driver" wizard) turned into
//! findings the diagnosis and the report carry: memory-test mismatches, ECC and row-remap counters
//! that changed, CUDA and NVML disagreeing, no driver. The memory test's mismatches are also
//! listed here, once, for every place that shows them ([`listed_mismatches`]).

use super::finding::{
    Category, Evidence, EvidenceSource, Finding, InputSummary, Severity, Unit, Wizard,
};
use super::recommend;
use crate::model::checks::{CheckReport, CudaError, MemoryMismatch, MemtestReport};

/// Mismatching words listed at most, in findings, the Hardware checks panel and
/// `vramscope check` (the count is always given, and the JSON output has every recorded one).
pub const MAX_LISTED_MISMATCHES: usize = 16;

/// One mismatching word, as every view lists it: where (`"own address at 0x7f…"`) and what
/// (`"expected …, read …, read again … (1 bit flipped)"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedMismatch {
    pub place: String,
    pub reading: String,
}

/// What a mismatch read, in words.
fn mismatch_reading(mismatch: &MemoryMismatch) -> String {
    format!(
        "expected {:#018x}, read {:#018x}, read again {:#018x} ({} bit(s) flipped)",
        mismatch.expected, mismatch.actual, mismatch.second_read, mismatch.flipped_bits
    )
}

/// The first [`MAX_LISTED_MISMATCHES`] mismatches of a memory test, across its tests, and how
/// many it counted beyond them (recorded or not).
pub fn listed_mismatches(memtest: &MemtestReport) -> (Vec<ListedMismatch>, u64) {
    let listed: Vec<ListedMismatch> = memtest
        .tests
        .iter()
        .flat_map(|test| test.errors.iter().map(move |m| (test.label.as_str(), m)))
        .take(MAX_LISTED_MISMATCHES)
        .map(|(label, m)| ListedMismatch {
            place: format!("{label} at {:#x}", m.address),
            reading: mismatch_reading(m),
        })
        .collect();
    let not_listed = memtest.total_errors.saturating_sub(listed.len() as u64);
    (listed, not_listed)
}

/// Where check evidence comes from, as cited in findings.
fn source() -> EvidenceSource {
    EvidenceSource::User {
        what: "GPU checks run on this machine".to_owned(),
    }
}

/// What the checks found: a line for the evidence list and the findings.
pub fn check_findings(outcome: &Result<CheckReport, CudaError>) -> (InputSummary, Vec<Finding>) {
    let summary = |text: String| InputSummary {
        kind: "gpu checks".to_owned(),
        name: "this machine".to_owned(),
        summary: text,
    };
    match outcome {
        Err(CudaError::Cancelled) => (summary("cancelled before a result".to_owned()), Vec::new()),
        Err(CudaError::NoDriver) => {
            let finding = Finding::new(
                Category::DriverMismatch,
                Severity::Warning,
                "No NVIDIA driver on this machine: the GPU checks could not run",
            )
            .with_evidence([Evidence::text(
                "CUDA driver library",
                "libcuda.so.1 cannot be loaded",
                source(),
            )])
            .explained(
                "Without the driver there is no GPU to check here. If this machine should have a \
                 GPU, the driver is missing or not on the library path; if the job ran elsewhere, \
                 run the checks there (vramscope check).",
            )
            .recommend([recommend::install_driver()])
            .in_wizard(Wizard::HardwareAndDriver);
            (summary("no NVIDIA driver found".to_owned()), vec![finding])
        }
        Err(error) => {
            let finding = Finding::new(
                Category::CudaError,
                Severity::Warning,
                "The GPU checks failed",
            )
            .with_evidence([Evidence::text("error", error.to_string(), source())])
            .explained(
                "The driver answered with an error, so the hardware could not be checked; the \
                 error itself may point at the problem.",
            )
            .in_wizard(Wizard::HardwareAndDriver);
            (summary(format!("failed: {error}")), vec![finding])
        }
        Ok(report) => report_findings(report, summary),
    }
}

fn report_findings(
    report: &CheckReport,
    summary: impl Fn(String) -> InputSummary,
) -> (InputSummary, Vec<Finding>) {
    let device = report.tested_device;
    let mut findings = Vec::new();
    if let Some(memtest) = &report.memtest {
        findings.extend(memtest_mismatches(device, memtest));
        findings.extend(counters_changed(device, memtest));
        findings.extend(memtest_stopped(device, memtest));
        findings.extend(memtest_cancelled(device, memtest));
    }
    findings.extend(cuda_nvml_disagreements(report));
    let memtest_text = match &report.memtest {
        Some(m) => format!(
            ", memory test {} mismatch(es){}",
            m.total_errors,
            if m.cancelled { " (cancelled)" } else { "" }
        ),
        None => String::new(),
    };
    let text = format!(
        "CUDA {} driver, {} device(s), {} disagreement(s){memtest_text}",
        report.cuda_driver_version, report.device_count, report.disagreement_count
    );
    (summary(text), findings)
}

/// Words that read back different: the card is faulty.
fn memtest_mismatches(device: usize, memtest: &MemtestReport) -> Option<Finding> {
    if memtest.total_errors == 0 {
        return None;
    }
    let (listed, _) = listed_mismatches(memtest);
    let mut evidence = vec![Evidence::count(
        "mismatching words",
        memtest.total_errors,
        source(),
    )];
    evidence.extend(
        listed
            .into_iter()
            .map(|m| Evidence::text(m.place, m.reading, source())),
    );
    Some(
        Finding::new(
            Category::Ecc,
            Severity::Critical,
            format!(
                "Memory test: {} mismatch(es) on GPU {device}",
                memtest.total_errors
            ),
        )
        .with_evidence(evidence)
        .explained(
            "Words written to GPU memory read back different. Healthy memory never does this: \
             the card (or its cooling or power) is faulty, and results computed on it cannot be \
             trusted.",
        )
        .recommend([recommend::drain_gpu()])
        .in_wizard(Wizard::HardwareAndDriver),
    )
}

/// NVML's ECC or row-remap counters moved while the test ran.
fn counters_changed(device: usize, memtest: &MemtestReport) -> Option<Finding> {
    if memtest.health_changes.is_empty() {
        return None;
    }
    let remap = memtest
        .health_changes
        .iter()
        .any(|c| c.to_ascii_lowercase().contains("remap"));
    let (category, what) = if remap {
        (Category::RowRemap, "row-remap")
    } else {
        (Category::Ecc, "ECC")
    };
    Some(
        Finding::new(
            category,
            Severity::Critical,
            format!("GPU {device}'s {what} counters changed during the memory test"),
        )
        .with_evidence(
            memtest
                .health_changes
                .iter()
                .map(|change| Evidence::text("NVML counter", change.clone(), source())),
        )
        .explained(
            "The driver counted new memory errors while the test ran: the memory has cells that \
             fail under load.",
        )
        .recommend([recommend::check_remap()])
        .in_wizard(Wizard::HardwareAndDriver),
    )
}

/// A CUDA call failed during the test, so only part of the memory was tested.
fn memtest_stopped(device: usize, memtest: &MemtestReport) -> Option<Finding> {
    let stopped_by = memtest.stopped_by.as_ref()?;
    Some(
        Finding::new(
            Category::CudaError,
            Severity::Warning,
            format!("The memory test on GPU {device} stopped early"),
        )
        .with_evidence([Evidence::text("error", stopped_by.to_string(), source())])
        .explained(
            "A CUDA call failed during the memory test, so only part of the memory was tested.",
        )
        .in_wizard(Wizard::HardwareAndDriver),
    )
}

/// The user cancelled the memory test: no mismatch so far is no clean bill of health.
fn memtest_cancelled(device: usize, memtest: &MemtestReport) -> Option<Finding> {
    if !memtest.cancelled || memtest.stopped_by.is_some() {
        return None;
    }
    Some(
        Finding::new(
            Category::Inconclusive,
            Severity::Info,
            format!("The memory test on GPU {device} was cancelled before it finished"),
        )
        .with_evidence([Evidence::number(
            "bytes tested",
            memtest.tested_bytes as f64,
            Unit::Bytes,
            crate::model::format_bytes(memtest.tested_bytes),
            source(),
        )])
        .explained(
            "Only part of the passes ran: no mismatch so far, which is not a clean bill of \
             health for the memory. Run the test to the end to judge it.",
        )
        .in_wizard(Wizard::HardwareAndDriver),
    )
}

/// The facts CUDA and NVML state differently.
fn cuda_nvml_disagreements(report: &CheckReport) -> Option<Finding> {
    let disagreements: Vec<_> = report
        .driver_comparisons
        .iter()
        .map(|c| ("driver".to_owned(), c))
        .chain(report.devices.iter().flat_map(|d| {
            d.comparisons
                .iter()
                .map(move |c| (format!("GPU {}", d.cuda.ordinal), c))
        }))
        .filter(|(_, c)| !c.agrees)
        .collect();
    if disagreements.is_empty() {
        return None;
    }
    Some(
        Finding::new(
            Category::DriverMismatch,
            Severity::Warning,
            format!("CUDA and NVML disagree on {} fact(s)", disagreements.len()),
        )
        .with_evidence(disagreements.iter().map(|(scope, c)| {
            Evidence::text(
                format!("{scope} {}", c.field),
                format!("CUDA {}, NVML {}: {}", c.cuda, c.nvml, c.note),
                source(),
            )
        }))
        .explained(
            "The CUDA driver and NVML describe the same hardware differently. This happens when \
             the user-space driver library and the kernel module come from different driver \
             versions, or inside containers with a mismatched libcuda.",
        )
        .recommend([recommend::match_driver()])
        .in_wizard(Wizard::HardwareAndDriver),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_driver_and_cancel_become_evidence() {
        let (summary, findings) = check_findings(&Err(CudaError::NoDriver));
        assert_eq!(summary.summary, "no NVIDIA driver found");
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].category, Category::DriverMismatch);
        assert!(findings[0].title.contains("No NVIDIA driver"));
        let (summary, findings) = check_findings(&Err(CudaError::Cancelled));
        assert!(summary.summary.contains("cancelled"));
        assert!(findings.is_empty());
    }

    #[test]
    fn a_cancelled_memory_test_is_inconclusive_not_healthy() {
        let mut report = report_with_problems();
        report.disagreement_count = 0;
        report.driver_comparisons.clear();
        for device in &mut report.devices {
            device.comparisons.clear();
        }
        if let Some(memtest) = report.memtest.as_mut() {
            memtest.total_errors = 0;
            for test in &mut memtest.tests {
                test.error_count = 0;
                test.errors.clear();
            }
            memtest.health_changes.clear();
            memtest.stopped_by = None;
            memtest.cancelled = true;
        }
        let (_, findings) = check_findings(&Ok(report));
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].category, Category::Inconclusive);
        assert_eq!(findings[0].severity, Severity::Info);
    }

    fn report_with_problems() -> CheckReport {
        use crate::model::checks::{
            Comparison, CudaDeviceFacts, DeviceCheck, LargestBlock, MemoryMismatch, MemtestConfig,
            MemtestKind, MemtestReport, MemtestTestResult, NvmlSystemFacts,
        };
        let comparison = |field: &str, agrees: bool| Comparison {
            field: field.to_owned(),
            cuda: "13.0".to_owned(),
            nvml: if agrees { "13.0" } else { "12.8" }.to_owned(),
            agrees,
            note: "driver library and kernel module differ".to_owned(),
        };
        CheckReport {
            schema: String::new(),
            cuda_driver_version: "13.0".to_owned(),
            cuda_driver_version_raw: 13000,
            device_count: 1,
            nvml: NvmlSystemFacts::default(),
            driver_comparisons: vec![comparison("CUDA version", false)],
            devices: vec![DeviceCheck {
                cuda: CudaDeviceFacts::default(),
                nvml: None,
                nvml_error: None,
                comparisons: vec![comparison("total memory", true)],
            }],
            tested_device: 0,
            largest_block: LargestBlock {
                free_bytes: 1 << 30,
                largest_bytes: 1 << 29,
                smallest_failed_bytes: 1 << 30,
                attempts: 3,
                elapsed_ms: 1,
                converged: true,
                ratio_of_free: 0.5,
                explanation: String::new(),
            },
            memtest: Some(MemtestReport {
                config: MemtestConfig::default(),
                free_bytes_before: 1 << 30,
                tested_bytes: 1 << 29,
                chunk_count: 1,
                tests: vec![MemtestTestResult {
                    kind: MemtestKind::OwnAddress,
                    label: "own address".to_owned(),
                    phases_done: 1,
                    phases_total: 1,
                    bytes_moved: 1 << 29,
                    elapsed_ms: 1.0,
                    throughput_gb_per_s: 1.0,
                    error_count: 2,
                    errors: vec![MemoryMismatch {
                        address: 0x7f00_0000_1000,
                        expected: 1,
                        actual: 3,
                        second_read: 3,
                        flipped_bits: 1,
                    }],
                }],
                total_errors: 2,
                cancelled: false,
                stopped_by: None,
                planted_fault_addresses: Vec::new(),
                elapsed_ms: 1.0,
                throughput_gb_per_s: 1.0,
                copy_bandwidth_gb_per_s: None,
                health_before: None,
                health_after: None,
                health_changes: vec!["remapped rows pending 0 -> 1".to_owned()],
            }),
            disagreement_count: 1,
        }
    }

    #[test]
    fn memtest_errors_counter_changes_and_disagreements_become_findings() {
        let (summary, findings) = check_findings(&Ok(report_with_problems()));
        assert!(summary.summary.contains("1 disagreement(s)"), "{summary:?}");
        assert!(summary.summary.contains("2 mismatch(es)"), "{summary:?}");
        let categories: Vec<(Category, Severity)> =
            findings.iter().map(|f| (f.category, f.severity)).collect();
        assert_eq!(
            categories,
            vec![
                (Category::Ecc, Severity::Critical),
                (Category::RowRemap, Severity::Critical),
                (Category::DriverMismatch, Severity::Warning),
            ]
        );
        assert!(findings[0].title.contains("2 mismatch(es) on GPU 0"));
        assert!(findings[0].evidence.iter().any(|e| {
            e.label == "own address at 0x7f0000001000"
                && e.display
                    == "expected 0x0000000000000001, read 0x0000000000000003, read again \
                        0x0000000000000003 (1 bit(s) flipped)"
        }));
        // Only the disagreeing comparison is cited.
        assert_eq!(findings[2].evidence.len(), 1);
        assert!(findings[2].evidence[0].display.contains("NVML 12.8"));
        // Every finding belongs to the hardware wizard and the mismatches say what to do.
        assert!(
            findings
                .iter()
                .all(|f| f.wizard == Some(Wizard::HardwareAndDriver))
        );
        assert_eq!(findings[0].recommendations[0].id, "drain-gpu");
    }

    #[test]
    fn mismatches_are_listed_up_to_the_limit_with_the_rest_counted() {
        let mut report = report_with_problems();
        let memtest = report.memtest.as_mut().expect("memtest");
        let one = memtest.tests[0].errors[0];
        memtest.tests[0].errors = vec![one; MAX_LISTED_MISMATCHES + 3];
        memtest.total_errors = MAX_LISTED_MISMATCHES as u64 + 10;
        let (listed, not_listed) = listed_mismatches(memtest);
        assert_eq!(listed.len(), MAX_LISTED_MISMATCHES);
        assert_eq!(not_listed, 10);
        assert_eq!(listed[0].place, "own address at 0x7f0000001000");
    }
}
