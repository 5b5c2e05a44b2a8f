//! CPU affinity of rlpool's workers: [`Affinity`] (one CPU set per worker,
//! or a function of the worker index), resolved and validated into one
//! [`CpuList`] per worker before any worker starts, then applied by each
//! worker to itself ([`pin_current_thread`]) before it does any work.
//!
//! The process backend (`pool-proc`) pins each worker process's main thread
//! before it starts any other thread or builds an env, so that every thread
//! of the worker inherits the set; the threading backend (`pool-thread`)
//! pins each worker thread as it starts, before it steps any env.
//!
//! Linux only: the sets are read and written with `sched_getaffinity(2)` and
//! `sched_setaffinity(2)`. The pool never chooses a partition itself: it can
//! see which CPUs this process may use, not which ones the application keeps
//! for other work or how many threads an env needs.
//!
//! ```
//! use affinity::{available_cpus, current_cpus, pin_current_thread, Affinity};
//!
//! // Worker w on the w-th CPU this process may use, round robin.
//! let cpus = available_cpus()?;
//! let spread = {
//!     let cpus = cpus.clone();
//!     Affinity::by_worker(move |w| [cpus[w % cpus.len()]])
//! };
//! let sets = spread.resolve(2)?;
//! assert_eq!(sets[0].as_slice(), &[cpus[0]]);
//!
//! // What worker 0 does first, on its own thread.
//! let set = sets[0].clone();
//! let seen = std::thread::spawn(move || {
//!     pin_current_thread(0, set.as_slice()).and_then(|()| current_cpus())
//! })
//! .join()
//! .expect("no panic")?;
//! assert_eq!(seen, vec![cpus[0]]);
//! # Ok::<(), affinity::AffinityError>(())
//! ```
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::Arc;

use rustix::io::Errno;
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

/// Where each worker process may run: one set of CPU indices per worker.
///
/// CPU indices are `usize`, so a negative index (or a `bool` standing for an
/// index, as Python allows) cannot be written at all; what is left to check
/// happens in [`Affinity::resolve`]: one set per worker, no empty set, no
/// index beyond what a kernel CPU set holds, and only CPUs this process may
/// use.
///
/// `Affinity` is `Clone`, `Debug`, `PartialEq` and `Eq`, so it can sit inside
/// a configuration type that derives them. Two [`Affinity::PerWorker`]
/// values are equal when their sets are, as given (before duplicates are
/// folded); two [`Affinity::ByWorker`] values are equal when they share the
/// same function (the same `Arc`), since functions cannot be compared.
///
/// ```
/// use affinity::Affinity;
///
/// // The first CPU this process may use (CPU 0 on most machines).
/// let first = affinity::available_cpus()?[0];
///
/// // Both workers on it; duplicates are folded.
/// let fixed = Affinity::per_worker([vec![first], vec![first, first]]);
/// let sets = fixed.resolve(2)?;
/// assert_eq!(sets[1].as_slice(), &[first]);
///
/// // The same, computed from the worker index.
/// let computed = Affinity::by_worker(move |_worker| [first]);
/// assert_eq!(computed.resolve(3)?.len(), 3);
/// # Ok::<(), affinity::AffinityError>(())
/// ```
#[derive(Clone)]
pub enum Affinity {
    /// One CPU set per worker, in worker order.
    PerWorker(Vec<Vec<usize>>),
    /// A function from the worker index (`0..workers`) to its CPU set,
    /// called once per worker by [`Affinity::resolve`].
    ByWorker(Arc<dyn Fn(usize) -> Vec<usize> + Send + Sync>),
}

