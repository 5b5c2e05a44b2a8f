//! `lock`: the one way a pool takes its mutexes, tolerant of poisoning.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, taking it over even if a thread panicked while holding
/// it.
///
/// Every lock of a pool guards state that stays consistent across a panic:
/// an env's panic is caught inside the critical section that runs it (its
/// error recorded as the env's), and no other code in a pool panics while
/// holding a lock but for a bug. Refusing the data then would turn one
/// failed env into a pool that can no longer be used or shut down.
///
/// ```
/// use std::sync::Mutex;
/// let counter = Mutex::new(1);
/// *pool_core::lock(&counter) += 1;
/// assert_eq!(*pool_core::lock(&counter), 2);
/// ```
#[inline]
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mutex poisoned by a panic is still taken, with its data.
    #[test]
    fn a_poisoned_mutex_is_taken_over() {
        let mutex = std::sync::Arc::new(Mutex::new(7));
        let other = std::sync::Arc::clone(&mutex);
        let panicked = std::thread::spawn(move || {
            let _guard = other.lock().unwrap();
            panic!("poisons the mutex");
        })
        .join();
        assert!(panicked.is_err());
        assert!(mutex.is_poisoned());
        assert_eq!(*lock(&mutex), 7);
    }
}
