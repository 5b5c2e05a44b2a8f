//! `ByteReader`: the one cursor over untrusted bytes that every decoder of
//! the workspace reads with, and `ReadError`, why a read failed.
//!
//! Every decoder of bytes from another process or a user (this crate's
//! codec, the spec codec, the exchange's schema, the control socket's
//! messages) reads little-endian integers, length-prefixed strings and byte
//! strings, and counts of items, and ends by refusing trailing bytes. The
//! reader does each of these once, with the checks that make a decoder safe
//! on hostile input: a read past the end is an error, never a panic, and a
//! count is checked against the bytes that remain (each item taking at
//! least a known number of bytes) before the caller allocates anything for
//! it. Each error names what was being read and the byte offset where it
//! starts; each decoder maps it into its own error type.

use std::fmt;

/// A length or count prefix of the wire: `u32` or `u64`, little-endian
/// (implemented for these two only).
pub trait LenPrefix: sealed::Sealed {
    /// Reads one prefix, as a `u64`.
    #[doc(hidden)]
    fn read_prefix(reader: &mut ByteReader<'_>, what: &'static str) -> Result<u64, ReadError>;
}

mod sealed {
    /// Keeps [`LenPrefix`](super::LenPrefix) to `u32` and `u64`.
    pub trait Sealed {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
}

impl LenPrefix for u32 {
    fn read_prefix(reader: &mut ByteReader<'_>, what: &'static str) -> Result<u64, ReadError> {
        reader.u32(what).map(u64::from)
    }
}

impl LenPrefix for u64 {
    fn read_prefix(reader: &mut ByteReader<'_>, what: &'static str) -> Result<u64, ReadError> {
        reader.u64(what)
    }
}

/// Why a [`ByteReader`] could not read. `what` names what was being read
/// (`"key"`, `"entry count"`, ...), `at` is the byte offset where it starts.
///
/// The set of failures is closed on purpose (not `#[non_exhaustive]`): each
/// decoder maps every one into its own error type, and a new failure must
/// make each of them decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The bytes end before what is being read.
    #[error("truncated: {what} at byte {at} needs {needed} bytes but {remaining} remain")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Where it starts.
        at: usize,
        /// The bytes it needs.
        needed: usize,
        /// The bytes that remain from `at`.
        remaining: usize,
    },
    /// A count whose items cannot fit in the bytes that remain after it
    /// (each item takes at least `min_item` bytes).
    #[error(
        "{what} at byte {at}: {count} items of at least {min_item} bytes each \
         do not fit in the {remaining} bytes that remain"
    )]
    CountTooLarge {
        /// What was being counted.
        what: &'static str,
        /// Where the count starts.
        at: usize,
        /// The count read.
        count: u64,
        /// The fewest bytes one item takes.
        min_item: usize,
        /// The bytes that remain after the count.
        remaining: usize,
    },
    /// A `u64` (a length, count or dim) that does not fit this machine's
    /// `usize` (only on targets narrower than 64 bits).
    #[error("{what} {value} at byte {at} does not fit usize")]
    TooLarge {
        /// What was being read.
        what: &'static str,
        /// Where it starts.
        at: usize,
        /// The value read.
        value: u64,
    },
    /// A string that is not UTF-8.
    #[error("invalid UTF-8 in {what} at byte {at}")]
    InvalidUtf8 {
        /// What was being read.
        what: &'static str,
        /// Where its bytes start (after its length).
        at: usize,
    },
    /// Bytes after the end of what was read.
    #[error("{count} trailing bytes left over after {what}, at byte {at}")]
    TrailingBytes {
        /// What ends there (`"the message"`, ...).
        what: &'static str,
        /// Where the trailing bytes start.
        at: usize,
        /// How many there are.
        count: usize,
    },
}

impl ReadError {
    /// The byte offset where the failed read starts.
    pub fn at(&self) -> usize {
        match *self {
            ReadError::Truncated { at, .. }
            | ReadError::CountTooLarge { at, .. }
            | ReadError::TooLarge { at, .. }
            | ReadError::InvalidUtf8 { at, .. }
            | ReadError::TrailingBytes { at, .. } => at,
        }
    }

    /// For [`ReadError::CountTooLarge`], the bytes its items need at least
    /// (`count * min_item`, saturating at `usize::MAX`); for
    /// [`ReadError::Truncated`], the bytes needed; otherwise `None`.
    pub fn needed(&self) -> Option<usize> {
        match *self {
            ReadError::Truncated { needed, .. } => Some(needed),
            ReadError::CountTooLarge {
                count, min_item, ..
            } => Some(
                usize::try_from(count)
                    .unwrap_or(usize::MAX)
                    .saturating_mul(min_item),
            ),
            _ => None,
        }
    }
}

