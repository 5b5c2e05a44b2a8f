//! The data model of rlpool: typed tensors, nested keys and tensordicts.
//!
//! This crate is the bottom layer: every step of every environment travels
//! as a [`TensorDict`] (a map from [`NestedKey`]s to [`Tensor`]s, non-tensor
//! values and sub-dicts, with one batch size that every entry's leading dims
//! share), as TorchRL's `tensordict` does in Python. It knows nothing of
//! specs, environments or processes.
//!
//! - [`Tensor`]: a [`DType`], a shape and a view into shared, aligned
//!   storage; clones share, writes copy (copy on write); typed access through
//!   bytemuck with a typed error on a dtype mismatch.
//! - [`TensorDict`]: `set`, `get`, `remove`, `keys`, `select`, `exclude`,
//!   `update`, `index`, `unbind`, and a `Display` in TorchRL's style.
//! - Stacking: dense ([`TensorDict::stack`]), lazy
//!   ([`LazyStackedTensorDict`]) and maybe-dense ([`StackedTensorDict`]).
//! - A binary codec ([`encode`], [`decode`]) to send a tensordict through a
//!   pipe; `decode` never panics on malformed bytes.
//! - [`ByteReader`]: the cursor over untrusted bytes that every decoder of
//!   the workspace reads with (this codec, specs, the exchange's schema,
//!   the control socket), its failures a [`ReadError`].
//!
//! ```
//! use tensordict::{decode, encode, DType, NonTensor, Tensor, TensorDict};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // One env's step result.
//! let mut step = TensorDict::new(&[]);
//! step.set("observation", Tensor::from_vec(&[4], vec![0.1f32, 0.0, -0.2, 0.0])?)?;
//! step.set(("next", "reward"), Tensor::from_vec(&[1], vec![1.0f32])?)?;
//! step.set(("next", "done"), Tensor::from_vec(&[1], vec![false])?)?;
//!
//! // Eight of them, stacked into a batch.
//! let batch = TensorDict::stack(&vec![step.clone(); 8])?;
//! assert_eq!(batch.batch_size(), &[8]);
//! assert_eq!(batch.tensor(("next", "reward"))?.shape(), &[8, 1]);
//!
//! // Through a pipe and back.
//! let bytes = encode(&batch);
//! assert_eq!(decode(&bytes)?, batch);
//! # let _ = (DType::F32, NonTensor::Int(0));
//! # Ok(()) }
//! ```
// `unsafe` in two modules: `tensor.rs` (`Tensor::bytes_mut`: a unique
// storage written without `Arc::get_mut`'s second check, and the views of
// lent rows) and `lent.rs` (the blocks that lent rows and shared blocks
// view in place).
#![deny(unsafe_code)]
// `ok_or(Error::Variant { .. })` builds the error on the success path too,
// and drops it there through the error enum's drop glue (its other
// variants own strings): a call per row copy that callgrind counted in the
// workers' hot path. Errors here are made lazily (`ok_or_else`), which
// this lint would turn back.
#![allow(clippy::unnecessary_lazy_evaluations)]

mod byte_reader;
mod codec;
mod dtype;
mod entries;
mod error;
mod key;
mod lent;
mod non_tensor;
mod rows;
mod stack;
mod tensor;
mod tensordict;

pub use crate::byte_reader::{ByteReader, LenPrefix, ReadError};
pub use crate::codec::{decode, encode, encode_into, DecodeError};
pub use crate::dtype::{DType, Element};
pub use crate::error::TensorDictError;
pub use crate::key::{KeyLike, KeyParts, NestedKey};
pub use crate::lent::{LeafMap, LentRows, SharedBlock, ViewCheck};
pub use crate::non_tensor::{Items, NonTensor};
pub use crate::stack::{LazyStackedTensorDict, StackedTensorDict};
pub use crate::tensor::{Shape, Tensor};
pub use crate::tensordict::{Entry, Lookup, TensorDict, TensorMut};
