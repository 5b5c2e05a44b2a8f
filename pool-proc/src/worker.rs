//! Worker mode: what a worker process runs. [`init`] at the top of the
//! program's `main` turns a process started by the backend into a worker
//! and never returns there; in any other process it returns at once.
//!
//! A worker reads its control socket (its standard input): the hello (its
//! CPUs, envs and number of runner threads), then the exchange to use, then
//! commands (queue exchange) or nothing until stop (shm exchange, where
//! commands come through the slots and the parent rings the worker's
//! doorbell once per send). Runner threads take commands and run the envs,
//! one thread per env at most, as many as the worker has CPUs by default:
//! envs of one worker step in parallel up to its cores without a thread
//! wake-up per env-step. A runner stuck in an env does not stop the
//! others: when every runner is inside an env, none has finished one for
//! [`STALL`], and commands wait, the main thread starts a spare runner. The
//! worker exits on stop, at the end of its socket (the parent is gone), or
//! with the parent (a parent-death signal).
//!
//! For the fault-injection tests only, an env's keyword arguments may carry
//! a fault of the worker itself, which no env could cause: see
//! [`WORKER_FAULT`].

use std::collections::VecDeque;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use envs::{Env, Kwargs};
use exchange::{Bells, Exchange, Schema, FIRST_COMMAND};
use pool_core::{Op, Runner};
use tensordict::TensorDict;

use crate::spawn::WORKER_VAR;
use crate::wire::{op_code, op_of, write_frame, FrameReader, FromWorker, ToWorker};

/// How long an env thread of the shm exchange sleeps on its command word
/// before it looks at the stop flag again.
const STOP_POLL: Duration = Duration::from_millis(100);

/// How long a stopping worker waits for its env threads to finish the
/// command they run.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// The keyword (taken out of an env's keyword arguments before the env is
/// built) of a fault of the worker's control socket, for the
/// fault-injection tests: `"close_socket@K"` (at the env's K-th step
/// command, the worker shuts its socket down) or `"garbage@K"` (it writes
/// a frame the parent cannot decode), in place of running that step.
const WORKER_FAULT: &str = "rlpool_worker_fault";

/// A fault of the worker's control socket (see [`WORKER_FAULT`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SocketFault {
    /// Shut the socket down (both directions).
    Close,
    /// Write a frame with an unknown message tag.
    Garbage,
}

/// A frame no parent can decode: an unknown message tag.
const GARBAGE: &[u8] = &[0xEE, 0xBA, 0xAD, 0xF0, 0x0D];

/// Takes [`WORKER_FAULT`] out of `kwargs`: the fault and the step command
/// it replaces.
fn take_fault(kwargs: Kwargs) -> Result<(Kwargs, Option<(SocketFault, u64)>), String> {
    let Some(value) = kwargs.get(WORKER_FAULT) else {
        return Ok((kwargs, None));
    };
    let bad =
        || format!("{WORKER_FAULT}: expected \"close_socket@K\" or \"garbage@K\", got {value:?}");
    let text = match value {
        envs::KwValue::Str(text) => text.as_str(),
        _ => return Err(bad()),
    };
    let (name, at) = text.split_once('@').ok_or_else(bad)?;
    let fault = match name {
        "close_socket" => SocketFault::Close,
        "garbage" => SocketFault::Garbage,
        _ => return Err(bad()),
    };
    let at = at.parse::<u64>().map_err(|_| bad())?;
    let mut rest = Kwargs::new();
    for (key, value) in kwargs.iter().filter(|(key, _)| *key != WORKER_FAULT) {
        rest.set(key, value.clone());
    }
    Ok((rest, Some((fault, at))))
}

/// The command word of `op` (with or without an input) in a slot.
pub(crate) fn command_word(op: Op, with_input: bool) -> u32 {
    FIRST_COMMAND + 2 * u32::from(op_code(op)) + u32::from(with_input)
}

/// The op and input flag of a command word from [`command_word`].
fn decode_command(word: u32) -> Option<(Op, bool)> {
    let code = word.checked_sub(FIRST_COMMAND)?;
    let op = op_of(u8::try_from(code / 2).ok()?)?;
    Some((op, code % 2 == 1))
}

