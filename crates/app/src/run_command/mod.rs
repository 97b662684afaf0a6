//! File › Run a command… (desktop): `vramscope run` from the app. The [`dialog`] asks for what
//! the command line takes; the run itself is `vramscope_gpu::run::run_and_conclude`, the same
//! sequence as the command line's (run, diagnose a failure, prove a fix, write the reports), on
//! a thread of the app's job runner. While it runs, the run panel shows the job's last output
//! lines as they come, the time so far, a Stop button (Ctrl+C for the job: SIGINT to its process
//! group) and the proof table, a row as each re-run ends. When it ends the panel keeps its exit
//! status and the app opens the run folder as `vramscope FOLDER` does.

pub mod command_line;
pub mod dialog;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use egui::{Color32, RichText};
use vramscope_core::diagnose::finding::Diagnosis;
use vramscope_core::model::format_bytes;
use vramscope_core::model::run::{ProofRun, RunExit};
use vramscope_gpu::run::prove::Candidate;
use vramscope_gpu::run::{Forwarder, LineSink, RunError, RunEvents, RunOutcome, run_and_conclude};
use web_time::Instant;

use crate::runner::{Job, PROGRESS_REPAINT_INTERVAL, Poll, Runner};
use dialog::RunRequest;

/// Output lines the panel keeps (the run folder's log keeps more).
pub const OUTPUT_LINES_KEPT: usize = 500;

/// What the run's thread has told the panel so far.
#[derive(Debug, Default)]
struct Told {
    /// The last [`OUTPUT_LINES_KEPT`] lines of the job's output.
    lines: VecDeque<String>,
    /// Lines dropped from the front of `lines`.
    lines_dropped: usize,
    /// The run's sentences (run folder, what was not recorded, why no proof).
    notes: Vec<String>,
    /// How the job ended, before any diagnosis or proof.
    job_exit: Option<RunExit>,
    /// The changes the proof re-runs the job under, in order.
    candidates: Vec<String>,
    /// The re-runs that ended.
    proof: Vec<ProofRun>,
    /// The diagnosis's first findings: title and first recommendation.
    diagnosis: Vec<(String, Option<String>)>,
}

/// The panel's side of [`RunEvents`] and of the output sink: what comes is kept and wakes the
/// UI (at most every [`PROGRESS_REPAINT_INTERVAL`], so a chatty job costs a few frames a second).
#[derive(Clone)]
struct Teller {
    told: Arc<Mutex<Told>>,
    ctx: egui::Context,
}

impl Teller {
    fn tell(&self, change: impl FnOnce(&mut Told)) {
        if let Ok(mut told) = self.told.lock() {
            change(&mut told);
        }
        self.ctx.request_repaint_after(PROGRESS_REPAINT_INTERVAL);
    }

    fn line(&self, line: &str) {
        self.tell(|told| {
            if told.lines.len() == OUTPUT_LINES_KEPT {
                told.lines.pop_front();
                told.lines_dropped += 1;
            }
            told.lines.push_back(line.to_owned());
        });
    }
}

impl RunEvents for Teller {
    fn job_ended(&mut self, outcome: &RunOutcome) {
        let exit = outcome.manifest.exit.clone();
        self.tell(|told| told.job_exit = Some(exit));
    }

    fn note(&mut self, text: &str) {
        self.tell(|told| told.notes.push(text.to_owned()));
    }

    fn proving(&mut self, candidates: &[Candidate]) {
        let changes = candidates.iter().map(|c| c.change.clone()).collect();
        self.tell(|told| told.candidates = changes);
    }

    fn proof_result(&mut self, run: &ProofRun) {
        self.tell(|told| told.proof.push(run.clone()));
    }

    fn diagnosed(&mut self, diagnosis: &Diagnosis) {
        let lines = diagnosis
            .findings
            .iter()
            .take(3)
            .map(|f| {
                let recommendation =
                    f.recommendations
                        .first()
                        .map(|r| match r.verification_label() {
                            Some(label) => format!("{} ({label})", r.title),
                            None => r.title.clone(),
                        });
                (f.title.clone(), recommendation)
            })
            .collect();
        self.tell(|told| told.diagnosis = lines);
    }
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Ended {
    /// The job ran; how it exited.
    Ran(RunExit),
    /// It could not start (command not found: 127, as a shell says).
    NotStarted { why: String, status: u8 },
    /// The run's thread stopped without a result.
    Lost(String),
}

/// A command run from the app: running, or ended and still shown until closed.
pub struct CommandRun {
    request: RunRequest,
    forwarder: Forwarder,
    told: Arc<Mutex<Told>>,
    job: Job<Result<RunOutcome, RunError>>,
    started: Instant,
    /// How it ended and how long it all took (the proof included).
    ended: Option<(Ended, Duration)>,
    /// Stop was pressed (the next press kills).
    stop_sent: bool,
    /// Where the timeline of the run is to be seen while it runs.
    timeline_note: &'static str,
}

/// What the panel asks of the app.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PanelAction {
    None,
    /// Close the panel (the run has ended).
    Close,
}

