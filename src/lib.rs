//! vramscope: a GPU-memory profiler and doctor.
//!
//! Data flows one way: a [`source`] or a file in [`formats`] produces the [`model`]; [`analysis`]
//! derives views from it; [`ui`] draws them. Only `ui` knows egui; only `source` (and `cuda`)
//! touch NVML or CUDA, and those are native-only (feature `native`) so that the web viewer builds
//! without them.

pub mod analysis;
#[cfg(feature = "native")]
pub mod cli;
#[cfg(feature = "native")]
pub mod cuda;
pub mod diagnose;
pub mod formats;
pub mod model;
pub mod report;
pub mod source;
#[cfg(test)]
pub(crate) mod test_fixtures;
pub mod ui;
#[cfg(target_arch = "wasm32")]
pub mod web;
