//! GPU memory test: pattern kernels over a share of free memory, in chunks, with progress,
//! cancel and every mismatch reported by address.
//!
//! The kernels are CUDA C in `kernels/memtest.cu`, shipped as PTX (`assets/ptx/memtest.ptx`) and
//! compiled by the driver at load time, so users need neither nvcc nor NVRTC. Memory comes from
//! raw `cuMemAlloc` in chunks (see [`super::alloc::DeviceAllocation`]), all released when the test
//! ends, fails or is cancelled.

use super::driver_error;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use vramscope_core::model::checks::*;

use cudarc::driver::{CudaContext, CudaFunction, LaunchConfig, PushKernelArg, result, sys};
use cudarc::nvrtc::Ptx;

use super::alloc::DeviceAllocation;

/// PTX of `kernels/memtest.cu` (the nvcc command is at the top of that file).
pub const MEMTEST_PTX: &str = include_str!("../../../../assets/ptx/memtest.ptx");

/// Word-value modes of the kernels (`mode` argument; see `kernels/memtest.cu`).
const MODE_CONSTANT: u32 = 0;
const MODE_OWN_ADDRESS: u32 = 1;
const MODE_RANDOM: u32 = 2;
const MODE_WALKING_ONES: u32 = 3;
const MODE_MODULO_20: u32 = 4;

/// Check flags of `mt_check`.
const EXPECT_COMPLEMENT: u32 = 1;
const WRITE_COMPLEMENT: u32 = 2;
const ONLY_SELECTED: u32 = 4;

/// `plant_index` value that plants nothing.
const NO_PLANT: u64 = u64::MAX;
/// Bit flipped by a planted fault.
const PLANT_MASK: u64 = 1 << 7;

/// Memory left unallocated so the driver and the test's own buffers have room.
const HEADROOM_BYTES: u64 = 256 << 20;

/// Patterns of the moving-inversions test (each is also checked inverted).
const MOVING_INVERSION_PATTERNS: [u64; 5] = [
    0x0000_0000_0000_0000,
    0xAAAA_AAAA_AAAA_AAAA,
    0x8080_8080_8080_8080,
    0xCCCC_CCCC_CCCC_CCCC,
    0x0F0F_0F0F_0F0F_0F0F,
];

/// The kernel launches of `kind` (each over every chunk).
fn phases(kind: MemtestKind, seed: u64) -> Vec<Phase> {
    let inversion = |mode, pattern, aux| {
        [
            Phase::fill(mode, pattern, aux),
            Phase::check(mode, pattern, aux, WRITE_COMPLEMENT),
            Phase::check(mode, pattern, aux, EXPECT_COMPLEMENT),
        ]
    };
    match kind {
        MemtestKind::OwnAddress => inversion(MODE_OWN_ADDRESS, 0, 0).to_vec(),
        MemtestKind::WalkingOnes => (0..64)
            .flat_map(|shift| inversion(MODE_WALKING_ONES, 0, shift))
            .collect(),
        MemtestKind::MovingInversions => MOVING_INVERSION_PATTERNS
            .into_iter()
            .flat_map(|pattern| inversion(MODE_CONSTANT, pattern, 0))
            .collect(),
        MemtestKind::Modulo20 => {
            let pattern = splitmix64(seed);
            (0..20)
                .flat_map(|offset| {
                    [pattern, !pattern].into_iter().flat_map(move |value| {
                        [
                            Phase::fill(MODE_MODULO_20, value, offset),
                            Phase::check(MODE_MODULO_20, value, offset, ONLY_SELECTED),
                        ]
                    })
                })
                .collect()
        }
        MemtestKind::RandomData => inversion(MODE_RANDOM, seed, 0).to_vec(),
    }
}

/// One kernel launch over every chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Phase {
    /// `None` = `mt_fill`, `Some(flags)` = `mt_check` with those flags.
    check_flags: Option<u32>,
    mode: u32,
    pattern: u64,
    aux: u64,
}

impl Phase {
    fn fill(mode: u32, pattern: u64, aux: u64) -> Self {
        Self {
            check_flags: None,
            mode,
            pattern,
            aux,
        }
    }

