//! GPU checks through the CUDA driver (cudarc): driver and device facts compared with NVML, the
//! largest allocatable block, and a GPU memory test. Native only.
//!
//! Every entry point is safe to call on a machine without an NVIDIA driver: it returns
//! [`CudaError::NoDriver`] instead of letting cudarc panic (see [`probe`]).

mod alloc;
mod check;
mod error;
mod facts;
mod memtest;
mod nvml;
mod probe;

pub use alloc::largest_allocatable_block;
pub use check::{CheckOptions, CheckProgress, run_checks};
pub use error::driver_error;
pub use facts::{compare_with_nvml, format_mib};
pub use memtest::{MEMTEST_PTX, measure_copy_bandwidth, run_memtest};
pub use probe::{device_count, driver_library_present, driver_version};
// The results are plain data of the core, which judges and shows them.
pub use vramscope_core::model::checks::{
    CHECK_REPORT_SCHEMA, CheckReport, Comparison, CudaDeviceFacts, CudaError, CudaVersion,
    DeviceCheck, LargestBlock, MemoryHealthCounters, MemoryMismatch, MemtestConfig, MemtestKind,
    MemtestProgress, MemtestReport, MemtestTestResult, NvmlDeviceFacts, NvmlSystemFacts,
    PROBE_RESOLUTION_BYTES,
};
