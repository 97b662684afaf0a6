//! `vramscope check`: driver and device facts, CUDA vs NVML, the largest allocatable block and
//! an optional GPU memory test.
//!
//! Exit codes: 0 everything fine, 1 the check could not run (no driver, bad device, CUDA
//! error), 3 the check ran and found a problem (a disagreement, memory mismatches, ECC or
//! remapping counters that moved), 130 interrupted.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use vramscope_gpu::cuda::{
    CHECK_REPORT_SCHEMA, CheckOptions, CheckProgress, CheckReport, CudaError, MemtestConfig,
    MemtestReport, format_mib, run_checks,
};

/// Exit code for "the check ran and found something wrong".
const EXIT_PROBLEM_FOUND: u8 = 3;
/// Exit code after Ctrl-C.
const EXIT_INTERRUPTED: u8 = 130;

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// CUDA device to probe and memory-test (facts are read for every device).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub device: usize,
    /// Also test GPU memory: this percentage of the free memory (1-100), with walking ones,
    /// moving inversions, modulo-20, own-address and random-data patterns.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u32).range(1..=100))]
    pub memtest: Option<u32>,
    /// Print the report as JSON (schema "vramscope.check/1") on stdout.
    #[arg(long)]
    pub json: bool,
    /// Seed of the random patterns (the report prints the one used, to repeat a run).
    #[arg(long, value_name = "SEED", requires = "memtest")]
    pub seed: Option<u64>,
    /// Self-test of the memory test: flip bit 7 of this 64-bit word (counted from the start of
    /// the tested memory) during every verify pass; the test must report its address. Repeat
    /// for several words.
    #[arg(long, value_name = "WORD", requires = "memtest")]
    pub plant_fault: Vec<u64>,
}

pub fn run(args: CheckArgs) -> ExitCode {
    let cancel = Arc::new(AtomicBool::new(false));
    let handler_flag = Arc::clone(&cancel);
    // Without a handler Ctrl-C simply ends the process, and the driver frees the memory anyway.
    let _ = ctrlc::set_handler(move || handler_flag.store(true, Ordering::Relaxed));

    let options = CheckOptions {
        device: args.device,
        memtest: args.memtest.map(|percent| {
            let defaults = MemtestConfig::default();
            MemtestConfig {
                share_of_free_percent: percent,
                seed: args.seed.unwrap_or(defaults.seed),
                planted_fault_words: args.plant_fault.clone(),
                ..defaults
            }
        }),
        ..CheckOptions::default()
    };
    let mut reporter = ProgressPrinter::new();
    match run_checks(&options, &cancel, &mut |step| reporter.show(step)) {
        Ok(report) => {
            if args.json {
                match serde_json::to_string_pretty(&report) {
                    Ok(json) => println!("{json}"),
                    Err(error) => return super::fail(format!("check: cannot write JSON: {error}")),
                }
            } else {
                print!("{}", render_text(&report));
            }
            if report
                .memtest
                .as_ref()
                .is_some_and(|memtest| memtest.cancelled)
            {
                ExitCode::from(EXIT_INTERRUPTED)
            } else if report.all_good() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_PROBLEM_FOUND)
            }
        }
        Err(CudaError::Cancelled) => {
            eprintln!("vramscope: check interrupted");
            ExitCode::from(EXIT_INTERRUPTED)
        }
        Err(error) => {
            if args.json {
                let failure = serde_json::json!({
                    "schema": CHECK_REPORT_SCHEMA,
                    "error": error,
                    "message": error.to_string(),
                });
                println!("{failure:#}");
            }
            super::fail(format!("check: {error}"))
        }
    }
}

/// Writes progress to stderr (so that `--json` output stays clean), at most once a second for
/// the memory test.
struct ProgressPrinter {
    last_memtest_line: Option<Instant>,
    last_test_index: Option<usize>,
}

impl ProgressPrinter {
    fn new() -> Self {
        Self {
            last_memtest_line: None,
            last_test_index: None,
        }
    }

