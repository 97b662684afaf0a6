//! Readers and writers of files: `.vramcap` captures (and, later, PyTorch allocator snapshots).

pub mod vramcap;
