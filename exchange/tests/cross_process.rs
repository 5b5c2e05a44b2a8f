//! The exchange between two real processes: the child is this test binary,
//! run again with `--exact child_process --nocapture` and
//! [`CHILD`] set to `<fd>:<schema>:<mode>` (the region's descriptor, made
//! inheritable). Without it, `child_process` is a test that passes at once.
//!
//! Anything that waits runs under a watchdog (60 s); no test asserts how
//! long anything takes.
#![cfg(not(loom))]

use std::collections::BTreeSet;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::panic::resume_unwind;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use exchange::{Exchange, Field, ReadError, Receive, Schema, FIRST_COMMAND, SLOT_KEY};
use tensordict::{DType, Tensor, TensorDict};

/// The environment variable that makes `child_process` a child.
const CHILD: &str = "RLPOOL_CROSS_PROCESS_CHILD";

/// How long anything may take before it counts as a hang.
const WATCHDOG: Duration = Duration::from_secs(60);

/// How long the child waits for a command before it fails.
const CHILD_WAIT: Duration = Duration::from_secs(30);

/// The command that asks the child to step.
const STEP: u32 = FIRST_COMMAND;

/// Slots of the round-trip tests.
const SLOTS: usize = 4;

/// Rounds of the round-trip tests (a step in every slot each).
const ROUNDS: usize = 500;

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

/// The two result schemas.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// observation f32[4], reward f32[1], done/terminated/truncated bool[1].
    CartPole,
    /// observation u8[84, 84, 4], reward f32[1] (the record's number, to
    /// check the frame against).
    Atari,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::CartPole => "cartpole",
            Kind::Atari => "atari",
        }
    }

    fn parse(name: &str) -> Kind {
        match name {
            "cartpole" => Kind::CartPole,
            "atari" => Kind::Atari,
            other => panic!("unknown schema {other}"),
        }
    }

    /// Input, result and next schemas.
    fn schemas(self) -> (Schema, Schema, Schema) {
        let field = |key: &str, dtype, shape: &[usize]| Field::new(key, dtype, shape).unwrap();
        let input = Schema::new(&[], vec![field("action", DType::I64, &[1])]).unwrap();
        let result = match self {
            Kind::CartPole => vec![
                field("observation", DType::F32, &[4]),
                field("reward", DType::F32, &[1]),
                field("done", DType::Bool, &[1]),
                field("terminated", DType::Bool, &[1]),
                field("truncated", DType::Bool, &[1]),
            ],
            Kind::Atari => vec![
                field("observation", DType::U8, &[84, 84, 4]),
                field("reward", DType::F32, &[1]),
            ],
        };
        (input, Schema::new(&[], result).unwrap(), Schema::empty(&[]))
    }

    /// Record number `n` (below 2^24, exact in f32): every field derived
    /// from `n`, so that a torn record shows.
    fn record(self, n: u64) -> TensorDict {
        let mut td = TensorDict::new(&[]);
        let x = n as f32;
        match self {
            Kind::CartPole => {
                td.set(
                    "observation",
                    Tensor::from_slice(&[4], &[x, x + 1.0, x + 2.0, x + 3.0]).unwrap(),
                )
                .unwrap();
                td.set("reward", Tensor::full(&[1], x)).unwrap();
                td.set("done", Tensor::full(&[1], n % 2 == 1)).unwrap();
                td.set("terminated", Tensor::full(&[1], n % 3 == 1))
                    .unwrap();
                td.set("truncated", Tensor::full(&[1], n % 5 == 1)).unwrap();
            }
            Kind::Atari => {
                td.set("observation", Tensor::full(&[84, 84, 4], (n % 251) as u8))
                    .unwrap();
                td.set("reward", Tensor::full(&[1], x)).unwrap();
            }
        }
        td
    }

    /// The number of a received record, after checking that every field
    /// agrees with it (the record is intact).
    fn check(self, td: &TensorDict) -> u64 {
        let reward = td.tensor("reward").unwrap().to_vec::<f32>().unwrap();
        assert_eq!(reward.len(), 1);
        let n = reward[0] as u64;
        let expected = self.record(n);
        for key in expected.keys(false, true) {
            assert_eq!(
                td.tensor(key.clone()).unwrap().as_bytes(),
                expected.tensor(key.clone()).unwrap().as_bytes(),
                "field {key:?} of record {n} is torn"
            );
        }
        n
    }
}

/// A child process that is killed and waited for when dropped.
struct Reaped(Option<Child>);

