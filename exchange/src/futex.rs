//! Sleeping on a 32-bit word that processes share: futex wait and wake, a
//! bounded spin before the sleep, and the two words the exchange sleeps on.
//!
//! [`wait`] sleeps while a word holds an expected value, [`wake`] and
//! [`wake_all`] wake its sleepers. The futexes are *shared* ones (no
//! `FUTEX_PRIVATE_FLAG`): the words live in a `MAP_SHARED` mapping and the
//! sleeper and the waker may be different processes. They also work on
//! private memory, between threads. [`spin_then_wait`] spins for a bounded
//! time before it sleeps: never an unbounded busy-wait.
//!
//! On top of them, two protocols that spare the system call when nobody
//! sleeps:
//!
//! - [`command`]: one word per slot that the parent posts a command into
//!   (after writing the action) and the worker takes it from.
//! - [`bell`]: a doorbell that writers ring after publishing a slot (see
//!   [`seqlock`](crate::seqlock)) and that readers sleep on.
//!
//! Under `cfg(loom)`, [`wait`] and [`wake`] are stand-ins built on loom's
//! mutex and condition variable (loom has no futex), so both protocols are
//! model checked; a lost wake-up then shows as a deadlock.
//!
//! # Memory ordering
//!
//! [`wait`] and [`wake`] order nothing: the kernel compares the word with
//! `expected` (and so does a relaxed peek before the call), and a caller that
//! wakes re-checks its condition with its own orderings. The protocols pair
//! their operations as follows:
//!
//! - command: the **Release** exchange in [`command::post`] pairs with the
//!   **Acquire** swap in [`command::take`], so the action the parent wrote
//!   before posting is visible to the worker that takes the command.
//! - bell: the **Release** increment in [`bell::ring`] pairs with the
//!   **Acquire** load in [`bell::listen`]. A reader that listens, then finds
//!   no slot published, then waits with that ticket cannot miss a
//!   publication: if its ticket already counted the ring, the slot's clock
//!   store happened before its clock load and it saw the slot.
//! - the sleep flags ([`command::SLEEPING`], [`bell::SLEEPER`]) are set and
//!   cleared with relaxed read-modify-writes: the modification order of the
//!   one word decides alone whether a waker sees the flag or the sleeper sees
//!   the change, and the futex's own comparison closes the remaining window.
// loom builds leave the slot layer out, and the tests that compile this file
// in use part of it.
#![cfg_attr(any(loom, test), allow(dead_code))]

use std::time::{Duration, Instant};

use crate::primitive::sync::atomic::{AtomicU32, Ordering};
use crate::primitive::sync::hint::spin_loop;

/// How a [`wait`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitOutcome {
    /// The word no longer held the expected value: the wait did not sleep.
    Changed,
    /// Woken by [`wake`], or spuriously: re-check the condition.
    Woken,
    /// The deadline passed while the word still held the expected value.
    TimedOut,
}

/// The count that [`wake_all`] passes to the kernel: every sleeper.
const ALL: u32 = i32::MAX as u32;

/// Rounds of `spin_loop` hints, doubling each time, before a spin yields its
/// time slice instead (as `crossbeam_utils::Backoff` does). Few: when
/// waiters and workers outnumber the cores, a yield is what hands the core
/// to the thread being waited for (the scheduler does not move a spinning
/// thread), so the first yield should come after a few hundred cycles, not
/// after `crossbeam_utils::Backoff`'s 63 hints (the same reason as
/// `pool_core::spin::SPINS_PER_YIELD`).
const SPIN_DOUBLINGS: u32 = 2;

/// `true` once `deadline` has passed.
fn expired(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|deadline| Instant::now() >= deadline)
}

/// Sleeps while `word` holds `expected`, until woken or until `deadline`
/// (`None`: no deadline). Checks the word first: a word that already differs
/// returns [`WaitOutcome::Changed`] at once, even past the deadline.
/// Interrupted sleeps go on with the time left.
///
/// # Panics
///
/// If the kernel rejects the futex call for another reason than a signal, a
/// changed value or the timeout (it has no futexes, for instance).
#[cfg(not(loom))]
pub(crate) fn wait(word: &AtomicU32, expected: u32, deadline: Option<Instant>) -> WaitOutcome {
    use rustix::io::Errno;
    use rustix::thread::futex;

    loop {
        // Relaxed: a peek that spares the system call; the caller re-checks.
        if word.load(Ordering::Relaxed) != expected {
            return WaitOutcome::Changed;
        }
        // FUTEX_WAIT takes a relative timeout, measured on CLOCK_MONOTONIC
        // like `Instant`; it is recomputed after each interruption.
        let timeout = match deadline {
            None => None,
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return WaitOutcome::TimedOut;
                }
                Some(futex::Timespec::try_from(left).unwrap_or(futex::Timespec {
                    tv_sec: futex::Secs::MAX,
                    tv_nsec: 0,
                }))
            }
        };
        match futex::wait(word, futex::Flags::empty(), expected, timeout.as_ref()) {
            Ok(()) => return WaitOutcome::Woken,
            Err(Errno::AGAIN) => return WaitOutcome::Changed,
            Err(Errno::TIMEDOUT) => return WaitOutcome::TimedOut,
            Err(Errno::INTR) => continue,
            Err(err) => panic!("futex wait on {word:p} failed: {err}"),
        }
    }
}

