//! `TensorDictError`, the failures of tensors and tensordicts.

use crate::{DType, NestedKey};

/// What went wrong with a tensor or a tensordict. Each message names the key,
/// shape, dtype or index involved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TensorDictError {
    /// Typed access with a type that is not the tensor's dtype.
    #[error("dtype mismatch: the tensor holds {found} but was accessed as {expected}")]
    DTypeMismatch {
        /// The dtype asked for.
        expected: DType,
        /// The tensor's dtype.
        found: DType,
    },
    /// A number of values that does not fill the shape.
    #[error("shape {shape:?} holds {expected} elements but {found} were given")]
    ElementCount {
        /// The shape asked for.
        shape: Vec<usize>,
        /// Its number of elements.
        expected: usize,
        /// The number given.
        found: usize,
    },
    /// A shape whose number of elements (or bytes) overflows `usize`.
    #[error("shape {shape:?} is too large")]
    ShapeTooLarge {
        /// The shape.
        shape: Vec<usize>,
    },
    /// Raw bytes that are not valid values of the dtype (a `bool` byte other
    /// than 0 or 1).
    #[error("invalid bytes for dtype {dtype}: {reason}")]
    InvalidBytes {
        /// The dtype.
        dtype: DType,
        /// What is wrong.
        reason: String,
    },
    /// A reshape to a shape with another number of elements.
    #[error("cannot reshape a tensor of shape {from:?} to {to:?}: element counts differ")]
    Reshape {
        /// The tensor's shape.
        from: Vec<usize>,
        /// The shape asked for.
        to: Vec<usize>,
    },
    /// Indexing or unbinding along dimension 0 of something without one.
    #[error("{what} needs at least one dimension, but the shape is []")]
    ZeroDim {
        /// The operation.
        what: &'static str,
    },
    /// An index past the end of dimension 0.
    #[error("index {index} is out of range for dimension 0 of size {len}")]
    IndexOutOfRange {
        /// The index.
        index: usize,
        /// The size of the dimension.
        len: usize,
    },
    /// Stacking nothing.
    #[error("cannot stack an empty list")]
    EmptyStack,
    /// Tensors to stack that differ in shape or dtype.
    #[error("cannot stack: tensor {index} has {found} but tensor 0 has {expected}")]
    StackTensors {
        /// The first index that differs.
        index: usize,
        /// What tensor 0 has (shape and dtype).
        expected: String,
        /// What the tensor at `index` has.
        found: String,
    },
    /// A copy between tensors of different shapes or dtypes.
    #[error("cannot copy a tensor of {found} into one of {expected}")]
    CopyMismatch {
        /// The destination's shape and dtype.
        expected: String,
        /// The source's shape and dtype.
        found: String,
    },
    /// Tensordicts that cannot be stacked densely.
    #[error("cannot stack densely: at key {key}, tensordict {index} {reason}")]
    StackDicts {
        /// The first key that differs.
        key: NestedKey,
        /// The first index that differs.
        index: usize,
        /// What differs.
        reason: String,
    },
    /// Tensordicts with different batch sizes given to a stack.
    #[error("cannot stack: tensordict {index} has batch size {found:?} but tensordict 0 has {expected:?}")]
    StackBatchSize {
        /// The first index that differs.
        index: usize,
        /// Batch size of tensordict 0.
        expected: Vec<usize>,
        /// Batch size at `index`.
        found: Vec<usize>,
    },
    /// An entry whose leading dimensions do not match the batch size.
    #[error("entry {key} has shape {shape:?}, whose leading dims do not match the batch size {batch_size:?}")]
    BatchSize {
        /// The entry's key.
        key: NestedKey,
        /// The entry's shape.
        shape: Vec<usize>,
        /// The tensordict's batch size.
        batch_size: Vec<usize>,
    },
    /// A key that is not there.
    #[error("key {key} not found; keys present: [{}]", available.join(", "))]
    KeyNotFound {
        /// The key asked for.
        key: NestedKey,
        /// The keys present at the level where the lookup failed.
        available: Vec<String>,
    },
    /// An entry of another kind than the one asked for.
    #[error("entry {key} is a {found}, not a {expected}")]
    WrongKind {
        /// The entry's key.
        key: NestedKey,
        /// The kind asked for.
        expected: &'static str,
        /// The entry's kind.
        found: &'static str,
    },
    /// An empty key, or a key with an empty part.
    #[error("invalid key {key}: keys are non-empty and no part is empty")]
    InvalidKey {
        /// The key.
        key: NestedKey,
    },
    /// A view of a [`crate::SharedBlock`] whose bytes leave the block or
    /// are misaligned for its dtype.
    #[error("a view of {nbytes} bytes of {dtype} at offset {offset} does not fit a block of {len} bytes (or is misaligned)")]
    ViewOutOfBlock {
        /// The dtype of the view.
        dtype: crate::DType,
        /// Where it would start.
        offset: usize,
        /// Its size in bytes.
        nbytes: usize,
        /// The block's size in bytes.
        len: usize,
    },
    /// A key of a lazy stack that cannot be read as one stacked value.
    #[error("lazy stack: key {key} cannot be stacked: {reason}")]
    LazyKey {
        /// The key.
        key: NestedKey,
        /// Why not.
        reason: String,
    },
}
