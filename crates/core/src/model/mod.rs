//! Plain data shared by every layer: devices, samples, processes, events, whole captures and
//! allocator snapshots.
//!
//! Nothing here knows about NVML, files or egui. Sources produce these values, formats read and
//! write them, analysis and the UI consume them. Units are in the field names (`_bytes`, `_ms`,
//! `_mw`, `_c`, `_pct`) so that no reader has to guess.

pub mod allocator;
pub mod capture;
pub mod checks;
pub mod device;
pub mod event;
pub mod run;
pub mod sample;
pub mod series;

pub use capture::{Capture, CaptureMeta, Recovery, SourceKind};
pub use device::{DeviceFacts, FieldState, FieldStatus, field_name};
pub use event::{Event, EventKind};
pub use sample::{
    DeviceSample, HealthSample, MemoryReading, ProcessKind, ProcessSample, SampleBatch,
};
pub use series::{DeviceSeries, SeriesIter};

/// Milliseconds since the Unix epoch (UTC). Every timestamp in the model uses this clock so that
/// captures from different machines and `nvidia-smi` logs can be lined up.
pub type UnixMs = i64;

/// Current wall-clock time in Unix milliseconds: the one clock every layer stamps readings,
/// captures and reports with (a browser has no `std::time::SystemTime`, hence `web_time`).
pub fn now_unix_ms() -> UnixMs {
    web_time::SystemTime::now()
        .duration_since(web_time::UNIX_EPOCH)
        .map(|d| d.as_millis() as UnixMs)
        .unwrap_or(0)
}

/// A [`UnixMs`] instant split into UTC calendar fields (proleptic Gregorian calendar), so that
/// every place that prints a time (reports, `inspect`, the UI) shares one date conversion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UtcDateTime {
    pub year: i64,
    /// 1–12.
    pub month: u32,
    /// 1–31.
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub millisecond: u32,
}

impl UtcDateTime {
    /// Splits Unix milliseconds into UTC fields; works for instants before 1970 too.
    pub fn from_unix_ms(t_ms: UnixMs) -> Self {
        let days = t_ms.div_euclid(86_400_000);
        let ms_of_day = t_ms.rem_euclid(86_400_000) as u32;
        // Howard Hinnant's civil-from-days.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let day_of_era = z.rem_euclid(146_097);
        let year_of_era =
            (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
        let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
        let mp = (5 * day_of_year + 2) / 153;
        let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        Self {
            year: year_of_era + era * 400 + i64::from(month <= 2),
            month,
            day,
            hour: ms_of_day / 3_600_000,
            minute: ms_of_day / 60_000 % 60,
            second: ms_of_day / 1000 % 60,
            millisecond: ms_of_day % 1000,
        }
    }

    /// The inverse of [`Self::from_unix_ms`]: Unix milliseconds of these UTC fields, for readers
    /// of files that write calendar times (nvidia-smi's `YYYY/MM/DD HH:MM:SS.mmm`). `None` when a
    /// field is out of range (month 13, day 32, hour 24, ...).
    pub fn to_unix_ms(&self) -> Option<UnixMs> {
        let valid = (1..=12).contains(&self.month)
            && (1..=31).contains(&self.day)
            && self.hour < 24
            && self.minute < 60
            && self.second < 60
            && self.millisecond < 1000;
        if !valid {
            return None;
        }
        // Howard Hinnant's days-from-civil.
        let year = self.year - i64::from(self.month <= 2);
        let era = year.div_euclid(400);
        let year_of_era = year.rem_euclid(400);
        let month = i64::from(self.month);
        let day_of_year = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5
            + i64::from(self.day)
            - 1;
        let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
        let days = era * 146_097 + day_of_era - 719_468;
        let ms_of_day = i64::from(self.hour) * 3_600_000
            + i64::from(self.minute) * 60_000
            + i64::from(self.second) * 1000
            + i64::from(self.millisecond);
        let t_ms = days.checked_mul(86_400_000)?.checked_add(ms_of_day)?;
        // A day that does not exist in its month (February 30) comes back as another date.
        (Self::from_unix_ms(t_ms) == *self).then_some(t_ms)
    }
}

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

    #[test]
    fn splits_unix_ms_into_utc_fields() {
        let utc = UtcDateTime::from_unix_ms(1_764_491_400_123);
        assert_eq!(
            (utc.year, utc.month, utc.day),
            (2025, 11, 30),
            "a known instant"
        );
        assert_eq!(
            (utc.hour, utc.minute, utc.second, utc.millisecond),
            (8, 30, 0, 123)
        );
        let leap = UtcDateTime::from_unix_ms(951_782_400_000);
        assert_eq!((leap.year, leap.month, leap.day), (2000, 2, 29));
        let before_epoch = UtcDateTime::from_unix_ms(-1);
        assert_eq!(
            (before_epoch.year, before_epoch.month, before_epoch.day),
            (1969, 12, 31)
        );
        assert_eq!(
            (before_epoch.hour, before_epoch.minute, before_epoch.second),
            (23, 59, 59)
        );
        assert_eq!(before_epoch.millisecond, 999);
    }

    #[test]
    fn utc_fields_go_back_to_unix_ms() {
        for t_ms in [0, -1, 951_782_400_000, 1_764_491_400_123, 1_796_028_208_733] {
            assert_eq!(UtcDateTime::from_unix_ms(t_ms).to_unix_ms(), Some(t_ms));
        }
        let february_30 = UtcDateTime {
            year: 2026,
            month: 2,
            day: 30,
            hour: 0,
            minute: 0,
            second: 0,
            millisecond: 0,
        };
        assert_eq!(february_30.to_unix_ms(), None);
        assert_eq!(
            UtcDateTime {
                hour: 24,
                day: 1,
                ..february_30
            }
            .to_unix_ms(),
            None
        );
    }
}
