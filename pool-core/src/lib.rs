//! What both backends of rlpool share, below them both (as `rayon-core`
//! sits below `rayon`): the pool's side of an env and the protocols that
//! every backend follows.
//!
//! - [`Runner`]: an env's buffers, built once from its specs, and the one
//!   call ([`Op`]) a worker makes on the env per command, with its errors
//!   ([`RunError`], [`panic_message`]).
//! - [`Phases`]: where each env stands ([`phase::IDLE`], [`phase::QUEUED`],
//!   [`phase::DONE`], [`phase::FAILED`]), one atomic per env.
//! - [`Liveness`]: a worker's life, and the order between a send and a
//!   death that leaves no command waiting for a dead worker (model-checked
//!   with loom: `cargo xtask loom`).
//! - [`Signal`]: the generation counter receivers sleep on, and
//!   [`spin`]: the spin-then-sleep policy of every wait, in one place
//!   (`README.md` beside this crate explains it).
//! - [`Output`]: one env's result as both backends hand it to the pool;
//!   [`Rows`]: where a backend leaves results, chosen by the pool;
//!   [`BatchRows`]: with [`Rows::Batch`], every env's latest result in
//!   its row of two batches of all envs, and what a receive gathers from
//!   them; [`peek_cells`]: a read of several envs' results at once.
//! - [`lock`]: the one poison-tolerant way to take a pool's mutexes.
//!
//! This crate depends on `tensordict` and `envs` only; `exchange` and the
//! backends are above it, and the `pool` facade above those.
//!
//! ```
//! use envs::{CountingEnv, Env};
//! use pool_core::{phase, Op, Output, Phases, Runner};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut env = CountingEnv::new(0, 5);
//! let mut runner = Runner::new(&env);
//! let phases = Phases::new(1);
//!
//! phases.queue(0); // a send
//! runner.run(&mut env, Op::Reset, false)?; // a worker runs it,
//! phases.publish(0, false); // and publishes the result
//! assert_eq!(phases.get(0), phase::DONE);
//! let out = Output { op: Op::Reset, next: &runner.next, root: &runner.root };
//! assert_eq!(out.root.tensor("observation")?.to_vec::<i32>()?, vec![0]);
//! phases.release(0); // the receiver took it
//! assert!(phases.is_idle(0));
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

pub mod batch_rows;
mod liveness;
mod lock;
mod op;
mod output;
mod peek;
pub mod phase;
mod primitive;
mod rows;
mod runner;
mod signal;
pub mod spin;

pub use crate::batch_rows::BatchRows;
pub use crate::liveness::Liveness;
pub use crate::lock::lock;
pub use crate::op::Op;
pub use crate::output::Output;
pub use crate::peek::peek_cells;
pub use crate::phase::Phases;
pub use crate::rows::Rows;
pub use crate::runner::{panic_message, RunError, Runner};
pub use crate::signal::Signal;
