//! The device list: every GPU with its memory bar, temperature, power and health badges that
//! explain themselves on hover, plus the state of every field that could not be read.

use egui::{Color32, RichText, Ui};

use vramscope_core::diagnose::finding::Severity;
use vramscope_core::diagnose::hardware::device_health;
use vramscope_core::model::{
    Capture, DeviceFacts, EventKind, FieldState, HealthSample, format_bytes,
};

use super::timeline::USED_COLOR;

/// How a health badge looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadgeState {
    /// Read and fine.
    Good,
    /// Read and worth a look.
    Warn,
    /// Read and bad.
    Bad,
    /// Not readable on this device (not supported or failed); the hover text says which.
    Unknown,
}

/// A health badge: short text, state and an explanation for the hover text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Badge {
    pub label: String,
    pub state: BadgeState,
    pub explanation: String,
}

impl BadgeState {
    /// How a badge shows the diagnosis's verdict on its area: critical is red, a warning amber,
    /// nothing found (or information only) green.
    fn judged(severity: Option<Severity>) -> Self {
        match severity {
            Some(Severity::Critical) => BadgeState::Bad,
            Some(Severity::Warning) => BadgeState::Warn,
            Some(Severity::Info) | None => BadgeState::Good,
        }
    }
}

/// The newest slow-tier health reading of a device.
fn latest_health(capture: &Capture, device_index: u32) -> Option<&HealthSample> {
    capture
        .health
        .iter()
        .rev()
        .find(|h| h.device_index == device_index)
}

/// What a field's state says, for hover texts: "" when it was read fine.
fn field_note(capture: &Capture, device_index: u32, field: &str) -> Option<String> {
    capture
        .field_status
        .iter()
        .find(|f| f.device_index == device_index && f.field == field)
        .and_then(|f| match &f.state {
            FieldState::Ok => None,
            FieldState::NotSupported => Some(format!("{field}: not supported on this GPU")),
            FieldState::Failed(why) => Some(format!("{field}: failed: {why}")),
        })
}

