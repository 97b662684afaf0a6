//! What the GPU checks found, as plain data: CUDA's and NVML's facts side by side, the largest
//! allocatable block, the memory test and the errors that stopped a check. The GPU crate fills
//! these in (`vramscope_gpu::cuda`); the diagnosis judges them (`diagnose::gpu_checks`) and the
//! reports and the app show them, so they live here, below all three.

use serde::{Serialize, Serializer};

/// Version tag of the JSON written by `vramscope check --json`; bump it when a field changes
/// meaning or disappears (adding fields keeps it).
pub const CHECK_REPORT_SCHEMA: &str = "vramscope.check/1";

/// One device: CUDA's facts, NVML's, and where they disagree.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceCheck {
    /// What the CUDA driver reports.
    pub cuda: CudaDeviceFacts,
    /// What NVML reports for the same UUID, if NVML works.
    pub nvml: Option<NvmlDeviceFacts>,
    /// Why NVML facts are missing.
    pub nvml_error: Option<String>,
    /// Field-by-field comparison (empty without NVML).
    pub comparisons: Vec<Comparison>,
}

/// Everything `vramscope check` found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckReport {
    /// [`CHECK_REPORT_SCHEMA`].
    pub schema: String,
    /// CUDA version the driver supports, read before any context ("13.0").
    pub cuda_driver_version: String,
    /// The same, as the driver encodes it (13000).
    pub cuda_driver_version_raw: i32,
    /// CUDA devices the driver sees.
    pub device_count: usize,
    /// NVML's driver-wide facts.
    pub nvml: NvmlSystemFacts,
    /// CUDA vs NVML on driver-wide facts (the CUDA version).
    pub driver_comparisons: Vec<Comparison>,
    /// Every device.
    pub devices: Vec<DeviceCheck>,
    /// Ordinal of the device probed and tested.
    pub tested_device: usize,
    /// Largest single allocation on the tested device.
    pub largest_block: LargestBlock,
    /// Memory test, when asked for.
    pub memtest: Option<MemtestReport>,
    /// Number of CUDA/NVML comparisons that disagree.
    pub disagreement_count: usize,
}

impl CheckReport {
    /// True when nothing needs the user's attention: facts agree, and the memory test (if run)
    /// passed.
    pub fn all_good(&self) -> bool {
        self.disagreement_count == 0 && self.memtest.as_ref().is_none_or(MemtestReport::passed)
    }
}

/// Why a CUDA check could not run or stopped.
///
/// Every entry point of the GPU crate's CUDA checks returns this instead of panicking, also when the driver
/// library is missing (cudarc itself would panic there) or the driver is broken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CudaError {
    /// The CUDA driver library (`libcuda.so.1` / `nvcuda.dll`) could not be loaded.
    #[error(
        "no NVIDIA driver found: the CUDA driver library (libcuda.so.1) could not be loaded, so \
         there is no GPU to check on this machine. Install the NVIDIA driver, or add the folder \
         that holds libcuda.so.1 to LD_LIBRARY_PATH"
    )]
    NoDriver,
    /// A driver call returned an error code.
    #[error("CUDA call {call} failed: {name} (code {code}): {description}{hint}")]
    Driver {
        /// The driver function or step that failed, e.g. `cuInit`.
        call: String,
        /// The numeric `CUresult`.
        code: u32,
        /// The `CUresult` name, e.g. `CUDA_ERROR_NO_DEVICE`.
        name: String,
        /// The driver's own description of the code.
        description: String,
        /// What the code usually means for the user (empty when there is nothing to add).
        hint: String,
    },
    /// The driver library panicked inside cudarc (a missing symbol, an unexpected value).
    #[error("the CUDA driver library failed inside {call}: {message}")]
    Panicked {
        /// The step that was running.
        call: String,
        /// The panic message.
        message: String,
    },
    /// The requested device ordinal does not exist.
    #[error("there is no CUDA device {ordinal}: the driver reports {count} device(s)")]
    NoSuchDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        count: usize,
    },
    /// An option was out of range.
    #[error("invalid check option: {0}")]
    InvalidOption(String),
    /// The user cancelled the check.
    #[error("cancelled")]
    Cancelled,
}

