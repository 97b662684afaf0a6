//! The repository's real PyTorch snapshots, read for the crates' own unit tests (the integration
//! tests have theirs in `tests/all/support`).

use std::path::PathBuf;

use crate::model::allocator::AllocatorSnapshot;

/// The path of `tests/fixtures/RELATIVE` in the repository.
pub fn fixture_path(relative: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures")).join(relative)
}

/// The path of `tests/fixtures/pytorch/NAME`.
pub fn pytorch_path(name: &str) -> PathBuf {
    fixture_path("pytorch").join(name)
}

/// The snapshot `tests/fixtures/pytorch/NAME`, read whole; a test fails naming the file when it
/// cannot be read.
pub fn pytorch_snapshot(name: &str) -> AllocatorSnapshot {
    let path = pytorch_path(name);
    crate::formats::pytorch::read_file(&path, &|_| true)
        .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}
