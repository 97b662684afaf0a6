//! vramscope's app: everything egui, on the desktop and in the browser. It shows what the core
//! (`vramscope-core`) reads and judges and, on the desktop, what the GPU crate samples; it makes no
//! judgement of its own.
//!
//! [`app::VramscopeApp`] is the eframe app; [`session::Session`] holds what it shows (a live source
//! or an opened file) apart from any drawing, so that logic is testable without a window. Panels:
//! [`devices`] (GPU list and health badges), [`fleet`] (one row per GPU of a large capture), [`timeline`] (memory plots with min/max level of
//! detail), [`processes`] (sortable process table), [`notices`] (errors and warnings). The central
//! area switches between the [`views`]: the timeline, the [`allocator`] view of PyTorch snapshots,
//! the diagnosis [`wizard`]s and the [`hardware`] checks.
//!
//! User actions are [`command::UiCommand`]s (no data: menus, shortcuts, the command palette) and
//! [`command::AppEvent`]s (with data, from what a view shows): views send them, and the app runs
//! them in one place. Small state machines keep the app's conversations apart: [`quit`] (unsaved
//! notes) and [`path_prompt`] (file dialogs or a typed path). File › Run a command… (desktop)
//! runs a job as `vramscope run` does and shows it live ([`run_command`]). Work longer
//! than a frame (file reads and writes, the allocator analysis, the GPU checks) runs on the one
//! job [`runner`], with progress and cancel.

pub mod alerting;
pub mod allocator;
pub mod app;
pub mod capture_compare;
pub mod command;
pub mod devices;
pub mod dialogs;
pub mod export;
pub mod fleet;
pub mod format;
#[cfg(feature = "native")]
pub mod hardware;
pub mod jobs;
pub mod nav;
pub mod notices;
pub mod palette;
pub mod path_prompt;
pub mod processes;
pub mod quit;
#[cfg(feature = "native")]
pub mod run_command;
pub mod runner;
pub mod session;
pub mod settings;
#[cfg(any(target_arch = "wasm32", test))]
mod snapshot_opening;
pub mod timeline;
pub mod views;
#[cfg(target_arch = "wasm32")]
mod web_open;

pub use app::{AppOptions, VramscopeApp};
pub mod wizard;
