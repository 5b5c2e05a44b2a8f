//! Round trips between two processes: a shared-memory slot of the
//! [`Exchange`], the baselines it must beat (a Unix socket and a pipe), and
//! a plain memcpy of an Atari-sized record. A child process
//! (this benchmark binary, started again with `RLPOOL_BENCH_CHILD` set)
//! echoes every record back, or, for the slots, answers every command with
//! a result.
//!
//! The child never outlives its bench: it stops on the stop command, when
//! no command comes for a while and its parent is gone, or when the parent
//! kills it (which the parent always does, and waits for it, at the end of
//! each bench function, panic or not).

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use divan::{black_box, counter::ItemsCount, Bencher};
use exchange::{Exchange, Field, Receive, Schema, FIRST_COMMAND};
use tensordict::{DType, Tensor, TensorDict};

/// A CartPole step: observation f32[4], reward f32[1], three bool flags,
/// padded to 8-byte fields.
const CARTPOLE: usize = 16 + 8 + 3 * 8;
/// An Atari frame stack: u8[84, 84, 4].
const ATARI: usize = 84 * 84 * 4;

const CHILD: &str = "RLPOOL_BENCH_CHILD";

/// The command that asks the slot child to step.
const STEP: u32 = FIRST_COMMAND;
/// The command that asks the slot child to stop.
const STOP: u32 = FIRST_COMMAND + 1;
/// How long a receive may wait for the child before the bench fails
/// (instead of hanging).
const RECEIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the slot child waits for a command before it checks that its
/// parent is still there.
const IDLE_CHECK: Duration = Duration::from_millis(500);

fn main() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
        return;
    }
    divan::main();
}

/// The child: `socket:<fd>:<size>`, echoes records of `size` bytes until
/// end of input; `slot:<fd>:<size>:<slots>`, answers the commands of every
/// slot of the exchange in turn until the stop command.
fn child(spec: &str) {
    let parts: Vec<&str> = spec.split(':').collect();
    if parts[0] == "slot" {
        slot_child(&parts);
        return;
    }
    let fd = |i: usize| parts[i].parse::<i32>().expect("an fd number");
    let (mut input, mut output, size): (Box<dyn Read>, Box<dyn Write>, usize) = match parts[0] {
        "socket" => {
            // SAFETY: the parent passed this descriptor to us open and
            // without close-on-exec; nothing else in this process owns it.
            let stream = UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd(1)) });
            let writer = stream.try_clone().expect("clone the socket");
            (
                Box::new(stream),
                Box::new(writer),
                parts[2].parse().expect("a size"),
            )
        }
        "pipe" => {
            // SAFETY: as above, for the two pipe ends.
            let reader = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd(1)) });
            // SAFETY: as above.
            let writer = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd(2)) });
            (
                Box::new(reader),
                Box::new(writer),
                parts[3].parse().expect("a size"),
            )
        }
        other => panic!("unknown child mode {other}"),
    };
    let mut buf = vec![0u8; size];
    while input.read_exact(&mut buf).is_ok() {
        if output.write_all(&buf).is_err() {
            break;
        }
    }
}

/// The schemas of a record of `size` bytes ([`CARTPOLE`] or [`ATARI`]):
/// input, result, next (empty).
fn schemas(size: usize) -> (Schema, Schema, Schema) {
    let field = |key: &str, dtype, shape: &[usize]| Field::new(key, dtype, shape).expect("a field");
    let input = Schema::new(&[], vec![field("action", DType::I64, &[1])]).expect("input schema");
    let result = if size == ATARI {
        vec![field("observation", DType::U8, &[84, 84, 4])]
    } else {
        vec![
            field("observation", DType::F32, &[4]),
            field("reward", DType::F32, &[1]),
            field("done", DType::Bool, &[1]),
            field("terminated", DType::Bool, &[1]),
            field("truncated", DType::Bool, &[1]),
        ]
    };
    let result = Schema::new(&[], result).expect("result schema");
    (input, result, Schema::empty(&[]))
}

/// The slot child: opens the exchange and loops over its slots: takes the
/// command, reads the action, publishes a result.
fn slot_child(parts: &[&str]) {
    let fd: i32 = parts[1].parse().expect("an fd number");
    let size: usize = parts[2].parse().expect("a size");
    let parent = rustix::process::getppid();
    let (input, result_schema, next) = schemas(size);
    // SAFETY: the parent passed this descriptor to us open and without
    // close-on-exec; nothing else in this process owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let exchange =
        Exchange::open(fd, input.clone(), result_schema.clone(), next).expect("open the exchange");
    let mut action = input.zeros();
    let result = result_schema.zeros();
    loop {
        for slot in 0..exchange.slots() {
            let command = loop {
                match exchange.wait_command(slot, Some(Instant::now() + IDLE_CHECK)) {
                    Ok(Some(command)) => break command,
                    // No command for a while: go if the parent is gone.
                    Ok(None) if rustix::process::getppid() != parent => return,
                    Ok(None) => {}
                    Err(err) => panic!("wait for a command: {err}"),
                }
            };
            if command == STOP {
                return;
            }
            exchange
                .read_input(slot, &mut action)
                .expect("read the action");
            exchange.publish(slot, &result).expect("publish");
        }
    }
}

/// A child that is killed and waited for when dropped, so that no bench
/// leaves one behind, even when it panics.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An exchange of `slots` slots for records of `size` bytes, with a child
/// that serves them, and the action written before each step.
fn slot_child_for(size: usize, slots: usize) -> (Exchange, Reaped, TensorDict) {
    let (input, result, next) = schemas(size);
    let exchange =
        Exchange::create("roundtrip", input, result, next, slots).expect("create the exchange");
    let theirs = exchange.try_clone_fd().expect("clone the descriptor");
    inheritable(&theirs);
    let child = Reaped(spawn(format!("slot:{}:{size}:{slots}", theirs.as_raw_fd())));
    drop(theirs);
    let mut action = TensorDict::new(&[]);
    action
        .set("action", Tensor::full(&[1], 1i64))
        .expect("an action");
    (exchange, child, action)
}

