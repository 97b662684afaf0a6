//! Opening a snapshot in steps, for the web page's single thread (the body of the stepped job
//! that `web_open` starts on the [`super::runner::Runner`]): the file's slices are decoded as
//! they arrive and the analysis runs until a deadline, again and again, so the page can draw and
//! answer Cancel in between. What it gives is what the desktop's one-go read gives (tested here
//! against `jobs::read_path`), so the web viewer shows the same views and numbers.

use std::sync::Arc;

use super::jobs::{OpenOutcome, OpenedSnapshot, outcome};
use super::runner::Progress;
use vramscope_core::analysis::deadline::{Deadline, Step};
use vramscope_core::analysis::snapshot_analysis::{DeviceAnalysis, SnapshotAnalysisBuild};
use vramscope_core::diagnose::snapshot::FactsBuild;
use vramscope_core::evidence::{self, ANALYSING_STAGE};
use vramscope_core::formats::pytorch::SnapshotStream;
use vramscope_core::model::UnixMs;
use vramscope_core::model::allocator::AllocatorSnapshot;

/// Share of the progress bar for reading a snapshot opened in steps; the analysis has the rest.
const STEPPED_READ_SHARE: f32 = 0.9;
/// Where the progress bar stands when the analysis is done and the doctor's facts are made.
const FACTS_FROM: f32 = 0.97;

/// A snapshot opened in steps, for the web page's single thread: [`SnapshotOpening::push`] each
/// slice of the file as it arrives (it is decoded at once, so the file is never held whole), then
/// [`SnapshotOpening::run`] until a deadline, again and again, until the outcome is there. The
/// outcome is what the desktop's one-go read gives for the same file (tested below).
pub struct SnapshotOpening {
    file_name: String,
    /// When the file was last written, which orders snapshots whose trace recorded no times.
    file_modified_ms: Option<UnixMs>,
    stage: OpeningStage,
}

enum OpeningStage {
    Reading(SnapshotStream),
    Analysing {
        snapshot: Arc<AllocatorSnapshot>,
        build: SnapshotAnalysisBuild,
    },
    /// The doctor's facts, a part of a device at a time (they replay the trace).
    Facts {
        snapshot: Arc<AllocatorSnapshot>,
        analysis: Vec<DeviceAnalysis>,
        /// Boxed: a device's facts in the making are large, the other stages small.
        build: Box<FactsBuild>,
    },
}

impl SnapshotOpening {
    /// Starts opening the snapshot `file_name` of `size_bytes` bytes, last written at
    /// `file_modified_ms`.
    pub fn new(file_name: &str, size_bytes: u64, file_modified_ms: Option<UnixMs>) -> Self {
        SnapshotOpening {
            file_name: file_name.to_owned(),
            file_modified_ms,
            stage: OpeningStage::Reading(SnapshotStream::new(file_name, size_bytes)),
        }
    }

    /// Decodes the next slice of the file. An error is the outcome to stop with: the file is
    /// damaged or the user cancelled.
    pub fn push(&mut self, slice: &[u8], progress: &Progress) -> Result<(), OpenOutcome> {
        let OpeningStage::Reading(stream) = &mut self.stage else {
            return Ok(());
        };
        stream
            .push(slice, &|fraction| {
                progress.set_fraction(fraction * STEPPED_READ_SHARE)
            })
            .map_err(|err| outcome(Err(evidence::snapshot_error(err))))?;
        if progress.is_cancelled() {
            return Err(OpenOutcome::Cancelled);
        }
        Ok(())
    }

