//! Live alerts on the desktop: the alert conditions of [`vramscope_core::diagnose::alerts`]
//! (the same ones the Prometheus rules and `--alert-webhook` use), evaluated on every live
//! session's batches with the threshold the timeline draws, raise an in-app notice and an
//! operating-system notification: memory crossing the threshold, the GPU full within the warning
//! horizon, an Xid, a lost GPU. Each has a setting; a snooze silences them for a while.
//!
//! The OS notification goes through [`OsNotifier`] (`notify-rust` on the desktop: D-Bus on Linux
//! and the BSDs, the notification centre on macOS, toasts on Windows) on a thread of its own, so a
//! slow or missing notification service never holds up a frame; where none answers, the in-app
//! notice is all there is (said once).

use std::sync::{Arc, Mutex};

use egui::{Color32, RichText, Ui};
use vramscope_core::diagnose::Severity;
use vramscope_core::diagnose::alerts::{AlertChange, AlertName, AlertState};
use vramscope_core::model::UnixMs;

use super::settings::Settings;

/// How long "Snooze" silences alerts.
pub const SNOOZE_MS: i64 = 3_600_000;
/// Alert notices shown at most (older ones go).
const MAX_SHOWN: usize = 6;

/// Shows a notification outside the app.
pub trait OsNotifier: Send {
    /// Shows `summary` with `body`; `Err` says why it could not (no notification service).
    fn show(&mut self, summary: &str, body: &str, critical: bool) -> Result<(), String>;
}

/// The platform's notifications (`notify-rust`).
#[cfg(all(feature = "native", not(target_arch = "wasm32")))]
pub struct SystemNotifier;

#[cfg(all(feature = "native", not(target_arch = "wasm32")))]
impl OsNotifier for SystemNotifier {
    fn show(&mut self, summary: &str, body: &str, critical: bool) -> Result<(), String> {
        let mut notification = notify_rust::Notification::new();
        notification
            .appname("vramscope")
            .summary(summary)
            .body(body)
            .timeout(notify_rust::Timeout::Milliseconds(if critical {
                0
            } else {
                15_000
            }));
        #[cfg(all(unix, not(target_os = "macos")))]
        notification.urgency(if critical {
            notify_rust::Urgency::Critical
        } else {
            notify_rust::Urgency::Normal
        });
        notification
            .show()
            .map(|_| ())
            .map_err(|err| err.to_string())
    }
}

/// Which alerts the desktop raises, from the settings.
fn wanted(settings: &Settings, change: &AlertChange) -> bool {
    match change.key.name {
        AlertName::GpuMemoryHigh => settings.alert_threshold,
        // The warning horizon (an hour); the critical one is inside it and would say it twice.
        AlertName::GpuMemoryFullSoon => {
            settings.alert_full_soon && change.key.severity == Severity::Warning
        }
        AlertName::GpuXidError => settings.alert_xid,
        AlertName::GpuLost => settings.alert_lost,
        _ => false,
    }
}

/// One alert on screen.
#[derive(Clone, Debug, PartialEq)]
pub struct AlertNotice {
    pub change: AlertChange,
    /// Wall-clock time it was raised.
    pub raised_ms: UnixMs,
}

/// What the OS notifier reported, shared with its threads.
#[derive(Debug, Default)]
struct Delivery {
    /// `(reading's t_ms, wall time shown)` of each OS notification delivered.
    shown: Vec<(UnixMs, UnixMs)>,
    /// Why notifications cannot be shown, once it is known.
    unavailable: Option<String>,
}

/// The desktop's alerts: notices on screen, OS notifications, the snooze.
pub struct DesktopAlerts {
    shown: Vec<AlertNotice>,
    snoozed_until_ms: Option<UnixMs>,
    notifier: Option<Arc<Mutex<Box<dyn OsNotifier>>>>,
    delivery: Arc<Mutex<Delivery>>,
    told_unavailable: bool,
}

impl Default for DesktopAlerts {
    fn default() -> Self {
        #[cfg(all(feature = "native", not(target_arch = "wasm32")))]
        let notifier: Option<Box<dyn OsNotifier>> = Some(Box::new(SystemNotifier));
        #[cfg(not(all(feature = "native", not(target_arch = "wasm32"))))]
        let notifier: Option<Box<dyn OsNotifier>> = None;
        DesktopAlerts::with_notifier(notifier)
    }
}

impl DesktopAlerts {
    /// Alerts shown through `notifier` (`None`: in-app notices only).
    pub fn with_notifier(notifier: Option<Box<dyn OsNotifier>>) -> Self {
        DesktopAlerts {
            shown: Vec::new(),
            snoozed_until_ms: None,
            notifier: notifier.map(|n| Arc::new(Mutex::new(n))),
            delivery: Arc::default(),
            told_unavailable: false,
        }
    }

    /// The alerts on screen, oldest first.
    pub fn shown(&self) -> &[AlertNotice] {
        &self.shown
    }