impl CudaError {
    /// True when the error is a `CUDA_ERROR_OUT_OF_MEMORY` (the expected answer while probing
    /// how much can be allocated).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Self::Driver { code: 2, .. })
    }
}

/// One device as the CUDA driver describes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CudaDeviceFacts {
    /// CUDA ordinal (after `CUDA_VISIBLE_DEVICES`; ordered fastest-first by default, so it need
    /// not equal the NVML index).
    pub ordinal: usize,
    /// Marketing name, e.g. "NVIDIA H200".
    pub name: String,
    /// `GPU-xxxxxxxx-…`, the same form NVML and nvidia-smi print; used to match NVML devices.
    pub uuid: String,
    /// PCI address `domain:bus:device.0`.
    pub pci_bus_id: String,
    /// Compute capability major version (9 for Hopper).
    pub compute_capability_major: u32,
    /// Compute capability minor version.
    pub compute_capability_minor: u32,
    /// Whether ECC is enabled, per `CU_DEVICE_ATTRIBUTE_ECC_ENABLED`.
    pub ecc_enabled: bool,
    /// Memory size from `cuDeviceTotalMem` (NVML's total minus what the driver reserves).
    pub total_bytes: u64,
    /// Free memory from `cuMemGetInfo`, measured while vramscope's own context (≈0.5 GiB on an
    /// H200) is alive.
    pub free_bytes: u64,
    /// Width of the memory bus.
    pub memory_bus_width_bits: u32,
    /// Number of streaming multiprocessors.
    pub multiprocessor_count: u32,
    /// L2 cache size.
    pub l2_cache_bytes: u64,
    /// Peak memory clock.
    pub memory_clock_khz: u32,
}

/// One field that both CUDA and NVML report, side by side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Comparison {
    /// What is compared, e.g. "name".
    pub field: String,
    /// The CUDA driver's value, formatted.
    pub cuda: String,
    /// NVML's value, formatted.
    pub nvml: String,
    /// False flags a disagreement worth a look.
    pub agrees: bool,
    /// Why the values may legitimately differ, or what a disagreement means.
    pub note: String,
}

/// Allocation granularity; chunks and the tested size are multiples of it.
pub const GRANULARITY_BYTES: u64 = 2 << 20;

/// The tests, after cuda_memtest and memtestG80 (algorithms reimplemented, no code taken; see
/// `docs/sources.md` § "GPU memory tests").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemtestKind {
    /// Each word holds its own address: catches address-line faults (two addresses, one cell).
    OwnAddress,
    /// A single 1 bit moving through all 64 positions, then its complement (walking zeros).
    WalkingOnes,
    /// Write a pattern, verify it and write its complement, verify the complement; 5 patterns.
    MovingInversions,
    /// Pattern on every 20th word and its complement elsewhere, for all 20 offsets: catches
    /// cells disturbed by writes to their neighbours.
    Modulo20,
    /// Seeded pseudo-random data, then its complement.
    RandomData,
}

impl MemtestKind {
    /// Every test, in the order they run.
    pub const ALL: [MemtestKind; 5] = [
        Self::OwnAddress,
        Self::WalkingOnes,
        Self::MovingInversions,
        Self::Modulo20,
        Self::RandomData,
    ];

    /// Name for people.
    pub fn label(self) -> &'static str {
        match self {
            Self::OwnAddress => "own address",
            Self::WalkingOnes => "walking ones/zeros",
            Self::MovingInversions => "moving inversions",
            Self::Modulo20 => "modulo 20",
            Self::RandomData => "random data",
        }
    }
}

