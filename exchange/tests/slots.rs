//! The slot layer in one process, with threads standing in for workers:
//! each writer maps the region again from a duplicated descriptor, as a
//! worker process would.
//!
//! Anything that waits runs under a watchdog (60 s) so that a lost wake-up
//! fails the test instead of hanging it; no test asserts how long anything
//! takes. The statistics test replays the script of TorchRL's
//! `test_shared_memory_deadline_batching` (`test/envs/test_special.py`).
#![cfg(not(loom))]

use std::panic::resume_unwind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use exchange::{
    Area, Exchange, ExchangeError, Field, ReadError, Receive, Received, Region, Schema,
    SchemaError, WriteError, FIRST_COMMAND, SLOT_KEY,
};
use tensordict::{DType, NestedKey, NonTensor, Tensor, TensorDict};

/// How long anything may take before it counts as a hang.
const WATCHDOG: Duration = Duration::from_secs(60);

/// Records each writer publishes per slot in the stress tests.
const RECORDS: u64 = 2_000;

/// Slots of the stress tests.
const SLOTS: usize = 8;

/// The command that asks a worker to step.
const STEP: u32 = FIRST_COMMAND;

/// The command that asks a worker to stop.
const STOP: u32 = FIRST_COMMAND + 1;

/// Runs `f` on a thread and waits for it at most [`WATCHDOG`]; a panic in
/// `f` is the test's.
fn watchdog<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, finished) = mpsc::channel();
    let handle = thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let out = f();
            let _ = done.send(());
            out
        })
        .unwrap();
    match finished.recv_timeout(WATCHDOG) {
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => {
            handle.join().unwrap_or_else(|panic| resume_unwind(panic))
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{name} did not finish within {WATCHDOG:?}: a deadlock?")
        }
    }
}

/// A small xorshift generator: the tests need no crate for randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }

    /// A random receive with `min_get` at most `most`.
    fn receive(&mut self, most: usize, allow_no_timeout: bool) -> Receive {
        let min_get = self.range(1, most);
        let mut recv = Receive::new().min_get(min_get);
        if self.next() % 2 == 0 {
            recv = recv.max_get(self.range(min_get, SLOTS + 2));
        }
        let timeouts = [0, 50, 500, 2_000];
        let pick = self.range(0, timeouts.len() - usize::from(!allow_no_timeout));
        if let Some(&micros) = timeouts.get(pick) {
            recv = recv.timeout(Duration::from_micros(micros));
        }
        recv
    }
}

fn schema(batch: &[usize], fields: &[(&str, DType, &[usize])]) -> Schema {
    Schema::new(
        batch,
        fields
            .iter()
            .map(|&(key, dtype, shape)| Field::new(key, dtype, shape).unwrap())
            .collect(),
    )
    .unwrap()
}

fn action_schema() -> Schema {
    schema(&[], &[("action", DType::I64, &[1])])
}

fn cartpole_schema() -> Schema {
    schema(
        &[],
        &[
            ("observation", DType::F32, &[4]),
            ("reward", DType::F32, &[1]),
            ("done", DType::Bool, &[1]),
            ("terminated", DType::Bool, &[1]),
            ("truncated", DType::Bool, &[1]),
        ],
    )
}

fn atari_schema() -> Schema {
    schema(
        &[],
        &[
            ("observation", DType::U8, &[84, 84, 4]),
            ("reward", DType::F32, &[1]),
            ("done", DType::Bool, &[1]),
        ],
    )
}

fn none() -> Schema {
    Schema::empty(&[])
}

/// An exchange of `slots` slots for these schemas, and a second mapping of
/// it, as a worker would open it.
fn pair(input: Schema, result: Schema, next: Schema, slots: usize) -> (Exchange, Exchange) {
    let parent = Exchange::create(
        "rlpool-test-slots",
        input.clone(),
        result.clone(),
        next.clone(),
        slots,
    )
    .unwrap();
    let worker = Exchange::open(parent.try_clone_fd().unwrap(), input, result, next).unwrap();
    (parent, worker)
}

/// What a CartPole-like worker publishes in `slot` for its `seq`-th record.
fn cartpole_record(slot: usize, seq: u64) -> TensorDict {
    let (s, q) = (slot as f32, seq as f32);
    let mut td = TensorDict::new(&[]);
    td.set(
        "observation",
        Tensor::from_vec(&[4], vec![s, q, s * 10_000.0 + q, -q]).unwrap(),
    )
    .unwrap();
    td.set("reward", Tensor::from_vec(&[1], vec![q * 0.5]).unwrap())
        .unwrap();
    td.set("done", Tensor::from_vec(&[1], vec![seq % 2 == 0]).unwrap())
        .unwrap();
    td.set(
        "terminated",
        Tensor::from_vec(&[1], vec![seq % 3 == 0]).unwrap(),
    )
    .unwrap();
    td.set(
        "truncated",
        Tensor::from_vec(&[1], vec![seq % 5 == 0]).unwrap(),
    )
    .unwrap();
    td
}

/// The bytes of an Atari-like observation for `slot`'s `seq`-th record.
fn atari_pixels(slot: usize, seq: u64) -> Vec<u8> {
    (0..84 * 84 * 4)
        .map(|i: usize| (i as u64 * 7 + seq * 13 + slot as u64 * 101) as u8)
        .collect()
}

fn atari_record(slot: usize, seq: u64) -> TensorDict {
    let mut td = TensorDict::new(&[]);
    td.set(
        "observation",
        Tensor::from_vec(&[84, 84, 4], atari_pixels(slot, seq)).unwrap(),
    )
    .unwrap();
    td.set("reward", Tensor::from_vec(&[1], vec![seq as f32]).unwrap())
        .unwrap();
    td.set("done", Tensor::from_vec(&[1], vec![seq % 2 == 1]).unwrap())
        .unwrap();
    td
}