    /// Until when alerts are snoozed.
    pub fn snoozed_until_ms(&self) -> Option<UnixMs> {
        self.snoozed_until_ms
    }

    /// Silences alerts until `now_ms + SNOOZE_MS`.
    pub fn snooze(&mut self, now_ms: UnixMs) {
        self.snoozed_until_ms = Some(now_ms + SNOOZE_MS);
        self.shown.clear();
    }

    /// `(reading's t_ms, wall time the OS notification was shown)` of every notification shown.
    pub fn os_notifications(&self) -> Vec<(UnixMs, UnixMs)> {
        self.delivery
            .lock()
            .map(|d| d.shown.clone())
            .unwrap_or_default()
    }

    /// Raises the alerts of `changes` that the settings want and no snooze silences; a resolved
    /// alert takes its notice away. Returns a line to tell once when OS notifications turned out
    /// to be unavailable.
    pub fn handle(
        &mut self,
        changes: &[AlertChange],
        settings: &Settings,
        now_ms: UnixMs,
    ) -> Option<String> {
        if self.snoozed_until_ms.is_some_and(|until| now_ms >= until) {
            self.snoozed_until_ms = None;
        }
        for change in changes {
            match change.state {
                AlertState::Resolved => self.shown.retain(|n| n.change.key != change.key),
                AlertState::Firing => {
                    if !wanted(settings, change) || self.snoozed_until_ms.is_some() {
                        continue;
                    }
                    self.shown.push(AlertNotice {
                        change: change.clone(),
                        raised_ms: now_ms,
                    });
                    if self.shown.len() > MAX_SHOWN {
                        self.shown.remove(0);
                    }
                    if settings.alert_os_notifications {
                        self.notify(change);
                    }
                }
            }
        }
        self.unavailable_once()
    }

    fn notify(&self, change: &AlertChange) {
        let Some(notifier) = &self.notifier else {
            return;
        };
        let notifier = Arc::clone(notifier);
        let delivery = Arc::clone(&self.delivery);
        let (summary, body, critical, t_ms) = (
            change.summary.clone(),
            change.description.clone(),
            change.key.severity == Severity::Critical,
            change.t_ms,
        );
        let spawned = std::thread::Builder::new()
            .name("vramscope-notification".to_owned())
            .spawn(move || {
                let result = notifier
                    .lock()
                    .map_err(|_| "the notifier failed before".to_owned())
                    .and_then(|mut n| n.show(&summary, &body, critical));
                if let Ok(mut delivery) = delivery.lock() {
                    match result {
                        Ok(()) => delivery.shown.push((t_ms, wall_ms())),
                        Err(why) => delivery.unavailable = Some(why),
                    }
                }
            });
        if let Err(err) = spawned {
            log::warn!("no thread for a notification: {err}");
        }
    }

    fn unavailable_once(&mut self) -> Option<String> {
        if self.told_unavailable {
            return None;
        }
        let why = self.delivery.lock().ok()?.unavailable.clone()?;
        self.told_unavailable = true;
        Some(format!(
            "System notifications are not available ({why}); GPU alerts are shown here only."
        ))
    }

    /// The alert notices, each with Dismiss, and one Snooze for all.
    pub fn ui(&mut self, ui: &mut Ui, now_ms: UnixMs) {
        let mut dismissed = None;
        let mut snooze = false;
        for (i, notice) in self.shown.iter().enumerate() {
            let color = if notice.change.key.severity == Severity::Critical {
                Color32::from_rgb(0xe0, 0x50, 0x50)
            } else {
                Color32::from_rgb(0xd0, 0x90, 0x20)
            };
            egui::Frame::new()
                .stroke(egui::Stroke::new(1.0, color))
                .corner_radius(4.0)
                .inner_margin(egui::Margin::symmetric(8, 4))
                .show(ui, |ui| {
                    ui.horizontal(|ui| {
                        if ui.small_button("Dismiss").clicked() {
                            dismissed = Some(i);
                        }
                        if ui
                            .small_button("Snooze 1 h")
                            .on_hover_text(
                                "No GPU alerts for an hour (Settings › Alerts chooses which)",
                            )
                            .clicked()
                        {
                            snooze = true;
                        }
                        ui.label(RichText::new("Alert").strong().color(color));
                        ui.add(
                            egui::Label::new(
                                RichText::new(format!(
                                    "{} — {}",
                                    notice.change.summary, notice.change.description
                                ))
                                .color(color),
                            )
                            .wrap(),
                        );
                    });
                });
        }
        if let Some(i) = dismissed {
            self.shown.remove(i);
        }
        if snooze {
            self.snooze(now_ms);
        }
    }

