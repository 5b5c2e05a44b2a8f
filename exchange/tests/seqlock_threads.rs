//! The seqlock, the futex and the command and bell words under real threads,
//! on heap memory.
//!
//! The protocol modules are private to the crate, so this test compiles them
//! in from their files (as `tests/loom.rs` does). Every wait has a deadline,
//! so a lost wake-up fails a test instead of hanging it. Under `cfg(loom)`
//! the atomics are loom's, which only run inside a model: `tests/loom.rs`.
#![cfg(not(loom))]

#[path = "../src/primitive.rs"]
mod primitive;

#[path = "../src/seqlock.rs"]
mod seqlock;

#[path = "../src/futex.rs"]
mod futex;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use futex::{bell, command, WaitOutcome};
use seqlock::ReadError;

/// How long any wait in these tests may take before it counts as a hang.
const WATCHDOG: Duration = Duration::from_secs(60);

fn watchdog() -> Option<Instant> {
    Some(Instant::now() + WATCHDOG)
}

/// Zeroed, 8-byte-aligned heap memory that threads share through raw
/// pointers; made of atomics, so writing through a shared reference is sound.
struct Area {
    words: Box<[AtomicU64]>,
}

impl Area {
    fn new(bytes: usize) -> Self {
        let words = (0..bytes.div_ceil(8) + 1)
            .map(|_| AtomicU64::new(0))
            .collect();
        Area { words }
    }

    /// A pointer `offset` bytes into the area.
    fn at(&self, offset: usize) -> *mut u8 {
        assert!(offset < self.words.len() * 8);
        self.words
            .as_ptr()
            .cast::<u8>()
            .cast_mut()
            .wrapping_add(offset)
    }
}

/// A record of `len` bytes for publication `counter`: every byte is the
/// counter's low byte, except the first 8, which hold the whole counter.
fn record(counter: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![counter as u8; len];
    bytes[..8].copy_from_slice(&counter.to_le_bytes());
    bytes
}

/// Panics unless `bytes` is exactly the record of the publication that
/// `clock` counts.
fn assert_consistent(clock: u64, bytes: &[u8]) {
    let counter = clock / 2;
    let head = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    assert_eq!(head, counter, "clock {clock} with the record of {head}");
    assert!(
        bytes[8..].iter().all(|&b| b == counter as u8),
        "torn record at clock {clock}"
    );
}

#[test]
fn bytes_round_trip_at_every_alignment() {
    let area = Area::new(64);
    for offset in 0..16 {
        for len in 0..40 {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + offset + 1) as u8).collect();
            let mut dst = vec![0u8; len];
            // SAFETY: `offset + len <= 56` bytes of the area's 72, which this
            // thread alone accesses, always atomically.
            unsafe { seqlock::write_bytes(area.at(offset), &src) };
            // SAFETY: as above.
            unsafe { seqlock::read_bytes(area.at(offset), &mut dst) };
            assert_eq!(dst, src, "offset {offset}, len {len}");
        }
    }
}

#[test]
fn empty_copies_touch_nothing() {
    let dangling = std::ptr::NonNull::<u8>::dangling().as_ptr();
    // SAFETY: zero bytes: a dangling pointer is allowed.
    unsafe { seqlock::write_bytes(dangling, &[]) };
    // SAFETY: as above.
    unsafe { seqlock::read_bytes(dangling, &mut []) };
}

#[test]
fn the_clock_is_odd_while_writing_and_even_once_published() {
    let clock = AtomicU64::new(seqlock::NEVER_PUBLISHED);
    assert_eq!(seqlock::read_begin(&clock), Some(0));

    let start = seqlock::begin_write(&clock);
    assert_eq!(start, 0);
    assert_eq!(clock.load(Ordering::Relaxed), 1);
    assert_eq!(seqlock::read_begin(&clock), None);
    assert_eq!(
        seqlock::read_consistent_with(&clock, 3, || {}),
        Err(ReadError::Busy)
    );

    assert_eq!(seqlock::end_write(&clock, start), 2);
    assert_eq!(seqlock::read_begin(&clock), Some(2));
    assert_eq!(seqlock::read_consistent_with(&clock, 0, || {}), Ok(2));
}

