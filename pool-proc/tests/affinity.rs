//! Resolving and validating worker CPU sets through the public API, against
//! the CPUs this test process may use. Nothing here pins a thread (the unit
//! tests of the `affinity` crate do, on threads of their own). The tests assume
//! at least one available CPU and compute unavailable ones from
//! `available_cpus()`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use pool_proc::{available_cpus, current_cpus, Affinity, AffinityError};

/// The lowest CPU index that this process may not use (one of the first
/// `available.len() + 1` indices is not in `available`).
fn first_unavailable(available: &[usize]) -> usize {
    (0..=available.len())
        .find(|cpu| !available.contains(cpu))
        .unwrap()
}

#[test]
fn available_cpus_are_sorted_distinct_and_not_empty() {
    let available = available_cpus().unwrap();
    assert!(!available.is_empty());
    assert!(available.windows(2).all(|w| w[0] < w[1]), "{available:?}");
    // No test in this binary pins a thread, so the calling thread's set is
    // the process's.
    assert_eq!(current_cpus().unwrap(), available);
}

#[test]
fn per_worker_sets_are_sorted_and_deduplicated() {
    let first = available_cpus().unwrap()[0];
    let lists = Affinity::per_worker([vec![first, first, first], vec![first]])
        .resolve(2)
        .unwrap();
    assert_eq!(lists.len(), 2);
    assert_eq!(lists[0].as_slice(), &[first]);
    assert_eq!(lists[1].clone().into_vec(), vec![first]);
}

#[test]
fn the_available_set_resolves_to_itself() {
    let available = available_cpus().unwrap();
    let mut shuffled = available.clone();
    shuffled.reverse();
    shuffled.extend(available.iter().copied());
    let lists = Affinity::per_worker([shuffled]).resolve(1).unwrap();
    assert_eq!(Vec::from(lists[0].clone()), available);
}

#[test]
fn by_worker_is_called_once_per_worker_index_in_order() {
    let available = available_cpus().unwrap();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let affinity = {
        let calls = Arc::clone(&calls);
        let available = available.clone();
        Affinity::by_worker(move |worker| {
            calls.lock().unwrap().push(worker);
            [available[worker % available.len()]]
        })
    };
    let lists = affinity.resolve(4).unwrap();
    assert_eq!(*calls.lock().unwrap(), vec![0, 1, 2, 3]);
    for (worker, list) in lists.iter().enumerate() {
        assert_eq!(list.as_slice(), &[available[worker % available.len()]]);
    }
}

#[test]
fn no_workers_resolve_to_no_sets() {
    assert_eq!(
        Affinity::per_worker(Vec::<Vec<usize>>::new())
            .resolve(0)
            .unwrap(),
        vec![]
    );
    // Relaxed throughout: the function runs on this thread, inside
    // `resolve`, so the count is read after it is written.
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let affinity = Affinity::by_worker(move |_| {
        counted.fetch_add(1, Ordering::Relaxed);
        [0]
    });
    assert_eq!(affinity.resolve(0).unwrap(), vec![]);
    assert_eq!(calls.load(Ordering::Relaxed), 0);
}

#[test]
fn a_count_other_than_the_workers_is_an_error() {
    let first = available_cpus().unwrap()[0];
    let err = Affinity::per_worker([[first], [first]])
        .resolve(3)
        .unwrap_err();
    assert_eq!(
        err,
        AffinityError::Count {
            sets: 2,
            workers: 3
        }
    );
    assert_eq!(
        err.to_string(),
        "2 CPU sets for 3 workers: give one set per worker"
    );
    let err = Affinity::per_worker([[first], [first]])
        .resolve(1)
        .unwrap_err();
    assert_eq!(
        err,
        AffinityError::Count {
            sets: 2,
            workers: 1
        }
    );
}

#[test]
fn an_empty_set_is_an_error_naming_the_worker() {
    let first = available_cpus().unwrap()[0];
    let err = Affinity::per_worker([vec![first], vec![]])
        .resolve(2)
        .unwrap_err();
    assert_eq!(err, AffinityError::Empty { worker: 1 });
    assert_eq!(err.to_string(), "worker 1: empty CPU set");

    let err = Affinity::by_worker(|_| Vec::new()).resolve(2).unwrap_err();
    assert_eq!(err.to_string(), "worker 0: empty CPU set");
}

#[test]
fn a_cpu_beyond_a_cpu_set_is_an_error_naming_worker_and_cpu() {
    let first = available_cpus().unwrap()[0];
    let err = Affinity::per_worker([vec![first], vec![first, usize::MAX]])
        .resolve(2)
        .unwrap_err();
    assert_eq!(
        err,
        AffinityError::OutOfRange {
            worker: 1,
            cpu: usize::MAX
        }
    );
    let message = err.to_string();
    assert!(
        message.starts_with(&format!(
            "worker 1: CPU {} is out of range (a CPU set holds CPUs 0 to ",
            usize::MAX
        )),
        "{message}"
    );
}

#[test]
fn an_unavailable_cpu_is_an_error_naming_worker_cpu_and_available_set() {
    let available = available_cpus().unwrap();
    let missing = first_unavailable(&available);
    let err = Affinity::per_worker([vec![available[0]], vec![missing, available[0]]])
        .resolve(2)
        .unwrap_err();
    assert_eq!(
        err,
        AffinityError::Unavailable {
            worker: 1,
            cpu: missing,
            available: available.clone()
        }
    );
    assert_eq!(
        err.to_string(),
        format!(
            "worker 1: CPU {missing} is not available to this process (available: {available:?})"
        )
    );
}

#[test]
fn the_first_offending_worker_is_reported() {
    let available = available_cpus().unwrap();
    let missing = first_unavailable(&available);
    let err = Affinity::by_worker(move |worker| if worker == 0 { vec![] } else { vec![missing] })
        .resolve(2)
        .unwrap_err();
    assert_eq!(err, AffinityError::Empty { worker: 0 });
}

#[test]
fn affinity_is_clone_debug_and_eq_with_functions_compared_by_identity() {
    let fixed = Affinity::per_worker([[0, 1], [1, 0]]);
    assert_eq!(fixed, fixed.clone());
    assert_eq!(fixed, Affinity::PerWorker(vec![vec![0, 1], vec![1, 0]]));
    assert_ne!(fixed, Affinity::per_worker([[0, 1]]));
    assert_eq!(format!("{fixed:?}"), "PerWorker([[0, 1], [1, 0]])");

    let f = Affinity::by_worker(|worker| [worker]);
    let g = Affinity::by_worker(|worker| [worker]);
    assert_eq!(f, f.clone());
    assert_ne!(f, g);
    assert_ne!(f, fixed);
    assert_eq!(format!("{f:?}"), "ByWorker(<fn>)");
}

#[test]
fn affinity_fits_in_a_config_that_derives_clone_debug_and_eq() {
    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Backend {
        Processes { affinity: Option<Affinity> },
    }
    let backend = Backend::Processes {
        affinity: Some(Affinity::by_worker(|_| [0])),
    };
    assert_eq!(backend.clone(), backend);
    assert!(format!("{backend:?}").contains("ByWorker(<fn>)"));
}
