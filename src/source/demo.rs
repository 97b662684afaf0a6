//! The simulated demo machine.

use super::{Source, SourceDescription, Tiers};
use crate::model::{SampleBatch, UnixMs};

/// A deterministic simulated machine.
pub struct DemoSource {
    start_ms: UnixMs,
}

impl DemoSource {
    pub fn new(start_ms: UnixMs) -> Self {
        DemoSource { start_ms }
    }
}

impl Source for DemoSource {
    fn describe(&self) -> SourceDescription {
        SourceDescription::default()
    }
    fn poll(&mut self, _now_ms: UnixMs, _tiers: Tiers) -> SampleBatch {
        let _ = self.start_ms;
        SampleBatch::default()
    }
}
