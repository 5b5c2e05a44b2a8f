//! `ProcOptions`: the process backend's options (envs per worker, exchange,
//! CPU affinity, how workers are started, deadlines).

use std::ffi::OsString;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use tensordict::NestedKey;

use crate::Affinity;

/// How results travel from the workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExchangeMode {
    /// Shared-memory slots when every env's data has fixed shapes and the
    /// same keys, dtypes and shapes; otherwise the queue (the reason is
    /// kept: [`crate::ProcBackend::exchange_reason`]).
    #[default]
    Auto,
    /// Tensordicts encoded over each worker's socket: any data.
    Queue,
    /// Shared-memory slots: no tensor bytes through a socket. An error at
    /// start if the envs' data does not fit slots.
    Shm,
}

/// Options of the process backend. Build with [`ProcOptions::default`] and
/// the setters.
///
/// ```
/// use pool_proc::{Affinity, ExchangeMode, ProcOptions};
/// let options = ProcOptions::default()
///     .envs_per_worker(4)
///     .exchange(ExchangeMode::Shm)
///     .affinity(Affinity::by_worker(|w| vec![w % 2]));
/// # let _ = options;
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ProcOptions {
    /// Envs hosted by each worker process (default 1). The last worker may
    /// host fewer.
    pub(crate) envs_per_worker: NonZeroUsize,
    /// Threads that run each worker's envs (default: as many as the CPUs
    /// the worker may use — its affinity set, else this process's CPUs
    /// shared among the workers — at least one, at most one per env). An
    /// env runs on one of them at a time; a worker starts a spare thread
    /// when all of them are stuck inside envs while commands wait.
    pub(crate) threads_per_worker: Option<NonZeroUsize>,
    /// The most threads a worker runs its envs on, the spares it starts
    /// when its threads are all stuck inside envs included (default: one
    /// per env). Envs that hold one lock while they step (Python envs and
    /// the GIL) gain nothing from spares: cap it at `threads_per_worker`.
    pub(crate) max_threads_per_worker: Option<NonZeroUsize>,
    /// The exchange (default [`ExchangeMode::Auto`]).
    pub(crate) exchange: ExchangeMode,
    /// Result entries that are length-prefixed (default: none): see
    /// [`ProcOptions::length_prefixed`].
    pub(crate) length_prefixed: Vec<NestedKey>,
    /// One CPU set per worker, applied in the worker before any env is
    /// built (default: none).
    pub(crate) affinity: Option<Affinity>,
    /// Without an affinity, whether the workers are spread over this
    /// process's CPUs (default: yes): see [`ProcOptions::spread_workers`].
    pub(crate) spread: bool,
    /// The program a worker runs (default: this one, `current_exe`). Any
    /// program whose `main` calls the init function and registers the same
    /// envs will do.
    pub(crate) program: Option<PathBuf>,
    /// Arguments for the program when it is started again as a worker
    /// (default: none). A test binary needs the arguments that run only the
    /// test calling the init function: see [`libtest_worker_args`].
    pub(crate) worker_args: Vec<OsString>,
    /// Whether the workers' standard output is thrown away (default:
    /// false, it is this process's). Test binaries set it: the test
    /// harness of each worker prints its own banner.
    pub(crate) quiet: bool,
    /// How long a worker may take to start, pin itself and build its envs
    /// (default 60 s).
    pub(crate) start_timeout: Duration,
    /// How long shutdown waits for a worker to exit before killing it
    /// (default 2 s).
    pub(crate) shutdown_timeout: Duration,
}

impl Default for ProcOptions {
    fn default() -> Self {
        ProcOptions {
            envs_per_worker: NonZeroUsize::MIN,
            threads_per_worker: None,
            max_threads_per_worker: None,
            exchange: ExchangeMode::Auto,
            length_prefixed: Vec::new(),
            affinity: None,
            spread: true,
            program: None,
            worker_args: Vec::new(),
            quiet: false,
            start_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(2),
        }
    }
}

