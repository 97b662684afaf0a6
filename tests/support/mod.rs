//! Code shared by the integration tests (`tests/all`): the table of readers of outside bytes
//! (also compiled into the fuzz target), a synthetic allocator (also used by a bench), running
//! the binary and driving the app.

pub mod cli;
pub mod readers;
pub mod synthetic_allocator;
pub mod ui;
