//! The spin-then-sleep policy of every wait in a pool, in one place: how
//! long each kind of waiter spins, how it spins, and when a receiver runs
//! envs itself instead; and the timing of a process worker's runners and
//! of its watcher. `pool-core/README.md` explains the choices.

use std::time::{Duration, Instant};

/// How long a receiver of the threading backend spins before it sleeps
/// when the workers leave a core free (and the default of
/// [`Signal::wait`](crate::Signal::wait)). Chosen against the cost of
/// waking a sleeping thread on a loaded (or virtual) machine: a receiver
/// that spins a little longer than the gap between two results stays
/// ready without that wake-up.
pub const RECEIVER_SPIN: Duration = Duration::from_micros(300);

/// How long a receiver of the threading backend spins when the workers
/// are as many as the cores: every core it spins on is taken from a
/// worker, so it sleeps soon.
pub const RECEIVER_SPIN_NO_SPARE_CORE: Duration = Duration::from_micros(50);

/// How long a receiver of the process backend's shared-memory exchange
/// spins on the exchange's bell before it sleeps. The budget is per
/// receive, not per ring: a receiver that spun through every ring of a
/// long batch kept a core busy, and the scheduler then ran the workers'
/// runners one after the other on the other cores.
pub const SHM_RECEIVER_SPIN: Duration = Duration::from_micros(200);

/// Spin rounds between two yields of the core: a yield hands the core at
/// once to a thread that has work on it (a waiter that shares a core with
/// a busy worker), so spinners never starve a thread with work. Every
/// other round: a rarer yield left the worker's core to the spinner until
/// the worker's own next yield.
pub const SPINS_PER_YIELD: u32 = 2;

/// `spin_loop` hints in a round that does not yield.
pub const PAUSES: u32 = 3;

/// How long the threading backend's spare worker naps at a time while
/// it rests (envs quick, workers on every core: the last worker takes no
/// job of its own, so that the calling thread, which helps or does the
/// pool's bookkeeping, has a core; see `pool-thread`'s `Shared::spare`).
/// After a nap in which a queue's front did not move (its worker stuck
/// inside a step), it claims that queue's jobs: none waits behind a stuck
/// step for much longer than two naps. Half a millisecond:
/// the bound of a result held by a worker inside a long step
/// ([`RESCUE_AFTER`] plus a receiver's nap) is of that order too; a nap
/// costs the spare a few microseconds of a core. A nap with no send in it
/// doubles the next, up to [`SPARE_NAP_IDLE`].
pub const SPARE_NAP: Duration = Duration::from_micros(500);

/// The longest nap of a resting spare worker: what it naps once its pool
/// has been idle (no send) for a while, so that an idle pool wakes it
/// about 50 times a second, not 2000. The first send after such a pause
/// waits that long at most for the spare if a worker gets stuck at once.
pub const SPARE_NAP_IDLE: Duration = Duration::from_millis(20);

/// The longest a receiver of the threading backend sleeps at a time
/// before it looks again, and publishes results that a worker holds while
/// it is inside a long step (see [`PUBLISH_RUN`]).
pub const RECEIVER_RESCAN: Duration = Duration::from_millis(1);

/// A worker of the threading backend publishes the results of quick envs
/// in runs (their batch rows written column by column under one lock, one
/// count on the receivers' signal) of about this much stepping, at most
/// [`PUBLISH_RUN_ENVS`] envs, and whenever its queue runs dry; an env that
/// steps slower is published alone. A result held while its worker is
/// inside a step that runs long is published by a waiting receiver
/// instead ([`RECEIVER_RESCAN`], [`RESCUE_AFTER`]), so that no result waits
/// on another env's step for much longer than a millisecond.
///
/// 10 us, unless the build sets `RLPOOL_PUBLISH_RUN_US` (microseconds, at
/// compile time): a measurement's knob, not a user's. Under callgrind an
/// env step takes about 50 times longer, so a run of 10 us holds one env;
/// `cargo xtask instructions --native-runs` builds with 1000 so that the
/// runs it counts are as long as native ones.
pub const PUBLISH_RUN: Duration =
    Duration::from_micros(match option_env!("RLPOOL_PUBLISH_RUN_US") {
        Some(us) => parse_micros(us),
        None => 10,
    });

/// `text` as a count of microseconds, at compile time (a build with
/// anything else in `RLPOOL_PUBLISH_RUN_US` fails).
const fn parse_micros(text: &str) -> u64 {
    let digits = text.as_bytes();
    assert!(
        !digits.is_empty(),
        "RLPOOL_PUBLISH_RUN_US: a count of microseconds"
    );
    let mut value: u64 = 0;
    let mut i = 0;
    while i < digits.len() {
        assert!(
            digits[i].is_ascii_digit() && value < u64::MAX / 10,
            "RLPOOL_PUBLISH_RUN_US: a count of microseconds"
        );
        value = value * 10 + (digits[i] - b'0') as u64;
        i += 1;
    }
    value
}

