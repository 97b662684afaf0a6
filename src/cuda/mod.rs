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

pub use alloc::{LargestBlock, PROBE_RESOLUTION_BYTES, largest_allocatable_block};
pub use check::{
    CHECK_REPORT_SCHEMA, CheckOptions, CheckProgress, CheckReport, DeviceCheck, run_checks,
};
pub use error::CudaError;
pub use facts::{Comparison, CudaDeviceFacts, compare_with_nvml, format_mib};
pub use memtest::{
    MEMTEST_PTX, MemoryMismatch, MemtestConfig, MemtestKind, MemtestProgress, MemtestReport,
    MemtestTestResult, measure_copy_bandwidth, run_memtest,
};
pub use nvml::{MemoryHealthCounters, NvmlDeviceFacts, NvmlSystemFacts};
pub use probe::{CudaVersion, device_count, driver_library_present, driver_version};
