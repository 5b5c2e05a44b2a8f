//! `SpecError`, the failures of specs, `Mismatch`, why a value is not
//! contained in a spec, and `DecodeProblem`, why bytes are not a spec.

use std::fmt;

use tensordict::{DType, DecodeError, NestedKey, TensorDictError};

use crate::codec::{MAGIC, VERSION};
use crate::MAX_DECODE_DEPTH;

/// A key as it appears in messages: `"action"`, `("next", "reward")`, or
/// `<root>` for the empty key (the spec or value itself).
pub(crate) struct KeyName<'a>(pub(crate) &'a NestedKey);

impl fmt::Display for KeyName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("<root>")
        } else {
            fmt::Display::fmt(self.0, f)
        }
    }
}

/// Shorthand for [`KeyName`] in `#[error]` attributes.
fn key_name(key: &NestedKey) -> KeyName<'_> {
    KeyName(key)
}

/// The envs of a containment error as they appear in messages: nothing for
/// none, `, env 1` for one, `, env [1, 0]` for nested stacks (outermost
/// first).
struct EnvName<'a>(&'a [usize]);

impl fmt::Display for EnvName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            [] => Ok(()),
            [one] => write!(f, ", env {one}"),
            path => write!(f, ", env {path:?}"),
        }
    }
}

/// Shorthand for [`EnvName`] in `#[error]` attributes.
fn env_name(env: &[usize]) -> EnvName<'_> {
    EnvName(env)
}

/// `:` after an env, to set it off from the mismatch; nothing otherwise.
fn env_colon(env: &[usize]) -> &'static str {
    if env.is_empty() {
        ""
    } else {
        ":"
    }
}