    fn show(&mut self, step: CheckProgress) {
        match step {
            CheckProgress::Stage(stage) => eprintln!("vramscope: {stage}…"),
            CheckProgress::Memtest(progress) => {
                let new_test = self.last_test_index != Some(progress.test_index);
                let due = self
                    .last_memtest_line
                    .is_none_or(|last| last.elapsed().as_secs_f64() >= 1.0);
                if new_test || due {
                    eprintln!(
                        "vramscope: memory test {}/{} ({}): {:.0} % done, {} error(s) so far",
                        progress.test_index + 1,
                        progress.test_count,
                        progress.test.label(),
                        progress.fraction_done * 100.0,
                        progress.errors_so_far
                    );
                    self.last_memtest_line = Some(Instant::now());
                    self.last_test_index = Some(progress.test_index);
                }
            }
        }
    }
}

const GIB: f64 = vramscope_core::model::GIB as f64;

/// The report as text for people.
pub(crate) fn render_text(report: &CheckReport) -> String {
    let mut out = String::new();
    let nvml_driver = report
        .nvml
        .driver_version
        .as_deref()
        .map(|version| format!("driver {version}"))
        .or_else(|| report.nvml.error.clone())
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "CUDA driver supports CUDA {}; NVML: {nvml_driver}",
        report.cuda_driver_version
    );
    for comparison in &report.driver_comparisons {
        write_comparison(&mut out, comparison);
    }
    let _ = writeln!(out, "{} CUDA device(s)", report.device_count);
    for device in &report.devices {
        let cuda = &device.cuda;
        let _ = writeln!(
            out,
            "\nDevice {}: {} ({}, PCI {})",
            cuda.ordinal, cuda.name, cuda.uuid, cuda.pci_bus_id
        );
        let _ = writeln!(
            out,
            "  compute capability {}.{}, {} SMs, L2 {}, {}-bit memory bus at {} MHz, ECC {}",
            cuda.compute_capability_major,
            cuda.compute_capability_minor,
            cuda.multiprocessor_count,
            format_mib(cuda.l2_cache_bytes),
            cuda.memory_bus_width_bits,
            cuda.memory_clock_khz / 1000,
            if cuda.ecc_enabled { "on" } else { "off" }
        );
        let _ = writeln!(
            out,
            "  memory: {} total, {} free (vramscope's own CUDA context included in the used part)",
            format_mib(cuda.total_bytes),
            format_mib(cuda.free_bytes)
        );
        if let Some(nvml) = &device.nvml {
            let _ = writeln!(
                out,
                "  NVML: {} total, {} reserved by the driver, {} used, {} free",
                format_mib(nvml.total_bytes),
                format_mib(nvml.reserved_bytes),
                format_mib(nvml.used_bytes),
                format_mib(nvml.free_bytes)
            );
        }
        if let Some(error) = &device.nvml_error {
            let _ = writeln!(out, "  NVML: {error}");
        }
        for comparison in &device.comparisons {
            write_comparison(&mut out, comparison);
        }
    }
    let block = &report.largest_block;
    let _ = writeln!(
        out,
        "\nLargest allocatable block on device {}: {:.3} GiB of {:.3} GiB free ({:.2} %), {} attempts in {:.1} s{}",
        report.tested_device,
        block.largest_bytes as f64 / GIB,
        block.free_bytes as f64 / GIB,
        block.ratio_of_free * 100.0,
        block.attempts,
        block.elapsed_ms as f64 / 1000.0,
        if block.converged {
            ""
        } else {
            " (time limit reached before the search converged)"
        }
    );
    let _ = writeln!(out, "  {}", block.explanation);
    if let Some(memtest) = &report.memtest {
        render_memtest(&mut out, report.tested_device, memtest);
    }
    let _ = writeln!(
        out,
        "\n{}",
        if report.all_good() {
            "Result: no problem found.".to_owned()
        } else {
            format!(
                "Result: PROBLEMS FOUND ({} disagreement(s) between CUDA and NVML{}).",
                report.disagreement_count,
                report
                    .memtest
                    .as_ref()
                    .map(|memtest| format!(
                        ", {} memory mismatch(es), {} health counter change(s){}{}",
                        memtest.total_errors,
                        memtest.health_changes.len(),
                        if memtest.cancelled {
                            ", memory test cancelled"
                        } else {
                            ""
                        },
                        if memtest.stopped_by.is_some() {
                            ", memory test stopped by a CUDA error"
                        } else {
                            ""
                        }
                    ))
                    .unwrap_or_default()
            )
        }
    );
    out
}

