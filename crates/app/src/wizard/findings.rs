//! Drawing the wizard's findings: finding cards with evidence and recommendations, the OOM
//! composition bar, the hardware check list, and the log analyzer's recognised lines.

use egui::{Color32, RichText};

use vramscope_core::diagnose::OomComposition;
use vramscope_core::diagnose::finding::{
    Category, Diagnosis, Finding, Severity, VerificationStatus, Wizard,
};
use vramscope_core::diagnose::log::LogAnalysis;
use vramscope_core::model::format_bytes;

use super::WizardKind;

fn severity_color(s: Severity) -> Color32 {
    match s {
        Severity::Critical => Color32::from_rgb(198, 40, 40),
        Severity::Warning => Color32::from_rgb(239, 143, 0),
        Severity::Info => Color32::from_rgb(46, 125, 50),
    }
}

/// All findings, those of `categories` first (all in order when empty).
pub fn findings_ui(ui: &mut egui::Ui, diagnosis: &Diagnosis, categories: &[Category]) {
    let (mine, others): (Vec<&Finding>, Vec<&Finding>) = diagnosis.findings.iter().partition(|f| {
        categories.is_empty()
            || categories.contains(&f.category)
            || matches!(f.category, Category::Healthy | Category::Inconclusive)
    });
    for (i, f) in mine.iter().enumerate() {
        finding_ui(ui, i + 1, f);
    }
    if mine.is_empty() {
        ui.label(format!(
            "Nothing of this kind in the evidence{}.",
            if others.is_empty() {
                ""
            } else {
                "; see the other findings below"
            }
        ));
    }
    if !others.is_empty() {
        ui.collapsing(format!("Other findings ({})", others.len()), |ui| {
            for (i, f) in others.iter().enumerate() {
                finding_ui(ui, mine.len() + i + 1, f);
            }
        });
    }
}

fn finding_ui(ui: &mut egui::Ui, number: usize, f: &Finding) {
    egui::Frame::group(ui.style()).show(ui, |ui| {
        ui.set_width(ui.available_width());
        ui.horizontal_wrapped(|ui| {
            ui.label(
                RichText::new(f.severity.as_str().to_uppercase())
                    .color(severity_color(f.severity))
                    .strong(),
            );
            ui.label(RichText::new(f.category.as_str()).monospace());
            ui.label(RichText::new(format!("{number}. {}", f.title)).strong());
        });
        ui.label(&f.explanation);
        if !f.evidence.is_empty() {
            egui::Grid::new(("evidence", number))
                .striped(true)
                .show(ui, |ui| {
                    for e in &f.evidence {
                        ui.label(&e.label);
                        ui.label(RichText::new(&e.display).monospace());
                        ui.label(RichText::new(e.source.describe()).weak());
                        ui.end_row();
                    }
                });
        }
        for (i, r) in f.recommendations.iter().enumerate() {
            ui.add_space(4.0);
            ui.horizontal_wrapped(|ui| {
                ui.label(RichText::new(format!("{}) {}", i + 1, r.title)).strong());
                if let Some(v) = &r.verification {
                    let (text, color) = match v.status {
                        VerificationStatus::ProvenByRun => {
                            ("proven by a real run", severity_color(Severity::Info))
                        }
                        VerificationStatus::Proven => {
                            ("proven by replay", severity_color(Severity::Info))
                        }
                        VerificationStatus::PassesFailingRequest => (
                            "passes the failing request",
                            severity_color(Severity::Warning),
                        ),
                        VerificationStatus::Unverified => ("unverified", Color32::GRAY),
                    };
                    ui.label(RichText::new(text).small().color(color))
                        .on_hover_text(&v.detail);
                }
            });
            ui.label(&r.expected_effect);
            if let Some(v) = r
                .verification
                .as_ref()
                .filter(|v| v.status == VerificationStatus::Unverified)
            {
                ui.label(RichText::new(&v.detail).weak().small());
            }
            ui.horizontal(|ui| {
                ui.label(
                    RichText::new(&r.action)
                        .monospace()
                        .background_color(ui.visuals().extreme_bg_color),
                );
                if ui
                    .small_button("Copy")
                    .on_hover_text("Copy the code")
                    .clicked()
                {
                    ui.ctx().copy_text(r.action.clone());
                }
            });
        }
    });
    ui.add_space(6.0);
}

