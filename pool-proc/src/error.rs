//! `ProcError`, the failures of the process backend: workers that cannot
//! start or die, envs that cannot be built or fail, bad options, and the
//! control socket's protocol errors. Each message names the worker and/or
//! env involved.

use tensordict::TensorDictError;

use crate::AffinityError;

/// What went wrong in the process backend.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ProcError {
    /// A worker process could not be started.
    #[error("worker {worker}: could not start `{program}`: {message}")]
    Spawn {
        /// The worker's index.
        worker: usize,
        /// The program started again in worker mode.
        program: String,
        /// The OS error.
        message: String,
    },
    /// A worker stopped or misbehaved before it was ready (it exited, did
    /// not answer in time, or sent something unexpected).
    #[error("worker {worker} (envs {envs:?}) failed to start: {reason}")]
    Start {
        /// The worker's index.
        worker: usize,
        /// Its envs.
        envs: Vec<usize>,
        /// What happened (with the exit status when it exited).
        reason: String,
    },
    /// An env could not be built in its worker.
    #[error("env {env} ({name}, worker {worker}): could not be built{}: {message}", if *panicked { " (its constructor panicked)" } else { "" })]
    Build {
        /// The env's index.
        env: usize,
        /// The registry name.
        name: String,
        /// The worker it was built in.
        worker: usize,
        /// The constructor's error or panic message.
        message: String,
        /// Whether the constructor panicked.
        panicked: bool,
    },
    /// Invalid CPU affinity options (checked before anything starts).
    #[error(transparent)]
    Affinity(#[from] AffinityError),
    /// A worker could not pin itself to its CPUs.
    #[error("worker {worker}: could not apply its CPU affinity: {message}")]
    Pin {
        /// The worker's index.
        worker: usize,
        /// The error the worker reported.
        message: String,
    },
    /// An env returned an error from `reset` or `step` in its worker.
    #[error("env {env} ({name}, worker {worker}) failed during {during}: {message}")]
    Env {
        /// The env's index.
        env: usize,
        /// The env's name.
        name: String,
        /// The worker.
        worker: usize,
        /// `"reset"` or `"step"`.
        during: String,
        /// The env's error message.
        message: String,
    },
    /// An env panicked in `reset` or `step`; its worker caught it and lives.
    #[error("env {env} ({name}, worker {worker}) panicked during {during}: {message}")]
    Panicked {
        /// The env's index.
        env: usize,
        /// The env's name.
        name: String,
        /// The worker.
        worker: usize,
        /// `"reset"` or `"step"`.
        during: String,
        /// The panic's message.
        message: String,
    },
    /// A worker process died (exited, was killed, or closed its socket):
    /// its envs' results are lost and its envs cannot be used again.
    #[error("worker {worker} (envs {envs:?}) died: {reason}")]
    WorkerDied {
        /// The worker's index.
        worker: usize,
        /// Its envs.
        envs: Vec<usize>,
        /// How (exit status or signal; or the protocol error that ended it).
        reason: String,
    },
    /// The input for an env does not fit its input buffer (a missing action
    /// key, a wrong dtype or shape).
    #[error("env {env} ({name}): invalid input: {source}")]
    Input {
        /// The env's index.
        env: usize,
        /// The env's name.
        name: String,
        /// What is wrong.
        source: Box<TensorDictError>,
    },
    /// A send to an env whose previous result was not taken, or to one env
    /// twice.
    #[error("env {env} is busy (its previous result was not taken) or addressed twice")]
    Busy {
        /// The env's index.
        env: usize,
    },
    /// An env index past the last env.
    #[error("env index {env} is out of range for {num_envs} envs")]
    NoSuchEnv {
        /// The index.
        env: usize,
        /// The number of envs.
        num_envs: usize,
    },
    /// The shared-memory exchange was asked for, but the envs' data cannot
    /// go through slots.
    #[error("the shm exchange cannot carry these envs' data: {reason}")]
    ShmUnavailable {
        /// Why (the key, shape or dtype and env involved).
        reason: String,
    },
    /// The shared-memory region could not be made or used.
    #[error("shared memory: {message}")]
    Shm {
        /// The exchange's error.
        message: String,
    },
    /// A worker sent a message the parent cannot read, or a message the
    /// protocol does not allow at that point.
    #[error("worker {worker}: protocol error: {reason}")]
    Protocol {
        /// The worker's index.
        worker: usize,
        /// What was wrong.
        reason: String,
    },
}
