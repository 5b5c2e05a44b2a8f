//! The threading backend of rlpool.
//!
//! This crate will run the pool's environments on a fixed set of worker
//! threads that pull env tasks from a queue (an env is owned by one task at a
//! time), publish results onto a completion queue, and wait by spinning
//! briefly, then parking. It depends on `tensordict`, `specs` and `envs`, and
//! knows nothing of processes or shared memory. It is not written yet: see the
//! project's issue tracker ("The pool: `AsyncEnvPool` with the threading
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
