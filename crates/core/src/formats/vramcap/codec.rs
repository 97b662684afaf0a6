//! Byte-level primitives of the `.vramcap` format: LEB128 varints, zigzag signed integers,
//! wrapping deltas, length-prefixed strings, and a bounds-checked reader that never panics and
//! never allocates more than the bytes it was given.

/// Why a piece of a file could not be decoded. Short, lower-case, no file name: the caller adds
/// the file name and the chunk position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct DecodeError(pub(super) String);

impl DecodeError {
    pub(super) fn new(message: impl Into<String>) -> Self {
        DecodeError(message.into())
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

pub(super) type DecodeResult<T> = Result<T, DecodeError>;

/// Appends an unsigned LEB128 varint (1 byte for values below 128, at most 10 bytes).
pub(super) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Maps signed to unsigned so that small magnitudes of either sign stay small.
pub(super) fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

pub(super) fn unzigzag(value: u64) -> i64 {
    ((value >> 1) as i64) ^ -((value & 1) as i64)
}

/// Appends a signed varint (zigzag).
pub(super) fn put_signed(out: &mut Vec<u8>, value: i64) {
    put_varint(out, zigzag(value));
}

/// Appends `value - previous` as a wrapping signed varint: exact for every pair of `u64`s.
pub(super) fn put_delta(out: &mut Vec<u8>, value: u64, previous: u64) {
    put_signed(out, value.wrapping_sub(previous) as i64);
}

pub(super) fn put_str(out: &mut Vec<u8>, text: &str) {
    put_varint(out, text.len() as u64);
    out.extend_from_slice(text.as_bytes());
}

pub(super) fn put_bool(out: &mut Vec<u8>, value: bool) {
    out.push(u8::from(value));
}

/// `Option<bool>` as one byte: 0 absent, 1 false, 2 true.
pub(super) fn put_opt_bool(out: &mut Vec<u8>, value: Option<bool>) {
    out.push(match value {
        None => 0,
        Some(false) => 1,
        Some(true) => 2,
    });
}

/// `Option<u32>` as one varint: 0 absent, otherwise value + 1.
pub(super) fn put_opt_u32(out: &mut Vec<u8>, value: Option<u32>) {
    put_varint(out, value.map_or(0, |v| u64::from(v) + 1));
}

/// `Option<u64>` as a presence byte and, when present, a varint.
pub(super) fn put_opt_u64(out: &mut Vec<u8>, value: Option<u64>) {
    match value {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            put_varint(out, v);
        }
    }
}

/// `Option<(u32, u32)>` (MIG GPU/compute instance ids) as a presence byte and two varints.
pub(super) fn put_opt_pair(out: &mut Vec<u8>, value: Option<(u32, u32)>) {
    match value {
        None => out.push(0),
        Some((a, b)) => {
            out.push(1);
            put_varint(out, u64::from(a));
            put_varint(out, u64::from(b));
        }
    }
}

/// Writes a nested item (event, health sample, field change) with its byte length first, so a
/// reader can skip item kinds it does not know and ignore fields added at the end by newer
/// writers.
pub(super) fn put_item(
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    encode: impl FnOnce(&mut Vec<u8>),
) {
    scratch.clear();
    encode(scratch);
    put_varint(out, scratch.len() as u64);
    out.extend_from_slice(scratch);
}

/// A bounds-checked reader over a byte slice.
pub(super) struct ByteReader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> ByteReader<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        ByteReader { bytes, position: 0 }
    }

    pub(super) fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    pub(super) fn u8(&mut self) -> DecodeResult<u8> {
        let byte = *self
            .bytes
            .get(self.position)
            .ok_or_else(|| DecodeError::new("data ends in the middle of a value"))?;
        self.position += 1;
        Ok(byte)
    }

    pub(super) fn take(&mut self, len: usize) -> DecodeResult<&'a [u8]> {
        if len > self.remaining() {
            return Err(DecodeError::new(format!(
                "a length of {len} bytes runs past the end of the data ({} left)",
                self.remaining()
            )));
        }
        let slice = &self.bytes[self.position..self.position + len];
        self.position += len;
        Ok(slice)
    }

    pub(super) fn varint(&mut self) -> DecodeResult<u64> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = self.u8()?;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(DecodeError::new("varint overflows 64 bits"));
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::new("varint longer than 10 bytes"))
    }

    pub(super) fn signed(&mut self) -> DecodeResult<i64> {
        Ok(unzigzag(self.varint()?))
    }

    /// Reads a delta written by [`put_delta`] and applies it to `previous`.
    pub(super) fn delta(&mut self, previous: u64) -> DecodeResult<u64> {
        Ok(previous.wrapping_add(self.signed()? as u64))
    }

    pub(super) fn u32(&mut self) -> DecodeResult<u32> {
        let value = self.varint()?;
        u32::try_from(value)
            .map_err(|_| DecodeError::new(format!("value {value} does not fit in 32 bits")))
    }

    /// A count of items that each take at least one byte: bounded by the bytes left, so a damaged
    /// count can never make the reader reserve memory it was not given.
    pub(super) fn count(&mut self) -> DecodeResult<usize> {
        let count = self.varint()?;
        if count > self.remaining() as u64 {
            return Err(DecodeError::new(format!(
                "a count of {count} items is more than the {} bytes left could hold",
                self.remaining()
            )));
        }
        Ok(count as usize)
    }

    pub(super) fn str(&mut self) -> DecodeResult<String> {
        let len = self.count()?;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| DecodeError::new("a text field is not valid UTF-8"))
    }

    pub(super) fn bool(&mut self) -> DecodeResult<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(DecodeError::new(format!("invalid boolean byte {other}"))),
        }
    }

    pub(super) fn opt_bool(&mut self) -> DecodeResult<Option<bool>> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(false)),
            2 => Ok(Some(true)),
            other => Err(DecodeError::new(format!(
                "invalid optional boolean byte {other}"
            ))),
        }
    }

    pub(super) fn opt_u32(&mut self) -> DecodeResult<Option<u32>> {
        match self.varint()? {
            0 => Ok(None),
            v => u32::try_from(v - 1)
                .map(Some)
                .map_err(|_| DecodeError::new(format!("value {} does not fit in 32 bits", v - 1))),
        }
    }

    pub(super) fn opt_u64(&mut self) -> DecodeResult<Option<u64>> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.varint()?)),
            other => Err(DecodeError::new(format!("invalid presence byte {other}"))),
        }
    }

    pub(super) fn opt_pair(&mut self) -> DecodeResult<Option<(u32, u32)>> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some((self.u32()?, self.u32()?))),
            other => Err(DecodeError::new(format!("invalid presence byte {other}"))),
        }
    }

    /// Reads an item written by [`put_item`] and returns a reader over just its bytes.
    pub(super) fn item(&mut self) -> DecodeResult<ByteReader<'a>> {
        let len = self.count()?;
        Ok(ByteReader::new(self.take(len)?))
    }
}

