//! `Output`: one env's result as a backend hands it to the pool, borrowed
//! from where the backend keeps it.

use tensordict::TensorDict;

use crate::Op;

/// The result of one env, borrowed from its backend while it is read:
/// what both backends' `peek` and `peek_many` give the pool, so that the
/// facade passes it on as it is.
#[derive(Clone, Copy, Debug)]
pub struct Output<'a> {
    /// The operation that produced it.
    pub op: Op,
    /// For a step: the `"next"` entries.
    pub next: &'a TensorDict,
    /// For a reset: the reset root; for step-and-maybe-reset: the root of
    /// the next step.
    pub root: &'a TensorDict,
}