#[test]
fn a_write_abandoned_mid_way_is_carried_on_from() {
    // A writer died with the clock odd (3); its successor publishes 6.
    let clock = AtomicU64::new(3);
    let start = seqlock::begin_write(&clock);
    assert_eq!(start, 4);
    assert_eq!(clock.load(Ordering::Relaxed), 5);
    assert_eq!(seqlock::end_write(&clock, start), 6);
}

#[test]
fn validation_fails_once_a_write_began() {
    let clock = AtomicU64::new(2);
    let seen = seqlock::read_begin(&clock).unwrap();
    assert!(seqlock::read_validate(&clock, seen));
    let start = seqlock::begin_write(&clock);
    assert!(!seqlock::read_validate(&clock, seen));
    seqlock::end_write(&clock, start);
    assert!(!seqlock::read_validate(&clock, seen));
}

#[test]
fn a_copy_that_a_write_always_overlaps_is_torn() {
    let clock = AtomicU64::new(0);
    let mut attempts = 0;
    let outcome = seqlock::read_consistent_with(&clock, 2, || {
        attempts += 1;
        let start = seqlock::begin_write(&clock);
        seqlock::end_write(&clock, start);
    });
    assert_eq!(outcome, Err(ReadError::Torn));
    assert_eq!(attempts, 3);
}

#[test]
fn read_consistent_copies_a_quiet_slot() {
    let clock = AtomicU64::new(0);
    let area = Area::new(32);
    let start = seqlock::begin_write(&clock);
    // SAFETY: 28 bytes from offset 3 lie in the area's 40, which only this
    // thread accesses, atomically.
    unsafe { seqlock::write_bytes(area.at(3), &record(1, 28)) };
    seqlock::end_write(&clock, start);

    let mut dst = [0u8; 28];
    // SAFETY: as above.
    let seen = unsafe { seqlock::read_consistent(&clock, area.at(3), &mut dst, 0) };
    assert_eq!(seen, Ok(2));
    assert_consistent(2, &dst);
}

/// One writer publishes `publications` records of `len` bytes at `offset`
/// into a heap area while two readers read them; every read that succeeds
/// must be the record its clock announces. The writer yields its time slice
/// after every `pause_every` publications, so that reads also succeed while
/// it writes.
fn race(len: usize, offset: usize, publications: u64, pause_every: u64) {
    let clock = AtomicU64::new(0);
    let area = Area::new(offset + len);
    let done = AtomicBool::new(false);
    let (clock, area, done) = (&clock, &area, &done);

    thread::scope(|scope| {
        scope.spawn(move || {
            for counter in 1..=publications {
                let bytes = record(counter, len);
                let start = seqlock::begin_write(clock);
                // SAFETY: `offset + len` bytes fit in the area, which every
                // thread accesses atomically, with the same range.
                unsafe { seqlock::write_bytes(area.at(offset), &bytes) };
                seqlock::end_write(clock, start);
                if counter % pause_every == 0 {
                    // Leaves the readers a window in which the slot is quiet.
                    thread::yield_now();
                }
            }
            done.store(true, Ordering::Release);
        });
        let readers: Vec<_> = [0, 3]
            .into_iter()
            .map(|retries| {
                scope.spawn(move || {
                    let mut dst = vec![0u8; len];
                    let (mut ok, mut busy, mut torn) = (0u64, 0u64, 0u64);
                    let mut last = 0;
                    loop {
                        let finished = done.load(Ordering::Acquire);
                        // SAFETY: as for the writer.
                        match unsafe {
                            seqlock::read_consistent(clock, area.at(offset), &mut dst, retries)
                        } {
                            Ok(seen) => {
                                assert_consistent(seen, &dst);
                                assert!(seen >= last, "the clock went back");
                                last = seen;
                                ok += 1;
                            }
                            Err(ReadError::Busy) => busy += 1,
                            Err(ReadError::Torn) => torn += 1,
                        }
                        if finished {
                            break;
                        }
                    }
                    (ok, busy, torn, last)
                })
            })
            .collect();
        for reader in readers {
            let (ok, busy, torn, last) = reader.join().unwrap();
            assert!(ok > 0, "a reader never read (busy {busy}, torn {torn})");
            assert_eq!(last, publications * 2, "the last read saw the last record");
        }
    });
}

