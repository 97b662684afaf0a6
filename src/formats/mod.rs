//! Readers and writers of files: `.vramcap` captures and PyTorch allocator snapshots.

pub mod pytorch;
pub mod vramcap;