    fn check(mode: u32, pattern: u64, aux: u64, flags: u32) -> Self {
        Self {
            check_flags: Some(flags),
            mode,
            pattern,
            aux,
        }
    }

    /// Bytes this phase reads plus writes over `tested_bytes` (every 20th word for a selective
    /// check).
    fn bytes_moved(self, tested_bytes: u64) -> u64 {
        match self.check_flags {
            None => tested_bytes,
            Some(flags) if flags & ONLY_SELECTED != 0 => tested_bytes / 20,
            Some(flags) if flags & WRITE_COMPLEMENT != 0 => 2 * tested_bytes,
            Some(_) => tested_bytes,
        }
    }
}

/// splitmix64, the same mixer the kernels use for random data; also derives patterns from a seed.
fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A chunk of the tested region.
struct Chunk {
    allocation: DeviceAllocation,
    /// Index of its first word in the whole region.
    first_word: u64,
    /// Word (in this chunk) that carries a planted fault, or [`NO_PLANT`].
    plant_index: u64,
}

impl Chunk {
    fn words(&self) -> u64 {
        self.allocation.bytes / 8
    }
}

/// The loaded kernels.
struct Kernels {
    fill: CudaFunction,
    check: CudaFunction,
}

/// Runs the memory test on the device of `context`.
///
/// `progress` is called after every kernel phase (tens of milliseconds apart on a large GPU);
/// `cancel` is read at the same moments. NVML counters are not read here: the caller does that
/// around this call (see [`super::run_checks`]).
pub fn run_memtest(
    context: &Arc<CudaContext>,
    config: &MemtestConfig,
    cancel: &AtomicBool,
    progress: &mut dyn FnMut(MemtestProgress),
) -> Result<MemtestReport, CudaError> {
    config.validate()?;
    let started = Instant::now();
    context
        .bind_to_thread()
        .map_err(|error| driver_error("cuCtxSetCurrent", error))?;
    let kernels = load_kernels(context)?;
    let multiprocessors = context
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .map_err(|error| driver_error("cuDeviceGetAttribute", error))?;
    let launch = LaunchConfig {
        grid_dim: (u32::try_from(multiprocessors.max(1)).unwrap_or(1) * 8, 1, 1),
        block_dim: (512, 1, 1),
        shared_mem_bytes: 0,
    };
    let record_words = 1 + 4 * config.max_error_records as u64;
    let error_buffer = DeviceAllocation::new(context, record_words * 8)?;
    let (free, _) = context
        .mem_get_info()
        .map_err(|error| driver_error("cuMemGetInfo", error))?;
    let free_bytes_before = free as u64;
    let chunks = allocate_chunks(context, config, free_bytes_before)?;
    let tested_bytes: u64 = chunks.iter().map(|chunk| chunk.allocation.bytes).sum();
    let planted_fault_addresses = chunks
        .iter()
        .filter(|chunk| chunk.plant_index != NO_PLANT)
        .map(|chunk| chunk.allocation.address + chunk.plant_index * 8)
        .collect();

    let mut report = MemtestReport {
        config: config.clone(),
        free_bytes_before,
        tested_bytes,
        chunk_count: chunks.len(),
        tests: Vec::new(),
        total_errors: 0,
        cancelled: false,
        stopped_by: None,
        planted_fault_addresses,
        throughput_gb_per_s: 0.0,
        copy_bandwidth_gb_per_s: None,
        health_before: None,
        health_after: None,
        health_changes: Vec::new(),
        elapsed_ms: 0.0,
    };
    let all_phases: Vec<Vec<Phase>> = config
        .tests
        .iter()
        .map(|kind| phases(*kind, config.seed))
        .collect();
    let total_bytes: u64 = all_phases
        .iter()
        .flatten()
        .map(|phase| phase.bytes_moved(tested_bytes))
        .sum();
    let mut bytes_done = 0u64;
    let stream = context.default_stream();

    for (test_index, (&kind, phases)) in config.tests.iter().zip(&all_phases).enumerate() {
        // SAFETY: the buffer holds `record_words` u64 words; zeroing the first (the count) resets it.
        unsafe { result::memset_d8_sync(error_buffer.address, 0, 8) }
            .map_err(|error| driver_error("cuMemsetD8", error))?;
        let mut result = MemtestTestResult {
            kind,
            label: kind.label().to_owned(),
            phases_done: 0,
            phases_total: phases.len(),
            bytes_moved: 0,
            elapsed_ms: 0.0,
            throughput_gb_per_s: 0.0,
            error_count: 0,
            errors: Vec::new(),
        };
        let test_started = Instant::now();
        for phase in phases {
            if cancel.load(Ordering::Relaxed) {
                report.cancelled = true;
                break;
            }
            let outcome = chunks
                .iter()
                .try_for_each(|chunk| {
                    launch_phase(
                        &stream,
                        &kernels,
                        launch,
                        chunk,
                        *phase,
                        &error_buffer,
                        config,
                    )
                })
                .and_then(|()| stream.synchronize());
            if let Err(error) = outcome {
                report.stopped_by = Some(driver_error("memory-test kernel", error));
                break;
            }
            result.phases_done += 1;
            result.bytes_moved += phase.bytes_moved(tested_bytes);
            bytes_done += phase.bytes_moved(tested_bytes);
            progress(MemtestProgress {
                test: kind,
                test_index,
                test_count: config.tests.len(),
                fraction_done: bytes_done as f64 / total_bytes.max(1) as f64,
                errors_so_far: report.total_errors,
            });
        }
        let seconds = test_started.elapsed().as_secs_f64();
        result.elapsed_ms = seconds * 1e3;
        result.throughput_gb_per_s = gb_per_s(result.bytes_moved, seconds);
        if report.stopped_by.is_none() {
            let (count, errors) = read_error_records(&error_buffer, config.max_error_records)?;
            result.error_count = count;
            result.errors = errors;
        }
        report.total_errors += result.error_count;
        report.tests.push(result);
        if report.cancelled || report.stopped_by.is_some() {
            break;
        }
    }
    let kernel_seconds: f64 = report.tests.iter().map(|test| test.elapsed_ms / 1e3).sum();
    let moved: u64 = report.tests.iter().map(|test| test.bytes_moved).sum();
    report.throughput_gb_per_s = gb_per_s(moved, kernel_seconds);
    drop(chunks);
    drop(error_buffer);
    if report.stopped_by.is_none() {
        context
            .check_err()
            .map_err(|error| driver_error("cuMemFree", error))?;
    }
    report.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(report)
}

