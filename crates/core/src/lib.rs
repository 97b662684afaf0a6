//! vramscope's core: everything that reads, analyses and judges GPU-memory evidence, with no GUI,
//! NVML or CUDA underneath, so that the desktop app, the command line, `vramscope run` and the web
//! viewer share one engine.
//!
//! Layers, lowest first (a module uses only those before it):
//! [`model`] (plain data, units, the clock) → [`formats`] (readers and writers of files) and
//! [`source`] (the `Source` trait, the simulated demo machine, Prometheus answers) →
//! [`analysis`] (pure functions over the model, the what-if replay included) → [`diagnose`]
//! (every judgement: findings, rules, knowledge tables) → [`report`] (Markdown, HTML, JSON and
//! images of a diagnosis) → [`evidence`] (the one pipeline from files to a diagnosis).
//! The GPU crate (`vramscope-gpu`) and the app crate (`vramscope-app`) sit on top; the compiler
//! keeps them out of here.

pub mod analysis;
pub mod diagnose;
pub mod evidence;
pub mod formats;
pub mod model;
pub mod report;
pub mod source;
#[cfg(any(test, feature = "test-fixtures"))]
pub mod test_fixtures;
