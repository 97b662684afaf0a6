//! PyTorch CUDA caching-allocator snapshots (`torch.cuda.memory._dump_snapshot()`), read safely
//! and fast into [`crate::model::allocator::AllocatorSnapshot`].
//!
//! Accepts pickles of protocol 0 to 5 from Python's `pickle` and TorchScript's `Pickler`, the
//! JSON form, the legacy bare list of segments, and every format vintage (reference
//! `pytorch-snapshots.md` §1.8). Unknown keys and actions are kept or ignored, never fatal.
//!
//! The reader never runs code from the file: a pickle that references a Python class is refused.
//! Truncated, damaged or hostile input ends in a [`SnapshotError`] that names the file, the
//! problem and the byte offset, using memory and time bounded by the input size.

mod build;
mod json;
mod pickle;

use std::path::Path;

use thiserror::Error;

use crate::model::allocator::{AllocatorSnapshot, SnapshotContainer};
use build::{Builder, NotSnapshot};
use pickle::VmError;

/// Why a snapshot could not be read.
#[derive(Debug, Error)]
pub enum SnapshotError {
    /// The file could not be read at all.
    #[error("{name}: cannot read the file: {source}")]
    Io {
        name: String,
        #[source]
        source: std::io::Error,
    },
    /// The file ends in the middle of the data (an interrupted copy or dump).
    #[error("{name}: the file is truncated at byte {offset}: {problem}")]
    Truncated {
        name: String,
        offset: u64,
        problem: String,
    },
    /// The bytes are damaged or are not a pickle/JSON at all.
    #[error("{name}: damaged at byte {offset}: {problem}")]
    Malformed {
        name: String,
        offset: u64,
        problem: String,
    },
    /// A readable file that does not hold a memory snapshot (including pickles that reference
    /// Python classes, which snapshots never do and which would run code in Python).
    #[error("{name}: not a memory snapshot: {reason}")]
    NotASnapshot { name: String, reason: String },
    /// The progress callback asked to stop.
    #[error("{name}: reading was cancelled")]
    Cancelled { name: String },
}

/// Quick check of the first bytes of a file, so the app can route dropped files: true for a
/// pickle or JSON document that starts like a memory snapshot.
pub fn looks_like_snapshot(bytes_prefix: &[u8]) -> bool {
    let window = &bytes_prefix[..bytes_prefix.len().min(512)];
    let mentions = |needle: &[u8]| window.windows(needle.len()).any(|w| w == needle);
    let snapshot_words = mentions(b"segments")
        || mentions(b"device_traces")
        || mentions(b"total_size")
        || mentions(b"blocks");
    match window.first() {
        Some(0x80) => matches!(window.get(1), Some(2..=5)) && snapshot_words,
        Some(_) => {
            let text = window.iter().skip_while(|b| b.is_ascii_whitespace());
            matches!(text.clone().next(), Some(b'{') | Some(b'[')) && snapshot_words
        }
        None => false,
    }
}

/// Reads a snapshot from memory. `name` is used in messages; `progress` gets the fraction done
/// (0 to 1) now and then and returns false to cancel.
pub fn read_bytes(
    bytes: &[u8],
    name: &str,
    progress: &dyn Fn(f32) -> bool,
) -> Result<AllocatorSnapshot, SnapshotError> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    let mut builder = Builder::new(bytes.len());
    let (root, container) = match (bytes.first(), first) {
        (Some(0x80), _) | (_, Some(b'}')) | (_, Some(b']')) | (_, Some(b'(')) => {
            pickle_root(bytes, name, &mut builder, progress)?
        }
        (_, Some(b'{')) | (_, Some(b'[')) => {
            let root = json::decode(bytes, &mut builder).map_err(|e| json_error(name, e))?;
            (root, SnapshotContainer::Json)
        }
        (None, _) | (_, None) => {
            return Err(SnapshotError::NotASnapshot {
                name: name.to_owned(),
                reason: "the file is empty".to_owned(),
            });
        }
        _ => {
            return Err(SnapshotError::NotASnapshot {
                name: name.to_owned(),
                reason: "it is neither a pickle nor JSON".to_owned(),
            });
        }
    };
    if !progress(1.0) {
        return Err(SnapshotError::Cancelled {
            name: name.to_owned(),
        });
    }
    builder
        .finish(root, name, container)
        .map_err(|problem| match problem {
            NotSnapshot::NotSnapshot(reason) => SnapshotError::NotASnapshot {
                name: name.to_owned(),
                reason,
            },
            NotSnapshot::Malformed(problem) => SnapshotError::Malformed {
                name: name.to_owned(),
                offset: bytes.len() as u64,
                problem,
            },
        })
}

fn pickle_root(
    bytes: &[u8],
    name: &str,
    builder: &mut Builder,
    progress: &dyn Fn(f32) -> bool,
) -> Result<(build::Value, SnapshotContainer), SnapshotError> {
    let name = name.to_owned();
    match pickle::decode(bytes, builder, progress) {
        Ok((root, protocol)) => Ok((root, SnapshotContainer::Pickle { protocol })),
        Err(VmError::Cancelled) => Err(SnapshotError::Cancelled { name }),
        Err(VmError::Truncated { offset, problem }) => Err(SnapshotError::Truncated {
            name,
            offset,
            problem,
        }),
        Err(VmError::Malformed { offset, problem }) => Err(SnapshotError::Malformed {
            name,
            offset,
            problem,
        }),
        Err(VmError::Code { offset, what }) => Err(SnapshotError::NotASnapshot {
            name,
            reason: format!(
                "the pickle references {what} at byte {offset}; memory snapshots hold only \
                 plain data, and vramscope never runs code from a file"
            ),
        }),
    }
}

fn json_error(name: &str, error: json::JsonError) -> SnapshotError {
    match error {
        json::JsonError::Syntax {
            line,
            column,
            problem,
            eof,
        } if eof => SnapshotError::Truncated {
            name: name.to_owned(),
            offset: 0,
            problem: format!("JSON ends early at line {line}, column {column}: {problem}"),
        },
        json::JsonError::Syntax {
            line,
            column,
            problem,
            ..
        } => SnapshotError::Malformed {
            name: name.to_owned(),
            offset: 0,
            problem: format!("bad JSON at line {line}, column {column}: {problem}"),
        },
        json::JsonError::Build(problem) => SnapshotError::Malformed {
            name: name.to_owned(),
            offset: 0,
            problem,
        },
    }
}

/// Reads a snapshot file (see [`read_bytes`]).
pub fn read_file(
    path: &Path,
    progress: &dyn Fn(f32) -> bool,
) -> Result<AllocatorSnapshot, SnapshotError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| SnapshotError::Io {
        name: name.clone(),
        source,
    })?;
    read_bytes(&bytes, &name, progress)
}
