//! PyTorch CUDA caching-allocator snapshots (`torch.cuda.memory._dump_snapshot()`), read safely
//! and fast into [`crate::model::allocator::AllocatorSnapshot`].
//!
//! Accepts pickles of protocol 0 to 5 from Python's `pickle` and TorchScript's `Pickler`, the
//! JSON form, the legacy bare list of segments, and every format vintage (`docs/sources.md` §
//! "Format vintages"). Unknown keys and actions are kept or ignored, never fatal.
//!
//! The reader never runs code from the file: a pickle that references a Python class is refused.
//! Truncated, damaged or hostile input ends in a [`SnapshotError`] that names the file, the
//! problem and the byte offset, using memory and time bounded by the input size.

mod build;
mod chunked;
mod json;
mod pickle;
mod stream;

use std::io::Read;
use std::path::Path;

use thiserror::Error;

use crate::model::allocator::{AllocatorSnapshot, SnapshotContainer};
use build::{Builder, NotSnapshot};
use pickle::VmError;
pub use stream::SnapshotStream;

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
    match window.iter().find(|b| !b.is_ascii_whitespace()) {
        // PROTO 2..5, protocol 0/1 pickles (MARK, EMPTY_DICT, EMPTY_LIST) and JSON.
        Some(0x80) => matches!(window.get(1), Some(2..=5)) && snapshot_words,
        Some(b'(' | b'}' | b']' | b'{' | b'[') => snapshot_words,
        _ => false,
    }
}

/// Reads a snapshot from memory. `name` is used in messages; `progress` gets the fraction done
/// (0 to 1) now and then and returns false to cancel.
pub fn read_bytes(
    bytes: &[u8],
    name: &str,
    progress: &dyn Fn(f32) -> bool,
) -> Result<AllocatorSnapshot, SnapshotError> {
    match Encoding::sniff(bytes) {
        Encoding::Pickle => {
            let mut reader = bytes;
            let input = pickle::Input::new(&mut reader, bytes.len() as u64);
            read_pickle(input, name, progress)
        }
        Encoding::Json => read_json(bytes, name, progress),
        Encoding::Empty => Err(SnapshotError::NotASnapshot {
            name: name.to_owned(),
            reason: "the file is empty".to_owned(),
        }),
        Encoding::Packed(kind) => Err(SnapshotError::NotASnapshot {
            name: name.to_owned(),
            reason: kind.advice(),
        }),
        Encoding::Other => Err(SnapshotError::NotASnapshot {
            name: name.to_owned(),
            reason: if bytes.starts_with(&crate::formats::vramcap::MAGIC) {
                "it is a vramscope capture, not an allocator snapshot (run `vramscope inspect` on \
                 it, or open it in the app)"
                    .to_owned()
            } else {
                "it is neither a pickle nor JSON".to_owned()
            },
        }),
    }
}