/// What went wrong with a spec. Each message names the key (`<root>` for the
/// spec itself), the env index, the shape or the dtype involved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// A spec that cannot be built: `low > high`, `n == 0`, a one-hot last
    /// dim that is not `n`, an `nvec` whose length is not the last dim,
    /// bounds of another shape or dtype, a dtype the kind does not allow.
    #[error("invalid {kind} spec: {reason}")]
    Invalid {
        /// The kind of spec (`"bounded"`, `"categorical"`, ...).
        kind: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A value that is not in the spec, e.g. `value at key "action" is out
    /// of bounds: element 0 is 3.5, outside [-2, 2]`, or, inside a stack,
    /// `value at key "action", env 1: is out of bounds: ...`.
    #[error(
        "value at key {}{}{} {mismatch}",
        key_name(.key),
        env_name(.env),
        env_colon(.env)
    )]
    NotContained {
        /// The value's key (empty for a value checked on its own).
        key: NestedKey,
        /// The env whose part of the value is not contained, when the spec
        /// is a stack: the part of a lazy stack ([`StackedSpec`]), or the
        /// row along dim 0 of a leaf in a composite with a batch shape (a
        /// dense stack). One index per nested stack, outermost first; empty
        /// outside stacks. Element and row indices in `mismatch` are then
        /// within that env's part of the value.
        ///
        /// [`StackedSpec`]: crate::StackedSpec
        env: Box<[usize]>,
        /// Why it is not contained.
        mismatch: Mismatch,
    },
    /// A key of the spec that the checked tensordict lacks.
    #[error(
        "key {} required by the spec is missing{}; keys present: [{}]",
        key_name(.key),
        env_name(.env),
        .available.join(", ")
    )]
    MissingKey {
        /// The missing key.
        key: NestedKey,
        /// The env whose part of the value lacks the key (see
        /// [`SpecError::NotContained`]); empty outside stacks.
        env: Box<[usize]>,
        /// The keys the tensordict has at the level where the key is missing.
        available: Vec<String>,
    },
    /// Specs that cannot be stacked densely because env `index` differs from
    /// env 0.
    #[error("cannot stack specs densely: at key {}, env {index} {reason}", key_name(.key))]
    StackMismatch {
        /// The first key that differs (empty when the specs themselves are
        /// leaves that differ).
        key: NestedKey,
        /// The first env that differs from env 0.
        index: usize,
        /// What differs, e.g. `has unbounded(shape=[3], dtype=f32) but env 0
        /// has unbounded(shape=[4], dtype=f32)`.
        reason: String,
    },
    /// Composite specs of different shapes (batch sizes) given to a lazy
    /// stack.
    #[error(
        "cannot stack specs: env {index} has shape {found:?} but env 0 has shape {expected:?}"
    )]
    StackShape {
        /// The first env whose shape differs.
        index: usize,
        /// The shape of env 0.
        expected: Vec<usize>,
        /// The shape of env `index`.
        found: Vec<usize>,
    },
    /// Stacking no spec at all.
    #[error("cannot stack an empty list of specs")]
    EmptyStack,
    /// An index past the end of dimension 0.
    #[error(
        "index {index} is out of range for dimension 0 of size {len} (spec at key {})",
        key_name(.key)
    )]
    IndexOutOfRange {
        /// The key of the spec indexed (empty for the spec itself).
        key: NestedKey,
        /// The index.
        index: usize,
        /// The size of dimension 0.
        len: usize,
    },
    /// Indexing a spec that has no dimension 0 to index, or whose dimension
    /// 0 is the one-hot (or `nvec`) dimension.
    #[error("cannot index the spec at key {} along dimension 0: {reason}", key_name(.key))]
    NotIndexable {
        /// The key of the spec (empty for the spec itself).
        key: NestedKey,
        /// Why not.
        reason: String,
    },
    /// A key that a composite spec does not have.
    #[error("key {} not found; keys present: [{}]", key_name(.key), .available.join(", "))]
    KeyNotFound {
        /// The key asked for.
        key: NestedKey,
        /// The keys present at the level where the lookup failed.
        available: Vec<String>,
    },
    /// A spec of another kind than the one needed (a leaf on the path of a
    /// nested key, which needs composites).
    #[error("spec at key {} is {found}, not {expected}", key_name(.key))]
    WrongKind {
        /// The key of the spec.
        key: NestedKey,
        /// The kind needed.
        expected: &'static str,
        /// The spec's kind.
        found: &'static str,
    },
    /// An empty key, or a key with an empty part.
    #[error("invalid key {}: keys are non-empty and no part is empty", key_name(.key))]
    InvalidKey {
        /// The key.
        key: NestedKey,
    },
    /// A spec set into a composite whose shape its own shape does not start
    /// with.
    #[error(
        "spec at key {} has shape {shape:?}, which does not start with the composite's shape {composite:?}",
        key_name(.key)
    )]
    ShapePrefix {
        /// The key.
        key: NestedKey,
        /// The spec's shape.
        shape: Vec<usize>,
        /// The composite's shape.
        composite: Vec<usize>,
    },
    /// Sampling a lazily stacked spec whose parts' values differ in shape or
    /// dtype: no single dense value holds them.
    #[error("cannot make one value for the spec at key {}: {reason}", key_name(.key))]
    Ragged {
        /// The key of the stacked spec.
        key: NestedKey,
        /// What differs.
        reason: String,
    },
    /// A spec too large to stack, or whose value is too large to make:
    /// stacking gives a shape whose size in bytes overflows `usize`, or
    /// [`TensorSpec::rand`] / [`TensorSpec::zero`] would make a value of
    /// more than [`MAX_VALUE_BYTES`] bytes (or a non-tensor of more than
    /// [`MAX_NON_TENSOR_NDIM`] dims).
    ///
    /// [`TensorSpec::rand`]: crate::TensorSpec::rand
    /// [`TensorSpec::zero`]: crate::TensorSpec::zero
    /// [`MAX_VALUE_BYTES`]: crate::MAX_VALUE_BYTES
    /// [`MAX_NON_TENSOR_NDIM`]: crate::MAX_NON_TENSOR_NDIM
    #[error("spec at key {} is too large: {reason}", key_name(.key))]
    TooLarge {
        /// The key of the spec (empty for the spec itself).
        key: NestedKey,
        /// The shape of the spec, or of the stack that would be made.
        shape: Vec<usize>,
        /// What is too large.
        reason: String,
    },
    /// A tensor operation that failed.
    #[error(transparent)]
    Tensor(#[from] TensorDictError),
    /// Bytes that [`TensorSpec::decode`] cannot read as a spec, e.g.
    /// `cannot decode spec at byte 57 (key ("next", "done"), env 1):
    /// unknown spec tag 12`.
    ///
    /// [`TensorSpec::decode`]: crate::TensorSpec::decode
    #[error(
        "cannot decode spec at byte {at} (key {}{}): {problem}",
        key_name(.key),
        env_name(.env)
    )]
    Decode {
        /// Byte offset of the problem in the message. For
        /// [`DecodeProblem::Invalid`], where the refused spec starts (or its
        /// key, for an entry a composite refuses); for
        /// [`DecodeProblem::Bounds`], where the bounds message starts (the
        /// offsets of the inner error count from there).
        at: usize,
        /// The key of the spec being read: the composite entries from the
        /// root to it (empty for the root spec).
        key: NestedKey,
        /// The part of each stack on the way to it, outermost first, as in
        /// [`SpecError::NotContained`]; empty outside stacks.
        env: Box<[usize]>,
        /// What is wrong (boxed, to keep `SpecError` small).
        problem: Box<DecodeProblem>,
    },
}

