//! Raw device allocations that are always released, and the largest-allocatable-block probe.
//!
//! Raw `cuMemAlloc`/`cuMemFree` are used on purpose: cudarc's safe `alloc` goes through the
//! stream-ordered pool, which keeps freed memory until the stream synchronizes and would make
//! the probe measure the pool instead of the driver.

use super::driver_error;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use vramscope_core::model::checks::*;

use cudarc::driver::{CudaContext, result, sys};

/// A block from `cuMemAlloc`, freed when dropped (also on errors and cancellation).
pub(crate) struct DeviceAllocation {
    /// Device address of the first byte.
    pub address: sys::CUdeviceptr,
    /// Size in bytes.
    pub bytes: u64,
    /// Keeps the context alive (and current) while the block exists.
    context: Arc<CudaContext>,
}

impl DeviceAllocation {
    /// Allocates `bytes` with `cuMemAlloc` in `context`.
    pub fn new(context: &Arc<CudaContext>, bytes: u64) -> Result<Self, CudaError> {
        context
            .bind_to_thread()
            .map_err(|error| driver_error("cuCtxSetCurrent", error))?;
        let size = usize::try_from(bytes)
            .map_err(|_| CudaError::InvalidOption(format!("{bytes} bytes do not fit in memory")))?;
        // SAFETY: the context is current on this thread; the pointer is owned by `Self` and freed
        // exactly once in `drop`.
        let address = unsafe { result::malloc_sync(size) }
            .map_err(|error| driver_error("cuMemAlloc", error))?;
        Ok(Self {
            address,
            bytes,
            context: Arc::clone(context),
        })
    }
}

impl Drop for DeviceAllocation {
    fn drop(&mut self) {
        // A failed free leaves nothing to do but report it through the context's sticky error.
        let freed = self.context.bind_to_thread().and_then(|()| {
            // SAFETY: `address` came from `malloc_sync` and is freed only here.
            unsafe { result::free_sync(self.address) }
        });
        self.context.record_err(freed);
    }
}

/// Finds the largest block `cuMemAlloc` will hand out, within `time_limit`. Every successful
/// allocation is released right away.
///
/// Search: try all free memory; then step down from the top in doubling steps (the answer is
/// usually within a few MiB of free, so this needs few near-full-card allocations, each of which
/// costs ≈0.4 s on an H200), then bisect between the last success and the last failure.
pub fn largest_allocatable_block(
    context: &Arc<CudaContext>,
    time_limit: Duration,
    cancel: &AtomicBool,
) -> Result<LargestBlock, CudaError> {
    context
        .bind_to_thread()
        .map_err(|error| driver_error("cuCtxSetCurrent", error))?;
    let (free, _) = context
        .mem_get_info()
        .map_err(|error| driver_error("cuMemGetInfo", error))?;
    let free_bytes = free as u64;
    let started = Instant::now();
    let mut attempts = 0;
    let mut try_size = |bytes: u64| -> Result<bool, CudaError> {
        attempts += 1;
        match DeviceAllocation::new(context, bytes) {
            Ok(_released_here) => Ok(true),
            Err(error) if error.is_out_of_memory() => Ok(false),
            Err(error) => Err(error),
        }
    };
    let search = search_largest(free_bytes, &mut try_size, || {
        started.elapsed() >= time_limit || cancel.load(Ordering::Relaxed)
    })?;
    context
        .check_err()
        .map_err(|error| driver_error("cuMemFree", error))?;
    let ratio_of_free = if free_bytes == 0 {
        0.0
    } else {
        search.largest_bytes as f64 / free_bytes as f64
    };
    Ok(LargestBlock {
        free_bytes,
        largest_bytes: search.largest_bytes,
        smallest_failed_bytes: search.smallest_failed_bytes,
        attempts,
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        converged: search.converged,
        ratio_of_free,
        explanation: explain(free_bytes, search.largest_bytes),
    })
}

/// Bounds found by [`search_largest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SearchBounds {
    /// The largest size that allocated.
    largest_bytes: u64,
    /// The smallest size that failed (the search narrows the gap between the two).
    smallest_failed_bytes: u64,
    converged: bool,
}

/// The search itself, over any "does this size allocate?" function, so that it can be tested
/// without a GPU. `out_of_time` is asked before every attempt after the first.
fn search_largest(
    free_bytes: u64,
    try_size: &mut dyn FnMut(u64) -> Result<bool, CudaError>,
    out_of_time: impl Fn() -> bool,
) -> Result<SearchBounds, CudaError> {
    let align = |bytes: u64| bytes / PROBE_RESOLUTION_BYTES * PROBE_RESOLUTION_BYTES;
    let top = align(free_bytes);
    let mut bounds = SearchBounds {
        largest_bytes: 0,
        smallest_failed_bytes: top + PROBE_RESOLUTION_BYTES,
        converged: false,
    };
    if top == 0 {
        bounds.converged = true;
        return Ok(bounds);
    }
    if try_size(top)? {
        bounds.largest_bytes = top;
        bounds.converged = true;
        return Ok(bounds);
    }
    bounds.smallest_failed_bytes = top;
    // Step down from the top: 2, 4, 8, … MiB below free.
    let mut step = PROBE_RESOLUTION_BYTES;
    loop {
        if out_of_time() {
            return Ok(bounds);
        }
        let size = top.saturating_sub(step);
        if size == 0 {
            break;
        }
        if try_size(size)? {
            bounds.largest_bytes = size;
            break;
        }
        bounds.smallest_failed_bytes = size;
        step = step.saturating_mul(2);
    }
    // Bisect between the last success and the last failure.
    while bounds.smallest_failed_bytes - bounds.largest_bytes > PROBE_RESOLUTION_BYTES {
        if out_of_time() {
            return Ok(bounds);
        }
        let middle =
            align(bounds.largest_bytes + (bounds.smallest_failed_bytes - bounds.largest_bytes) / 2);
        if try_size(middle)? {
            bounds.largest_bytes = middle;
        } else {
            bounds.smallest_failed_bytes = middle;
        }
    }
    bounds.converged = true;
    Ok(bounds)
}

