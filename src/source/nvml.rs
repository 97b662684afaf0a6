//! NVML source (native only).

use super::{Source, SourceDescription, Tiers};
use crate::model::{SampleBatch, UnixMs};

/// Real GPUs through NVML.
pub struct NvmlSource {}

impl NvmlSource {
    pub fn open() -> Result<Self, String> {
        Err("NVML source not built yet".to_owned())
    }
}

impl Source for NvmlSource {
    fn describe(&self) -> SourceDescription {
        SourceDescription::default()
    }
    fn poll(&mut self, _now_ms: UnixMs, _tiers: Tiers) -> SampleBatch {
        SampleBatch::default()
    }
}