/// Call at the top of `main`, after registering your own envs: in a worker
/// process started by the process backend this runs the worker and exits
/// the process (it never returns); anywhere else it returns at once.
///
/// ```
/// fn main() {
///     // envs::register("MyEnv", ...); // the envs workers may build
///     pool_proc::init();
///     // ... the program: build pools, step them ...
/// }
/// # main();
/// ```
pub fn init() {
    if let Some(var) = std::env::var_os(WORKER_VAR) {
        let code = run(&var.to_string_lossy());
        std::process::exit(code);
    }
}

/// Whether this process is a worker (started by the process backend).
pub fn is_worker() -> bool {
    std::env::var_os(WORKER_VAR).is_some()
}

/// The socket end a worker writes its messages to (shared by its env
/// threads; one frame per lock).
type Writer = Arc<Mutex<UnixStream>>;

fn send(writer: &Writer, msg: &FromWorker) -> io::Result<()> {
    let stream = writer.lock().unwrap_or_else(|p| p.into_inner());
    write_frame(&stream, &msg.encode(), &[])
}

/// Runs the worker; returns the process's exit code.
fn run(var: &str) -> i32 {
    let Some(parent) = var
        .split_once(':')
        .and_then(|(_, pid)| pid.parse::<i32>().ok())
    else {
        eprintln!("rlpool worker: {WORKER_VAR}={var:?} is not `<worker>:<parent pid>`");
        return 2;
    };
    // Die with the parent; and if it is already gone, stop now.
    let _ = rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
    if rustix::process::getppid().map(|p| p.as_raw_pid()) != Some(parent) {
        return 3;
    }
    let socket = match io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(UnixStream::from)
    {
        Ok(socket) => socket,
        Err(err) => {
            eprintln!("rlpool worker: no control socket on standard input: {err}");
            return 2;
        }
    };
    let writer: Writer = match socket.try_clone() {
        Ok(w) => Arc::new(Mutex::new(w)),
        Err(err) => {
            eprintln!("rlpool worker: cannot clone the control socket: {err}");
            return 2;
        }
    };
    let mut reader = FrameReader::new(socket);
    match serve(&mut reader, &writer) {
        Ok(()) => 0,
        Err(message) => {
            // Best effort: the parent may be gone.
            let _ = send(&writer, &FromWorker::Fatal { message });
            1
        }
    }
}

/// Reads the next message; `Ok(None)` at the end of the socket.
fn next_message(reader: &mut FrameReader) -> Result<Option<ToWorker>, String> {
    match reader.read() {
        Ok(Some(bytes)) => ToWorker::decode(&bytes).map(Some),
        Ok(None) => Ok(None),
        Err(err) => Err(format!("reading the control socket: {err}")),
    }
}

/// One env of this worker, with its buffers.
struct Hosted {
    env: usize,
    inner: Box<dyn Env>,
    runner: Runner,
    /// Step commands received (for the socket fault).
    steps: u64,
    /// A socket fault in place of a step command (tests only).
    fault: Option<(SocketFault, u64)>,
}

impl Hosted {
    /// Counts a command; whether it is the one a socket fault replaces.
    fn faults_now(&mut self, op: Op) -> Option<SocketFault> {
        if op == Op::Reset {
            return None;
        }
        self.steps += 1;
        self.fault
            .filter(|&(_, at)| at == self.steps)
            .map(|(fault, _)| fault)
    }
}

/// Injects a socket fault (tests only): the parent finds the end of the
/// socket, or a frame it cannot decode.
fn inject(work: &Work, fault: SocketFault) {
    let stream = lock(&work.writer);
    let _ = match fault {
        SocketFault::Close => stream.shutdown(std::net::Shutdown::Both),
        SocketFault::Garbage => write_frame(&stream, GARBAGE, &[]),
    };
}