/// A cursor over untrusted bytes: little-endian integers, length-prefixed
/// strings and byte strings, counts checked against the bytes that remain,
/// and a final check for trailing bytes. Never panics; every error is a
/// [`ReadError`] naming what was being read and where.
///
/// ```
/// use tensordict::{ByteReader, ReadError};
///
/// # fn main() -> Result<(), ReadError> {
/// // A u32 count of (u32-length-prefixed) names, then a u64.
/// let mut bytes = 2u32.to_le_bytes().to_vec();
/// for name in ["obs", "reward"] {
///     bytes.extend_from_slice(&(name.len() as u32).to_le_bytes());
///     bytes.extend_from_slice(name.as_bytes());
/// }
/// bytes.extend_from_slice(&7u64.to_le_bytes());
///
/// let mut reader = ByteReader::new(&bytes);
/// // Each name takes at least its 4-byte length: a count that cannot fit
/// // in what remains is refused before anything is allocated for it.
/// let count = reader.count::<u32>("name count", 4)?;
/// let mut names = Vec::with_capacity(count);
/// for _ in 0..count {
///     names.push(reader.str::<u32>("name")?);
/// }
/// assert_eq!(names, ["obs", "reward"]);
/// assert_eq!(reader.u64("seed")?, 7);
/// reader.finish("the message")?;
///
/// // The same bytes cut short: the error names what and where.
/// let err = ByteReader::new(&bytes[..10]).count::<u32>("name count", 6).unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "name count at byte 0: 2 items of at least 6 bytes each do not fit in the 6 bytes that remain"
/// );
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ByteReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl fmt::Debug for ByteReader<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ByteReader")
            .field("len", &self.bytes.len())
            .field("pos", &self.pos)
            .finish()
    }
}

