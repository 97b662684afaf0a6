//! cudarc's driver errors turned into [`CudaError`] values that say what failed and what the user
//! can do about it.

use cudarc::driver::DriverError;
use vramscope_core::model::checks::CudaError;

/// Wraps a cudarc [`DriverError`] from the driver function `call`, adding a hint for the codes
/// that have a well-known cause.
pub fn driver_error(call: &str, error: DriverError) -> CudaError {
    let code = error.0 as u32;
    let name = error
        .error_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("CUresult {code}"));
    let description = error
        .error_string()
        .map(|text| text.to_string_lossy().into_owned())
        .unwrap_or_default();
    CudaError::Driver {
        call: call.to_owned(),
        code,
        name,
        description,
        hint: hint_for_code(code)
            .map(|hint| format!(". {}", hint.trim_end_matches('.')))
            .unwrap_or_default(),
    }
}

/// What a driver error code usually means for someone diagnosing GPU memory trouble.
///
/// The meanings come from the one CUDA error table, [`vramscope_core::diagnose::cuda_errors`], which the
/// log analyzer uses too, so a code reads the same in `vramscope check` and in a diagnosis.
fn hint_for_code(code: u32) -> Option<&'static str> {
    vramscope_core::diagnose::cuda_errors::by_code(code).map(|info| info.meaning)
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