fn gb_per_s(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / seconds / 1e9
    } else {
        0.0
    }
}

fn load_kernels(context: &Arc<CudaContext>) -> Result<Kernels, CudaError> {
    let module = context
        .load_module(Ptx::from_src(MEMTEST_PTX))
        .map_err(|error| driver_error("cuModuleLoadData (memory-test PTX)", error))?;
    let function = |name: &str| {
        module
            .load_function(name)
            .map_err(|error| driver_error("cuModuleGetFunction", error))
    };
    Ok(Kernels {
        fill: function("mt_fill")?,
        check: function("mt_check")?,
    })
}

/// How many bytes to test: the share of free memory, leaving headroom, in whole 2 MiB units.
fn target_bytes(free_bytes: u64, share_of_free_percent: u32) -> u64 {
    let share = free_bytes / 100 * u64::from(share_of_free_percent);
    let bytes = share.min(free_bytes.saturating_sub(HEADROOM_BYTES));
    bytes / GRANULARITY_BYTES * GRANULARITY_BYTES
}

/// Splits `total_bytes` into allocation sizes of at most `chunk_bytes`.
fn chunk_sizes(total_bytes: u64, chunk_bytes: u64) -> Vec<u64> {
    let mut sizes = vec![chunk_bytes; (total_bytes / chunk_bytes) as usize];
    if !total_bytes.is_multiple_of(chunk_bytes) {
        sizes.push(total_bytes % chunk_bytes);
    }
    sizes
}