/// Reads a snapshot file (see [`read_bytes`]). Pickles are streamed: the file is never held in
/// memory whole.
pub fn read_file(
    path: &Path,
    progress: &dyn Fn(f32) -> bool,
) -> Result<AllocatorSnapshot, SnapshotError> {
    let name = path.display().to_string();
    let io_error = |source| SnapshotError::Io {
        name: name.clone(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io_error)?;
    let total_len = file.metadata().map_err(io_error)?.len();
    let mut head = Vec::with_capacity(64);
    (&mut file)
        .take(64)
        .read_to_end(&mut head)
        .map_err(io_error)?;
    match Encoding::sniff(&head) {
        Encoding::Pickle => {
            let mut reader = std::io::Cursor::new(head).chain(file);
            let input = pickle::Input::new(&mut reader, total_len);
            read_pickle(input, &name, progress)
        }
        // Says how to unpack it, without reading the rest.
        Encoding::Packed(_) => read_bytes(&head, &name, progress),
        _ => {
            let mut bytes = head;
            file.read_to_end(&mut bytes).map_err(io_error)?;
            read_bytes(&bytes, &name, progress)
        }
    }
}

/// A compressed or archived file a snapshot may have been packed into for sharing, told by its
/// magic number: the error then says how to unpack it.
#[derive(Clone, Copy)]
enum Compression {
    Gzip,
    Xz,
    Zstd,
    Bzip2,
    Zip,
}

impl Compression {
    fn of(bytes: &[u8]) -> Option<Compression> {
        const MAGIC: [(&[u8], Compression); 5] = [
            (&[0x1f, 0x8b], Compression::Gzip),
            (&[0xfd, b'7', b'z', b'X', b'Z', 0], Compression::Xz),
            (&[0x28, 0xb5, 0x2f, 0xfd], Compression::Zstd),
            (b"BZh", Compression::Bzip2),
            (b"PK\x03\x04", Compression::Zip),
        ];
        MAGIC
            .iter()
            .find(|(magic, _)| bytes.starts_with(magic))
            .map(|&(_, kind)| kind)
    }

    fn advice(self) -> String {
        let (format, command) = match self {
            Compression::Gzip => ("gzip", "gunzip -k FILE"),
            Compression::Xz => ("xz", "xz -dk FILE"),
            Compression::Zstd => ("zstd", "zstd -d FILE"),
            Compression::Bzip2 => ("bzip2", "bunzip2 -k FILE"),
            Compression::Zip => {
                return "it is a zip archive (what `torch.save` writes), not a memory snapshot: \
                        write one with `torch.cuda.memory._dump_snapshot(\"FILE.pickle\")`"
                    .to_owned();
            }
        };
        format!("it is {format}-compressed: unpack it first (`{command}`) and open the result")
    }
}

/// What the first bytes say the data is.
enum Encoding {
    Pickle,
    Json,
    Empty,
    /// Compressed or archived: unpacked, it may be a snapshot.
    Packed(Compression),
    Other,
}

impl Encoding {
    fn sniff(bytes: &[u8]) -> Encoding {
        // zstd's magic number starts with `(`, a protocol 0 pickle's MARK.
        if let Some(kind) = Compression::of(bytes) {
            return Encoding::Packed(kind);
        }
        match (
            bytes.first(),
            bytes.iter().find(|b| !b.is_ascii_whitespace()),
        ) {
            (None, _) => Encoding::Empty,
            // PROTO, or a protocol 0/1 pickle's first container.
            (Some(0x80 | b'(' | b'}' | b']'), _) => Encoding::Pickle,
            (_, Some(b'{' | b'[')) => Encoding::Json,
            _ => Encoding::Other,
        }
    }
}

fn read_pickle(
    input: pickle::Input<'_>,
    name: &str,
    progress: &dyn Fn(f32) -> bool,
) -> Result<AllocatorSnapshot, SnapshotError> {
    let total_len = input.total_len();
    let (builder, root, protocol) =
        pickle::decode(input, progress).map_err(|e| vm_error(name, *e))?;
    finish(
        builder,
        root,
        name,
        SnapshotContainer::Pickle { protocol },
        total_len,
        progress,
    )
}

/// The reader's error for what stopped the pickle machine.
fn vm_error(name: &str, error: VmError) -> SnapshotError {
    let name = name.to_owned();
    match error {
        VmError::Cancelled => SnapshotError::Cancelled { name },
        VmError::Io(source) => SnapshotError::Io { name, source },
        VmError::Truncated { offset, problem } => SnapshotError::Truncated {
            name,
            offset,
            problem,
        },
        // Only a fed input runs dry, and `SnapshotStream` feeds it until it has all the bytes.
        VmError::NeedInput => SnapshotError::Truncated {
            name,
            offset: 0,
            problem: "the pickle's bytes stopped arriving before its end".to_owned(),
        },
        VmError::Malformed { offset, problem } => SnapshotError::Malformed {
            name,
            offset,
            problem,
        },
        VmError::Code { offset, what } => SnapshotError::NotASnapshot {
            name,
            reason: format!(
                "the pickle references {what} at byte {offset}; memory snapshots hold only \
                 plain data, and vramscope never runs code from a file"
            ),
        },
    }
}

fn read_json(
    bytes: &[u8],
    name: &str,
    progress: &dyn Fn(f32) -> bool,
) -> Result<AllocatorSnapshot, SnapshotError> {
    let mut builder = Builder::new(bytes.len());
    let root = json::decode(bytes, &mut builder).map_err(|e| json_error(name, bytes, e))?;
    finish(
        builder,
        root,
        name,
        SnapshotContainer::Json,
        bytes.len() as u64,
        progress,
    )
}

fn finish(
    builder: Builder,
    root: build::Value,
    name: &str,
    container: SnapshotContainer,
    total_len: u64,
    progress: &dyn Fn(f32) -> bool,
) -> Result<AllocatorSnapshot, SnapshotError> {
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
                offset: total_len,
                problem,
            },
        })
}

/// Byte offset of a 1-based line and column, for messages.
fn json_offset(bytes: &[u8], line: usize, column: usize) -> u64 {
    let line_start = if line <= 1 {
        0
    } else {
        bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(line - 2)
            .map_or(bytes.len(), |(i, _)| i + 1)
    };
    (line_start + column.saturating_sub(1)).min(bytes.len()) as u64
}

fn json_error(name: &str, bytes: &[u8], error: json::JsonError) -> SnapshotError {
    match error {
        json::JsonError::Syntax {
            line,
            column,
            problem,
            eof,
        } if eof => SnapshotError::Truncated {
            name: name.to_owned(),
            offset: json_offset(bytes, line, column),
            problem: format!("JSON ends early at line {line}, column {column}: {problem}"),
        },
        json::JsonError::Syntax {
            line,
            column,
            problem,
            ..
        } => SnapshotError::Malformed {
            name: name.to_owned(),
            offset: json_offset(bytes, line, column),
            problem: format!("bad JSON at line {line}, column {column}: {problem}"),
        },
        json::JsonError::Build(problem) => SnapshotError::NotASnapshot {
            name: name.to_owned(),
            reason: problem,
        },
    }
}
