//! Health thresholds, following DCGM's health watches where NVIDIA publishes limits
//! (`modules/health/DcgmHealthWatch.cpp` and `common/DcgmGPUHardwareLimits.h` in NVIDIA/DCGM) and
//! our own conservative choices where it publishes none.

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

/// Our choice: occupied memory (used + driver-reserved) at or above this share of the GPU is
/// "near full": the next allocation spike, a bigger batch or a second job fails with out of
/// memory. PyTorch's caching allocator keeps what it reserved, so a busy training job sits at
/// 80–90 %; 95 % leaves under 8 GiB of an H200.
pub const NEAR_FULL_FRACTION: f64 = 0.95;

/// NVML clock-event (throttle) reason bits (`nvmlClocksEventReason*`, nvml.h). The one table of
/// these bits: `vramscope info` prints their ids, findings their labels.
pub mod throttle {
    /// The GPU has nothing to do.
    pub const GPU_IDLE: u64 = 0x1;
    /// Application clocks were set lower than the maximum.
    pub const APPLICATIONS_CLOCKS_SETTING: u64 = 0x2;
    /// The software power cap holds clocks down.
    pub const SW_POWER_CAP: u64 = 0x4;
    /// Hardware slowdown (temperature, power brake or power supply).
    pub const HW_SLOWDOWN: u64 = 0x8;
    /// Clocks follow another GPU of a sync-boost group.
    pub const SYNC_BOOST: u64 = 0x10;
    /// The driver lowers clocks because the GPU is too hot.
    pub const SW_THERMAL_SLOWDOWN: u64 = 0x20;
    /// The hardware lowers clocks because the GPU is too hot.
    pub const HW_THERMAL_SLOWDOWN: u64 = 0x40;
    /// An external power brake (the power supply) lowers clocks.
    pub const HW_POWER_BRAKE_SLOWDOWN: u64 = 0x80;
    /// Clocks follow the display clock setting.
    pub const DISPLAY_CLOCK_SETTING: u64 = 0x100;
    /// Reasons that mean the GPU is too hot or its power delivery is failing.
    pub const THERMAL_OR_HARDWARE: u64 =
        HW_SLOWDOWN | SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN | HW_POWER_BRAKE_SLOWDOWN;

    /// Each bit in bit order with its id (as in machine-readable output) and its label (for
    /// evidence text).
    const REASONS: [(u64, &str, &str); 9] = [
        (GPU_IDLE, "gpu_idle", "idle"),
        (
            APPLICATIONS_CLOCKS_SETTING,
            "applications_clocks_setting",
            "application clocks",
        ),
        (SW_POWER_CAP, "sw_power_cap", "software power cap"),
        (HW_SLOWDOWN, "hw_slowdown", "hardware slowdown"),
        (SYNC_BOOST, "sync_boost", "sync boost"),
        (
            SW_THERMAL_SLOWDOWN,
            "sw_thermal_slowdown",
            "software thermal slowdown",
        ),
        (
            HW_THERMAL_SLOWDOWN,
            "hw_thermal_slowdown",
            "hardware thermal slowdown",
        ),
        (
            HW_POWER_BRAKE_SLOWDOWN,
            "hw_power_brake_slowdown",
            "hardware power brake",
        ),
        (
            DISPLAY_CLOCK_SETTING,
            "display_clock_setting",
            "display clock setting",
        ),
    ];

    /// Labels of the set bits, for evidence text.
    pub fn names(bits: u64) -> Vec<&'static str> {
        REASONS
            .iter()
            .filter(|(bit, _, _)| bits & bit != 0)
            .map(|(_, _, label)| *label)
            .collect()
    }

    /// Ids of the set bits in bit order (`sw_power_cap`), for machine-readable output.
    pub fn ids(bits: u64) -> Vec<&'static str> {
        REASONS
            .iter()
            .filter(|(bit, _, _)| bits & bit != 0)
            .map(|(_, id, _)| *id)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::throttle;

    #[test]
    fn throttle_labels_and_ids_name_the_same_bits() {
        let bits = throttle::SW_POWER_CAP | throttle::HW_POWER_BRAKE_SLOWDOWN;
        assert_eq!(
            throttle::names(bits),
            ["software power cap", "hardware power brake"]
        );
        assert_eq!(
            throttle::ids(bits),
            ["sw_power_cap", "hw_power_brake_slowdown"]
        );
        let every_bit = 0x1ff;
        assert_eq!(throttle::names(every_bit).len(), 9);
        assert_eq!(throttle::ids(every_bit).len(), 9);
        assert!(
            throttle::names(0x200).is_empty(),
            "unknown bits have no label"
        );
    }
}
