//! The binary codec of specs: [`TensorSpec::encode`] and [`TensorSpec::decode`].
//!
//! A worker process sends its env's specs to the parent with it. Layout
//! (all integers little-endian, every length and count a `u64`):
//!
//! ```text
//! message   := MAGIC 0x53 ('S') | VERSION u8 | spec
//! spec      := tag u8 | body
//! tag 0     := unbounded:         dtype u8 | shape
//! tag 1     := bounded:           len u64 | bounds (len bytes)
//! tag 2     := categorical:       dtype u8 | shape | n i64
//! tag 3     := one_hot:           dtype u8 | shape                 (n is the last dim)
//! tag 4     := binary:            dtype u8 | shape
//! tag 5     := multi_categorical: dtype u8 | shape | count u64 | nvec i64 * count
//! tag 6     := non_tensor:        shape
//! tag 7     := composite:         shape | count u64 | entry * count (keys strictly increasing)
//! tag 8     := stacked:           count u64 | spec * count         (count >= 1)
//! entry     := key_len u64 | key utf-8 | spec
//! shape     := ndim u64 | dim u64 * ndim
//! bounds    := a tensordict message (tensordict::encode) of batch size []
//!              holding exactly the tensors "high" and "low"
//! dtype     := tensordict::DType::tag
//! ```
//!
//! The bounds reuse tensordict's codec, so tensor bytes (endianness, bool
//! bytes) have one reader and one writer in the workspace.
//!
//! Decoding never panics. It reads with [`tensordict::ByteReader`], which
//! checks every count against the bytes that remain before reading on (each item takes at least a known number of
//! bytes), reserves room only for shapes and `nvec`s (8 bytes of input per
//! element) and pushes entries and stack parts as they are read, so
//! malformed input cannot make it allocate much more than the input's own
//! size. It bounds its recursion by [`MAX_DECODE_DEPTH`]. Each spec it reads is rebuilt
//! through the public constructors ([`TensorSpec::bounded_tensors`],
//! [`TensorSpec::categorical`], [`Composite::set`], [`StackedSpec::new`],
//! ...), so a decoded spec upholds every invariant a built one does. The
//! encoding is canonical: bytes that decode are the encoding of the spec
//! they decode to.

use tensordict::{ByteReader, DType, Entry, NestedKey, ReadError, Tensor, TensorDict};

use crate::error::DecodeProblem;
use crate::{Bounded, Composite, SpecError, StackedSpec, TensorSpec};

/// The first byte of every message (`'S'`, for spec).
pub(crate) const MAGIC: u8 = b'S';
/// The layout version, the second byte; a decoder refuses any other.
pub(crate) const VERSION: u8 = 1;

/// The deepest nesting [`TensorSpec::decode`] accepts: composite entries and
/// stack parts, counted together, at most this many levels below the root
/// spec.
///
/// Deeper specs encode, but their decoding fails with
/// [`DecodeProblem::TooDeep`]: the decoder recurses once per level, and
/// bounding the depth keeps hostile input from overflowing its stack.
/// [`TensorDict`]s, whose codec has the same limit, nest no deeper either.
pub const MAX_DECODE_DEPTH: usize = 64;

/// Tag of an [`Unbounded`](crate::Unbounded) spec.
const TAG_UNBOUNDED: u8 = 0;
/// Tag of a [`Bounded`] spec.
const TAG_BOUNDED: u8 = 1;
/// Tag of a [`Categorical`](crate::Categorical) spec.
const TAG_CATEGORICAL: u8 = 2;
/// Tag of a [`OneHot`](crate::OneHot) spec.
const TAG_ONE_HOT: u8 = 3;
/// Tag of a [`Binary`](crate::Binary) spec.
const TAG_BINARY: u8 = 4;
/// Tag of a [`MultiCategorical`](crate::MultiCategorical) spec.
const TAG_MULTI_CATEGORICAL: u8 = 5;
/// Tag of a [`NonTensorSpec`](crate::NonTensorSpec).
const TAG_NON_TENSOR: u8 = 6;
/// Tag of a [`Composite`] spec.
const TAG_COMPOSITE: u8 = 7;
/// Tag of a [`StackedSpec`].
const TAG_STACKED: u8 = 8;

/// Key of the lower bounds in the bounds message.
const LOW: &str = "low";
/// Key of the upper bounds in the bounds message.
const HIGH: &str = "high";