/// Row `j` of every tensor of `batch` equals the tensor of `expected`.
fn assert_row(batch: &TensorDict, j: usize, expected: &TensorDict, what: &str) {
    for key in expected.keys(true, true) {
        let column = batch.tensor(&key).unwrap();
        let n = column.nbytes() / column.shape()[0];
        let got = &column.as_bytes()[j * n..(j + 1) * n];
        assert!(
            got == expected.tensor(&key).unwrap().as_bytes(),
            "{what}: row {j}, key {key} differs from what was written"
        );
    }
}

/// The slot indices a batch carries under `SLOT_KEY`.
fn slot_column(batch: &TensorDict) -> Vec<i64> {
    batch.non_tensor(SLOT_KEY).unwrap().as_int_vec().unwrap()
}

/// Checks a batch from a free-running writer: every result newer than the
/// last taken from its slot, intact for the record its clock counts.
fn check_free_running(got: &Received, last: &mut [u64], record: fn(usize, u64) -> TensorDict) {
    assert!(got.slots().windows(2).all(|w| w[0] < w[1]), "sorted slots");
    let expected_slots: Vec<i64> = got.slots().iter().map(|&s| s as i64).collect();
    assert_eq!(slot_column(got.batch()), expected_slots);
    for (j, (&slot, clock)) in got.slots().iter().zip(got.clocks()).enumerate() {
        assert_eq!(clock % 2, 0, "a published clock is even");
        assert!(
            clock > last[slot],
            "slot {slot}: clock {clock} received again (last taken {})",
            last[slot]
        );
        last[slot] = clock;
        // The writer published records 1, 2, ... in a fresh slot: the
        // record of clock c is c / 2.
        assert_row(
            got.batch(),
            j,
            &record(slot, clock / 2),
            "free-running writer",
        );
        // A view reads the same record, or knows it is stale.
        match got.view(j).read() {
            Ok(row) => {
                assert_eq!(
                    row.non_tensor(SLOT_KEY).unwrap(),
                    &NonTensor::Int(slot as i64)
                );
                let expected = record(slot, clock / 2);
                for key in expected.keys(true, true) {
                    assert_eq!(row.tensor(&key).unwrap(), expected.tensor(&key).unwrap());
                }
            }
            Err(ReadError::Stale { slot: s, seen, .. }) => {
                assert_eq!((s, seen), (slot, clock));
            }
            Err(err) => panic!("view of slot {slot}: {err}"),
        }
    }
}

/// One writer thread publishes `records` records in each of [`SLOTS`]
/// slots as fast as it can while the reader receives with random
/// `min_get`, `max_get` and timeouts: every result is received at most
/// once and intact, and the last record of every slot is received.
fn free_running_writer(
    result: Schema,
    record: fn(usize, u64) -> TensorDict,
    seed: u64,
    records: u64,
) {
    let (mut reader, writer) = pair(none(), result, none(), SLOTS);
    let finished = Arc::new(AtomicBool::new(false));
    let writer_finished = Arc::clone(&finished);
    let writing = thread::spawn(move || {
        for seq in 1..=records {
            for slot in 0..SLOTS {
                writer.publish(slot, &record(slot, seq)).unwrap();
            }
        }
        writer_finished.store(true, Ordering::Release);
    });
    let mut last = vec![0u64; SLOTS];
    let mut rng = Rng(seed);
    let mut batches = 0;
    loop {
        let done = finished.load(Ordering::Acquire);
        match reader.receive(rng.receive(SLOTS, false)) {
            Ok(got) => {
                batches += 1;
                check_free_running(&got, &mut last, record);
            }
            Err(ReadError::Timeout { .. }) => {}
            Err(err) => panic!("receive: {err}"),
        }
        if done {
            break;
        }
    }
    writing.join().unwrap();
    // Drain: whatever is left is the last record of its slot.
    loop {
        match reader.receive(Receive::new().timeout(Duration::ZERO)) {
            Ok(got) => check_free_running(&got, &mut last, record),
            Err(ReadError::Timeout {
                ready: 0, busy: 0, ..
            }) => break,
            Err(err) => panic!("drain: {err}"),
        }
    }
    assert!(batches > 0);
    assert_eq!(
        last,
        vec![2 * records; SLOTS],
        "the last record of every slot"
    );
}

#[test]
fn a_free_running_cartpole_writer_loses_no_last_record_and_tears_nothing() {
    watchdog("cartpole stress", || {
        free_running_writer(
            cartpole_schema(),
            cartpole_record,
            0x9e37_79b9_7f4a_7c15,
            RECORDS,
        )
    });
}

#[test]
fn a_free_running_atari_writer_loses_no_last_record_and_tears_nothing() {
    watchdog("atari stress", || {
        // Fewer records: each is 28 KB made pixel by pixel (seconds of
        // CPU in a debug build, minutes on a loaded machine).
        free_running_writer(
            atari_schema(),
            atari_record,
            0xd1b5_4a32_d192_ed03,
            RECORDS / 8,
        )
    });
}