/// Allocates the tested region. When the driver refuses a chunk (another process took memory
/// meanwhile), smaller sizes are tried; what could be allocated is tested.
fn allocate_chunks(
    context: &Arc<CudaContext>,
    config: &MemtestConfig,
    free_bytes: u64,
) -> Result<Vec<Chunk>, CudaError> {
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut first_word = 0;
    'sizes: for mut size in chunk_sizes(
        target_bytes(free_bytes, config.share_of_free_percent),
        config.chunk_bytes,
    ) {
        let allocation = loop {
            match DeviceAllocation::new(context, size) {
                Ok(allocation) => break allocation,
                Err(error) if error.is_out_of_memory() && size > GRANULARITY_BYTES => {
                    size = (size / 2) / GRANULARITY_BYTES * GRANULARITY_BYTES;
                }
                Err(error) if error.is_out_of_memory() => break 'sizes,
                Err(error) => return Err(error),
            }
        };
        let words = allocation.bytes / 8;
        let plant_index = config
            .planted_fault_words
            .iter()
            .find(|&&word| word >= first_word && word < first_word + words)
            .map_or(NO_PLANT, |&word| word - first_word);
        chunks.push(Chunk {
            allocation,
            first_word,
            plant_index,
        });
        first_word += words;
    }
    if chunks.is_empty() {
        return Err(CudaError::InvalidOption(format!(
            "no memory could be allocated for the memory test ({} MiB free)",
            free_bytes >> 20
        )));
    }
    Ok(chunks)
}

fn launch_phase(
    stream: &Arc<cudarc::driver::CudaStream>,
    kernels: &Kernels,
    launch: LaunchConfig,
    chunk: &Chunk,
    phase: Phase,
    error_buffer: &DeviceAllocation,
    config: &MemtestConfig,
) -> Result<(), cudarc::driver::DriverError> {
    let words = chunk.words();
    let capacity = config.max_error_records as u64;
    match phase.check_flags {
        None => {
            let mut builder = stream.launch_builder(&kernels.fill);
            builder
                .arg(&chunk.allocation.address)
                .arg(&words)
                .arg(&chunk.first_word)
                .arg(&phase.pattern)
                .arg(&phase.aux)
                .arg(&phase.mode);
            // SAFETY: the arguments match `mt_fill`'s signature; the kernel writes only the
            // `words` words of this chunk, which this process allocated.
            unsafe { builder.launch(launch) }.map(|_| ())
        }
        Some(flags) => {
            let mut builder = stream.launch_builder(&kernels.check);
            builder
                .arg(&chunk.allocation.address)
                .arg(&words)
                .arg(&chunk.first_word)
                .arg(&phase.pattern)
                .arg(&phase.aux)
                .arg(&phase.mode)
                .arg(&flags)
                .arg(&error_buffer.address)
                .arg(&capacity)
                .arg(&chunk.plant_index)
                .arg(&PLANT_MASK);
            // SAFETY: the arguments match `mt_check`'s signature; it touches the chunk's words and
            // at most `1 + 4 * capacity` words of the error buffer, which holds exactly that many.
            unsafe { builder.launch(launch) }.map(|_| ())
        }
    }
}

/// Copies the mismatch count and records back from the device.
fn read_error_records(
    buffer: &DeviceAllocation,
    capacity: usize,
) -> Result<(u64, Vec<MemoryMismatch>), CudaError> {
    let mut words = vec![0u64; 1 + 4 * capacity];
    // SAFETY: `buffer` holds exactly `words.len()` u64 words.
    unsafe { result::memcpy_dtoh_sync(&mut words, buffer.address) }
        .map_err(|error| driver_error("cuMemcpyDtoH", error))?;
    Ok(decode_error_records(&words, capacity))
}

/// Decodes `[count, (address, expected, actual, second_read) × capacity]`.
fn decode_error_records(words: &[u64], capacity: usize) -> (u64, Vec<MemoryMismatch>) {
    let count = words.first().copied().unwrap_or(0);
    let kept = usize::try_from(count).unwrap_or(usize::MAX).min(capacity);
    let errors = words
        .get(1..)
        .unwrap_or_default()
        .chunks_exact(4)
        .take(kept)
        .map(|record| MemoryMismatch {
            address: record[0],
            expected: record[1],
            actual: record[2],
            second_read: record[3],
            flipped_bits: (record[1] ^ record[2]).count_ones(),
        })
        .collect();
    (count, errors)
}