#[test]
fn readers_never_see_a_torn_small_record() {
    race(32, 0, 20_000, 256);
}

#[test]
fn readers_never_see_a_torn_small_unaligned_record() {
    race(32, 3, 20_000, 256);
}

#[test]
fn readers_never_see_a_torn_frame() {
    race(84 * 84 * 4, 0, 1_000, 1);
}

#[test]
fn wait_on_a_word_that_differs_returns_at_once() {
    let word = AtomicU32::new(5);
    assert_eq!(futex::wait(&word, 4, None), WaitOutcome::Changed);
    assert_eq!(
        futex::wait(&word, 4, Some(Instant::now())),
        WaitOutcome::Changed
    );
    let spin = Duration::from_millis(1);
    assert_eq!(
        futex::spin_then_wait(&word, 4, None, spin),
        WaitOutcome::Changed
    );
}

#[test]
fn wait_past_its_deadline_times_out() {
    let word = AtomicU32::new(0);
    let past = Instant::now();
    assert_eq!(futex::wait(&word, 0, Some(past)), WaitOutcome::TimedOut);

    let start = Instant::now();
    let soon = Some(start + Duration::from_millis(20));
    assert_eq!(futex::wait(&word, 0, soon), WaitOutcome::TimedOut);
    assert!(start.elapsed() >= Duration::from_millis(20));

    let soon = Some(Instant::now() + Duration::from_millis(5));
    let spin = Duration::from_millis(1);
    assert_eq!(
        futex::spin_then_wait(&word, 0, soon, spin),
        WaitOutcome::TimedOut
    );
}

#[test]
fn wake_reaches_a_thread_asleep_on_the_word() {
    for spin in [Duration::ZERO, Duration::from_micros(50)] {
        let word = AtomicU32::new(0);
        thread::scope(|scope| {
            let sleeper = scope.spawn(|| loop {
                // Acquire: pairs with the Release store below.
                if word.load(Ordering::Acquire) == 1 {
                    return true;
                }
                if futex::spin_then_wait(&word, 0, watchdog(), spin) == WaitOutcome::TimedOut {
                    return false;
                }
            });
            // Gives the sleeper time to fall asleep; correct either way.
            thread::sleep(Duration::from_millis(20));
            // Release: pairs with the sleeper's Acquire load.
            word.store(1, Ordering::Release);
            futex::wake_all(&word);
            assert!(sleeper.join().unwrap(), "the sleeper was never woken");
        });
    }
}

#[test]
fn wake_with_nobody_asleep_wakes_nobody() {
    let word = AtomicU32::new(0);
    assert_eq!(futex::wake(&word, 1), 0);
    assert_eq!(futex::wake_all(&word), 0);
}

#[test]
fn a_command_is_posted_once_and_taken_once() {
    let word = AtomicU32::new(command::IDLE);
    let step = command::FIRST_COMMAND;
    assert_eq!(command::take(&word), None);
    assert_eq!(command::post(&word, step), Ok(()));
    assert_eq!(command::post(&word, step + 1), Err(step));
    assert_eq!(command::take(&word), Some(step));
    assert_eq!(command::take(&word), None);

    // A sleeping worker's flag does not block a post.
    word.store(command::SLEEPING, Ordering::Relaxed);
    assert_eq!(command::post(&word, step + 1), Ok(()));
    assert_eq!(
        command::wait_command(&word, watchdog(), Duration::ZERO),
        Some(step + 1)
    );
}

#[test]
#[should_panic(expected = "reserved")]
fn a_reserved_value_is_not_a_command() {
    let word = AtomicU32::new(command::IDLE);
    let _ = command::post(&word, command::SLEEPING);
}