/// What is wrong with bytes given to [`TensorSpec::decode`] (the problem of
/// [`SpecError::Decode`]).
///
/// [`TensorSpec::decode`]: crate::TensorSpec::decode
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum DecodeProblem {
    /// The message does not start with the spec magic byte (`'S'`).
    BadMagic {
        /// The first byte.
        found: u8,
    },
    /// A layout version this decoder does not read.
    UnsupportedVersion {
        /// The version in the message.
        found: u8,
    },
    /// The message ends before what it announces.
    Truncated {
        /// What was being read.
        what: &'static str,
        /// The bytes it needs.
        needed: usize,
        /// The bytes that remain.
        remaining: usize,
    },
    /// An unknown tag byte: a spec kind or a dtype.
    UnknownTag {
        /// Which tag (`"spec"`, `"dtype"`).
        what: &'static str,
        /// Its value.
        tag: u8,
    },
    /// A length or dim that does not fit `usize` (on 32-bit targets).
    TooLarge {
        /// What was being read.
        what: &'static str,
        /// Its value.
        value: u64,
    },
    /// A composite key that is not UTF-8.
    InvalidUtf8,
    /// A composite key that does not come after the one before it (keys
    /// are written sorted, each once).
    KeyOrder {
        /// The key.
        key: String,
        /// The key before it.
        previous: String,
    },
    /// Nesting deeper than [`MAX_DECODE_DEPTH`].
    TooDeep,
    /// Bytes after the end of the spec.
    TrailingBytes {
        /// How many.
        count: usize,
    },
    /// The bounds of a bounded spec are not a tensordict message.
    Bounds(DecodeError),
    /// The bounds message does not hold exactly the tensors `"high"` and
    /// `"low"` at batch size `[]`.
    BoundsEntries {
        /// Its batch size.
        batch_size: Vec<usize>,
        /// Its entries, each as `"key" (kind)`.
        entries: Vec<String>,
    },
    /// Well-formed bytes that make a spec the constructors refuse (the
    /// constructor's error: `low > high`, `n == 0`, a stack of no part, an
    /// entry whose shape does not start with its composite's, ...).
    Invalid(Box<SpecError>),
}

impl fmt::Display for DecodeProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeProblem::BadMagic { found } => write!(
                f,
                "not a spec message: the first byte is {found:#04x}, not {MAGIC:#04x} ('S')"
            ),
            DecodeProblem::UnsupportedVersion { found } => write!(
                f,
                "unsupported spec message version {found} (this decoder reads {VERSION})"
            ),
            DecodeProblem::Truncated {
                what,
                needed,
                remaining,
            } => write!(
                f,
                "truncated: {what} needs {needed} bytes but {remaining} remain"
            ),
            DecodeProblem::UnknownTag { what, tag } => write!(f, "unknown {what} tag {tag}"),
            DecodeProblem::TooLarge { what, value } => {
                write!(f, "{what} {value} does not fit usize")
            }
            DecodeProblem::InvalidUtf8 => f.write_str("a key is not valid UTF-8"),
            DecodeProblem::KeyOrder { key, previous } => write!(
                f,
                "key {key:?} does not come after key {previous:?} (keys are sorted, each once)"
            ),
            DecodeProblem::TooDeep => {
                write!(
                    f,
                    "nesting deeper than MAX_DECODE_DEPTH ({MAX_DECODE_DEPTH}) levels"
                )
            }
            DecodeProblem::TrailingBytes { count } => {
                write!(f, "{count} trailing bytes after the spec")
            }
            DecodeProblem::Bounds(err) => write!(f, "bad bounds message: {err}"),
            DecodeProblem::BoundsEntries {
                batch_size,
                entries,
            } => write!(
                f,
                "the bounds message must hold exactly the tensors \"high\" and \"low\" at \
                 batch size [], but holds [{}] at batch size {batch_size:?}",
                entries.join(", ")
            ),
            DecodeProblem::Invalid(err) => fmt::Display::fmt(err, f),
        }
    }
}

