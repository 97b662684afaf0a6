//! What the app is showing: a live source (sampled on a background thread) or an opened file, with
//! its capture, the timeline's derived data and, for live sources, the sampler and the recorder.
//!
//! Kept apart from egui drawing so that the logic (ingesting batches, recording, annotations) can
//! be tested without a window.

#[cfg(feature = "native")]
use std::path::{Path, PathBuf};

use vramscope_core::diagnose::alerts::{AlertChange, LiveAlerts};
use vramscope_core::model::{Capture, Event, EventKind, SampleBatch, UnixMs};

use super::timeline::data::TimelineData;

#[cfg(feature = "native")]
use vramscope_core::formats::vramcap::{Recorder, RecorderStatus};
#[cfg(feature = "native")]
use vramscope_core::source::Source;
#[cfg(feature = "native")]
use vramscope_gpu::sampler::{Sampler, SamplerConfig};

/// Where a session's data comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionOrigin {
    /// Live sampling of this machine (real GPUs or the simulated demo machine).
    Live {
        /// Why the demo machine is shown instead of real GPUs (`None` for real GPUs).
        demo_notice: Option<String>,
    },
    /// A file opened from disk or dropped on the window.
    File {
        /// The file's name, as shown in the top bar.
        file_name: String,
    },
}

/// A capture prepared off the UI thread: the capture and the timeline's series built from it.
pub struct PreparedCapture {
    pub capture: Capture,
    pub timeline: TimelineData,
}

impl PreparedCapture {
    /// Builds the timeline series for `capture` (O(samples); call it on a background thread).
    pub fn new(capture: Capture) -> Self {
        let timeline = TimelineData::build(&capture);
        PreparedCapture { capture, timeline }
    }
}

/// A recording in progress: batches go to a `.vramcap` file on the recorder's writer thread.
#[cfg(feature = "native")]
struct ActiveRecording {
    path: PathBuf,
    recorder: Recorder,
}

/// One source of data being shown.
pub struct Session {
    pub origin: SessionOrigin,
    pub capture: Capture,
    pub timeline: TimelineData,
    /// Notes added here that no file holds yet (not written by an active recording, not saved
    /// since): quitting asks before dropping them.
    pub unsaved_notes: usize,
    #[cfg(feature = "native")]
    sampler: Option<Sampler>,
    #[cfg(feature = "native")]
    recording: Option<ActiveRecording>,
    /// The demo machine's pace, when this session samples it.
    #[cfg(feature = "native")]
    demo_pace: Option<vramscope_core::source::demo::DemoPace>,
    /// The alert conditions on the live readings, and what they raised since last taken.
    alerts: Option<LiveAlerts>,
    alert_changes: Vec<AlertChange>,
}

impl Session {
    /// A session showing an already prepared capture (an opened file).
    pub fn from_prepared(origin: SessionOrigin, prepared: PreparedCapture) -> Self {
        Session {
            origin,
            capture: prepared.capture,
            timeline: prepared.timeline,
            unsaved_notes: 0,
            #[cfg(feature = "native")]
            sampler: None,
            #[cfg(feature = "native")]
            recording: None,
            #[cfg(feature = "native")]
            demo_pace: None,
            alerts: None,
            alert_changes: Vec::new(),
        }
    }

    /// Starts sampling `source` on a background thread. `on_batch` runs on that thread after each
    /// batch (the app passes `ctx.request_repaint`), so the UI wakes up only when data arrives.
    #[cfg(feature = "native")]
    pub fn live(
        source: Box<dyn Source>,
        demo_notice: Option<String>,
        sampling_interval_ms: u32,
        on_batch: Box<dyn Fn() + Send>,
    ) -> Self {
        let mut source = source;
        let history = source.take_history();
        let demo_pace = source.demo_pace();
        let sampler = Sampler::spawn(
            source,
            SamplerConfig {
                fast_interval_ms: sampling_interval_ms,
                ..Default::default()
            },
            on_batch,
        );
        let description = sampler.description().clone();
        let capture =
            history.unwrap_or_else(|| Capture::new(description.meta, description.devices));
        let timeline = TimelineData::build(&capture);
        let alerts = LiveAlerts::new(
            vramscope_core::diagnose::alerts::LiveAlertSettings {
                threshold_fraction: vramscope_core::diagnose::alerts::DEFAULT_THRESHOLD_PCT / 100.0,
                diagnose_hint: "Diagnose › Live (or vramscope diagnose --live)".to_owned(),
            },
            &capture.meta.host,
            &capture.devices,
        );
        Session {
            origin: SessionOrigin::Live { demo_notice },
            capture,
            timeline,
            unsaved_notes: 0,
            sampler: Some(sampler),
            recording: None,
            demo_pace,
            alerts: Some(alerts),
            alert_changes: Vec::new(),
        }
    }

