//! The "What if…" side tab of the Allocator view: replays the shown device's trace under other
//! `PYTORCH_CUDA_ALLOC_CONF` settings and a cap ([`crate::analysis::replay`]) in the background,
//! with progress and Cancel, and shows the predicted peak and outcome of each setting next to
//! the recorded run's. Everything it says comes from the replay's report
//! ([`crate::report::whatif`] words it, as the CLI does).

use std::sync::Arc;

use egui::{RichText, Ui};

use crate::analysis::replay::{AllocConf, WhatIfReport, WhatIfRequest, what_if_snapshot};
use crate::diagnose::size::parse_size;
use crate::model::allocator::AllocatorSnapshot;
use crate::model::format_bytes;
use crate::report::whatif::{outcome_words, self_check_line};
use crate::ui::runner::{Job, Poll, Runner, job_progress_ui};

/// What the tab is doing.
enum Replay {
    Idle,
    Running(Job<Result<WhatIfReport, String>>),
    Done(Box<WhatIfReport>),
    Failed(String),
}

/// The tab's state for one device: the settings typed, the cap, and the last replay.
pub struct WhatIfPanel {
    /// One setting per line in PyTorch's syntax; empty lines are skipped, no setting at all runs
    /// the sweep of candidates.
    settings_text: String,
    /// Per-process cap (`4GiB`, `512MiB`, bytes); empty for none (or the one the trace shows).
    cap_text: String,
    replay: Replay,
}

impl Default for WhatIfPanel {
    fn default() -> Self {
        WhatIfPanel {
            settings_text: String::new(),
            cap_text: String::new(),
            replay: Replay::Idle,
        }
    }
}

/// The request the typed settings and cap make, or what is wrong with them (naming the line).
fn request_from(settings_text: &str, cap_text: &str, device: u32) -> Result<WhatIfRequest, String> {
    let mut candidates = Vec::new();
    for line in settings_text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
    {
        candidates.push(AllocConf::parse(line).map_err(|e| format!("'{line}': {e}"))?);
    }
    let cap_text = cap_text.trim();
    let cap_bytes = if cap_text.is_empty() {
        None
    } else {
        Some(parse_size(cap_text).ok_or_else(|| {
            format!("cap '{cap_text}' is not a size: write e.g. 4GiB, 512MiB or bytes")
        })?)
    };
    Ok(WhatIfRequest {
        device,
        candidates,
        cap_bytes,
        device_memory_bytes: None,
    })
}

impl WhatIfPanel {
    /// Draws the tab for `device` of `snapshot`. Returns an event to show in the block map when
    /// the user asks to see where a setting runs out.
    pub fn ui(
        &mut self,
        ui: &mut Ui,
        snapshot: &Arc<AllocatorSnapshot>,
        device: u32,
    ) -> Option<usize> {
        self.poll();
        ui.label(
            "Replays this trace through a model of PyTorch's caching allocator under other \
             settings. One setting per line, PyTorch's syntax (e.g. expandable_segments:True); \
             none: a sweep of candidates.",
        );
        let running = matches!(self.replay, Replay::Running(_));
        ui.add_enabled(
            !running,
            egui::TextEdit::multiline(&mut self.settings_text)
                .hint_text("expandable_segments:True\nmax_split_size_mb:128")
                .desired_rows(3)
                .desired_width(f32::INFINITY),
        );
        ui.horizontal(|ui| {
            ui.label("Cap:");
            ui.add_enabled(
                !running,
                egui::TextEdit::singleline(&mut self.cap_text)
                    .hint_text("none (e.g. 4GiB)")
                    .desired_width(100.0),
            );
            let replay = ui
                .add_enabled(!running, egui::Button::new("Replay"))
                .on_hover_text("Replay the trace under these settings (Ctrl+Enter)");
            let shortcut = ui.input(|i| i.key_pressed(egui::Key::Enter) && i.modifiers.command);
            if (replay.clicked() || shortcut) && !running {
                self.start(ui, snapshot, device);
            }
        });
        let mut show_event = None;
        match &mut self.replay {
            Replay::Idle => {}
            Replay::Running(job) => {
                job_progress_ui(ui, "Replaying…", job.progress());
            }
            Replay::Failed(message) => {
                ui.label(RichText::new(message.as_str()).color(ui.visuals().error_fg_color));
            }
            Replay::Done(report) => show_event = report_ui(ui, report),
        }
        show_event
    }