impl ProcOptions {
    /// Sets the envs per worker (0 counts as 1).
    pub fn envs_per_worker(mut self, n: usize) -> ProcOptions {
        self.envs_per_worker = NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN);
        self
    }

    /// Sets the threads per worker (0: the default).
    pub fn threads_per_worker(mut self, n: usize) -> ProcOptions {
        self.threads_per_worker = NonZeroUsize::new(n);
        self
    }

    /// Sets the most threads a worker may run, spares included (0: one
    /// per env, the default). At least the threads it starts with.
    ///
    /// ```
    /// // Python envs: one thread per worker, and no spare.
    /// let options = pool_proc::ProcOptions::default()
    ///     .threads_per_worker(1)
    ///     .max_threads_per_worker(1);
    /// # let _ = options;
    /// ```
    pub fn max_threads_per_worker(mut self, n: usize) -> ProcOptions {
        self.max_threads_per_worker = NonZeroUsize::new(n);
        self
    }

    /// Sets the exchange.
    pub fn exchange(mut self, exchange: ExchangeMode) -> ProcOptions {
        self.exchange = exchange;
        self
    }

    /// Declares result entries length-prefixed: `u8` entries of one
    /// dimension whose first 4 bytes are a little-endian `u32` count of the
    /// meaningful bytes after them (the `"info"` entry of rlpool's Python
    /// envs, empty on most steps). The shm exchange then copies the count
    /// and those bytes only, in the worker and in the parent; what follows
    /// them in a result is unspecified. A key of no such entry is ignored;
    /// the queue exchange is not affected.
    ///
    /// ```
    /// let options = pool_proc::ProcOptions::default().length_prefixed(["info"]);
    /// # let _ = options;
    /// ```
    pub fn length_prefixed<K: Into<NestedKey>>(
        mut self,
        keys: impl IntoIterator<Item = K>,
    ) -> ProcOptions {
        self.length_prefixed = keys.into_iter().map(Into::into).collect();
        self
    }

    /// Whether, without an [`affinity`](ProcOptions::affinity), the workers
    /// are spread over the CPUs this process may use (default: yes): each
    /// gets its own group of them (one CPU each when they are as many), as
    /// long as they are no more than the CPUs; more workers than CPUs are
    /// left to the scheduler. A worker that cannot pin itself runs where
    /// it may (an affinity asked for is an error instead).
    ///
    /// Why: a parent that spins while it waits and its workers are more
    /// busy threads than cores, and the scheduler may leave two workers
    /// sharing one core for a whole run while the parent holds the other.
    /// On the project's 2-core machine, spreading made process pools 1.3x
    /// to 1.8x faster (docs/performance.md).
    ///
    /// ```
    /// // Leave the workers where the scheduler puts them.
    /// let options = pool_proc::ProcOptions::default().spread_workers(false);
    /// # let _ = options;
    /// ```
    pub fn spread_workers(mut self, spread: bool) -> ProcOptions {
        self.spread = spread;
        self
    }

    /// Sets the CPU affinity of the workers.
    pub fn affinity(mut self, affinity: Affinity) -> ProcOptions {
        self.affinity = Some(affinity);
        self
    }

    /// Sets the program a worker runs.
    pub fn program(mut self, program: impl Into<PathBuf>) -> ProcOptions {
        self.program = Some(program.into());
        self
    }

    /// Sets the arguments a worker is started with.
    pub fn worker_args<I, S>(mut self, args: I) -> ProcOptions
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.worker_args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Options for the workers of a test binary (Rust's default harness):
    /// each runs exactly the test named `test`, which calls the init
    /// function (see [`libtest_worker_args`]), with its output thrown away.
    ///
    /// ```
    /// let options = pool_proc::ProcOptions::for_test("rlpool_worker");
    /// # let _ = options;
    /// ```
    pub fn for_test(test: &str) -> ProcOptions {
        ProcOptions {
            worker_args: libtest_worker_args(test),
            quiet: true,
            ..ProcOptions::default()
        }
    }

    /// Sets whether the workers' standard output is thrown away.
    pub fn quiet(mut self, quiet: bool) -> ProcOptions {
        self.quiet = quiet;
        self
    }

    /// Sets the start deadline.
    pub fn start_timeout(mut self, timeout: Duration) -> ProcOptions {
        self.start_timeout = timeout;
        self
    }

    /// Sets the shutdown deadline.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> ProcOptions {
        self.shutdown_timeout = timeout;
        self
    }
}

/// The arguments that make a test binary (Rust's default test harness) run
/// exactly the test named `test` and nothing else: for
/// [`ProcOptions::worker_args`] in integration tests, where the test
/// `test` calls the init function.
///
/// ```
/// let args = pool_proc::libtest_worker_args("worker_entry");
/// assert_eq!(args[0], "worker_entry");
/// ```
pub fn libtest_worker_args(test: &str) -> Vec<OsString> {
    [
        test,
        "--exact",
        "--nocapture",
        "--quiet",
        "--test-threads",
        "1",
    ]
    .into_iter()
    .map(OsString::from)
    .collect()
}