fn write_comparison(out: &mut String, comparison: &vramscope_gpu::cuda::Comparison) {
    let _ = writeln!(
        out,
        "  {} {}: CUDA {} | NVML {}{}",
        if comparison.agrees {
            "agree   "
        } else {
            "DISAGREE"
        },
        comparison.field,
        comparison.cuda,
        comparison.nvml,
        if comparison.agrees {
            String::new()
        } else {
            format!(" ({})", comparison.note)
        }
    );
}

fn render_memtest(out: &mut String, device: usize, memtest: &MemtestReport) {
    let _ = writeln!(
        out,
        "\nMemory test on device {device}: {:.2} GiB ({} % of {:.2} GiB free) in {} chunk(s), seed {:#x}, {:.1} s in all",
        memtest.tested_bytes as f64 / GIB,
        memtest.config.share_of_free_percent,
        memtest.free_bytes_before as f64 / GIB,
        memtest.chunk_count,
        memtest.config.seed,
        memtest.elapsed_ms / 1000.0
    );
    for test in &memtest.tests {
        let _ = writeln!(
            out,
            "  {:<20} {:>8} error(s)  {:>3}/{:<3} passes  {:>8.1} ms  {:>7.0} GB/s",
            test.label,
            test.error_count,
            test.phases_done,
            test.phases_total,
            test.elapsed_ms,
            test.throughput_gb_per_s
        );
    }
    let (listed, not_listed) = vramscope_core::diagnose::gpu_checks::listed_mismatches(memtest);
    for mismatch in listed {
        let _ = writeln!(out, "      {}: {}", mismatch.place, mismatch.reading);
    }
    if not_listed > 0 {
        let _ = writeln!(
            out,
            "      … {not_listed} more mismatch(es) counted (the JSON output lists every recorded one)"
        );
    }
    if let Some(copy) = memtest.copy_bandwidth_gb_per_s {
        let _ = writeln!(
            out,
            "  throughput {:.0} GB/s (bytes read + written); device-to-device copy {:.0} GB/s → {:.0} % of copy bandwidth",
            memtest.throughput_gb_per_s,
            copy,
            if copy > 0.0 {
                memtest.throughput_gb_per_s / copy * 100.0
            } else {
                0.0
            }
        );
    }
    if !memtest.planted_fault_addresses.is_empty() {
        let addresses: Vec<String> = memtest
            .planted_fault_addresses
            .iter()
            .map(|address| format!("{address:#018x}"))
            .collect();
        let _ = writeln!(
            out,
            "  planted faults (self-test) at: {}",
            addresses.join(", ")
        );
    }
    match (&memtest.health_before, memtest.health_changes.is_empty()) {
        (None, _) => {
            let _ = writeln!(out, "  NVML health counters: not available");
        }
        (Some(before), true) => {
            let _ = writeln!(
                out,
                "  NVML health counters unchanged (ECC volatile corrected/uncorrected {}/{}, aggregate {}/{}, remapped rows {}/{})",
                show(before.ecc_volatile_corrected),
                show(before.ecc_volatile_uncorrected),
                show(before.ecc_aggregate_corrected),
                show(before.ecc_aggregate_uncorrected),
                show(before.remapped_rows_correctable),
                show(before.remapped_rows_uncorrectable)
            );
        }
        (Some(_), false) => {
            for change in &memtest.health_changes {
                let _ = writeln!(out, "  NVML health counter CHANGED: {change}");
            }
        }
    }
    if let Some(error) = &memtest.stopped_by {
        let _ = writeln!(out, "  stopped by: {error}");
    }
    if memtest.cancelled {
        let _ = writeln!(out, "  cancelled before the end");
    }
}

