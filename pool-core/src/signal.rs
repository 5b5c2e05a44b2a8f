//! `Signal`: a generation counter that waiters sleep on, woken when it
//! reaches their target. Waiting spins for a bounded time (the policy of
//! [`spin`](crate::spin)), then sleeps on a condition variable, always with
//! an optional deadline; `close` ends every wait for good, `wake_all` ends
//! the current ones.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::lock;
use crate::spin::{Spin, RECEIVER_SPIN};

/// A counter of events with a blocking wait for a given count: what
/// receivers sleep on until enough results were published.
///
/// ```
/// use std::time::{Duration, Instant};
/// let signal = pool_core::Signal::default();
/// let seen = signal.generation();
/// signal.notify();
/// assert_eq!(signal.wait(seen, Some(Instant::now() + Duration::from_secs(1))), seen + 1);
/// ```
#[derive(Debug)]
pub struct Signal {
    generation: AtomicU64,
    /// The smallest generation a sleeper waits for (`u64::MAX`: none), so
    /// that a notifier wakes sleepers only when one of them can go on.
    wake_at: AtomicU64,
    sleepers: AtomicUsize,
    /// Set once: every wait returns at once from then on.
    closed: AtomicBool,
    /// Moves on every `wake_all`: a waiter returns when it changes.
    epoch: AtomicU64,
    lock: Mutex<()>,
    condvar: Condvar,
    /// The longest one sleep lasts before a wait returns to its caller to
    /// look at the state again (`None`: until woken or the deadline).
    max_sleep: Option<Duration>,
}

impl Default for Signal {
    fn default() -> Self {
        Signal {
            generation: AtomicU64::new(0),
            wake_at: AtomicU64::new(u64::MAX),
            sleepers: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            lock: Mutex::new(()),
            condvar: Condvar::new(),
            max_sleep: None,
        }
    }
}

impl Signal {
    /// A signal whose waits sleep at most `max_sleep` at a time, then
    /// return to their caller (which looks at the state it waits on again
    /// and waits anew): for waiters that must also notice events their
    /// notifiers have not counted yet.
    pub fn with_max_sleep(max_sleep: Duration) -> Signal {
        Signal {
            max_sleep: Some(max_sleep),
            ..Signal::default()
        }
    }

    /// The number of events so far.
    #[inline]
    pub fn generation(&self) -> u64 {
        // Acquire: pairs with the Release in `notify`, so the state that the
        // notifier published before counting is visible to whoever sees the
        // new count.
        self.generation.load(Ordering::Acquire)
    }

    /// Counts an event and wakes the sleepers if one of them waits for this
    /// generation or an earlier one.
    #[inline]
    pub fn notify(&self) {
        self.notify_n(1);
    }

    /// Counts `n` events at once (one atomic operation), waking the sleepers
    /// if one of them waits for the new generation or an earlier one.
    #[inline]
    pub fn notify_n(&self, n: u64) {
        // SeqCst (with the SeqCst loads of `sleepers` and `wake_at` below,
        // and the SeqCst stores and load in `wait_for`): either the waiter
        // sees the new generation before sleeping, or we see its registration
        // and wake it.
        let now = self.generation.fetch_add(n, Ordering::SeqCst) + n;
        if self.sleepers.load(Ordering::SeqCst) > 0 && now >= self.wake_at.load(Ordering::SeqCst) {
            // Taking the lock orders this wake-up after the waiter's check.
            let _guard = lock(&self.lock);
            // Every sleeper wakes and registers its target again.
            self.wake_at.store(u64::MAX, Ordering::SeqCst);
            self.condvar.notify_all();
        }
    }