/// The ECC, row-remapping and Xid badges of one device. Their colours are the diagnosis's verdict
/// ([`device_health`]); only what could not be read is decided here (grey).
pub fn health_badges(capture: &Capture, device: &DeviceFacts) -> Vec<Badge> {
    let index = device.index;
    let judged = device_health(capture, index);
    let health = latest_health(capture, index);
    let latest = capture.series(index).and_then(|s| s.latest());

    // ECC: volatile counters every tick, aggregate ones in the slow tier.
    let corrected = latest.and_then(|s| s.ecc_corrected_volatile);
    let uncorrected = latest.and_then(|s| s.ecc_uncorrected_volatile);
    let aggregate_uncorrected = health.and_then(|h| h.ecc_uncorrected_aggregate);
    let ecc = match (device.ecc_enabled, corrected, uncorrected) {
        (Some(false), _, _) => Badge {
            label: "ECC off".to_owned(),
            state: BadgeState::Unknown,
            explanation:
                "ECC is disabled on this GPU: memory errors are neither corrected nor counted."
                    .to_owned(),
        },
        (_, None, None) => Badge {
            label: "ECC ?".to_owned(),
            state: BadgeState::Unknown,
            explanation: format!(
                "ECC error counters could not be read. {}",
                field_note(capture, index, "ecc").unwrap_or_else(|| "No reading yet.".to_owned())
            ),
        },
        (_, corrected, uncorrected) => {
            let (c, u) = (corrected.unwrap_or(0), uncorrected.unwrap_or(0));
            Badge {
                label: format!("ECC {c}/{u}"),
                state: BadgeState::judged(judged.ecc),
                explanation: format!(
                    "ECC errors since the driver loaded: {c} corrected (single-bit, fixed by the \
                     hardware), {u} uncorrected (double-bit: data was lost and the job that owned it \
                     is usually killed).{}",
                    aggregate_uncorrected
                        .map(|a| format!(" Over the GPU's lifetime: {a} uncorrected."))
                        .unwrap_or_default()
                ),
            }
        }
    };

    // Row remapping (Ampere and newer).
    let remap = match health.map(|h| {
        (
            h.remapped_rows_correctable,
            h.remapped_rows_uncorrectable,
            h.remapped_rows_pending,
            h.remapped_rows_failure,
        )
    }) {
        Some((Some(correctable), Some(uncorrectable), pending, failure)) => {
            let pending = pending.unwrap_or(false);
            let failure = failure.unwrap_or(false);
            Badge {
                label: format!("remap {}", correctable + uncorrectable),
                state: BadgeState::judged(judged.row_remap),
                explanation: format!(
                    "Memory rows the GPU replaced with spares: {correctable} after correctable errors, \
                     {uncorrectable} after uncorrectable ones. {}{}",
                    if pending {
                        "A remap is pending: reset the GPU (or reboot) to apply it. "
                    } else {
                        ""
                    },
                    if failure {
                        "Remapping FAILED: the GPU ran out of spare rows and should be replaced."
                    } else {
                        "A few remapped rows are normal; a growing count means failing memory."
                    }
                ),
            }
        }
        _ => Badge {
            label: "remap ?".to_owned(),
            state: BadgeState::Unknown,
            explanation: format!(
                "Row-remapping counters could not be read. {}",
                field_note(capture, index, "remapped_rows")
                    .unwrap_or_else(|| "No slow-tier reading yet.".to_owned())
            ),
        },
    };

    // Xid errors seen for this device.
    let xids: Vec<u64> = capture
        .events
        .iter()
        .filter(|e| e.device_index == Some(index))
        .filter_map(|e| match e.kind {
            EventKind::Xid { code, .. } => Some(code),
            _ => None,
        })
        .collect();
    let xid = if xids.is_empty() {
        Badge {
            label: "Xid 0".to_owned(),
            state: BadgeState::judged(judged.xid),
            explanation: if judged.xid.is_some() {
                "No Xid errors reported by the driver, but the GPU stopped answering during the \
                 capture (see the markers on the timeline)."
            } else {
                "No Xid errors reported by the driver for this GPU."
            }
            .to_owned(),
        }
    } else {
        let mut codes = xids.clone();
        codes.sort_unstable();
        codes.dedup();
        // Each code as the diagnosis's Xid table names it.
        let described: Vec<String> = codes
            .iter()
            .map(|&code| vramscope_core::diagnose::xid::describe(code))
            .collect();
        Badge {
            label: format!("Xid ×{}", xids.len()),
            state: BadgeState::judged(judged.xid),
            explanation: format!(
                "The driver reported {} Xid error(s) for this GPU:\n{}\nSee the markers on the \
                 timeline and the Hardware and driver wizard.",
                xids.len(),
                described.join("\n")
            ),
        }
    };
    vec![ecc, remap, xid]
}

fn badge_ui(ui: &mut Ui, badge: &Badge) {
    let color = match badge.state {
        BadgeState::Good => Color32::from_rgb(0x4a, 0xb0, 0x5a),
        BadgeState::Warn => Color32::from_rgb(0xd0, 0x98, 0x20),
        BadgeState::Bad => Color32::from_rgb(0xe0, 0x4a, 0x4a),
        BadgeState::Unknown => Color32::from_gray(140),
    };
    egui::Frame::new()
        .stroke(egui::Stroke::new(1.0, color))
        .corner_radius(3.0)
        .inner_margin(egui::Margin::symmetric(4, 1))
        .show(ui, |ui| {
            ui.label(RichText::new(&badge.label).color(color).small())
        })
        .response
        .on_hover_text(&badge.explanation);
}

/// Draws every device of the capture.
pub fn device_list_ui(ui: &mut Ui, capture: &Capture) {
    if capture.devices.is_empty() {
        ui.label("No GPUs in this capture.");
        return;
    }
    for device in &capture.devices {
        ui.push_id(device.index, |ui| device_ui(ui, capture, device));
        ui.separator();
    }
}