#[test]
fn requests_and_replies_through_the_slots_lose_nothing() {
    watchdog("request and reply", || {
        let (mut parent, worker) = pair(action_schema(), cartpole_schema(), none(), SLOTS);
        let worker = Arc::new(worker);
        let workers: Vec<_> = (0..SLOTS)
            .map(|slot| {
                let worker = Arc::clone(&worker);
                thread::spawn(move || {
                    let mut input = action_schema().zeros();
                    loop {
                        let deadline = Instant::now() + WATCHDOG;
                        match worker.wait_command(slot, Some(deadline)).unwrap() {
                            Some(STEP) => {
                                worker.read_input(slot, &mut input).unwrap();
                                let round = input.tensor("action").unwrap().item::<i64>().unwrap();
                                worker
                                    .publish(slot, &cartpole_record(slot, round as u64))
                                    .unwrap();
                            }
                            Some(STOP) => return,
                            other => panic!("worker {slot}: command {other:?}"),
                        }
                    }
                })
            })
            .collect();
        let send = |parent: &Exchange, slot: usize, round: u64| {
            let mut action = TensorDict::new(&[]);
            action
                .set(
                    "action",
                    Tensor::from_vec(&[1], vec![round as i64]).unwrap(),
                )
                .unwrap();
            parent.write_input(slot, &action).unwrap();
            parent.post(slot, STEP).unwrap();
        };
        let mut round = [1u64; SLOTS];
        for slot in 0..SLOTS {
            send(&parent, slot, 1);
        }
        let mut in_flight = SLOTS;
        let mut received = 0;
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        while in_flight > 0 {
            let recv = rng.receive(in_flight, true);
            let got = match parent.receive(recv) {
                Ok(got) => got,
                Err(ReadError::Timeout { ready, .. }) => {
                    assert!(ready < recv.min_get);
                    continue;
                }
                Err(err) => panic!("receive: {err}"),
            };
            assert!(got.len() >= recv.min_get && got.len() <= recv.max_get.unwrap_or(SLOTS));
            for (j, (&slot, clock)) in got.slots().iter().zip(got.clocks()).enumerate() {
                // Exactly the reply to the round sent: one publication per
                // round.
                assert_eq!(clock, 2 * round[slot], "slot {slot}");
                assert_row(got.batch(), j, &cartpole_record(slot, round[slot]), "reply");
                received += 1;
                if round[slot] == RECORDS {
                    in_flight -= 1;
                } else {
                    round[slot] += 1;
                    send(&parent, slot, round[slot]);
                }
            }
        }
        for slot in 0..SLOTS {
            parent.post(slot, STOP).unwrap();
        }
        for handle in workers {
            handle.join().unwrap();
        }
        assert_eq!(received, SLOTS as u64 * RECORDS);
        let stats = parent.stats(false);
        assert_eq!(stats.items, SLOTS as u64 * RECORDS);
        assert!((0.0..=1.0).contains(&stats.consumer_busy_fraction));
        assert!(stats.batch_fill_ratio > 0.0 && stats.batch_fill_ratio <= 1.0);
        // Nothing is left.
        assert!(matches!(
            parent.receive(Receive::new().timeout(Duration::ZERO)),
            Err(ReadError::Timeout { ready: 0, .. })
        ));
    });
}

#[test]
fn min_get_max_get_and_the_deadline() {
    watchdog("min max deadline", || {
        let (mut parent, worker) = pair(none(), cartpole_schema(), none(), 4);
        // Nothing ready: a poll times out.
        assert_eq!(
            parent
                .receive(Receive::new().timeout(Duration::ZERO))
                .unwrap_err(),
            ReadError::Timeout {
                timeout: Duration::ZERO,
                ready: 0,
                min_get: 1,
                busy: 0
            }
        );
        // Three published, oldest first: max_get takes the two oldest.
        for slot in [3, 0, 2] {
            worker.publish(slot, &cartpole_record(slot, 1)).unwrap();
        }
        let got = parent.receive(Receive::new().max_get(2)).unwrap();
        assert_eq!(got.slots(), &[0, 3]);
        assert_eq!(got.batch().batch_size(), &[2]);
        assert_eq!(got.batch().tensor("observation").unwrap().shape(), &[2, 4]);
        assert_row(got.batch(), 0, &cartpole_record(0, 1), "max_get");
        assert_row(got.batch(), 1, &cartpole_record(3, 1), "max_get");
        // The third is still there.
        let got = parent.receive(Receive::new()).unwrap();
        assert_eq!(got.slots(), &[2]);
        // With a timeout and no max_get, the call gathers until the deadline
        // and returns what is ready.
        worker.publish(1, &cartpole_record(1, 2)).unwrap();
        let got = parent
            .receive(Receive::new().timeout(Duration::from_millis(5)))
            .unwrap();
        assert_eq!(got.slots(), &[1]);
        // With a timeout, the call returns at once when every slot is
        // ready, or when max_get are.
        for slot in 0..4 {
            worker.publish(slot, &cartpole_record(slot, 3)).unwrap();
        }
        let got = parent.receive(Receive::new().timeout(WATCHDOG)).unwrap();
        assert_eq!(got.slots(), &[0, 1, 2, 3]);
        for slot in [1, 2] {
            worker.publish(slot, &cartpole_record(slot, 4)).unwrap();
        }
        let got = parent
            .receive(Receive::new().max_get(2).timeout(WATCHDOG))
            .unwrap();
        assert_eq!(got.slots(), &[1, 2]);
    });
}

#[test]
fn a_timeout_before_min_get_loses_nothing() {
    watchdog("timeout loses nothing", || {
        let (mut parent, worker) = pair(none(), cartpole_schema(), none(), 4);
        worker.publish(1, &cartpole_record(1, 1)).unwrap();
        worker.publish(2, &cartpole_record(2, 1)).unwrap();
        let err = parent
            .receive(Receive::new().min_get(3).timeout(Duration::from_millis(2)))
            .unwrap_err();
        assert_eq!(
            err,
            ReadError::Timeout {
                timeout: Duration::from_millis(2),
                ready: 2,
                min_get: 3,
                busy: 0
            }
        );
        assert!(err.to_string().contains("nothing was taken"), "{err}");
        let got = parent
            .receive(Receive::new().min_get(2).timeout(Duration::ZERO))
            .unwrap();
        assert_eq!(got.slots(), &[1, 2]);
        assert_row(got.batch(), 1, &cartpole_record(2, 1), "after a timeout");
        // A per-slot receive that times out loses nothing either.
        assert_eq!(
            parent.receive_one(0, Some(Duration::ZERO)).unwrap_err(),
            ReadError::SlotTimeout {
                slot: 0,
                timeout: Duration::ZERO
            }
        );
        let stats = parent.stats(false);
        assert_eq!((stats.batches, stats.items), (1, 2));
    });
}

#[test]
fn a_receive_without_timeout_sleeps_until_min_get_are_published() {
    watchdog("sleeping receive", || {
        let (mut parent, worker) = pair(none(), cartpole_schema(), none(), 4);
        let writer = thread::spawn(move || {
            for slot in [2, 0, 3] {
                thread::sleep(Duration::from_millis(2));
                worker.publish(slot, &cartpole_record(slot, 1)).unwrap();
            }
        });
        let got = parent.receive(Receive::new().min_get(3)).unwrap();
        assert_eq!(got.slots(), &[0, 2, 3]);
        writer.join().unwrap();
    });
}

