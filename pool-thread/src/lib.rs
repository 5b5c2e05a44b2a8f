//! The threading backend of rlpool: envs stepped by a fixed set of worker
//! threads that pull env tasks from a queue.
//!
//! Each env lives in a slot with buffers built once from its specs (its
//! inputs, its `"next"` outputs, its reset root). A send checks the inputs
//! and queues the envs with them, a chunk in the queue of each worker whose
//! block of envs they belong to (so an env stays on one thread); a worker
//! claims the envs of its chunks one at a time (when its queue is empty,
//! from the back of another's), copies the env's inputs into its
//! slot, runs `reset_into` / `step_into`, catches any panic, and publishes
//! the result in its slot at once, so that no result waits for another
//! env's step and no queued env waits behind one (with
//! [`Rows::Batch`], also copied column by column into each
//! env's row of a batch of all envs, EnvPool's state buffer, so that a
//! receive of many results copies nothing more); the owner waits for results
//! (spinning briefly, then sleeping, always with an optional deadline) and
//! takes them. Nothing is allocated per step for fixed-shape envs.
//!
//! This crate sits above `envs` and `pool-core` (what both backends
//! share) and knows nothing of processes or shared memory. The pool's
//! semantics (busy envs, targets, `min_get`, ordering, stacking) live in
//! the `pool` facade, which drives this backend through its caller
//! contract: the step-level methods used below, hidden from these docs and
//! not a stable API (use `pool::AsyncEnvPool`).
//!
//! ```
//! use envs::{Env, Kwargs};
//! use pool_thread::{EnvFactory, Op, Rows, ThreadBackend, ThreadOptions};
//! use tensordict::{Tensor, TensorDict};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let factories: Vec<EnvFactory> = (0..4)
//!     .map(|_| Box::new(|| envs::make("CountingEnv", &Kwargs::new())) as EnvFactory)
//!     .collect();
//! let backend = ThreadBackend::start(factories, &ThreadOptions::default(), Rows::PerEnv)?;
//!
//! // One action per env, in the rows of a batch.
//! let mut actions = TensorDict::new(&[4]);
//! actions.set("action", Tensor::from_vec(&[4, 1], vec![1i64, 1, 1, 1])?)?;
//! let jobs: Vec<(usize, Option<usize>)> = (0..4).map(|i| (i, Some(i))).collect();
//! backend.send(Op::Reset, &jobs, None)?;
//! for env in 0..4 {
//!     while !backend.is_done(env) {
//!         backend.wait(backend.generation(), None);
//!     }
//!     backend.take(env, |_| ())?;
//! }
//! backend.send(Op::Step, &jobs, Some(&actions))?;
//! let mut counts = Vec::new();
//! for env in 0..4 {
//!     while !backend.is_done(env) {
//!         backend.wait(backend.generation(), None);
//!     }
//!     counts.push(backend.take(env, |out| out.next.tensor("observation").unwrap().to_vec::<i32>().unwrap()[0])?);
//! }
//! assert_eq!(counts, vec![1, 1, 1, 1]);
//! backend.shutdown();
//! # Ok(()) }
//! ```
//!
//! `unsafe` code is denied in the crate but for one module, `row_store`:
//! the calls into `tensordict::LentRows` whose soundness rests on this
//! backend's protocol (a row is read or written by the store only while
//! its flags, cleared by a send and set by the publication, both under the
//! store's lock, say that its env is not running).
#![deny(unsafe_code)]

mod backend;
mod error;
mod options;
mod queue;

pub use crate::backend::{EnvFactory, Op, ThreadBackend, SHUTDOWN_GRACE};
pub use crate::error::ThreadError;
pub use crate::options::ThreadOptions;
pub use pool_core::Rows;