/// Device-to-device copy bandwidth with `cuMemcpyDtoD`, counted as bytes read plus written,
/// in 10⁹ bytes per second: the yardstick for the memory test's own throughput. The best of a
/// few rounds is kept, so that a round slowed by clocks still ramping up does not count.
pub fn measure_copy_bandwidth(
    context: &Arc<CudaContext>,
    buffer_bytes: u64,
) -> Result<f64, CudaError> {
    const WARM_UP_COPIES: usize = 4;
    const ROUNDS: usize = 3;
    const COPIES_PER_ROUND: usize = 10;
    let source = DeviceAllocation::new(context, buffer_bytes)?;
    let destination = DeviceAllocation::new(context, buffer_bytes)?;
    let size = usize::try_from(buffer_bytes)
        .map_err(|_| CudaError::InvalidOption("copy buffer too large".into()))?;
    // SAFETY: both buffers hold `size` bytes.
    unsafe { result::memset_d8_sync(source.address, 0x5A, size) }
        .map_err(|error| driver_error("cuMemsetD8", error))?;
    let stream = context.default_stream();
    let copy = |count: usize| -> Result<(), CudaError> {
        for _ in 0..count {
            // SAFETY: both buffers hold `size` bytes and do not overlap.
            unsafe {
                result::memcpy_dtod_async(
                    destination.address,
                    source.address,
                    size,
                    stream.cu_stream(),
                )
            }
            .map_err(|error| driver_error("cuMemcpyDtoDAsync", error))?;
        }
        stream
            .synchronize()
            .map_err(|error| driver_error("cuStreamSynchronize", error))
    };
    copy(WARM_UP_COPIES)?;
    let mut best_gb_per_s: f64 = 0.0;
    for _ in 0..ROUNDS {
        let started = Instant::now();
        copy(COPIES_PER_ROUND)?;
        let seconds = started.elapsed().as_secs_f64();
        best_gb_per_s = best_gb_per_s.max(gb_per_s(
            2 * buffer_bytes * COPIES_PER_ROUND as u64,
            seconds,
        ));
    }
    Ok(best_gb_per_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    use vramscope_core::model::GIB;

    #[test]
    fn the_shipped_ptx_defines_both_kernels_for_an_old_target() {
        assert!(MEMTEST_PTX.contains(".entry mt_fill("));
        assert!(MEMTEST_PTX.contains(".entry mt_check("));
        assert!(MEMTEST_PTX.contains(".version 6.3"));
        assert!(MEMTEST_PTX.contains(".target sm_75"));
        assert!(!MEMTEST_PTX.contains('\0'), "PTX is passed as a C string");
    }

    #[test]
    fn every_test_pairs_each_write_with_a_verify() {
        for kind in MemtestKind::ALL {
            let phases = phases(kind, 1);
            let fills = phases.iter().filter(|p| p.check_flags.is_none()).count();
            let checks = phases.len() - fills;
            assert!(
                fills > 0 && checks >= fills,
                "{kind:?}: {fills} fills, {checks} checks"
            );
            assert_eq!(
                phases.first().map(|p| p.check_flags),
                Some(None),
                "{kind:?} starts with a write"
            );
        }
        assert_eq!(phases(MemtestKind::WalkingOnes, 1).len(), 64 * 3);
        assert_eq!(phases(MemtestKind::Modulo20, 1).len(), 20 * 2 * 2);
        assert_eq!(phases(MemtestKind::MovingInversions, 1).len(), 5 * 3);
    }

    #[test]
    fn moving_inversions_verify_the_pattern_then_its_complement() {
        let phases = phases(MemtestKind::MovingInversions, 0);
        assert_eq!(phases[0], Phase::fill(MODE_CONSTANT, 0, 0));
        assert_eq!(phases[1].check_flags, Some(WRITE_COMPLEMENT));
        assert_eq!(phases[2].check_flags, Some(EXPECT_COMPLEMENT));
        assert_eq!(phases[3].pattern, 0xAAAA_AAAA_AAAA_AAAA);
    }

    #[test]
    fn the_seed_changes_the_random_patterns() {
        assert_ne!(
            phases(MemtestKind::RandomData, 1),
            phases(MemtestKind::RandomData, 2)
        );
        assert_ne!(
            phases(MemtestKind::Modulo20, 1)[0].pattern,
            phases(MemtestKind::Modulo20, 2)[0].pattern
        );
    }

    #[test]
    fn bytes_moved_count_reads_and_writes() {
        let fill = Phase::fill(MODE_CONSTANT, 0, 0);
        assert_eq!(fill.bytes_moved(GIB), GIB);
        assert_eq!(
            Phase::check(0, 0, 0, WRITE_COMPLEMENT).bytes_moved(GIB),
            2 * GIB
        );
        assert_eq!(
            Phase::check(0, 0, 0, EXPECT_COMPLEMENT).bytes_moved(GIB),
            GIB
        );
        assert_eq!(
            Phase::check(4, 0, 0, ONLY_SELECTED).bytes_moved(20 * GIB),
            GIB
        );
    }

    #[test]
    fn target_leaves_headroom_and_is_aligned() {
        assert_eq!(target_bytes(100 * GIB, 50), 50 * GIB);
        let all = target_bytes(100 * GIB, 100);
        assert_eq!(all, 100 * GIB - HEADROOM_BYTES);
        assert_eq!(target_bytes(GIB + 12345, 90) % GRANULARITY_BYTES, 0);
        assert_eq!(target_bytes(100 << 20, 100), 0);
    }

    #[test]
    fn chunks_cover_the_target_exactly() {
        assert_eq!(chunk_sizes(5 * GIB / 2, GIB), [GIB, GIB, GIB / 2]);
        assert_eq!(chunk_sizes(2 * GIB, GIB), [GIB, GIB]);
        assert!(chunk_sizes(0, GIB).is_empty());
    }

    #[test]
    fn config_rejects_out_of_range_values() {
        let config = |edit: fn(&mut MemtestConfig)| {
            let mut config = MemtestConfig::default();
            edit(&mut config);
            config.validate()
        };
        assert!(config(|_| {}).is_ok());
        assert!(config(|c| c.share_of_free_percent = 0).is_err());
        assert!(config(|c| c.share_of_free_percent = 101).is_err());
        assert!(config(|c| c.chunk_bytes = 3 << 20).is_err());
        assert!(config(|c| c.max_error_records = 1 << 20).is_err());
    }

    #[test]
    fn error_records_decode_and_stay_within_capacity() {
        // count 3, capacity 2: two records kept, the count stays complete.
        let words = [
            3, 0x1000, 0x5555, 0x55D5, 0x55D5, 0x2000, 0, 1, 0, 9, 9, 9, 9,
        ];
        let (count, records) = decode_error_records(&words, 2);
        assert_eq!(count, 3);
        assert_eq!(records.len(), 2);
        assert_eq!(
            records[0],
            MemoryMismatch {
                address: 0x1000,
                expected: 0x5555,
                actual: 0x55D5,
                second_read: 0x55D5,
                flipped_bits: 1
            }
        );
        assert_eq!(
            records[1].second_read, 0,
            "a transient error reads back the expected value"
        );
        assert_eq!(decode_error_records(&[], 4), (0, Vec::new()));
    }

    #[test]
    fn mismatches_serialize_as_hex() {
        let json = serde_json::to_value(MemoryMismatch {
            address: 0x7faf_4201_81c8,
            expected: 0x5555,
            actual: 0x55d5,
            second_read: 0x55d5,
            flipped_bits: 1,
        })
        .unwrap_or_default();
        assert_eq!(json["address"], "0x00007faf420181c8");
        assert_eq!(json["flipped_bits"], 1);
    }

    #[test]
    fn splitmix_matches_the_kernel_constants() {
        // Reference value of splitmix64(0) (Vigna's splitmix64 first output for seed 0).
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
    }
}