    fn start(&mut self, ui: &Ui, snapshot: &Arc<AllocatorSnapshot>, device: u32) {
        let request = match request_from(&self.settings_text, &self.cap_text, device) {
            Ok(request) => request,
            Err(message) => {
                self.replay = Replay::Failed(message);
                return;
            }
        };
        let runner = Runner::new(ui.ctx().clone());
        let snapshot = Arc::clone(snapshot);
        let job = runner.spawn("what-if replay", move |progress| {
            what_if_snapshot(snapshot, &request, &|fraction| {
                progress.set_fraction(fraction)
            })
            .map_err(|e| e.to_string())
        });
        self.replay = Replay::Running(job);
    }

    fn poll(&mut self) {
        let Replay::Running(job) = &mut self.replay else {
            return;
        };
        self.replay = match job.poll() {
            Poll::Running => return,
            Poll::Done(Ok(report)) => Replay::Done(Box::new(report)),
            Poll::Done(Err(message)) => Replay::Failed(message),
            Poll::Lost(message) => Replay::Failed(message),
        };
    }
}

/// The self-check, then one row per setting: the recorded run first, then the replays.
fn report_ui(ui: &mut Ui, report: &WhatIfReport) -> Option<usize> {
    let check = self_check_line(&report.self_check);
    let colour = if report.self_check.reliable {
        ui.visuals().text_color()
    } else {
        ui.visuals().warn_fg_color
    };
    ui.label(RichText::new(check).color(colour));
    let mut show_event = None;
    egui::ScrollArea::vertical().show(ui, |ui| {
        egui::Grid::new("whatif_results")
            .striped(true)
            .num_columns(4)
            .show(ui, |ui| {
                ui.strong("setting");
                ui.strong("peak reserved");
                ui.strong("outcome");
                ui.label("");
                ui.end_row();
                for outcome in std::iter::once(&report.recorded).chain(&report.results) {
                    let name = if outcome.recorded {
                        format!("{} (recorded)", outcome.conf)
                    } else {
                        outcome.conf.clone()
                    };
                    ui.label(name);
                    ui.label(format_bytes(outcome.peak_reserved_bytes));
                    ui.label(outcome_words(outcome, report));
                    let event = outcome
                        .oom
                        .map(|o| o.event_index)
                        .unwrap_or(outcome.peak_event);
                    let what = if outcome.oom.is_some() {
                        "Show failure"
                    } else {
                        "Show peak"
                    };
                    if ui
                        .small_button(what)
                        .on_hover_text("Move the block map to this event of the recorded run")
                        .clicked()
                    {
                        show_event = Some(event);
                    }
                    ui.end_row();
                }
            });
        for note in &report.notes {
            ui.label(RichText::new(note).small());
        }
    });
    show_event
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_settings_and_cap_become_a_request() {
        let request = request_from(
            "expandable_segments:True\n\n max_split_size_mb:128 ",
            "4GiB",
            1,
        )
        .expect("valid");
        assert_eq!(request.device, 1);
        assert_eq!(request.candidates.len(), 2);
        assert_eq!(request.candidates[1].text, "max_split_size_mb:128");
        assert_eq!(request.cap_bytes, Some(4 << 30));
        let sweep = request_from("", "", 0).expect("valid");
        assert!(sweep.candidates.is_empty());
        assert_eq!(sweep.cap_bytes, None);
    }

    #[test]
    fn a_bad_setting_or_cap_is_named() {
        let error = request_from("expandable_segment:True", "", 0).expect_err("unknown key");
        assert!(error.contains("expandable_segment:True"), "{error}");
        let error = request_from("", "lots", 0).expect_err("bad cap");
        assert!(error.contains("lots"), "{error}");
    }
}
