//! The CUDA checks through the library API. Without a driver (CI) every entry point must return
//! `CudaError::NoDriver` and never panic. With a GPU (the H200 run in docs/gpu-verification.md
//! executes this test binary) the checks run for real, including a planted fault that the memory
//! test must report at its exact address.

use std::sync::atomic::AtomicBool;

use crate::support::skip::skipped;
use vramscope_gpu::cuda::{
    CheckOptions, CudaError, MemtestConfig, MemtestKind, driver_library_present, driver_version,
    run_checks,
};

/// Why the memory-test tests do not run their GPU part here.
const NO_DRIVER: &str = "no NVIDIA driver on this machine: only the no-driver answer was checked";

#[test]
fn every_entry_point_returns_no_driver_without_a_driver() {
    if driver_library_present() {
        assert!(driver_version().is_ok());
        return;
    }
    let cancel = AtomicBool::new(false);
    let mut stages = Vec::new();
    let outcome = run_checks(&CheckOptions::default(), &cancel, &mut |step| {
        stages.push(format!("{step:?}"))
    });
    assert_eq!(outcome, Err(CudaError::NoDriver));
    assert_eq!(driver_version(), Err(CudaError::NoDriver));
    assert_eq!(
        vramscope_gpu::cuda::device_count(),
        Err(CudaError::NoDriver)
    );
    assert!(stages.is_empty(), "no CUDA work may start: {stages:?}");
}

#[test]
fn a_device_that_does_not_exist_is_an_error() {
    let cancel = AtomicBool::new(false);
    let options = CheckOptions {
        device: 4096,
        ..CheckOptions::default()
    };
    match run_checks(&options, &cancel, &mut |_| {}) {
        Err(CudaError::NoDriver) => assert!(!driver_library_present()),
        Err(CudaError::NoSuchDevice { ordinal, .. }) => assert_eq!(ordinal, 4096),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn planted_faults_are_reported_at_their_exact_addresses() {
    if !driver_library_present() {
        let cancel = AtomicBool::new(false);
        let options = CheckOptions {
            memtest: Some(MemtestConfig::default()),
            ..CheckOptions::default()
        };
        assert_eq!(
            run_checks(&options, &cancel, &mut |_| {}),
            Err(CudaError::NoDriver)
        );
        return skipped(
            "cuda_checks::planted_faults_are_reported_at_their_exact_addresses",
            NO_DRIVER,
        );
    }
    // Two faults: one early in the first chunk, one in the second 256 MiB chunk.
    let chunk_words = (256u64 << 20) / 8;
    let planted = vec![12_345, chunk_words + 777];
    let options = CheckOptions {
        memtest: Some(MemtestConfig {
            share_of_free_percent: 2,
            chunk_bytes: 256 << 20,
            tests: vec![MemtestKind::MovingInversions, MemtestKind::RandomData],
            planted_fault_words: planted.clone(),
            ..MemtestConfig::default()
        }),
        ..CheckOptions::default()
    };
    let cancel = AtomicBool::new(false);
    let report = run_checks(&options, &cancel, &mut |_| {})
        .unwrap_or_else(|error| panic!("checks failed on a GPU machine: {error}"));
    let memtest = report.memtest.unwrap_or_else(|| panic!("memtest missing"));
    assert_eq!(memtest.planted_fault_addresses.len(), 2);
    for test in &memtest.tests {
        // Each verify pass flips bit 7 of both words: moving inversions has 2 verify passes per
        // pattern × 5 patterns, random data 2.
        let verify_passes = match test.kind {
            MemtestKind::MovingInversions => 10,
            _ => 2,
        };
        assert_eq!(test.error_count, 2 * verify_passes, "{test:?}");
        let mut addresses: Vec<u64> = test.errors.iter().map(|e| e.address).collect();
        addresses.sort_unstable();
        addresses.dedup();
        let mut planted_addresses = memtest.planted_fault_addresses.clone();
        planted_addresses.sort_unstable();
        assert_eq!(addresses, planted_addresses, "{}", test.label);
        assert!(
            test.errors
                .iter()
                .all(|e| e.flipped_bits == 1 && e.actual ^ e.expected == 1 << 7)
        );
    }
    assert!(!memtest.passed());
}

#[test]
fn a_clean_memory_test_finds_nothing_on_a_gpu() {
    if !driver_library_present() {
        assert_eq!(driver_version(), Err(CudaError::NoDriver));
        return skipped(
            "cuda_checks::a_clean_memory_test_finds_nothing_on_a_gpu",
            NO_DRIVER,
        );
    }
    let options = CheckOptions {
        memtest: Some(MemtestConfig {
            share_of_free_percent: 5,
            ..MemtestConfig::default()
        }),
        ..CheckOptions::default()
    };
    let cancel = AtomicBool::new(false);
    let report = run_checks(&options, &cancel, &mut |_| {})
        .unwrap_or_else(|error| panic!("checks failed on a GPU machine: {error}"));
    let memtest = report.memtest.unwrap_or_else(|| panic!("memtest missing"));
    assert_eq!(memtest.total_errors, 0, "{memtest:#?}");
    assert_eq!(memtest.tests.len(), MemtestKind::ALL.len());
    assert!(
        memtest
            .tests
            .iter()
            .all(|test| test.phases_done == test.phases_total)
    );
    assert!(report.largest_block.largest_bytes > 0);
    assert!(report.largest_block.largest_bytes <= report.largest_block.free_bytes);
}

#[test]
fn cancelling_stops_the_memory_test_and_releases_memory() {
    if !driver_library_present() {
        assert_eq!(driver_version(), Err(CudaError::NoDriver));
        return skipped(
            "cuda_checks::cancelling_stops_the_memory_test_and_releases_memory",
            NO_DRIVER,
        );
    }
    let cancel = AtomicBool::new(false);
    let options = CheckOptions {
        memtest: Some(MemtestConfig {
            share_of_free_percent: 10,
            ..MemtestConfig::default()
        }),
        ..CheckOptions::default()
    };
    let mut phases_seen = 0;
    let report = run_checks(&options, &cancel, &mut |step| {
        if let vramscope_gpu::cuda::CheckProgress::Memtest(_) = step {
            phases_seen += 1;
            if phases_seen == 5 {
                cancel.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    })
    .unwrap_or_else(|error| panic!("checks failed on a GPU machine: {error}"));
    let memtest = report.memtest.unwrap_or_else(|| panic!("memtest missing"));
    assert!(memtest.cancelled);
    let phases_done: usize = memtest.tests.iter().map(|test| test.phases_done).sum();
    assert_eq!(phases_done, 5);
    // Everything was freed: a new check sees (nearly) the same free memory as the first one.
    let again = run_checks(
        &CheckOptions::default(),
        &AtomicBool::new(false),
        &mut |_| {},
    )
    .unwrap_or_else(|error| panic!("second check failed: {error}"));
    let before = report.largest_block.free_bytes as i128;
    let after = again.largest_block.free_bytes as i128;
    assert!(
        (before - after).abs() < 64 << 20,
        "free before {before}, after {after}"
    );
}