/// Asks the child to stop (every slot, in case it waits on another one),
/// gives it a moment, then kills and waits for it.
fn stop(exchange: &Exchange, child: Reaped) {
    for slot in 0..exchange.slots() {
        let _ = exchange.post(slot, STOP);
    }
    let mut child = child;
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.0.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(child);
}

/// Writes `action` into every slot, posts a step to each, and receives
/// every result (with `receive_one` for a single slot).
fn step_all(exchange: &mut Exchange, action: &TensorDict) {
    let slots = exchange.slots();
    for slot in 0..slots {
        exchange
            .write_input(slot, action)
            .expect("write the action");
        exchange.post(slot, STEP).expect("post");
    }
    if slots == 1 {
        black_box(
            exchange
                .receive_one(0, Some(RECEIVE_TIMEOUT))
                .expect("the child's result"),
        );
        return;
    }
    let mut got = 0;
    while got < slots {
        let received = exchange
            .receive(Receive::new().min_get(1).timeout(RECEIVE_TIMEOUT))
            .expect("the child's results");
        got += received.len();
        black_box(received);
    }
}

/// A shared-memory slot round trip of one record: write the action, post
/// the command, receive the child's result from the same slot.
#[divan::bench(args = [CARTPOLE, ATARI])]
fn slot(bencher: Bencher<'_, '_>, size: usize) {
    let (mut exchange, child, action) = slot_child_for(size, 1);
    // A first round trip outside the measure: the child starts up.
    step_all(&mut exchange, &action);
    bencher.bench_local(|| step_all(&mut exchange, &action));
    stop(&exchange, child);
}

/// Many slots served by one child: each iteration posts a step to every
/// slot and receives every result (CartPole-sized records).
#[divan::bench(args = [8, 64])]
fn slot_throughput(bencher: Bencher<'_, '_>, slots: usize) {
    let (mut exchange, child, action) = slot_child_for(CARTPOLE, slots);
    // A first round outside the measure: the child starts up.
    step_all(&mut exchange, &action);
    bencher
        .counter(ItemsCount::new(slots))
        .bench_local(|| step_all(&mut exchange, &action));
    stop(&exchange, child);
}

/// Clears close-on-exec so that a child inherits the descriptor.
fn inheritable(fd: &impl std::os::fd::AsFd) {
    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).expect("clear FD_CLOEXEC");
}

fn spawn(spec: String) -> Child {
    Command::new(std::env::current_exe().expect("this binary"))
        .env(CHILD, spec)
        .spawn()
        .expect("start the echo child")
}

fn round_trip(
    bencher: Bencher<'_, '_>,
    reader: &mut impl Read,
    writer: &mut impl Write,
    size: usize,
) {
    let out = vec![7u8; size];
    let mut back = vec![0u8; size];
    // One round trip before measuring: the child's start-up is not counted.
    writer.write_all(&out).expect("write");
    reader.read_exact(&mut back).expect("read");
    bencher.bench_local(|| {
        writer.write_all(black_box(&out)).expect("write");
        reader.read_exact(&mut back).expect("read");
    });
}

/// A Unix-socket round trip of one record.
#[divan::bench(args = [CARTPOLE, ATARI])]
fn unix_socket(bencher: Bencher<'_, '_>, size: usize) {
    let (mine, theirs) = UnixStream::pair().expect("a socket pair");
    inheritable(&theirs);
    let mut child = spawn(format!("socket:{}:{size}", theirs.as_raw_fd()));
    drop(theirs);
    let mut writer = mine.try_clone().expect("clone");
    let mut reader = mine;
    round_trip(bencher, &mut reader, &mut writer, size);
    drop(writer);
    let _ = reader.shutdown(std::net::Shutdown::Both);
    let _ = child.wait();
}

/// A pipe round trip of one record (one pipe each way).
///
/// The pipes are created close-on-exec and only the child's ends are made
/// inheritable: a child that inherited the parent's write end would never
/// see end of input, and the bench would wait for it forever.
#[divan::bench(args = [CARTPOLE, ATARI])]
fn pipe(bencher: Bencher<'_, '_>, size: usize) {
    let cloexec = rustix::pipe::PipeFlags::CLOEXEC;
    let (to_child_read, to_child_write) = rustix::pipe::pipe_with(cloexec).expect("a pipe");
    let (from_child_read, from_child_write) = rustix::pipe::pipe_with(cloexec).expect("a pipe");
    inheritable(&to_child_read);
    inheritable(&from_child_write);
    let mut child = spawn(format!(
        "pipe:{}:{}:{size}",
        to_child_read.as_raw_fd(),
        from_child_write.as_raw_fd()
    ));
    drop(to_child_read);
    drop(from_child_write);
    let mut writer = std::fs::File::from(to_child_write);
    let mut reader = std::fs::File::from(from_child_read);
    round_trip(bencher, &mut reader, &mut writer, size);
    drop(writer);
    let _ = child.wait();
}

/// A plain copy of an Atari-sized record, for scale.
#[divan::bench]
fn memcpy_atari(bencher: Bencher<'_, '_>) {
    let src = vec![7u8; ATARI];
    let mut dst = vec![0u8; ATARI];
    bencher.bench_local(|| dst.copy_from_slice(black_box(&src)));
}
