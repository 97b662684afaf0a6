//! Prometheus as a source, both ways: `vramscope exporter` serves the sampler's readings for
//! Prometheus to scrape ([`exposition`], `exporter`); the range reader turns a server's GPU
//! series (dcgm-exporter, nvitop-exporter, vramscope's own) into the same [`Capture`] every view,
//! report and rule works on ([`reader`]), once (`vramscope pull`, `diagnose --prometheus`) or
//! following the server live in the GUI ([`PrometheusSource`]). The HTTP ends (the client and
//! the exporter) live in the GPU crate; reading the API's answers ([`api`]) and the series
//! ([`reader`]) is here, so that they are fuzzed like every reader of outside bytes.

pub mod api;
pub mod exposition;
pub mod reader;

use std::time::Duration;

use api::PrometheusError;
use reader::{FleetReader, ReadProgress, StepRange};

use super::{Source, SourceDescription, Tiers};
use crate::model::{Capture, SampleBatch, UnixMs};

/// Shortest step the GUI follows a server at: Prometheus scrapes every 15 to 60 s, so asking
/// more often only repeats the same answer.
pub const MIN_FOLLOW_STEP: Duration = Duration::from_secs(5);

/// Reads `range` of the reader's server into a new capture (the devices are the GPUs found).
pub fn pull(
    reader: &mut FleetReader,
    range: &StepRange,
    progress: &mut dyn FnMut(ReadProgress),
) -> Result<Capture, PrometheusError> {
    let batches = reader.read(range, progress)?;
    let mut capture = Capture::new(reader.meta(range), reader.devices().to_vec());
    for batch in batches {
        capture.ingest(&batch);
    }
    Ok(capture)
}

/// A Prometheus server followed live: the history read at start is handed over whole
/// ([`Source::take_history`]), then every poll at least one step later reads the new steps.
pub struct PrometheusSource {
    reader: FleetReader,
    description: SourceDescription,
    history: Option<Capture>,
    step_ms: i64,
    /// The last step already read.
    read_up_to_ms: UnixMs,
    /// Why the last read failed, reported once until a read succeeds again.
    failing: bool,
}

impl PrometheusSource {
    /// Follows the reader's server from the end of `history` (read by [`pull`] with the same
    /// reader), one `range.step_ms` at a time.
    pub fn new(reader: FleetReader, history: Capture, range: &StepRange) -> Self {
        let description = SourceDescription {
            meta: history.meta.clone(),
            devices: history.devices.clone(),
        };
        let read_up_to_ms = range.start_ms + (range.steps() as i64 - 1).max(0) * range.step_ms;
        PrometheusSource {
            reader,
            description,
            history: Some(history),
            step_ms: range.step_ms.max(MIN_FOLLOW_STEP.as_millis() as i64),
            read_up_to_ms,
            failing: false,
        }
    }
}

impl Source for PrometheusSource {
    fn describe(&self) -> SourceDescription {
        self.description.clone()
    }

    fn take_history(&mut self) -> Option<Capture> {
        self.history.take()
    }

    fn poll(&mut self, now_ms: UnixMs, _tiers: Tiers) -> SampleBatch {
        // Prometheus evaluates a step once its window has passed; a step's data is complete a
        // scrape later, so the newest step read lags one step behind now.
        let newest_ms = now_ms - self.step_ms;
        if newest_ms < self.read_up_to_ms + self.step_ms {
            return SampleBatch::default();
        }
        let steps = (newest_ms - self.read_up_to_ms) / self.step_ms;
        let range = StepRange {
            start_ms: self.read_up_to_ms + self.step_ms,
            end_ms: self.read_up_to_ms + steps * self.step_ms,
            step_ms: self.step_ms,
        };
        match self.reader.read(&range, &mut |_| {}) {
            Ok(batches) => {
                self.read_up_to_ms = range.end_ms;
                self.failing = false;
                let mut merged = SampleBatch::default();
                for batch in batches {
                    merged.devices.extend(batch.devices);
                    merged.health.extend(batch.health);
                    merged.events.extend(batch.events);
                    if let Some(processes) = batch.processes {
                        merged
                            .processes
                            .get_or_insert_with(Vec::new)
                            .extend(processes);
                    }
                }
                merged
            }
            Err(err) => {
                if !self.failing {
                    log::warn!("following Prometheus: {err}; retrying every step");
                }
                self.failing = true;
                SampleBatch::default()
            }
        }
    }
}
