//! CUDA error codes as printed by the driver API (`CUDA_ERROR_*`), the runtime API
//! (`cudaError*`) and `cudaGetErrorString`, with what each means for a memory diagnosis.
//!
//! Names and strings were printed by CUDA 13.0 on an H200 (`docs/sources.md` § "Measured"); they
//! are documented as `CUresult` in the CUDA Driver API and `cudaError` in the CUDA Runtime API
//! references (docs.nvidia.com/cuda). Logs show any of the three spellings, so lookups accept each.

use super::finding::{Category, Wizard};

/// One CUDA error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaErrorInfo {
    pub code: u32,
    /// Driver API name (`CUresult`); empty for runtime-only codes.
    pub driver_name: &'static str,
    /// Runtime API name (`cudaError_t`); empty for driver-only codes.
    pub runtime_name: &'static str,
    /// `cudaGetErrorString` / `cuGetErrorString` text.
    pub message: &'static str,
    /// What it means when diagnosing memory trouble, and what to do.
    pub meaning: &'static str,
    /// The finding category a line with this error points to.
    pub category: Category,
    /// The wizard to continue in.
    pub wizard: Wizard,
}

const fn e(
    code: u32,
    driver_name: &'static str,
    runtime_name: &'static str,
    message: &'static str,
    meaning: &'static str,
    category: Category,
    wizard: Wizard,
) -> CudaErrorInfo {
    CudaErrorInfo {
        code,
        driver_name,
        runtime_name,
        message,
        meaning,
        category,
        wizard,
    }
}

use Category::{Capacity, CudaError, DriverMismatch, Ecc};
use Wizard::{HardwareAndDriver as Hw, OutOfMemory as Oom};

