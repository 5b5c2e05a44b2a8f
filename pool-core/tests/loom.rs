//! Loom models of the protocols both backends share: a command is never
//! left waiting for a dead worker (`Liveness` with `Phases`); and the
//! threading backend's claim of an env (`Phases::claim`), after which a
//! send writes the env's input row in place.
//!
//! Run with `cargo xtask loom` (`RUSTFLAGS="--cfg loom"`, release mode,
//! `LOOM_MAX_PREEMPTIONS=3`). Under `cfg(loom)` the atomics of
//! `pool_core::phase` and `pool_core::liveness` are loom's.
#![cfg(loom)]

use loom::sync::{Arc, Mutex};
use loom::thread;

use pool_core::phase::{DONE, FAILED, IDLE, QUEUED};
use pool_core::{Liveness, Phases};

/// Fails env `env` if its command is still in flight, under its cell's
/// lock, as the process backend's `Shared::fail` does: whichever of the
/// sender and the dying reader finds it `QUEUED` first fails it.
fn fail(phases: &Phases, cell: &Mutex<u32>, env: usize) {
    let mut failures = cell.lock().unwrap();
    if phases.get(env) == QUEUED {
        *failures += 1;
        phases.publish(env, true);
    }
}

/// A send to env 0 of a worker whose reader sees its socket end at the
/// same time: whatever the interleaving, env 0 ends `FAILED` (never
/// `QUEUED`, waiting for a worker that is gone), failed once; env 1, never
/// sent to, is left alone.
#[test]
fn a_command_is_never_left_waiting_for_a_dead_worker() {
    loom::model(|| {
        let phases = Arc::new(Phases::new(2));
        let life = Arc::new(Liveness::new());
        let cells = Arc::new([Mutex::new(0u32), Mutex::new(0u32)]);

        let sender = {
            let (phases, life, cells) = (phases.clone(), life.clone(), cells.clone());
            thread::spawn(move || {
                let alive = {
                    let _cell = cells[0].lock().unwrap();
                    life.queue(&phases, 0)
                };
                // A live worker was handed the command: its death from now
                // on is the reader's to report.
                if !alive {
                    fail(&phases, &cells[0], 0);
                }
            })
        };
        let reader = {
            let (phases, life, cells) = (phases.clone(), life.clone(), cells.clone());
            thread::spawn(move || {
                life.die(&phases, 0..2, |env| fail(&phases, &cells[env], env));
            })
        };
        sender.join().unwrap();
        reader.join().unwrap();

        assert_eq!(phases.get(0), FAILED, "a command waits for a dead worker");
        assert_eq!(*cells[0].lock().unwrap(), 1, "failed once");
        assert!(phases.is_idle(1));
        assert!(!life.is_alive());
    });
}

/// The same without the cell's lock around the sender's `queue` (the
/// protocol alone, as `Liveness` documents it: the fences, not the lock,
/// keep the command from waiting).
#[test]
fn the_fences_alone_keep_a_command_from_waiting() {
    loom::model(|| {
        let phases = Arc::new(Phases::new(1));
        let life = Arc::new(Liveness::new());
        let cell = Arc::new(Mutex::new(0u32));

        let sender = {
            let (phases, life, cell) = (phases.clone(), life.clone(), cell.clone());
            thread::spawn(move || {
                if !life.queue(&phases, 0) {
                    fail(&phases, &cell, 0);
                }
            })
        };
        let reader = {
            let (phases, life, cell) = (phases.clone(), life.clone(), cell.clone());
            thread::spawn(move || life.die(&phases, 0..1, |env| fail(&phases, &cell, env)))
        };
        sender.join().unwrap();
        reader.join().unwrap();
        assert_eq!(phases.get(0), FAILED, "a command waits for a dead worker");
    });
}

/// An env's input row, written by a send once it claimed the env, never
/// meets the read of the env's last run, whatever a stray release does
/// meanwhile (a release of an env in flight does nothing): the run's read,
/// its publication, the release that made the env idle and the claim each
/// come before the next. Loom's cell reports any write that meets the read.
#[test]
fn an_input_written_after_a_claim_never_meets_the_last_run() {
    // A receiver that takes the result whenever it sees it, and so a
    // release that may come while the env is still in flight.
    input_after_a_release(|phases| phases.release(0));
}

/// As above with the store that releases a taken env: a receiver that
/// looked and saw the env done releases it, and the next send's claim
/// and input write still come after the run's read.
#[test]
fn an_input_written_after_a_taken_release_never_meets_the_last_run() {
    // One look: only a receiver that saw the result takes it.
    input_after_a_release(|phases| {
        if phases.is_done(0) {
            phases.release_taken(0);
        }
    });
}

/// The model of the two tests above: a first send's run, a receiver that
/// releases the env with `release`, and a next send that writes the input
/// only if it claims the env.
fn input_after_a_release(release: fn(&Phases)) {
    loom::model(move || {
        let phases = Arc::new(Phases::new(1));
        let input = Arc::new(loom::cell::UnsafeCell::new(0u32));
        // The first send: claimed, its input written, then handed over
        // (the spawn below is the queue's hand-off).
        assert!(phases.claim(0));
        // SAFETY: no other thread exists yet.
        input.with_mut(|row| unsafe { *row = 1 });
        let worker = {
            let (phases, input) = (phases.clone(), input.clone());
            thread::spawn(move || {
                // SAFETY: the access under test (loom checks it).
                let action = input.with(|row| unsafe { *row });
                assert_eq!(action, 1, "the run reads its send's input");
                phases.publish(0, false);
            })
        };
        let receiver = {
            let phases = phases.clone();
            thread::spawn(move || release(&phases))
        };
        // The next send: writes only if it claims the env.
        let sender = {
            let (phases, input) = (phases.clone(), input.clone());
            thread::spawn(move || {
                if phases.claim(0) {
                    // SAFETY: the access under test (loom checks it).
                    input.with_mut(|row| unsafe { *row = 2 });
                    true
                } else {
                    false
                }
            })
        };
        worker.join().unwrap();
        receiver.join().unwrap();
        let claimed = sender.join().unwrap();
        // Claimed only after the release that followed the publication;
        // else the env is done or idle, never left in flight.
        let phase = phases.get(0);
        if claimed {
            assert_eq!(phase, QUEUED);
        } else {
            assert!(phase == DONE || phase == IDLE, "phase {phase}");
        }
    });
}
