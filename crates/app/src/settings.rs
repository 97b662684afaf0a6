//! User settings that persist between runs (through eframe's storage: `app.ron` in the app's
//! data directory on native, local storage on the web).

use serde::{Deserialize, Serialize};

/// Colour theme choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ThemeChoice {
    /// Follow the operating system.
    #[default]
    System,
    Dark,
    Light,
}

impl ThemeChoice {
    /// The egui preference for this choice.
    pub fn preference(self) -> egui::ThemePreference {
        match self {
            ThemeChoice::System => egui::ThemePreference::System,
            ThemeChoice::Dark => egui::ThemePreference::Dark,
            ThemeChoice::Light => egui::ThemePreference::Light,
        }
    }
}

/// Everything the user can set. Unknown or missing fields in a stored file fall back to the
/// defaults (`#[serde(default)]`), so older and newer versions read each other's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// Memory threshold drawn on every timeline, in percent of total memory.
    pub threshold_pct: f32,
    /// Fast-tier sampling interval for live sources, in milliseconds (20 ms – 60 s).
    pub sampling_interval_ms: u32,
    /// Show per-process memory stacked instead of the device's used/reserved/total lines.
    pub stacked_processes: bool,
    /// Draw the driver-reserved memory line.
    pub show_reserved: bool,
    /// Draw the total-memory line.
    pub show_total: bool,
    /// Draw Xid/OOM/ECC/annotation markers.
    pub show_events: bool,
    /// Keep the newest live samples in view.
    pub follow_live: bool,
    /// Width of the window that follow-live shows, in seconds.
    pub follow_window_secs: f64,
    /// Colour theme.
    pub theme: ThemeChoice,
    /// Live alert: memory crosses the threshold above.
    pub alert_threshold: bool,
    /// Live alert: the GPU's memory grows to full within the hour.
    pub alert_full_soon: bool,
    /// Live alert: an Xid error.
    pub alert_xid: bool,
    /// Live alert: a GPU is lost.
    pub alert_lost: bool,
    /// Live alerts also as operating-system notifications (besides the in-app notice).
    pub alert_os_notifications: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            threshold_pct: 90.0,
            sampling_interval_ms: 250,
            stacked_processes: false,
            show_reserved: true,
            show_total: true,
            show_events: true,
            follow_live: true,
            follow_window_secs: 300.0,
            theme: ThemeChoice::System,
            alert_threshold: true,
            alert_full_soon: true,
            alert_xid: true,
            alert_lost: true,
            alert_os_notifications: true,
        }
    }
}

/// Limits on the settings, shared by the settings window and [`Settings::sanitized`].
pub const SAMPLING_INTERVAL_RANGE_MS: std::ops::RangeInclusive<u32> = 20..=60_000;
/// Allowed threshold, in percent.
pub const THRESHOLD_RANGE_PCT: std::ops::RangeInclusive<f32> = 1.0..=100.0;

impl Settings {
    /// The same settings with every value inside its allowed range (a hand-edited or damaged
    /// settings file must not produce a 0 ms sampling interval).
    pub fn sanitized(mut self) -> Self {
        let defaults = Settings::default();
        self.threshold_pct = if self.threshold_pct.is_finite() {
            self.threshold_pct
                .clamp(*THRESHOLD_RANGE_PCT.start(), *THRESHOLD_RANGE_PCT.end())
        } else {
            defaults.threshold_pct
        };
        self.sampling_interval_ms = self.sampling_interval_ms.clamp(
            *SAMPLING_INTERVAL_RANGE_MS.start(),
            *SAMPLING_INTERVAL_RANGE_MS.end(),
        );
        self.follow_window_secs =
            if self.follow_window_secs.is_finite() && self.follow_window_secs > 0.0 {
                self.follow_window_secs.clamp(5.0, 7.0 * 86_400.0)
            } else {
                defaults.follow_window_secs
            };
        self
    }

    /// Threshold as a fraction in [0, 1].
    pub fn threshold_fraction(&self) -> f64 {
        f64::from(self.threshold_pct) / 100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitizing_clamps_out_of_range_values() {
        let wild = Settings {
            threshold_pct: f32::NAN,
            sampling_interval_ms: 0,
            follow_window_secs: -3.0,
            ..Default::default()
        }
        .sanitized();
        assert_eq!(wild.threshold_pct, 90.0);
        assert_eq!(wild.sampling_interval_ms, 20);
        assert_eq!(wild.follow_window_secs, 300.0);
        let high = Settings {
            threshold_pct: 500.0,
            sampling_interval_ms: 1_000_000,
            ..Default::default()
        }
        .sanitized();
        assert_eq!(
            (high.threshold_pct, high.sampling_interval_ms),
            (100.0, 60_000)
        );
    }

    #[test]
    fn missing_fields_take_defaults() {
        let parsed: Settings =
            serde_json::from_str(r#"{"threshold_pct": 80.0}"#).unwrap_or_default();
        assert_eq!(parsed.threshold_pct, 80.0);
        assert_eq!(parsed.sampling_interval_ms, 250);
        assert!(parsed.show_total);
    }
}
