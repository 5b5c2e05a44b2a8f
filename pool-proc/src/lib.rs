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
#![forbid(unsafe_code)]
