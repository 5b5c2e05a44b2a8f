//! The threading backend of rlpool.
//!
//! This crate will run the pool's environments on a fixed set of worker
//! threads that pull env tasks from a queue (an env is owned by one task at a
//! time), publish results onto a completion queue, and wait by spinning
//! briefly, then parking. It depends on `tensordict`, `specs` and `envs`, and
//! knows nothing of processes or shared memory. It is not written yet: see the
//! project's issue tracker ("The pool: `AsyncEnvPool` with the threading
//! backend").
#![forbid(unsafe_code)]
