//! The fleet view: a capture of many GPUs (a Prometheus fleet) as one row per GPU with a strip of
//! its memory over time, its peak, the time above the threshold, its growth per hour and the
//! health badges the diagnosis gives it; sorted and filtered by host and label; a click opens the
//! GPU's own timeline.
//!
//! Stays at 60 fps with a thousand GPUs × a day at 15 s (5.8 M samples): only the rows on screen
//! are drawn, each strip from its min/max pyramid at about two points per pixel, and the work that
//! grows with the capture (strips, judging each GPU) runs in slices of a few milliseconds per
//! frame, newest data first, instead of in one long frame.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use egui::{Color32, RichText, Sense, Stroke, Ui, pos2};
use egui_extras::{Column, TableBuilder};
use web_time::{Duration, Instant};

use vramscope_core::analysis::fleet::FleetStrip;
use vramscope_core::analysis::threshold::time_at_or_above_ms;
use vramscope_core::diagnose::fleet::{GpuVerdict, gpu_verdicts};
use vramscope_core::diagnose::{Category, Severity};
use vramscope_core::model::{Capture, DeviceFacts, format_bytes};

use super::command::{AppEvent, CommandSender};
use super::timeline::{THRESHOLD_COLOR, USED_COLOR};

/// Captures with at least this many GPUs, or GPUs of more than one host, open as a fleet.
pub const FLEET_MIN_GPUS: usize = 9;
/// Height of a row, in points.
const ROW_HEIGHT: f32 = 26.0;
/// Work done per frame on strips and verdicts before the frame is drawn: with the frame itself
/// (under 10 ms for a thousand GPUs) and one GPU's work past the budget, a frame stays under
/// 16.7 ms.
const WORK_BUDGET: Duration = Duration::from_millis(4);

/// Whether `capture` is shown as a fleet rather than as one timeline per GPU.
pub fn is_fleet(capture: &Capture) -> bool {
    if capture.devices.len() >= FLEET_MIN_GPUS {
        return true;
    }
    let hosts: BTreeSet<&str> = capture.devices.iter().map(|d| d.host.as_str()).collect();
    hosts.len() > 1
}

/// What the rows are sorted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FleetSort {
    /// Host, then the GPU's index on it.
    Gpu,
    /// Most severe finding first (then most findings).
    Health,
    Peak,
    TimeAboveThreshold,
    Growth,
    Latest,
}

impl FleetSort {
    const ALL: [FleetSort; 6] = [
        FleetSort::Gpu,
        FleetSort::Health,
        FleetSort::Peak,
        FleetSort::TimeAboveThreshold,
        FleetSort::Growth,
        FleetSort::Latest,
    ];

    fn title(self) -> &'static str {
        match self {
            FleetSort::Gpu => "host and GPU",
            FleetSort::Health => "health",
            FleetSort::Peak => "peak",
            FleetSort::TimeAboveThreshold => "time above threshold",
            FleetSort::Growth => "growth per hour",
            FleetSort::Latest => "latest",
        }
    }
}

/// What the view holds for one GPU.
#[derive(Clone, Debug, Default)]
struct Row {
    strip: FleetStrip,
    verdict: Option<GpuVerdict>,
    /// Samples of the device when `verdict` was made.
    judged_samples: usize,
    time_above_ms: i64,
    /// Threshold `time_above_ms` was computed for.
    time_above_threshold: f64,
}

/// The fleet view's state; [`FleetView::ui`] draws it for a capture.
pub struct FleetView {
    /// The capture the rows belong to: (start, source host, GPU count).
    shown: Option<(i64, String, usize)>,
    rows: Vec<Row>,
    /// Where the next slice of work starts (round robin over rows).
    next_work: usize,
    pub filter: String,
    pub sort: FleetSort,
    pub ascending: bool,
    /// Rows in display order, and what it was made from.
    order: Vec<usize>,
    order_made_for: Option<(String, FleetSort, bool, u64)>,
    /// Bumped whenever a row's numbers change, so the order is made again.
    revision: u64,
}

impl Default for FleetView {
    fn default() -> Self {
        FleetView {
            shown: None,
            rows: Vec::new(),
            next_work: 0,
            filter: String::new(),
            sort: FleetSort::Health,
            ascending: false,
            order: Vec::new(),
            order_made_for: None,
            revision: 0,
        }
    }
}