/// The codes a memory diagnosis meets, from CUDA 13.0.
pub const CUDA_ERRORS: &[CudaErrorInfo] = &[
    e(
        1,
        "CUDA_ERROR_INVALID_VALUE",
        "cudaErrorInvalidValue",
        "invalid argument",
        "An API call got a bad argument (e.g. a zero-byte allocation); a bug in the caller.",
        CudaError,
        Hw,
    ),
    e(
        2,
        "CUDA_ERROR_OUT_OF_MEMORY",
        "cudaErrorMemoryAllocation",
        "out of memory",
        "A device allocation failed. Outside a framework's allocator (cuBLAS/cuDNN workspace, context creation, NCCL) it reads `CUDA error: out of memory`.",
        Capacity,
        Oom,
    ),
    e(
        3,
        "CUDA_ERROR_NOT_INITIALIZED",
        "cudaErrorInitializationError",
        "initialization error",
        "CUDA could not initialise; on NVSwitch systems check that Fabric Manager is running.",
        DriverMismatch,
        Hw,
    ),
    e(
        4,
        "CUDA_ERROR_DEINITIALIZED",
        "cudaErrorCudartUnloading",
        "driver shutting down",
        "A CUDA call was made while the process was exiting.",
        CudaError,
        Hw,
    ),
    e(
        34,
        "CUDA_ERROR_STUB_LIBRARY",
        "cudaErrorStubLibrary",
        "CUDA driver is a stub library",
        "A stub libcuda was loaded instead of the driver's: fix LD_LIBRARY_PATH or the container runtime.",
        DriverMismatch,
        Hw,
    ),
    e(
        35,
        "",
        "cudaErrorInsufficientDriver",
        "CUDA driver version is insufficient for CUDA runtime version",
        "The CUDA runtime is newer than the installed driver supports: upgrade the driver or use a build for an older CUDA.",
        DriverMismatch,
        Hw,
    ),
    e(
        36,
        "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
        "cudaErrorCallRequiresNewerDriver",
        "API call is not supported in the installed CUDA driver",
        "The application uses an API the installed driver does not have: upgrade the driver.",
        DriverMismatch,
        Hw,
    ),
    e(
        46,
        "CUDA_ERROR_DEVICE_UNAVAILABLE",
        "cudaErrorDevicesUnavailable",
        "CUDA-capable device(s) is/are busy or unavailable",
        "The device is in exclusive-process mode and taken, or unavailable.",
        CudaError,
        Hw,
    ),
    e(
        100,
        "CUDA_ERROR_NO_DEVICE",
        "cudaErrorNoDevice",
        "no CUDA-capable device is detected",
        "The driver is loaded but sees no CUDA device: check CUDA_VISIBLE_DEVICES and the container's GPU access.",
        DriverMismatch,
        Hw,
    ),
    e(
        101,
        "CUDA_ERROR_INVALID_DEVICE",
        "cudaErrorInvalidDevice",
        "invalid device ordinal",
        "A device index beyond the visible GPUs was used.",
        CudaError,
        Hw,
    ),
    e(
        200,
        "CUDA_ERROR_INVALID_IMAGE",
        "cudaErrorInvalidKernelImage",
        "device kernel image is invalid",
        "A kernel binary could not be loaded.",
        DriverMismatch,
        Hw,
    ),
    e(
        201,
        "CUDA_ERROR_INVALID_CONTEXT",
        "cudaErrorDeviceUninitialized",
        "invalid device context",
        "A call used a destroyed or never-created context.",
        CudaError,
        Hw,
    ),
    e(
        209,
        "CUDA_ERROR_NO_BINARY_FOR_GPU",
        "cudaErrorNoKernelImageForDevice",
        "no kernel image is available for execution on the device",
        "The binary was not built for this GPU's architecture: install a build that includes it.",
        DriverMismatch,
        Hw,
    ),
    e(
        214,
        "CUDA_ERROR_ECC_UNCORRECTABLE",
        "cudaErrorECCUncorrectable",
        "uncorrectable ECC error encountered",
        "An uncorrectable (double-bit) ECC error hit this process's memory; check the kernel log for Xid 48/94/95 and the device's remapped rows.",
        Ecc,
        Hw,
    ),
    e(
        218,
        "CUDA_ERROR_INVALID_PTX",
        "cudaErrorInvalidPtx",
        "a PTX JIT compilation failed",
        "The driver could not JIT-compile shipped PTX.",
        DriverMismatch,
        Hw,
    ),
    e(
        220,
        "CUDA_ERROR_NVLINK_UNCORRECTABLE",
        "cudaErrorNvlinkUncorrectable",
        "uncorrectable NVLink error detected during the execution",
        "An NVLink failure; look for Xid 74 in the kernel log.",
        Category::Xid,
        Hw,
    ),
    e(
        222,
        "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        "cudaErrorUnsupportedPtxVersion",
        "the provided PTX was compiled with an unsupported toolchain.",
        "The PTX was built by a newer toolkit than the driver understands: upgrade the driver.",
        DriverMismatch,
        Hw,
    ),
    e(
        226,
        "CUDA_ERROR_CONTAINED",
        "cudaErrorContained",
        "Invalid access of peer GPU memory over nvlink or a hardware error",
        "A contained hardware error (cf. Xid 94); restart the application, reset the GPU when convenient.",
        Ecc,
        Hw,
    ),
    e(
        700,
        "CUDA_ERROR_ILLEGAL_ADDRESS",
        "cudaErrorIllegalAddress",
        "an illegal memory access was encountered",
        "A kernel read or wrote outside its memory (Xid 31 in the kernel log). Sticky: the process must restart. Usually an application bug: rerun with CUDA_LAUNCH_BLOCKING=1 or under compute-sanitizer.",
        CudaError,
        Hw,
    ),
    e(
        701,
        "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        "cudaErrorLaunchOutOfResources",
        "too many resources requested for launch",
        "A kernel launch asked for too many registers or too much shared memory.",
        CudaError,
        Hw,
    ),
    e(
        702,
        "CUDA_ERROR_LAUNCH_TIMEOUT",
        "cudaErrorLaunchTimeout",
        "the launch timed out and was terminated",
        "A kernel ran past the display watchdog (only with kernel timeouts enabled).",
        CudaError,
        Hw,
    ),
    e(
        709,
        "CUDA_ERROR_CONTEXT_IS_DESTROYED",
        "cudaErrorContextIsDestroyed",
        "context is destroyed",
        "A call used a destroyed context.",
        CudaError,
        Hw,
    ),
    e(
        710,
        "CUDA_ERROR_ASSERT",
        "cudaErrorAssert",
        "device-side assert triggered",
        "A device-side assert fired (often an index out of range, e.g. a label >= number of classes); Xid 43 in the kernel log. Rerun with CUDA_LAUNCH_BLOCKING=1.",
        CudaError,
        Hw,
    ),
    e(
        714,
        "CUDA_ERROR_HARDWARE_STACK_ERROR",
        "cudaErrorHardwareStackError",
        "hardware stack error",
        "A kernel overflowed its call stack.",
        CudaError,
        Hw,
    ),
    e(
        715,
        "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        "cudaErrorIllegalInstruction",
        "an illegal instruction was encountered",
        "A kernel executed an illegal instruction; sticky.",
        CudaError,
        Hw,
    ),
    e(
        716,
        "CUDA_ERROR_MISALIGNED_ADDRESS",
        "cudaErrorMisalignedAddress",
        "misaligned address",
        "A kernel used a misaligned address; sticky.",
        CudaError,
        Hw,
    ),
    e(
        717,
        "CUDA_ERROR_INVALID_ADDRESS_SPACE",
        "cudaErrorInvalidAddressSpace",
        "operation not supported on global/shared address space",
        "A kernel used an address in the wrong address space.",
        CudaError,
        Hw,
    ),
    e(
        718,
        "CUDA_ERROR_INVALID_PC",
        "cudaErrorInvalidPc",
        "invalid program counter",
        "A kernel jumped to an invalid program counter.",
        CudaError,
        Hw,
    ),
    e(
        719,
        "CUDA_ERROR_LAUNCH_FAILED",
        "cudaErrorLaunchFailure",
        "unspecified launch failure",
        "A kernel faulted; all device allocations of the process are invalid. Check the kernel log for an Xid and rerun with CUDA_LAUNCH_BLOCKING=1.",
        CudaError,
        Hw,
    ),
    e(
        720,
        "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
        "cudaErrorCooperativeLaunchTooLarge",
        "too many blocks in cooperative launch",
        "A cooperative launch asked for more blocks than can be resident.",
        CudaError,
        Hw,
    ),
    e(
        800,
        "CUDA_ERROR_NOT_PERMITTED",
        "cudaErrorNotPermitted",
        "operation not permitted",
        "The operation is not permitted in this context.",
        CudaError,
        Hw,
    ),
    e(
        801,
        "CUDA_ERROR_NOT_SUPPORTED",
        "cudaErrorNotSupported",
        "operation not supported",
        "The device or driver does not support the operation.",
        CudaError,
        Hw,
    ),
    e(
        802,
        "CUDA_ERROR_SYSTEM_NOT_READY",
        "cudaErrorSystemNotReady",
        "system not yet initialized",
        "The system is not ready (e.g. Fabric Manager not running on NVSwitch systems).",
        DriverMismatch,
        Hw,
    ),
    e(
        803,
        "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        "cudaErrorSystemDriverMismatch",
        "system has unsupported display driver / cuda driver combination",
        "The kernel module and the user-space driver libraries differ in version: reboot or reinstall the driver so both match.",
        DriverMismatch,
        Hw,
    ),
    e(
        804,
        "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        "cudaErrorCompatNotSupportedOnDevice",
        "forward compatibility was attempted on non supported HW",
        "The CUDA forward-compatibility package is not supported on this GPU: upgrade the driver instead.",
        DriverMismatch,
        Hw,
    ),
    e(
        805,
        "CUDA_ERROR_MPS_CONNECTION_FAILED",
        "cudaErrorMpsConnectionFailed",
        "MPS client failed to connect to the MPS control daemon or the MPS server",
        "The MPS daemon is not reachable.",
        CudaError,
        Hw,
    ),
    e(
        999,
        "CUDA_ERROR_UNKNOWN",
        "cudaErrorUnknown",
        "unknown error",
        "An unknown error; often a driver or hardware problem: check the kernel log for Xid lines.",
        CudaError,
        Hw,
    ),
    e(
        9,
        "",
        "cudaErrorInvalidConfiguration",
        "invalid configuration argument",
        "A kernel launch configuration is invalid (grid or block size).",
        CudaError,
        Hw,
    ),
    e(
        17,
        "",
        "cudaErrorInvalidDevicePointer",
        "invalid device pointer",
        "A pointer that is not a device allocation was passed (often a double free).",
        CudaError,
        Hw,
    ),
    e(
        53,
        "",
        "cudaErrorPriorLaunchFailure",
        "unspecified launch failure in prior launch",
        "An earlier kernel failed.",
        CudaError,
        Hw,
    ),
    e(
        98,
        "",
        "cudaErrorInvalidDeviceFunction",
        "invalid device function",
        "The kernel was not built for this GPU.",
        DriverMismatch,
        Hw,
    ),
    e(
        127,
        "",
        "cudaErrorStartupFailure",
        "startup failure in cuda runtime",
        "The CUDA runtime failed to start.",
        DriverMismatch,
        Hw,
    ),
];

