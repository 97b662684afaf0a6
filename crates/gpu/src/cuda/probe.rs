//! Safe first contact with the CUDA driver.
//!
//! cudarc panics (instead of returning an error) when `libcuda` cannot be opened, and may panic
//! on a missing driver symbol. Everything in [`crate::cuda`] therefore goes through [`guarded`]:
//! it checks that the library can be loaded at all, then runs the CUDA work inside
//! `catch_unwind`, so a broken installation becomes a [`CudaError`] value.

use super::driver_error;
use std::panic::{AssertUnwindSafe, catch_unwind};
use vramscope_core::model::checks::*;

use cudarc::driver::{result, sys};

/// True when the CUDA driver library can be loaded (a plain `dlopen` test; no CUDA call).
pub fn driver_library_present() -> bool {
    // SAFETY: in cudarc >= 0.19.5 this only tries `libloading::Library::new` on each candidate
    // name; it resolves no symbols and calls nothing in the library.
    unsafe { sys::is_culib_present() }
}

/// Runs `work`, which touches CUDA, only if the driver library exists, and turns a panic inside
/// cudarc into [`CudaError::Panicked`] naming `step`.
pub(crate) fn guarded<T>(
    step: &str,
    work: impl FnOnce() -> Result<T, CudaError>,
) -> Result<T, CudaError> {
    if !driver_library_present() {
        return Err(CudaError::NoDriver);
    }
    catch_panic(step, work)
}

/// Runs `work` and turns a panic into [`CudaError::Panicked`] naming `step`.
fn catch_panic<T>(step: &str, work: impl FnOnce() -> Result<T, CudaError>) -> Result<T, CudaError> {
    match catch_unwind(AssertUnwindSafe(work)) {
        Ok(outcome) => outcome,
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| {
                    payload
                        .downcast_ref::<&str>()
                        .map(|text| (*text).to_owned())
                })
                .unwrap_or_else(|| "unknown panic".to_owned());
            Err(CudaError::Panicked {
                call: step.to_owned(),
                message,
            })
        }
    }
}

/// The highest CUDA version the installed driver supports, read before `cuInit` and without a
/// context (`cuDriverGetVersion` works even when no GPU is usable).
pub fn driver_version() -> Result<CudaVersion, CudaError> {
    guarded("cuDriverGetVersion", || {
        let mut raw = 0;
        // SAFETY: `raw` is a valid out pointer for the duration of the call.
        unsafe { sys::cuDriverGetVersion(&mut raw) }
            .result()
            .map_err(|error| driver_error("cuDriverGetVersion", error))?;
        Ok(CudaVersion { raw })
    })
}

/// Initializes the driver and returns how many CUDA devices it sees.
pub fn device_count() -> Result<usize, CudaError> {
    guarded("cuDeviceGetCount", || {
        result::init().map_err(|error| driver_error("cuInit", error))?;
        let count =
            result::device::get_count().map_err(|error| driver_error("cuDeviceGetCount", error))?;
        Ok(usize::try_from(count).unwrap_or(0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_numbers_split_like_the_driver_encodes_them() {
        let version = CudaVersion { raw: 12080 };
        assert_eq!((version.major(), version.minor()), (12, 8));
        assert_eq!(CudaVersion { raw: 13000 }.to_string(), "13.0");
    }

    #[test]
    fn a_panic_inside_cuda_work_becomes_an_error_value() {
        let outcome: Result<(), CudaError> = catch_panic("test step", || panic!("boom {}", 7));
        assert_eq!(
            outcome,
            Err(CudaError::Panicked {
                call: "test step".into(),
                message: "boom 7".into()
            })
        );
        assert_eq!(catch_panic("ok step", || Ok(5)), Ok(5));
    }

    #[test]
    fn entry_points_return_errors_instead_of_panicking_without_a_driver() {
        if driver_library_present() {
            // With a driver the version is readable before any context exists.
            assert!(driver_version().is_ok_and(|version| version.major() >= 10));
        } else {
            assert_eq!(driver_version(), Err(CudaError::NoDriver));
            assert_eq!(device_count(), Err(CudaError::NoDriver));
        }
    }
}