    /// The pace of the simulated demo machine this session samples (`None` for real GPUs and
    /// files).
    #[cfg(feature = "native")]
    pub fn demo_pace(&self) -> Option<&vramscope_core::source::demo::DemoPace> {
        self.demo_pace.as_ref()
    }

    /// Whether samples are still arriving.
    pub fn is_live(&self) -> bool {
        matches!(self.origin, SessionOrigin::Live { .. })
    }

    /// Whether the data is simulated (the demo machine, or a file recorded from it).
    pub fn is_simulated(&self) -> bool {
        self.capture.is_simulated()
            || matches!(
                &self.origin,
                SessionOrigin::Live {
                    demo_notice: Some(_)
                }
            )
    }

    /// Short name of the source for the top bar and the window title.
    pub fn label(&self) -> String {
        match &self.origin {
            SessionOrigin::Live { demo_notice: None }
                if self.capture.meta.source == vramscope_core::model::SourceKind::Prometheus =>
            {
                format!("Prometheus {}", self.capture.meta.host)
            }
            SessionOrigin::Live { demo_notice: None } => "live GPUs".to_owned(),
            SessionOrigin::Live {
                demo_notice: Some(_),
            } => "demo machine".to_owned(),
            SessionOrigin::File { file_name } => file_name.clone(),
        }
    }

    /// Takes in what the sampler produced since the last call: into the capture, the timeline and
    /// the recording. Returns whether anything arrived. Never blocks.
    pub fn poll(&mut self) -> bool {
        #[cfg(feature = "native")]
        {
            let Some(sampler) = &self.sampler else {
                return false;
            };
            let batches = sampler.drain();
            if batches.is_empty() {
                return false;
            }
            for batch in &batches {
                self.ingest(batch);
            }
            self.timeline.extend(&self.capture);
            true
        }
        #[cfg(not(feature = "native"))]
        {
            false
        }
    }

    /// Adds one batch to the capture and to the recording, if one is running, and evaluates the
    /// alert conditions on it.
    fn ingest(&mut self, batch: &SampleBatch) {
        self.capture.ingest(batch);
        if let Some(alerts) = &mut self.alerts {
            self.alert_changes.extend(alerts.apply(batch));
        }
        #[cfg(feature = "native")]
        if let Some(recording) = &self.recording {
            recording.recorder.push(batch);
        }
    }

    /// The alerts that started or ended since the last call.
    pub fn take_alert_changes(&mut self) -> Vec<AlertChange> {
        std::mem::take(&mut self.alert_changes)
    }

    /// The threshold of the live alerts (the one the timeline draws).
    pub fn set_alert_threshold(&mut self, fraction: f64) {
        if let Some(alerts) = &mut self.alerts {
            alerts.set_threshold_fraction(fraction);
        }
    }

    /// Changes the live sampling interval (takes effect on the next tick).
    #[cfg(feature = "native")]
    pub fn set_sampling_interval(&self, interval_ms: u32) {
        if let Some(sampler) = &self.sampler {
            sampler.set_config(SamplerConfig {
                fast_interval_ms: interval_ms,
                ..Default::default()
            });
        }
    }

    /// Adds a note at `t_ms` (stored as `Event::Annotation`, machine-wide) and records it too.
    pub fn add_annotation(&mut self, text: &str, t_ms: UnixMs) {
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        let batch = SampleBatch {
            events: vec![Event {
                t_ms,
                device_index: None,
                kind: EventKind::Annotation {
                    text: text.to_owned(),
                },
            }],
            ..Default::default()
        };
        self.ingest(&batch);
        // A running recording writes the note to its file; otherwise no file holds it yet.
        #[cfg(feature = "native")]
        let recorded = self.recording.is_some();
        #[cfg(not(feature = "native"))]
        let recorded = false;
        if !recorded {
            self.unsaved_notes += 1;
        }
    }

