//! `Phases`: where each env of a pool stands (idle, queued, done, failed),
//! one atomic per env, side by side so that a receiver reads many in a few
//! cache lines.
//!
//! # Memory ordering
//! A phase publishes what its writer wrote before it: every store of a
//! phase is `Release` and every load that acts on one is `Acquire`, so
//! whoever sees `DONE` sees the result written before it, and whoever sees
//! `IDLE` sees the result taken. The order between a send's `QUEUED` and
//! its worker's liveness is [`Liveness`](crate::Liveness)'s.

use crate::primitive::sync::atomic::{AtomicU8, Ordering};

/// No command in flight: a send may address the env.
pub const IDLE: u8 = 0;
/// Sent: queued for, or being run by, its worker; no result yet.
pub const QUEUED: u8 = 1;
/// Its result waits to be taken.
pub const DONE: u8 = 2;
/// It failed (or its worker did); its error waits to be taken.
pub const FAILED: u8 = 3;

/// The phase of every env of a pool: [`IDLE`], [`QUEUED`], [`DONE`] or
/// [`FAILED`]. A send moves an env from `IDLE` to `QUEUED`; whoever sees
/// its result (or failure) first moves it to `DONE` (or `FAILED`); the
/// receiver that took the result moves it back to `IDLE`, and only from
/// there ([`Phases::release`] of an env in flight does nothing).
///
/// A send that [`Phases::claim`]s its envs owns them until it queues
/// them: of several sends to one env, one wins; and whatever the last run
/// of a claimed env did comes before the claim (its publication, the
/// release, the claim: each reads the one before with `Acquire`). The
/// threading backend writes an env's input row in that window.
pub struct Phases {
    phases: Box<[AtomicU8]>,
}

impl std::fmt::Debug for Phases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries((0..self.len()).map(|env| self.get(env)))
            .finish()
    }
}

impl Phases {
    /// `envs` envs, all [`IDLE`].
    pub fn new(envs: usize) -> Phases {
        Phases {
            phases: (0..envs).map(|_| AtomicU8::new(IDLE)).collect(),
        }
    }

    /// The number of envs.
    pub fn len(&self) -> usize {
        self.phases.len()
    }

    /// Whether there are no envs.
    pub fn is_empty(&self) -> bool {
        self.phases.is_empty()
    }

    /// Env `env`'s phase.
    ///
    /// # Panics
    /// If `env` is not below [`Phases::len`] (as every method that takes
    /// an env).
    #[inline]
    pub fn get(&self, env: usize) -> u8 {
        // Acquire: pairs with the Release store that set this phase.
        self.phases[env].load(Ordering::Acquire)
    }

    /// Counts the envs of `envs` whose result or error waits to be taken
    /// (as [`Phases::is_done`] of each) and whether any of them failed;
    /// appends them to `ready`, in order, when at least `min` are done, or
    /// one failed, or all are (a look that finds too few for its receive
    /// lists none).
    /// Returns the count and the failure; when listed, the count is what
    /// was appended. The count takes one pass over the phases side by
    /// side; the list, when some envs are not done, a second.
    ///
    /// # Panics
    /// If `envs` ends past the last env.
    #[inline]
    pub fn done_in(
        &self,
        envs: std::ops::Range<usize>,
        min: usize,
        ready: &mut Vec<usize>,
    ) -> (usize, bool) {
        let phases = &self.phases[envs.clone()];
        // DONE and FAILED are the phases with bit 1 set, FAILED the one
        // with bits 1 and 0: no branch per env.
        let (mut found, mut failed) = (0, 0);
        for phase in phases {
            // Acquire: as `get`.
            let phase = phase.load(Ordering::Acquire);
            found += usize::from(phase >> 1);
            failed |= phase & (phase >> 1);
        }
        let failed = failed != 0;
        if found == phases.len() {
            ready.extend(envs);
            return (found, failed);
        }
        if found < min && !failed {
            return (found, false);
        }
        // Phases only move on to done meanwhile (their receiver alone takes
        // them back): the list is read again, and is what counts.
        let (first, start) = (envs.start, ready.len());
        ready.resize(start + phases.len(), 0);
        let out = &mut ready[start..];
        let (mut found, mut failed) = (0, false);
        for (i, phase) in phases.iter().enumerate() {
            // Acquire: as `get`. Each env is written at the end of the
            // found ones, which moves on past it if it is done.
            let phase = phase.load(Ordering::Acquire);
            out[found] = first + i;
            found += usize::from(phase >= DONE);
            failed |= phase == FAILED;
        }
        ready.truncate(start + found);
        (found, failed)
    }

