//! `ThreadOptions`: the threading backend's options (worker threads and
//! their CPU affinity).

use std::num::NonZeroUsize;

use affinity::Affinity;

/// Options of the threading backend. Build with [`ThreadOptions::default`]
/// and the setters.
///
/// ```
/// use affinity::Affinity;
/// use pool_thread::ThreadOptions;
/// let options = ThreadOptions::default()
///     .threads(2)
///     .affinity(Affinity::by_worker(|w| vec![w % 2]));
/// # let _ = options;
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ThreadOptions {
    pub(crate) threads: Option<NonZeroUsize>,
    pub(crate) affinity: Option<Affinity>,
}

impl ThreadOptions {
    /// Sets the number of worker threads (0: the default, as many as the
    /// machine has cores, at most one per env). With as many workers as
    /// cores or more (at least two) and no affinity, the last one rests
    /// while env steps are quick (under 10 us on average): it claims no
    /// job (a synchronous step's helping caller takes its envs), so that
    /// the calling thread, which helps and does the pool's bookkeeping,
    /// has a core; it still takes over the jobs of a worker stuck in a
    /// step, and works as the others once steps are slower
    /// (`pool-core/README.md`, "A spare worker").
    pub fn threads(mut self, n: usize) -> ThreadOptions {
        self.threads = NonZeroUsize::new(n);
        self
    }

    /// Sets the CPUs each worker thread may run on (one set per worker
    /// thread, or a function of its index; default: wherever the scheduler
    /// puts it). Validated before any env is built (one set per worker
    /// thread, each non-empty and available to this process); each worker
    /// thread pins itself as it starts, before it steps any env.
    /// `Affinity::per_worker` must give one set per worker thread
    /// (`Affinity::by_worker` fits any count).
    pub fn affinity(mut self, affinity: Affinity) -> ThreadOptions {
        self.affinity = Some(affinity);
        self
    }
}
