//! `ThreadError`, the failures of the threading backend: an env that could
//! not be built, that returned an error, or that panicked.

use envs::EnvError;
use tensordict::TensorDictError;

/// What went wrong in the threading backend. Each message names the env (by
/// index and name).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ThreadError {
    /// An env's constructor returned an error.
    #[error("env {env}: could not be built: {source}")]
    Build {
        /// The env's index.
        env: usize,
        /// The constructor's error.
        source: Box<EnvError>,
    },
    /// An env's constructor panicked.
    #[error("env {env}: its constructor panicked: {message}")]
    BuildPanicked {
        /// The env's index.
        env: usize,
        /// The panic's message.
        message: String,
    },
    /// An env returned an error from `reset` or `step`.
    #[error("env {env} ({name}) failed during {during}: {source}")]
    Env {
        /// The env's index.
        env: usize,
        /// The env's name.
        name: String,
        /// `"reset"` or `"step"`.
        during: &'static str,
        /// The env's error.
        source: Box<EnvError>,
    },
    /// An env panicked in `reset` or `step`; the worker thread caught it.
    #[error("env {env} ({name}) panicked during {during}: {message}")]
    Panicked {
        /// The env's index.
        env: usize,
        /// The env's name.
        name: String,
        /// `"reset"` or `"step"`.
        during: &'static str,
        /// The panic's message.
        message: String,
    },
    /// The input given for an env does not fit its input buffer (a missing
    /// action key, a wrong dtype or shape).
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
    /// A worker thread could not be started.
    #[error("could not start worker thread {worker}: {message}")]
    Spawn {
        /// The worker's index.
        worker: usize,
        /// The OS error.
        message: String,
    },
    /// The worker threads' CPU sets ([`crate::ThreadOptions::affinity`])
    /// are invalid, or one could not be applied (the message names the
    /// worker).
    #[error("worker thread CPU affinity: {0}")]
    Affinity(#[from] affinity::AffinityError),
    /// Zero worker threads were asked for.
    #[error("the threading backend needs at least one worker thread")]
    NoThreads,
}
