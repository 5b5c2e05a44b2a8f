//! The pool's configuration: `Backend` (with the options valid for each
//! backend inside its variant), `StackMode`, `ResolvedExchange`, and
//! `EnvMaker`.

use envs::{Env, EnvError, Kwargs};
use pool_proc::ProcOptions;
use pool_thread::ThreadOptions;

/// Where the envs run, with the options of that backend inside its
/// variant, so that an option of the other backend does not compile.
///
/// ```
/// use pool::{Backend, ExchangeMode, ProcOptions, ThreadOptions};
/// let threads = Backend::Threading(ThreadOptions::default().threads(4));
/// let procs = Backend::Multiprocessing(ProcOptions::default().exchange(ExchangeMode::Shm));
/// # let _ = (threads, procs);
/// ```
///
/// ```compile_fail
/// // The threading backend has no exchange: its results stay in memory.
/// let backend = pool::Backend::Threading(
///     pool::ThreadOptions::default().exchange(pool::ExchangeMode::Shm),
/// );
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Backend {
    /// Worker threads in this process that pull env tasks from a queue
    /// (default: as many as the machine has cores, at most one per env).
    Threading(ThreadOptions),
    /// Worker processes: the program started again in worker mode (its
    /// `main` calls [`crate::init`] first), envs built there by registry
    /// name. Results travel through shared-memory slots or the workers'
    /// sockets ([`ProcOptions::exchange`]).
    Multiprocessing(ProcOptions),
}

impl Default for Backend {
    fn default() -> Self {
        Backend::Threading(ThreadOptions::default())
    }
}

/// How results of several envs are stacked into one batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StackMode {
    /// One tensordict with a leading env dim; the envs must have identical
    /// keys, shapes and dtypes.
    #[default]
    Dense,
    /// Dense where the results allow it, lazy otherwise. Envs whose
    /// results share one layout get the dense batches, built as a dense
    /// pool builds them (from the backend's batch rows, no per-env
    /// tensordict).
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
