//! The process table: every process seen on any GPU, with its memory now and at peak, how fast it
//! grows and when it fills the GPU at that rate (the diagnosis's growth judgement,
//! `vramscope_core::diagnose::leak::process_growth`), sortable by any column; a process whose growth is a
//! finding is highlighted. Clicking a row selects that process, and the timeline highlights it.

use std::cmp::Ordering;
use std::sync::Arc;

use egui::{RichText, Ui};
use egui_extras::{Column, TableBuilder};

use vramscope_core::diagnose::growth::{Shape, duration_text};
use vramscope_core::diagnose::leak::{SeriesGrowth, process_growth};
use vramscope_core::model::capture::ProcessTrack;
use vramscope_core::model::{Capture, format_bytes};

use super::format::format_elapsed_secs;
use super::timeline::data::TimelineData;

/// Columns of the table, in display order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessColumn {
    Pid,
    Name,
    Gpu,
    MemoryNow,
    MemoryPeak,
    Growth,
    FullIn,
    FirstSeen,
    LastSeen,
}

impl ProcessColumn {
    /// All columns, in display order.
    pub const ALL: [ProcessColumn; 9] = [
        ProcessColumn::Pid,
        ProcessColumn::Name,
        ProcessColumn::Gpu,
        ProcessColumn::MemoryNow,
        ProcessColumn::MemoryPeak,
        ProcessColumn::Growth,
        ProcessColumn::FullIn,
        ProcessColumn::FirstSeen,
        ProcessColumn::LastSeen,
    ];

    /// Header text.
    pub fn title(self) -> &'static str {
        match self {
            ProcessColumn::Pid => "PID",
            ProcessColumn::Name => "Name",
            ProcessColumn::Gpu => "GPU",
            ProcessColumn::MemoryNow => "Memory (latest)",
            ProcessColumn::MemoryPeak => "Peak",
            ProcessColumn::Growth => "Growth",
            ProcessColumn::FullIn => "Full in",
            ProcessColumn::FirstSeen => "First seen",
            ProcessColumn::LastSeen => "Last seen",
        }
    }
}

/// How the table is sorted, and the process selected in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessTableState {
    pub sort_by: ProcessColumn,
    pub ascending: bool,
    /// Index into `Capture::processes` of the selected process, highlighted in the timeline.
    pub selected: Option<usize>,
}

impl Default for ProcessTableState {
    fn default() -> Self {
        ProcessTableState {
            sort_by: ProcessColumn::MemoryPeak,
            ascending: false,
            selected: None,
        }
    }
}

impl ProcessTableState {
    /// A click on a row: select that process, or clear the selection if it already was.
    pub fn click_row(&mut self, track_index: usize) {
        self.selected = (self.selected != Some(track_index)).then_some(track_index);
    }

    /// A click on a header: sort by that column, or flip the direction if it already is.
    pub fn click(&mut self, column: ProcessColumn) {
        if self.sort_by == column {
            self.ascending = !self.ascending;
        } else {
            self.sort_by = column;
            // Numbers read best largest first; names and ids alphabetically.
            self.ascending = matches!(
                column,
                ProcessColumn::Pid
                    | ProcessColumn::Name
                    | ProcessColumn::Gpu
                    | ProcessColumn::FullIn
            );
        }
    }
}

/// Memory of a track at the capture's last process poll; `None` once the process has gone.
fn memory_now(capture: &Capture, track: &ProcessTrack) -> Option<u64> {
    let last_poll = capture.process_poll_ms.last()?;
    (track.last_seen_ms()? == *last_poll)
        .then(|| track.latest_used_bytes())
        .flatten()
}

/// The growth judgement of every process of a capture (by index into `capture.processes`),
/// computed once per change of the capture and kept in `ui`'s memory: the table and the timeline
/// both show it, every frame.
pub fn process_growths(ui: &Ui, capture: &Capture) -> Arc<Vec<Option<SeriesGrowth>>> {
    type Key = (usize, usize, usize);
    let key: Key = (
        capture.sample_count(),
        capture.processes.len(),
        capture.process_poll_ms.len(),
    );
    let id = egui::Id::unique("process-growths");
    if let Some((cached, growths)) = ui
        .ctx()
        .data(|d| d.get_temp::<(Key, Arc<Vec<Option<SeriesGrowth>>>)>(id))
        && cached == key
    {
        return growths;
    }
    let growths = Arc::new(growths_of(capture));
    ui.ctx()
        .data_mut(|d| d.insert_temp(id, (key, Arc::clone(&growths))));
    growths
}