/// What to test and how.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemtestConfig {
    /// Share of the free memory to test, 1 to 100 (some headroom is always left).
    pub share_of_free_percent: u32,
    /// Size of each allocation; a multiple of 2 MiB.
    pub chunk_bytes: u64,
    /// Tests to run, in order.
    pub tests: Vec<MemtestKind>,
    /// Seed of the random-data and modulo-20 patterns (reported, so a run can be repeated).
    pub seed: u64,
    /// Mismatches recorded per test with address and values; the count is always complete.
    pub max_error_records: usize,
    /// Self-test of the tester: word indices (counted from the start of the tested region) whose
    /// bit 7 is flipped in memory during every verify pass. Empty in real use.
    pub planted_fault_words: Vec<u64>,
}

impl Default for MemtestConfig {
    fn default() -> Self {
        Self {
            share_of_free_percent: 90,
            chunk_bytes: 1 << 30,
            tests: MemtestKind::ALL.to_vec(),
            seed: 0x5EED_5EED_5EED_5EED,
            max_error_records: 64,
            planted_fault_words: Vec::new(),
        }
    }
}

impl MemtestConfig {
    /// Refuses values the test cannot run with (shares outside 1-100 %, chunks that are not
    /// whole 2 MiB units, more mismatch records than a test keeps).
    pub fn validate(&self) -> Result<(), CudaError> {
        if !(1..=100).contains(&self.share_of_free_percent) {
            return Err(CudaError::InvalidOption(format!(
                "memory-test share must be 1 to 100 percent of free memory, not {}",
                self.share_of_free_percent
            )));
        }
        if self.chunk_bytes < GRANULARITY_BYTES
            || !self.chunk_bytes.is_multiple_of(GRANULARITY_BYTES)
        {
            return Err(CudaError::InvalidOption(format!(
                "memory-test chunk size must be a positive multiple of 2 MiB, not {} bytes",
                self.chunk_bytes
            )));
        }
        if self.max_error_records > 1 << 16 {
            return Err(CudaError::InvalidOption(
                "at most 65536 mismatch records can be kept per test".into(),
            ));
        }
        Ok(())
    }
}

/// Progress of a running memory test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemtestProgress {
    /// The test now running.
    pub test: MemtestKind,
    /// Its position in the run (0-based) and the number of tests.
    pub test_index: usize,
    /// Number of tests in the run.
    pub test_count: usize,
    /// Fraction of the whole run done, 0 to 1.
    pub fraction_done: f64,
    /// Mismatches found so far in the whole run.
    pub errors_so_far: u64,
}

/// One mismatch: the word at `address` held `actual` where `expected` was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemoryMismatch {
    /// Device address of the 64-bit word.
    #[serde(serialize_with = "hex")]
    pub address: u64,
    /// The value the test wrote there.
    #[serde(serialize_with = "hex")]
    pub expected: u64,
    /// The value read back.
    #[serde(serialize_with = "hex")]
    pub actual: u64,
    /// The value of a second read right after the mismatch: equal to `actual` for a stored
    /// error, equal to `expected` for a transient read error.
    #[serde(serialize_with = "hex")]
    pub second_read: u64,
    /// Number of bits that differ.
    pub flipped_bits: u32,
}

fn hex<S: Serializer>(value: &u64, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format!("{value:#018x}"))
}

/// Result of one test.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemtestTestResult {
    /// Which test.
    pub kind: MemtestKind,
    /// Name for people.
    pub label: String,
    /// Kernel launches over the whole region that completed.
    pub phases_done: usize,
    /// Launches the test has in all.
    pub phases_total: usize,
    /// Bytes read plus written.
    pub bytes_moved: u64,
    /// Kernel time (launch to synchronize), without allocation.
    pub elapsed_ms: f64,
    /// `bytes_moved / elapsed`, in 10⁹ bytes per second.
    pub throughput_gb_per_s: f64,
    /// Every mismatch counted (may exceed the records kept).
    pub error_count: u64,
    /// The first [`MemtestConfig::max_error_records`] mismatches.
    pub errors: Vec<MemoryMismatch>,
}

