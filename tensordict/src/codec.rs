//! A binary codec for sending a tensordict through a pipe: [`encode`] and
//! [`decode`], which never panics and never allocates more than its input
//! justifies.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! message  := MAGIC "RLTD" | VERSION u8 | dict
//! dict     := ndim u32 | dim u64 * ndim | count u32 | entry * count   (keys strictly increasing)
//! entry    := key_len u32 | key utf-8 | kind u8 | payload
//! kind 0   := tensor:     dtype u8 | ndim u32 | dim u64 * ndim | element bytes
//! kind 1   := non-tensor: value
//! kind 2   := dict
//! value    := 0 i64 | 1 f64 | 2 bool u8 | 3 len u32 utf-8 | 4 count u32 value * count
//! ```

use crate::byte_reader::{ByteReader, ReadError};
use crate::tensor::checked_numel;
use crate::{DType, Entry, NonTensor, Tensor, TensorDict, TensorDictError};

#[cfg(target_endian = "big")]
compile_error!(
    "the codec writes tensor bytes as they are in memory, which it assumes little-endian"
);

/// The first bytes of every message.
const MAGIC: &[u8; 4] = b"RLTD";
/// The layout version; a decoder refuses any other.
const VERSION: u8 = 1;
/// Deepest nesting of sub-dicts or non-tensor stacks a message may have.
const MAX_DEPTH: usize = 64;

const KIND_TENSOR: u8 = 0;
const KIND_NON_TENSOR: u8 = 1;
const KIND_DICT: u8 = 2;

const VALUE_INT: u8 = 0;
const VALUE_FLOAT: u8 = 1;
const VALUE_BOOL: u8 = 2;
const VALUE_STR: u8 = 3;
const VALUE_STACK: u8 = 4;

/// Why bytes could not be decoded. `at` is the byte offset of the problem.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The message does not start with the magic bytes.
    #[error("not a tensordict message: bad magic bytes")]
    BadMagic,
    /// A layout version this decoder does not know.
    #[error("unsupported tensordict message version {found} (this decoder reads {VERSION})")]
    UnsupportedVersion {
        /// The version in the message.
        found: u8,
    },
    /// The message ends before what it announces.
    #[error("truncated message: {what} at byte {at} needs {needed} bytes but {remaining} remain")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Offset.
        at: usize,
        /// Bytes needed.
        needed: usize,
        /// Bytes left.
        remaining: usize,
    },
    /// An unknown tag byte.
    #[error("unknown {what} tag {tag} at byte {at}")]
    UnknownTag {
        /// Which tag.
        what: &'static str,
        /// Its value.
        tag: u8,
        /// Offset.
        at: usize,
    },
    /// A key or string that is not UTF-8.
    #[error("invalid UTF-8 in {what} at byte {at}")]
    InvalidUtf8 {
        /// Key or string.
        what: &'static str,
        /// Offset.
        at: usize,
    },
    /// Keys out of order or repeated.
    #[error("key {key:?} at byte {at} is out of order or repeated")]
    KeyOrder {
        /// The key.
        key: String,
        /// Offset.
        at: usize,
    },
    /// Nesting deeper than the decoder accepts.
    #[error("nesting deeper than {MAX_DEPTH} levels at byte {at}")]
    TooDeep {
        /// Offset.
        at: usize,
    },
    /// Well-formed bytes that make an invalid tensordict (a batch size
    /// mismatch, a bool byte other than 0 or 1, an empty key, a shape too
    /// large).
    #[error("invalid content at byte {at}: {source}")]
    Invalid {
        /// Offset.
        at: usize,
        /// What is invalid.
        #[source]
        source: TensorDictError,
    },
    /// Bytes after the end of the message.
    #[error("{count} trailing bytes after the message")]
    TrailingBytes {
        /// How many.
        count: usize,
    },
}

/// Encodes a tensordict into a new buffer.
///
/// A tensordict nested deeper than 64 levels (sub-dicts and non-tensor
/// stacks counted together) encodes, but [`decode`] refuses it with
/// [`DecodeError::TooDeep`]: the decoder bounds its recursion so that
/// hostile input cannot overflow its stack.
pub fn encode(td: &TensorDict) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(td, &mut out);
    out
}