/// The loom stand-in for the futex wait: sleeps in [`kernel`]'s table until
/// a [`wake`] takes it out. With a deadline, it never sleeps: it yields once
/// and reports a spurious wake-up (or the timeout), which callers allow for.
#[cfg(loom)]
pub(crate) fn wait(word: &AtomicU32, expected: u32, deadline: Option<Instant>) -> WaitOutcome {
    if deadline.is_some() {
        // Relaxed: a peek, as in the real `wait`.
        if word.load(Ordering::Relaxed) != expected {
            return WaitOutcome::Changed;
        }
        if expired(deadline) {
            return WaitOutcome::TimedOut;
        }
        loom::thread::yield_now();
        return WaitOutcome::Woken;
    }
    kernel::wait(word, expected)
}

/// Wakes at most `count` sleepers on `word`; returns how many woke.
///
/// # Panics
///
/// If the kernel rejects the futex call (it has no futexes, for instance).
#[cfg(not(loom))]
pub(crate) fn wake(word: &AtomicU32, count: u32) -> usize {
    use rustix::thread::futex;

    futex::wake(word, futex::Flags::empty(), count.min(ALL))
        .unwrap_or_else(|err| panic!("futex wake on {word:p} failed: {err}"))
}

/// The loom stand-in for the futex wake: takes up to `count` sleepers on
/// `word` out of [`kernel`]'s table.
#[cfg(loom)]
pub(crate) fn wake(word: &AtomicU32, count: u32) -> usize {
    kernel::wake(word, count)
}

/// loom's stand-in for the kernel's futex table: who sleeps on which word.
///
/// As in the kernel, a waiter compares the word and goes to sleep under the
/// table's lock, and a waker takes the lock after changing the word: either
/// the waiter sees the new value, or the waker finds it asleep. A waiter that
/// nobody wakes blocks for good, and loom reports the deadlock: that is how
/// the models catch a lost wake-up.
#[cfg(loom)]
mod kernel {
    use loom::sync::{Condvar, Mutex};

    use super::WaitOutcome;
    use crate::primitive::sync::atomic::{AtomicU32, Ordering};

    /// The sleepers: one entry (word address, sleeper id) per sleeper.
    #[derive(Debug, Default)]
    struct Sleepers {
        asleep: Vec<(usize, u64)>,
        next_id: u64,
    }

    #[derive(Debug)]
    struct Table {
        sleepers: Mutex<Sleepers>,
        woken: Condvar,
    }

    loom::lazy_static! {
        static ref TABLE: Table = Table {
            sleepers: Mutex::new(Sleepers::default()),
            woken: Condvar::new(),
        };
    }

    fn address(word: &AtomicU32) -> usize {
        word as *const AtomicU32 as usize
    }

    pub(super) fn wait(word: &AtomicU32, expected: u32) -> WaitOutcome {
        let mut sleepers = TABLE.sleepers.lock().unwrap();
        // Relaxed: as the kernel's read; the table's lock orders it after
        // the store of any waker that already took the lock.
        if word.load(Ordering::Relaxed) != expected {
            return WaitOutcome::Changed;
        }
        let me = (address(word), sleepers.next_id);
        sleepers.next_id += 1;
        sleepers.asleep.push(me);
        while sleepers.asleep.contains(&me) {
            sleepers = TABLE.woken.wait(sleepers).unwrap();
        }
        WaitOutcome::Woken
    }

    pub(super) fn wake(word: &AtomicU32, count: u32) -> usize {
        let mut sleepers = TABLE.sleepers.lock().unwrap();
        let address = address(word);
        let mut woken = 0;
        sleepers.asleep.retain(|&(on, _)| {
            let wake = on == address && woken < count as usize;
            woken += usize::from(wake);
            !wake
        });
        TABLE.woken.notify_all();
        woken
    }
}