/// Size of a length, count or dim.
const WORD: usize = 8;
/// Smallest encoded spec: a tag and an empty shape (a non-tensor of shape
/// `[]`).
const MIN_SPEC: usize = 1 + WORD;
/// Smallest composite entry: a key length and a spec (an empty key is
/// read, then refused by [`Composite::set`]).
const MIN_ENTRY: usize = WORD + MIN_SPEC;

impl TensorSpec {
    /// Encodes the spec into a new buffer, for [`TensorSpec::decode`]: a
    /// magic byte (`'S'`) and a version byte, then the spec, tag by tag
    /// (the layout is written out in `specs/src/codec.rs`). The bounds of a
    /// bounded spec travel as a [`tensordict::encode`] message.
    ///
    /// A spec nested deeper than [`MAX_DECODE_DEPTH`] encodes, but does not
    /// decode.
    ///
    /// ```
    /// use specs::{Composite, TensorSpec};
    /// use tensordict::DType;
    /// # fn main() -> Result<(), specs::SpecError> {
    /// let spec: TensorSpec = Composite::new(&[])
    ///     .with("observation", TensorSpec::bounded(&[3], DType::F32, -8.0, 8.0)?)?
    ///     .with("action", TensorSpec::categorical(&[1], DType::I64, 2)?)?
    ///     .into();
    /// let bytes = spec.encode();
    /// assert_eq!(TensorSpec::decode(&bytes)?, spec);
    /// assert!(TensorSpec::decode(&bytes[..bytes.len() - 1]).is_err());
    /// # Ok(()) }
    /// ```
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Encodes the spec, appending to `out` (reuse a buffer to avoid
    /// allocating per message). As [`TensorSpec::encode`].
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.push(MAGIC);
        out.push(VERSION);
        write_spec(self, out);
    }

    /// Decodes a spec written by [`TensorSpec::encode`].
    ///
    /// Never panics. An error ([`SpecError::Decode`], naming the byte
    /// offset, the key and the env of the spec being read, and what is
    /// wrong) for bytes that are not such a spec: a bad header, truncated
    /// or trailing bytes, an unknown tag, keys out of order, nesting deeper
    /// than [`MAX_DECODE_DEPTH`], or content that the constructors refuse
    /// (bounds with `low > high`, `n == 0`, ...): each spec is rebuilt
    /// through the public constructors, so a decoded spec upholds every
    /// invariant a built one does. Every count is checked against the bytes
    /// that remain before anything is allocated for it, so malformed input
    /// cannot make the decoder allocate much more than the input's size.
    pub fn decode(bytes: &[u8]) -> Result<TensorSpec, SpecError> {
        let mut reader = Reader {
            bytes: ByteReader::new(bytes),
            key: Vec::new(),
            env: Vec::new(),
        };
        let magic = reader.u8("magic byte")?;
        if magic != MAGIC {
            return Err(reader.error(0, DecodeProblem::BadMagic { found: magic }));
        }
        let version = reader.u8("version")?;
        if version != VERSION {
            return Err(reader.error(1, DecodeProblem::UnsupportedVersion { found: version }));
        }
        let spec = reader.spec(0)?;
        reader
            .bytes
            .finish("the spec")
            .map_err(|err| reader.failed(err))?;
        Ok(spec)
    }
}

fn write_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn write_len(out: &mut Vec<u8>, len: usize) {
    // `usize` is at most 64 bits on every target Rust supports.
    write_u64(out, len as u64);
}

fn write_shape(out: &mut Vec<u8>, shape: &[usize]) {
    write_len(out, shape.len());
    for &dim in shape {
        write_len(out, dim);
    }
}

fn write_tensor_header(out: &mut Vec<u8>, tag: u8, dtype: DType, shape: &[usize]) {
    out.push(tag);
    out.push(dtype.tag());
    write_shape(out, shape);
}

