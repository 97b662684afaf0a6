//! A vector kept in fixed-size chunks, so that growing it never copies what it holds.
//!
//! The pickle reader's container table and memo grow with the input to hundreds of MB in a
//! 1 GB snapshot. Grown as one `Vec`, each growth copied all of it at once: a 90 ms step of the
//! web page on a quiet machine, 470-605 ms on a loaded one (realloc into freshly grown
//! WebAssembly memory), and both the old and the new copy had to fit in the page's 4 GiB.

use std::ops::{Index, IndexMut};

/// Items per chunk, as a power of two (64 Ki items: 768 KiB of 12-byte container slots).
const CHUNK_BITS: u32 = 16;
const CHUNK_LEN: usize = 1 << CHUNK_BITS;

/// A growable list of items indexed like a `Vec`, stored in whole chunks of [`CHUNK_LEN`]
/// items (filled with a placeholder until pushed): an index within a chunk needs no bounds
/// check, which keeps reading items about as fast as from one `Vec`.
pub(super) struct ChunkedVec<T> {
    chunks: Vec<Box<[T; CHUNK_LEN]>>,
    len: usize,
    /// What a new chunk's items are until pushed.
    placeholder: T,
}

impl<T: Copy> ChunkedVec<T> {
    /// An empty vector; `placeholder` fills the room of a new chunk (never read: indices past
    /// the length are not items).
    pub(super) fn new(placeholder: T) -> Self {
        ChunkedVec {
            chunks: Vec::new(),
            len: 0,
            placeholder,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Appends `item`; when the last chunk is full a new one follows it, nothing is moved.
    #[inline]
    pub(super) fn push(&mut self, item: T) {
        let slot = self.len & (CHUNK_LEN - 1);
        if slot == 0 {
            self.chunks.push(self.new_chunk());
        }
        if let Some(chunk) = self.chunks.last_mut() {
            chunk[slot] = item;
            self.len += 1;
        }
    }

    /// A chunk of placeholders, made on the heap (a 768 KiB array would not fit the web page's
    /// stack).
    #[cold]
    fn new_chunk(&self) -> Box<[T; CHUNK_LEN]> {
        let items = vec![self.placeholder; CHUNK_LEN].into_boxed_slice();
        match items.try_into() {
            Ok(chunk) => chunk,
            // The vector was made with exactly CHUNK_LEN items.
            Err(_) => unreachable!("a chunk of {CHUNK_LEN} items"),
        }
    }

    #[inline]
    pub(super) fn get(&self, index: usize) -> Option<&T> {
        if index >= self.len {
            return None;
        }
        let chunk = self.chunks.get(index >> CHUNK_BITS)?;
        Some(&chunk[index & (CHUNK_LEN - 1)])
    }
}

impl<T> Index<usize> for ChunkedVec<T> {
    type Output = T;

    /// The item at `index`; panics past the last chunk, as a `Vec` does past its end.
    #[inline]
    fn index(&self, index: usize) -> &T {
        &self.chunks[index >> CHUNK_BITS][index & (CHUNK_LEN - 1)]
    }
}

impl<T> IndexMut<usize> for ChunkedVec<T> {
    #[inline]
    fn index_mut(&mut self, index: usize) -> &mut T {
        &mut self.chunks[index >> CHUNK_BITS][index & (CHUNK_LEN - 1)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Items read back by index are those pushed, across chunk edges; writes land where
    /// indexed; past the end there is nothing; and growing never moves an item already held.
    #[test]
    fn holds_items_like_a_vec_and_never_moves_them() {
        let mut items = ChunkedVec::new(u64::MAX);
        let count = 3 * CHUNK_LEN + 17;
        let mut first_address = None;
        for i in 0..count {
            items.push(i as u64 * 3);
            let address = std::ptr::from_ref(&items[0]);
            assert_eq!(
                *first_address.get_or_insert(address),
                address,
                "moved at {i}"
            );
        }
        assert_eq!(items.len(), count);
        for i in [0, 1, CHUNK_LEN - 1, CHUNK_LEN, 2 * CHUNK_LEN + 5, count - 1] {
            assert_eq!(items[i], i as u64 * 3);
            assert_eq!(items.get(i), Some(&(i as u64 * 3)));
        }
        items[CHUNK_LEN] = 7;
        items[count - 1] = 9;
        assert_eq!((items[CHUNK_LEN], items[count - 1]), (7, 9));
        assert_eq!(items.get(count), None);
        assert_eq!(items.get(4 * CHUNK_LEN), None);
    }
}