/// The growth judgement of every process of `capture`, by index.
pub fn growths_of(capture: &Capture) -> Vec<Option<SeriesGrowth>> {
    capture
        .processes
        .iter()
        .map(|p| process_growth(capture, p.device_index, p.pid))
        .collect()
}

/// The growth column's text: "+1.20 GiB/min", or what the judgement says instead.
fn growth_text(growth: Option<&SeriesGrowth>) -> String {
    match growth.map(|g| &g.shape) {
        Some(Shape::Growing(_)) => growth
            .and_then(SeriesGrowth::bytes_per_minute)
            .map(|b| format!("+{}/min", format_bytes(b.max(0.0) as u64)))
            .unwrap_or_default(),
        Some(Shape::LevelledOff { .. }) => "levelled off".to_owned(),
        Some(Shape::Flat) => "flat".to_owned(),
        Some(Shape::TooShort { .. }) => "too short to tell".to_owned(),
        None => "–".to_owned(),
    }
}

fn compare(
    capture: &Capture,
    growths: &[Option<SeriesGrowth>],
    (i, a): (usize, &ProcessTrack),
    (j, b): (usize, &ProcessTrack),
    column: ProcessColumn,
) -> Ordering {
    let growth = |k: usize| growths.get(k).copied().flatten();
    match column {
        ProcessColumn::Pid => a.pid.cmp(&b.pid),
        ProcessColumn::Name => a.name.cmp(&b.name),
        ProcessColumn::Gpu => a.device_index.cmp(&b.device_index),
        ProcessColumn::MemoryNow => memory_now(capture, a).cmp(&memory_now(capture, b)),
        ProcessColumn::MemoryPeak => a.peak_used_bytes().cmp(&b.peak_used_bytes()),
        ProcessColumn::Growth => growth(i)
            .and_then(|g| g.bytes_per_minute())
            .unwrap_or(0.0)
            .total_cmp(&growth(j).and_then(|g| g.bytes_per_minute()).unwrap_or(0.0)),
        // Soonest first; never full (not growing) last.
        ProcessColumn::FullIn => growth(i)
            .and_then(|g| g.seconds_until_full())
            .unwrap_or(f64::INFINITY)
            .total_cmp(
                &growth(j)
                    .and_then(|g| g.seconds_until_full())
                    .unwrap_or(f64::INFINITY),
            ),
        ProcessColumn::FirstSeen => a.first_seen_ms().cmp(&b.first_seen_ms()),
        ProcessColumn::LastSeen => a.last_seen_ms().cmp(&b.last_seen_ms()),
    }
}

/// Indices into `capture.processes` in the table's order (ties broken by GPU then pid, so the
/// order is stable between frames); `growths` from [`growths_of`].
pub fn sorted_process_indices(
    capture: &Capture,
    growths: &[Option<SeriesGrowth>],
    state: ProcessTableState,
) -> Vec<usize> {
    let mut order: Vec<usize> = (0..capture.processes.len()).collect();
    order.sort_by(|&i, &j| {
        let (a, b) = (&capture.processes[i], &capture.processes[j]);
        let primary = compare(capture, growths, (i, a), (j, b), state.sort_by);
        let primary = if state.ascending {
            primary
        } else {
            primary.reverse()
        };
        primary
            .then(a.device_index.cmp(&b.device_index))
            .then(a.pid.cmp(&b.pid))
            .then(i.cmp(&j))
    });
    order
}