impl Reaped {
    /// Waits for the child to exit on its own; asserts that it succeeded.
    fn finish(mut self) {
        let status = self.0.take().unwrap().wait().unwrap();
        assert!(status.success(), "the child failed: {status}");
    }

    /// The child's exit status if it has exited (it is then reaped).
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten())
    }

    /// Kills the child with SIGKILL and waits for it.
    fn kill(mut self) {
        let mut child = self.0.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts the child on `exchange` in `mode` for `kind`.
fn spawn_child(exchange: &Exchange, kind: Kind, mode: &str) -> Reaped {
    let theirs = exchange.try_clone_fd().unwrap();
    rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty()).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            CHILD,
            format!("{}:{}:{mode}", theirs.as_raw_fd(), kind.name()),
        )
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    drop(theirs);
    Reaped(Some(child))
}

/// The child: with [`CHILD`] unset, nothing. Modes:
/// - `serve:<rounds>`: `rounds` times, for every slot in turn, takes the
///   command, reads the action `n` and publishes record `n`; then exits.
/// - `spin`: publishes records 1, 2, ... in slot 0 as fast as it can, until
///   killed.
#[test]
fn child_process() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    // Dies with its test: a test that fails (its watchdog fires, the
    // process exits without dropping the child's handle) must not leave a
    // writer spinning behind it (one did, for half an hour, and skewed
    // every benchmark run meanwhile).
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL)).unwrap();
    if std::os::unix::process::parent_id() == 1 {
        // The test was gone before the signal was set.
        return;
    }
    let parts: Vec<&str> = spec.split(':').collect();
    let fd: i32 = parts[0].parse().unwrap();
    let kind = Kind::parse(parts[1]);
    let (input, result, next) = kind.schemas();
    // SAFETY: the parent passed this descriptor open and without
    // close-on-exec; nothing else in this process owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let exchange = Exchange::open(fd, input.clone(), result, next).unwrap();
    match parts[2] {
        "serve" => {
            let rounds: usize = parts[3].parse().unwrap();
            let mut action = input.zeros();
            for _ in 0..rounds {
                for slot in 0..exchange.slots() {
                    let command = exchange
                        .wait_command(slot, Some(Instant::now() + CHILD_WAIT))
                        .unwrap()
                        .expect("a command from the parent");
                    assert_eq!(command, STEP);
                    exchange.read_input(slot, &mut action).unwrap();
                    let n = action.tensor("action").unwrap().as_slice::<i64>().unwrap()[0];
                    exchange.publish(slot, &kind.record(n as u64)).unwrap();
                }
            }
        }
        "spin" => {
            let records: Vec<TensorDict> = (1..=64).map(|n| kind.record(n)).collect();
            for n in 0.. {
                exchange.publish(0, &records[n % records.len()]).unwrap();
            }
        }
        other => panic!("unknown mode {other}"),
    }
}