    /// Wakes every waiter, now and from now on: waits return at once (for a
    /// shutdown). Idempotent.
    pub fn close(&self) {
        // SeqCst: pairs with the SeqCst loads in `wait_for` (as `notify`).
        self.closed.store(true, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
        let _guard = lock(&self.lock);
        self.condvar.notify_all();
    }

    /// Wakes every waiter once, whatever it waits for (the state it waits on
    /// changed in another way). Cheap when nobody sleeps.
    pub fn wake_all(&self) {
        // SeqCst: pairs with the SeqCst loads in `wait_for` (as `notify`).
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = lock(&self.lock);
            self.condvar.notify_all();
        }
    }

    /// True once [`Signal::close`] was called.
    #[inline]
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Waits until the generation differs from `seen`, the signal is
    /// closed, or `deadline` passes; returns the generation then. Spins up
    /// to [`RECEIVER_SPIN`] before sleeping.
    pub fn wait(&self, seen: u64, deadline: Option<Instant>) -> u64 {
        self.wait_for(seen.wrapping_add(1), self.epoch(), deadline, RECEIVER_SPIN)
    }

    /// The number of `wake_all` calls so far: read it before looking at the
    /// state a wait depends on, and pass it to [`Signal::wait_for`], so that
    /// a `wake_all` in between is not lost.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Waits until the generation reaches `target`, a `wake_all` moves the
    /// epoch past `epoch`, the signal is closed, or `deadline` passes;
    /// returns the generation then. Spins up to `spin` before sleeping.
    /// With [`Signal::with_max_sleep`], also returns after one sleep of
    /// that length: the caller looks again and waits anew.
    pub fn wait_for(
        &self,
        target: u64,
        epoch: u64,
        deadline: Option<Instant>,
        spin: Duration,
    ) -> u64 {
        let reached = |now: u64| {
            now >= target
                || self.closed.load(Ordering::SeqCst)
                || self.epoch.load(Ordering::SeqCst) != epoch
        };
        // Spin for a short, bounded time (yielding every other round), then
        // sleep.
        let spin_until = Instant::now() + spin;
        let mut spinning = Spin::new();
        loop {
            let now = self.generation();
            if reached(now) {
                return now;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) || Instant::now() >= spin_until {
                break;
            }
            spinning.round();
        }

        let mut guard = lock(&self.lock);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        loop {
            // Registered under the lock, before the check: a notifier that
            // reaches `target` after the check sees it.
            self.wake_at.fetch_min(target, Ordering::SeqCst);
            let now = self.generation.load(Ordering::SeqCst);
            if reached(now) {
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                return now;
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left.is_some_and(|left| left.is_zero()) {
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
                return now;
            }
            let nap = match (left, self.max_sleep) {
                (None, None) => None,
                (Some(left), None) => Some(left),
                (None, Some(max)) => Some(max),
                (Some(left), Some(max)) => Some(left.min(max)),
            };
            match nap {
                None => {
                    guard = self
                        .condvar
                        .wait(guard)
                        .unwrap_or_else(PoisonError::into_inner)
                }
                Some(nap) => {
                    let (woken, timeout) = self
                        .condvar
                        .wait_timeout(guard, nap)
                        .unwrap_or_else(PoisonError::into_inner);
                    guard = woken;
                    if timeout.timed_out() && self.max_sleep.is_some() {
                        // The caller looks at its state again.
                        self.sleepers.fetch_sub(1, Ordering::SeqCst);
                        return self.generation.load(Ordering::SeqCst);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

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

    /// A closed signal ends every wait at once, now and from then on, and
    /// `wake_all` ends a wait whose epoch it moved.
    #[test]
    fn close_and_wake_all_end_waits() {
        let signal = Arc::new(Signal::default());
        let (seen, epoch) = (signal.generation(), signal.epoch());
        let waker = {
            let signal = Arc::clone(&signal);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                signal.wake_all();
            })
        };
        assert_eq!(signal.wait_for(seen + 1, epoch, None, Duration::ZERO), seen);
        waker.join().unwrap();
        assert!(!signal.is_closed());
        signal.close();
        assert!(signal.is_closed());
        let now = signal.generation();
        assert_eq!(signal.wait(now, None), now);
    }
}