    /// Whether env `env`'s result or error waits to be taken.
    #[inline]
    pub fn is_done(&self, env: usize) -> bool {
        matches!(self.get(env), DONE | FAILED)
    }

    /// Whether env `env` failed and its error waits to be taken.
    #[inline]
    pub fn is_failed(&self, env: usize) -> bool {
        self.get(env) == FAILED
    }

    /// Whether env `env` has no command in flight.
    #[inline]
    pub fn is_idle(&self, env: usize) -> bool {
        self.get(env) == IDLE
    }

    /// Marks env `env` sent. A backend whose workers can die marks it
    /// through [`Liveness::queue`](crate::Liveness::queue) instead.
    #[inline]
    pub fn queue(&self, env: usize) {
        // Release: pairs with the Acquire of whoever acts on QUEUED (the
        // worker that runs the env, the reader that fails it).
        self.phases[env].store(QUEUED, Ordering::Release);
    }

    /// Claims env `env` for a send: moves it from [`IDLE`] to [`QUEUED`]
    /// and returns true, or returns false (leaving it as it is) if it was
    /// not idle. What the env's last run did comes before a successful
    /// claim (see [`Phases`]).
    #[inline]
    pub fn claim(&self, env: usize) -> bool {
        // AcqRel: Acquire pairs with the Release of the `release` that made
        // the env idle; Release, as `queue`, with whoever acts on QUEUED.
        self.phases[env]
            .compare_exchange(IDLE, QUEUED, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Gives back env `env`, which the caller [`Phases::claim`]ed and did
    /// not queue after all (its send failed): [`IDLE`] again.
    #[inline]
    pub fn unclaim(&self, env: usize) {
        // Release: the claimer's writes come before the next claim.
        self.phases[env].store(IDLE, Ordering::Release);
    }

    /// Publishes env `env`'s result ([`DONE`]) or error ([`FAILED`]),
    /// written before this call.
    #[inline]
    pub fn publish(&self, env: usize, failed: bool) {
        let phase = if failed { FAILED } else { DONE };
        // Release: pairs with the Acquire in `get` (`is_done`): the result
        // or error is visible to whoever sees the phase.
        self.phases[env].store(phase, Ordering::Release);
    }

    /// Marks env `env` idle once its result was taken: from [`DONE`] or
    /// [`FAILED`] only (an env in flight, or idle, is left as it is).
    #[inline]
    pub fn release(&self, env: usize) {
        let phase = &self.phases[env];
        // Relaxed: a guess at the phase, which the exchange below checks.
        let done = match phase.load(Ordering::Relaxed) {
            FAILED => FAILED,
            _ => DONE,
        };
        // AcqRel: Acquire pairs with the Release of the publication (its
        // run comes before this); Release with the Acquire of the next
        // send's check (`is_idle`) or claim: the taking of the result, and
        // the run before it, come before the next command.
        let _ = phase.compare_exchange(done, IDLE, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// Marks env `env` idle after its receiver took its result: the env
    /// is [`DONE`] or [`FAILED`], as a look with `Acquire` ([`Phases::get`],
    /// [`Phases::done_in`]) showed the caller, and only the taker of a
    /// result moves an env on from there (workers and deaths act on
    /// [`QUEUED`] only). So a load and a store, where [`Phases::release`]
    /// needs an exchange: no locked instruction per env. An env that is
    /// neither done nor failed (a caller that broke that contract) is left
    /// as it is: a send can never claim an env whose run may still read its
    /// input.
    #[inline]
    pub fn release_taken(&self, env: usize) {
        let phase = &self.phases[env];
        // Acquire: as `get` (the run, published with Release, comes before
        // the store below, and so before the next claim).
        if matches!(phase.load(Ordering::Acquire), DONE | FAILED) {
            // Release: pairs with the Acquire of the next send's check or
            // claim: the taking of the result comes before the next command.
            phase.store(IDLE, Ordering::Release);
        }
    }

    /// Env `env`'s atomic, for the liveness protocol.
    pub(crate) fn atomic(&self, env: usize) -> &AtomicU8 {
        &self.phases[env]
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// An env goes round IDLE, QUEUED, DONE or FAILED, IDLE.
    #[test]
    fn an_env_goes_round_its_phases() {
        let phases = Phases::new(2);
        assert_eq!((phases.len(), phases.is_empty()), (2, false));
        assert!(phases.is_idle(0) && phases.is_idle(1));
        phases.queue(0);
        assert_eq!(phases.get(0), QUEUED);
        assert!(!phases.is_done(0) && !phases.is_idle(0));
        phases.publish(0, false);
        assert!(phases.is_done(0) && !phases.is_failed(0));
        phases.release(0);
        phases.queue(1);
        phases.publish(1, true);
        assert!(phases.is_done(1) && phases.is_failed(1));
        assert_eq!(format!("{phases:?}"), "[0, 3]");
    }

    /// A look at a range of envs counts the done and the failed ones and
    /// lists them, in order, when enough are done or one failed.
    #[test]
    fn a_look_at_a_range_finds_the_done_envs() {
        let phases = Phases::new(6);
        for env in 1..6 {
            phases.queue(env);
        }
        phases.publish(2, false);
        phases.publish(4, true);
        phases.publish(5, false);
        let mut ready = vec![9];
        assert_eq!(phases.done_in(1..6, 1, &mut ready), (3, true));
        assert_eq!(ready, vec![9, 2, 4, 5]);
        ready.clear();
        assert_eq!(phases.done_in(0..4, 1, &mut ready), (1, false));
        assert_eq!(ready, vec![2]);
        assert_eq!(phases.done_in(3..3, 1, &mut ready), (0, false));
        assert_eq!(ready, vec![2]);
        // Too few for the look: counted, not listed, unless one failed.
        ready.clear();
        assert_eq!(phases.done_in(0..4, 2, &mut ready), (1, false));
        assert!(ready.is_empty());
        assert_eq!(phases.done_in(3..6, 3, &mut ready), (2, true));
        assert_eq!(ready, vec![4, 5]);
        // Every env done: listed without a second pass.
        ready.clear();
        assert_eq!(phases.done_in(4..6, 9, &mut ready), (2, true));
        assert_eq!(ready, vec![4, 5]);
        phases.queue(0);
        phases.publish(0, false);
        phases.publish(1, false);
        phases.publish(3, false);
        ready.clear();
        assert_eq!(phases.done_in(0..4, 9, &mut ready), (4, false));
        assert_eq!(ready, vec![0, 1, 2, 3]);
    }

    /// A claim takes an idle env only; a release leaves an env in flight
    /// (or idle) alone.
    #[test]
    fn a_claim_takes_an_idle_env_and_a_release_a_done_one() {
        let phases = Phases::new(1);
        phases.release(0);
        assert!(phases.is_idle(0));
        assert!(phases.claim(0));
        assert!(!phases.claim(0), "claimed twice");
        phases.release(0);
        assert_eq!(phases.get(0), QUEUED, "released in flight");
        phases.publish(0, false);
        assert!(!phases.claim(0), "claimed with its result waiting");
        phases.release(0);
        phases.unclaim(0);
        assert!(phases.claim(0), "claimed again once given back");
        phases.publish(0, true);
        phases.release(0);
        assert!(phases.is_idle(0));
    }

    /// A taken env is released by a store, from done or failed only.
    #[test]
    fn a_taken_env_is_released() {
        let phases = Phases::new(2);
        for (env, failed) in [(0, false), (1, true)] {
            assert!(phases.claim(env));
            phases.publish(env, failed);
            assert!(phases.is_done(env));
            phases.release_taken(env);
            assert!(phases.is_idle(env) && phases.claim(env));
        }
        // In flight (queued): left as it is.
        phases.release_taken(0);
        assert_eq!(phases.get(0), QUEUED);
    }
}