/// Wakes every sleeper on `word`; returns how many woke.
pub(crate) fn wake_all(word: &AtomicU32) -> usize {
    wake(word, ALL)
}

/// A spin with a time budget: `spin_loop` hints doubling up to
/// `2^SPIN_DOUBLINGS`, then yields of the time slice, until the budget is
/// spent. Under loom it never spins: the stand-in [`wait`] yields instead.
#[derive(Debug)]
struct Spin {
    /// When to stop spinning; `None` once the budget is spent.
    until: Option<Instant>,
    /// How many rounds were spun.
    round: u32,
}

impl Spin {
    fn new(budget: Duration) -> Self {
        let until = if cfg!(loom) || budget.is_zero() {
            None
        } else {
            Instant::now().checked_add(budget)
        };
        Spin { until, round: 0 }
    }

    /// Spins once; `false` if the budget is spent and the caller should sleep.
    fn spin(&mut self) -> bool {
        let Some(until) = self.until else {
            return false;
        };
        if self.round < SPIN_DOUBLINGS {
            for _ in 0..1u32 << self.round {
                spin_loop();
            }
        } else {
            std::thread::yield_now();
        }
        self.round = self.round.saturating_add(1);
        if Instant::now() >= until {
            self.until = None;
        }
        true
    }
}

/// Like [`wait`], but first spins for up to `spin`, checking the word, so a
/// change that comes soon costs no system call.
// The protocols spin in their own loops; the tests use this plain form.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn spin_then_wait(
    word: &AtomicU32,
    expected: u32,
    deadline: Option<Instant>,
    spin: Duration,
) -> WaitOutcome {
    let mut spinner = Spin::new(spin);
    loop {
        // Relaxed: a peek; the caller re-checks its condition.
        if word.load(Ordering::Relaxed) != expected {
            return WaitOutcome::Changed;
        }
        if expired(deadline) {
            return WaitOutcome::TimedOut;
        }
        if !spinner.spin() {
            return wait(word, expected, deadline);
        }
    }
}

/// The command word: the parent posts a command into it after writing the
/// action into the worker's input slot; the worker takes it, spinning then
/// sleeping while there is none.
///
/// The word holds [`IDLE`](command::IDLE), [`SLEEPING`](command::SLEEPING),
/// or a pending command: any value from
/// [`FIRST_COMMAND`](command::FIRST_COMMAND) on, chosen by the caller. One
/// parent posts, one worker takes, and a command is posted only once the
/// previous one was taken.
pub(crate) mod command {
    use std::time::{Duration, Instant};

    use super::{wait, wake, Spin, WaitOutcome};
    use crate::primitive::sync::atomic::{AtomicU32, Ordering};

    /// No command pending; the worker is awake (or spinning).
    pub(crate) const IDLE: u32 = 0;

    /// No command pending; the worker sleeps on the word (or is about to),
    /// so whoever posts must wake it.
    pub(crate) const SLEEPING: u32 = 1;

    /// The smallest value that is a command.
    pub(crate) const FIRST_COMMAND: u32 = 2;

    /// Posts `command` and wakes the worker if it sleeps. Returns the pending
    /// command instead if the previous one has not been taken yet.
    ///
    /// # Panics
    ///
    /// If `command` is below [`FIRST_COMMAND`].
    pub(crate) fn post(word: &AtomicU32, command: u32) -> Result<(), u32> {
        assert!(command >= FIRST_COMMAND, "command {command} is reserved");
        // Relaxed: only a guess at the state; the exchange below checks it.
        let mut current = word.load(Ordering::Relaxed);
        loop {
            if current >= FIRST_COMMAND {
                return Err(current);
            }
            // Release: pairs with the Acquire swap in `take`. Relaxed on
            // failure: nothing was published, we look again.
            match word.compare_exchange(current, command, Ordering::Release, Ordering::Relaxed) {
                Ok(SLEEPING) => {
                    wake(word, 1);
                    return Ok(());
                }
                Ok(_) => return Ok(()),
                Err(now) => current = now,
            }
        }
    }

    /// Takes the pending command, if any; the word goes back to [`IDLE`].
    /// Several takers may race: exactly one gets each command.
    pub(crate) fn take(word: &AtomicU32) -> Option<u32> {
        // Relaxed: a peek that spares a write to the shared cache line while
        // polling; the exchange below is the synchronizing read.
        let mut current = word.load(Ordering::Relaxed);
        loop {
            if current < FIRST_COMMAND {
                return None;
            }
            // Acquire: pairs with the Release exchange in `post`. Relaxed
            // on failure: another taker won, or the word moved; look again.
            match word.compare_exchange(current, IDLE, Ordering::Acquire, Ordering::Relaxed) {
                Ok(command) => return Some(command),
                Err(now) => current = now,
            }
        }
    }