/// The processes of the captures whose memory grows steadily (a leak finding), highlighted with
/// the diagnosis's rate and time to full: the Leak wizard's "who is leaking".
pub fn growing_processes_ui(
    ui: &mut egui::Ui,
    captures: &[vramscope_core::diagnose::NamedCapture],
) {
    use vramscope_core::diagnose::growth::duration_text;
    use vramscope_core::diagnose::leak::{leaking_processes, process_growth};
    let mut any = false;
    for c in captures {
        for (device, pid) in leaking_processes(&c.capture) {
            let Some(growth) = process_growth(&c.capture, device, pid) else {
                continue;
            };
            let name = c
                .capture
                .processes
                .iter()
                .find(|p| p.device_index == device && p.pid == pid)
                .map(|p| p.name.clone())
                .unwrap_or_default();
            if !any {
                ui.label(RichText::new("Growing processes").strong());
                any = true;
            }
            egui::Frame::group(ui.style())
                .stroke(egui::Stroke::new(2.0, severity_color(Severity::Critical)))
                .show(ui, |ui| {
                    ui.horizontal_wrapped(|ui| {
                        swatch(ui, crate::timeline::process_color(pid));
                        ui.label(
                            RichText::new(format!("PID {pid} {name} on GPU {device}"))
                                .strong()
                                .color(severity_color(Severity::Critical)),
                        );
                        ui.label(format!(
                            "grows by {}/min",
                            format_bytes(growth.bytes_per_minute().unwrap_or(0.0).max(0.0) as u64)
                        ));
                        if let Some(seconds) = growth.seconds_until_full() {
                            ui.label(format!("· GPU full in {}", duration_text(seconds)));
                        }
                        ui.label(RichText::new(format!("({})", c.name)).weak());
                    });
                });
        }
    }
    if any {
        ui.add_space(6.0);
    }
}

/// The card at the failure as one stacked bar: other processes, non-framework memory, allocated,
/// cached-but-unallocated, free; the cap and the request as marks.
pub fn composition_ui(ui: &mut egui::Ui, c: &OomComposition) {
    let Some(total) = c.total_bytes.filter(|&t| t > 0) else {
        return;
    };
    ui.label(
        RichText::new(format!(
            "GPU {} at the failure ({} in all)",
            c.device_index
                .map(|d| d.to_string())
                .unwrap_or_else(|| "?".into()),
            format_bytes(total)
        ))
        .strong(),
    );
    let parts: Vec<(&str, u64, Color32)> = [
        (
            "other processes",
            Some(c.other_processes_bytes),
            Color32::from_rgb(150, 60, 170),
        ),
        (
            "non-framework (context, libraries)",
            c.non_framework_bytes,
            Color32::from_rgb(120, 120, 120),
        ),
        (
            "allocated (live tensors)",
            c.allocated_bytes,
            Color32::from_rgb(31, 78, 160),
        ),
        (
            "reserved but unallocated",
            c.reserved_unallocated_bytes,
            Color32::from_rgb(100, 160, 230),
        ),
        ("free", c.free_bytes, Color32::from_rgb(200, 230, 200)),
    ]
    .into_iter()
    .filter_map(|(label, bytes, color)| bytes.filter(|&b| b > 0).map(|b| (label, b, color)))
    .collect();
    let (rect, _) = ui.allocate_exact_size(
        egui::vec2(ui.available_width().max(100.0), 28.0),
        egui::Sense::hover(),
    );
    let painter = ui.painter_at(rect);
    let mut x = rect.left();
    for (_, bytes, color) in &parts {
        let w = rect.width() * (*bytes as f32 / total as f32).min(1.0);
        painter.rect_filled(
            egui::Rect::from_min_size(egui::pos2(x, rect.top()), egui::vec2(w, rect.height())),
            0.0,
            *color,
        );
        x += w;
    }
    if let Some(cap) = c.cap_bytes {
        let cx = rect.left() + rect.width() * (cap as f32 / total as f32).min(1.0);
        painter.line_segment(
            [
                egui::pos2(cx, rect.top() - 3.0),
                egui::pos2(cx, rect.bottom() + 3.0),
            ],
            egui::Stroke::new(2.0, Color32::RED),
        );
    }
    ui.horizontal_wrapped(|ui| {
        for (label, bytes, color) in &parts {
            swatch(ui, *color);
            ui.label(format!("{label} {}", format_bytes(*bytes)));
        }
        if let Some(cap) = c.cap_bytes {
            swatch(ui, Color32::RED);
            ui.label(format!("cap {}", format_bytes(cap)));
        }
        if let Some(r) = c.requested_bytes {
            ui.label(format!("requested {}", format_bytes(r)));
        }
    });
    ui.add_space(8.0);
}

