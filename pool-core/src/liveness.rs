//! `Liveness`: whether a worker is alive, and the order of a send against
//! its worker's death that leaves no command waiting for a dead worker.
//!
//! # The protocol
//! A send marks an env [`QUEUED`], then reads whether its worker is alive:
//! if it is not, the sender fails the env itself. A dying worker's reader
//! clears `alive`, then scans the worker's envs for `QUEUED` ones and fails
//! them. A `SeqCst` fence sits between each side's store and its load
//! (Dekker's pattern; loom models fences, not `SeqCst` accesses), so at
//! least one side sees the other's store: the sender sees the worker dead,
//! or the scan sees the env queued (or both: failing an env is done once,
//! under its cell's lock, by whoever finds it still `QUEUED`).
//! `tests/loom.rs` checks this, and fails if either fence is removed.

use std::ops::Range;

use crate::phase::{Phases, QUEUED};
use crate::primitive::sync::atomic::{fence, AtomicBool, Ordering};

/// Whether a worker is alive (see the module docs for the protocol it
/// takes part in).
pub struct Liveness {
    alive: AtomicBool,
}

impl std::fmt::Debug for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Liveness")
            .field("alive", &self.is_alive())
            .finish()
    }
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness::new()
    }
}

impl Liveness {
    /// An alive worker.
    pub fn new() -> Liveness {
        Liveness {
            alive: AtomicBool::new(true),
        }
    }

    /// The sender's side: marks env `env` [`QUEUED`], then returns whether
    /// the worker is alive. If it is not, the caller fails the env itself;
    /// if it is, a death from now on finds the env in its scan
    /// ([`Liveness::die`]).
    #[inline]
    pub fn queue(&self, phases: &Phases, env: usize) -> bool {
        // Release: pairs with the Acquire of whoever acts on QUEUED.
        phases.atomic(env).store(QUEUED, Ordering::Release);
        // SeqCst fence: pairs with the fence in `die` (store, fence, load
        // on both sides: one of them sees the other's store).
        fence(Ordering::SeqCst);
        // Relaxed: ordered after the store of QUEUED by the fence above.
        self.alive.load(Ordering::Relaxed)
    }

    /// Whether the worker is alive (not yet [`Liveness::die`]d).
    #[inline]
    pub fn is_alive(&self) -> bool {
        // Acquire: pairs with the Release store in `die`: whoever sees the
        // worker dead sees what its reader recorded before (why it died).
        self.alive.load(Ordering::Acquire)
    }

    /// The dying worker's side: marks it dead, then calls `fail` for each
    /// of `envs` that is [`QUEUED`] (`fail` re-checks under the env's lock:
    /// the sender may fail it too).
    pub fn die(&self, phases: &Phases, envs: Range<usize>, mut fail: impl FnMut(usize)) {
        // Release: pairs with the Acquire in `is_alive`.
        self.alive.store(false, Ordering::Release);
        // SeqCst fence: pairs with the fence in `queue`.
        fence(Ordering::SeqCst);
        for env in envs {
            // Relaxed: ordered after the store of `alive` by the fence
            // above; `fail` re-reads the phase under the env's lock.
            if phases.atomic(env).load(Ordering::Relaxed) == QUEUED {
                fail(env);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::phase::IDLE;

    /// A send after a death sees it; a death after a send finds the env.
    #[test]
    fn a_send_and_a_death_see_each_other() {
        let phases = Phases::new(3);
        let life = Liveness::new();
        assert!(life.is_alive());
        assert!(life.queue(&phases, 1));
        let mut found = Vec::new();
        life.die(&phases, 0..3, |env| found.push(env));
        assert_eq!(found, vec![1]);
        assert!(!life.is_alive());
        assert!(!life.queue(&phases, 2), "a send after the death sees it");
        assert_eq!(phases.get(0), IDLE);
    }
}
