//! Health thresholds, following DCGM's health watches where NVIDIA publishes limits
//! (`reference/gpu-monitoring.md` §1.3) and our own conservative choices where it publishes none.

/// DCGM `DCGM_LIMIT_MAX_RETIRED_PAGES`: at or above this many retired pages the GPU fails.
pub const MAX_RETIRED_PAGES: u64 = 63;
/// DCGM's soft limit on double-bit-error retired pages.
pub const DBE_RETIRED_PAGES_SOFT_LIMIT: u64 = 15;
/// Our choice: corrected (single-bit) ECC errors per hour of capture that deserve a warning.
/// NVIDIA publishes no number; Xid 92 ("high single-bit ECC error rate") is the driver's own alarm.
pub const CORRECTED_ECC_PER_HOUR_WARNING: f64 = 100.0;
/// Our choice: GPU temperature (°C) from which a warning is given even without throttling.
/// Datacenter GPUs slow down at about 87–90 °C (`nvidia-smi -q`, "GPU Slowdown Temp").
pub const TEMPERATURE_WARNING_C: u32 = 85;
/// Share of samples with thermal or power-brake throttling from which a warning is given.
pub const THROTTLED_SAMPLE_FRACTION_WARNING: f64 = 0.05;

/// NVML clock-event (throttle) reason bits (`nvmlClocksEventReason*`).
pub mod throttle {
    pub const GPU_IDLE: u64 = 0x1;
    pub const APPLICATIONS_CLOCKS_SETTING: u64 = 0x2;
    pub const SW_POWER_CAP: u64 = 0x4;
    pub const HW_SLOWDOWN: u64 = 0x8;
    pub const SYNC_BOOST: u64 = 0x10;
    pub const SW_THERMAL_SLOWDOWN: u64 = 0x20;
    pub const HW_THERMAL_SLOWDOWN: u64 = 0x40;
    pub const HW_POWER_BRAKE_SLOWDOWN: u64 = 0x80;
    /// Reasons that mean the GPU is too hot or its power delivery is failing.
    pub const THERMAL_OR_HARDWARE: u64 =
        HW_SLOWDOWN | SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN | HW_POWER_BRAKE_SLOWDOWN;

    /// Names of the set bits, for evidence text.
    pub fn names(bits: u64) -> Vec<&'static str> {
        [
            (GPU_IDLE, "idle"),
            (APPLICATIONS_CLOCKS_SETTING, "application clocks"),
            (SW_POWER_CAP, "software power cap"),
            (HW_SLOWDOWN, "hardware slowdown"),
            (SYNC_BOOST, "sync boost"),
            (SW_THERMAL_SLOWDOWN, "software thermal slowdown"),
            (HW_THERMAL_SLOWDOWN, "hardware thermal slowdown"),
            (HW_POWER_BRAKE_SLOWDOWN, "hardware power brake"),
        ]
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, name)| *name)
        .collect()
    }
}

/// Xids that DCGM's health watches treat as failures ("devastating" plus row-remap failure);
/// used for codes the Xid table does not know.
pub const FAILURE_XIDS: &[u32] = &[48, 64, 74, 79, 95, 119, 120, 140];