impl CommandRun {
    /// Starts `request` on `runner`; `live_timeline` says whether the app samples the GPUs live
    /// (then the Timeline shows the job as it runs).
    pub fn start(runner: &Runner, request: RunRequest, live_timeline: bool) -> CommandRun {
        let told = Arc::new(Mutex::new(Told::default()));
        let teller = Teller {
            told: Arc::clone(&told),
            ctx: runner.ctx().clone(),
        };
        let forwarder = Forwarder::default();
        let mut options = request.options.clone();
        let line_teller = teller.clone();
        options.output = Some(LineSink::new(move |line| line_teller.line(line)));
        let prove = request.prove.clone();
        let thread_forwarder = forwarder.clone();
        let job = runner.spawn(&format!("running {}", request.command_line), move |_| {
            let mut teller = teller;
            run_and_conclude(&options, &prove, &thread_forwarder, &mut teller)
        });
        CommandRun {
            request,
            forwarder,
            told,
            job,
            started: Instant::now(),
            ended: None,
            stop_sent: false,
            timeline_note: if live_timeline {
                "The Timeline shows the GPUs live while the job runs."
            } else {
                "This window samples no GPU live: the run's timeline opens when it ends."
            },
        }
    }

    /// Whether the run (the job, and any diagnosis and proof after it) is still going.
    pub fn is_running(&self) -> bool {
        self.ended.is_none()
    }

    /// The exit status, once the run has ended: the job's, or the shell's for a command that
    /// could not start (127 not found, 126 not executable).
    pub fn exit_status(&self) -> Option<i32> {
        match &self.ended {
            Some((Ended::Ran(exit), _)) => Some(exit.status),
            Some((Ended::NotStarted { status, .. }, _)) => Some(i32::from(*status)),
            Some((Ended::Lost(_), _)) | None => None,
        }
    }

    /// The proof's re-runs that ended, in order.
    pub fn proof(&self) -> Vec<ProofRun> {
        self.told
            .lock()
            .map(|t| t.proof.clone())
            .unwrap_or_default()
    }

    /// Ctrl+C for the job: SIGINT to its process group (and no more proof re-runs).
    pub fn stop(&mut self) {
        self.forwarder.interrupt();
        self.stop_sent = true;
    }

    /// Takes in the run's end; returns the run folder to open, once, when the job ran.
    pub fn poll(&mut self) -> Option<PathBuf> {
        if self.ended.is_some() {
            return None;
        }
        let (ended, folder) = match self.job.poll() {
            Poll::Running => return None,
            Poll::Done(Ok(outcome)) => (Ended::Ran(outcome.manifest.exit), Some(outcome.folder)),
            Poll::Done(Err(e)) => (
                Ended::NotStarted {
                    why: e.to_string(),
                    status: e.exit_status(),
                },
                None,
            ),
            Poll::Lost(why) => (Ended::Lost(why), None),
        };
        self.ended = Some((ended, self.started.elapsed()));
        folder
    }

    /// Asks a run still going to stop (the app is closing): as Stop does.
    pub fn shut_down(&mut self) {
        if self.is_running() {
            self.stop();
        }
    }

    /// The panel: the command, its state, Stop or Close, the notes, the proof table, the
    /// diagnosis and the output.
    pub fn ui(&mut self, ui: &mut egui::Ui) -> PanelAction {
        let mut action = PanelAction::None;
        let Ok(told) = self.told.lock().map(|t| TellingSnapshot::of(&t)) else {
            return action;
        };
        ui.horizontal(|ui| {
            ui.label(RichText::new(format!("Run: {}", self.request.command_line)).strong());
            ui.separator();
            let (status, failed) = self.status_text(&told);
            let status = RichText::new(status);
            ui.label(if failed {
                status.color(ui.visuals().error_fg_color)
            } else {
                status
            });
            action = self.buttons_ui(ui);
        });
        if self.is_running() {
            // The clock ticks.
            ui.ctx().request_repaint_after(Duration::from_secs(1));
        }
        // The details take at most half the panel; the output has the rest.
        egui::ScrollArea::both()
            .id_salt("run_details")
            .auto_shrink([false, true])
            .max_height(ui.available_height() * 0.5)
            .show(ui, |ui| self.details_ui(ui, &told));
        ui.separator();
        output_ui(ui, &told.lines, told.lines_dropped);
        action
    }