impl Affinity {
    /// One CPU set per worker, in worker order: `Affinity::per_worker([[0],
    /// [1]])` puts worker 0 on CPU 0 and worker 1 on CPU 1.
    pub fn per_worker<I, S>(sets: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: IntoIterator<Item = usize>,
    {
        Affinity::PerWorker(
            sets.into_iter()
                .map(|set| set.into_iter().collect())
                .collect(),
        )
    }

    /// The CPU set of each worker computed from its index:
    /// `Affinity::by_worker(|worker| [worker % 2])` alternates CPUs 0 and 1.
    ///
    /// The function is called once per worker, in the parent, by
    /// [`Affinity::resolve`]; a panic in it propagates from there.
    pub fn by_worker<F, S>(f: F) -> Self
    where
        F: Fn(usize) -> S + Send + Sync + 'static,
        S: IntoIterator<Item = usize>,
    {
        Affinity::ByWorker(Arc::new(move |worker| f(worker).into_iter().collect()))
    }

    /// The validated CPU set of each of `workers` workers, in worker order,
    /// each sorted with duplicates folded.
    ///
    /// Called in the parent before any worker starts, so that a bad set is
    /// an error before anything runs.
    ///
    /// # Errors
    ///
    /// - [`AffinityError::Count`]: `PerWorker` holds more or fewer sets than
    ///   `workers`;
    /// - [`AffinityError::Empty`]: a worker's set is empty;
    /// - [`AffinityError::OutOfRange`]: a CPU index at or beyond
    ///   [`CpuSet::MAX_CPU`], the size of a kernel CPU set;
    /// - [`AffinityError::Unavailable`]: a CPU that this process may not use
    ///   (not in [`available_cpus`]);
    /// - [`AffinityError::Query`]: the available CPUs could not be read.
    ///
    /// Each names the first offending worker, and the lowest offending CPU in
    /// its set.
    pub fn resolve(&self, workers: usize) -> Result<Vec<CpuList>, AffinityError> {
        let sets: Vec<Vec<usize>> = match self {
            Affinity::PerWorker(sets) => {
                if sets.len() != workers {
                    return Err(AffinityError::Count {
                        sets: sets.len(),
                        workers,
                    });
                }
                sets.clone()
            }
            Affinity::ByWorker(f) => (0..workers).map(|worker| f(worker)).collect(),
        };
        let available = available_cpus()?;
        sets.into_iter()
            .enumerate()
            .map(|(worker, cpus)| CpuList::validate(worker, cpus, &available))
            .collect()
    }
}

impl fmt::Debug for Affinity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Affinity::PerWorker(sets) => f.debug_tuple("PerWorker").field(sets).finish(),
            Affinity::ByWorker(_) => f.write_str("ByWorker(<fn>)"),
        }
    }
}

impl PartialEq for Affinity {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Affinity::PerWorker(a), Affinity::PerWorker(b)) => a == b,
            (Affinity::ByWorker(a), Affinity::ByWorker(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// `Arc::ptr_eq` is reflexive, so equality is an equivalence.
impl Eq for Affinity {}

/// The validated CPU set of one worker: non-empty, sorted, without
/// duplicates, every index below [`CpuSet::MAX_CPU`] and available to the
/// process that resolved it. Made by [`Affinity::resolve`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CpuList(Vec<usize>);

impl CpuList {
    /// Sorts and dedups `cpus`, then checks it for `worker` against the
    /// `available` CPUs (sorted).
    fn validate(
        worker: usize,
        mut cpus: Vec<usize>,
        available: &[usize],
    ) -> Result<Self, AffinityError> {
        cpus.sort_unstable();
        cpus.dedup();
        check_in_range(worker, &cpus)?;
        if let Some(&cpu) = cpus
            .iter()
            .find(|cpu| available.binary_search(cpu).is_err())
        {
            return Err(AffinityError::Unavailable {
                worker,
                cpu,
                available: available.to_vec(),
            });
        }
        Ok(CpuList(cpus))
    }

    /// The CPU indices, sorted and without duplicates.
    pub fn as_slice(&self) -> &[usize] {
        &self.0
    }

    /// The CPU indices, sorted and without duplicates.
    pub fn into_vec(self) -> Vec<usize> {
        self.0
    }
}

impl AsRef<[usize]> for CpuList {
    fn as_ref(&self) -> &[usize] {
        &self.0
    }
}

impl From<CpuList> for Vec<usize> {
    fn from(list: CpuList) -> Self {
        list.0
    }
}

/// Why CPU sets could not be resolved, applied or read. Each message names
/// the worker, and the offending CPU or count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AffinityError {
    /// `PerWorker` holds more or fewer sets than there are workers.
    #[error("{sets} CPU sets for {workers} workers: give one set per worker")]
    Count {
        /// The number of sets given.
        sets: usize,
        /// The number of workers.
        workers: usize,
    },
    /// A worker's set holds no CPU.
    #[error("worker {worker}: empty CPU set")]
    Empty {
        /// The worker.
        worker: usize,
    },
    /// A CPU index that no kernel CPU set can hold.
    #[error(
        "worker {worker}: CPU {cpu} is out of range (a CPU set holds CPUs 0 to {})",
        CpuSet::MAX_CPU - 1
    )]
    OutOfRange {
        /// The worker.
        worker: usize,
        /// The CPU index.
        cpu: usize,
    },
    /// A CPU that this process may not use.
    #[error(
        "worker {worker}: CPU {cpu} is not available to this process (available: {available:?})"
    )]
    Unavailable {
        /// The worker.
        worker: usize,
        /// The lowest unavailable CPU of its set.
        cpu: usize,
        /// The CPUs this process may use, sorted.
        available: Vec<usize>,
    },
    /// The kernel refused the worker's set.
    #[error("worker {worker}: could not pin to {cpus:?}: {errno}")]
    Pin {
        /// The worker.
        worker: usize,
        /// Its CPU set.
        cpus: Vec<usize>,
        /// The OS error of `sched_setaffinity`.
        errno: Errno,
    },
    /// The calling thread's CPU set could not be read.
    #[error("could not read the CPU affinity of this thread: {errno}")]
    Query {
        /// The OS error of `sched_getaffinity`.
        errno: Errno,
    },
}