    /// Takes the next command, spinning for up to `spin` and then sleeping
    /// until one is posted or `deadline` passes (then `None`).
    pub(crate) fn wait_command(
        word: &AtomicU32,
        deadline: Option<Instant>,
        spin: Duration,
    ) -> Option<u32> {
        let mut spinner = Spin::new(spin);
        loop {
            if let Some(command) = take(word) {
                return Some(command);
            }
            if super::expired(deadline) {
                return None;
            }
            if spinner.spin() {
                continue;
            }
            // Relaxed: the word's modification order alone decides whether
            // `post` sees SLEEPING (and wakes us) or we see its command.
            match word.compare_exchange(IDLE, SLEEPING, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) | Err(SLEEPING) => {}
                Err(_) => continue,
            }
            if wait(word, SLEEPING, deadline) == WaitOutcome::TimedOut {
                // Relaxed: withdraws the sleep flag; a command that won the
                // race stays and is taken below.
                let _ = word.compare_exchange(SLEEPING, IDLE, Ordering::Relaxed, Ordering::Relaxed);
                return take(word);
            }
        }
    }
}

/// The doorbell: writers ring it after publishing a slot; a reader takes a
/// ticket ([`listen`](bell::listen)), checks the slots' clocks, and if
/// nothing is ready waits until a ring changes the ticket
/// ([`wait_bell`](bell::wait_bell)).
///
/// The word counts rings in steps of [`RING`](bell::RING); its low bit is
/// [`SLEEPER`](bell::SLEEPER).
pub(crate) mod bell {
    use std::time::{Duration, Instant};

    use super::{wait, wake_all, Spin, WaitOutcome};
    use crate::primitive::sync::atomic::{AtomicU32, Ordering};

    /// Set while a reader sleeps on the bell (or is about to): a ring must
    /// wake it.
    pub(crate) const SLEEPER: u32 = 1;

    /// What one ring adds to the word (the count lives above [`SLEEPER`]).
    pub(crate) const RING: u32 = 2;

    /// Rings the bell: call after publishing (`seqlock::end_write`). Wakes
    /// the readers only if one sleeps.
    pub(crate) fn ring(bell: &AtomicU32) {
        // Release: pairs with the Acquire load in `listen`.
        let previous = bell.fetch_add(RING, Ordering::Release);
        if previous & SLEEPER != 0 {
            // Relaxed: only clears the flag; the increment above published.
            bell.fetch_and(!SLEEPER, Ordering::Relaxed);
            wake_all(bell);
        }
    }

    /// A ticket for [`wait_bell`]: take it *before* checking the clocks.
    pub(crate) fn listen(bell: &AtomicU32) -> u32 {
        // Acquire: pairs with the Release increment in `ring`.
        bell.load(Ordering::Acquire) & !SLEEPER
    }

    /// Waits until the bell rang after `ticket` was taken: spins for up to
    /// `spin`, then sleeps, until a ring ([`WaitOutcome::Changed`]: take a
    /// new ticket and check the clocks again) or `deadline`
    /// ([`WaitOutcome::TimedOut`]). Any number of readers may wait at once.
    pub(crate) fn wait_bell(
        bell: &AtomicU32,
        ticket: u32,
        deadline: Option<Instant>,
        spin: Duration,
    ) -> WaitOutcome {
        let mut spinner = Spin::new(spin);
        loop {
            // Relaxed: a peek; the caller listens again with Acquire.
            if bell.load(Ordering::Relaxed) & !SLEEPER != ticket {
                return WaitOutcome::Changed;
            }
            if super::expired(deadline) {
                return WaitOutcome::TimedOut;
            }
            if spinner.spin() {
                continue;
            }
            // Relaxed: the word's modification order alone decides whether
            // `ring` sees the flag (and wakes us) or we see its count.
            let now = bell.fetch_or(SLEEPER, Ordering::Relaxed);
            if now & !SLEEPER != ticket {
                return WaitOutcome::Changed;
            }
            match wait(bell, ticket | SLEEPER, deadline) {
                // Changed: a ring, or a ring that cleared the flag; look again.
                WaitOutcome::Changed | WaitOutcome::Woken => continue,
                WaitOutcome::TimedOut => return WaitOutcome::TimedOut,
            }
        }
    }
}