/// Draws the table.
pub fn process_table_ui(
    ui: &mut Ui,
    capture: &Capture,
    timeline: &TimelineData,
    state: &mut ProcessTableState,
) {
    ui.horizontal(|ui| {
        ui.label(RichText::new(format!("Processes ({})", capture.processes.len())).strong());
        ui.label(
            RichText::new(
                "Per-process memory is the process's reserved memory plus its CUDA context, as the \
                 driver reports it, not its live tensors.",
            )
            .weak()
            .small(),
        );
    });
    if capture.processes.is_empty() {
        ui.label("No processes seen.");
        return;
    }
    let growths = process_growths(ui, capture);
    let order = sorted_process_indices(capture, &growths, *state);
    let mut clicked = None;
    let mut clicked_row = None;
    TableBuilder::new(ui)
        .striped(true)
        .sense(egui::Sense::click())
        .resizable(true)
        .cell_layout(egui::Layout::left_to_right(egui::Align::Center))
        .column(Column::auto().at_least(60.0))
        .column(Column::remainder().at_least(140.0).clip(true))
        .columns(Column::auto().at_least(40.0), 1)
        .columns(Column::auto().at_least(90.0), 6)
        .header(22.0, |mut header| {
            for column in ProcessColumn::ALL {
                header.col(|ui| {
                    let arrow = match (state.sort_by == column, state.ascending) {
                        (false, _) => "",
                        (true, true) => " (asc)",
                        (true, false) => " (desc)",
                    };
                    if ui
                        .selectable_label(
                            state.sort_by == column,
                            format!("{}{arrow}", column.title()),
                        )
                        .on_hover_text("Sort by this column; click again to reverse")
                        .clicked()
                    {
                        clicked = Some(column);
                    }
                });
            }
        })
        .body(|body| {
            body.rows(20.0, order.len(), |mut row| {
                let track_index = order[row.index()];
                let track = &capture.processes[track_index];
                row.set_selected(state.selected == Some(track_index));
                let growth = growths.get(track_index).copied().flatten();
                let leaking = growth.as_ref().is_some_and(SeriesGrowth::is_leaking);
                row.col(|ui| {
                    let pid = RichText::new(track.pid.to_string());
                    if leaking {
                        cell_label(ui, pid.strong().color(ui.visuals().error_fg_color))
                            .on_hover_text("Its memory grows steadily: see Diagnose > Leak");
                    } else {
                        cell_label(ui, pid);
                    }
                });
                row.col(|ui| {
                    let name = if track.name.is_empty() {
                        "(not visible)"
                    } else {
                        &track.name
                    };
                    cell_label(ui, name).on_hover_text(format!("{} context", track.kind.label()));
                });
                row.col(|ui| {
                    cell_label(ui, track.device_index.to_string());
                });
                row.col(|ui| {
                    match memory_now(capture, track) {
                        Some(bytes) => cell_label(ui, format_bytes(bytes)),
                        None => cell_label(ui, RichText::new("exited").weak()),
                    };
                });
                row.col(|ui| {
                    cell_label(
                        ui,
                        track
                            .peak_used_bytes()
                            .map(format_bytes)
                            .unwrap_or_else(|| "n/a".to_owned()),
                    );
                });
                row.col(|ui| {
                    let text = RichText::new(growth_text(growth.as_ref()));
                    let hover = growth
                        .as_ref()
                        .and_then(SeriesGrowth::growth)
                        .map(|g| g.confidence_text(600.0, "s"))
                        .unwrap_or_else(|| {
                            "The robust slope of the memory the process falls back to; judged on at least 60 s of readings".to_owned()
                        });
                    if leaking {
                        cell_label(ui, text.strong().color(ui.visuals().error_fg_color))
                    } else {
                        cell_label(ui, text)
                    }
                    .on_hover_text(hover);
                });
                row.col(|ui| {
                    cell_label(
                        ui,
                        growth
                            .as_ref()
                            .and_then(SeriesGrowth::seconds_until_full)
                            .map(duration_text)
                            .unwrap_or_else(|| "–".to_owned()),
                    )
                    .on_hover_text("When the GPU is full if the process keeps growing at this rate");
                });
                row.col(|ui| {
                    cell_label(ui, seen_text(timeline, track.first_seen_ms()));
                });
                row.col(|ui| {
                    cell_label(ui, seen_text(timeline, track.last_seen_ms()));
                });
                let response = row.response();
                if response.clicked() {
                    clicked_row = Some(track_index);
                }
                response.on_hover_text(if state.selected == Some(track_index) {
                    "Selected: highlighted in the timeline. Click again to clear."
                } else {
                    "Click to highlight this process in the timeline"
                });
            });
        });
    if let Some(column) = clicked {
        state.click(column);
    }
    if let Some(track_index) = clicked_row {
        state.click_row(track_index);
    }
}

/// A cell's text, not selectable, so that a click anywhere on the row selects the row.
fn cell_label(ui: &mut Ui, text: impl Into<egui::WidgetText>) -> egui::Response {
    ui.add(egui::Label::new(text).selectable(false))
}

