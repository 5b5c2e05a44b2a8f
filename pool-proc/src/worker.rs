//! Worker mode: what a worker process runs. [`init`] at the top of the
//! program's `main` turns a process started by the backend into a worker
//! and never returns there; in any other process it returns at once.
//!
//! A worker reads its control socket (its standard input): the hello (its
//! CPUs and envs), then the exchange to use, then commands (queue exchange)
//! or nothing until stop (shm exchange, where commands come through the
//! slots). Each env runs on its own thread. The worker exits on stop, at
//! the end of its socket (the parent is gone), or with the parent (a
//! parent-death signal).

use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use envs::{Env, Kwargs, Op, Runner};
use exchange::{Exchange, Schema, FIRST_COMMAND};
use tensordict::TensorDict;

use crate::spawn::WORKER_VAR;
use crate::wire::{op_code, op_of, write_frame, FrameReader, FromWorker, ToWorker};

/// The command word that stops an env thread (the ops' words are below
/// it: `FIRST_COMMAND + 2 * op_code + with_input`).
pub(crate) const STOP_COMMAND: u32 = FIRST_COMMAND + 64;

/// How long an env thread of the shm exchange sleeps on its command word
/// before it looks at the stop flag again.
const STOP_POLL: Duration = Duration::from_millis(100);

/// How long a stopping worker waits for its env threads to finish the
/// command they run.
const STOP_GRACE: Duration = Duration::from_secs(1);

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
    write_frame(&stream, &msg.encode(), None)
}

/// Where the main thread sends an env thread its commands (queue
/// exchange): the op and the encoded input.
type Route = Sender<(Op, Vec<u8>)>;

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
}

