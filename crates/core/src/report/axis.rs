//! Axis ticks for report images: memory in round binary units (0, 20, 40 … GiB) and time on
//! clock-friendly UTC steps (every 15 s, 5 min, 3 h …) with labels that say the clock time. The
//! review image of the timeline and the HTML report's charts both label their axes from here.

use crate::model::{UnixMs, UtcDateTime};

/// One labelled tick.
#[derive(Clone, Debug, PartialEq)]
pub struct Tick<T> {
    pub value: T,
    pub label: String,
}

/// Steps for a memory axis, as multiples of its unit.
const BYTE_STEPS: [f64; 16] = [
    0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0, 20.0, 25.0, 50.0, 100.0, 200.0, 250.0, 500.0,
];

/// The smallest round step (0.1, 0.2, 0.25, 0.5, 1, 2, 2.5, 5, 10, … times a power of 1000) of
/// at least `min_step` that covers `span` in at most `max_ticks` steps. The app's memory axis
/// (in GiB) uses it too, so that its labels fall where the report's do.
pub fn round_step(span: f64, max_ticks: usize, min_step: f64) -> f64 {
    let span = if span.is_finite() && span > 0.0 {
        span
    } else {
        1.0
    };
    let max_ticks = max_ticks.max(1);
    let min_step = if min_step.is_finite() { min_step } else { 0.0 };
    let mut scale = 1.0;
    // 1000^40 is far past any span an f64 axis holds.
    for _ in 0..40 {
        if let Some(step) = BYTE_STEPS
            .iter()
            .map(|s| s * scale)
            .filter(|step| *step >= min_step)
            .find(|step| (span / step).ceil() as usize <= max_ticks)
        {
            return step;
        }
        scale *= 1000.0;
    }
    span
}

/// Ticks from 0 to at least `max_bytes`, at most `max_ticks` + 1 of them, on a round step of
/// the largest binary unit below the maximum (KiB, MiB, GiB, TiB). Returns the ticks (the last
/// one is the top of the axis).
pub fn byte_ticks(max_bytes: u64, max_ticks: usize) -> Vec<Tick<u64>> {
    const UNITS: [(&str, u64); 5] = [
        ("B", 1),
        ("KiB", 1 << 10),
        ("MiB", 1 << 20),
        ("GiB", 1 << 30),
        ("TiB", 1 << 40),
    ];
    let max_bytes = max_bytes.max(1);
    let max_ticks = max_ticks.max(1);
    let (unit_name, unit_bytes) = UNITS
        .iter()
        .rev()
        .find(|(_, bytes)| max_bytes >= *bytes)
        .copied()
        .unwrap_or(UNITS[0]);
    let max_in_unit = max_bytes as f64 / unit_bytes as f64;
    // No fractions of a byte.
    let step = round_step(max_in_unit, max_ticks, 1.0 / unit_bytes as f64);
    let count = (max_in_unit / step).ceil().max(1.0) as usize;
    (0..=count)
        .map(|i| {
            // Rounded to hundredths, so that 3 × 0.1 prints as 0.3.
            let in_unit = (step * i as f64 * 100.0).round() / 100.0;
            let label = if i == 0 {
                "0".to_owned()
            } else {
                format!("{in_unit} {unit_name}")
            };
            Tick {
                value: (in_unit * unit_bytes as f64).round() as u64,
                label,
            }
        })
        .collect()
}

/// Clock-friendly time steps in milliseconds.
const TIME_STEPS_MS: [i64; 24] = [
    100,
    200,
    500,
    1_000,
    2_000,
    5_000,
    10_000,
    15_000,
    30_000,
    60_000,
    120_000,
    300_000,
    600_000,
    900_000,
    1_800_000,
    3_600_000,
    7_200_000,
    10_800_000,
    21_600_000,
    43_200_000,
    86_400_000,
    172_800_000,
    604_800_000,
    2_592_000_000,
];

/// Ticks at round UTC times inside `[t_min, t_max]`, about `max_ticks` (at most one more), labelled with
/// the clock time (`08:45`, `08:45:30`, `08:45:30.5`); a tick where the UTC date changes (and the
/// first one, when the range crosses midnight) also names the date (`12-01 00:00`).
pub fn time_ticks(t_min: UnixMs, t_max: UnixMs, max_ticks: usize) -> Vec<Tick<UnixMs>> {
    if t_max <= t_min {
        return vec![Tick {
            value: t_min,
            label: clock_label(t_min, 1_000, true),
        }];
    }
    let span = t_max - t_min;
    let max_ticks = max_ticks.max(2) as i64;
    let step = TIME_STEPS_MS
        .iter()
        .copied()
        .find(|step| span / step <= max_ticks)
        .unwrap_or(TIME_STEPS_MS[TIME_STEPS_MS.len() - 1]);
    let first = t_min.div_euclid(step) * step + if t_min % step == 0 { 0 } else { step };
    let crosses_days = t_min.div_euclid(86_400_000) != t_max.div_euclid(86_400_000);
    let mut ticks = Vec::new();
    let mut t = first;
    let mut previous_day = None;
    while t <= t_max {
        let day = t.div_euclid(86_400_000);
        let with_date = step >= 86_400_000 || (crosses_days && previous_day != Some(day));
        ticks.push(Tick {
            value: t,
            label: clock_label(t, step, with_date),
        });
        previous_day = Some(day);
        t += step;
    }
    ticks
}