fn device_ui(ui: &mut Ui, capture: &Capture, device: &DeviceFacts) {
    let latest = capture.series(device.index).and_then(|s| s.latest());
    ui.label(RichText::new(format!("{} · {}", device.label(), device.name)).strong())
        .on_hover_text(format!("UUID {}\nPCI {}", device.uuid, device.pci_bus_id));
    if let Some(lost) = capture.lost_event(device.index) {
        let detail = match &lost.kind {
            EventKind::DeviceLost { detail } => detail.as_str(),
            _ => "",
        };
        ui.label(
            RichText::new(format!(
                "LOST at {}: not answering; the values below are its last",
                super::format::format_utc_ms(lost.t_ms)
            ))
            .color(Color32::from_rgb(0xe0, 0x4a, 0x4a))
            .strong(),
        )
        .on_hover_text(format!(
            "NVML: {detail}. The GPU is asked again every few seconds; sampling resumes when it \
             answers."
        ));
    }
    match latest.and_then(|s| s.memory) {
        Some(memory) => {
            let fraction = memory.occupied_fraction() as f32;
            let details = format!(
                "used {} + reserved by the driver {} of total {}; free {}",
                format_bytes(memory.used_bytes),
                format_bytes(memory.reserved_bytes),
                format_bytes(memory.total_bytes),
                format_bytes(memory.free_bytes)
            );
            ui.label(format!(
                "{} of {} in use ({:.0}%)",
                format_bytes(memory.occupied_bytes()),
                format_bytes(memory.total_bytes),
                fraction * 100.0
            ))
            .on_hover_text(&details);
            ui.add(
                egui::ProgressBar::new(fraction)
                    .fill(USED_COLOR.gamma_multiply(0.8))
                    .desired_height(8.0),
            )
            .on_hover_text(details);
        }
        None => {
            ui.label(
                field_note(capture, device.index, "memory")
                    .unwrap_or_else(|| "memory: no reading yet".to_owned()),
            );
        }
    }
    ui.horizontal(|ui| {
        let temperature = latest
            .and_then(|s| s.temperature_c)
            .map(|t| format!("{t} °C"))
            .unwrap_or_else(|| "– °C".to_owned());
        let temperature_hover = field_note(capture, device.index, "temperature")
            .unwrap_or_else(|| "GPU core temperature".to_owned());
        ui.label(temperature).on_hover_text(temperature_hover);
        let power = latest
            .and_then(|s| s.power_mw)
            .map(|mw| format!("{:.0} W", f64::from(mw) / 1000.0))
            .unwrap_or_else(|| "– W".to_owned());
        let power_hover = field_note(capture, device.index, "power")
            .unwrap_or_else(|| "Board power draw".to_owned());
        ui.label(power).on_hover_text(power_hover);
        if let Some(util) = latest.and_then(|s| s.gpu_util_pct) {
            ui.label(format!("{util}% busy"))
                .on_hover_text("Share of time a kernel was running (NVML utilization)");
        }
    });
    ui.horizontal(|ui| {
        for badge in health_badges(capture, device) {
            badge_ui(ui, &badge);
        }
    });
    let problems: Vec<String> = capture
        .field_status
        .iter()
        .filter(|f| f.device_index == device.index && f.state != FieldState::Ok)
        .map(|f| match &f.state {
            FieldState::NotSupported => format!("{}: not supported", f.field),
            FieldState::Failed(why) => format!("{}: failed: {why}", f.field),
            FieldState::Ok => String::new(),
        })
        .collect();
    if !problems.is_empty() {
        ui.collapsing(format!("{} field(s) not read", problems.len()), |ui| {
            for problem in problems {
                ui.label(RichText::new(problem).small());
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_core::diagnose::finding::Category;
    use vramscope_core::model::{CaptureMeta, DeviceSample, Event, FieldStatus, SampleBatch};

    fn capture_with(batch: SampleBatch) -> (Capture, DeviceFacts) {
        let device = DeviceFacts {
            index: 0,
            ecc_enabled: Some(true),
            ..Default::default()
        };
        let mut capture = Capture::new(CaptureMeta::default(), vec![device.clone()]);
        capture.ingest(&batch);
        (capture, device)
    }

    #[test]
    fn badges_report_errors_and_unknown_fields() {
        let (capture, device) = capture_with(SampleBatch {
            devices: vec![DeviceSample {
                ecc_corrected_volatile: Some(3),
                ecc_uncorrected_volatile: Some(0),
                ..Default::default()
            }],
            events: vec![Event {
                t_ms: 0,
                device_index: Some(0),
                kind: EventKind::Xid {
                    code: 31,
                    mig_instance: None,
                },
            }],
            field_changes: vec![FieldStatus {
                device_index: 0,
                field: "remapped_rows".to_owned(),
                state: FieldState::Failed("permission denied".to_owned()),
            }],
            ..Default::default()
        });
        let badges = health_badges(&capture, &device);
        assert_eq!(badges[0].label, "ECC 3/0");
        // A few corrected errors in one reading are no rate the diagnosis warns about.
        assert_eq!(badges[0].state, BadgeState::Good);
        assert_eq!(badges[1].state, BadgeState::Unknown);
        assert!(
            badges[1]
                .explanation
                .contains("remapped_rows: failed: permission denied")
        );
        // Xid 31 (a page fault, usually the application's) is a warning for the diagnosis.
        assert_eq!(
            (badges[2].label.as_str(), badges[2].state),
            ("Xid ×1", BadgeState::Warn)
        );
        // Named from the diagnosis's Xid table, not from text of the app's own.
        assert!(
            badges[2]
                .explanation
                .contains(&vramscope_core::diagnose::xid::describe(31)),
            "{}",
            badges[2].explanation
        );
    }

    #[test]
    fn healthy_device_has_good_badges() {
        let (mut capture, device) = capture_with(SampleBatch {
            devices: vec![DeviceSample {
                ecc_corrected_volatile: Some(0),
                ecc_uncorrected_volatile: Some(0),
                ..Default::default()
            }],
            ..Default::default()
        });
        capture.health.push(HealthSample {
            remapped_rows_correctable: Some(0),
            remapped_rows_uncorrectable: Some(0),
            remapped_rows_pending: Some(false),
            remapped_rows_failure: Some(false),
            ..Default::default()
        });
        let states: Vec<BadgeState> = health_badges(&capture, &device)
            .iter()
            .map(|b| b.state)
            .collect();
        assert_eq!(states, vec![BadgeState::Good; 3]);
    }

    /// The badges show the severity of the Hardware and driver wizard's findings for the GPU:
    /// never amber or red where the wizard finds nothing, never green where it warns.
    #[test]
    fn badges_agree_with_the_diagnosis() {
        use vramscope_core::diagnose::hardware::capture_findings;
        let (mut capture, device) = capture_with(SampleBatch {
            devices: vec![DeviceSample {
                ecc_corrected_volatile: Some(0),
                ecc_uncorrected_volatile: Some(0),
                ..Default::default()
            }],
            ..Default::default()
        });
        // Lifetime uncorrectable errors only, and a remap pending.
        capture.health.push(HealthSample {
            ecc_uncorrected_aggregate: Some(2),
            remapped_rows_correctable: Some(0),
            remapped_rows_uncorrectable: Some(1),
            remapped_rows_pending: Some(true),
            remapped_rows_failure: Some(false),
            ..Default::default()
        });
        let mut findings = Vec::new();
        capture_findings("test", &capture, &mut findings);
        let wizard_worst = |category: Category| {
            findings
                .iter()
                .filter(|f| f.category == category)
                .map(|f| f.severity)
                .min()
        };
        assert_eq!(wizard_worst(Category::Ecc), Some(Severity::Warning));
        assert_eq!(wizard_worst(Category::RowRemap), Some(Severity::Warning));
        let badges = health_badges(&capture, &device);
        assert_eq!(
            badges[0].state,
            BadgeState::judged(wizard_worst(Category::Ecc))
        );
        assert_eq!(
            badges[0].state,
            BadgeState::Warn,
            "lifetime errors: a warning"
        );
        assert_eq!(
            badges[1].state,
            BadgeState::judged(wizard_worst(Category::RowRemap))
        );
        assert_eq!(badges[2].state, BadgeState::Good);
    }
}