fn serve(reader: &mut FrameReader, writer: &Writer) -> Result<(), String> {
    let io_err = |e: io::Error| format!("writing the control socket: {e}");
    let Some(ToWorker::Hello {
        worker,
        affinity,
        envs,
    }) = next_message(reader)?
    else {
        return Err("the first message was not a hello".into());
    };
    if let Some(cpus) = affinity {
        let cpus: Vec<usize> = cpus.into_iter().map(|c| c as usize).collect();
        let pinned =
            crate::affinity::apply(worker as usize, &cpus).and_then(|()| crate::current_cpus());
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
    let mut hosted = Vec::with_capacity(envs.len());
    for entry in envs {
        let env = entry.env as usize;
        let built = Kwargs::from_bytes(&entry.kwargs).map_err(|e| (e.to_string(), false));
        let built = built.and_then(|kwargs| {
            match catch_unwind(AssertUnwindSafe(|| envs::make(&entry.name, &kwargs))) {
                Ok(Ok(inner)) => Ok(inner),
                Ok(Err(err)) => Err((err.to_string(), false)),
                Err(payload) => Err((envs::panic_message(&*payload), true)),
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
                hosted.push(Hosted { env, inner, runner });
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
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::with_capacity(hosted.len());
    let mut routes: Vec<(usize, Route)> = Vec::new();
    let mut shm: Option<Arc<Exchange>> = None;
    match next_message(reader)? {
        None => return Ok(()),
        Some(ToWorker::UseQueue) => {
            for h in hosted {
                let (tx, rx) = mpsc::channel();
                routes.push((h.env, tx));
                let writer = Arc::clone(writer);
                threads.push(spawn_env(h.env, move || queue_loop(h, &rx, &writer))?);
            }
        }
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
            let exchange = Exchange::open(
                fd,
                schema(&input, "input")?,
                schema(&result, "result")?,
                schema(&next, "next")?,
            )
            .map_err(|e| format!("opening the exchange: {e}"))?;
            let exchange = Arc::new(exchange);
            for h in hosted {
                let exchange = Arc::clone(&exchange);
                let writer = Arc::clone(writer);
                let stop = Arc::clone(&stop);
                threads.push(spawn_env(h.env, move || {
                    shm_loop(h, &exchange, &writer, &stop);
                })?);
            }
            shm = Some(exchange);
        }
        Some(other) => return Err(format!("expected the exchange, got {other:?}")),
    }
    send(writer, &FromWorker::Started).map_err(io_err)?;
    let outcome = loop {
        match next_message(reader) {
            Ok(None) | Ok(Some(ToWorker::Stop)) => break Ok(()),
            Ok(Some(ToWorker::Command { env, op, input })) => {
                let route = routes.iter().find(|(e, _)| *e == env as usize);
                match route {
                    Some((_, tx)) => {
                        // A closed route: its thread ended; the parent
                        // learns of it at shutdown.
                        let _ = tx.send((op, input));
                    }
                    None => break Err(format!("a command for env {env}, not hosted here")),
                }
            }
            Ok(Some(other)) => break Err(format!("unexpected message {other:?}")),
            Err(err) => break Err(err),
        }
    };
    // Stop the env threads: close the queues, or post the stop word to
    // each slot (a slot with a command pending sees the flag after it).
    stop.store(true, Ordering::SeqCst);
    drop(routes);
    if let Some(exchange) = &shm {
        for slot in 0..exchange.slots() {
            let _ = exchange.post(slot, STOP_COMMAND);
        }
    }
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

fn spawn_env(env: usize, body: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, String> {
    std::thread::Builder::new()
        .name(format!("rlpool-env-{env}"))
        .spawn(body)
        .map_err(|e| format!("starting the thread of env {env}: {e}"))
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
            message: envs::panic_message(&*payload),
            panicked: true,
        }),
    }
}

/// An env of the queue exchange: commands from its channel, results over
/// the socket.
fn queue_loop(mut h: Hosted, commands: &Receiver<(Op, Vec<u8>)>, writer: &Writer) {
    for (op, input) in commands {
        let with_input = !input.is_empty();
        let filled = if with_input {
            tensordict::decode(&input)
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
        if send(writer, &msg).is_err() {
            // The parent is gone.
            return;
        }
    }
}

/// An env of the shm exchange: commands from its slot's word, inputs and
/// results through the slot; failures over the socket.
fn shm_loop(mut h: Hosted, exchange: &Exchange, writer: &Writer, stop: &AtomicBool) {
    let slot = h.env;
    let empty = TensorDict::new(h.runner.next.batch_size());
    loop {
        let word = match exchange.wait_command(slot, Some(Instant::now() + STOP_POLL)) {
            Ok(Some(word)) => word,
            Ok(None) if stop.load(Ordering::SeqCst) => return,
            Ok(None) => continue,
            Err(err) => {
                let _ = send(
                    writer,
                    &FromWorker::Fatal {
                        message: format!("env {}: slot {slot}: {err}", h.env),
                    },
                );
                return;
            }
        };
        if word == STOP_COMMAND {
            return;
        }
        let Some((op, with_input)) = decode_command(word) else {
            let _ = send(
                writer,
                &FromWorker::Fatal {
                    message: format!("env {}: unknown command word {word}", h.env),
                },
            );
            return;
        };
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
            outcome = run_op(&mut h, op, with_input);
        }
        let published = match outcome {
            Ok(()) => match op {
                Op::Reset => exchange.publish_pair(slot, &empty, &h.runner.root),
                Op::Step => exchange.publish(slot, &h.runner.next),
                Op::StepAndMaybeReset => {
                    exchange.publish_pair(slot, &h.runner.next, &h.runner.root)
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
            if send(writer, &failed).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_words_round_trip_and_stay_below_stop() {
        for op in [Op::Reset, Op::Step, Op::StepAndMaybeReset] {
            for with_input in [false, true] {
                let word = command_word(op, with_input);
                assert!(word < STOP_COMMAND);
                assert_eq!(decode_command(word), Some((op, with_input)));
            }
        }
        assert_eq!(decode_command(FIRST_COMMAND - 1), None);
        assert_eq!(decode_command(STOP_COMMAND), None);
    }
}
