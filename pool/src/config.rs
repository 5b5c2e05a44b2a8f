//! The pool's configuration: `Backend` (with the options valid for each
//! backend inside its variant), `StackMode`, `ResolvedExchange`, and
//! `EnvMaker`.

use std::num::NonZeroUsize;

use envs::{Env, EnvError, Kwargs};

/// Where the envs run. Options valid for one backend only live inside its
/// variant, so that a wrong combination does not compile.
///
/// ```compile_fail
/// // The threading backend has no shared-memory exchange option:
/// let backend = pool::Backend::Threading { threads: None, affinity: None, exchange: pool::ExchangeMode::Shm };
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Backend {
    /// Worker threads in this process that pull env tasks from a queue.
    /// Results travel in memory (the "queue" exchange).
    Threading {
        /// Number of worker threads; default: as many as the machine has
        /// cores, at most one per env.
        threads: Option<NonZeroUsize>,
        /// The CPUs each worker thread may run on ([`crate::Affinity`]: one
        /// set per worker thread, or a function of its index); default:
        /// wherever the scheduler puts it. Validated before any env is
        /// built; each worker thread pins itself before it steps any env.
        /// `Affinity::per_worker` must give one set per worker thread: as
        /// many as `threads`, or by default as the machine has cores, at
        /// most one per env (`Affinity::by_worker` fits any count).
        affinity: Option<crate::Affinity>,
    },
    /// Worker processes: the program started again in worker mode (its
    /// `main` calls [`crate::init`] first), envs built there by registry
    /// name. Results travel through shared-memory slots or the workers'
    /// sockets ([`ProcOptions::exchange`](pool_proc::ProcOptions)).
    Multiprocessing(pool_proc::ProcOptions),
}

impl Default for Backend {
    fn default() -> Self {
        Backend::Threading {
            threads: None,
            affinity: None,
        }
    }
}

/// How results of several envs are stacked into one batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StackMode {
    /// One tensordict with a leading env dim; the envs must have identical
    /// keys, shapes and dtypes.
    #[default]
    Dense,
    /// Dense where the results allow it, lazy otherwise.
    MaybeDense,
    /// The per-env results kept as they are (heterogeneous envs allowed).
    Lazy,
}

/// The data exchange in use (what TorchRL's `resolved_exchange` reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolvedExchange {
    /// Results travel as tensordicts (in memory for threads).
    Queue,
    /// Results travel through shared-memory slots (process backend).
    Shm,
}

/// Builds one env: a closure, or a registry name with keyword arguments.
pub struct EnvMaker(pub(crate) MakerKind);

pub(crate) enum MakerKind {
    Closure(Box<dyn FnOnce() -> Result<Box<dyn Env>, EnvError> + Send>),
    Registry { name: String, kwargs: Kwargs },
}

impl std::fmt::Debug for EnvMaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            MakerKind::Closure(_) => f.write_str("EnvMaker::closure(..)"),
            MakerKind::Registry { name, kwargs } => {
                write!(f, "EnvMaker::registry({name:?}, {kwargs})")
            }
        }
    }
}

impl EnvMaker {
    /// An env built by a closure (threads only: a process cannot receive a
    /// closure; register the env by name instead).
    pub fn closure<F>(make: F) -> EnvMaker
    where
        F: FnOnce() -> Result<Box<dyn Env>, EnvError> + Send + 'static,
    {
        EnvMaker(MakerKind::Closure(Box::new(make)))
    }

    /// An env built from the process-wide registry by name.
    pub fn registry(name: impl Into<String>, kwargs: Kwargs) -> EnvMaker {
        EnvMaker(MakerKind::Registry {
            name: name.into(),
            kwargs,
        })
    }

    pub(crate) fn into_factory(self) -> pool_thread::EnvFactory {
        match self.0 {
            MakerKind::Closure(make) => make,
            MakerKind::Registry { name, kwargs } => Box::new(move || envs::make(&name, &kwargs)),
        }
    }
}