fn swatch(ui: &mut egui::Ui, color: Color32) {
    let (rect, _) = ui.allocate_exact_size(egui::vec2(12.0, 12.0), egui::Sense::hover());
    ui.painter().rect_filled(rect, 2.0, color);
}

/// Healthy / warning / failure per hardware check, from the findings. Without a capture or live
/// reading, device checks say "no data".
pub fn health_checks_ui(ui: &mut egui::Ui, diagnosis: &Diagnosis, have_device_data: bool) {
    let checks: [(&str, &[Category], bool); 5] = [
        ("ECC", &[Category::Ecc], true),
        ("Row remapping / retired pages", &[Category::RowRemap], true),
        ("Xid errors", &[Category::Xid], false),
        ("Thermal and power", &[Category::Thermal], true),
        ("Driver and CUDA", &[Category::DriverMismatch], false),
    ];
    ui.label(RichText::new("Checks").strong());
    egui::Grid::new("health_checks")
        .striped(true)
        .show(ui, |ui| {
            for (name, categories, needs_device) in checks {
                let worst = diagnosis
                    .findings
                    .iter()
                    .filter(|f| categories.contains(&f.category) && f.severity != Severity::Info)
                    .map(|f| f.severity)
                    .min();
                let (text, color) = match worst {
                    Some(Severity::Critical) => ("failure", severity_color(Severity::Critical)),
                    Some(Severity::Warning) => ("warning", severity_color(Severity::Warning)),
                    _ if needs_device && !have_device_data => ("no data", Color32::GRAY),
                    _ => ("healthy", severity_color(Severity::Info)),
                };
                ui.label(name);
                ui.label(RichText::new(text).color(color).strong());
                ui.end_row();
            }
        });
    ui.add_space(8.0);
}

/// The recognised lines of every log, with a button to continue in the matching wizard. Returns
/// the wizard the user chose.
pub fn recognised_lines_ui(
    ui: &mut egui::Ui,
    logs: &[LogAnalysis],
    current: WizardKind,
) -> Option<Wizard> {
    let mut chosen = None;
    for log in logs {
        ui.add_space(6.0);
        ui.label(RichText::new(format!("{}: {}", log.name, log.recognised_summary())).strong());
        // One block per line, full width: a grid squeezes the wrapped meaning into a sliver.
        for m in &log.matches {
            ui.horizontal(|ui| {
                ui.label(RichText::new(format!("line {}", m.line)).strong());
                if WizardKind::from_wizard(m.wizard) != current
                    && ui
                        .button(format!(
                            "Continue in {} (line {})",
                            m.wizard.label(),
                            m.line
                        ))
                        .clicked()
                {
                    chosen = Some(m.wizard);
                }
            });
            ui.label(&m.meaning);
            ui.label(RichText::new(&m.text).monospace().weak());
            ui.add_space(4.0);
        }
    }
    chosen
}
