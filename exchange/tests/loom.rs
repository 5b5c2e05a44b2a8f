//! Loom models of the exchange protocol: the seqlock never yields a torn
//! record, and neither the command word nor the doorbell loses a wake-up.
//!
//! The bell models cover the ring / listen / wait protocol of
//! `futex::bell` (what `Exchange::receive`, `Exchange::wait_bell` and
//! `Bells` sleep on): a receiver that takes a ticket, finds nothing, then
//! waits never misses a ring that came after its ticket, with one ringer or
//! two (the count and the sleeper flag that a ring clears while a reader
//! sets it again), with two sleepers on one bell (the wake of every
//! sleeper), and with the work a ring announces carried by another word (a
//! command posted before a worker's bell rings, as `Bells` is used). The
//! futex is loom's stand-in in `futex::kernel` (a table of sleepers under a
//! loom mutex and condition variable, which compares the word and sleeps
//! under its lock as the kernel does), so a lost wake-up leaves a thread
//! asleep for good and loom reports the deadlock. Not covered here: waits
//! with a deadline (real time; the stand-in never sleeps then), the spin
//! before the sleep (loom builds never spin), the byte copies over raw
//! pointers (`tests/seqlock_threads.rs`) and futexes between processes
//! (`tests/cross_process.rs`).
//!
//! Run with `cargo xtask loom` (`RUSTFLAGS="--cfg loom"`, release mode,
//! `LOOM_MAX_PREEMPTIONS=3`). The protocol modules are private to the crate,
//! so this test compiles them in from their files; under `cfg(loom)` their
//! atomics are loom's and the futex wait is a stand-in that yields until the
//! word changes, so a lost wake-up shows as a model that never finishes.
//!
//! Loom cannot model atomics made from raw pointers, so the records here are
//! two loom `AtomicU64`s copied with relaxed loads and stores, exactly as
//! `seqlock::write_bytes` and `seqlock::read_bytes` copy slot memory.
#![cfg(loom)]

#[path = "../src/primitive.rs"]
mod primitive;

#[path = "../src/seqlock.rs"]
mod seqlock;

#[path = "../src/futex.rs"]
mod futex;

use std::time::Duration;

use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;

use futex::{bell, command, WaitOutcome};
use seqlock::ReadError;

/// A slot: its clock and a record of two words.
struct Slot {
    clock: AtomicU64,
    record: [AtomicU64; 2],
}