    /// Where the timeline is, the proof table, the diagnosis and the run's notes.
    fn details_ui(&self, ui: &mut egui::Ui, told: &TellingSnapshot) {
        if self.is_running() {
            ui.label(RichText::new(self.timeline_note).weak());
        }
        if !told.candidates.is_empty() {
            proof_table_ui(ui, &told.candidates, &told.proof, self.is_running());
        }
        for (title, recommendation) in &told.diagnosis {
            ui.label(format!("Diagnosis: {title}"));
            if let Some(recommendation) = recommendation {
                ui.label(format!("    Recommended: {recommendation}"));
            }
        }
        for note in &told.notes {
            ui.label(RichText::new(note).weak());
        }
    }

    /// Stop (then Kill) while running, Close once ended.
    fn buttons_ui(&mut self, ui: &mut egui::Ui) -> PanelAction {
        if !self.is_running() {
            return if ui
                .button("Close")
                .on_hover_text("Close this panel")
                .clicked()
            {
                PanelAction::Close
            } else {
                PanelAction::None
            };
        }
        if !self.stop_sent {
            if ui
                .button("Stop")
                .on_hover_text("Ctrl+C for the job: SIGINT to its whole process group")
                .clicked()
            {
                self.stop();
            }
        } else if ui
            .button("Kill")
            .on_hover_text("For a job that ignores Ctrl+C: SIGKILL to its whole process group")
            .clicked()
        {
            self.forwarder.kill();
        }
        PanelAction::None
    }

    /// The state in words ("running · 0:12", "exit status 3 after 0:02", "command not found:
    /// x (exit status 127)"), and whether it is a failure.
    fn status_text(&self, told: &TellingSnapshot) -> (String, bool) {
        let clock = |d: Duration| crate::format::format_elapsed_secs(d.as_secs_f64());
        match &self.ended {
            None => {
                let elapsed = clock(self.started.elapsed());
                let doing = match (&told.job_exit, told.candidates.len()) {
                    (None, _) if self.stop_sent => "stopping".to_owned(),
                    (None, _) => "running".to_owned(),
                    (Some(exit), 0) => format!("{} · diagnosing", exit_text(exit)),
                    (Some(exit), n) => format!(
                        "{} · proving a fix: {} of {n} re-runs done",
                        exit_text(exit),
                        told.proof.len()
                    ),
                };
                (format!("{doing} · {elapsed}"), false)
            }
            Some((Ended::Ran(exit), took)) => {
                let stopped = if self.stop_sent { "stopped · " } else { "" };
                (
                    format!("{stopped}{} · after {}", exit_text(exit), clock(*took)),
                    !exit.succeeded(),
                )
            }
            Some((Ended::NotStarted { why, status }, _)) => {
                (format!("{why} (exit status {status})"), true)
            }
            Some((Ended::Lost(why), _)) => (why.clone(), true),
        }
    }
}

/// What the panel draws of [`Told`], copied so that the lock is not held while drawing.
struct TellingSnapshot {
    lines: Vec<String>,
    lines_dropped: usize,
    notes: Vec<String>,
    job_exit: Option<RunExit>,
    candidates: Vec<String>,
    proof: Vec<ProofRun>,
    diagnosis: Vec<(String, Option<String>)>,
}

impl TellingSnapshot {
    fn of(told: &Told) -> Self {
        TellingSnapshot {
            lines: told.lines.iter().cloned().collect(),
            lines_dropped: told.lines_dropped,
            notes: told.notes.clone(),
            job_exit: told.job_exit.clone(),
            candidates: told.candidates.clone(),
            proof: told.proof.clone(),
            diagnosis: told.diagnosis.clone(),
        }
    }
}

/// "exit status 0 (succeeded)", "exit status 3", "ended by signal 9 (exit status 137)".
fn exit_text(exit: &RunExit) -> String {
    match (exit.code, exit.signal) {
        (Some(0), _) => "exit status 0 (succeeded)".to_owned(),
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("ended by signal {signal} (exit status {})", exit.status),
        (None, None) => format!("exit status {}", exit.status),
    }
}

