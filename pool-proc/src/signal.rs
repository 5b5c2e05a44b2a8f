//! `Signal`: a count of events that receivers sleep on (results and
//! failures that arrive through a worker's socket), with deadlines.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// A generation counter with a blocking wait for it to move.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    generation: AtomicU64,
    closed: AtomicBool,
    lock: Mutex<()>,
    condvar: Condvar,
}

impl Signal {
    /// The number of events so far.
    pub(crate) fn generation(&self) -> u64 {
        // Acquire: pairs with the Release half of the AcqRel in `notify`,
        // so what the notifier wrote before counting is visible.
        self.generation.load(Ordering::Acquire)
    }

    /// Counts an event and wakes every waiter.
    pub(crate) fn notify(&self) {
        // AcqRel: publishes the notifier's writes (see `generation`).
        self.generation.fetch_add(1, Ordering::AcqRel);
        // Taken so that a waiter between its check and its sleep cannot
        // miss the wake-up (it checks under the lock).
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.condvar.notify_all();
    }

    /// Makes every wait return at once, now and from now on.
    pub(crate) fn close(&self) {
        // Relaxed: read under the lock, which orders it.
        self.closed.store(true, Ordering::Relaxed);
        self.notify();
    }

    /// Waits until the generation moves past `seen`, the signal is closed,
    /// or `deadline` passes.
    pub(crate) fn wait(&self, seen: u64, deadline: Option<Instant>) {
        let mut guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if self.generation() != seen || self.closed.load(Ordering::Relaxed) {
                return;
            }
            match deadline {
                None => {
                    guard = self.condvar.wait(guard).unwrap_or_else(|p| p.into_inner());
                }
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return;
                    }
                    guard = self
                        .condvar
                        .wait_timeout(guard, deadline - now)
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
    fn a_wait_ends_on_notify_close_or_deadline() {
        let signal = Arc::new(Signal::default());
        let seen = signal.generation();
        let other = Arc::clone(&signal);
        let t = std::thread::spawn(move || other.notify());
        signal.wait(seen, None);
        t.join().unwrap();
        assert_eq!(signal.generation(), seen + 1);
        let start = Instant::now();
        signal.wait(signal.generation(), Some(start + Duration::from_millis(20)));
        assert!(start.elapsed() >= Duration::from_millis(20));
        signal.close();
        signal.wait(signal.generation(), None);
    }
}