    /// Starts writing everything sampled from now on to `path`. Live sessions only.
    #[cfg(feature = "native")]
    pub fn start_recording(&mut self, path: &Path) -> Result<(), String> {
        if !self.is_live() {
            return Err(
                "only a live source can be recorded; use File › Save as… to copy a capture"
                    .to_owned(),
            );
        }
        if self.recording.is_some() {
            return Err("already recording".to_owned());
        }
        let mut meta = self.capture.meta.clone();
        meta.started_ms = vramscope_core::model::now_unix_ms();
        let recorder =
            Recorder::create(path, &meta, &self.capture.devices).map_err(|err| err.to_string())?;
        self.recording = Some(ActiveRecording {
            path: path.to_owned(),
            recorder,
        });
        Ok(())
    }

    /// Stops the recording (flushing and closing the file); returns its path and final status.
    #[cfg(feature = "native")]
    pub fn stop_recording(&mut self) -> Option<(PathBuf, Result<RecorderStatus, String>)> {
        let recording = self.recording.take()?;
        let result = recording.recorder.finish().map_err(|err| err.to_string());
        Some((recording.path, result))
    }

    /// The running recording's file and progress.
    #[cfg(feature = "native")]
    pub fn recording_status(&self) -> Option<(&Path, RecorderStatus)> {
        self.recording
            .as_ref()
            .map(|recording| (recording.path.as_path(), recording.recorder.status()))
    }

    /// Stops sampling and recording (when the app closes or the session is closed).
    pub fn shutdown(&mut self) -> Option<String> {
        #[cfg(feature = "native")]
        {
            if let Some(sampler) = self.sampler.take() {
                sampler.stop();
            }
            match self.stop_recording() {
                Some((path, Err(err))) => Some(format!(
                    "{}: recording did not finish cleanly: {err}",
                    path.display()
                )),
                _ => None,
            }
        }
        #[cfg(not(feature = "native"))]
        {
            None
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(problem) = self.shutdown() {
            log::error!("{problem}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramscope_core::model::{
        CaptureMeta, DeviceFacts, DeviceSample, MemoryReading, SourceKind,
    };

    fn file_session(source: SourceKind) -> Session {
        let mut capture = Capture::new(
            CaptureMeta {
                source,
                ..Default::default()
            },
            vec![DeviceFacts::default()],
        );
        capture.ingest(&SampleBatch {
            devices: vec![DeviceSample {
                t_ms: 5000,
                memory: Some(MemoryReading {
                    used_bytes: 1,
                    reserved_bytes: 1,
                    free_bytes: 1,
                    total_bytes: 3,
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        Session::from_prepared(
            SessionOrigin::File {
                file_name: "run.vramcap".to_owned(),
            },
            PreparedCapture::new(capture),
        )
    }

    #[test]
    fn file_sessions_are_not_live_and_say_their_name() {
        let session = file_session(SourceKind::Live);
        assert!(!session.is_live());
        assert!(!session.is_simulated());
        assert_eq!(session.label(), "run.vramcap");
        assert_eq!(session.timeline.device(0).map(|d| d.x_secs.len()), Some(1));
        assert!(file_session(SourceKind::Demo).is_simulated());
    }

    #[test]
    fn annotations_become_events_and_blank_ones_are_ignored() {
        let mut session = file_session(SourceKind::Live);
        session.add_annotation("   ", 5000);
        session.add_annotation(" checkpoint saved ", 5100);
        assert_eq!(
            session.capture.events,
            vec![Event {
                t_ms: 5100,
                device_index: None,
                kind: EventKind::Annotation {
                    text: "checkpoint saved".to_owned()
                },
            }]
        );
    }

    #[cfg(feature = "native")]
    #[test]
    fn live_demo_session_receives_batches_and_records_them() {
        use vramscope_core::source::demo::DemoSource;
        let notice = Some("test".to_owned());
        let mut session = Session::live(
            Box::new(DemoSource::new(1_000_000)),
            notice,
            20,
            Box::new(|| {}),
        );
        assert!(session.is_live() && session.is_simulated());
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("live.vramcap");
        session.start_recording(&path).expect("recording starts");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while session.capture.sample_count() < 10 && std::time::Instant::now() < deadline {
            session.poll();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(session.capture.sample_count() >= 10, "samples arrive");
        assert_eq!(
            session.timeline.device(0).map(|d| d.x_secs.len()),
            session.capture.series(0).map(|s| s.len()),
            "timeline follows the capture"
        );
        let (recorded_path, status) = session.stop_recording().expect("was recording");
        assert_eq!(recorded_path, path);
        let status = status.expect("recording finished cleanly");
        assert!(status.samples_written > 0);
        let reopened = vramscope_core::formats::vramcap::read_file(&path).expect("recording opens");
        assert!(reopened.is_simulated());
        assert!(reopened.sample_count() > 0);
    }
}