/// Result of a memory-test run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemtestReport {
    /// The configuration that ran.
    pub config: MemtestConfig,
    /// Free memory before the test allocated.
    pub free_bytes_before: u64,
    /// Bytes actually tested (sum of the chunks).
    pub tested_bytes: u64,
    /// Number of allocations the region was split into.
    pub chunk_count: usize,
    /// Results per test, in run order (a cancelled or failed run lists what ran).
    pub tests: Vec<MemtestTestResult>,
    /// Sum of the tests' error counts.
    pub total_errors: u64,
    /// The user cancelled before the end.
    pub cancelled: bool,
    /// A CUDA error that stopped the run (e.g. an uncorrectable ECC error), if any.
    pub stopped_by: Option<CudaError>,
    /// Device addresses of the planted faults (empty in real use); each must appear in the
    /// mismatch records.
    #[serde(serialize_with = "hex_list")]
    pub planted_fault_addresses: Vec<u64>,
    /// Bytes moved over kernel time of all tests, in 10⁹ bytes per second.
    pub throughput_gb_per_s: f64,
    /// Device-to-device copy bandwidth measured in the same run, for comparison.
    pub copy_bandwidth_gb_per_s: Option<f64>,
    /// NVML memory-health counters before the test (`None` without NVML).
    pub health_before: Option<MemoryHealthCounters>,
    /// The same counters after the test.
    pub health_after: Option<MemoryHealthCounters>,
    /// Counters that changed during the test: evidence of failing memory.
    pub health_changes: Vec<String>,
    /// Wall time of the whole run, allocation included.
    pub elapsed_ms: f64,
}

fn hex_list<S: Serializer>(values: &[u64], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(values.iter().map(|value| format!("{value:#018x}")))
}

impl MemtestReport {
    /// True when the test ran to the end and found nothing wrong (mismatches or counter
    /// changes).
    pub fn passed(&self) -> bool {
        !self.cancelled
            && self.stopped_by.is_none()
            && self.total_errors == 0
            && self.health_changes.is_empty()
    }
}

/// NVML's view of a device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NvmlDeviceFacts {
    /// NVML index (PCI order; may differ from the CUDA ordinal).
    pub index: u32,
    /// Marketing name.
    pub name: String,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Installed memory (`nvmlDeviceGetMemoryInfo_v2` total).
    pub total_bytes: u64,
    /// Memory the driver keeps for itself (not usable by processes).
    pub reserved_bytes: u64,
    /// Memory used by processes and contexts (vramscope's own context included).
    pub used_bytes: u64,
    /// Free memory.
    pub free_bytes: u64,
    /// Current ECC mode; `None` when the GPU has no ECC.
    pub ecc_enabled: Option<bool>,
}

/// Driver-wide NVML facts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NvmlSystemFacts {
    /// Why NVML is unusable, if it is (e.g. `libnvidia-ml.so.1` missing).
    pub error: Option<String>,
    /// Driver version string, e.g. "580.159.04".
    pub driver_version: Option<String>,
    /// CUDA version the driver supports, encoded like `cuDriverGetVersion` (13000 = 13.0).
    pub cuda_driver_version_raw: Option<i32>,
}

/// Memory-health counters of one device; `None` where the GPU or driver does not support the
/// query. Read before and after a memory test: a change is evidence of failing memory even when
/// no value mismatched (ECC corrects or contains most faults).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MemoryHealthCounters {
    /// Corrected ECC errors since the driver loaded.
    pub ecc_volatile_corrected: Option<u64>,
    /// Uncorrected ECC errors since the driver loaded.
    pub ecc_volatile_uncorrected: Option<u64>,
    /// Corrected ECC errors over the GPU's lifetime.
    pub ecc_aggregate_corrected: Option<u64>,
    /// Uncorrected ECC errors over the GPU's lifetime.
    pub ecc_aggregate_uncorrected: Option<u64>,
    /// Rows remapped because of correctable errors (Ampere and newer).
    pub remapped_rows_correctable: Option<u64>,
    /// Rows remapped because of uncorrectable errors.
    pub remapped_rows_uncorrectable: Option<u64>,
    /// A row remapping waits for a GPU reset.
    pub remapping_pending: Option<bool>,
    /// A row remapping failed (the GPU should be replaced).
    pub remapping_failed: Option<bool>,
    /// Pages wait to be retired at the next driver load (pre-Ampere page retirement).
    pub pages_pending_retirement: Option<bool>,
}