impl FleetView {
    /// Brings strips, times above the threshold and verdicts up to date, for at most `budget`.
    /// Returns whether work remains (the caller asks for another frame).
    pub fn prepare(
        &mut self,
        capture: &Capture,
        threshold_fraction: f64,
        budget: Duration,
    ) -> bool {
        let key = (
            capture.meta.started_ms,
            capture.meta.host.clone(),
            capture.devices.len(),
        );
        if self.shown.as_ref() != Some(&key) {
            self.shown = Some(key);
            self.rows = vec![Row::default(); capture.devices.len()];
            self.next_work = 0;
            self.order_made_for = None;
        }
        let started = Instant::now();
        let count = self.rows.len();
        let mut visited = 0;
        while visited < count {
            let position = self.next_work % count;
            let device = &capture.devices[position];
            let Some(series) = capture
                .series
                .get(position)
                .filter(|s| s.device_index == device.index)
                .or_else(|| capture.series(device.index))
            else {
                self.next_work += 1;
                visited += 1;
                continue;
            };
            let row = &mut self.rows[position];
            let mut changed = false;
            if row.strip.samples_seen() != series.len() {
                row.strip.extend(series);
                changed = true;
            }
            if changed || row.time_above_threshold != threshold_fraction {
                row.time_above_ms = time_at_or_above_ms(
                    row.strip
                        .t_ms
                        .iter()
                        .copied()
                        .zip(row.strip.fraction.iter().copied()),
                    threshold_fraction,
                );
                row.time_above_threshold = threshold_fraction;
                changed = true;
            }
            if row.verdict.is_none() || row.judged_samples != series.len() {
                let one = capture.only_device(device.index);
                row.verdict = gpu_verdicts(&device.label(), &one).into_iter().next();
                row.judged_samples = series.len();
                changed = true;
            }
            if changed {
                self.revision += 1;
            }
            self.next_work += 1;
            visited += 1;
            if started.elapsed() >= budget {
                break;
            }
        }
        self.rows.iter().enumerate().any(|(i, row)| {
            capture.series.get(i).is_some_and(|s| {
                row.verdict.is_none()
                    || row.judged_samples != s.len()
                    || row.time_above_threshold != threshold_fraction
            })
        })
    }

    /// GPUs judged so far.
    fn judged(&self) -> usize {
        self.rows.iter().filter(|r| r.verdict.is_some()).count()
    }

    /// The rows to show, filtered and sorted (made again only when something changed).
    fn order(&mut self, capture: &Capture) -> &[usize] {
        let made_for = (
            self.filter.clone(),
            self.sort,
            self.ascending,
            self.revision,
        );
        if self.order_made_for.as_ref() != Some(&made_for) {
            let filter = Filter::new(&self.filter);
            let mut order: Vec<usize> = (0..self.rows.len())
                .filter(|&i| filter.matches(&capture.devices[i]))
                .collect();
            order.sort_by(|&a, &b| {
                let primary = self.compare(capture, a, b);
                let primary = if self.ascending {
                    primary
                } else {
                    primary.reverse()
                };
                primary.then_with(|| gpu_order(&capture.devices[a], &capture.devices[b]))
            });
            self.order = order;
            self.order_made_for = Some(made_for);
        }
        &self.order
    }

    fn compare(&self, capture: &Capture, a: usize, b: usize) -> Ordering {
        let (ra, rb) = (&self.rows[a], &self.rows[b]);
        match self.sort {
            // Ascending by name reads naturally; "descending" here is the reverse of that.
            FleetSort::Gpu => gpu_order(&capture.devices[b], &capture.devices[a]),
            FleetSort::Health => health_rank(ra).cmp(&health_rank(rb)),
            FleetSort::Peak => ra
                .strip
                .peak_fraction()
                .total_cmp(&rb.strip.peak_fraction()),
            FleetSort::TimeAboveThreshold => ra.time_above_ms.cmp(&rb.time_above_ms),
            FleetSort::Growth => growth(ra).total_cmp(&growth(rb)),
            FleetSort::Latest => ra
                .strip
                .latest_fraction()
                .unwrap_or(-1.0)
                .total_cmp(&rb.strip.latest_fraction().unwrap_or(-1.0)),
        }
    }