/// Looks an error up by its driver name, runtime name, or message text (case-sensitive names,
/// case-insensitive message).
pub fn lookup(name_or_message: &str) -> Option<&'static CudaErrorInfo> {
    let key = name_or_message.trim();
    CUDA_ERRORS.iter().find(|info| {
        (!info.driver_name.is_empty() && info.driver_name == key)
            || (!info.runtime_name.is_empty() && info.runtime_name == key)
            || info.message.eq_ignore_ascii_case(key)
    })
}

/// Looks an error up by its number.
pub fn by_code(code: u32) -> Option<&'static CudaErrorInfo> {
    CUDA_ERRORS.iter().find(|info| info.code == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_each_spelling_of_the_same_error() {
        let by_driver = lookup("CUDA_ERROR_ILLEGAL_ADDRESS").map(|i| i.code);
        let by_runtime = lookup("cudaErrorIllegalAddress").map(|i| i.code);
        let by_message = lookup("an illegal memory access was encountered").map(|i| i.code);
        assert_eq!(
            (by_driver, by_runtime, by_message),
            (Some(700), Some(700), Some(700))
        );
        assert_eq!(
            lookup("out of memory").map(|i| i.category),
            Some(Category::Capacity)
        );
        assert_eq!(by_code(214).map(|i| i.category), Some(Category::Ecc));
        assert!(lookup("CUDA_ERROR_NOT_A_REAL_ONE").is_none());
    }

    #[test]
    fn codes_and_names_are_unique() {
        for (i, a) in CUDA_ERRORS.iter().enumerate() {
            for b in &CUDA_ERRORS[i + 1..] {
                assert_ne!(a.code, b.code, "duplicate code");
                assert_ne!(a.runtime_name, b.runtime_name, "duplicate runtime name");
            }
        }
    }
}