fn write_spec(spec: &TensorSpec, out: &mut Vec<u8>) {
    match spec {
        TensorSpec::Unbounded(s) => write_tensor_header(out, TAG_UNBOUNDED, s.dtype, &s.shape),
        TensorSpec::Bounded(b) => {
            out.push(TAG_BOUNDED);
            write_bounds(b, out);
        }
        TensorSpec::Categorical(s) => {
            write_tensor_header(out, TAG_CATEGORICAL, s.dtype, &s.shape);
            out.extend_from_slice(&s.n.to_le_bytes());
        }
        TensorSpec::OneHot(s) => write_tensor_header(out, TAG_ONE_HOT, s.dtype, &s.shape),
        TensorSpec::Binary(s) => write_tensor_header(out, TAG_BINARY, s.dtype, &s.shape),
        TensorSpec::MultiCategorical(s) => {
            write_tensor_header(out, TAG_MULTI_CATEGORICAL, s.dtype, &s.shape);
            write_len(out, s.nvec.len());
            for n in &s.nvec {
                out.extend_from_slice(&n.to_le_bytes());
            }
        }
        TensorSpec::NonTensor(s) => {
            out.push(TAG_NON_TENSOR);
            write_shape(out, &s.shape);
        }
        TensorSpec::Composite(c) => {
            out.push(TAG_COMPOSITE);
            write_shape(out, c.shape());
            write_len(out, c.len());
            for (key, entry) in c.iter() {
                write_len(out, key.len());
                out.extend_from_slice(key.as_bytes());
                write_spec(entry, out);
            }
        }
        TensorSpec::Stacked(s) => {
            out.push(TAG_STACKED);
            write_len(out, s.len());
            for part in s.parts() {
                write_spec(part, out);
            }
        }
    }
}

/// The bounds as a tensordict message, after its length (written once the
/// message is).
fn write_bounds(bounded: &Bounded, out: &mut Vec<u8>) {
    let mut bounds = TensorDict::new(&[]);
    for (key, tensor) in [(LOW, &bounded.low), (HIGH, &bounded.high)] {
        // Cloning a tensor shares its storage; any tensor fits batch size [].
        bounds
            .set(key, tensor.clone())
            .expect("a tensor fits a tensordict of batch size []");
    }
    let len_at = out.len();
    write_u64(out, 0);
    let start = out.len();
    tensordict::encode_into(&bounds, out);
    let len = (out.len() - start) as u64;
    if let Some(slot) = out.get_mut(len_at..start) {
        slot.copy_from_slice(&len.to_le_bytes());
    }
}

/// Reads a message, keeping the key and the env of the spec being read for
/// errors.
struct Reader<'a> {
    bytes: ByteReader<'a>,
    /// The key of the spec being read: the composite entries on its path,
    /// outermost first.
    key: Vec<String>,
    /// The part of each stack on its path, outermost first.
    env: Vec<usize>,
}

impl<'a> Reader<'a> {
    /// A [`SpecError::Decode`] at byte `at`, in the spec being read.
    fn error(&self, at: usize, problem: DecodeProblem) -> SpecError {
        SpecError::Decode {
            at,
            key: NestedKey::new(self.key.iter().map(String::as_str)),
            env: self.env.as_slice().into(),
            problem: Box::new(problem),
        }
    }

    /// A constructor's error about the spec that starts at byte `at`.
    fn invalid(&self, at: usize, err: SpecError) -> SpecError {
        self.error(at, DecodeProblem::Invalid(Box::new(err)))
    }

    /// A failed read, in the spec being read: a count that cannot fit in
    /// the bytes that remain is a truncation (its items would need more
    /// bytes than remain), as is a read past the end.
    fn failed(&self, err: ReadError) -> SpecError {
        let at = err.at();
        let problem = match err {
            ReadError::Truncated {
                what,
                needed,
                remaining,
                ..
            } => DecodeProblem::Truncated {
                what,
                needed,
                remaining,
            },
            ReadError::CountTooLarge {
                what, remaining, ..
            } => DecodeProblem::Truncated {
                what,
                needed: err.needed().unwrap_or(usize::MAX),
                remaining,
            },
            ReadError::TooLarge { what, value, .. } => DecodeProblem::TooLarge { what, value },
            ReadError::InvalidUtf8 { .. } => DecodeProblem::InvalidUtf8,
            ReadError::TrailingBytes { count, .. } => DecodeProblem::TrailingBytes { count },
        };
        self.error(at, problem)
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], SpecError> {
        self.bytes.take(n, what).map_err(|err| self.failed(err))
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, SpecError> {
        self.bytes.u8(what).map_err(|err| self.failed(err))
    }

    fn i64(&mut self, what: &'static str) -> Result<i64, SpecError> {
        self.bytes.i64(what).map_err(|err| self.failed(err))
    }

    /// A `u64` that must fit `usize`.
    fn usize(&mut self, what: &'static str) -> Result<usize, SpecError> {
        self.bytes.u64_usize(what).map_err(|err| self.failed(err))
    }

    /// A `u64` count of items each at least `min_item` bytes long, checked
    /// against the bytes that remain.
    fn count(&mut self, what: &'static str, min_item: usize) -> Result<usize, SpecError> {
        self.bytes
            .count::<u64>(what, min_item)
            .map_err(|err| self.failed(err))
    }

    fn shape(&mut self, what: &'static str) -> Result<Vec<usize>, SpecError> {
        let ndim = self.count(what, WORD)?;
        // At most one dim per 8 bytes that remain.
        let mut shape = Vec::with_capacity(ndim);
        for _ in 0..ndim {
            shape.push(self.usize(what)?);
        }
        Ok(shape)
    }

    fn dtype(&mut self) -> Result<DType, SpecError> {
        let at = self.bytes.position();
        let tag = self.u8("dtype")?;
        DType::from_tag(tag)
            .ok_or_else(|| self.error(at, DecodeProblem::UnknownTag { what: "dtype", tag }))
    }

    fn key(&mut self) -> Result<&'a str, SpecError> {
        // The length is the "key length", its bytes the "key".
        let len = self.count("key length", 1)?;
        let at = self.bytes.position();
        let bytes = self.take(len, "key")?;
        std::str::from_utf8(bytes).map_err(|_| self.error(at, DecodeProblem::InvalidUtf8))
    }