fn seen_text(timeline: &TimelineData, t_ms: Option<i64>) -> String {
    t_ms.map(|t| format_elapsed_secs(timeline.x_of(t)))
        .unwrap_or_else(|| "–".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_core::model::{CaptureMeta, DeviceFacts, ProcessSample, SampleBatch};

    fn capture() -> Capture {
        let devices = vec![
            DeviceFacts {
                index: 0,
                ..Default::default()
            },
            DeviceFacts {
                index: 1,
                ..Default::default()
            },
        ];
        let mut capture = Capture::new(CaptureMeta::default(), devices);
        let polls: [&[(u32, u32, &str, u64)]; 2] = [
            &[(0, 30, "b", 5), (1, 10, "c", 9), (0, 20, "a", 1)],
            &[(0, 30, "b", 2), (0, 20, "a", 7)],
        ];
        for (tick, poll) in polls.iter().enumerate() {
            capture.ingest(&SampleBatch {
                processes: Some(
                    poll.iter()
                        .map(|&(device_index, pid, name, used)| ProcessSample {
                            t_ms: tick as i64 * 1000,
                            device_index,
                            pid,
                            name: name.to_owned(),
                            used_bytes: Some(used),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            });
        }
        capture
    }

    fn pids(capture: &Capture, state: ProcessTableState) -> Vec<u32> {
        sorted_process_indices(capture, &growths_of(capture), state)
            .into_iter()
            .map(|i| capture.processes[i].pid)
            .collect()
    }

    #[test]
    fn sorts_by_any_column_both_ways() {
        let capture = capture();
        let mut state = ProcessTableState::default();
        assert_eq!(
            pids(&capture, state),
            vec![10, 20, 30],
            "peak, largest first"
        );
        state.click(ProcessColumn::Name);
        assert_eq!(pids(&capture, state), vec![20, 30, 10]);
        state.click(ProcessColumn::Name);
        assert_eq!(pids(&capture, state), vec![10, 30, 20]);
        state.click(ProcessColumn::MemoryNow);
        // pid 10 exited (absent from the last poll): it sorts as "no memory now".
        assert_eq!(pids(&capture, state), vec![20, 30, 10]);
        assert_eq!(memory_now(&capture, &capture.processes[1]), None);
    }

    #[test]
    fn a_row_click_selects_and_a_second_click_clears() {
        let mut state = ProcessTableState::default();
        state.click_row(2);
        assert_eq!(state.selected, Some(2));
        state.click_row(0);
        assert_eq!(state.selected, Some(0), "another row moves the selection");
        state.click(ProcessColumn::Pid);
        assert_eq!(state.selected, Some(0), "sorting keeps it");
        state.click_row(0);
        assert_eq!(state.selected, None);
    }

    #[test]
    fn growth_sorts_the_growing_process_first_and_marks_it() {
        use vramscope_core::model::{DeviceSample, GIB, MIB, MemoryReading};
        let total = 80 * GIB;
        let mut capture = Capture::new(
            CaptureMeta::default(),
            vec![DeviceFacts {
                index: 0,
                memory_total_bytes: total,
                ..Default::default()
            }],
        );
        // Two minutes: pid 7 steady at 10 GiB, pid 8 growing 50 MiB a second.
        for s in 0..120i64 {
            let growing = GIB + s as u64 * 50 * MIB;
            let used = 10 * GIB + growing;
            capture.ingest(&SampleBatch {
                devices: vec![DeviceSample {
                    t_ms: s * 1000,
                    device_index: 0,
                    memory: Some(MemoryReading {
                        used_bytes: used,
                        reserved_bytes: 0,
                        free_bytes: total - used,
                        total_bytes: total,
                    }),
                    ..Default::default()
                }],
                processes: Some(
                    [(7, 10 * GIB), (8, growing)]
                        .iter()
                        .map(|&(pid, bytes)| ProcessSample {
                            t_ms: s * 1000,
                            device_index: 0,
                            pid,
                            used_bytes: Some(bytes),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            });
        }
        let growths = growths_of(&capture);
        let state = ProcessTableState {
            sort_by: ProcessColumn::Growth,
            ascending: false,
            selected: None,
        };
        assert_eq!(pids(&capture, state), vec![8, 7]);
        let by_pid = |pid: u32| {
            capture
                .processes
                .iter()
                .position(|p| p.pid == pid)
                .and_then(|i| growths[i])
        };
        assert!(by_pid(8).as_ref().is_some_and(SeriesGrowth::is_leaking));
        assert!(!by_pid(7).as_ref().is_some_and(SeriesGrowth::is_leaking));
        assert_eq!(growth_text(by_pid(7).as_ref()), "flat");
        assert_eq!(growth_text(by_pid(8).as_ref()), "+2.93 GiB/min");
        // Full in: free at the end / rate, soonest first when sorted ascending.
        let full_in = by_pid(8).and_then(|g| g.seconds_until_full());
        assert!(
            full_in.is_some_and(|s| (s - 1294.0).abs() < 5.0),
            "{full_in:?}"
        );
    }
}
