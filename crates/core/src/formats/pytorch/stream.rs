//! Reading a snapshot from slices of its file as they arrive, for a caller that must never block
//! on the whole file: the web viewer reads a dropped file with `Blob.slice` between frames, so
//! the page stays responsive and the file is never held in memory whole.

use super::build::Value;
use super::pickle::{Decoder, Input};
use super::{Encoding, SnapshotError, finish, vm_error};
use crate::model::allocator::{AllocatorSnapshot, SnapshotContainer};

/// Bytes looked at before deciding whether the file is a pickle or JSON (as `read_file` does).
const SNIFF_BYTES: usize = 64;

/// A snapshot being read slice by slice: [`SnapshotStream::push`] each slice of the file in
/// order, then [`SnapshotStream::finish`]. Pickles are decoded as the slices arrive (the work per
/// slice is proportional to its size); JSON is collected and decoded at the end.
pub struct SnapshotStream {
    name: String,
    total_len: u64,
    received_len: u64,
    state: State,
}

enum State {
    /// Fewer than [`SNIFF_BYTES`] bytes so far: pickle or JSON is not known yet.
    Sniffing(Vec<u8>),
    Pickle {
        decoder: Box<Decoder>,
        input: Input<'static>,
        /// Set once the pickle's `STOP` was decoded; later bytes are ignored, as `read_file`
        /// ignores them.
        root: Option<Value>,
    },
    /// JSON, or something that is neither (the error comes at the end, from `read_bytes`'s
    /// checks, so both paths say the same).
    Whole(Vec<u8>),
}

impl SnapshotStream {
    /// A stream for the file `name` (used in messages) of `total_len` bytes.
    pub fn new(name: &str, total_len: u64) -> SnapshotStream {
        SnapshotStream {
            name: name.to_owned(),
            total_len,
            received_len: 0,
            state: State::Sniffing(Vec::new()),
        }
    }

    /// Bytes pushed so far.
    pub fn received_len(&self) -> u64 {
        self.received_len
    }

    /// Takes the next slice of the file and decodes what it can. `progress` gets the fraction
    /// decoded now and then and returns false to cancel.
    pub fn push(
        &mut self,
        bytes: &[u8],
        progress: &dyn Fn(f32) -> bool,
    ) -> Result<(), SnapshotError> {
        self.received_len += bytes.len() as u64;
        match &mut self.state {
            State::Sniffing(head) => {
                head.extend_from_slice(bytes);
                if head.len() >= SNIFF_BYTES || self.received_len >= self.total_len {
                    let head = std::mem::take(head);
                    self.state = match Encoding::sniff(&head) {
                        Encoding::Pickle => State::Pickle {
                            decoder: Box::new(Decoder::new(self.total_len)),
                            input: Input::fed(self.total_len),
                            root: None,
                        },
                        _ => State::Whole(Vec::new()),
                    };
                    return self.push_decided(&head, progress);
                }
                Ok(())
            }
            _ => self.push_decided(bytes, progress),
        }
    }

    fn push_decided(
        &mut self,
        bytes: &[u8],
        progress: &dyn Fn(f32) -> bool,
    ) -> Result<(), SnapshotError> {
        match &mut self.state {
            State::Sniffing(_) => Ok(()),
            State::Pickle {
                decoder,
                input,
                root,
            } => {
                if root.is_some() {
                    return Ok(());
                }
                input.feed(bytes);
                *root = decoder
                    .run(input, progress)
                    .map_err(|e| vm_error(&self.name, *e))?;
                Ok(())
            }
            State::Whole(all) => {
                all.extend_from_slice(bytes);
                Ok(())
            }
        }
    }

    /// The snapshot, once every slice was pushed.
    pub fn finish(
        self,
        progress: &dyn Fn(f32) -> bool,
    ) -> Result<AllocatorSnapshot, SnapshotError> {
        let name = self.name;
        match self.state {
            State::Sniffing(head) | State::Whole(head) => super::read_bytes(&head, &name, progress),
            State::Pickle {
                decoder,
                root: Some(root),
                ..
            } => {
                let (builder, root, protocol) = decoder.finish(root);
                finish(
                    builder,
                    root,
                    &name,
                    SnapshotContainer::Pickle { protocol },
                    self.total_len,
                    progress,
                )
            }
            State::Pickle { root: None, .. } => Err(SnapshotError::Truncated {
                name,
                offset: self.received_len,
                problem: format!(
                    "only {} of {} bytes arrived before the pickle's end",
                    self.received_len, self.total_len
                ),
            }),
        }
    }
}