    /// Once every slice was pushed: works until `deadline` and hands back the outcome, or
    /// itself to run again after the page had its turn.
    pub fn run(mut self, deadline: Deadline, progress: &Progress) -> Step<OpenOutcome, Self> {
        loop {
            self.stage = match self.stage {
                OpeningStage::Reading(stream) => {
                    let read = stream
                        .finish(&|fraction| progress.set_fraction(fraction * STEPPED_READ_SHARE));
                    match read {
                        Ok(snapshot) => {
                            progress.set_stage(ANALYSING_STAGE);
                            let snapshot = Arc::new(snapshot);
                            let build = SnapshotAnalysisBuild::new(Arc::clone(&snapshot));
                            OpeningStage::Analysing { snapshot, build }
                        }
                        Err(err) => return Step::Done(outcome(Err(evidence::snapshot_error(err)))),
                    }
                }
                OpeningStage::Analysing { snapshot, build } => match build.run(deadline) {
                    Step::Done(analysis) if !progress.is_cancelled() => {
                        progress.set_fraction(FACTS_FROM);
                        OpeningStage::Facts {
                            snapshot,
                            analysis,
                            build: Box::default(),
                        }
                    }
                    Step::Done(_) => return Step::Done(OpenOutcome::Cancelled),
                    Step::Pending(build) => {
                        let (done, total) = build.devices_done();
                        let analysed = done as f32 / total.max(1) as f32;
                        let fraction =
                            STEPPED_READ_SHARE + (FACTS_FROM - STEPPED_READ_SHARE) * analysed;
                        if !progress.set_fraction(fraction) {
                            return Step::Done(OpenOutcome::Cancelled);
                        }
                        OpeningStage::Analysing { snapshot, build }
                    }
                },
                OpeningStage::Facts {
                    snapshot,
                    analysis,
                    mut build,
                } => {
                    if progress.is_cancelled() {
                        return Step::Done(OpenOutcome::Cancelled);
                    }
                    if build.step(&snapshot, &analysis) {
                        let mut opened = evidence::OpenedSnapshot::from_parts(
                            snapshot,
                            analysis,
                            build.into_facts(),
                            &self.file_name,
                        );
                        opened.set_file_modified_ms(self.file_modified_ms);
                        return Step::Done(OpenOutcome::Snapshot(Box::new(
                            OpenedSnapshot::judged(opened),
                        )));
                    }
                    OpeningStage::Facts {
                        snapshot,
                        analysis,
                        build,
                    }
                }
            };
            if deadline.passed() {
                return Step::Pending(self);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::jobs::read_path;
    use super::*;

    /// What the viewer shows of an opened snapshot: the model, the per-device analysis the
    /// allocator view draws, and the doctor's facts (with their numbers).
    fn shown(outcome: OpenOutcome) -> String {
        let OpenOutcome::Snapshot(opened) = outcome else {
            panic!("not opened as a snapshot");
        };
        let snapshot = &opened.snapshot;
        let mut text = format!(
            "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n",
            snapshot.devices,
            snapshot.segments,
            snapshot.blocks,
            snapshot.traces,
            snapshot.settings,
            snapshot.warnings
        );
        for device in &opened.analysis {
            let travel = &device.analysis.travel;
            text += &format!(
                "device {} check {:?} allocated {:?} reserved {:?} ooms {:?} verdicts {:?}\n",
                travel.device(),
                travel.check(),
                travel.allocated_series(),
                travel.reserved_series(),
                device.analysis.ooms,
                device.judged
            );
            for position in [0, travel.len() / 2, travel.len()] {
                text += &format!("state at {position}: {:?}\n", travel.state_at(position));
            }
        }
        text + &format!("{:?}", opened.facts)
    }

    /// The web viewer's way to open a snapshot (slices pushed as they arrive, the analysis in
    /// the smallest steps) shows exactly what the desktop's one-go read shows.
    #[test]
    fn a_snapshot_opened_in_steps_shows_what_the_desktop_shows() {
        for name in [
            "frag_oom.pickle",
            "train.pickle",
            "streams.pickle",
            "leak.snapshot.json",
        ] {
            let path = vramscope_core::test_fixtures::pytorch_path(name);
            let progress = Progress::new(egui::Context::default());
            let desktop = shown(read_path(&path, name, &progress));
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
            for slice_bytes in [1 << 10, 4 << 20] {
                let progress = Progress::new(egui::Context::default());
                let mut opening = SnapshotOpening::new(
                    name,
                    bytes.len() as u64,
                    evidence::file_modified_ms(&path),
                );
                for slice in bytes.chunks(slice_bytes) {
                    if opening.push(slice, &progress).is_err() {
                        panic!("{name}: a slice failed");
                    }
                }
                assert_ne!(progress.stage(), ANALYSING_STAGE, "{name}");
                let mut steps = 0;
                let in_steps = loop {
                    match opening.run(Deadline::after(std::time::Duration::ZERO), &progress) {
                        Step::Done(outcome) => break outcome,
                        Step::Pending(more) => opening = more,
                    }
                    steps += 1;
                };
                assert!(steps > 0, "{name} was analysed in one step");
                assert_eq!(progress.stage(), ANALYSING_STAGE, "{name}");
                let web = shown(in_steps);
                if let Some((line, (a, b))) = web
                    .lines()
                    .zip(desktop.lines())
                    .enumerate()
                    .find(|(_, (a, b))| a != b)
                {
                    // Show where the line first differs (a line can be long).
                    let at = a
                        .char_indices()
                        .zip(b.chars())
                        .find(|((_, x), y)| x != y)
                        .map_or(a.len().min(b.len()), |((i, _), _)| i);
                    let from = at.saturating_sub(150);
                    let (a, b) = (a.get(from..).unwrap_or(a), b.get(from..).unwrap_or(b));
                    panic!(
                        "{name} in slices of {slice_bytes} bytes, line {line}, from byte {from}:\nweb:     {a:.300}\ndesktop: {b:.300}"
                    );
                }
                assert_eq!(
                    web.len(),
                    desktop.len(),
                    "{name} in slices of {slice_bytes} bytes"
                );
            }
        }
    }
}
