//! Code shared by the allocator integration tests.

pub mod synthetic_allocator;
