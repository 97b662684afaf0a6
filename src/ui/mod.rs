//! Everything egui: the app, its panels and widgets.

pub mod allocator;
pub mod app;
pub mod wizard;