    /// Draws the view; a click on a row sends [`AppEvent::OpenFleetGpu`] for its GPU.
    pub fn ui(
        &mut self,
        ui: &mut Ui,
        capture: &Capture,
        threshold_fraction: f64,
        commands: &CommandSender,
    ) {
        // A click anywhere on a row opens it: text in the rows must not take clicks for selection.
        ui.style_mut().interaction.selectable_labels = false;
        if self.prepare(capture, threshold_fraction, WORK_BUDGET) {
            ui.ctx().request_repaint();
        }
        let hosts: BTreeSet<&str> = capture.devices.iter().map(|d| d.host.as_str()).collect();
        let with_findings = self
            .rows
            .iter()
            .filter(|r| {
                r.verdict
                    .as_ref()
                    .is_some_and(|v| v.worst().is_some_and(|s| s != Severity::Info))
            })
            .count();
        let judged = self.judged();
        ui.horizontal(|ui| {
            ui.label(
                RichText::new(format!(
                    "Fleet: {} GPUs on {} host(s)",
                    capture.devices.len(),
                    hosts.len()
                ))
                .strong(),
            );
            if judged < self.rows.len() {
                ui.spinner();
                ui.label(format!("judging {judged} of {} GPUs…", self.rows.len()));
            } else {
                ui.label(format!("{with_findings} with findings"));
            }
            ui.separator();
            let filter_label = ui.label("Filter:");
            ui.add(
                egui::TextEdit::singleline(&mut self.filter)
                    .hint_text("host, label or key=value")
                    .desired_width(200.0),
            )
            .labelled_by(filter_label.id)
            .on_hover_text(
                "Shows GPUs whose host, name or any label contains the text; key=value matches \
                 one label (e.g. namespace=ml); several words must all match",
            );
            let sort_label = ui.label("Sort by:");
            egui::ComboBox::from_id_salt("fleet_sort")
                .selected_text(self.sort.title())
                .show_ui(ui, |ui| {
                    for sort in FleetSort::ALL {
                        ui.selectable_value(&mut self.sort, sort, sort.title());
                    }
                })
                .response
                .labelled_by(sort_label.id);
            let direction = if self.ascending {
                "ascending"
            } else {
                "descending"
            };
            if ui
                .button(direction)
                .on_hover_text("Reverse the order")
                .clicked()
            {
                self.ascending = !self.ascending;
            }
        });
        let span = capture.time_span_ms();
        let order = self.order(capture).to_vec();
        ui.label(
            RichText::new(format!(
                "{} of {} GPUs shown · memory in use (used + driver-reserved) as a share of each GPU; \
                 the orange line is the {:.0}% threshold · click a row to open its timeline",
                order.len(),
                capture.devices.len(),
                threshold_fraction * 100.0
            ))
            .small()
            .weak(),
        );
        let mut points = Vec::new();
        TableBuilder::new(ui)
            .striped(true)
            .resizable(true)
            .sense(Sense::click())
            .cell_layout(egui::Layout::left_to_right(egui::Align::Center))
            .column(Column::auto().at_least(140.0).clip(true))
            .column(Column::auto().at_least(110.0).clip(true))
            .column(Column::remainder().at_least(200.0))
            .columns(Column::auto().at_least(70.0), 3)
            .column(Column::auto().at_least(160.0).clip(true))
            .header(22.0, |mut header| {
                for title in [
                    "GPU",
                    "model",
                    "memory in use over time",
                    "peak",
                    "above threshold",
                    "growth / h",
                    "health",
                ] {
                    header.col(|ui| {
                        ui.strong(title);
                    });
                }
            })
            .body(|body| {
                body.rows(ROW_HEIGHT, order.len(), |mut table_row| {
                    let position = order[table_row.index()];
                    let device = &capture.devices[position];
                    let row = &self.rows[position];
                    table_row.col(|ui| {
                        ui.label(device.label()).on_hover_text(labels_text(device));
                    });
                    table_row.col(|ui| {
                        ui.label(&device.name);
                    });
                    table_row.col(|ui| {
                        strip_ui(ui, row, span, threshold_fraction, &mut points);
                    });
                    table_row.col(|ui| {
                        ui.label(format!("{:.1}%", row.strip.peak_fraction() * 100.0))
                            .on_hover_text(format!(
                                "{} of {} at the peak",
                                format_bytes(row.strip.peak_occupied_bytes),
                                format_bytes(row.strip.peak_total_bytes)
                            ));
                    });
                    table_row.col(|ui| {
                        ui.label(duration_text(row.time_above_ms));
                    });
                    table_row.col(|ui| {
                        match row.verdict.as_ref().and_then(|v| v.growth_bytes_per_hour) {
                            Some(g) if g >= 0.0 => ui.label(format!("+{}", format_bytes(g as u64))),
                            Some(g) => ui.label(format!("−{}", format_bytes((-g) as u64))),
                            None => ui.label("–"),
                        };
                    });
                    table_row.col(|ui| badges_ui(ui, row.verdict.as_ref()));
                    if table_row.response().clicked() {
                        commands.send_event(AppEvent::OpenFleetGpu(device.index));
                    }
                });
            });
    }
}