/// Most items a reader reserves room for before they are decoded. A count is only a claim, and an
/// item can be many times bigger in memory than its smallest encoding (a one-byte batch is a
/// hundred-byte struct), so room for the rest is made as items actually decode.
pub(super) const MAX_PREALLOCATED_ITEMS: usize = 1024;

/// An empty vector with room for the first of `count` claimed items (see
/// [`MAX_PREALLOCATED_ITEMS`]).
pub(super) fn room_for<T>(count: usize) -> Vec<T> {
    Vec::with_capacity(count.min(MAX_PREALLOCATED_ITEMS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_every_width() {
        let values = [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ];
        let mut out = Vec::new();
        for &v in &values {
            put_varint(&mut out, v);
        }
        let mut reader = ByteReader::new(&out);
        for &v in &values {
            assert_eq!(reader.varint(), Ok(v));
        }
        assert_eq!(reader.remaining(), 0);
    }

    #[test]
    fn deltas_are_exact_across_the_whole_u64_range() {
        let pairs = [(0, u64::MAX), (u64::MAX, 0), (5, 3), (3, 5), (1 << 63, 0)];
        for (value, previous) in pairs {
            let mut out = Vec::new();
            put_delta(&mut out, value, previous);
            assert_eq!(ByteReader::new(&out).delta(previous), Ok(value));
        }
        for v in [i64::MIN, -1, 0, 1, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    #[test]
    fn damaged_values_are_errors_not_panics() {
        assert!(
            ByteReader::new(&[0xff; 11]).varint().is_err(),
            "11-byte varint"
        );
        assert!(
            ByteReader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02])
                .varint()
                .is_err()
        );
        assert!(
            ByteReader::new(&[0x80]).varint().is_err(),
            "ends mid-varint"
        );
        // A string claiming a huge length must not allocate it.
        let mut out = Vec::new();
        put_varint(&mut out, u64::MAX / 2);
        assert!(ByteReader::new(&out).str().is_err());
        assert!(
            ByteReader::new(&[2, 0xc3, 0x28]).str().is_err(),
            "invalid UTF-8"
        );
        assert!(ByteReader::new(&[3]).bool().is_err());
        let mut out = Vec::new();
        put_varint(&mut out, u64::from(u32::MAX) + 1);
        assert!(ByteReader::new(&out).u32().is_err());
    }
}