#[test]
fn bad_receive_arguments_are_errors() {
    let (mut parent, _worker) = pair(none(), cartpole_schema(), none(), 4);
    assert_eq!(
        parent.receive(Receive::new().min_get(0)).unwrap_err(),
        ReadError::MinGet { min_get: 0 }
    );
    let err = parent
        .receive(Receive::new().min_get(3).max_get(2))
        .unwrap_err();
    assert_eq!(
        err,
        ReadError::MaxGet {
            min_get: 3,
            max_get: 2
        }
    );
    assert!(err.to_string().contains("max_get"), "{err}");
    assert_eq!(
        parent.receive(Receive::new().min_get(5)).unwrap_err(),
        ReadError::MinGetAboveSlots {
            min_get: 5,
            slots: 4
        }
    );
    assert_eq!(
        parent.receive_one(4, None).unwrap_err(),
        ReadError::SlotOutOfRange { slot: 4, slots: 4 }
    );
}

#[test]
fn a_per_slot_receive_takes_only_its_slot() {
    watchdog("per-slot receive", || {
        let (mut parent, worker) = pair(none(), cartpole_schema(), none(), 3);
        worker.publish(0, &cartpole_record(0, 1)).unwrap();
        let writer = thread::spawn(move || {
            thread::sleep(Duration::from_millis(2));
            worker.publish(2, &cartpole_record(2, 1)).unwrap();
            worker
        });
        let row = parent.receive_one(2, None).unwrap();
        assert_eq!(row.batch_size(), &[] as &[usize]);
        assert_eq!(row.non_tensor(SLOT_KEY).unwrap(), &NonTensor::Int(2));
        assert_eq!(
            row.tensor("observation").unwrap(),
            cartpole_record(2, 1).tensor("observation").unwrap()
        );
        let _worker = writer.join().unwrap();
        // Slot 0's result is still there; slot 2's was taken.
        let got = parent
            .receive(Receive::new().timeout(Duration::ZERO))
            .unwrap();
        assert_eq!(got.slots(), &[0]);
        assert!(parent.receive_one(2, Some(Duration::ZERO)).is_err());
    });
}

#[test]
fn a_stale_lazy_view_is_an_error() {
    let (mut parent, worker) = pair(none(), cartpole_schema(), none(), 2);
    worker.publish(0, &cartpole_record(0, 1)).unwrap();
    worker.publish(1, &cartpole_record(1, 1)).unwrap();
    let got = parent.receive(Receive::new().min_get(2)).unwrap();
    let views: Vec<_> = got.views().collect();
    assert_eq!(views.len(), 2);
    assert_eq!(views[1].read().unwrap(), got.row(1));
    // Slot 0 is written again: its view is stale, slot 1's is not.
    worker.publish(0, &cartpole_record(0, 2)).unwrap();
    assert!(views[0].is_stale());
    let err = views[0].read().unwrap_err();
    assert_eq!(
        err,
        ReadError::Stale {
            slot: 0,
            seen: 2,
            now: 4
        }
    );
    assert!(err.to_string().contains("stale"), "{err}");
    assert_eq!(views[1].read().unwrap(), got.row(1));
    // The batch itself is a copy: it still holds the first record.
    assert_row(
        got.batch(),
        0,
        &cartpole_record(0, 1),
        "batch after a rewrite",
    );
}

