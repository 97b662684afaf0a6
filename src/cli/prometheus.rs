//! The options every command that reads a Prometheus server shares (`pull`, `diagnose
//! --prometheus`, the GUI's `--prometheus`), and the read itself with progress on stderr.

use std::io::IsTerminal;
use std::path::PathBuf;

use vramscope_core::model::now_unix_ms;
use vramscope_core::model::{Capture, UnixMs};
use vramscope_core::source::prometheus::reader::{
    FleetReader, MAX_POINTS_PER_SERIES, ReadProgress, Selector, StepRange,
};
use vramscope_gpu::prometheus::client::{Auth, PrometheusClient};

/// Default `--since`: the last hour.
const DEFAULT_SINCE_MS: i64 = 3_600_000;
/// Default `--step`: Prometheus's default scrape interval.
const DEFAULT_STEP_MS: i64 = 15_000;
/// Without `--step`, a GPU gets at most this many samples (a coarser step for long ranges).
const AUTO_STEP_MAX_SAMPLES: i64 = 10_000;

#[derive(Debug, Clone, Default, clap::Args)]
pub struct PrometheusArgs {
    /// Read GPUs from this Prometheus server (its base URL, e.g. http://prometheus:9090): series
    /// of dcgm-exporter, nvitop-exporter or `vramscope exporter`.
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    /// Only series with these labels, as PromQL matchers, e.g. 'Hostname=~"node-.*",namespace="ml"'.
    #[arg(long = "match", value_name = "SELECTOR", requires = "prometheus")]
    pub match_selector: Option<String>,
    /// How far back to read, e.g. 30m, 24h, 7d [default: 1h].
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms, conflicts_with_all = ["start", "end"], requires = "prometheus")]
    pub since: Option<i64>,
    /// Start of the range: RFC 3339 (2026-12-01T13:00:00Z) or Unix seconds.
    #[arg(long, value_name = "TIME", value_parser = parse_time_ms, requires_all = ["end", "prometheus"])]
    pub start: Option<i64>,
    /// End of the range: RFC 3339 or Unix seconds.
    #[arg(long, value_name = "TIME", value_parser = parse_time_ms, requires_all = ["start", "prometheus"])]
    pub end: Option<i64>,
    /// One sample per GPU per step, the peak within it (max_over_time) [default: 15s, coarser
    /// for ranges over 10,000 steps].
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ms, requires = "prometheus")]
    pub step: Option<i64>,
    /// Send the token in this file as `Authorization: Bearer` (or set VRAMSCOPE_PROMETHEUS_TOKEN).
    #[arg(
        long,
        value_name = "FILE",
        requires = "prometheus",
        conflicts_with = "user"
    )]
    pub bearer_token_file: Option<PathBuf>,
    /// Basic authentication; without `:PASSWORD` the password comes from VRAMSCOPE_PROMETHEUS_PASSWORD.
    #[arg(long, value_name = "USER[:PASSWORD]", requires = "prometheus")]
    pub user: Option<String>,
    /// Trust this CA certificate (PEM) for HTTPS instead of the built-in public roots.
    #[arg(long, value_name = "FILE", requires = "prometheus")]
    pub ca_cert: Option<PathBuf>,
}

/// `90s`, `15m`, `24h`, `7d`, `1w`, `500ms`, `1h30m`; a bare number is seconds.
pub fn parse_duration_ms(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let bad = || format!("'{text}' is not a duration like 90s, 15m, 24h or 7d");
    if let Ok(secs) = text.parse::<f64>() {
        return (secs > 0.0 && secs < 1e10)
            .then(|| (secs * 1000.0).round() as i64)
            .ok_or_else(bad);
    }
    let mut total_ms: i64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let number: i64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit_ms = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total_ms = number
            .checked_mul(unit_ms)
            .and_then(|ms| total_ms.checked_add(ms))
            .ok_or_else(bad)?;
    }
    if total_ms <= 0 {
        return Err(bad());
    }
    Ok(total_ms)
}

