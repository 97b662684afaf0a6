//! Text for times and durations as the UI shows them.
//!
//! Timelines use seconds since the start of the capture on the x axis (short labels that read the
//! same for a live run and a reopened file); tooltips add the absolute UTC time so that a moment can
//! be matched against logs. No date/time crate is needed for this: the civil-date conversion below
//! is Howard Hinnant's `civil_from_days`.

use vramscope_core::model::UnixMs;

/// `h:mm:ss` (or `m:ss` under an hour) for a non-negative elapsed time in seconds; negative values
/// get a leading minus. Sub-second parts are dropped.
pub fn format_elapsed_secs(secs: f64) -> String {
    if !secs.is_finite() {
        return "–".to_owned();
    }
    let sign = if secs < 0.0 { "-" } else { "" };
    let total = secs.abs().floor() as u64;
    let (hours, minutes, seconds) = (total / 3600, (total / 60) % 60, total % 60);
    if hours > 0 {
        format!("{sign}{hours}:{minutes:02}:{seconds:02}")
    } else {
        format!("{sign}{minutes}:{seconds:02}")
    }
}

/// `YYYY-MM-DD HH:MM:SS.mmm UTC` for a Unix time in milliseconds.
pub fn format_utc_ms(t_ms: UnixMs) -> String {
    let days = t_ms.div_euclid(86_400_000);
    let ms_of_day = t_ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let (hours, minutes) = (ms_of_day / 3_600_000, (ms_of_day / 60_000) % 60);
    let (seconds, millis) = ((ms_of_day / 1000) % 60, ms_of_day % 1000);
    format!("{year:04}-{month:02}-{day:02} {hours:02}:{minutes:02}:{seconds:02}.{millis:03} UTC")
}

/// (year, month 1–12, day 1–31) of a count of days since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elapsed_times() {
        assert_eq!(format_elapsed_secs(0.0), "0:00");
        assert_eq!(format_elapsed_secs(59.9), "0:59");
        assert_eq!(format_elapsed_secs(61.0), "1:01");
        assert_eq!(format_elapsed_secs(3600.0 * 25.0 + 62.0), "25:01:02");
        assert_eq!(format_elapsed_secs(-90.0), "-1:30");
        assert_eq!(format_elapsed_secs(f64::NAN), "–");
    }

    #[test]
    fn utc_dates() {
        assert_eq!(format_utc_ms(0), "1970-01-01 00:00:00.000 UTC");
        // 2026-11-30 08:20:01.250 UTC
        assert_eq!(
            format_utc_ms(1_796_026_801_250),
            "2026-11-30 08:20:01.250 UTC"
        );
        // Leap day and a time before 1970.
        assert_eq!(
            format_utc_ms(951_782_400_000),
            "2000-02-29 00:00:00.000 UTC"
        );
        assert_eq!(format_utc_ms(-1), "1969-12-31 23:59:59.999 UTC");
    }
}
