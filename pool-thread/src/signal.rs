//! `Signal`: a generation counter that waiters sleep on, woken when it
//! moves. Waiting spins briefly, then parks on a condition variable, always
//! with an optional deadline.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use crossbeam_utils::Backoff;

/// A counter of events with a blocking wait for the next one.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    generation: AtomicU64,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    condvar: Condvar,
}

impl Signal {
    /// The number of events so far.
    pub(crate) fn generation(&self) -> u64 {
        // Acquire: pairs with the Release in `notify`, so the state that the
        // notifier published before counting is visible to whoever sees the
        // new count.
        self.generation.load(Ordering::Acquire)
    }

    /// Counts an event and wakes the sleepers, if any.
    pub(crate) fn notify(&self) {
        // SeqCst (with the SeqCst load of `sleepers` below, and the SeqCst
        // store/load pair in `wait`): either the waiter sees the new
        // generation before sleeping, or we see its sleeper count and wake it.
        self.generation.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            // Taking the lock orders this wake-up after the waiter's check.
            let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.condvar.notify_all();
        }
    }

    /// Waits until the generation differs from `seen` or `deadline` passes;
    /// returns the generation then. Spins briefly before sleeping.
    pub(crate) fn wait(&self, seen: u64, deadline: Option<Instant>) -> u64 {
        self.wait_for(seen.wrapping_add(1), deadline)
    }

    /// Waits until the generation reaches `target` or `deadline` passes;
    /// returns the generation then. Spins briefly before sleeping.
    pub(crate) fn wait_for(&self, target: u64, deadline: Option<Instant>) -> u64 {
        let reached = |now: u64| now >= target;
        let backoff = Backoff::new();
        while !backoff.is_completed() {
            let now = self.generation();
            if reached(now) {
                return now;
            }
            backoff.snooze();
        }

        let mut guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        loop {
            let now = self.generation.load(Ordering::SeqCst);
            if reached(now) {
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                return now;
            }
            match deadline {
                None => guard = self.condvar.wait(guard).unwrap_or_else(|p| p.into_inner()),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        self.sleepers.fetch_sub(1, Ordering::SeqCst);
                        return now;
                    }
                    guard = self
                        .condvar
                        .wait_timeout(guard, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_waiter_wakes_on_notify_and_times_out_without_one() {
        let signal = Arc::new(Signal::default());
        let seen = signal.generation();
        let deadline = Instant::now() + Duration::from_millis(20);
        assert_eq!(signal.wait(seen, Some(deadline)), seen);
        let notifier = {
            let signal = Arc::clone(&signal);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                signal.notify();
            })
        };
        assert_eq!(signal.wait(seen, None), seen + 1);
        notifier.join().unwrap();
    }
}
