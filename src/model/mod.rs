//! Plain data shared by every layer: devices, samples, processes, events, whole captures and
//! allocator snapshots.
//!
//! Nothing here knows about NVML, files or egui. Sources produce these values, formats read and
//! write them, analysis and the UI consume them. Units are in the field names (`_bytes`, `_ms`,
//! `_mw`, `_c`, `_pct`) so that no reader has to guess.

pub mod allocator;
pub mod capture;
pub mod device;
pub mod event;
pub mod sample;

pub use capture::{Capture, CaptureMeta, DeviceSeries, Recovery, SourceKind};
pub use device::{DeviceFacts, FieldState, FieldStatus};
pub use event::{Event, EventKind};
pub use sample::{
    DeviceSample, HealthSample, MemoryReading, ProcessKind, ProcessSample, SampleBatch,
};

/// Milliseconds since the Unix epoch (UTC). Every timestamp in the model uses this clock so that
/// captures from different machines and `nvidia-smi` logs can be lined up.
pub type UnixMs = i64;

/// One binary gibibyte, for formatting and simulated sizes.
pub const GIB: u64 = 1 << 30;
/// One binary mebibyte.
pub const MIB: u64 = 1 << 20;

/// Formats a byte count the way the UI and reports show it: binary units, three significant digits.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else if value >= 100.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else if value >= 10.0 {
        format!("{value:.1} {}", UNITS[unit])
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_bytes_in_binary_units() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(80 * GIB), "80.0 GiB");
        assert_eq!(format_bytes(143_771 * MIB), "140 GiB");
    }
}