/// The CPUs this process may use, sorted: the affinity mask of the calling
/// thread, which is the process's own unless that thread was pinned. It is
/// never empty.
///
/// # Errors
///
/// [`AffinityError::Query`] if `sched_getaffinity` fails (which it does on a
/// kernel with more possible CPUs than [`CpuSet::MAX_CPU`]).
pub fn available_cpus() -> Result<Vec<usize>, AffinityError> {
    current_cpus()
}

/// The CPUs the calling thread may run on, sorted. In a worker, after
/// pinning itself, this is the set to report back to the parent: the kernel
/// silently leaves out CPUs that the worker's cpuset cgroup does not allow.
///
/// # Errors
///
/// [`AffinityError::Query`] if `sched_getaffinity` fails.
pub fn current_cpus() -> Result<Vec<usize>, AffinityError> {
    let set = sched_getaffinity(None).map_err(|errno| AffinityError::Query { errno })?;
    Ok((0..CpuSet::MAX_CPU)
        .filter(|&cpu| set.is_set(cpu))
        .collect())
}

/// Pins the calling thread of worker `worker` to `cpus`.
///
/// A worker process calls it on its main thread before it starts any other
/// thread, so that every later thread (and child process) inherits the set;
/// a worker thread calls it as it starts. `cpus` usually comes from
/// [`Affinity::resolve`]; it is checked again here (non-empty, in range),
/// since it may have crossed a process boundary.
///
/// # Errors
///
/// [`AffinityError::Empty`], [`AffinityError::OutOfRange`], or
/// [`AffinityError::Pin`] if the kernel refuses the set (none of its CPUs is
/// online and allowed to this worker).
pub fn pin_current_thread(worker: usize, cpus: &[usize]) -> Result<(), AffinityError> {
    check_in_range(worker, cpus)?;
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu);
    }
    sched_setaffinity(None, &set).map_err(|errno| AffinityError::Pin {
        worker,
        cpus: cpus.to_vec(),
        errno,
    })
}

