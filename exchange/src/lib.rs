//! Shared-memory slots of typed tensors with a seqlock readiness clock.
//!
//! This crate will hold the exchange that the process backend moves every
//! fixed-shape step through, usable on its own by anyone who wants fast
//! cross-process slots of typed tensors:
//!
//! - a `Schema` built from a template `TensorDict` (keys, dtypes, shapes);
//! - one `memfd` region with, for each slot, an input area, a result area and
//!   a next area laid out from the schema, and a cache-line-padded header that
//!   carries the readiness clock (odd while writing, even when published), a
//!   command word and timestamps;
//! - writers that publish under the clock and wake the reader on a futex, and
//!   readers that receive with `min_get`, `max_get` and a deadline, never
//!   returning a torn result.
//!
//! It sits just above `tensordict` in the layers and knows nothing of
//! environments or pools. It is not written yet: see the project's issue
//! tracker ("`exchange`: shared-memory slots with a seqlock readiness clock").
//!
//! What a schema will be read from: the leaves of a template tensordict,
//! each with its key, dtype and shape, in a deterministic order.
//!
//! ```
//! use tensordict::{DType, Tensor, TensorDict};
//! # fn main() -> Result<(), tensordict::TensorDictError> {
//! let mut template = TensorDict::new(&[]);
//! template.set("observation", Tensor::zeros(DType::U8, &[84, 84, 4]))?;
//! template.set(("next", "reward"), Tensor::zeros(DType::F32, &[1]))?;
//! let layout: Vec<(String, DType, Vec<usize>)> = template
//!     .items(true, true)
//!     .into_iter()
//!     .filter_map(|(key, entry)| {
//!         let t = entry.as_tensor()?;
//!         Some((key.to_string(), t.dtype(), t.shape().to_vec()))
//!     })
//!     .collect();
//! assert_eq!(layout[0], (r#"("next", "reward")"#.to_string(), DType::F32, vec![1]));
//! assert_eq!(layout[1].2, vec![84, 84, 4]);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