/// Why a value is not contained in a spec (the reason of
/// [`SpecError::NotContained`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Mismatch {
    /// A tensor, a non-tensor or a tensordict where the spec wants another
    /// of these.
    Entry {
        /// What the spec wants (`"tensor"`, `"non-tensor"`, `"tensordict"`).
        expected: &'static str,
        /// What the value is.
        found: &'static str,
    },
    /// A tensor of another dtype.
    DType {
        /// The spec's dtype.
        expected: DType,
        /// The value's dtype.
        found: DType,
    },
    /// A value of another shape.
    Shape {
        /// The spec's shape.
        expected: Vec<usize>,
        /// The value's shape.
        found: Vec<usize>,
    },
    /// A tensordict whose batch size is not the composite spec's shape.
    BatchSize {
        /// The spec's shape.
        expected: Vec<usize>,
        /// The tensordict's batch size.
        found: Vec<usize>,
    },
    /// An element outside the spec's domain (bounds, `0..n`, 0/1). NaN is
    /// outside every bounded domain.
    OutOfBounds {
        /// Row-major index of the element.
        index: usize,
        /// The element.
        value: String,
        /// The lowest value allowed at that index.
        low: String,
        /// The highest value allowed at that index.
        high: String,
    },
    /// A value of a one-hot spec that is not one-hot.
    NotOneHot {
        /// What is wrong (which element or row).
        reason: String,
    },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Entry { expected, found } => {
                write!(f, "is a {found} but the spec expects a {expected}")
            }
            Mismatch::DType { expected, found } => {
                write!(f, "has dtype {found} but the spec has dtype {expected}")
            }
            Mismatch::Shape { expected, found } => {
                write!(f, "has shape {found:?} but the spec has shape {expected:?}")
            }
            Mismatch::BatchSize { expected, found } => {
                write!(
                    f,
                    "has batch size {found:?} but the spec has shape {expected:?}"
                )
            }
            Mismatch::OutOfBounds {
                index,
                value,
                low,
                high,
            } => write!(
                f,
                "is out of bounds: element {index} is {value}, outside [{low}, {high}]"
            ),
            Mismatch::NotOneHot { reason } => write!(f, "is not one-hot: {reason}"),
        }
    }
}

impl SpecError {
    /// An [`SpecError::Invalid`] error.
    pub(crate) fn invalid(kind: &'static str, reason: impl Into<String>) -> SpecError {
        SpecError::Invalid {
            kind,
            reason: reason.into(),
        }
    }

    /// A [`SpecError::NotContained`] error outside stacks.
    pub(crate) fn not_contained(key: &NestedKey, mismatch: Mismatch) -> SpecError {
        SpecError::NotContained {
            key: key.clone(),
            env: Box::default(),
            mismatch,
        }
    }

    /// A [`SpecError::TooLarge`] error.
    pub(crate) fn too_large(
        key: &NestedKey,
        shape: &[usize],
        reason: impl Into<String>,
    ) -> SpecError {
        SpecError::TooLarge {
            key: key.clone(),
            shape: shape.to_vec(),
            reason: reason.into(),
        }
    }

    /// This containment error, as the error of env `env` of a stack: `env`
    /// goes before the envs the error already names (inner stacks). Other
    /// errors are returned as they are.
    pub(crate) fn in_env(mut self, env: usize) -> SpecError {
        if let SpecError::NotContained { env: path, .. } | SpecError::MissingKey { env: path, .. } =
            &mut self
        {
            *path = std::iter::once(env).chain(path.iter().copied()).collect();
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_empty_key_reads_as_root() {
        assert_eq!(KeyName(&NestedKey::default()).to_string(), "<root>");
        assert_eq!(
            KeyName(&NestedKey::from(("next", "reward"))).to_string(),
            r#"("next", "reward")"#
        );
    }

    #[test]
    fn envs_read_after_the_key() {
        let mismatch = Mismatch::Shape {
            expected: vec![3],
            found: vec![4],
        };
        let at = |env: Vec<usize>| SpecError::NotContained {
            key: NestedKey::from("obs"),
            env: env.into(),
            mismatch: mismatch.clone(),
        };
        assert_eq!(
            at(vec![]).to_string(),
            r#"value at key "obs" has shape [4] but the spec has shape [3]"#
        );
        assert_eq!(
            at(vec![1]).to_string(),
            r#"value at key "obs", env 1: has shape [4] but the spec has shape [3]"#
        );
        assert_eq!(
            at(vec![2]).in_env(0).to_string(),
            r#"value at key "obs", env [0, 2]: has shape [4] but the spec has shape [3]"#
        );
        let missing = SpecError::MissingKey {
            key: NestedKey::from("obs"),
            env: Box::default(),
            available: vec!["a".into()],
        };
        assert_eq!(
            missing.clone().in_env(3).to_string(),
            r#"key "obs" required by the spec is missing, env 3; keys present: [a]"#
        );
        // Other errors are not containment errors: unchanged.
        assert_eq!(SpecError::EmptyStack.in_env(1), SpecError::EmptyStack);
        assert_eq!(
            SpecError::too_large(&NestedKey::default(), &[2], "why").to_string(),
            "spec at key <root> is too large: why"
        );
    }

    #[test]
    fn tensor_errors_pass_through() {
        let err = SpecError::from(TensorDictError::EmptyStack);
        assert_eq!(err.to_string(), "cannot stack an empty list");
    }

    #[test]
    fn mismatches_read_as_sentences() {
        let err = SpecError::not_contained(
            &NestedKey::from("obs"),
            Mismatch::Entry {
                expected: "tensor",
                found: "non-tensor",
            },
        );
        assert_eq!(
            err.to_string(),
            r#"value at key "obs" is a non-tensor but the spec expects a tensor"#
        );
    }
}