    /// The Alerts rows of the settings window (in its grid).
    pub fn settings_ui(&mut self, ui: &mut Ui, settings: &mut Settings, now_ms: UnixMs) {
        ui.label("Alerts");
        ui.vertical(|ui| {
            ui.checkbox(
                &mut settings.alert_threshold,
                "Memory crosses the threshold",
            );
            ui.checkbox(&mut settings.alert_full_soon, "Memory full within the hour")
                .on_hover_text("The growth of the GPU's floor (the leak rule) fills it within 1 h");
            ui.checkbox(&mut settings.alert_xid, "Xid errors");
            ui.checkbox(&mut settings.alert_lost, "A GPU is lost");
            ui.checkbox(
                &mut settings.alert_os_notifications,
                "Also as system notifications",
            );
            ui.horizontal(|ui| match self.snoozed_until_ms {
                Some(until) if until > now_ms => {
                    ui.label(format!(
                        "Snoozed for {} more min",
                        (until - now_ms) / 60_000 + 1
                    ));
                    if ui.small_button("Wake").clicked() {
                        self.snoozed_until_ms = None;
                    }
                }
                _ => {
                    if ui.small_button("Snooze 1 h").clicked() {
                        self.snooze(now_ms);
                    }
                }
            });
        });
        ui.end_row();
    }
}

/// Wall-clock Unix milliseconds.
pub fn wall_ms() -> UnixMs {
    web_time::SystemTime::now()
        .duration_since(web_time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_core::diagnose::alerts::AlertKey;

    struct Recorder(Arc<Mutex<Vec<String>>>, bool);

    impl OsNotifier for Recorder {
        fn show(&mut self, summary: &str, _body: &str, _critical: bool) -> Result<(), String> {
            if self.1 {
                return Err("no notification service".into());
            }
            self.0
                .lock()
                .map_err(|e| e.to_string())?
                .push(summary.to_owned());
            Ok(())
        }
    }

    fn change(name: AlertName, severity: Severity, state: AlertState) -> AlertChange {
        AlertChange {
            key: AlertKey {
                name,
                severity,
                device_index: 0,
                detail: None,
            },
            state,
            t_ms: 10,
            started_ms: 10,
            host: "node-a".into(),
            uuid: String::new(),
            model: String::new(),
            summary: format!("{} on node-a GPU 0", name.as_str()),
            description: String::new(),
            value: None,
        }
    }

    /// Polls `done` until it holds, for a minute at most: the notifier's thread may wait
    /// seconds for a core while the other tests render on a two-core CI machine (a 5 s bound
    /// failed there once), and a test that passes returns as soon as it holds.
    fn wait_for(mut done: impl FnMut() -> bool) {
        let started = std::time::Instant::now();
        while !done() && started.elapsed() < std::time::Duration::from_secs(60) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn settings_choose_the_alerts_and_a_snooze_silences_them() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut alerts =
            DesktopAlerts::with_notifier(Some(Box::new(Recorder(Arc::clone(&seen), false))));
        let settings = Settings {
            alert_xid: false,
            ..Settings::default()
        };
        let high = change(
            AlertName::GpuMemoryHigh,
            Severity::Warning,
            AlertState::Firing,
        );
        let critical_soon = change(
            AlertName::GpuMemoryFullSoon,
            Severity::Critical,
            AlertState::Firing,
        );
        let xid = change(
            AlertName::GpuXidError,
            Severity::Warning,
            AlertState::Firing,
        );
        assert_eq!(
            alerts.handle(&[high.clone(), critical_soon, xid], &settings, 0),
            None
        );
        assert_eq!(
            alerts.shown().len(),
            1,
            "the Xid is off, the critical horizon is inside the warning one"
        );
        wait_for(|| alerts.os_notifications().len() == 1);
        assert_eq!(
            seen.lock().map(|s| s.clone()).unwrap_or_default(),
            ["GpuMemoryHigh on node-a GPU 0"]
        );
        // Resolved: the notice goes.
        alerts.handle(
            &[change(
                AlertName::GpuMemoryHigh,
                Severity::Warning,
                AlertState::Resolved,
            )],
            &settings,
            1,
        );
        assert!(alerts.shown().is_empty());
        // Snoozed: nothing for an hour, then alerts again.
        alerts.snooze(100);
        alerts.handle(std::slice::from_ref(&high), &settings, 200);
        assert!(alerts.shown().is_empty());
        alerts.handle(&[high], &settings, 100 + SNOOZE_MS);
        assert_eq!(alerts.shown().len(), 1);
    }

    #[test]
    fn without_a_notification_service_the_notice_stays_and_says_so_once() {
        let mut alerts =
            DesktopAlerts::with_notifier(Some(Box::new(Recorder(Arc::default(), true))));
        let settings = Settings::default();
        let lost = change(AlertName::GpuLost, Severity::Critical, AlertState::Firing);
        alerts.handle(&[lost], &settings, 0);
        assert_eq!(alerts.shown().len(), 1);
        let mut told = None;
        wait_for(|| {
            told = told.take().or_else(|| alerts.handle(&[], &settings, 1));
            told.is_some()
        });
        assert!(told.is_some_and(|t| t.contains("no notification service")));
        assert_eq!(alerts.handle(&[], &settings, 2), None, "once");
    }
}