/// RFC 3339 (`2026-12-01T13:00:00Z`, `…T13:00:00.250+02:00`) or Unix seconds, as Unix ms.
pub fn parse_time_ms(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let bad =
        || format!("'{text}' is not a time: give RFC 3339 (2026-12-01T13:00:00Z) or Unix seconds");
    if let Ok(secs) = text.parse::<f64>() {
        return secs
            .is_finite()
            .then(|| (secs * 1000.0).round() as i64)
            .ok_or_else(bad);
    }
    let number = |s: &str| s.parse::<i64>().map_err(|_| bad());
    let (date, time) = text.split_once(['T', 't', ' ']).ok_or_else(bad)?;
    let mut date_parts = date.splitn(3, '-');
    let (year, month, day) = match (date_parts.next(), date_parts.next(), date_parts.next()) {
        (Some(y), Some(m), Some(d)) => (number(y)?, number(m)?, number(d)?),
        _ => return Err(bad()),
    };
    let (clock, offset_ms) = if let Some(clock) = time.strip_suffix(['Z', 'z']) {
        (clock, 0)
    } else {
        let sign_at = time.rfind(['+', '-']).ok_or_else(bad)?;
        let (clock, offset) = time.split_at(sign_at);
        let sign = if offset.starts_with('-') { -1 } else { 1 };
        let (h, m) = offset[1..].split_once(':').ok_or_else(bad)?;
        (clock, sign * (number(h)? * 3_600_000 + number(m)? * 60_000))
    };
    let mut clock_parts = clock.splitn(3, ':');
    let (hour, minute, second) = match (clock_parts.next(), clock_parts.next(), clock_parts.next())
    {
        (Some(h), Some(m), Some(s)) => {
            (number(h)?, number(m)?, s.parse::<f64>().map_err(|_| bad())?)
        }
        _ => return Err(bad()),
    };
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || !(0.0..61.0).contains(&second)
    {
        return Err(bad());
    }
    let days = days_from_civil(year, month, day);
    Ok(
        days * 86_400_000 + hour * 3_600_000 + minute * 60_000 + (second * 1000.0).round() as i64
            - offset_ms,
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days-from-civil, the
/// inverse of `UtcDateTime::from_unix_ms`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

impl PrometheusArgs {
    /// The range to read, ending now unless `--start/--end` say otherwise.
    pub fn range(&self, now_ms: UnixMs) -> Result<StepRange, String> {
        let (start_ms, end_ms) = match (self.start, self.end) {
            (Some(start), Some(end)) => (start, end),
            _ => (now_ms - self.since.unwrap_or(DEFAULT_SINCE_MS), now_ms),
        };
        if end_ms <= start_ms {
            return Err("--end must be after --start".to_owned());
        }
        let span_ms = end_ms - start_ms;
        let step_ms = match self.step {
            Some(step) => step,
            None => {
                DEFAULT_STEP_MS.max((span_ms + AUTO_STEP_MAX_SAMPLES - 1) / AUTO_STEP_MAX_SAMPLES)
            }
        };
        // On the grid of multiples of the step, so that reads of the same server line up.
        Ok(StepRange {
            start_ms: start_ms - start_ms.rem_euclid(step_ms),
            end_ms: end_ms - end_ms.rem_euclid(step_ms),
            step_ms,
        })
    }

    /// A reader of the server with the given authentication.
    pub fn reader(&self) -> Result<FleetReader, String> {
        Ok(FleetReader::new(
            self.client()?,
            Selector::new(self.match_selector.as_deref().unwrap_or("")),
        ))
    }

    /// A client of the server with the given authentication.
    pub fn client(&self) -> Result<PrometheusClient, String> {
        let url = self
            .prometheus
            .as_deref()
            .ok_or("give the Prometheus server with --prometheus URL")?;
        let auth = if let Some(file) = &self.bearer_token_file {
            let token = std::fs::read_to_string(file)
                .map_err(|err| format!("--bearer-token-file {}: {err}", file.display()))?;
            Auth::Bearer(token.trim().to_owned())
        } else if let Some(user) = &self.user {
            let (user, password) = match user.split_once(':') {
                Some((user, password)) => (user.to_owned(), password.to_owned()),
                None => (
                    user.clone(),
                    std::env::var("VRAMSCOPE_PROMETHEUS_PASSWORD").map_err(|_| {
                        format!("--user {user}: no password; give USER:PASSWORD or set VRAMSCOPE_PROMETHEUS_PASSWORD")
                    })?,
                ),
            };
            Auth::Basic { user, password }
        } else if let Ok(token) = std::env::var("VRAMSCOPE_PROMETHEUS_TOKEN") {
            Auth::Bearer(token.trim().to_owned())
        } else {
            Auth::None
        };
        let ca_cert = match &self.ca_cert {
            Some(file) => Some(
                std::fs::read(file)
                    .map_err(|err| format!("--ca-cert {}: {err}", file.display()))?,
            ),
            None => None,
        };
        let ca_name = self
            .ca_cert
            .as_ref()
            .map(|f| f.display().to_string())
            .unwrap_or_default();
        PrometheusClient::new(
            url,
            auth,
            ca_cert.as_deref().map(|pem| (ca_name.as_str(), pem)),
        )
        .map_err(|err| err.to_string())
    }

    /// Reads the range into a capture, with a progress line on stderr; no GPU is an error.
    pub fn pull(&self) -> Result<(FleetReader, StepRange, Capture), String> {
        let range = self.range(now_unix_ms())?;
        let mut reader = self.reader()?;
        let url = self.prometheus.clone().unwrap_or_default();
        let tty = std::io::stderr().is_terminal();
        eprintln!(
            "vramscope: reading GPUs from {url}: {} steps of {} s{}",
            range.steps(),
            range.step_ms as f64 / 1000.0,
            if range.steps() > MAX_POINTS_PER_SERIES {
                " (in several requests per metric: Prometheus answers at most 11,000 points per series)"
            } else {
                ""
            }
        );
        let mut progress = |p: ReadProgress| {
            if tty {
                eprint!(
                    "\rvramscope: {} of {} requests",
                    p.requests_done, p.requests_total
                );
            }
        };
        let capture = vramscope_core::source::prometheus::pull(&mut reader, &range, &mut progress)
            .map_err(|err| err.to_string())?;
        if tty {
            eprintln!();
        }
        if capture.devices.is_empty() {
            return Err(format!(
                "{url} has no GPU series{} in that range (looked for dcgm-exporter's DCGM_FI_DEV_FB_USED, nvitop-exporter's gpu_memory_used_MiB and vramscope's vramscope_gpu_memory_used_bytes)",
                self.match_selector
                    .as_deref()
                    .map(|m| format!(" matching {m}"))
                    .unwrap_or_default()
            ));
        }
        Ok((reader, range, capture))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_read_as_prometheus_writes_them() {
        assert_eq!(parse_duration_ms("90s"), Ok(90_000));
        assert_eq!(parse_duration_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration_ms("7d"), Ok(604_800_000));
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("2.5"), Ok(2_500));
        for bad in ["", "h", "5x", "-1h", "0s", "1.5h"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn times_are_rfc_3339_or_unix_seconds() {
        assert_eq!(parse_time_ms("1764491400.123"), Ok(1_764_491_400_123));
        assert_eq!(
            parse_time_ms("2025-11-30T08:30:00.123Z"),
            Ok(1_764_491_400_123)
        );
        assert_eq!(
            parse_time_ms("2025-11-30T10:30:00+02:00"),
            Ok(1_764_491_400_000)
        );
        assert_eq!(parse_time_ms("2000-02-29T00:00:00Z"), Ok(951_782_400_000));
        for bad in [
            "yesterday",
            "2025-13-01T00:00:00Z",
            "2025-11-30",
            "2025-11-30T08:30Z",
        ] {
            assert!(parse_time_ms(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn ranges_end_on_the_step_grid_and_coarsen_for_long_spans() {
        let args = PrometheusArgs {
            prometheus: Some("http://x".into()),
            since: Some(3_600_000),
            ..Default::default()
        };
        let range = args.range(1_000_007_500);
        assert_eq!(range.as_ref().map(|r| r.step_ms), Ok(15_000));
        assert_eq!(range.as_ref().map(|r| r.end_ms % 15_000), Ok(0));
        assert_eq!(range.as_ref().map(StepRange::steps), Ok(241));
        let month = PrometheusArgs {
            since: Some(30 * 86_400_000),
            ..args.clone()
        };
        let range = month.range(1_000_000_000_000);
        assert!(
            range.as_ref().is_ok_and(|r| r.steps() <= 10_001),
            "{range:?}"
        );
        let backwards = PrometheusArgs {
            start: Some(2_000),
            end: Some(1_000),
            ..args
        };
        assert!(backwards.range(0).is_err());
    }
}