/// Encodes a tensordict, appending to `out` (reuse a buffer to avoid
/// allocating per message). The nesting limit of [`encode`] applies.
pub fn encode_into(td: &TensorDict, out: &mut Vec<u8>) {
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    write_dict(td, out);
}

fn write_len(out: &mut Vec<u8>, len: usize) {
    // Lengths above u32::MAX cannot be represented; no tensordict entry count,
    // key or string comes near it in practice.
    let len = u32::try_from(len).expect("length fits in u32");
    out.extend_from_slice(&len.to_le_bytes());
}

fn write_shape(out: &mut Vec<u8>, shape: &[usize]) {
    write_len(out, shape.len());
    for &d in shape {
        out.extend_from_slice(&(d as u64).to_le_bytes());
    }
}

fn write_dict(td: &TensorDict, out: &mut Vec<u8>) {
    write_shape(out, td.batch_size());
    write_len(out, td.len());
    for (key, entry) in td.iter() {
        write_len(out, key.len());
        out.extend_from_slice(key.as_bytes());
        match entry {
            Entry::Tensor(t) => {
                out.push(KIND_TENSOR);
                out.push(t.dtype().tag());
                write_shape(out, t.shape());
                out.extend_from_slice(t.as_bytes());
            }
            Entry::NonTensor(v) => {
                out.push(KIND_NON_TENSOR);
                write_value(v, out);
            }
            Entry::Dict(d) => {
                out.push(KIND_DICT);
                write_dict(d, out);
            }
        }
    }
}

fn write_value(value: &NonTensor, out: &mut Vec<u8>) {
    match value {
        NonTensor::Int(v) => {
            out.push(VALUE_INT);
            out.extend_from_slice(&v.to_le_bytes());
        }
        NonTensor::Float(v) => {
            out.push(VALUE_FLOAT);
            out.extend_from_slice(&v.to_le_bytes());
        }
        NonTensor::Bool(v) => {
            out.push(VALUE_BOOL);
            out.push(u8::from(*v));
        }
        NonTensor::Str(s) => {
            out.push(VALUE_STR);
            write_len(out, s.len());
            out.extend_from_slice(s.as_bytes());
        }
        NonTensor::Stack(items) => {
            out.push(VALUE_STACK);
            write_len(out, items.len());
            for item in items {
                write_value(item, out);
            }
        }
    }
}

/// Decodes a message written by [`encode`].
///
/// Never panics. Every count and size in the message is checked against the
/// bytes that remain before anything is allocated for it, so malformed input
/// cannot make the decoder allocate much more than the input's own size.
pub fn decode(bytes: &[u8]) -> Result<TensorDict, DecodeError> {
    let mut reader = Reader(ByteReader::new(bytes));
    if reader.0.take(MAGIC.len(), "magic")? != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    let version = reader.0.u8("version")?;
    if version != VERSION {
        return Err(DecodeError::UnsupportedVersion { found: version });
    }
    let td = reader.dict(0)?;
    reader.0.finish("the message")?;
    Ok(td)
}

impl From<ReadError> for DecodeError {
    /// The codec's error for a failed read: a count that cannot fit in the
    /// bytes that remain is a truncation (its items would need more bytes
    /// than remain), as is a read past the end.
    fn from(err: ReadError) -> DecodeError {
        match err {
            ReadError::Truncated {
                what,
                at,
                needed,
                remaining,
            } => DecodeError::Truncated {
                what,
                at,
                needed,
                remaining,
            },
            ReadError::CountTooLarge {
                what,
                at,
                remaining,
                ..
            } => DecodeError::Truncated {
                what,
                at,
                needed: err.needed().unwrap_or(usize::MAX),
                remaining,
            },
            ReadError::InvalidUtf8 { what, at } => DecodeError::InvalidUtf8 { what, at },
            ReadError::TrailingBytes { count, .. } => DecodeError::TrailingBytes { count },
            // The codec's counts are `u32`s; only a dim (a `u64`) can be too
            // large for `usize`, and `Reader::shape` names the shape.
            ReadError::TooLarge { at, .. } => DecodeError::Invalid {
                at,
                source: TensorDictError::ShapeTooLarge {
                    shape: vec![usize::MAX],
                },
            },
        }
    }
}

/// The codec's reads over a [`ByteReader`]: a dict, a tensor, a value.
struct Reader<'a>(ByteReader<'a>);