impl<'a> ByteReader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> ByteReader<'a> {
        ByteReader { bytes, pos: 0 }
    }

    /// The offset of the next byte to read.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// The bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ReadError> {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        let Some((head, _)) = rest.split_at_checked(n) else {
            return Err(ReadError::Truncated {
                what,
                at: self.pos,
                needed: n,
                remaining: rest.len(),
            });
        };
        self.pos += n;
        Ok(head)
    }

    /// The next `N` bytes, as an array.
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ReadError> {
        let at = self.pos;
        let bytes = self.take(N, what)?;
        // `take` gave exactly N bytes; the error arm cannot be reached, but
        // an error is still better than a panic.
        <[u8; N]>::try_from(bytes).map_err(|_| ReadError::Truncated {
            what,
            at,
            needed: N,
            remaining: bytes.len(),
        })
    }

    /// One byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, ReadError> {
        let [byte] = self.array(what)?;
        Ok(byte)
    }

    /// A little-endian `u32`.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, ReadError> {
        self.array(what).map(u32::from_le_bytes)
    }

    /// A little-endian `u64`.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, ReadError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A little-endian `i64`.
    pub fn i64(&mut self, what: &'static str) -> Result<i64, ReadError> {
        self.array(what).map(i64::from_le_bytes)
    }

    /// A little-endian `f64`.
    pub fn f64(&mut self, what: &'static str) -> Result<f64, ReadError> {
        self.array(what).map(f64::from_le_bytes)
    }

    /// A little-endian `u64` that must fit `usize` (a length or a dim):
    /// [`ReadError::TooLarge`] otherwise.
    pub fn u64_usize(&mut self, what: &'static str) -> Result<usize, ReadError> {
        let at = self.pos;
        let value = self.u64(what)?;
        usize::try_from(value).map_err(|_| ReadError::TooLarge { what, at, value })
    }

    /// A count (a `u32` or `u64` prefix, `P`) of items that each take at
    /// least `min_item` bytes, checked against the bytes that remain after
    /// it: [`ReadError::CountTooLarge`] when they cannot fit. With a
    /// `min_item` of at least 1, the caller may reserve room for `count`
    /// items of about `min_item` bytes each without allocating much more
    /// than the input's own size.
    pub fn count<P: LenPrefix>(
        &mut self,
        what: &'static str,
        min_item: usize,
    ) -> Result<usize, ReadError> {
        let at = self.pos;
        let count = P::read_prefix(self, what)?;
        let n = usize::try_from(count).map_err(|_| ReadError::TooLarge {
            what,
            at,
            value: count,
        })?;
        let remaining = self.remaining();
        if n.saturating_mul(min_item) > remaining {
            return Err(ReadError::CountTooLarge {
                what,
                at,
                count,
                min_item,
                remaining,
            });
        }
        Ok(n)
    }

    /// Bytes after their length (a `u32` or `u64` prefix, `P`).
    pub fn bytes<P: LenPrefix>(&mut self, what: &'static str) -> Result<&'a [u8], ReadError> {
        let len = self.count::<P>(what, 1)?;
        self.take(len, what)
    }

    /// A UTF-8 string after its length in bytes (a `u32` or `u64` prefix,
    /// `P`).
    pub fn str<P: LenPrefix>(&mut self, what: &'static str) -> Result<&'a str, ReadError> {
        let len = self.count::<P>(what, 1)?;
        let at = self.pos;
        std::str::from_utf8(self.take(len, what)?).map_err(|_| ReadError::InvalidUtf8 { what, at })
    }

    /// Checks that every byte was read: [`ReadError::TrailingBytes`]
    /// otherwise, saying after `what` they come.
    pub fn finish(&self, what: &'static str) -> Result<(), ReadError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(ReadError::TrailingBytes {
                what,
                at: self.pos,
                count,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn truncated(what: &'static str, at: usize, needed: usize, remaining: usize) -> ReadError {
        ReadError::Truncated {
            what,
            at,
            needed,
            remaining,
        }
    }

    #[test]
    fn integers_are_little_endian_and_advance() {
        let mut bytes = vec![7u8];
        bytes.extend_from_slice(&0x0102_0304u32.to_le_bytes());
        bytes.extend_from_slice(&u64::MAX.to_le_bytes());
        bytes.extend_from_slice(&(-5i64).to_le_bytes());
        bytes.extend_from_slice(&1.5f64.to_le_bytes());
        bytes.extend_from_slice(&42u64.to_le_bytes());
        let mut r = ByteReader::new(&bytes);
        assert_eq!(r.u8("a"), Ok(7));
        assert_eq!(r.u32("b"), Ok(0x0102_0304));
        assert_eq!(r.position(), 5);
        assert_eq!(r.u64("c"), Ok(u64::MAX));
        assert_eq!(r.i64("d"), Ok(-5));
        assert_eq!(r.f64("e"), Ok(1.5));
        assert_eq!(r.u64_usize("f"), Ok(42));
        assert_eq!(r.remaining(), 0);
        assert_eq!(r.finish("the message"), Ok(()));
        assert!(format!("{r:?}").contains("pos: 37"));
    }

    #[test]
    fn every_read_of_short_input_is_truncated_naming_what_and_where() {
        let bytes = [1u8, 2, 3];
        let short = |skip: usize| {
            let mut r = ByteReader::new(&bytes);
            r.take(skip, "skip").unwrap();
            r
        };
        assert_eq!(short(3).u8("tag"), Err(truncated("tag", 3, 1, 0)));
        assert_eq!(short(0).u32("count"), Err(truncated("count", 0, 4, 3)));
        assert_eq!(short(1).u64("dim"), Err(truncated("dim", 1, 8, 2)));
        assert_eq!(short(2).i64("n"), Err(truncated("n", 2, 8, 1)));
        assert_eq!(short(0).f64("x"), Err(truncated("x", 0, 8, 3)));
        assert_eq!(short(0).u64_usize("len"), Err(truncated("len", 0, 8, 3)));
        assert_eq!(short(0).array::<5>("arr"), Err(truncated("arr", 0, 5, 3)));
        assert_eq!(short(1).take(3, "data"), Err(truncated("data", 1, 3, 2)));
        assert_eq!(
            short(0).count::<u32>("count", 1),
            Err(truncated("count", 0, 4, 3))
        );
        assert_eq!(
            short(0).count::<u64>("count", 1),
            Err(truncated("count", 0, 8, 3))
        );
        assert_eq!(short(0).str::<u32>("key"), Err(truncated("key", 0, 4, 3)));
        assert_eq!(
            short(0).bytes::<u64>("blob"),
            Err(truncated("blob", 0, 8, 3))
        );
        // A failed read does not advance.
        let mut r = short(1);
        assert!(r.u32("x").is_err());
        assert_eq!(r.position(), 1);
        assert_eq!(
            truncated("tag", 3, 1, 0).to_string(),
            "truncated: tag at byte 3 needs 1 bytes but 0 remain"
        );
    }

    #[test]
    fn counts_are_checked_against_the_bytes_that_remain() {
        // 3 items of 2 bytes need 6; 5 remain.
        let mut bytes = 3u32.to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0; 5]);
        let err = ByteReader::new(&bytes)
            .count::<u32>("items", 2)
            .unwrap_err();
        assert_eq!(
            err,
            ReadError::CountTooLarge {
                what: "items",
                at: 0,
                count: 3,
                min_item: 2,
                remaining: 5
            }
        );
        assert_eq!(err.needed(), Some(6));
        assert_eq!(err.at(), 0);
        assert_eq!(
            err.to_string(),
            "items at byte 0: 3 items of at least 2 bytes each do not fit in the 5 bytes that remain"
        );
        // Exactly enough.
        let mut r = ByteReader::new(&bytes);
        assert_eq!(r.count::<u32>("items", 1), Ok(3));
        assert_eq!(r.position(), 4);
        // Zero-sized items: any count fits.
        assert_eq!(ByteReader::new(&bytes).count::<u32>("items", 0), Ok(3));
    }

    #[test]
    fn counts_whose_size_overflows_are_refused_not_wrapped() {
        // u64::MAX items of 8 bytes: the product saturates, never wraps to
        // a small number.
        let bytes = u64::MAX.to_le_bytes();
        let err = ByteReader::new(&bytes)
            .count::<u64>("shape", 8)
            .unwrap_err();
        assert!(matches!(
            err,
            ReadError::CountTooLarge {
                count: u64::MAX,
                min_item: 8,
                remaining: 0,
                ..
            }
        ));
        assert_eq!(err.needed(), Some(usize::MAX));
        // 2^61 + 1 items of 8 bytes wrap to 8 in modular arithmetic.
        let mut bytes = ((1u64 << 61) + 1).to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0; 8]);
        assert!(matches!(
            ByteReader::new(&bytes).count::<u64>("parts", 8),
            Err(ReadError::CountTooLarge { .. })
        ));
        // A u32 count of u32::MAX items of 4 bytes.
        let bytes = u32::MAX.to_le_bytes();
        assert!(matches!(
            ByteReader::new(&bytes).count::<u32>("cpus", 4),
            Err(ReadError::CountTooLarge {
                count: 0xffff_ffff,
                ..
            })
        ));
    }

    #[test]
    fn lengths_and_strings() {
        let mut bytes = 2u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"hi");
        bytes.extend_from_slice(&3u32.to_le_bytes());
        bytes.extend_from_slice(&[9, 8, 7]);
        bytes.extend_from_slice(&0u32.to_le_bytes());
        let mut r = ByteReader::new(&bytes);
        assert_eq!(r.str::<u64>("key"), Ok("hi"));
        assert_eq!(r.bytes::<u32>("blob"), Ok(&[9u8, 8, 7][..]));
        assert_eq!(r.str::<u32>("empty"), Ok(""));
        assert_eq!(r.finish("the message"), Ok(()));

        // A length past the end; then invalid UTF-8, at its bytes' offset.
        let mut bytes = 5u32.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"abc");
        assert_eq!(
            ByteReader::new(&bytes).str::<u32>("key"),
            Err(ReadError::CountTooLarge {
                what: "key",
                at: 0,
                count: 5,
                min_item: 1,
                remaining: 3
            })
        );
        let mut bytes = 2u32.to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe]);
        let err = ByteReader::new(&bytes).str::<u32>("key").unwrap_err();
        assert_eq!(err, ReadError::InvalidUtf8 { what: "key", at: 4 });
        assert_eq!(err.to_string(), "invalid UTF-8 in key at byte 4");
        assert_eq!(err.needed(), None);
    }

    #[test]
    fn trailing_bytes_are_counted_from_where_reading_stopped() {
        let bytes = [1u8, 2, 3, 4];
        let mut r = ByteReader::new(&bytes);
        r.u8("tag").unwrap();
        let err = r.finish("the message").unwrap_err();
        assert_eq!(
            err,
            ReadError::TrailingBytes {
                what: "the message",
                at: 1,
                count: 3
            }
        );
        assert_eq!(err.at(), 1);
        assert_eq!(
            err.to_string(),
            "3 trailing bytes left over after the message, at byte 1"
        );
        assert_eq!(ByteReader::new(&[]).finish("nothing"), Ok(()));
    }

    #[test]
    fn values_too_large_for_usize_are_named() {
        let err = ReadError::TooLarge {
            what: "dim",
            at: 3,
            value: u64::MAX,
        };
        assert_eq!(
            err.to_string(),
            "dim 18446744073709551615 at byte 3 does not fit usize"
        );
        assert_eq!(err.at(), 3);
    }
}