/// A proof outcome in words.
fn outcome_text(run: &ProofRun) -> String {
    match run.outcome.as_str() {
        "removed" => "removed the failure".to_owned(),
        "ran_out" => match run.ran_out_at_allocation {
            Some(n) => format!("ran out at allocation {n}"),
            None => "ran out".to_owned(),
        },
        "undecided" => "not decided within the budget".to_owned(),
        other => other.to_owned(),
    }
}

/// The proof table: a row per candidate, filled in as its re-run ends; while the proof runs,
/// the next candidate says "running…" and the later ones "waiting".
fn proof_table_ui(ui: &mut egui::Ui, candidates: &[String], proof: &[ProofRun], running: bool) {
    ui.label(RichText::new("Proof: the job re-run under each candidate fix").strong());
    egui::Grid::new("proof_table")
        .striped(true)
        .num_columns(6)
        .show(ui, |ui| {
            for header in [
                "Change",
                "Outcome",
                "Peak reserved",
                "Speed",
                "Time",
                "Replay's prediction",
            ] {
                ui.label(RichText::new(header).strong());
            }
            ui.end_row();
            for run in proof {
                ui.label(&run.change);
                let outcome = RichText::new(outcome_text(run));
                let outcome = ui.label(match run.outcome.as_str() {
                    "removed" => outcome.color(Color32::from_rgb(0x4a, 0xb0, 0x5a)),
                    "ran_out" => outcome.color(ui.visuals().error_fg_color),
                    _ => outcome,
                });
                if let Some(why) = &run.ended_by {
                    outcome.on_hover_text(format!("ended by: {why}"));
                }
                ui.label(run.peak_reserved_bytes.map_or("?".to_owned(), format_bytes));
                ui.label(run.speed_text());
                ui.label(format!("{:.0} s", run.seconds));
                ui.label(run.replay_prediction.as_deref().unwrap_or("–"));
                ui.end_row();
            }
            if running {
                for (i, change) in candidates.iter().enumerate().skip(proof.len()) {
                    ui.label(change);
                    ui.label(
                        RichText::new(if i == proof.len() {
                            "running…"
                        } else {
                            "waiting"
                        })
                        .weak(),
                    );
                    ui.end_row();
                }
            }
        });
}

/// The job's last output lines, the newest at the bottom and kept in view.
fn output_ui(ui: &mut egui::Ui, lines: &[String], dropped: usize) {
    if dropped > 0 {
        ui.label(
            RichText::new(format!(
                "{dropped} earlier line(s) are in the run folder's output.log"
            ))
            .weak(),
        );
    }
    // One row per line (not wrapped), so that only the rows in view are laid out. The area
    // fills the panel even while empty: a resizable panel keeps the size its content took.
    let row_height = ui.text_style_height(&egui::TextStyle::Monospace);
    egui::ScrollArea::both()
        .id_salt("run_output")
        .auto_shrink([false, false])
        .stick_to_bottom(true)
        .show_rows(ui, row_height, lines.len().max(1), |ui, rows| {
            if lines.is_empty() {
                ui.label(RichText::new("No output yet.").weak());
                return;
            }
            for line in lines.get(rows).unwrap_or_default() {
                ui.add(
                    egui::Label::new(RichText::new(line).monospace())
                        .wrap_mode(egui::TextWrapMode::Extend),
                );
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_and_outcomes_read_as_words() {
        let exit = |code, signal, status| RunExit {
            code,
            signal,
            status,
        };
        assert_eq!(
            exit_text(&exit(Some(0), None, 0)),
            "exit status 0 (succeeded)"
        );
        assert_eq!(exit_text(&exit(Some(3), None, 3)), "exit status 3");
        assert_eq!(
            exit_text(&exit(None, Some(9), 137)),
            "ended by signal 9 (exit status 137)"
        );
        let run = |outcome: &str, at| ProofRun {
            outcome: outcome.to_owned(),
            ran_out_at_allocation: at,
            ..ProofRun::default()
        };
        assert_eq!(outcome_text(&run("removed", None)), "removed the failure");
        assert_eq!(
            outcome_text(&run("ran_out", Some(862))),
            "ran out at allocation 862"
        );
        assert_eq!(
            outcome_text(&run("undecided", None)),
            "not decided within the budget"
        );
        assert_eq!(
            outcome_text(&run("failed: command not found: x", None)),
            "failed: command not found: x"
        );
    }
}