/// Plain-language reading of the probe.
fn explain(free_bytes: u64, largest_bytes: u64) -> String {
    let gib = |bytes: u64| bytes as f64 / vramscope_core::model::GIB as f64;
    let gap = free_bytes.saturating_sub(largest_bytes);
    if free_bytes == 0 {
        return "No memory is free on this GPU: every allocation will fail until other processes release memory.".to_owned();
    }
    if gap <= 64 << 20 || largest_bytes as f64 >= 0.99 * free_bytes as f64 {
        format!(
            "One block of {:.2} GiB could be allocated out of {:.2} GiB free (within {:.1} MiB): \
             the driver's memory is not fragmented. The driver maps physical pages into a \
             contiguous virtual range, so driver-level fragmentation is rare. If a program ran \
             out of memory with this much free, look at its framework's caching allocator \
             (PyTorch \"reserved but unallocated\", TensorFlow/XLA BFC): that is where \
             fragmentation happens.",
            gib(largest_bytes),
            gib(free_bytes),
            gap as f64 / (1u64 << 20) as f64
        )
    } else {
        format!(
            "Only {:.2} GiB could be allocated in one block although {:.2} GiB were free (a gap \
             of {:.2} GiB). Driver-level virtual memory rarely fragments, so suspect another \
             process allocating at the same time, an MPS or MIG memory limit, or a memory pool \
             holding freed memory; repeat the check and look at the process list.",
            gib(largest_bytes),
            gib(free_bytes),
            gib(gap)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use vramscope_core::model::MIB;

    /// Runs the search against a fake device on which `limit` bytes allocate.
    fn search(free: u64, limit: u64) -> (SearchBounds, Vec<u64>) {
        let mut tried = Vec::new();
        let mut try_size = |bytes: u64| {
            tried.push(bytes);
            Ok(bytes <= limit)
        };
        let bounds =
            search_largest(free, &mut try_size, || false).unwrap_or_else(|e| panic!("{e}"));
        (bounds, tried)
    }

    #[test]
    fn finds_a_limit_just_below_free_in_few_attempts() {
        // H200: the largest block was free − 3.1 MiB.
        let free = 142_630 * MIB + 300 * 1024;
        let limit = free - 3 * MIB - 100 * 1024;
        let (bounds, tried) = search(free, limit);
        assert!(bounds.converged);
        assert!(
            bounds.largest_bytes <= limit && limit - bounds.largest_bytes < PROBE_RESOLUTION_BYTES
        );
        assert!(bounds.smallest_failed_bytes > limit);
        assert!(tried.len() <= 5, "{tried:?}");
    }

    #[test]
    fn finds_a_limit_far_below_free() {
        let free = 80 * 1024 * MIB;
        let limit = 20 * 1024 * MIB + 7 * MIB;
        let (bounds, _) = search(free, limit);
        assert!(bounds.converged);
        assert!(
            limit - bounds.largest_bytes < PROBE_RESOLUTION_BYTES,
            "{bounds:?}"
        );
    }

    #[test]
    fn everything_free_allocates_on_the_first_try() {
        let (bounds, tried) = search(10 * 1024 * MIB, u64::MAX);
        assert_eq!(bounds.largest_bytes, 10 * 1024 * MIB);
        assert_eq!(tried.len(), 1);
    }

    #[test]
    fn stops_when_time_is_up() {
        let mut try_size = |_bytes: u64| Ok(false);
        let bounds = search_largest(10 * 1024 * MIB, &mut try_size, || true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!bounds.converged);
        assert_eq!(bounds.largest_bytes, 0);
    }

    #[test]
    fn a_driver_error_other_than_out_of_memory_ends_the_search() {
        let mut try_size = |_bytes: u64| Err(CudaError::Cancelled);
        assert_eq!(
            search_largest(10 * MIB, &mut try_size, || false),
            Err(CudaError::Cancelled)
        );
    }

    #[test]
    fn explanation_points_at_framework_caches_when_driver_memory_is_whole() {
        let text = explain(100 * 1024 * MIB, 100 * 1024 * MIB - 3 * MIB);
        assert!(
            text.contains("not fragmented") && text.contains("PyTorch"),
            "{text}"
        );
        let text = explain(100 * 1024 * MIB, 50 * 1024 * MIB);
        assert!(text.contains("another process"), "{text}");
    }
}