/// How commands reach the runners.
enum Transport {
    /// From the socket (the main thread queues them): env (local index),
    /// op, encoded input.
    Queue {
        queue: Mutex<VecDeque<(usize, Op, Vec<u8>)>>,
        ready: Condvar,
    },
    /// From the slots' command words; the parent rings this worker's bell
    /// after posting.
    Shm {
        exchange: Box<Exchange>,
        bells: Bells,
        bell: usize,
    },
}

/// What the runner threads of a worker share.
struct Work {
    /// The envs, by local index (`env - first`), each run by one runner at
    /// a time.
    envs: Vec<Mutex<Hosted>>,
    /// The pool index of the first env.
    first: usize,
    writer: Writer,
    transport: Transport,
    stop: AtomicBool,
    /// Runners not inside an env right now.
    idle: AtomicUsize,
    /// Runners started (the first ones, and spares).
    runners: AtomicUsize,
    /// When a runner last finished a command (`Instant` of `epoch`, ns).
    progress: AtomicU64,
    epoch: Instant,
}

impl Work {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Whether a command waits for a runner.
    fn pending(&self) -> bool {
        match &self.transport {
            Transport::Queue { queue, .. } => !lock(queue).is_empty(),
            Transport::Shm { exchange, .. } => (0..self.envs.len())
                .any(|local| exchange.pending_command(self.first + local).is_some()),
        }
    }

