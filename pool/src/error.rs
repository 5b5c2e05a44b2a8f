//! `PoolError`, the failures of the pool: bad arguments, busy envs,
//! timeouts, and the failures of envs and backends.

use std::time::Duration;

use envs::EnvError;
use pool_proc::ProcError;
use pool_thread::ThreadError;
use specs::SpecError;
use tensordict::TensorDictError;

/// What went wrong in a pool call. Each message names the env(s), the
/// argument or the key involved. A call that fails leaves the pool usable;
/// a receive that fails loses no result that it did not name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// A pool with no env.
    #[error("a pool needs at least one env")]
    NoEnvs,
    /// Per-env keyword arguments whose number is not the number of envs.
    #[error("{name}: {found} sets of keyword arguments for {expected} envs")]
    KwargsLength {
        /// The env name.
        name: String,
        /// The number of envs.
        expected: usize,
        /// The number of keyword sets given.
        found: usize,
    },
    /// Children whose specs cannot be stacked in the chosen mode.
    #[error("cannot stack the envs' {which} specs: {source}")]
    Specs {
        /// `"action"`, `"observation"`, `"reward"`, `"done"` or `"state"`.
        which: &'static str,
        /// The stacking error (it names the key and env).
        source: Box<SpecError>,
    },
    /// `min_get` of 0.
    #[error("min_get must be at least 1, got {min_get}")]
    MinGet {
        /// The value given.
        min_get: usize,
    },
    /// `max_get` below `min_get`.
    #[error("max_get ({max_get}) must be at least min_get ({min_get})")]
    MaxGet {
        /// `min_get`.
        min_get: usize,
        /// `max_get`.
        max_get: usize,
    },
    /// `min_get` above the number of envs in flight for the operation.
    #[error(
        "cannot wait for {min_get} {op} results: only {in_flight} envs are in flight for {op}"
    )]
    NotEnoughInFlight {
        /// The operation.
        op: &'static str,
        /// `min_get`.
        min_get: usize,
        /// Envs in flight for it (batch sends only).
        in_flight: usize,
    },
    /// Fewer than `min_get` results by the deadline; nothing was taken.
    #[error("{op} receive timed out after {timeout:?}: {ready} of min_get {min_get} results ready; none was taken")]
    Timeout {
        /// The operation.
        op: &'static str,
        /// The timeout.
        timeout: Duration,
        /// Results ready at the deadline.
        ready: usize,
        /// `min_get`.
        min_get: usize,
    },
    /// A per-env receive whose env had no result by the deadline.
    #[error("{op} receive of env {env} timed out after {timeout:?}; its result stays for the next receive")]
    EnvTimeout {
        /// The operation.
        op: &'static str,
        /// The env.
        env: usize,
        /// The timeout.
        timeout: Duration,
    },
    /// A send to envs whose previous result has not been received.
    #[error("envs {envs:?} are busy: receive their results before sending to them again")]
    Busy {
        /// The busy envs among those addressed.
        envs: Vec<usize>,
    },
    /// A synchronous call while envs are in flight.
    #[error("envs {envs:?} are still in flight: receive their results before a synchronous {op}")]
    InFlight {
        /// The operation.
        op: &'static str,
        /// The envs in flight.
        envs: Vec<usize>,
    },
    /// A per-env receive for an env with nothing in flight for that
    /// operation.
    #[error("env {env} has no {op} in flight")]
    NotInFlight {
        /// The operation.
        op: &'static str,
        /// The env.
        env: usize,
    },
    /// An env index out of range.
    #[error("env index {env} is out of range for a pool of {num_envs} envs")]
    EnvOutOfRange {
        /// The index.
        env: usize,
        /// The number of envs.
        num_envs: usize,
    },
    /// An env addressed twice in one send.
    #[error("env {env} is addressed twice in one send")]
    DuplicateEnv {
        /// The env.
        env: usize,
    },
    /// A target whose length is not the tensordict's first batch dim.
    #[error("the target names {targets} envs but the tensordict has batch size {batch_size:?}")]
    TargetLength {
        /// Envs named.
        targets: usize,
        /// The tensordict's batch size.
        batch_size: Vec<usize>,
    },
    /// A tensordict whose rows do not have the batch size of the envs they
    /// are sent to (an extra or missing batch dim).
    #[error("env {env} has batch size {expected:?} but its row of the tensordict has batch size {found:?}")]
    RowBatchSize {
        /// The first env whose row does not fit.
        env: usize,
        /// The env's own batch size.
        expected: Vec<usize>,
        /// The batch size of a row of the tensordict.
        found: Vec<usize>,
    },
    /// A send with `Target::EnvIndex` whose tensordict has no usable
    /// `"env_index"` entry.
    #[error("target EnvIndex: {reason}")]
    EnvIndex {
        /// What is wrong.
        reason: String,
    },
    /// A step sent without a tensordict.
    #[error("{op} needs a tensordict with the actions")]
    MissingInput {
        /// The operation.
        op: &'static str,
    },
    /// The pool was shut down.
    #[error("the pool is shut down")]
    ShutDown,
    /// An env failed, panicked or got an invalid input (the message names
    /// the env), or the backend failed.
    #[error(transparent)]
    Backend(#[from] ThreadError),
    /// The process backend failed: a worker that could not start or died,
    /// an env that failed in its worker (the message names the worker and
    /// env), bad affinity, an exchange that cannot carry the envs' data.
    #[error(transparent)]
    Proc(#[from] ProcError),
    /// An env given as a closure to the process backend, which builds envs
    /// in its workers by registry name.
    #[error("env {env} is a closure, but worker processes build envs by name: register it (envs::register) and add it with EnvMaker::registry or registered_n")]
    NeedsRegistry {
        /// The env.
        env: usize,
    },
    /// An env could not be made (registry name, keyword arguments).
    #[error(transparent)]
    Env(Box<EnvError>),
    /// A data error while building a batch (results of one batch that do
    /// not stack densely).
    #[error(transparent)]
    Data(#[from] TensorDictError),
}

impl From<EnvError> for PoolError {
    fn from(err: EnvError) -> Self {
        PoolError::Env(Box::new(err))
    }
}