impl<'a> Reader<'a> {
    fn shape(&mut self, what: &'static str) -> Result<Vec<usize>, DecodeError> {
        let ndim = self.0.count::<u32>(what, 8)?;
        let mut shape = Vec::with_capacity(ndim);
        for _ in 0..ndim {
            let at = self.0.position();
            let d = self.0.u64(what)?;
            let d = usize::try_from(d).map_err(|_| DecodeError::Invalid {
                at,
                source: TensorDictError::ShapeTooLarge {
                    shape: shape.iter().copied().chain([usize::MAX]).collect(),
                },
            })?;
            shape.push(d);
        }
        Ok(shape)
    }

    fn dict(&mut self, depth: usize) -> Result<TensorDict, DecodeError> {
        if depth > MAX_DEPTH {
            return Err(DecodeError::TooDeep {
                at: self.0.position(),
            });
        }
        let batch = self.shape("batch size")?;
        // Smallest entry: key length (4) + one key byte + kind (1) + payload (>= 2).
        let count = self.0.count::<u32>("entry count", 8)?;
        let mut td = TensorDict::new(&batch);
        let mut previous: Option<&str> = None;
        for _ in 0..count {
            let at = self.0.position();
            let key = self.0.str::<u32>("key")?;
            if previous.is_some_and(|p| p >= key) {
                return Err(DecodeError::KeyOrder {
                    key: key.to_owned(),
                    at,
                });
            }
            previous = Some(key);
            let kind_at = self.0.position();
            let entry = match self.0.u8("entry kind")? {
                KIND_TENSOR => Entry::Tensor(self.tensor()?),
                KIND_NON_TENSOR => Entry::NonTensor(self.value(depth + 1)?),
                KIND_DICT => Entry::Dict(self.dict(depth + 1)?),
                tag => {
                    return Err(DecodeError::UnknownTag {
                        what: "entry kind",
                        tag,
                        at: kind_at,
                    })
                }
            };
            td.set(key, entry)
                .map_err(|source| DecodeError::Invalid { at, source })?;
        }
        Ok(td)
    }

    fn tensor(&mut self) -> Result<Tensor, DecodeError> {
        let at = self.0.position();
        let tag = self.0.u8("dtype")?;
        let dtype = DType::from_tag(tag).ok_or_else(|| DecodeError::UnknownTag {
            what: "dtype",
            tag,
            at,
        })?;
        let shape = self.shape("tensor shape")?;
        let nbytes = checked_numel(&shape)
            .and_then(|n| n.checked_mul(dtype.size()))
            .ok_or_else(|| DecodeError::Invalid {
                at,
                source: TensorDictError::ShapeTooLarge {
                    shape: shape.clone(),
                },
            })?;
        let data = self.0.take(nbytes, "tensor data")?;
        Tensor::from_bytes(dtype, &shape, data)
            .map_err(|source| DecodeError::Invalid { at, source })
    }