fn show(value: Option<u64>) -> String {
    value.map_or_else(|| "n/a".to_owned(), |value| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_gpu::cuda::{
        Comparison, CudaDeviceFacts, DeviceCheck, LargestBlock, MemoryMismatch, MemtestKind,
        MemtestTestResult, NvmlSystemFacts,
    };

    /// A report shaped like one from an H200 with a planted fault (values from a real run's
    /// magnitudes; used only to check formatting).
    fn sample_report(agrees: bool) -> CheckReport {
        CheckReport {
            schema: CHECK_REPORT_SCHEMA.into(),
            cuda_driver_version: "13.0".into(),
            cuda_driver_version_raw: 13000,
            device_count: 1,
            nvml: NvmlSystemFacts {
                error: None,
                driver_version: Some("580.159.04".into()),
                cuda_driver_version_raw: Some(13000),
            },
            driver_comparisons: Vec::new(),
            devices: vec![DeviceCheck {
                cuda: CudaDeviceFacts {
                    name: "NVIDIA H200".into(),
                    ..Default::default()
                },
                nvml: None,
                nvml_error: None,
                comparisons: vec![Comparison {
                    field: "ECC".into(),
                    cuda: "enabled".into(),
                    nvml: if agrees { "enabled" } else { "disabled" }.into(),
                    agrees,
                    note: "pending reset".into(),
                }],
            }],
            tested_device: 0,
            largest_block: LargestBlock {
                free_bytes: 100 << 30,
                largest_bytes: (100 << 30) - (4 << 20),
                smallest_failed_bytes: (100 << 30) - (2 << 20),
                attempts: 3,
                elapsed_ms: 1200,
                converged: true,
                ratio_of_free: 0.99996,
                explanation: "not fragmented".into(),
            },
            memtest: Some(MemtestReport {
                config: MemtestConfig::default(),
                free_bytes_before: 100 << 30,
                tested_bytes: 90 << 30,
                chunk_count: 90,
                tests: vec![MemtestTestResult {
                    kind: MemtestKind::MovingInversions,
                    label: "moving inversions".into(),
                    phases_done: 15,
                    phases_total: 15,
                    bytes_moved: 1 << 40,
                    elapsed_ms: 300.0,
                    throughput_gb_per_s: 3600.0,
                    error_count: 3,
                    errors: vec![MemoryMismatch {
                        address: 0x7faf_4201_81c8,
                        expected: 0x5555,
                        actual: 0x55d5,
                        second_read: 0x55d5,
                        flipped_bits: 1,
                    }],
                }],
                total_errors: 3,
                cancelled: false,
                stopped_by: None,
                planted_fault_addresses: vec![0x7faf_4201_81c8],
                throughput_gb_per_s: 3600.0,
                copy_bandwidth_gb_per_s: Some(4300.0),
                health_before: None,
                health_after: None,
                health_changes: Vec::new(),
                elapsed_ms: 5000.0,
            }),
            disagreement_count: usize::from(!agrees),
        }
    }

    #[test]
    fn text_report_lists_the_mismatches_and_the_bandwidth_ratio() {
        let text = render_text(&sample_report(true));
        assert!(
            text.contains(
                "moving inversions at 0x7faf420181c8: expected 0x0000000000005555, read \
                 0x00000000000055d5, read again 0x00000000000055d5 (1 bit(s) flipped)"
            ),
            "{text}"
        );
        assert!(text.contains("… 2 more mismatch(es) counted"), "{text}");
        assert!(
            text.contains("device-to-device copy 4300 GB/s → 84 % of copy bandwidth"),
            "{text}"
        );
        assert!(text.contains("Result: PROBLEMS FOUND"), "{text}");
    }

    #[test]
    fn text_report_flags_disagreements() {
        let mut report = sample_report(false);
        report.memtest = None;
        let text = render_text(&report);
        assert!(
            text.contains("DISAGREE ECC: CUDA enabled | NVML disabled (pending reset)"),
            "{text}"
        );
        assert!(text.contains("1 disagreement(s)"), "{text}");
        let mut fine = sample_report(true);
        fine.memtest = None;
        assert!(render_text(&fine).contains("Result: no problem found."));
    }

    #[test]
    fn json_report_keeps_its_field_names() {
        let json = serde_json::to_value(sample_report(true)).unwrap_or_default();
        for key in [
            "schema",
            "cuda_driver_version",
            "cuda_driver_version_raw",
            "device_count",
            "nvml",
            "driver_comparisons",
            "devices",
            "tested_device",
            "largest_block",
            "memtest",
            "disagreement_count",
        ] {
            assert!(json.get(key).is_some(), "missing {key}");
        }
        assert_eq!(json["schema"], "vramscope.check/1");
        let memtest = &json["memtest"];
        assert_eq!(memtest["planted_fault_addresses"][0], "0x00007faf420181c8");
        assert_eq!(memtest["tests"][0]["kind"], "moving_inversions");
        assert_eq!(
            memtest["tests"][0]["errors"][0]["second_read"],
            "0x00000000000055d5"
        );
        assert_eq!(
            json["largest_block"]["largest_bytes"],
            (100u64 << 30) - (4 << 20)
        );
    }
}