impl MemoryHealthCounters {
    /// Describes every counter that changed between `self` (before) and `after`, e.g.
    /// "ECC volatile uncorrected: 0 → 2".
    pub fn changes_to(&self, after: &Self) -> Vec<String> {
        let counts = [
            (
                "ECC volatile corrected",
                self.ecc_volatile_corrected,
                after.ecc_volatile_corrected,
            ),
            (
                "ECC volatile uncorrected",
                self.ecc_volatile_uncorrected,
                after.ecc_volatile_uncorrected,
            ),
            (
                "ECC aggregate corrected",
                self.ecc_aggregate_corrected,
                after.ecc_aggregate_corrected,
            ),
            (
                "ECC aggregate uncorrected",
                self.ecc_aggregate_uncorrected,
                after.ecc_aggregate_uncorrected,
            ),
            (
                "remapped rows (correctable)",
                self.remapped_rows_correctable,
                after.remapped_rows_correctable,
            ),
            (
                "remapped rows (uncorrectable)",
                self.remapped_rows_uncorrectable,
                after.remapped_rows_uncorrectable,
            ),
        ];
        let flags = [
            (
                "row remapping pending",
                self.remapping_pending,
                after.remapping_pending,
            ),
            (
                "row remapping failed",
                self.remapping_failed,
                after.remapping_failed,
            ),
            (
                "pages pending retirement",
                self.pages_pending_retirement,
                after.pages_pending_retirement,
            ),
        ];
        fn change<T: PartialEq + ToString>(
            name: &str,
            before: Option<T>,
            after: Option<T>,
        ) -> Option<String> {
            let show =
                |value: Option<T>| value.map_or_else(|| "unknown".to_owned(), |v| v.to_string());
            (before != after).then(|| format!("{name}: {} → {}", show(before), show(after)))
        }
        counts
            .into_iter()
            .filter_map(|(name, before, after)| change(name, before, after))
            .chain(
                flags
                    .into_iter()
                    .filter_map(|(name, before, after)| change(name, before, after)),
            )
            .collect()
    }
}

/// A CUDA version as the driver encodes it: `1000 * major + 10 * minor` (13000 = 13.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CudaVersion {
    /// The raw number, e.g. 12080 for 12.8.
    pub raw: i32,
}

impl CudaVersion {
    /// Major version (13 for 13000).
    pub fn major(self) -> i32 {
        self.raw / 1000
    }

    /// Minor version (8 for 12080).
    pub fn minor(self) -> i32 {
        (self.raw % 1000) / 10
    }
}

impl std::fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major(), self.minor())
    }
}

/// Result of the largest-allocatable-block probe.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LargestBlock {
    /// Free memory reported by `cuMemGetInfo` just before probing.
    pub free_bytes: u64,
    /// The largest single `cuMemAlloc` that succeeded.
    pub largest_bytes: u64,
    /// The smallest size known to fail (the answer lies between the two).
    pub smallest_failed_bytes: u64,
    /// Allocation attempts made.
    pub attempts: u32,
    /// Time spent probing.
    pub elapsed_ms: u64,
    /// False when the time limit or a cancel stopped the search before it reached
    /// [`PROBE_RESOLUTION_BYTES`].
    pub converged: bool,
    /// `largest_bytes / free_bytes`.
    pub ratio_of_free: f64,
    /// What the numbers mean for the user.
    pub explanation: String,
}

/// Search resolution: 2 MiB, the allocation granularity of current GPUs.
pub const PROBE_RESOLUTION_BYTES: u64 = 2 << 20;
