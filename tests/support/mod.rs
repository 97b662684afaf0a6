//! Code shared by the allocator integration tests. Each test binary uses a different part of it.
#![allow(dead_code)]

pub mod synthetic_allocator;