/// The most envs of one run of results ([`PUBLISH_RUN`]).
pub const PUBLISH_RUN_ENVS: usize = 16;

/// How long a run of held results ([`PUBLISH_RUN`]) may wait for its
/// worker before a waiting receiver publishes it.
pub const RESCUE_AFTER: Duration = Duration::from_micros(500);

/// A receiver of the threading backend runs queued envs itself
/// (`ThreadBackend::help`) only while env steps take less than this on
/// average: for envs that quick, handing a core back and forth with a
/// worker costs more than the envs; for slower ones, a worker that shares
/// the receiver's core could be left holding envs it cannot run while the
/// receiver runs others.
pub const HELP_MAX_ENV_TIME: Duration = Duration::from_micros(10);

// The process backend's worker: its runner threads and its watcher
// (`pool-proc/src/worker.rs`).

/// How long a runner thread of a process worker (shared-memory exchange)
/// spins on the worker's doorbell before it sleeps on it: long enough to
/// catch the next batch of a tight stepping loop without a futex wake-up
/// per batch.
pub const RUNNER_SPIN: Duration = Duration::from_micros(500);

/// How long a result a runner published quietly (shared-memory exchange)
/// may wait for the ring of the parent's bell while the runner goes on
/// with the next commands of its scan. A runner rings once per scan, so
/// that a sleeping parent wakes once per batch, not once per env; within
/// a long scan it rings before a command once its oldest unrung result is
/// this old.
pub const RING_EVERY: Duration = Duration::from_micros(20);

/// How long every runner of a process worker may be inside an env step,
/// none having started one since, while commands wait, before the
/// worker's watcher starts a spare runner: a long or stuck step holds the
/// commands behind it back for about this long at most.
pub const STALL: Duration = Duration::from_millis(1);

/// How long results a runner published quietly may wait for its ring of
/// the parent's bell, counted from the start of the runner's latest
/// command, before the worker's watcher rings for them: a result never
/// waits for about longer than this on another env's long step.
pub const RING_LATE: Duration = Duration::from_millis(1);

/// After this long with every runner of a process worker waiting for
/// commands, none having started one, the worker's watcher sleeps until a
/// runner wakes, instead of looking at the runners every
/// `min(STALL, RING_LATE)`.
pub const IDLE_AFTER: Duration = Duration::from_millis(20);

/// How long a process worker's waits that only a stop could end (a
/// runner's wait for commands, the idle watcher's sleep) sleep before they
/// look at the stop flag again: a bound on a lost wake-up, not a poll the
/// worker relies on.
pub const STOP_POLL: Duration = Duration::from_millis(100);

/// How long a stopping process worker waits for its threads to finish the
/// command they run before it exits without them (an env that never
/// returns must not keep a worker alive).
pub const STOP_GRACE: Duration = Duration::from_secs(1);

/// What is left of a receive's spin `budget` when it began to wait at
/// `waiting_since` (a receive waits several times; the budget counts from
/// its start, not from each wait).
#[inline]
pub fn spin_left(budget: Duration, waiting_since: Instant) -> Duration {
    budget.saturating_sub(waiting_since.elapsed())
}

/// The rounds of one spinning wait: [`Spin::round`] pauses for
/// [`PAUSES`] hints, or yields the core every [`SPINS_PER_YIELD`]-th
/// round.
#[derive(Debug, Default)]
pub struct Spin {
    rounds: u32,
}

impl Spin {
    /// A wait that has not spun yet.
    pub fn new() -> Spin {
        Spin { rounds: 0 }
    }

    /// One round of spinning.
    #[inline]
    pub fn round(&mut self) {
        self.rounds = self.rounds.wrapping_add(1);
        if self.rounds % SPINS_PER_YIELD == 0 {
            std::thread::yield_now();
        } else {
            for _ in 0..PAUSES {
                std::hint::spin_loop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The budget left shrinks from the start of the receive, to zero.
    #[test]
    fn the_budget_counts_from_the_start_of_the_receive() {
        let now = Instant::now();
        assert!(spin_left(RECEIVER_SPIN, now) <= RECEIVER_SPIN);
        let long_ago = now - Duration::from_secs(1);
        assert_eq!(spin_left(RECEIVER_SPIN, long_ago), Duration::ZERO);
        let mut spin = Spin::new();
        for _ in 0..4 {
            spin.round();
        }
        assert_eq!(spin.rounds, 4);
    }

    /// `RLPOOL_PUBLISH_RUN_US` is read as decimal microseconds; anything
    /// else fails the build (the same assertion, at compile time).
    #[test]
    fn publish_run_microseconds_are_decimal() {
        assert_eq!(super::parse_micros("1000"), 1000);
        assert_eq!(super::parse_micros("0"), 0);
        for bad in ["", "10us", "-1", "99999999999999999999"] {
            assert!(
                std::panic::catch_unwind(|| super::parse_micros(bad)).is_err(),
                "{bad:?}"
            );
        }
    }
}
