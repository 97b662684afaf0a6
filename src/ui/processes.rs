//! The process table: every process seen on any GPU, with its memory now and at peak, sortable by
//! any column. Clicking a row selects that process, and the timeline highlights it.

use std::cmp::Ordering;

use egui::{RichText, Ui};
use egui_extras::{Column, TableBuilder};

use crate::model::capture::ProcessTrack;
use crate::model::{Capture, format_bytes};

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
    FirstSeen,
    LastSeen,
}

impl ProcessColumn {
    /// All columns, in display order.
    pub const ALL: [ProcessColumn; 7] = [
        ProcessColumn::Pid,
        ProcessColumn::Name,
        ProcessColumn::Gpu,
        ProcessColumn::MemoryNow,
        ProcessColumn::MemoryPeak,
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
                ProcessColumn::Pid | ProcessColumn::Name | ProcessColumn::Gpu
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

fn compare(
    capture: &Capture,
    a: &ProcessTrack,
    b: &ProcessTrack,
    column: ProcessColumn,
) -> Ordering {
    match column {
        ProcessColumn::Pid => a.pid.cmp(&b.pid),
        ProcessColumn::Name => a.name.cmp(&b.name),
        ProcessColumn::Gpu => a.device_index.cmp(&b.device_index),
        ProcessColumn::MemoryNow => memory_now(capture, a).cmp(&memory_now(capture, b)),
        ProcessColumn::MemoryPeak => a.peak_used_bytes().cmp(&b.peak_used_bytes()),
        ProcessColumn::FirstSeen => a.first_seen_ms().cmp(&b.first_seen_ms()),
        ProcessColumn::LastSeen => a.last_seen_ms().cmp(&b.last_seen_ms()),
    }
}

/// Indices into `capture.processes` in the table's order (ties broken by GPU then pid, so the
/// order is stable between frames).
pub fn sorted_process_indices(capture: &Capture, state: ProcessTableState) -> Vec<usize> {
    let mut order: Vec<usize> = (0..capture.processes.len()).collect();
    order.sort_by(|&i, &j| {
        let (a, b) = (&capture.processes[i], &capture.processes[j]);
        let primary = compare(capture, a, b, state.sort_by);
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
    let order = sorted_process_indices(capture, *state);
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
        .columns(Column::auto().at_least(90.0), 4)
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
                row.col(|ui| {
                    cell_label(ui, track.pid.to_string());
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
    use crate::model::{CaptureMeta, DeviceFacts, ProcessSample, SampleBatch};

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
        sorted_process_indices(capture, state)
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
}