/// Checks that `cpus` (of `worker`) is non-empty and that every index fits in
/// a [`CpuSet`] (`CpuSet::set` panics beyond it). Reports the lowest index
/// out of range when `cpus` is sorted.
fn check_in_range(worker: usize, cpus: &[usize]) -> Result<(), AffinityError> {
    if cpus.is_empty() {
        return Err(AffinityError::Empty { worker });
    }
    match cpus.iter().find(|&&cpu| cpu >= CpuSet::MAX_CPU) {
        Some(&cpu) => Err(AffinityError::OutOfRange { worker, cpu }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::thread;

    use super::*;

    /// Runs `f` on a new thread, so that pinning it never pins the test
    /// harness's threads.
    fn on_new_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        thread::spawn(f).join().expect("the test thread panicked")
    }

    #[test]
    fn pin_first_available_cpu_then_current_cpus_reports_it() {
        let first = available_cpus().unwrap()[0];
        let current = on_new_thread(move || {
            pin_current_thread(0, &[first]).unwrap();
            current_cpus().unwrap()
        });
        assert_eq!(current, vec![first]);
    }

    #[test]
    fn pin_cpu_0_then_current_cpus_reports_0() {
        // The brief's machine: CPU 0 is available. Skip where it is not
        // (run under `taskset` without CPU 0, say).
        if !available_cpus().unwrap().contains(&0) {
            return;
        }
        let current = on_new_thread(|| {
            pin_current_thread(0, &[0]).unwrap();
            current_cpus().unwrap()
        });
        assert_eq!(current, vec![0]);
    }

    #[test]
    fn resolved_available_set_round_trips_through_pinning() {
        let available = available_cpus().unwrap();
        let lists = Affinity::per_worker([available.clone()])
            .resolve(1)
            .unwrap();
        let list = lists.into_iter().next().unwrap();
        let current = on_new_thread(move || {
            pin_current_thread(0, list.as_slice()).unwrap();
            current_cpus().unwrap()
        });
        assert_eq!(current, available);
    }

    #[test]
    fn pinned_thread_sees_only_its_cpu_as_available_and_resolve_follows() {
        let available = available_cpus().unwrap();
        if available.len() < 2 {
            return;
        }
        let first = available[0];
        let result = on_new_thread(move || {
            pin_current_thread(0, &[first]).unwrap();
            (
                available_cpus().unwrap(),
                Affinity::per_worker([available]).resolve(1),
            )
        });
        assert_eq!(result.0, vec![first]);
        match result.1 {
            Ok(lists) => panic!("resolve on a pinned thread accepted {lists:?}"),
            Err(err) => assert!(matches!(err, AffinityError::Unavailable { worker: 0, .. })),
        }
    }

    #[test]
    fn pin_refuses_an_empty_set() {
        let err = on_new_thread(|| pin_current_thread(2, &[])).unwrap_err();
        assert_eq!(err, AffinityError::Empty { worker: 2 });
        assert_eq!(err.to_string(), "worker 2: empty CPU set");
    }

    #[test]
    fn pin_refuses_a_cpu_beyond_a_cpu_set() {
        let err = on_new_thread(|| pin_current_thread(1, &[0, CpuSet::MAX_CPU])).unwrap_err();
        assert_eq!(
            err,
            AffinityError::OutOfRange {
                worker: 1,
                cpu: CpuSet::MAX_CPU
            }
        );
        assert_eq!(
            err.to_string(),
            format!(
                "worker 1: CPU {} is out of range (a CPU set holds CPUs 0 to {})",
                CpuSet::MAX_CPU,
                CpuSet::MAX_CPU - 1
            )
        );
    }

    #[test]
    fn pin_reports_the_kernel_refusing_a_cpu_that_does_not_exist() {
        // The highest index a set holds, if this process may not use it:
        // on any machine with fewer CPUs than a set holds, it does not exist,
        // and the kernel refuses a set with no online CPU.
        let available = available_cpus().unwrap();
        let Some(cpu) = (0..CpuSet::MAX_CPU)
            .rev()
            .find(|cpu| !available.contains(cpu))
        else {
            return;
        };
        let err = on_new_thread(move || pin_current_thread(3, &[cpu])).unwrap_err();
        assert_eq!(
            err,
            AffinityError::Pin {
                worker: 3,
                cpus: vec![cpu],
                errno: Errno::INVAL
            }
        );
        assert_eq!(
            err.to_string(),
            format!(
                "worker 3: could not pin to [{cpu}]: {}",
                std::io::Error::from(Errno::INVAL)
            )
        );
        assert!(err.to_string().ends_with("(os error 22)"), "{err}");
    }

    #[test]
    fn query_error_message_names_the_os_error() {
        let err = AffinityError::Query {
            errno: Errno::INVAL,
        };
        assert_eq!(
            err.to_string(),
            format!(
                "could not read the CPU affinity of this thread: {}",
                std::io::Error::from(Errno::INVAL)
            )
        );
    }

    #[test]
    fn validate_reports_the_lowest_offending_cpu() {
        let available = [0, 1];
        let err = CpuList::validate(4, vec![9, 5, 1], &available).unwrap_err();
        assert_eq!(
            err,
            AffinityError::Unavailable {
                worker: 4,
                cpu: 5,
                available: vec![0, 1]
            }
        );
        let err =
            CpuList::validate(4, vec![usize::MAX, 0, CpuSet::MAX_CPU], &available).unwrap_err();
        assert_eq!(
            err,
            AffinityError::OutOfRange {
                worker: 4,
                cpu: CpuSet::MAX_CPU
            }
        );
    }
}
