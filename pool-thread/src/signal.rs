//! `Signal`: a generation counter that waiters sleep on, woken when it
//! moves. Waiting spins briefly, then parks on a condition variable, always
//! with an optional deadline.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a waiter spins before it sleeps. A sleeping thread takes tens of
/// microseconds to wake on a loaded machine (more on a virtual one), so a
/// worker that spins a little longer than the gap between two batches stays
/// ready; the spin yields its core every other round, so spinners never
/// starve a thread that has work (more threads than cores).
pub(crate) const SPIN: Duration = Duration::from_micros(300);

/// Spin rounds between two yields of the core. A yield hands the core at
/// once to a thread that has work on it (on 2 cores, a caller waiting for 2
/// busy workers shares a core with one): yielding every 16th round instead
/// (~5 us of pauses on this VM's EPYC) left 10 us per batch on the table
/// (LatencyEnv 8 envs on 2 threads, `perf sched`: the caller took the core
/// only at the worker's next yield; 220 -> 209 us fastest batch).
const SPINS_PER_YIELD: u32 = 2;

/// `spin_loop` hints per round that does not yield.
const PAUSES: u32 = 3;

/// A counter of events with a blocking wait for a given count.
#[derive(Debug)]
pub(crate) struct Signal {
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
        }
    }
}

impl Signal {
    /// The number of events so far.
    pub(crate) fn generation(&self) -> u64 {
        // Acquire: pairs with the Release in `notify`, so the state that the
        // notifier published before counting is visible to whoever sees the
        // new count.
        self.generation.load(Ordering::Acquire)
    }

    /// Counts an event and wakes the sleepers if one of them waits for this
    /// generation or an earlier one.
    pub(crate) fn notify(&self) {
        self.notify_n(1);
    }

    /// Counts `n` events at once (one atomic operation), waking the sleepers
    /// if one of them waits for the new generation or an earlier one.
    pub(crate) fn notify_n(&self, n: u64) {
        // SeqCst (with the SeqCst loads of `sleepers` and `wake_at` below,
        // and the SeqCst stores and load in `wait_for`): either the waiter
        // sees the new generation before sleeping, or we see its registration
        // and wake it.
        let now = self.generation.fetch_add(n, Ordering::SeqCst) + n;
        if self.sleepers.load(Ordering::SeqCst) > 0 && now >= self.wake_at.load(Ordering::SeqCst) {
            // Taking the lock orders this wake-up after the waiter's check.
            let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            // Every sleeper wakes and registers its target again.
            self.wake_at.store(u64::MAX, Ordering::SeqCst);
            self.condvar.notify_all();
        }
    }

    /// Wakes every waiter, now and from now on: waits return at once (for a
    /// shutdown). Idempotent.
    pub(crate) fn close(&self) {
        // SeqCst: pairs with the SeqCst loads in `wait_for` (as `notify`).
        self.closed.store(true, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.condvar.notify_all();
    }

    /// Wakes every waiter once, whatever it waits for (the state it waits on
    /// changed in another way). Cheap when nobody sleeps.
    pub(crate) fn wake_all(&self) {
        // SeqCst: pairs with the SeqCst loads in `wait_for` (as `notify`).
        self.epoch.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.condvar.notify_all();
        }
    }

    /// True once [`Signal::close`] was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Waits until the generation differs from `seen` or `deadline` passes;
    /// returns the generation then. Spins briefly before sleeping.
    pub(crate) fn wait(&self, seen: u64, deadline: Option<Instant>) -> u64 {
        self.wait_for(seen.wrapping_add(1), self.epoch(), deadline, SPIN)
    }

    /// The number of `wake_all` calls so far: read it before looking at the
    /// state a wait depends on, and pass it to [`Signal::wait_for`], so that
    /// a `wake_all` in between is not lost.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Waits until the generation reaches `target`, a `wake_all` moves the
    /// epoch past `epoch`, the signal is closed, or `deadline` passes;
    /// returns the generation then. Spins up to `spin` before sleeping.
    pub(crate) fn wait_for(
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
        let mut spins = 0u32;
        loop {
            let now = self.generation();
            if reached(now) {
                return now;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) || Instant::now() >= spin_until {
                break;
            }
            spins += 1;
            if spins % SPINS_PER_YIELD == 0 {
                std::thread::yield_now();
            } else {
                for _ in 0..PAUSES {
                    std::hint::spin_loop();
                }
            }
        }

        let mut guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
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