/// Order by host, then the GPU's index on it as a number, then capture index.
fn gpu_order(a: &DeviceFacts, b: &DeviceFacts) -> Ordering {
    let index = |d: &DeviceFacts| d.labels.get("gpu").and_then(|g| g.parse::<u64>().ok());
    a.host
        .cmp(&b.host)
        .then(index(a).cmp(&index(b)))
        .then(a.index.cmp(&b.index))
}

/// Larger is worse: the most severe finding, then how many.
fn health_rank(row: &Row) -> (u8, usize) {
    let Some(verdict) = &row.verdict else {
        return (0, 0);
    };
    let severity = match verdict.worst() {
        Some(Severity::Critical) => 3,
        Some(Severity::Warning) => 2,
        Some(Severity::Info) => 1,
        None => 0,
    };
    (severity, verdict.findings.len())
}

fn growth(row: &Row) -> f64 {
    row.verdict
        .as_ref()
        .and_then(|v| v.growth_bytes_per_hour)
        .unwrap_or(f64::NEG_INFINITY)
}

/// The filter box: words that must all match the host, the name or a label (`key=value` matches
/// one label exactly, `key=` any value of it).
struct Filter {
    words: Vec<String>,
}

impl Filter {
    fn new(text: &str) -> Self {
        Filter {
            words: text.split_whitespace().map(str::to_lowercase).collect(),
        }
    }

    fn matches(&self, device: &DeviceFacts) -> bool {
        self.words.iter().all(|word| match word.split_once('=') {
            Some((key, value)) => {
                device.labels.iter().any(|(k, v)| {
                    k.to_lowercase() == key && (value.is_empty() || v.to_lowercase() == value)
                }) || (key == "host" && device.host.to_lowercase() == value)
            }
            None => {
                device.host.to_lowercase().contains(word.as_str())
                    || device.name.to_lowercase().contains(word.as_str())
                    || device.label().to_lowercase().contains(word.as_str())
                    || device
                        .labels
                        .values()
                        .any(|v| v.to_lowercase().contains(word.as_str()))
            }
        })
    }
}

fn labels_text(device: &DeviceFacts) -> String {
    let mut text = format!(
        "{}\nUUID {}\nPCI {}",
        device.label(),
        device.uuid,
        device.pci_bus_id
    );
    for (key, value) in &device.labels {
        text.push_str(&format!("\n{key}={value}"));
    }
    text
}

fn duration_text(ms: i64) -> String {
    let secs = ms / 1000;
    if secs == 0 {
        "–".to_owned()
    } else if secs < 3600 {
        format!("{} min", (secs + 59) / 60)
    } else {
        format!("{}:{:02} h", secs / 3600, secs / 60 % 60)
    }
}

/// The strip: occupied share over the capture's time span, with the threshold line.
fn strip_ui(
    ui: &mut Ui,
    row: &Row,
    span: Option<(i64, i64)>,
    threshold: f64,
    points: &mut Vec<u32>,
) {
    let (rect, response) = ui.allocate_exact_size(
        egui::vec2(ui.available_width(), ROW_HEIGHT - 6.0),
        Sense::hover(),
    );
    let painter = ui.painter_at(rect);
    painter.rect_filled(rect, 2.0, ui.visuals().extreme_bg_color);
    let y_of = |fraction: f64| rect.bottom() - (fraction.clamp(0.0, 1.0) as f32) * rect.height();
    let threshold_y = y_of(threshold);
    painter.line_segment(
        [
            pos2(rect.left(), threshold_y),
            pos2(rect.right(), threshold_y),
        ],
        Stroke::new(1.0, THRESHOLD_COLOR.gamma_multiply(0.7)),
    );
    let Some((first_ms, last_ms)) = span else {
        return;
    };
    let width_ms = (last_ms - first_ms).max(1) as f32;
    let x_of = |t_ms: i64| rect.left() + (t_ms - first_ms) as f32 / width_ms * rect.width();
    points.clear();
    row.strip.select(rect.width().max(1.0) as usize, points);
    let line: Vec<egui::Pos2> = points
        .iter()
        .map(|&i| {
            let i = i as usize;
            pos2(x_of(row.strip.t_ms[i]), y_of(row.strip.fraction[i]))
        })
        .collect();
    if line.len() >= 2 {
        painter.add(egui::Shape::line(line, Stroke::new(1.0, USED_COLOR)));
    } else if let Some(&point) = line.first() {
        painter.circle_filled(point, 1.5, USED_COLOR);
    }
    if let Some(latest) = row.strip.latest_fraction() {
        response.on_hover_text(format!(
            "latest {:.1}%, peak {:.1}% of the GPU",
            latest * 100.0,
            row.strip.peak_fraction() * 100.0
        ));
    }
}