    /// Wakes every runner (to stop, or to look for work).
    fn wake_all(&self) {
        match &self.transport {
            Transport::Queue { ready, queue } => {
                let _guard = lock(queue);
                ready.notify_all();
            }
            Transport::Shm { bells, bell, .. } => bells.ring(*bell),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic inside an env is caught while its lock is held, so no lock is
    // poisoned by one; recover from any other cause.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long runners may all be inside envs, with commands waiting, before
/// the worker starts a spare runner: a stuck env must not stop the others.
const STALL: Duration = Duration::from_millis(100);

/// How often the main thread looks for stalled runners.
const WATCH: Duration = Duration::from_millis(50);

fn serve(reader: &mut FrameReader, writer: &Writer) -> Result<(), String> {
    let io_err = |e: io::Error| format!("writing the control socket: {e}");
    let Some(ToWorker::Hello {
        worker,
        runners,
        affinity,
        envs,
    }) = next_message(reader)?
    else {
        return Err("the first message was not a hello".into());
    };
    if let Some(cpus) = affinity {
        let cpus: Vec<usize> = cpus.into_iter().map(|c| c as usize).collect();
        let pinned = affinity::pin_current_thread(worker as usize, &cpus)
            .and_then(|()| crate::current_cpus());
        match pinned {
            Ok(now) => send(
                writer,
                &FromWorker::Pinned {
                    cpus: now.into_iter().map(|c| c as u32).collect(),
                },
            )
            .map_err(io_err)?,
            Err(err) => {
                // The parent's error names the worker; the message does not.
                let message = match err {
                    crate::AffinityError::Pin { cpus, errno, .. } => {
                        format!("could not pin to {cpus:?}: {errno}")
                    }
                    other => other.to_string(),
                };
                send(writer, &FromWorker::PinFailed { message }).map_err(io_err)?;
                return Ok(());
            }
        }
    }
    let first = envs.first().map_or(0, |e| e.env as usize);
    let mut hosted = Vec::with_capacity(envs.len());
    for (local, entry) in envs.into_iter().enumerate() {
        let env = entry.env as usize;
        if env != first + local {
            return Err(format!(
                "env {env} is not next after env {}",
                first + local - 1
            ));
        }
        let mut fault = None;
        let built = Kwargs::from_bytes(&entry.kwargs)
            .map_err(|e| e.to_string())
            .and_then(take_fault)
            .map_err(|message| (message, false));
        let built = built.and_then(|(kwargs, socket_fault)| {
            fault = socket_fault;
            match catch_unwind(AssertUnwindSafe(|| envs::make(&entry.name, &kwargs))) {
                Ok(Ok(inner)) => Ok(inner),
                Ok(Err(err)) => Err((err.to_string(), false)),
                Err(payload) => Err((pool_core::panic_message(&*payload), true)),
            }
        });
        match built {
            Ok(inner) => {
                let runner = Runner::new(&*inner);
                send(
                    writer,
                    &FromWorker::Built {
                        env: entry.env,
                        name: inner.name().to_owned(),
                        specs: inner.specs().to_bytes(),
                        input: tensordict::encode(&runner.input),
                        next: tensordict::encode(&runner.next),
                        root: tensordict::encode(&runner.root),
                    },
                )
                .map_err(io_err)?;
                hosted.push(Mutex::new(Hosted {
                    env,
                    inner,
                    runner,
                    steps: 0,
                    fault,
                }));
            }
            Err((message, panicked)) => {
                send(
                    writer,
                    &FromWorker::BuildFailed {
                        env: entry.env,
                        message,
                        panicked,
                    },
                )
                .map_err(io_err)?;
                return Ok(());
            }
        }
    }
    let transport = match next_message(reader)? {
        None => return Ok(()),
        Some(ToWorker::UseQueue) => Transport::Queue {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
        },
        Some(ToWorker::UseShm {
            input,
            result,
            next,
        }) => {
            let schema = |bytes: &[u8], what: &str| {
                Schema::decode(bytes).map_err(|e| format!("the {what} schema: {e}"))
            };
            let fd = reader
                .take_fd()
                .ok_or("the shm exchange came without its descriptor")?;
            let bells_fd = reader
                .take_fd()
                .ok_or("the shm exchange came without the doorbells' descriptor")?;
            let exchange = Exchange::open(
                fd,
                schema(&input, "input")?,
                schema(&result, "result")?,
                schema(&next, "next")?,
            )
            .map_err(|e| format!("opening the exchange: {e}"))?;
            let bell = worker as usize;
            let bells = Bells::open(bells_fd).map_err(|e| format!("opening the doorbells: {e}"))?;
            if bell >= bells.len() {
                return Err(format!("no doorbell {bell} among {}", bells.len()));
            }
            Transport::Shm {
                exchange: Box::new(exchange),
                bells,
                bell,
            }
        }
        Some(other) => return Err(format!("expected the exchange, got {other:?}")),
    };
    let runners = (runners as usize).clamp(1, hosted.len().max(1));
    let work = Arc::new(Work {
        envs: hosted,
        first,
        writer: Arc::clone(writer),
        transport,
        stop: AtomicBool::new(false),
        idle: AtomicUsize::new(0),
        runners: AtomicUsize::new(0),
        progress: AtomicU64::new(0),
        epoch: Instant::now(),
    });
    let mut threads = Vec::with_capacity(runners);
    for _ in 0..runners {
        threads.push(spawn_runner(&work)?);
    }
    send(writer, &FromWorker::Started).map_err(io_err)?;
    let _ = reader.stream().set_read_timeout(Some(WATCH));
    let outcome = loop {
        let message = match reader.read() {
            Ok(Some(bytes)) => ToWorker::decode(&bytes),
            Ok(None) => break Ok(()),
            Err(err)
                if matches!(
                    err.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                // A stuck env must not stop the others: start a spare
                // runner while every runner is inside an env, none finished
                // one for a while, and commands wait (at most one runner
                // per env).
                let stalled = work.idle.load(Ordering::SeqCst) == 0
                    && work
                        .now()
                        .saturating_sub(work.progress.load(Ordering::SeqCst))
                        > STALL.as_nanos() as u64
                    && work.runners.load(Ordering::SeqCst) < work.envs.len()
                    && work.pending();
                if stalled {
                    threads.push(spawn_runner(&work)?);
                }
                continue;
            }
            Err(err) => break Err(format!("reading the control socket: {err}")),
        };
        match message {
            Ok(ToWorker::Stop) => break Ok(()),
            Ok(ToWorker::Command { env, op, input }) => match &work.transport {
                Transport::Queue { queue, ready } => {
                    let local = (env as usize).wrapping_sub(work.first);
                    if local >= work.envs.len() {
                        break Err(format!("a command for env {env}, not hosted here"));
                    }
                    lock(queue).push_back((local, op, input));
                    ready.notify_one();
                }
                Transport::Shm { .. } => {
                    break Err("a command over the socket with the shm exchange".into())
                }
            },
            Ok(other) => break Err(format!("unexpected message {other:?}")),
            Err(err) => break Err(err),
        }
    };
    work.stop.store(true, Ordering::SeqCst);
    work.wake_all();
    let deadline = Instant::now() + STOP_GRACE;
    for thread in threads {
        while !thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if thread.is_finished() {
            let _ = thread.join();
        }
    }
    outcome
}

fn spawn_runner(work: &Arc<Work>) -> Result<JoinHandle<()>, String> {
    let n = work.runners.fetch_add(1, Ordering::SeqCst);
    // Counted idle until it takes a command.
    work.idle.fetch_add(1, Ordering::SeqCst);
    work.progress.store(work.now(), Ordering::SeqCst);
    let for_runner = Arc::clone(work);
    std::thread::Builder::new()
        .name(format!("rlpool-runner-{n}"))
        .spawn(move || run_commands(&for_runner))
        .map_err(|e| format!("starting runner thread {n}: {e}"))
}

/// A runner: takes commands (from the queue, or from the slots after a
/// ring of the worker's bell) and runs them, until stop.
fn run_commands(work: &Work) {
    loop {
        if work.stop.load(Ordering::SeqCst) {
            return;
        }
        match &work.transport {
            Transport::Queue { queue, ready } => {
                let next = {
                    let mut q = lock(queue);
                    if q.is_empty() && !work.stop.load(Ordering::SeqCst) {
                        q = ready
                            .wait_timeout(q, STOP_POLL)
                            .unwrap_or_else(|p| p.into_inner())
                            .0;
                    }
                    q.pop_front()
                };
                if let Some((local, op, input)) = next {
                    busy(work, || queue_command(work, local, op, &input));
                }
            }
            Transport::Shm {
                exchange,
                bells,
                bell,
            } => {
                // The ticket first: a ring after it ends the wait below.
                let ticket = bells.listen(*bell);
                let mut ran = false;
                // Results are published quietly and the parent's bell rung
                // once per scan (or every `RING_EVERY` of a long one), so a
                // sleeping parent wakes once per batch, not once per env.
                let mut unrung = false;
                let mut rung_at = Instant::now();
                for local in 0..work.envs.len() {
                    let slot = work.first + local;
                    if let Ok(Some(word)) = exchange.try_take_command(slot) {
                        ran = true;
                        if !busy(work, || shm_command(work, exchange, local, word)) {
                            exchange.ring();
                            return;
                        }
                        unrung = true;
                        if rung_at.elapsed() >= RING_EVERY {
                            exchange.ring();
                            unrung = false;
                            rung_at = Instant::now();
                        }
                    }
                }
                if unrung {
                    exchange.ring();
                }
                if !ran {
                    bells.wait(*bell, ticket, Some(Instant::now() + STOP_POLL), RUNNER_SPIN);
                }
            }
        }
    }
}

/// The longest a published result waits for the ring that wakes the
/// parent while its runner goes on with the other commands of its scan.
const RING_EVERY: Duration = Duration::from_micros(20);

/// How long a runner of the shm exchange spins on its bell before it
/// sleeps: long enough to catch the next batch of a tight loop.
const RUNNER_SPIN: Duration = Duration::from_micros(500);

/// Runs `body` counted as busy (not idle), then records progress.
fn busy<R>(work: &Work, body: impl FnOnce() -> R) -> R {
    work.idle.fetch_sub(1, Ordering::SeqCst);
    let out = body();
    work.progress.store(work.now(), Ordering::SeqCst);
    work.idle.fetch_add(1, Ordering::SeqCst);
    out
}

/// Runs `op` on a hosted env, catching a panic; the failure as a message.
fn run_op(h: &mut Hosted, op: Op, with_input: bool) -> Result<(), FromWorker> {
    let Hosted { inner, runner, .. } = h;
    match catch_unwind(AssertUnwindSafe(|| {
        runner.run(&mut **inner, op, with_input)
    })) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(FromWorker::Failed {
            env: h.env as u32,
            during: err.during.into(),
            message: err.source.to_string(),
            panicked: false,
        }),
        Err(payload) => Err(FromWorker::Failed {
            env: h.env as u32,
            during: h.runner.during.into(),
            message: pool_core::panic_message(&*payload),
            panicked: true,
        }),
    }
}

/// A command of the queue exchange: the input decoded into the env's
/// buffer, the op run, the result (or failure) sent over the socket.
fn queue_command(work: &Work, local: usize, op: Op, input: &[u8]) {
    let mut h = lock(&work.envs[local]);
    if let Some(fault) = h.faults_now(op) {
        return inject(work, fault);
    }
    let with_input = !input.is_empty();
    let filled = if with_input {
        tensordict::decode(input)
            .map_err(|e| e.to_string())
            .and_then(|td| h.runner.input.fill_from(&td).map_err(|e| e.to_string()))
    } else {
        Ok(())
    };
    let msg = match filled {
        Err(message) => FromWorker::Failed {
            env: h.env as u32,
            during: op.name().into(),
            message: format!("invalid input: {message}"),
            panicked: false,
        },
        Ok(()) => match run_op(&mut h, op, with_input) {
            Ok(()) => FromWorker::Result {
                env: h.env as u32,
                next: if op == Op::Reset {
                    Vec::new()
                } else {
                    tensordict::encode(&h.runner.next)
                },
                root: if op == Op::Step {
                    Vec::new()
                } else {
                    tensordict::encode(&h.runner.root)
                },
            },
            Err(failed) => failed,
        },
    };
    // A parent that is gone: the main thread sees the end of the socket.
    let _ = send(&work.writer, &msg);
}

/// A command of the shm exchange: the input read from the env's slot, the
/// op run, the result published in the slot (a failure goes over the
/// socket). Returns false if the worker must stop.
fn shm_command(work: &Work, exchange: &Exchange, local: usize, word: u32) -> bool {
    let mut guard = lock(&work.envs[local]);
    let h = &mut *guard;
    let slot = h.env;
    let Some((op, with_input)) = decode_command(word) else {
        let _ = send(
            &work.writer,
            &FromWorker::Fatal {
                message: format!("env {}: unknown command word {word}", h.env),
            },
        );
        return false;
    };
    if let Some(fault) = h.faults_now(op) {
        inject(work, fault);
        return true;
    }
    let mut outcome = if with_input || op != Op::Reset {
        exchange
            .read_input(slot, &mut h.runner.input)
            .map_err(|e| FromWorker::Failed {
                env: h.env as u32,
                during: op.name().into(),
                message: format!("invalid input: {e}"),
                panicked: false,
            })
    } else {
        Ok(())
    };
    if outcome.is_ok() {
        outcome = run_op(h, op, with_input);
    }
    let published = match outcome {
        Ok(()) => match op {
            Op::Reset => {
                let empty = TensorDict::new(h.runner.next.batch_size());
                exchange.publish_quiet(slot, &empty, Some(&h.runner.root))
            }
            Op::Step => exchange.publish_quiet(slot, &h.runner.next, None),
            Op::StepAndMaybeReset => {
                exchange.publish_quiet(slot, &h.runner.next, Some(&h.runner.root))
            }
        }
        .map_err(|e| FromWorker::Failed {
            env: h.env as u32,
            during: op.name().into(),
            message: format!("its result does not fit the slot: {e}"),
            panicked: false,
        }),
        Err(failed) => Err(failed),
    };
    if let Err(failed) = published {
        if send(&work.writer, &failed).is_err() {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_words_round_trip_and_stay_below_stop() {
        for op in [Op::Reset, Op::Step, Op::StepAndMaybeReset] {
            for with_input in [false, true] {
                let word = command_word(op, with_input);
                assert_eq!(decode_command(word), Some((op, with_input)));
            }
        }
        assert_eq!(decode_command(FIRST_COMMAND - 1), None);
        assert_eq!(
            decode_command(command_word(Op::StepAndMaybeReset, true) + 1),
            None
        );
    }
}