    fn value(&mut self, depth: usize) -> Result<NonTensor, DecodeError> {
        if depth > MAX_DEPTH {
            return Err(DecodeError::TooDeep {
                at: self.0.position(),
            });
        }
        let at = self.0.position();
        Ok(match self.0.u8("value tag")? {
            VALUE_INT => NonTensor::Int(self.0.i64("int")?),
            VALUE_FLOAT => NonTensor::Float(self.0.f64("float")?),
            VALUE_BOOL => {
                let b_at = self.0.position();
                match self.0.u8("bool")? {
                    0 => NonTensor::Bool(false),
                    1 => NonTensor::Bool(true),
                    tag => {
                        return Err(DecodeError::UnknownTag {
                            what: "bool",
                            tag,
                            at: b_at,
                        })
                    }
                }
            }
            VALUE_STR => NonTensor::Str(self.0.str::<u32>("string")?.to_owned()),
            VALUE_STACK => {
                // Smallest value: a tag and one byte (a bool).
                let n = self.0.count::<u32>("stack length", 2)?;
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.value(depth + 1)?);
                }
                NonTensor::Stack(items.into())
            }
            tag => {
                return Err(DecodeError::UnknownTag {
                    what: "value",
                    tag,
                    at,
                })
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TensorDict {
        let mut td = TensorDict::new(&[2]);
        td.set("observation", Tensor::full(&[2, 4], 0.5f32))
            .unwrap();
        td.set(
            ("next", "done"),
            Tensor::from_vec(&[2, 1], vec![false, true]).unwrap(),
        )
        .unwrap();
        td.set("env_index", NonTensor::from(vec![3i64, 4])).unwrap();
        td.set("names", NonTensor::from(vec!["a", "b"])).unwrap();
        td
    }

    #[test]
    fn round_trip() {
        let td = sample();
        assert_eq!(decode(&encode(&td)).unwrap(), td);
        let empty = TensorDict::new(&[]);
        assert_eq!(decode(&encode(&empty)).unwrap(), empty);
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = encode(&sample());
        for len in 0..bytes.len() {
            assert!(
                decode(&bytes[..len]).is_err(),
                "prefix of {len} bytes decoded"
            );
        }
    }

    #[test]
    fn corrupted_headers_are_named() {
        let mut bytes = encode(&sample());
        bytes[0] = b'X';
        assert_eq!(decode(&bytes), Err(DecodeError::BadMagic));
        let mut bytes = encode(&sample());
        bytes[4] = 9;
        assert_eq!(
            decode(&bytes).unwrap_err().to_string(),
            "unsupported tensordict message version 9 (this decoder reads 1)"
        );
        let mut bytes = encode(&sample());
        bytes.push(0);
        assert_eq!(decode(&bytes), Err(DecodeError::TrailingBytes { count: 1 }));
    }

    #[test]
    fn huge_counts_do_not_allocate() {
        // A batch size of 2^32-1 dims, and a tensor that claims 2^60 bytes.
        let mut bytes = MAGIC.to_vec();
        bytes.push(VERSION);
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&bytes), Err(DecodeError::Truncated { .. })));

        let mut bytes = MAGIC.to_vec();
        bytes.push(VERSION);
        bytes.extend_from_slice(&0u32.to_le_bytes()); // batch []
        bytes.extend_from_slice(&1u32.to_le_bytes()); // one entry
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.push(b'x');
        bytes.push(KIND_TENSOR);
        bytes.push(DType::F64.tag());
        bytes.extend_from_slice(&2u32.to_le_bytes());
        bytes.extend_from_slice(&(1u64 << 30).to_le_bytes());
        bytes.extend_from_slice(&(1u64 << 30).to_le_bytes());
        assert!(matches!(decode(&bytes), Err(DecodeError::Truncated { .. })));
    }

    #[test]
    fn invalid_content_is_rejected() {
        // A bool tensor byte of 2.
        let mut td = TensorDict::new(&[]);
        td.set("b", Tensor::from_vec(&[1], vec![true]).unwrap())
            .unwrap();
        let mut bytes = encode(&td);
        *bytes.last_mut().unwrap() = 2;
        assert!(matches!(decode(&bytes), Err(DecodeError::Invalid { .. })));

        // Repeated keys.
        let mut bytes = MAGIC.to_vec();
        bytes.push(VERSION);
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&2u32.to_le_bytes());
        for _ in 0..2 {
            bytes.extend_from_slice(&1u32.to_le_bytes());
            bytes.push(b'k');
            bytes.push(KIND_NON_TENSOR);
            bytes.push(VALUE_BOOL);
            bytes.push(1);
        }
        assert!(matches!(decode(&bytes), Err(DecodeError::KeyOrder { .. })));

        // Unknown entry kind and unknown dtype.
        let mut bytes = encode(&td);
        let kind_at = MAGIC.len() + 1 + 4 + 4 + 4 + 1;
        bytes[kind_at] = 7;
        assert!(matches!(
            decode(&bytes),
            Err(DecodeError::UnknownTag {
                what: "entry kind",
                ..
            })
        ));
        let mut bytes = encode(&td);
        bytes[kind_at + 1] = 99;
        assert!(matches!(
            decode(&bytes),
            Err(DecodeError::UnknownTag { what: "dtype", .. })
        ));
    }

    #[test]
    fn deep_nesting_is_refused() {
        let mut bytes = MAGIC.to_vec();
        bytes.push(VERSION);
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.push(b'v');
        bytes.push(KIND_NON_TENSOR);
        for _ in 0..200 {
            bytes.push(VALUE_STACK);
            bytes.extend_from_slice(&1u32.to_le_bytes());
        }
        bytes.push(VALUE_BOOL);
        bytes.push(0);
        let err = decode(&bytes).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::TooDeep { .. } | DecodeError::Truncated { .. }
            ),
            "{err}"
        );
    }
}