/// `HH:MM`, with seconds when `step_ms` is under a minute and tenths under a second; `MM-DD`
/// before it when `with_date`, and the date alone for steps of a day or more.
fn clock_label(t_ms: UnixMs, step_ms: i64, with_date: bool) -> String {
    let utc = UtcDateTime::from_unix_ms(t_ms);
    let date = format!("{:02}-{:02}", utc.month, utc.day);
    if step_ms >= 86_400_000 {
        return date;
    }
    let clock = if step_ms < 1_000 {
        format!(
            "{:02}:{:02}:{:02}.{}",
            utc.hour,
            utc.minute,
            utc.second,
            utc.millisecond / 100
        )
    } else if step_ms < 60_000 {
        format!("{:02}:{:02}:{:02}", utc.hour, utc.minute, utc.second)
    } else {
        format!("{:02}:{:02}", utc.hour, utc.minute)
    };
    if with_date {
        format!("{date} {clock}")
    } else {
        clock
    }
}

/// A duration in words for captions: `40 s`, `15 min`, `2 h 30 min`, `3 d 4 h`.
pub fn format_duration_ms(duration_ms: i64) -> String {
    let secs = duration_ms.max(0) / 1000;
    match secs {
        0 => format!("{} ms", duration_ms.max(0)),
        1..60 => format!("{secs} s"),
        60..3600 if secs % 60 == 0 => format!("{} min", secs / 60),
        60..3600 => format!("{} min {} s", secs / 60, secs % 60),
        3600..86_400 if secs % 3600 < 60 => format!("{} h", secs / 3600),
        3600..86_400 => format!("{} h {} min", secs / 3600, secs % 3600 / 60),
        _ => format!("{} d {} h", secs / 86_400, secs % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{GIB, MIB};

    fn labels<T>(ticks: &[Tick<T>]) -> Vec<&str> {
        ticks.iter().map(|t| t.label.as_str()).collect()
    }

    #[test]
    fn memory_ticks_are_round_binary_units_covering_the_maximum() {
        // An H200: 140.4 GiB.
        let h200 = byte_ticks(143_771 * MIB, 6);
        assert_eq!(
            labels(&h200),
            [
                "0", "25 GiB", "50 GiB", "75 GiB", "100 GiB", "125 GiB", "150 GiB"
            ]
        );
        assert_eq!(h200[1].value, 25 * GIB);
        assert_eq!(
            labels(&byte_ticks(80 * GIB, 5)),
            ["0", "20 GiB", "40 GiB", "60 GiB", "80 GiB"]
        );
        assert_eq!(
            labels(&byte_ticks(612 * MIB, 5)),
            ["0", "200 MiB", "400 MiB", "600 MiB", "800 MiB"]
        );
        assert_eq!(
            labels(&byte_ticks(3 * GIB / 2, 4)),
            ["0", "0.5 GiB", "1 GiB", "1.5 GiB"]
        );
        assert_eq!(labels(&byte_ticks(0, 4)), ["0", "1 B"]);
    }

    #[test]
    fn round_steps_cover_the_span() {
        assert_eq!(round_step(140.4, 6, 0.0), 25.0);
        assert_eq!(round_step(140.4, 4, 0.0), 50.0);
        assert_eq!(round_step(1.5, 4, 0.0), 0.5);
        assert_eq!(round_step(1e9, 5, 0.0), 200_000_000.0);
        assert_eq!(round_step(0.3, 3, 1.0), 1.0, "never below the minimum");
        assert_eq!(round_step(f64::NAN, 3, 0.0), 0.5);
    }

    #[test]
    fn time_ticks_fall_on_round_utc_times() {
        // 2026-11-30 08:43:28.733 to 08:44:08.983 UTC (the H200 run's nvidia-smi log).
        let ticks = time_ticks(1_796_028_208_733, 1_796_028_248_983, 8);
        assert_eq!(
            labels(&ticks),
            [
                "08:43:30", "08:43:35", "08:43:40", "08:43:45", "08:43:50", "08:43:55", "08:44:00",
                "08:44:05"
            ]
        );
        // A day from 06:00: every 3 h, the date where the day changes.
        let start = 1_796_018_400_000; // 2026-11-30 06:00 UTC
        let day = time_ticks(start, start + 86_400_000, 9);
        assert_eq!(day[0].label, "11-30 06:00");
        assert_eq!(day[1].label, "09:00");
        assert!(labels(&day).contains(&"12-01 00:00"), "{:?}", labels(&day));
        assert_eq!(time_ticks(start, start + 900, 10)[1].label, "06:00:00.1");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration_ms(40_250), "40 s");
        assert_eq!(format_duration_ms(15 * 60_000), "15 min");
        assert_eq!(format_duration_ms(150 * 60_000), "2 h 30 min");
        assert_eq!(format_duration_ms(86_400_000 + 4 * 3_600_000), "1 d 4 h");
        assert_eq!(format_duration_ms(250), "250 ms");
    }
}