impl Slot {
    fn new() -> Self {
        Slot {
            clock: AtomicU64::new(seqlock::NEVER_PUBLISHED),
            record: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// Publishes the record `[value, value]`.
    fn publish(&self, value: u64) {
        let start = seqlock::begin_write(&self.clock);
        for word in &self.record {
            // Relaxed: as `seqlock::write_bytes` stores.
            word.store(value, Ordering::Relaxed);
        }
        seqlock::end_write(&self.clock, start);
    }

    /// Reads the record, with the clock value it is consistent with.
    fn read(&self, retries: u32) -> Result<(u64, [u64; 2]), ReadError> {
        let mut copy = [0; 2];
        let seen = seqlock::read_consistent_with(&self.clock, retries, || {
            for (to, word) in copy.iter_mut().zip(&self.record) {
                // Relaxed: as `seqlock::read_bytes` loads.
                *to = word.load(Ordering::Relaxed);
            }
        })?;
        Ok((seen, copy))
    }
}

#[test]
fn a_reader_racing_two_writes_never_sees_a_torn_record() {
    loom::model(|| {
        let slot = Arc::new(Slot::new());
        let writer = {
            let slot = slot.clone();
            thread::spawn(move || {
                slot.publish(1);
                slot.publish(2);
            })
        };
        // Publication n sets the clock to 2n and the record to [n, n].
        match slot.read(1) {
            Ok((seen, record)) => assert_eq!(record, [seen / 2; 2], "torn at clock {seen}"),
            Err(ReadError::Busy | ReadError::Torn) => {}
        }
        writer.join().unwrap();
        assert_eq!(slot.read(0), Ok((4, [2, 2])));
    });
}

#[test]
fn a_published_slot_wakes_the_reader_on_the_bell() {
    loom::model(|| {
        let slot = Arc::new(Slot::new());
        let doorbell = Arc::new(AtomicU32::new(0));
        let writer = {
            let (slot, doorbell) = (slot.clone(), doorbell.clone());
            thread::spawn(move || {
                slot.publish(1);
                bell::ring(&doorbell);
            })
        };
        loop {
            let ticket = bell::listen(&doorbell);
            if let Ok((2, record)) = slot.read(0) {
                assert_eq!(record, [1, 1]);
                break;
            }
            let outcome = bell::wait_bell(&doorbell, ticket, None, Duration::ZERO);
            assert_eq!(outcome, WaitOutcome::Changed);
        }
        writer.join().unwrap();
    });
}

#[test]
fn a_posted_command_wakes_the_worker_and_carries_its_action() {
    const STEP: u32 = command::FIRST_COMMAND;
    loom::model(|| {
        let action = Arc::new(AtomicU64::new(0));
        let word = Arc::new(AtomicU32::new(command::IDLE));
        let worker = {
            let (action, word) = (action.clone(), word.clone());
            thread::spawn(move || {
                let taken = command::wait_command(&word, None, Duration::ZERO);
                assert_eq!(taken, Some(STEP));
                // Relaxed: ordered by the command word (post, then take).
                assert_eq!(action.load(Ordering::Relaxed), 7);
            })
        };
        // Relaxed: ordered by the command word (post, then take).
        action.store(7, Ordering::Relaxed);
        assert_eq!(command::post(&word, STEP), Ok(()));
        worker.join().unwrap();
        assert_eq!(word.load(Ordering::Relaxed), command::IDLE);
    });
}

#[test]
fn a_round_trip_loses_no_wake_up() {
    const STEP: u32 = command::FIRST_COMMAND;
    loom::model(|| {
        let action = Arc::new(AtomicU64::new(0));
        let word = Arc::new(AtomicU32::new(command::IDLE));
        let result = Arc::new(Slot::new());
        let doorbell = Arc::new(AtomicU32::new(0));
        let worker = {
            let (action, word) = (action.clone(), word.clone());
            let (result, doorbell) = (result.clone(), doorbell.clone());
            thread::spawn(move || {
                let taken = command::wait_command(&word, None, Duration::ZERO);
                assert_eq!(taken, Some(STEP));
                // Relaxed: ordered by the command word (post, then take).
                result.publish(action.load(Ordering::Relaxed));
                bell::ring(&doorbell);
            })
        };
        // Relaxed: ordered by the command word (post, then take).
        action.store(7, Ordering::Relaxed);
        assert_eq!(command::post(&word, STEP), Ok(()));
        loop {
            let ticket = bell::listen(&doorbell);
            if let Ok((2, record)) = result.read(0) {
                assert_eq!(record, [7, 7]);
                break;
            }
            let outcome = bell::wait_bell(&doorbell, ticket, None, Duration::ZERO);
            assert_eq!(outcome, WaitOutcome::Changed);
        }
        worker.join().unwrap();
    });
}

/// Takes tickets and checks `ready` until it holds, sleeping on the bell in
/// between: the receive loop of `Exchange::receive` and of `Bells` users.
fn wait_until(doorbell: &AtomicU32, mut ready: impl FnMut() -> bool) {
    loop {
        let ticket = bell::listen(doorbell);
        if ready() {
            return;
        }
        let outcome = bell::wait_bell(doorbell, ticket, None, Duration::ZERO);
        assert_eq!(outcome, WaitOutcome::Changed);
    }
}

/// A result behind the bell, reduced to one word so that the models with
/// three threads stay small: the writer stores it, then rings (Release);
/// a reader listens (Acquire), then loads it.
fn publish_flag(flag: &AtomicU32, doorbell: &AtomicU32) {
    // Relaxed: published by the Release increment in `bell::ring`.
    flag.store(1, Ordering::Relaxed);
    bell::ring(doorbell);
}

/// Whether the writer's word is visible (after a ticket was taken).
fn flag_set(flag: &AtomicU32) -> bool {
    // Relaxed: a reader that saw the ring through `bell::listen`'s Acquire
    // sees the store before it; one that did not waits for the ring.
    flag.load(Ordering::Relaxed) == 1
}

#[test]
fn a_ring_wakes_every_reader_asleep_on_the_bell() {
    loom::model(|| {
        let flag = Arc::new(AtomicU32::new(0));
        let doorbell = Arc::new(AtomicU32::new(0));
        let writer = {
            let (flag, doorbell) = (flag.clone(), doorbell.clone());
            thread::spawn(move || publish_flag(&flag, &doorbell))
        };
        let other_reader = {
            let (flag, doorbell) = (flag.clone(), doorbell.clone());
            thread::spawn(move || wait_until(&doorbell, || flag_set(&flag)))
        };
        wait_until(&doorbell, || flag_set(&flag));
        other_reader.join().unwrap();
        writer.join().unwrap();
    });
}

#[test]
fn a_reader_waiting_for_two_slots_misses_neither_ring() {
    loom::model(|| {
        let flags = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
        let doorbell = Arc::new(AtomicU32::new(0));
        let writers: Vec<_> = (0..2)
            .map(|i| {
                let (flags, doorbell) = (flags.clone(), doorbell.clone());
                thread::spawn(move || publish_flag(&flags[i], &doorbell))
            })
            .collect();
        // As a receive with `min_get` 2: both results, whatever the order.
        wait_until(&doorbell, || flags.iter().all(flag_set));
        for writer in writers {
            writer.join().unwrap();
        }
        // Each ring counted once (the sleeper flag may stay set: a reader
        // that set it as a ring came in finds the count changed and goes).
        assert_eq!(
            doorbell.load(Ordering::Relaxed) & !bell::SLEEPER,
            2 * bell::RING
        );
    });
}

#[test]
fn a_worker_asleep_on_its_bell_takes_the_command_posted_before_the_ring() {
    const STEP: u32 = command::FIRST_COMMAND;
    loom::model(|| {
        let action = Arc::new(AtomicU64::new(0));
        let word = Arc::new(AtomicU32::new(command::IDLE));
        let doorbell = Arc::new(AtomicU32::new(0));
        let worker = {
            let (action, word, doorbell) = (action.clone(), word.clone(), doorbell.clone());
            thread::spawn(move || {
                // A worker's thread sleeps on the bell, not on the word
                // (`Exchange::try_take_command` between `Bells::wait`s).
                let mut taken = None;
                wait_until(&doorbell, || {
                    taken = command::take(&word);
                    taken.is_some()
                });
                assert_eq!(taken, Some(STEP));
                // Relaxed: ordered by the command word (post, then take).
                assert_eq!(action.load(Ordering::Relaxed), 7);
            })
        };
        // Relaxed: ordered by the command word (post, then take).
        action.store(7, Ordering::Relaxed);
        assert_eq!(command::post(&word, STEP), Ok(()));
        bell::ring(&doorbell);
        worker.join().unwrap();
    });
}