#[test]
fn inputs_travel_with_their_keys_and_wrong_ones_are_typed_errors() {
    let input = schema(
        &[],
        &[("action", DType::I64, &[1]), ("mask", DType::Bool, &[2])],
    );
    let (parent, worker) = pair(input.clone(), cartpole_schema(), none(), 2);
    let mut action = TensorDict::new(&[]);
    action
        .set("action", Tensor::from_vec(&[1], vec![7i64]).unwrap())
        .unwrap();

    // A key outside the schema: named, with the queue exchange suggested.
    let mut extra = action.clone();
    extra.set("goal", Tensor::zeros(DType::F32, &[2])).unwrap();
    let err = parent.write_input(0, &extra).unwrap_err();
    assert_eq!(
        err,
        WriteError::Schema {
            slot: 0,
            area: Area::Input,
            source: SchemaError::UnknownKeys {
                keys: vec![NestedKey::from("goal")]
            }
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("\"goal\"") && message.contains("queue exchange"),
        "{message}"
    );

    // A dtype, a shape: named by key.
    let mut wrong = TensorDict::new(&[]);
    wrong
        .set("action", Tensor::from_vec(&[1], vec![7i32]).unwrap())
        .unwrap();
    let err = parent.write_input(1, &wrong).unwrap_err();
    assert!(matches!(
        &err,
        WriteError::Schema {
            slot: 1,
            source: SchemaError::DType {
                dtype: DType::I32,
                expected: DType::I64,
                ..
            },
            ..
        }
    ));
    assert!(
        err.to_string().contains("i32") && err.to_string().contains("i64"),
        "{err}"
    );
    let mut wrong = TensorDict::new(&[]);
    wrong
        .set("action", Tensor::zeros(DType::I64, &[2]))
        .unwrap();
    let err = parent.write_input(1, &wrong).unwrap_err();
    assert!(matches!(
        &err,
        WriteError::Schema {
            source: SchemaError::Shape { .. },
            ..
        }
    ));
    assert!(
        err.to_string().contains("[2]") && err.to_string().contains("[1]"),
        "{err}"
    );

    // A slot out of range.
    assert_eq!(
        parent.write_input(2, &action).unwrap_err(),
        WriteError::SlotOutOfRange { slot: 2, slots: 2 }
    );

    // A good write: only the keys given travel; the others keep their
    // values in the worker's buffer.
    parent.write_input(0, &action).unwrap();
    parent.post(0, STEP).unwrap();
    // A command not yet taken: neither a second one nor a new input.
    assert_eq!(
        parent.post(0, STEP).unwrap_err(),
        WriteError::CommandPending {
            slot: 0,
            pending: STEP
        }
    );
    assert!(matches!(
        parent.write_input(0, &action),
        Err(WriteError::CommandPending { .. })
    ));
    assert_eq!(
        parent.post(1, 1).unwrap_err(),
        WriteError::ReservedCommand {
            command: 1,
            first: FIRST_COMMAND
        }
    );
    let mut buffer = input.zeros();
    buffer
        .set("mask", Tensor::from_vec(&[2], vec![true, false]).unwrap())
        .unwrap();
    assert_eq!(
        worker.wait_command(0, Some(Instant::now())).unwrap(),
        Some(STEP)
    );
    worker.read_input(0, &mut buffer).unwrap();
    assert_eq!(
        buffer.tensor("action").unwrap().to_vec::<i64>().unwrap(),
        [7]
    );
    assert_eq!(
        buffer.tensor("mask").unwrap().to_vec::<bool>().unwrap(),
        [true, false]
    );
    // Nothing more is pending.
    assert_eq!(worker.wait_command(0, Some(Instant::now())).unwrap(), None);
    // A buffer that is not shaped like the schema is an error.
    let err = worker.read_input(0, &mut TensorDict::new(&[])).unwrap_err();
    assert!(
        matches!(
            err,
            ReadError::Schema {
                slot: 0,
                area: Area::Input,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn open_checks_the_header_against_the_schemas() {
    let parent = Exchange::create(
        "rlpool-test-open",
        action_schema(),
        cartpole_schema(),
        none(),
        4,
    )
    .unwrap();
    let fd = || parent.try_clone_fd().unwrap();
    assert_eq!(
        Exchange::open(fd(), action_schema(), cartpole_schema(), none())
            .unwrap()
            .slots(),
        4
    );
    let f64_obs = schema(&[], &[("observation", DType::F64, &[4])]);
    let cases = [
        (f64_obs.clone(), cartpole_schema(), none(), Area::Input),
        (action_schema(), f64_obs.clone(), none(), Area::Result),
        (action_schema(), cartpole_schema(), f64_obs, Area::Next),
    ];
    for (input, result, next, area) in cases {
        let err = Exchange::open(fd(), input, result, next).unwrap_err();
        assert_eq!(err, ExchangeError::SchemaMismatch { area });
        assert!(
            err.to_string()
                .contains(&format!("the {area} schema differs")),
            "{err}"
        );
    }
    // A memfd that no exchange was made in.
    let blank = Region::create("rlpool-test-blank", 4096).unwrap();
    let err = Exchange::open(
        blank.try_clone_fd().unwrap(),
        action_schema(),
        cartpole_schema(),
        none(),
    )
    .unwrap_err();
    assert!(
        matches!(err, ExchangeError::BadMagic { found: 0, .. }),
        "{err}"
    );
    let tiny = Region::create("rlpool-test-tiny", 16).unwrap();
    let err = Exchange::open(
        tiny.try_clone_fd().unwrap(),
        action_schema(),
        cartpole_schema(),
        none(),
    )
    .unwrap_err();
    assert!(
        matches!(err, ExchangeError::TooSmall { len: 16, .. }),
        "{err}"
    );
}

#[test]
fn a_schema_with_the_slot_key_is_refused() {
    let err = Exchange::create(
        "rlpool-test-reserved",
        none(),
        schema(&[], &[(SLOT_KEY, DType::I64, &[])]),
        none(),
        1,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            ExchangeError::ReservedKey {
                area: Area::Result,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn pairs_nested_keys_batch_sizes_and_partial_keys() {
    // An env with batch size [2]: a step's result has ("next", ..) keys, a
    // reset's has the root keys only; the next root travels beside it.
    let root = schema(
        &[2],
        &[
            ("observation", DType::F32, &[2, 3]),
            ("done", DType::Bool, &[2, 1]),
        ],
    );
    let mut fields = root.fields().to_vec();
    fields.push(Field::new(("next", "reward"), DType::F32, &[2, 1]).unwrap());
    let step = Schema::new(&[2], fields).unwrap();
    let (mut parent, worker) = pair(none(), step, root.clone(), 3);
    let mut reset = TensorDict::new(&[2]);
    reset
        .set("observation", Tensor::full(&[2, 3], 1.0f32))
        .unwrap();
    reset.set("done", Tensor::full(&[2, 1], false)).unwrap();
    let mut stepped = reset.clone();
    stepped
        .set(("next", "reward"), Tensor::full(&[2, 1], 0.5f32))
        .unwrap();
    let mut next_root = reset.clone();
    next_root
        .set("observation", Tensor::full(&[2, 3], 2.0f32))
        .unwrap();
    worker.publish(0, &reset).unwrap();
    worker.publish_pair(2, &stepped, &next_root).unwrap();

    let got = parent.receive(Receive::new().min_get(2)).unwrap();
    assert_eq!(got.slots(), &[0, 2]);
    let batch = got.batch();
    assert_eq!(batch.batch_size(), &[2, 2]);
    assert_eq!(
        batch.tensor(("next", "reward")).unwrap().shape(),
        &[2, 2, 1]
    );
    assert_eq!(
        batch.non_tensor(SLOT_KEY).unwrap().shape().as_slice(),
        &[2, 2],
        "the slot indices expand to the batch size"
    );
    // Row by row, exactly the keys each published.
    assert!(!got.row(0).contains(("next", "reward")));
    assert!(got.row(1).contains(("next", "reward")));
    let next = got.next().unwrap();
    assert_eq!(next.batch_size(), &[2, 2]);
    assert_eq!(
        next.tensor("observation").unwrap().to_vec::<f32>().unwrap()[6..],
        [2.0; 6]
    );
    // Per slot, the pair.
    worker.publish_pair(1, &stepped, &next_root).unwrap();
    let (result, next) = parent.receive_one_pair(1, None).unwrap();
    assert_eq!(
        result.tensor(("next", "reward")).unwrap(),
        stepped.tensor(("next", "reward")).unwrap()
    );
    assert_eq!(
        next.tensor("observation").unwrap(),
        next_root.tensor("observation").unwrap()
    );
    assert_eq!(next.non_tensor(SLOT_KEY).unwrap().shape().as_slice(), &[2]);
}

#[test]
fn statistics_of_torchrl_deadline_batching_script() {
    watchdog("deadline batching stats", || {
        // TorchRL's test_shared_memory_deadline_batching: four envs reset;
        // a poll with max_get 4 takes the one ready, then a receive of
        // exactly three takes the rest; resets do not track actions.
        let (mut parent, worker) = pair(action_schema(), cartpole_schema(), none(), 4);
        worker.publish(1, &cartpole_record(1, 1)).unwrap();
        let reset = Receive::new().track_action(false);
        let first = parent
            .receive(reset.min_get(1).max_get(4).timeout(Duration::ZERO))
            .unwrap();
        for slot in [0, 2, 3] {
            worker.publish(slot, &cartpole_record(slot, 1)).unwrap();
        }
        let remaining = parent
            .receive(
                reset
                    .min_get(3)
                    .max_get(3)
                    .timeout(Duration::from_millis(100)),
            )
            .unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(remaining.len(), 3);
        let stats = parent.stats(true);
        assert_eq!(stats.batches, 2);
        assert_eq!(stats.items, 4);
        assert_eq!(stats.avg_batch_size, 2.0);
        assert!((stats.batch_fill_ratio - 4.0 / 7.0).abs() < 1e-12);
        assert_eq!(stats.partial_batch_fraction, 0.5);
        assert!(stats.avg_observation_to_batch >= Duration::ZERO);
        assert_eq!(stats.consumer_busy_fraction, 0.0);
        assert_eq!(parent.stats(false).batches, 0);
    });
}

#[test]
fn statistics_track_the_time_until_the_actions_are_sent() {
    let (mut parent, worker) = pair(action_schema(), cartpole_schema(), none(), 2);
    worker.publish(0, &cartpole_record(0, 1)).unwrap();
    worker.publish(1, &cartpole_record(1, 1)).unwrap();
    let got = parent.receive(Receive::new().min_get(2)).unwrap();
    assert_eq!(got.len(), 2);
    // Still waiting for the actions: the consumer is busy.
    let busy = parent.stats(false);
    assert_eq!(busy.consumer_busy_fraction, 1.0);
    assert_eq!(busy.avg_batch_to_action, Duration::ZERO);
    let mut action = TensorDict::new(&[]);
    action
        .set("action", Tensor::from_vec(&[1], vec![0i64]).unwrap())
        .unwrap();
    for slot in 0..2 {
        parent.write_input(slot, &action).unwrap();
        parent.post(slot, STEP).unwrap();
    }
    let stats = parent.stats(false);
    assert!((0.0..=1.0).contains(&stats.consumer_busy_fraction));
    assert_eq!(stats.batch_fill_ratio, 1.0);
    assert_eq!(stats.partial_batch_fraction, 0.0);

    // A send time the parent read itself (`post_at`, once for a whole
    // send) is the one the statistics count: a second later than now.
    for slot in 0..2 {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        assert_eq!(
            worker.wait_command(slot, Some(deadline)).unwrap(),
            Some(STEP)
        );
    }
    worker.publish(0, &cartpole_record(0, 2)).unwrap();
    worker.publish(1, &cartpole_record(1, 2)).unwrap();
    assert_eq!(parent.receive(Receive::new().min_get(2)).unwrap().len(), 2);
    parent.stats(true);
    let later = exchange::now_ns() + 1_000_000_000;
    for slot in 0..2 {
        parent.write_input(slot, &action).unwrap();
        parent.post_at(slot, STEP, later).unwrap();
    }
    let dwell = parent.stats(false).avg_batch_to_action;
    assert!(
        (Duration::from_millis(999)..Duration::from_secs(2)).contains(&dwell),
        "{dwell:?}"
    );
}

/// The parent API of a reader that keeps its own account (the process
/// pool's): `read_into` copies a newer result into the caller's buffers
/// (keys not published keep their values), returns `None` when nothing
/// newer is there, refuses buffers that do not fit, and records nothing
/// until `record_received`.
#[test]
fn read_into_copies_newer_results_into_the_callers_buffers() {
    let (parent, worker) = pair(action_schema(), cartpole_schema(), cartpole_schema(), 2);
    let mut result = cartpole_schema().zeros();
    let mut next = cartpole_schema().zeros();
    assert_eq!(
        parent.read_into(1, 0, &mut result, &mut next).unwrap(),
        None
    );
    worker
        .publish_quiet(1, &cartpole_record(1, 3), Some(&cartpole_record(1, 4)))
        .unwrap();
    let read = parent
        .read_into(1, 0, &mut result, &mut next)
        .unwrap()
        .expect("a result newer than clock 0");
    assert_eq!(read.result_mask.count_ones(), 5);
    assert_eq!(result, cartpole_record(1, 3));
    assert_eq!(next, cartpole_record(1, 4));
    // Nothing newer than what was read.
    assert_eq!(
        parent
            .read_into(1, read.clock, &mut result, &mut next)
            .unwrap(),
        None
    );
    // A result without a next area: next keeps its values.
    worker.publish(1, &cartpole_record(1, 5)).unwrap();
    let again = parent
        .read_into(1, read.clock, &mut result, &mut next)
        .unwrap()
        .unwrap();
    assert!(again.clock > read.clock);
    assert_eq!(again.next_mask, 0);
    assert_eq!(result, cartpole_record(1, 5));
    assert_eq!(next, cartpole_record(1, 4));
    // Buffers that do not fit the schemas, and slots out of range.
    let mut wrong = action_schema().zeros();
    let err = parent.read_into(1, 0, &mut wrong, &mut next).unwrap_err();
    assert!(matches!(err, ReadError::Schema { slot: 1, .. }), "{err}");
    let err = parent.read_into(9, 0, &mut result, &mut next).unwrap_err();
    assert!(
        matches!(err, ReadError::SlotOutOfRange { slot: 9, slots: 2 }),
        "{err}"
    );
    // Nothing was counted; a recorded batch is.
    assert_eq!(parent.stats(false).batches, 0);
    parent.record_received(&[(1, again.published_ns)], Some(2), false);
    let stats = parent.stats(false);
    assert_eq!((stats.batches, stats.items), (1, 1));
    assert_eq!(stats.partial_batch_fraction, 1.0);
    // A publish time the writer read itself is the one readers see; one the
    // exchange reads is of the same clock.
    let before = exchange::now_ns();
    assert!(again.published_ns <= before);
    worker
        .publish_quiet_at(1, &cartpole_record(1, 6), None, before + 7)
        .unwrap();
    let at = parent
        .read_into(1, again.clock, &mut result, &mut next)
        .unwrap()
        .expect("newer");
    assert_eq!(at.published_ns, before + 7);
    assert_eq!(result, cartpole_record(1, 6));
}

/// `read_rows` reads a newer result straight into its row of batch
/// columns (made by `zeros_rows`, resolved once by `columns`): the other
/// rows and the fields not published keep their values; nothing newer is
/// `None`; columns of the wrong area, a row past the last, a batch that is
/// not laid out as the area, and a slot out of range are errors naming
/// what is wrong.
#[test]
fn read_rows_copies_results_into_their_rows_of_a_batch() {
    let (parent, worker) = pair(action_schema(), cartpole_schema(), cartpole_schema(), 3);
    let mut results = parent.zeros_rows(Area::Result, 3).unwrap();
    let mut nexts = parent.zeros_rows(Area::Next, 3).unwrap();
    assert_eq!(results.batch_size(), &[3]);
    let rows = |records: &[TensorDict]| TensorDict::stack(records).unwrap();
    let zero = cartpole_schema().zeros();
    let mut other_nexts = parent.zeros_rows(Area::Next, 3).unwrap();
    let mut clocks = [0u64; 3];
    {
        let mut result = parent.columns(Area::Result, &mut results).unwrap();
        let mut next = parent.columns(Area::Next, &mut nexts).unwrap();
        assert_eq!((result.area(), result.rows()), (Area::Result, 3));
        assert_eq!(
            parent.read_rows(2, 0, 2, &mut result, &mut next).unwrap(),
            None
        );
        assert!(!parent.published_after(2, 0));
        worker
            .publish_quiet(2, &cartpole_record(2, 7), Some(&cartpole_record(2, 8)))
            .unwrap();
        worker.publish(0, &cartpole_record(0, 1)).unwrap();
        for slot in [2, 0] {
            assert!(parent.published_after(slot, 0));
            let read = parent
                .read_rows(slot, 0, slot, &mut result, &mut next)
                .unwrap()
                .expect("a newer result");
            clocks[slot] = read.clock;
        }
        assert_eq!(
            parent
                .read_rows(2, clocks[2], 2, &mut result, &mut next)
                .unwrap(),
            None
        );
        // Errors.
        let err = parent
            .read_rows(
                1,
                0,
                1,
                &mut next_as_result(&parent, &mut other_nexts),
                &mut next,
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "result area: cannot read into these columns: given the columns of the next area"
        );
        let err = parent
            .read_rows(1, 0, 3, &mut result, &mut next)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "result area: cannot read into these columns: row 3 of 3 rows"
        );
        let err = parent
            .read_rows(7, 0, 0, &mut result, &mut next)
            .unwrap_err();
        assert!(
            matches!(err, ReadError::SlotOutOfRange { slot: 7, slots: 3 }),
            "{err}"
        );
    }
    assert_eq!(
        results,
        rows(&[cartpole_record(0, 1), zero.clone(), cartpole_record(2, 7)])
    );
    // Slot 0 published no next: its row keeps its zeros.
    assert_eq!(
        nexts,
        rows(&[zero.clone(), zero.clone(), cartpole_record(2, 8)])
    );
    // Columns resolved by another exchange (the worker's mapping).
    {
        let mut theirs_results = worker.zeros_rows(Area::Result, 3).unwrap();
        let mut theirs_nexts = worker.zeros_rows(Area::Next, 3).unwrap();
        let mut theirs = worker.columns(Area::Result, &mut theirs_results).unwrap();
        let mut next = worker.columns(Area::Next, &mut theirs_nexts).unwrap();
        let err = parent
            .read_rows(0, 0, 0, &mut theirs, &mut next)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "result area: cannot read into these columns: resolved by another exchange"
        );
    }
    // Rows whose size overflows.
    let err = parent.zeros_rows(Area::Result, usize::MAX).unwrap_err();
    assert!(
        matches!(
            err,
            ReadError::Columns {
                area: Area::Result,
                ..
            }
        ),
        "{err}"
    );
    // A batch that is not laid out as the area.
    let mut wrong = parent.zeros_rows(Area::Input, 3).unwrap();
    let err = parent.columns(Area::Result, &mut wrong).unwrap_err();
    assert_eq!(
        err.to_string(),
        "result area: cannot read into these columns: 1 tensors for the 5 fields of the schema"
    );
    let mut wrong = cartpole_schema().zeros();
    let err = parent.columns(Area::Result, &mut wrong).unwrap_err();
    assert!(
        matches!(&err, ReadError::Columns { area: Area::Result, reason } if reason.starts_with("key \"done\": a bool tensor of shape [1], not 0 rows")),
        "{err}"
    );
}

/// The columns of the next area (to pass where the result area's go).
fn next_as_result<'a>(parent: &Exchange, nexts: &'a mut TensorDict) -> exchange::Columns<'a> {
    parent.columns(Area::Next, nexts).unwrap()
}

/// Commands taken by several threads racing: each exactly once; a quiet
/// publication rings nobody until `ring`; `pending_command` peeks.
#[test]
fn racing_takers_get_each_command_once_and_quiet_publications_ring_on_demand() {
    let (parent, worker) = pair(action_schema(), cartpole_schema(), none(), 1);
    let worker = std::sync::Arc::new(worker);
    for round in 0..200u32 {
        parent.post(0, STEP + round % 2).unwrap();
        assert_eq!(parent.pending_command(0), Some(STEP + round % 2));
        let takers: Vec<_> = (0..3)
            .map(|_| {
                let w = std::sync::Arc::clone(&worker);
                std::thread::spawn(move || w.try_take_command(0).unwrap())
            })
            .collect();
        let taken: Vec<u32> = takers
            .into_iter()
            .filter_map(|t| t.join().unwrap())
            .collect();
        assert_eq!(taken, [STEP + round % 2], "round {round}");
        assert_eq!(parent.pending_command(0), None);
    }
    let ticket = parent.listen();
    worker
        .publish_quiet(0, &cartpole_record(0, 1), None)
        .unwrap();
    assert!(!parent.wait_bell_spinning(ticket, Some(Instant::now()), Duration::ZERO));
    worker.ring();
    assert!(parent.wait_bell(ticket, Some(Instant::now() + Duration::from_secs(10))));
}

/// `input_rows` resolves a batch of inputs once (other keys ignored) and
/// `write_input_row` writes one row of it into a slot, as `write_input`
/// writes one input; a column of the wrong dtype, a row past the last and
/// a pending command are errors.
#[test]
fn input_rows_write_one_row_of_a_batch_into_a_slot() {
    let (parent, worker) = pair(action_schema(), cartpole_schema(), none(), 2);
    let mut batch = TensorDict::new(&[3]);
    batch
        .set(
            "action",
            Tensor::from_vec(&[3, 1], vec![5i64, 6, 7]).unwrap(),
        )
        .unwrap();
    batch
        .set("observation", Tensor::zeros(DType::F32, &[3, 4]))
        .unwrap();
    let rows = parent.input_rows(&batch).unwrap();
    assert_eq!(rows.rows(), 3);
    assert!(rows.is_complete());
    parent.write_input_row(1, &rows, 2).unwrap();
    parent.post(1, FIRST_COMMAND).unwrap();
    assert_eq!(worker.try_take_command(1).unwrap(), Some(FIRST_COMMAND));
    let mut input = action_schema().zeros();
    worker.read_input(1, &mut input).unwrap();
    assert_eq!(
        input.tensor("action").unwrap().to_vec::<i64>().unwrap(),
        vec![7]
    );
    // Errors.
    let err = parent.write_input_row(0, &rows, 3).unwrap_err();
    assert_eq!(err.to_string(), "input rows: row 3 of 3 rows");
    parent.post(0, FIRST_COMMAND).unwrap();
    let err = parent.write_input_row(0, &rows, 0).unwrap_err();
    assert!(
        matches!(err, WriteError::CommandPending { slot: 0, .. }),
        "{err}"
    );
    let mut wrong = TensorDict::new(&[3]);
    wrong
        .set("action", Tensor::zeros(DType::F32, &[3, 1]))
        .unwrap();
    let err = parent.input_rows(&wrong).unwrap_err();
    assert_eq!(
        err.to_string(),
        "input rows: key \"action\": a f32 tensor of shape [3, 1], not 3 rows of i64 [1]"
    );
    // Rows resolved by another exchange (the worker's mapping).
    let theirs = worker.input_rows(&batch).unwrap();
    let err = parent.write_input_row(1, &theirs, 0).unwrap_err();
    assert_eq!(err.to_string(), "input rows: resolved by another exchange");
    // A batch without the input's keys: nothing to write, not complete.
    let empty = TensorDict::new(&[3]);
    assert!(!parent.input_rows(&empty).unwrap().is_complete());
}

/// A length-prefixed field crosses as its header and the bytes it counts:
/// a long value, then a short one (what follows the short one's bytes is
/// unspecified), then an empty one; a header that counts past the field
/// crosses the whole field.
#[test]
fn a_sized_field_crosses_its_counted_bytes() {
    let keys = [NestedKey::from("info")];
    let result = Schema::new(
        &[],
        vec![
            Field::new("info", DType::U8, &[12]).unwrap(),
            Field::new("observation", DType::F32, &[1]).unwrap(),
        ],
    )
    .unwrap()
    .with_sized(&keys);
    let mut parent = Exchange::create(
        "sized",
        Schema::empty(&[]),
        result.clone(),
        Schema::empty(&[]),
        1,
    )
    .unwrap();
    let worker = Exchange::open(
        parent.try_clone_fd().unwrap(),
        Schema::empty(&[]),
        result,
        Schema::empty(&[]),
    )
    .unwrap();
    let blob = |len: u32, fill: u8| {
        let mut bytes = len.to_le_bytes().to_vec();
        bytes.extend(std::iter::repeat_n(fill, 8));
        let mut td = TensorDict::new(&[]);
        td.set("info", Tensor::from_vec(&[12], bytes).unwrap())
            .unwrap();
        td.set(
            "observation",
            Tensor::from_vec(&[1], vec![f32::from(fill)]).unwrap(),
        )
        .unwrap();
        td
    };
    let mut exchange = |td: &TensorDict| -> Vec<u8> {
        worker.publish(0, td).unwrap();
        let received = parent.receive(Receive::new()).unwrap();
        received
            .batch()
            .tensor("info")
            .unwrap()
            .to_vec::<u8>()
            .unwrap()
    };
    let full = exchange(&blob(8, 7));
    assert_eq!(full, [8, 0, 0, 0, 7, 7, 7, 7, 7, 7, 7, 7]);
    let short = exchange(&blob(3, 9));
    // The receive's batch is new: zeros past the count show that only the
    // counted bytes were read (the slot still holds the long value's).
    assert_eq!(short, [3, 0, 0, 0, 9, 9, 9, 0, 0, 0, 0, 0]);
    let empty = exchange(&blob(0, 5));
    assert_eq!(empty, [0; 12]);
    // Counting past the field: all of it.
    let past = exchange(&blob(u32::MAX, 4));
    assert_eq!(past, [255, 255, 255, 255, 4, 4, 4, 4, 4, 4, 4, 4]);
}