/// The names in `/dev/shm` (empty if there is none).
fn shm_entries() -> BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|dir| {
            dir.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Asserts that no entry of `/dev/shm` appeared since `before`.
fn assert_no_new_shm(before: &BTreeSet<String>) {
    let new: Vec<String> = shm_entries().difference(before).cloned().collect();
    assert!(new.is_empty(), "new /dev/shm entries: {new:?}");
}

/// Steps a serving child `ROUNDS` times in every slot: each result comes
/// back once, intact, from its own slot, and nothing is received twice.
fn round_trips(kind: Kind) {
    let before = shm_entries();
    {
        let (input, result, next) = kind.schemas();
        let mut exchange = Exchange::create("cross_process", input, result, next, SLOTS).unwrap();
        let child = spawn_child(&exchange, kind, &format!("serve:{ROUNDS}"));
        let mut seen = BTreeSet::new();
        for round in 0..ROUNDS {
            for slot in 0..SLOTS {
                let n = (round * SLOTS + slot + 1) as i64;
                let mut action = TensorDict::new(&[]);
                action.set("action", Tensor::full(&[1], n)).unwrap();
                exchange.write_input(slot, &action).unwrap();
                exchange.post(slot, STEP).unwrap();
            }
            let received = exchange
                .receive(Receive::new().min_get(SLOTS).timeout(WATCHDOG))
                .unwrap();
            assert_eq!(received.slots(), (0..SLOTS).collect::<Vec<_>>());
            for (j, &slot) in received.slots().iter().enumerate() {
                let row = received.row(j);
                assert!(row.get(SLOT_KEY).is_some(), "row {j} names its slot");
                let n = kind.check(&row);
                assert_eq!(n, (round * SLOTS + slot + 1) as u64, "slot {slot}");
                assert!(seen.insert(n), "record {n} received twice");
            }
        }
        assert_eq!(seen.len(), ROUNDS * SLOTS);
        child.finish();
        // The child is gone: nothing more to receive, in any slot.
        assert!(matches!(
            exchange.receive(Receive::new().timeout(Duration::from_millis(20))),
            Err(ReadError::Timeout { .. })
        ));
        for slot in 0..SLOTS {
            assert!(matches!(
                exchange.receive_one(slot, Some(Duration::ZERO)),
                Err(ReadError::SlotTimeout { .. })
            ));
        }
        let stats = exchange.stats(false);
        assert_eq!(stats.items, (ROUNDS * SLOTS) as u64);
    }
    assert_no_new_shm(&before);
}

#[test]
fn cartpole_results_arrive_once_and_intact() {
    watchdog("cartpole round trips", || round_trips(Kind::CartPole));
}

#[test]
fn atari_results_arrive_once_and_intact() {
    watchdog("atari round trips", || round_trips(Kind::Atari));
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
}

/// Kills a child that publishes in a tight loop at a random moment, many
/// times: what the slot holds then is either an intact record (taken once,
/// then nothing more) or, when the kill landed mid-write, nothing ready
/// (`Busy`, for good: never a torn record). A new writer then publishes
/// over the abandoned write, and its record arrives intact.
fn killed_mid_write(kind: Kind) {
    let before = shm_entries();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut mid_write = 0;
    let mut intact = 0;
    let kills = 20;
    for _ in 0..kills {
        let (input, result, next) = kind.schemas();
        let mut exchange = Exchange::create("cross_process", input, result, next, 1).unwrap();
        let mut child = spawn_child(&exchange, kind, "spin");
        // The child is publishing once a record arrives, or once the slot
        // is seen mid-write: a reader can starve against a writer that
        // publishes back to back (a seqlock's reader retries while the
        // clock is odd), and a wait for a whole record once ran into the
        // watchdog (60 s) with large records. Looked at every second, so a
        // child that died first is a clear failure.
        loop {
            match exchange.receive_one(0, Some(Duration::from_secs(1))) {
                Ok(record) => {
                    kind.check(&record);
                    break;
                }
                Err(ReadError::Busy { slot: 0 }) => break,
                Err(ReadError::SlotTimeout { .. }) => {
                    if let Some(status) = child.exited() {
                        panic!("the writer exited before its first record: {status}");
                    }
                }
                Err(err) => panic!("waiting for the writer's first record: {err}"),
            }
        }
        thread::sleep(Duration::from_micros(rng.next() % 2_000));
        child.kill();
        match exchange.receive_one(0, Some(Duration::from_millis(20))) {
            Ok(record) => {
                kind.check(&record);
                intact += 1;
                // Taken once: the dead writer publishes nothing more.
                assert!(matches!(
                    exchange.receive_one(0, Some(Duration::from_millis(5))),
                    Err(ReadError::SlotTimeout { .. })
                ));
            }
            Err(ReadError::Busy { slot: 0 }) => {
                mid_write += 1;
                // The abandoned write stays not ready, whatever the call.
                assert!(matches!(
                    exchange.receive_one(0, Some(Duration::from_millis(5))),
                    Err(ReadError::Busy { slot: 0 })
                ));
                assert!(matches!(
                    exchange.receive(Receive::new().timeout(Duration::from_millis(5))),
                    Err(ReadError::Timeout { ready: 0, .. })
                ));
            }
            // The last record was the one taken first: nothing newer.
            Err(ReadError::SlotTimeout { slot: 0, .. }) => intact += 1,
            Err(other) => panic!("unexpected error after the kill: {other}"),
        }
        // A new writer (here, this process from a new mapping) recovers
        // the slot.
        let (input, result, next) = kind.schemas();
        let writer = Exchange::open(exchange.try_clone_fd().unwrap(), input, result, next).unwrap();
        writer.publish(0, &kind.record(1_000)).unwrap();
        let record = exchange
            .receive_one(0, Some(Duration::from_secs(1)))
            .unwrap();
        assert_eq!(kind.check(&record), 1_000);
    }
    eprintln!("{kind:?}: {kills} kills, {mid_write} mid-write, {intact} between writes");
    assert_no_new_shm(&before);
}

#[test]
fn cartpole_writer_killed_mid_write_leaves_no_torn_record() {
    watchdog("cartpole kills", || killed_mid_write(Kind::CartPole));
}

#[test]
fn atari_writer_killed_mid_write_leaves_no_torn_record() {
    watchdog("atari kills", || killed_mid_write(Kind::Atari));
}