/// One small badge per finding category, coloured by its worst severity; hover for the titles.
fn badges_ui(ui: &mut Ui, verdict: Option<&GpuVerdict>) {
    let Some(verdict) = verdict else {
        ui.weak("…");
        return;
    };
    if verdict.findings.is_empty() {
        ui.label(
            RichText::new("OK")
                .color(Color32::from_rgb(0x4a, 0xb0, 0x5a))
                .small(),
        )
        .on_hover_text(
            "No Xid, ECC or row-remap problem, leak, near-full memory or throttling found",
        );
        return;
    }
    let mut categories: Vec<(Category, Severity, Vec<&str>)> = Vec::new();
    for finding in &verdict.findings {
        match categories
            .iter_mut()
            .find(|(c, _, _)| *c == finding.category)
        {
            Some((_, severity, titles)) => {
                *severity = (*severity).min(finding.severity);
                titles.push(&finding.title);
            }
            None => categories.push((finding.category, finding.severity, vec![&finding.title])),
        }
    }
    for (category, severity, titles) in categories {
        let color = match severity {
            Severity::Critical => Color32::from_rgb(0xe0, 0x4a, 0x4a),
            Severity::Warning => Color32::from_rgb(0xd0, 0x98, 0x20),
            Severity::Info => Color32::from_gray(140),
        };
        let text = match category {
            Category::Capacity => "near full",
            other => other.as_str(),
        };
        egui::Frame::new()
            .stroke(Stroke::new(1.0, color))
            .corner_radius(3.0)
            .inner_margin(egui::Margin::symmetric(3, 0))
            .show(ui, |ui| ui.label(RichText::new(text).color(color).small()))
            .response
            .on_hover_text(titles.join("\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(host: &str, gpu: &str, pod: &str) -> DeviceFacts {
        DeviceFacts {
            host: host.into(),
            name: "NVIDIA H200".into(),
            labels: [("gpu", gpu), ("pod", pod), ("namespace", "ml")]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_filter_matches_hosts_names_and_labels() {
        let a = device("node-a", "0", "train-0");
        let b = device("node-b", "3", "serve-1");
        let matching = |text: &str| {
            let filter = Filter::new(text);
            [&a, &b]
                .iter()
                .filter(|d| filter.matches(d))
                .map(|d| d.host.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(matching(""), ["node-a", "node-b"]);
        assert_eq!(matching("node-b"), ["node-b"]);
        assert_eq!(matching("pod=train-0"), ["node-a"]);
        assert_eq!(matching("POD=TRAIN-0"), ["node-a"], "case does not matter");
        assert_eq!(
            matching("namespace= serve"),
            ["node-b"],
            "every word must match"
        );
        assert_eq!(matching("host=node-a"), ["node-a"]);
        assert_eq!(matching("gpu=3"), ["node-b"]);
        assert!(matching("nothing-like-this").is_empty());
    }

    #[test]
    fn a_capture_of_several_hosts_or_many_gpus_is_a_fleet() {
        let mut capture = Capture::default();
        capture.devices = vec![device("", "0", ""), device("", "1", "")];
        assert!(!is_fleet(&capture), "two local GPUs");
        capture.devices[1].host = "node-b".into();
        assert!(is_fleet(&capture), "two hosts");
        capture.devices = (0..FLEET_MIN_GPUS).map(|_| device("", "0", "")).collect();
        assert!(is_fleet(&capture));
    }
}
