//! The process backend of rlpool.
//!
//! This crate will run environments in worker processes: the user's program
//! re-executed in worker mode (never forked without exec), one control socket
//! per worker for the handshake, specs, errors and shutdown, several envs per
//! worker, CPU affinity, and two exchanges (an encoded queue over the socket,
//! or the shared-memory slots of the `exchange` crate). A dead worker is an
//! error, never a hang; every worker is reaped and no shared memory leaks.
//! It is not written yet: see the project's issue tracker ("The process
//! backend").
//!
//! What it will run: envs built by registry name with keyword arguments,
//! stepped through `reset_into` / `step_into` on buffers built once.
//!
//! ```
//! use envs::{Env, Kwargs};
//! use tensordict::Tensor;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut env = envs::make("CountingEnv", &Kwargs::new().with("max_steps", 3))?;
//! let mut root = env.reset(None)?;
//! let mut next = env.step_template();
//! root.set("action", Tensor::from_vec(&[1], vec![1i64])?)?;
//! env.step_into(&root, &mut next)?;
//! assert_eq!(next.tensor("observation")?.to_vec::<i32>()?, vec![1]);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