    /// The spec that starts here, `depth` levels below the root.
    fn spec(&mut self, depth: usize) -> Result<TensorSpec, SpecError> {
        let at = self.bytes.position();
        if depth > MAX_DECODE_DEPTH {
            return Err(self.error(at, DecodeProblem::TooDeep));
        }
        let tag = self.u8("spec tag")?;
        let built = match tag {
            TAG_UNBOUNDED => {
                let dtype = self.dtype()?;
                let shape = self.shape("shape")?;
                TensorSpec::try_unbounded(&shape, dtype)
            }
            TAG_BOUNDED => {
                let (low, high) = self.bounds()?;
                TensorSpec::bounded_tensors(low, high)
            }
            TAG_CATEGORICAL => {
                let dtype = self.dtype()?;
                let shape = self.shape("shape")?;
                let n = self.i64("n")?;
                TensorSpec::categorical(&shape, dtype, n)
            }
            TAG_ONE_HOT => {
                let dtype = self.dtype()?;
                let shape = self.shape("shape")?;
                TensorSpec::one_hot(&shape, dtype)
            }
            TAG_BINARY => {
                let dtype = self.dtype()?;
                let shape = self.shape("shape")?;
                TensorSpec::binary(&shape, dtype)
            }
            TAG_MULTI_CATEGORICAL => {
                let dtype = self.dtype()?;
                let shape = self.shape("shape")?;
                let len = self.count("nvec length", WORD)?;
                let mut nvec = Vec::with_capacity(len);
                for _ in 0..len {
                    nvec.push(self.i64("nvec")?);
                }
                TensorSpec::multi_categorical(&shape, dtype, nvec)
            }
            TAG_NON_TENSOR => {
                let shape = self.shape("shape")?;
                TensorSpec::try_non_tensor(&shape)
            }
            TAG_COMPOSITE => return self.composite(depth).map(TensorSpec::Composite),
            TAG_STACKED => {
                let count = self.count("stack length", MIN_SPEC)?;
                // No capacity from the count: each part is pushed once read.
                let mut parts = Vec::new();
                for index in 0..count {
                    self.env.push(index);
                    parts.push(self.spec(depth + 1)?);
                    self.env.pop();
                }
                StackedSpec::new(parts).map(TensorSpec::Stacked)
            }
            tag => return Err(self.error(at, DecodeProblem::UnknownTag { what: "spec", tag })),
        };
        built.map_err(|err| self.invalid(at, err))
    }

    /// The body of a bounded spec: its bounds message, which must hold
    /// exactly the tensors `"low"` and `"high"` at batch size `[]`.
    fn bounds(&mut self) -> Result<(Tensor, Tensor), SpecError> {
        let len = self.count("bounds length", 1)?;
        let at = self.bytes.position();
        let message = self.take(len, "bounds")?;
        let bounds = tensordict::decode(message)
            .map_err(|err| self.error(at, DecodeProblem::Bounds(err)))?;
        let tensor = |key: &str| bounds.get(key).and_then(Entry::as_tensor);
        match (tensor(LOW), tensor(HIGH)) {
            (Some(low), Some(high)) if bounds.batch_size().is_empty() && bounds.len() == 2 => {
                Ok((low.clone(), high.clone()))
            }
            _ => Err(self.error(
                at,
                DecodeProblem::BoundsEntries {
                    batch_size: bounds.batch_size().to_vec(),
                    entries: bounds
                        .iter()
                        .map(|(key, entry)| format!("{key:?} ({})", entry.kind()))
                        .collect(),
                },
            )),
        }
    }

