//! The process backend of rlpool: envs in worker processes.
//!
//! A worker is the user's own program started again (`current_exe`) in
//! worker mode, never forked without exec: the program's `main` calls
//! [`init`] at its top, which runs the worker in a worker process and
//! returns at once anywhere else. Envs are built in the workers from the
//! registry, by name and keyword arguments (register your own envs before
//! calling [`init`]). Each worker has one control socket (its standard
//! input) for the handshake, specs, errors and shutdown; its end is how a
//! dead worker is noticed at once. Several envs may share a worker, each on
//! its own thread there; workers may be pinned to CPUs ([`Affinity`]).
//!
//! Results travel through the worker's socket, encoded ([`ExchangeMode::Queue`]:
//! any data), or through the shared-memory slots of the `exchange` crate
//! ([`ExchangeMode::Shm`]: fixed-shape tensors, no bytes through a socket
//! on the step path). A dead worker is an error naming it and its envs,
//! never a hang; every worker is reaped at shutdown, and the shared memory
//! (a memfd) vanishes with the last process that maps it.
//!
//! [`ProcBackend`] does the work; the pool's semantics (targets, `min_get`,
//! ordering, stacking) are the `pool` crate's, whose `AsyncEnvPool` is the
//! API to use.
//!
//! What a worker runs per command: the env's `reset_into` / `step_into` on
//! buffers built once ([`pool_core::Runner`]):
//!
//! ```
//! use envs::{Env, Kwargs};
//! use pool_core::{Op, Runner};
//! use tensordict::Tensor;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut env = envs::make("CountingEnv", &Kwargs::new().with("max_steps", 3))?;
//! let mut runner = Runner::new(&*env);
//! runner.run(&mut *env, Op::Reset, false)?;
//! runner.input.set("action", Tensor::from_vec(&[1], vec![1i64])?)?;
//! runner.run(&mut *env, Op::Step, true)?;
//! assert_eq!(runner.next.tensor("observation")?.to_vec::<i32>()?, vec![1]);
//! # Ok(()) }
//! ```
// One `unsafe` block: the worker lends an env's slot to its buffers as
// in-place views (`worker::lend`), under the exchange's lending protocol.
#![deny(unsafe_code)]

mod backend;
mod error;
mod fault;
#[doc(hidden)]
pub mod fuzzing;
mod options;
mod spawn;
mod wire;
mod worker;

pub use crate::backend::ProcBackend;
#[doc(hidden)]
pub use crate::backend::Ticket;
pub use crate::error::ProcError;
pub use crate::options::{libtest_worker_args, ExchangeMode, ProcOptions};
pub use crate::worker::{init, is_worker};
pub use affinity::{available_cpus, current_cpus, Affinity, AffinityError, CpuList};
pub use pool_core::{Op, Rows};
