//! Code shared by the allocator integration tests. Each test binary uses a different part of it.
#![allow(
    dead_code,
    reason = "each test binary uses a different part of this module"
)]

pub mod readers;
pub mod synthetic_allocator;
