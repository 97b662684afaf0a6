//! Errors of the CUDA checks, as values that say what failed and what the user can do about it.

use cudarc::driver::DriverError;
use serde::Serialize;

/// Why a CUDA check could not run or stopped.
///
/// Every entry point of [`crate::cuda`] returns this instead of panicking, also when the driver
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
    /// Wraps a cudarc [`DriverError`] from the driver function `call`, adding a hint for the codes
    /// that have a well-known cause.
    pub fn driver(call: &str, error: DriverError) -> Self {
        let code = error.0 as u32;
        let name = error
            .error_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("CUresult {code}"));
        let description = error
            .error_string()
            .map(|text| text.to_string_lossy().into_owned())
            .unwrap_or_default();
        Self::Driver {
            call: call.to_owned(),
            code,
            name,
            description,
            hint: hint_for_code(code)
                .map(|hint| format!(". {}", hint.trim_end_matches('.')))
                .unwrap_or_default(),
        }
    }

    /// True when the error is a `CUDA_ERROR_OUT_OF_MEMORY` (the expected answer while probing
    /// how much can be allocated).
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Self::Driver { code: 2, .. })
    }
}

/// What a driver error code usually means for someone diagnosing GPU memory trouble.
///
/// The meanings come from the one CUDA error table, [`crate::diagnose::cuda_errors`], which the
/// log analyzer uses too, so a code reads the same in `vramscope check` and in a diagnosis.
fn hint_for_code(code: u32) -> Option<&'static str> {
    crate::diagnose::cuda_errors::by_code(code).map(|info| info.meaning)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_codes_have_hints_and_unknown_codes_do_not() {
        assert!(hint_for_code(100).is_some_and(|hint| hint.contains("no CUDA device")));
        assert!(hint_for_code(214).is_some_and(|hint| hint.contains("ECC")));
        assert_eq!(hint_for_code(12345), None);
    }

    #[test]
    fn no_driver_message_says_what_to_do() {
        let text = CudaError::NoDriver.to_string();
        assert!(text.starts_with("no NVIDIA driver found"), "{text}");
        assert!(text.contains("LD_LIBRARY_PATH"), "{text}");
    }

    #[test]
    fn only_code_2_is_out_of_memory() {
        let oom = CudaError::Driver {
            call: "cuMemAlloc".into(),
            code: 2,
            name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
            description: "out of memory".into(),
            hint: String::new(),
        };
        assert!(oom.is_out_of_memory());
        assert!(!CudaError::NoDriver.is_out_of_memory());
    }
}
