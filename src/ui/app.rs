//! The eframe app.
