//! Captures compared in the Timeline view (issue 33, "Compare"): the first GPU's used memory of
//! each opened capture as lines on one plot, each against the time since its own start, so that
//! two runs of one job (before and after a fix, two nodes) read as one picture whatever the clock
//! said when they ran. `vramscope compare` summarises the same captures in numbers.

use egui::{Color32, RichText, Ui};
use egui_plot::{Corner, Legend, Line, Plot, PlotPoints};

use crate::format::format_elapsed_secs;
use crate::session::Session;
use vramscope_core::model::{Capture, format_bytes};

/// Points a line keeps at most: each is the highest reading of its stretch of time, so a peak
/// is never lost, and a day of samples costs the plot what a few minutes do.
const MAX_POINTS: usize = 2000;

/// The lines' colours, in the order the captures were opened.
const COLORS: [Color32; 6] = [
    Color32::from_rgb(0x4e, 0x9c, 0xf5),
    Color32::from_rgb(0xf0, 0x90, 0x30),
    Color32::from_rgb(0x60, 0xc0, 0x70),
    Color32::from_rgb(0xe0, 0x50, 0x60),
    Color32::from_rgb(0xb0, 0x7c, 0xf0),
    Color32::from_rgb(0xd0, 0xc0, 0x40),
];

/// One capture's line, kept until the capture gets more samples.
struct CachedLine {
    /// Samples of the first GPU when the line was made (a live capture grows).
    samples: usize,
    label: String,
    /// `[seconds since the capture's start, GiB used]`.
    points: Vec<[f64; 2]>,
    duration_s: f64,
    peak_bytes: u64,
}

/// The overlay's state: whether it is shown, which captures it draws, and their lines.
#[derive(Default)]
pub struct CaptureCompare {
    /// Whether the Timeline view shows the overlay instead of the chosen capture.
    pub on: bool,
    /// Per session (by index): left out of the overlay.
    hidden: Vec<bool>,
    lines: Vec<Option<CachedLine>>,
}

impl CaptureCompare {
    /// The toggle above the timeline (shown while two or more captures are open).
    pub fn toggle_ui(&mut self, ui: &mut Ui) {
        ui.horizontal(|ui| {
            ui.toggle_value(&mut self.on, "Compare captures")
                .on_hover_text(
                    "The first GPU's used memory of each open capture on one plot, aligned at \
                 each capture's start",
                );
        });
    }

    /// The lines drawn in the last frame: `(label, points)` with points as `[seconds since the
    /// capture's start, GiB used]`.
    pub fn lines(&self) -> Vec<(&str, &[[f64; 2]])> {
        self.lines
            .iter()
            .zip(&self.hidden)
            .filter(|(_, hidden)| !**hidden)
            .filter_map(|(line, _)| line.as_ref())
            .map(|l| (l.label.as_str(), l.points.as_slice()))
            .collect()
    }

    /// Brings the lines up to date with `sessions` (a line is redone when its capture grew).
    fn update(&mut self, sessions: &[Session]) {
        self.hidden.resize(sessions.len(), false);
        self.lines.resize_with(sessions.len(), || None);
        for (session, line) in sessions.iter().zip(&mut self.lines) {
            let samples = session.capture.series.first().map_or(0, |s| s.len());
            if line.as_ref().is_none_or(|l| l.samples != samples) {
                *line = first_gpu_line(&session.label(), &session.capture);
            }
        }
    }

    /// Draws the chosen captures' lines on one plot, with a line of numbers for each.
    pub fn ui(&mut self, ui: &mut Ui, sessions: &[Session]) {
        self.update(sessions);
        ui.heading("Captures overlaid, aligned at their start");
        ui.horizontal_wrapped(|ui| {
            for (i, (session, hidden)) in sessions.iter().zip(&mut self.hidden).enumerate() {
                let mut shown = !*hidden;
                let color = COLORS[i % COLORS.len()];
                ui.checkbox(&mut shown, RichText::new(session.label()).color(color));
                *hidden = !shown;
            }
        });
        egui::Grid::new("capture_compare_numbers")
            .num_columns(3)
            .spacing(egui::vec2(16.0, 2.0))
            .show(ui, |ui| {
                for (line, _) in self.lines.iter().zip(&self.hidden).filter(|(_, h)| !**h) {
                    let Some(line) = line else {
                        continue;
                    };
                    ui.label(&line.label);
                    ui.label(format!("lasts {}", format_elapsed_secs(line.duration_s)));
                    ui.label(format!("peak {}", format_bytes(line.peak_bytes)));
                    ui.end_row();
                }
            });
        Plot::new("capture_compare_plot")
            .legend(
                Legend::default()
                    .position(Corner::LeftTop)
                    .follow_insertion_order(true),
            )
            .x_axis_label("time since each capture's start")
            .x_axis_formatter(|mark, _| format_elapsed_secs(mark.value))
            .y_axis_formatter(|mark, _| format!("{} GiB", (mark.value * 100.0).round() / 100.0))
            .include_y(0.0)
            .allow_scroll(false)
            .show(ui, |plot_ui| {
                for (i, (line, hidden)) in self.lines.iter().zip(&self.hidden).enumerate() {
                    if let (Some(line), false) = (line, *hidden) {
                        plot_ui.line(
                            Line::new(line.label.clone(), PlotPoints::from(line.points.clone()))
                                .color(COLORS[i % COLORS.len()])
                                .width(1.5),
                        );
                    }
                }
            });
    }
}

/// The used memory of `capture`'s first GPU against the time since the capture's start, at
/// most [`MAX_POINTS`] points (each the highest reading of its stretch); `None` when it has no
/// memory readings.
fn first_gpu_line(name: &str, capture: &Capture) -> Option<CachedLine> {
    let series = capture.series.first()?;
    let (start_ms, end_ms) = capture.time_span_ms()?;
    let readings: Vec<(i64, u64)> = series
        .iter()
        .filter_map(|s| s.memory.map(|m| (s.t_ms, m.used_bytes)))
        .collect();
    if readings.is_empty() {
        return None;
    }
    let stretch = readings.len().div_ceil(MAX_POINTS);
    let points = readings
        .chunks(stretch)
        .filter_map(|chunk| {
            let (t_ms, bytes) = chunk.iter().max_by_key(|(_, b)| *b)?;
            Some([
                (t_ms - start_ms) as f64 / 1000.0,
                *bytes as f64 / f64::from(1u32 << 30),
            ])
        })
        .collect();
    Some(CachedLine {
        samples: series.len(),
        label: format!("{name} · {}", capture.gpu_label(series.device_index)),
        points,
        duration_s: (end_ms - start_ms) as f64 / 1000.0,
        peak_bytes: readings.iter().map(|r| r.1).max().unwrap_or(0),
    })
}
