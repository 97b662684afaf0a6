//! The "Hardware and driver" wizard's GPU checks: the same `crate::cuda::check::run_checks` run as
//! the Hardware checks panel (through its [`CheckRunner`](crate::ui::hardware::CheckRunner)),
//! with the [`CheckReport`] turned into findings the diagnosis and the report carry: memory-test
//! mismatches, ECC and row-remap counters that changed, CUDA and NVML disagreeing, no driver.

use crate::cuda::{CheckReport, CudaError};
use crate::diagnose::finding::{
    Category, Evidence, EvidenceSource, Finding, InputSummary, Recommendation, Severity, Unit,
    Wizard,
};

/// Mismatching words listed as evidence at most (the count is always given).
const MAX_LISTED_MISMATCHES: usize = 8;

/// Where check evidence comes from, as cited in findings.
fn source() -> EvidenceSource {
    EvidenceSource::User {
        what: "GPU checks run on this machine".to_owned(),
    }
}

fn recommendation(id: &str, title: &str, effect: &str, action: &str) -> Recommendation {
    Recommendation {
        id: id.to_owned(),
        title: title.to_owned(),
        expected_effect: effect.to_owned(),
        action: action.to_owned(),
        estimated_saving_bytes: None,
    }
}

fn finding(category: Category, severity: Severity, title: String) -> Finding {
    Finding {
        category,
        severity,
        title,
        evidence: Vec::new(),
        explanation: String::new(),
        recommendations: Vec::new(),
        wizard: Some(Wizard::HardwareAndDriver),
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
            let mut f = finding(
                Category::DriverMismatch,
                Severity::Warning,
                "No NVIDIA driver on this machine: the GPU checks could not run".to_owned(),
            );
            f.evidence.push(Evidence::text(
                "CUDA driver library",
                "libcuda.so.1 cannot be loaded",
                source(),
            ));
            f.explanation = "Without the driver there is no GPU to check here. If this machine \
                should have a GPU, the driver is missing or not on the library path; if the job \
                ran elsewhere, run the checks there (vramscope check)."
                .to_owned();
            f.recommendations.push(recommendation(
                "install-driver",
                "Install the NVIDIA driver (or add its folder to LD_LIBRARY_PATH)",
                "The checks can read the GPUs",
                "nvidia-smi should list the GPUs; then run the checks again",
            ));
            (summary("no NVIDIA driver found".to_owned()), vec![f])
        }
        Err(error) => {
            let mut f = finding(
                Category::CudaError,
                Severity::Warning,
                "The GPU checks failed".to_owned(),
            );
            f.evidence
                .push(Evidence::text("error", error.to_string(), source()));
            f.explanation = "The driver answered with an error, so the hardware could not be \
                checked; the error itself may point at the problem."
                .to_owned();
            (summary(format!("failed: {error}")), vec![f])
        }
        Ok(report) => report_findings(report, summary),
    }
}

fn report_findings(
    report: &CheckReport,
    summary: impl Fn(String) -> InputSummary,
) -> (InputSummary, Vec<Finding>) {
    let mut findings = Vec::new();
    let device = report.tested_device;
    if let Some(memtest) = &report.memtest {
        if memtest.total_errors > 0 {
            let mut f = finding(
                Category::Ecc,
                Severity::Critical,
                format!(
                    "Memory test: {} mismatch(es) on GPU {device}",
                    memtest.total_errors
                ),
            );
            f.evidence.push(Evidence::number(
                "mismatching words",
                memtest.total_errors as f64,
                Unit::Count,
                memtest.total_errors.to_string(),
                source(),
            ));
            let mismatches = memtest
                .tests
                .iter()
                .flat_map(|test| test.errors.iter().map(move |m| (test.label.as_str(), m)));
            for (label, m) in mismatches.take(MAX_LISTED_MISMATCHES) {
                f.evidence.push(Evidence::text(
                    format!("{label} at {:#x}", m.address),
                    format!(
                        "expected {:#018x}, read {:#018x}, read again {:#018x}",
                        m.expected, m.actual, m.second_read
                    ),
                    source(),
                ));
            }
            f.explanation = "Words written to GPU memory read back different. Healthy memory \
                never does this: the card (or its cooling or power) is faulty, and results \
                computed on it cannot be trusted."
                .to_owned();
            f.recommendations.push(recommendation(
                "drain-gpu",
                "Take the GPU out of service and report it to the vendor or the cluster admins",
                "Jobs stop failing or silently computing wrong results on this card",
                "Give them the mismatch addresses above and nvidia-smi -q -d ECC,ROW_REMAPPER",
            ));
            findings.push(f);
        }
        if !memtest.health_changes.is_empty() {
            let remap = memtest
                .health_changes
                .iter()
                .any(|c| c.to_ascii_lowercase().contains("remap"));
            let (category, what) = if remap {
                (Category::RowRemap, "row-remap")
            } else {
                (Category::Ecc, "ECC")
            };
            let mut f = finding(
                category,
                Severity::Critical,
                format!("GPU {device}'s {what} counters changed during the memory test"),
            );
            for change in &memtest.health_changes {
                f.evidence
                    .push(Evidence::text("NVML counter", change.clone(), source()));
            }
            f.explanation = "The driver counted new memory errors while the test ran: the \
                memory has cells that fail under load."
                .to_owned();
            f.recommendations.push(recommendation(
                "check-remap",
                "Check row remapping and reset the GPU if a remap is pending",
                "A pending remap takes effect after a GPU reset; a failed one means the card \
                 needs replacing",
                "nvidia-smi -q -d ROW_REMAPPER",
            ));
            findings.push(f);
        }
        if let Some(stopped_by) = &memtest.stopped_by {
            let mut f = finding(
                Category::CudaError,
                Severity::Warning,
                format!("The memory test on GPU {device} stopped early"),
            );
            f.evidence
                .push(Evidence::text("error", stopped_by.to_string(), source()));
            f.explanation = "A CUDA call failed during the memory test, so only part of the \
                memory was tested."
                .to_owned();
            findings.push(f);
        }
    }
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
    if !disagreements.is_empty() {
        let mut f = finding(
            Category::DriverMismatch,
            Severity::Warning,
            format!("CUDA and NVML disagree on {} fact(s)", disagreements.len()),
        );
        for (scope, c) in &disagreements {
            f.evidence.push(Evidence::text(
                format!("{scope} {}", c.field),
                format!("CUDA {}, NVML {}: {}", c.cuda, c.nvml, c.note),
                source(),
            ));
        }
        f.explanation = "The CUDA driver and NVML describe the same hardware differently. This \
            happens when the user-space driver library and the kernel module come from different \
            driver versions, or inside containers with a mismatched libcuda."
            .to_owned();
        f.recommendations.push(recommendation(
            "match-driver",
            "Make the CUDA driver library and the kernel module the same version",
            "CUDA and NVML agree; version-dependent failures go away",
            "Compare nvidia-smi's driver version with the libcuda.so.1 the job loads",
        ));
        findings.push(f);
    }
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

    fn report_with_problems() -> CheckReport {
        use crate::cuda::{
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
        assert!(
            findings[0]
                .evidence
                .iter()
                .any(|e| e.label == "own address at 0x7f0000001000")
        );
        // Only the disagreeing comparison is cited.
        assert_eq!(findings[2].evidence.len(), 1);
        assert!(findings[2].evidence[0].display.contains("NVML 12.8"));
    }
}