    /// A composite's body: its shape and entries, each set with
    /// [`Composite::set`].
    fn composite(&mut self, depth: usize) -> Result<Composite, SpecError> {
        let shape = self.shape("composite shape")?;
        let mut composite = Composite::new(&shape);
        let count = self.count("entry count", MIN_ENTRY)?;
        let mut previous: Option<&'a str> = None;
        for _ in 0..count {
            let at = self.bytes.position();
            let key = self.key()?;
            if let Some(previous) = previous.filter(|&p| p >= key) {
                return Err(self.error(
                    at,
                    DecodeProblem::KeyOrder {
                        key: key.to_owned(),
                        previous: previous.to_owned(),
                    },
                ));
            }
            previous = Some(key);
            self.key.push(key.to_owned());
            let spec = self.spec(depth + 1)?;
            composite
                .set(key, spec)
                .map_err(|err| self.invalid(at, err))?;
            self.key.pop();
        }
        Ok(composite)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A composite with every kind of spec: leaves, a nested composite with
    /// a batch shape, a dense and a lazy stack.
    fn every_kind() -> TensorSpec {
        let low = Tensor::from_vec(&[2], vec![-1.0f64, 0.5]).unwrap();
        let high = Tensor::from_vec(&[2], vec![1.0f64, f64::INFINITY]).unwrap();
        let env = Composite::new(&[])
            .with("obs", TensorSpec::unbounded(&[3], DType::F32))
            .unwrap()
            .with(
                "action",
                TensorSpec::bounded(&[1], DType::I16, -3.0, 3.0).unwrap(),
            )
            .unwrap();
        let other = env
            .clone()
            .with("obs", TensorSpec::unbounded(&[4], DType::F32))
            .unwrap();
        let lazy = TensorSpec::lazy_stack(vec![env.clone().into(), other.into()]).unwrap();
        let dense = TensorSpec::from(Composite::stack(&[env.clone(), env]).unwrap());
        Composite::new(&[])
            .with("unbounded", TensorSpec::unbounded(&[2, 0], DType::U8))
            .unwrap()
            .with("bounded", TensorSpec::bounded_tensors(low, high).unwrap())
            .unwrap()
            .with(
                "categorical",
                TensorSpec::categorical(&[1], DType::I64, i64::MAX).unwrap(),
            )
            .unwrap()
            .with(
                "one_hot",
                TensorSpec::one_hot(&[2, 5], DType::Bool).unwrap(),
            )
            .unwrap()
            .with("binary", TensorSpec::binary(&[], DType::I8).unwrap())
            .unwrap()
            .with(
                "multi",
                TensorSpec::multi_categorical(&[4, 2], DType::I32, vec![3, 7]).unwrap(),
            )
            .unwrap()
            .with("text", TensorSpec::non_tensor(&[2]))
            .unwrap()
            .with(("nested", "é key"), TensorSpec::non_tensor(&[]))
            .unwrap()
            .with("dense", dense)
            .unwrap()
            .with("lazy", lazy)
            .unwrap()
            .with(
                "parts",
                StackedSpec::new(vec![
                    TensorSpec::non_tensor(&[]),
                    Composite::new(&[3]).into(),
                ])
                .unwrap()
                .into(),
            )
            .unwrap()
            .into()
    }

    fn header() -> Vec<u8> {
        vec![MAGIC, VERSION]
    }

    /// The error of decoding `bytes`, which must be a decode error.
    fn decode_err(bytes: &[u8]) -> (usize, DecodeProblem, String) {
        let err = TensorSpec::decode(bytes).unwrap_err();
        let message = err.to_string();
        match err {
            SpecError::Decode { at, problem, .. } => (at, *problem, message),
            other => panic!("not a decode error: {other:?}"),
        }
    }

    /// A bounded spec whose bounds message holds `bounds`.
    fn bounded_bytes(bounds: &TensorDict) -> Vec<u8> {
        let mut bytes = header();
        bytes.push(TAG_BOUNDED);
        let message = tensordict::encode(bounds);
        write_len(&mut bytes, message.len());
        bytes.extend_from_slice(&message);
        bytes
    }

    #[test]
    fn every_kind_round_trips() {
        let spec = every_kind();
        let bytes = spec.encode();
        assert_eq!(&bytes[..2], &[b'S', 1]);
        assert_eq!(TensorSpec::decode(&bytes).unwrap(), spec);
        let TensorSpec::Composite(c) = &spec else {
            panic!("composite")
        };
        for (key, entry) in c.iter() {
            assert_eq!(
                TensorSpec::decode(&entry.encode()).as_ref(),
                Ok(entry),
                "{key}"
            );
        }
        // `encode_into` appends.
        let mut out = vec![9];
        spec.encode_into(&mut out);
        assert_eq!(&out[1..], bytes.as_slice());
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = every_kind().encode();
        for len in 0..bytes.len() {
            assert!(
                TensorSpec::decode(&bytes[..len]).is_err(),
                "prefix of {len} bytes decoded"
            );
        }
        let (at, problem, message) = decode_err(&[]);
        assert_eq!(at, 0);
        assert!(matches!(problem, DecodeProblem::Truncated { .. }));
        assert_eq!(
            message,
            "cannot decode spec at byte 0 (key <root>): truncated: magic byte needs 1 bytes but 0 remain"
        );
    }

    #[test]
    fn headers_and_trailing_bytes_are_named() {
        let mut bytes = TensorSpec::non_tensor(&[]).encode();
        bytes[0] = b'R';
        assert_eq!(
            decode_err(&bytes).2,
            "cannot decode spec at byte 0 (key <root>): not a spec message: the first byte is \
             0x52, not 0x53 ('S')"
        );
        let mut bytes = TensorSpec::non_tensor(&[]).encode();
        bytes[1] = 9;
        assert_eq!(
            decode_err(&bytes).2,
            "cannot decode spec at byte 1 (key <root>): unsupported spec message version 9 \
             (this decoder reads 1)"
        );
        let mut bytes = TensorSpec::non_tensor(&[]).encode();
        bytes.extend_from_slice(&[0, 0]);
        assert_eq!(
            decode_err(&bytes).2,
            "cannot decode spec at byte 11 (key <root>): 2 trailing bytes after the spec"
        );
    }

    #[test]
    fn unknown_tags_name_the_key_the_env_and_the_offset() {
        // ("a", "b") is a stack whose part 1 has an unknown tag.
        let mut bytes = header();
        bytes.push(TAG_COMPOSITE);
        write_shape(&mut bytes, &[]);
        write_len(&mut bytes, 1);
        write_len(&mut bytes, 1);
        bytes.push(b'a');
        bytes.push(TAG_COMPOSITE);
        write_shape(&mut bytes, &[]);
        write_len(&mut bytes, 1);
        write_len(&mut bytes, 1);
        bytes.push(b'b');
        bytes.push(TAG_STACKED);
        write_len(&mut bytes, 2);
        write_spec(&TensorSpec::non_tensor(&[]), &mut bytes);
        let bad_at = bytes.len();
        bytes.push(42);
        bytes.extend_from_slice(&[0; 8]);
        let (at, problem, message) = decode_err(&bytes);
        assert_eq!(at, bad_at);
        assert_eq!(
            problem,
            DecodeProblem::UnknownTag {
                what: "spec",
                tag: 42
            }
        );
        assert_eq!(
            message,
            format!(
                r#"cannot decode spec at byte {bad_at} (key ("a", "b"), env 1): unknown spec tag 42"#
            )
        );

        let mut bytes = TensorSpec::unbounded(&[1], DType::F32).encode();
        bytes[3] = 200;
        assert_eq!(
            decode_err(&bytes).2,
            "cannot decode spec at byte 3 (key <root>): unknown dtype tag 200"
        );
    }

    #[test]
    fn keys_must_be_sorted_utf8_and_valid() {
        let entry = |bytes: &mut Vec<u8>, key: &[u8]| {
            write_len(bytes, key.len());
            bytes.extend_from_slice(key);
            write_spec(&TensorSpec::non_tensor(&[]), bytes);
        };
        let composite = |keys: &[&[u8]]| {
            let mut bytes = header();
            bytes.push(TAG_COMPOSITE);
            write_shape(&mut bytes, &[]);
            write_len(&mut bytes, keys.len());
            for key in keys {
                entry(&mut bytes, key);
            }
            bytes
        };
        let (at, problem, message) = decode_err(&composite(&[b"b", b"a"]));
        assert_eq!(at, 2 + 1 + 8 + 8 + 8 + 1 + 9);
        assert!(matches!(problem, DecodeProblem::KeyOrder { .. }));
        assert_eq!(
            message,
            format!(
                r#"cannot decode spec at byte {at} (key <root>): key "a" does not come after key "b" (keys are sorted, each once)"#
            )
        );
        assert!(matches!(
            decode_err(&composite(&[b"a", b"a"])).1,
            DecodeProblem::KeyOrder { .. }
        ));
        let (at, problem, message) = decode_err(&composite(&[b"\xff"]));
        assert_eq!(problem, DecodeProblem::InvalidUtf8);
        assert_eq!(
            message,
            format!("cannot decode spec at byte {at} (key <root>): a key is not valid UTF-8")
        );
        // An empty key, refused by `Composite::set`.
        let (_, problem, message) = decode_err(&composite(&[b""]));
        assert!(matches!(problem, DecodeProblem::Invalid(_)));
        assert_eq!(
            message,
            r#"cannot decode spec at byte 19 (key ""): invalid key "": keys are non-empty and no part is empty"#
        );
    }

    #[test]
    fn constructors_check_what_is_decoded() {
        // n == 0.
        let mut bytes = TensorSpec::categorical(&[1], DType::I64, 3)
            .unwrap()
            .encode();
        let n_at = bytes.len() - 8;
        bytes[n_at..].copy_from_slice(&0i64.to_le_bytes());
        assert_eq!(
            decode_err(&bytes).2,
            "cannot decode spec at byte 2 (key <root>): invalid categorical spec: n must be at \
             least 1, got 0"
        );
        // A bool dtype for a bounded spec, `low > high`.
        let mut bounds = TensorDict::new(&[]);
        bounds
            .set(LOW, Tensor::from_vec(&[1], vec![1.0f32]).unwrap())
            .unwrap();
        bounds
            .set(HIGH, Tensor::from_vec(&[1], vec![0.0f32]).unwrap())
            .unwrap();
        assert_eq!(
            decode_err(&bounded_bytes(&bounds)).2,
            "cannot decode spec at byte 2 (key <root>): invalid bounded spec: element 0: low 1 \
             is greater than high 0"
        );
        // Bounds of different shapes.
        bounds
            .set(HIGH, Tensor::from_vec(&[2], vec![2.0f32, 3.0]).unwrap())
            .unwrap();
        assert!(decode_err(&bounded_bytes(&bounds))
            .2
            .ends_with("low has shape [1] but high has shape [2]"));
        // A stack of no part.
        let mut bytes = header();
        bytes.push(TAG_STACKED);
        write_len(&mut bytes, 0);
        assert_eq!(
            decode_err(&bytes).2,
            "cannot decode spec at byte 2 (key <root>): cannot stack an empty list of specs"
        );
        // An entry whose shape does not start with its composite's.
        let mut bytes = header();
        bytes.push(TAG_COMPOSITE);
        write_shape(&mut bytes, &[4]);
        write_len(&mut bytes, 1);
        write_len(&mut bytes, 3);
        bytes.extend_from_slice(b"obs");
        write_spec(&TensorSpec::unbounded(&[3], DType::F32), &mut bytes);
        assert_eq!(
            decode_err(&bytes).2,
            r#"cannot decode spec at byte 27 (key "obs"): spec at key "obs" has shape [3], which does not start with the composite's shape [4]"#
        );
        // A one-hot spec without a dim, a multi-categorical nvec that does
        // not fit its shape.
        let mut bytes = header();
        write_tensor_header(&mut bytes, TAG_ONE_HOT, DType::Bool, &[]);
        assert!(decode_err(&bytes).2.contains("invalid one_hot spec"));
        let mut bytes = header();
        write_tensor_header(&mut bytes, TAG_MULTI_CATEGORICAL, DType::I64, &[3]);
        write_len(&mut bytes, 1);
        bytes.extend_from_slice(&2i64.to_le_bytes());
        assert!(decode_err(&bytes)
            .2
            .contains("the last dim of shape [3] is 3 but nvec [2] has 1 elements"));
    }

    #[test]
    fn bounds_must_be_a_tensordict_of_low_and_high() {
        let spec = TensorSpec::bounded(&[2], DType::F32, -1.0, 1.0).unwrap();
        let mut bytes = spec.encode();
        // The bounds message starts after the tag and its length.
        bytes[11] = b'X';
        let (at, problem, message) = decode_err(&bytes);
        assert_eq!(at, 11);
        assert!(matches!(problem, DecodeProblem::Bounds(_)));
        assert_eq!(
            message,
            "cannot decode spec at byte 11 (key <root>): bad bounds message: not a tensordict \
             message: bad magic bytes"
        );

        let mut bounds = TensorDict::new(&[]);
        bounds
            .set(LOW, Tensor::from_vec(&[1], vec![1.0f32]).unwrap())
            .unwrap();
        bounds
            .set("mid", Tensor::from_vec(&[1], vec![1.0f32]).unwrap())
            .unwrap();
        let (at, problem, message) = decode_err(&bounded_bytes(&bounds));
        assert_eq!(at, 11);
        assert!(matches!(problem, DecodeProblem::BoundsEntries { .. }));
        assert_eq!(
            message,
            r#"cannot decode spec at byte 11 (key <root>): the bounds message must hold exactly the tensors "high" and "low" at batch size [], but holds ["low" (tensor), "mid" (tensor)] at batch size []"#
        );
        // Right keys, but a batch size or a third entry.
        let mut batched = TensorDict::new(&[1]);
        batched
            .set(LOW, Tensor::from_vec(&[1], vec![0.0f32]).unwrap())
            .unwrap();
        batched
            .set(HIGH, Tensor::from_vec(&[1], vec![1.0f32]).unwrap())
            .unwrap();
        assert!(decode_err(&bounded_bytes(&batched))
            .2
            .ends_with("at batch size [1]"));
        let mut three = TensorDict::new(&[]);
        for key in [LOW, HIGH, "x"] {
            three
                .set(key, Tensor::from_vec(&[1], vec![0.0f32]).unwrap())
                .unwrap();
        }
        assert!(matches!(
            decode_err(&bounded_bytes(&three)).1,
            DecodeProblem::BoundsEntries { .. }
        ));
    }

    #[test]
    fn nesting_is_limited_to_max_decode_depth() {
        fn nested(levels: usize) -> TensorSpec {
            let mut spec = TensorSpec::non_tensor(&[]);
            for _ in 0..levels {
                spec = StackedSpec::new(vec![spec]).unwrap().into();
            }
            spec
        }
        let deepest = nested(MAX_DECODE_DEPTH);
        assert_eq!(TensorSpec::decode(&deepest.encode()).unwrap(), deepest);
        let (at, problem, message) = decode_err(&nested(MAX_DECODE_DEPTH + 1).encode());
        assert_eq!(problem, DecodeProblem::TooDeep);
        assert_eq!(at, 2 + (MAX_DECODE_DEPTH + 1) * 9);
        assert!(
            message.ends_with("env [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]): nesting deeper than MAX_DECODE_DEPTH (64) levels"),
            "{message}"
        );
        // Composites count too.
        let mut spec = TensorSpec::non_tensor(&[]);
        for _ in 0..=MAX_DECODE_DEPTH {
            spec = Composite::new(&[]).with("k", spec).unwrap().into();
        }
        assert_eq!(decode_err(&spec.encode()).1, DecodeProblem::TooDeep);
    }

    #[test]
    fn huge_counts_are_refused_before_allocating() {
        // A shape of u64::MAX dims, a stack of 2^40 parts, a key of 2^62
        // bytes: each checked against the bytes that remain.
        let mut bytes = header();
        bytes.push(TAG_NON_TENSOR);
        write_u64(&mut bytes, u64::MAX);
        let (at, problem, message) = decode_err(&bytes);
        assert_eq!(at, 3);
        assert!(matches!(
            problem,
            DecodeProblem::Truncated {
                what: "shape",
                needed: usize::MAX,
                remaining: 0
            }
        ));
        assert_eq!(
            message,
            format!(
                "cannot decode spec at byte 3 (key <root>): truncated: shape needs {} bytes but 0 remain",
                usize::MAX
            )
        );
        let mut bytes = header();
        bytes.push(TAG_STACKED);
        write_u64(&mut bytes, 1 << 40);
        assert!(matches!(
            decode_err(&bytes).1,
            DecodeProblem::Truncated {
                what: "stack length",
                ..
            }
        ));
        let mut bytes = header();
        bytes.push(TAG_COMPOSITE);
        write_shape(&mut bytes, &[]);
        write_len(&mut bytes, 1);
        write_u64(&mut bytes, 1 << 62);
        bytes.extend_from_slice(&[0; 32]);
        assert!(matches!(
            decode_err(&bytes).1,
            DecodeProblem::Truncated {
                what: "key length",
                ..
            }
        ));
        // Sizes that overflow are the constructors' errors, not allocations.
        let mut bytes = header();
        write_tensor_header(&mut bytes, TAG_UNBOUNDED, DType::F64, &[usize::MAX, 2]);
        assert!(decode_err(&bytes).2.contains("too large"));
    }

    #[test]
    fn problems_read_as_sentences() {
        assert_eq!(
            DecodeProblem::TooLarge {
                what: "shape",
                value: u64::MAX
            }
            .to_string(),
            "shape 18446744073709551615 does not fit usize"
        );
    }
}
