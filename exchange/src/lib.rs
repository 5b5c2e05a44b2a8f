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
//! environments or pools. It is being built: see the project's issue tracker
//! ("`exchange`: shared-memory slots with a seqlock readiness clock").

mod error;
mod futex;
mod layout;
mod primitive;
#[cfg(not(loom))]
mod region;
mod schema;
mod seqlock;

pub use crate::error::{LayoutError, SchemaDecodeError, SchemaError};
pub use crate::layout::{
    Area, Layout, CACHE_LINE, FIELD_ALIGN, MAX_AREA_FIELDS, MAX_SLOTS, SLOTS_OFFSET,
    SLOT_HEADER_SIZE,
};
#[cfg(not(loom))]
pub use crate::region::{Region, RegionError};
pub use crate::schema::{Field, Schema};