#[test]
fn waiting_for_a_command_times_out() {
    let word = AtomicU32::new(command::IDLE);
    let soon = Some(Instant::now() + Duration::from_millis(5));
    assert_eq!(command::wait_command(&word, soon, Duration::ZERO), None);
    // The sleep flag was withdrawn.
    assert_eq!(word.load(Ordering::Relaxed), command::IDLE);
    let soon = Some(Instant::now() + Duration::from_millis(5));
    let spin = Duration::from_millis(1);
    assert_eq!(command::wait_command(&word, soon, spin), None);
}

#[test]
fn the_bell_wakes_a_reader_that_listened_before_the_ring() {
    let bell = AtomicU32::new(0);
    let ticket = bell::listen(&bell);
    assert_eq!(
        bell::wait_bell(&bell, ticket, Some(Instant::now()), Duration::ZERO),
        WaitOutcome::TimedOut
    );
    bell::ring(&bell);
    assert_eq!(
        bell::wait_bell(&bell, ticket, None, Duration::ZERO),
        WaitOutcome::Changed
    );
    let ticket = bell::listen(&bell);
    assert_eq!(ticket, bell::RING);
    let soon = Some(Instant::now() + Duration::from_millis(5));
    assert_eq!(
        bell::wait_bell(&bell, ticket, soon, Duration::ZERO),
        WaitOutcome::TimedOut
    );
}

/// The whole request path, `rounds` times: the parent writes an action and
/// posts a command; the worker takes it, reads the action, publishes a
/// result under the clock and rings the bell; the parent waits on the bell
/// and reads the result.
fn round_trips(rounds: u64, spin: Duration) {
    let action = Area::new(32);
    let result = Area::new(32);
    let clock = AtomicU64::new(0);
    let word = AtomicU32::new(command::IDLE);
    let doorbell = AtomicU32::new(0);
    let (action, result, clock, word, doorbell) = (&action, &result, &clock, &word, &doorbell);
    const STEP: u32 = command::FIRST_COMMAND;
    const STOP: u32 = command::FIRST_COMMAND + 1;

    thread::scope(|scope| {
        let worker = scope.spawn(move || {
            let mut steps = 0u64;
            loop {
                match command::wait_command(word, watchdog(), spin) {
                    Some(STEP) => {}
                    Some(STOP) => return steps,
                    other => panic!("worker got {other:?}"),
                }
                let mut input = [0u8; 32];
                // SAFETY: 32 bytes of a 40-byte area, accessed atomically only.
                unsafe { seqlock::read_bytes(action.at(0), &mut input) };
                steps += 1;
                assert_consistent(steps * 2, &input);
                let start = seqlock::begin_write(clock);
                // SAFETY: as above.
                unsafe { seqlock::write_bytes(result.at(0), &input) };
                seqlock::end_write(clock, start);
                bell::ring(doorbell);
            }
        });

        for round in 1..=rounds {
            // SAFETY: as for the worker.
            unsafe { seqlock::write_bytes(action.at(0), &record(round, 32)) };
            assert_eq!(command::post(word, STEP), Ok(()));
            let mut output = [0u8; 32];
            loop {
                let ticket = bell::listen(doorbell);
                // SAFETY: as for the worker.
                let read = unsafe { seqlock::read_consistent(clock, result.at(0), &mut output, 0) };
                if read == Ok(round * 2) {
                    break;
                }
                let outcome = bell::wait_bell(doorbell, ticket, watchdog(), spin);
                assert_ne!(
                    outcome,
                    WaitOutcome::TimedOut,
                    "lost wake-up in round {round}"
                );
            }
            assert_consistent(round * 2, &output);
        }
        assert_eq!(command::post(word, STOP), Ok(()));
        assert_eq!(worker.join().unwrap(), rounds);
    });
}

#[test]
fn round_trips_that_sleep_lose_no_wake_up() {
    round_trips(2_000, Duration::ZERO);
}

#[test]
fn round_trips_that_spin_first_lose_no_wake_up() {
    round_trips(2_000, Duration::from_micros(20));
}
