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
    /// A wait ended by the check of [`interruptible`](crate::interruptible)
    /// (a binding's Ctrl-C): nothing was taken, the results waited for stay
    /// in flight for a later receive.
    #[error("interrupted while waiting; the results in flight stay for a later receive")]
    Interrupted,
    /// An env failed: its `reset` or `step` returned an error or panicked.
    /// The same error on every backend; the backend's own error is its
    /// source ([`EnvFailure`]). The env is idle again; other envs go on.
    #[error("env {env} ({name}{}) failed during {during}: {}", worker_suffix(*worker), cause.detail())]
    EnvFailed {
        /// The env's index.
        env: usize,
        /// The env's name.
        name: String,
        /// The worker process that ran it (`None` on the threading
        /// backend, whose worker threads share every env).
        worker: Option<usize>,
        /// `"reset"` or `"step"`.
        during: String,
        /// What happened, as the backend reported it.
        #[source]
        cause: EnvFailure,
    },
    /// The input sent to an env does not fit its input buffer (a missing
    /// action key, a wrong dtype or shape): nothing was sent to any env of
    /// the send.
    #[error("env {env} ({name}): invalid input: {source}")]
    Input {
        /// The first env whose input does not fit.
        env: usize,
        /// The env's name.
        name: String,
        /// What is wrong (the key, dtype or shape).
        source: Box<TensorDictError>,
    },
    /// A worker process died (it exited, was killed, or broke the
    /// protocol): its envs' results are lost and its envs cannot be used
    /// again; the other workers' envs go on.
    #[error("worker {worker} (envs {envs:?}) died: {reason}")]
    WorkerDied {
        /// The worker's index.
        worker: usize,
        /// Its envs.
        envs: Vec<usize>,
        /// How (exit status or signal, or the protocol error that ended
        /// it).
        reason: String,
    },
    /// The threading backend failed for a reason other than an env's
    /// failure (an env that could not be built, a worker thread that could
    /// not start, bad affinity).
    #[error(transparent)]
    Backend(ThreadError),
    /// The process backend failed for a reason other than an env's failure
    /// or a worker's death: a worker that could not start, an env that
    /// could not be built in it, bad affinity, an exchange that cannot
    /// carry the envs' data.
    #[error(transparent)]
    Proc(ProcError),
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

/// The backend's own error behind [`PoolError::EnvFailed`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvFailure {
    /// From the threading backend.
    #[error(transparent)]
    Threads(Box<ThreadError>),
    /// From the process backend.
    #[error(transparent)]
    Procs(Box<ProcError>),
}

impl EnvFailure {
    /// What the env reported, without the env and worker its backend's
    /// message repeats: its error's message, or `panicked: <message>`.
    pub fn detail(&self) -> String {
        match self {
            EnvFailure::Threads(err) => match &**err {
                ThreadError::Env { source, .. } => source.to_string(),
                ThreadError::Panicked { message, .. } => format!("panicked: {message}"),
                other => other.to_string(),
            },
            EnvFailure::Procs(err) => match &**err {
                ProcError::Env { message, .. } => message.clone(),
                ProcError::Panicked { message, .. } => format!("panicked: {message}"),
                other => other.to_string(),
            },
        }
    }
}

/// `", worker W"` for an env that ran in worker process `W`.
fn worker_suffix(worker: Option<usize>) -> String {
    worker.map_or_else(String::new, |w| format!(", worker {w}"))
}

/// An env's failure is [`PoolError::EnvFailed`], an input that does not
/// fit [`PoolError::Input`]; anything else the threading backend reports
/// is [`PoolError::Backend`].
impl From<ThreadError> for PoolError {
    fn from(err: ThreadError) -> Self {
        let (env, name, during) = match &err {
            ThreadError::Env {
                env, name, during, ..
            }
            | ThreadError::Panicked {
                env, name, during, ..
            } => (*env, name.clone(), (*during).to_owned()),
            ThreadError::Input { env, name, source } => {
                return PoolError::Input {
                    env: *env,
                    name: name.clone(),
                    source: source.clone(),
                }
            }
            _ => return PoolError::Backend(err),
        };
        PoolError::EnvFailed {
            env,
            name,
            worker: None,
            during,
            cause: EnvFailure::Threads(Box::new(err)),
        }
    }
}

/// An env's failure is [`PoolError::EnvFailed`], an input that does not
/// fit [`PoolError::Input`], a worker's death [`PoolError::WorkerDied`];
/// anything else the process backend reports is
/// [`PoolError::Proc`].
impl From<ProcError> for PoolError {
    fn from(err: ProcError) -> Self {
        let (env, name, worker, during) = match &err {
            ProcError::Env {
                env,
                name,
                worker,
                during,
                ..
            }
            | ProcError::Panicked {
                env,
                name,
                worker,
                during,
                ..
            } => (*env, name.clone(), Some(*worker), during.clone()),
            ProcError::Input { env, name, source } => {
                return PoolError::Input {
                    env: *env,
                    name: name.clone(),
                    source: source.clone(),
                }
            }
            ProcError::WorkerDied {
                worker,
                envs,
                reason,
            } => {
                return PoolError::WorkerDied {
                    worker: *worker,
                    envs: envs.clone(),
                    reason: reason.clone(),
                }
            }
            _ => return PoolError::Proc(err),
        };
        PoolError::EnvFailed {
            env,
            name,
            worker,
            during,
            cause: EnvFailure::Procs(Box::new(err)),
        }
    }
}

impl From<EnvError> for PoolError {
    fn from(err: EnvError) -> Self {
        PoolError::Env(Box::new(err))
    }
}
