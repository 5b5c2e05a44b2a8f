//! Shared-memory slots of typed tensors with a seqlock readiness clock.
//!
//! This crate holds the exchange that the process backend moves every
//! fixed-shape step through, usable on its own by anyone who wants fast
//! cross-process slots of typed tensors:
//!
//! - a [`Schema`] built from a template `TensorDict` (keys, dtypes, shapes);
//! - one `memfd` [`Region`] with, for each slot, an input area, a result
//!   area and a next area laid out from the schemas ([`Layout`]), and a
//!   cache-line-padded header that carries the readiness clock (odd while
//!   writing, even when published), a command word and timestamps;
//! - the [`Exchange`] over them: the parent writes an action and posts a
//!   command that the worker sleeps on; the worker publishes under the clock
//!   and rings the parent's bell; the parent receives with `min_get`,
//!   `max_get` and a deadline ([`Receive`]), never a torn result, and keeps
//!   [`ExchangeStats`].
//!
//! It sits just above `tensordict` in the layers and knows nothing of
//! environments or pools.
//!
//! ```
//! use exchange::{Exchange, Field, Receive, Schema};
//! use std::time::Duration;
//! use tensordict::{DType, Tensor, TensorDict};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let observation = Schema::new(&[], vec![Field::new("observation", DType::F32, &[4])?])?;
//! let none = Schema::empty(&[]);
//! let mut reader = Exchange::create("doc", none.clone(), observation.clone(), none.clone(), 4)?;
//! // In another process (here: the same one), from a duplicated descriptor.
//! let writer = Exchange::open(reader.try_clone_fd()?, none.clone(), observation, none)?;
//!
//! let mut result = TensorDict::new(&[]);
//! result.set("observation", Tensor::full(&[4], 1.0f32))?;
//! writer.publish(2, &result)?;
//! writer.publish(0, &result)?;
//!
//! let received = reader.receive(Receive::new().min_get(2).timeout(Duration::from_secs(1)))?;
//! assert_eq!(received.slots(), &[0, 2]);
//! assert_eq!(received.batch().tensor("observation")?.shape(), &[2, 4]);
//! // Nothing new: a poll times out, and takes nothing.
//! assert!(reader.receive(Receive::new().timeout(Duration::ZERO)).is_err());
//! # Ok(()) }
//! ```
//!
//! `unsafe` code is denied in the crate but for three modules: `region`
//! (the mapping's atomics and byte copies at bounds-checked offsets),
//! `seqlock` (the relaxed-atomic copies over raw pointers) and
//! `exchange/lend` (a slot's fields lent as in-place views). Everything else
//! reaches the mapping through their safe methods.
#![deny(unsafe_code)]

#[cfg(not(loom))]
mod bells;
mod error;
#[cfg(not(loom))]
mod exchange;
mod futex;
mod layout;
mod primitive;
#[cfg(not(loom))]
#[allow(unsafe_code)]
mod region;
mod schema;
#[allow(unsafe_code)]
mod seqlock;
#[cfg(not(loom))]
mod stats;

#[cfg(not(loom))]
pub use crate::bells::Bells;
#[cfg(not(loom))]
pub use crate::error::ExchangeError;
pub use crate::error::{LayoutError, ReadError, SchemaDecodeError, SchemaError, WriteError};
#[cfg(not(loom))]
pub use crate::exchange::{
    Columns, Exchange, InputRows, LentWrite, Receive, Received, SlotRead, SlotView, FIRST_COMMAND,
    SLOT_KEY,
};
pub use crate::layout::{
    Area, Layout, CACHE_LINE, FIELD_ALIGN, MAX_AREA_FIELDS, MAX_SLOTS, SLOTS_OFFSET,
    SLOT_HEADER_SIZE,
};
#[cfg(not(loom))]
pub use crate::region::{Region, RegionError};
pub use crate::schema::{Field, Schema, SIZE_HEADER};
#[cfg(not(loom))]
pub use crate::stats::{now_ns, ExchangeStats, StatValue};
