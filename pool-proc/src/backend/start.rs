//! `ProcBackend::start`: the start handshake. Spawn each worker, send it
//! its envs, read back each env's specs and buffers (and the worker's
//! affinity), choose the exchange, and build the parent's side; any
//! failure kills and reaps every worker started.

use std::ops::Range;
use std::os::unix::net::UnixStream;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envs::{EnvSpecs, Kwargs};
use exchange::{Bells, Exchange, Schema};
use pool_core::{lock, Liveness, Op, Phases, Rows, Signal};
use tensordict::{NestedKey, TensorDict};

use super::reader::reader_loop;
use super::rows::shm_rows;
use super::{exit_reason, Cell, ProcBackend, Shared, Slot, Worker};
use crate::spawn;
use crate::wire::{write_frame, EnvEntry, FrameReader, FromWorker, ToWorker};
use crate::{ExchangeMode, ProcError, ProcOptions};

/// A worker being started: its process and socket.
struct Starting {
    child: Option<Child>,
    pid: u32,
    reader: FrameReader,
    writer: UnixStream,
    envs: Range<usize>,
}

/// What a worker said about one env it built.
struct BuiltEnv {
    name: String,
    specs: EnvSpecs,
    input: TensorDict,
    next: TensorDict,
    root: TensorDict,
}

/// What a successful start handshake gives: each env's report, the shm
/// exchange (if chosen), and why auto chose the queue (if it did).
struct Started {
    built: Vec<BuiltEnv>,
    shm: Option<(Exchange, Bells)>,
    reason: Option<String>,
}

/// Kills and reaps workers that were being started.
fn abandon(starting: &mut [Starting]) {
    for s in starting {
        if let Some(mut child) = s.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl ProcBackend {
    /// Starts the workers (`options.envs_per_worker` envs each), has each
    /// build its envs from the registry (`envs[i]`: name and keyword
    /// arguments of env `i`), and sets up the exchange. Options are checked
    /// before anything starts; a worker or env that fails to start is an
    /// error naming it, and every worker already started is killed and
    /// reaped. With [`Rows::Batch`] and the shm exchange, results are read
    /// out of the slots straight into each env's row of two batches of all
    /// envs (see [`ProcBackend::gather`]); an env's own result buffers are
    /// filled from its rows only when read one by one.
    pub fn start(
        envs: Vec<(String, Kwargs)>,
        options: &ProcOptions,
        rows: Rows,
    ) -> Result<ProcBackend, ProcError> {
        let n = envs.len();
        let per = options.envs_per_worker.get();
        let workers = n.div_ceil(per);
        let affinity = match &options.affinity {
            Some(a) => Some(a.resolve(workers)?),
            None if options.spread => spread(workers),
            None => None,
        };
        // Pins the user asked for must hold; the pool's own spread is best
        // effort.
        let pin_required = options.affinity.is_some();
        let deadline = Instant::now() + options.start_timeout;
        let program = match &options.program {
            Some(program) => program.clone(),
            None => spawn::program().map_err(|e| ProcError::Spawn {
                worker: 0,
                program: "the current executable".into(),
                message: e.to_string(),
            })?,
        };
        let mut starting: Vec<Starting> = Vec::with_capacity(workers);
        let started = (|| -> Result<Started, ProcError> {
            for w in 0..workers {
                let range = w * per..((w + 1) * per).min(n);
                let spawn_err = |e: std::io::Error| ProcError::Spawn {
                    worker: w,
                    program: program.display().to_string(),
                    message: e.to_string(),
                };
                let (ours, theirs) = UnixStream::pair().map_err(spawn_err)?;
                let writer = ours.try_clone().map_err(spawn_err)?;
                let child =
                    spawn::start_worker(&program, &options.worker_args, w, theirs, options.quiet)
                        .map_err(spawn_err)?;
                let pid = child.id();
                starting.push(Starting {
                    child: Some(child),
                    pid,
                    reader: FrameReader::new(ours),
                    writer,
                    envs: range.clone(),
                });
                let cpus = affinity.as_ref().map(|sets| sets[w].as_slice().len());
                let hello = ToWorker::Hello {
                    worker: w as u32,
                    runners: runners(options, cpus, workers, range.len()) as u32,
                    max_runners: options
                        .max_threads_per_worker
                        .map_or(0, |n| n.get().min(u32::MAX as usize) as u32),
                    affinity: affinity
                        .as_ref()
                        .map(|sets| sets[w].as_slice().iter().map(|&c| c as u32).collect()),
                    pin_required,
                    envs: range
                        .clone()
                        .map(|env| EnvEntry {
                            env: env as u32,
                            name: envs[env].0.clone(),
                            kwargs: envs[env].1.to_bytes(),
                        })
                        .collect(),
                };
                let s = starting.last_mut().expect("just pushed");
                write_frame(&s.writer, &hello.encode(), &[])
                    .map_err(|e| start_error(s, w, format!("could not send its envs: {e}")))?;
            }
            let mut built = Vec::with_capacity(n);
            for (w, s) in starting.iter_mut().enumerate() {
                if let Some(sets) = &affinity {
                    match expect(s, w, deadline)? {
                        FromWorker::Pinned { cpus } => {
                            let cpus: Vec<usize> = cpus.into_iter().map(|c| c as usize).collect();
                            if pin_required && cpus != sets[w].as_slice() {
                                return Err(ProcError::Pin {
                                    worker: w,
                                    message: format!(
                                        "asked for CPUs {:?}, runs on {cpus:?}",
                                        sets[w].as_slice()
                                    ),
                                });
                            }
                        }
                        FromWorker::PinFailed { message } => {
                            return Err(ProcError::Pin { worker: w, message })
                        }
                        other => return Err(unexpected(w, &other)),
                    }
                }
                for env in s.envs.clone() {
                    match expect(s, w, deadline)? {
                        FromWorker::Built {
                            env: e,
                            name,
                            specs,
                            input,
                            next,
                            root,
                        } if e as usize == env => {
                            let bad = |what: &str, reason: String| ProcError::Protocol {
                                worker: w,
                                reason: format!("env {env}'s {what}: {reason}"),
                            };
                            built.push(BuiltEnv {
                                name,
                                specs: EnvSpecs::from_bytes(&specs)
                                    .map_err(|e| bad("specs", e.to_string()))?,
                                input: tensordict::decode(&input)
                                    .map_err(|e| bad("input buffer", e.to_string()))?,
                                next: tensordict::decode(&next)
                                    .map_err(|e| bad("result buffer", e.to_string()))?,
                                root: tensordict::decode(&root)
                                    .map_err(|e| bad("root buffer", e.to_string()))?,
                            });
                        }
                        FromWorker::BuildFailed {
                            env: e,
                            message,
                            panicked,
                        } if e as usize == env => {
                            return Err(ProcError::Build {
                                env,
                                name: envs[env].0.clone(),
                                worker: w,
                                message,
                                panicked,
                            })
                        }
                        other => return Err(unexpected(w, &other)),
                    }
                }
            }
            let (shm, reason) = choose_exchange(options, &built)?;
            let shm = match shm {
                Some((input, result, next)) => {
                    let shm_err = |e: exchange::ExchangeError| ProcError::Shm {
                        message: e.to_string(),
                    };
                    let exchange =
                        Exchange::create("rlpool", input.clone(), result.clone(), next.clone(), n)
                            .map_err(shm_err)?;
                    let bells = Bells::create("rlpool-bells", workers).map_err(shm_err)?;
                    let msg = ToWorker::UseShm {
                        input: input.encode(),
                        result: result.encode(),
                        next: next.encode(),
                    }
                    .encode();
                    for (w, s) in starting.iter_mut().enumerate() {
                        write_frame(&s.writer, &msg, &[exchange.fd(), bells.fd()]).map_err(
                            |e| start_error(s, w, format!("could not send the exchange: {e}")),
                        )?;
                    }
                    Some((exchange, bells))
                }
                None => {
                    let msg = ToWorker::UseQueue.encode();
                    for (w, s) in starting.iter_mut().enumerate() {
                        write_frame(&s.writer, &msg, &[]).map_err(|e| {
                            start_error(s, w, format!("could not send the exchange: {e}"))
                        })?;
                    }
                    None
                }
            };
            for (w, s) in starting.iter_mut().enumerate() {
                match expect(s, w, deadline)? {
                    FromWorker::Started => {}
                    other => return Err(unexpected(w, &other)),
                }
                let _ = s.reader.stream().set_read_timeout(None);
            }
            Ok(Started { built, shm, reason })
        })();
        let Started {
            built,
            shm,
            reason: exchange_reason,
        } = match started {
            Ok(parts) => parts,
            Err(err) => {
                abandon(&mut starting);
                return Err(err);
            }
        };
        let mut slots = Vec::with_capacity(n);
        let mut specs = Vec::with_capacity(n);
        let mut names = Vec::with_capacity(n);
        let mut templates = Vec::with_capacity(n);
        for b in built {
            specs.push(b.specs);
            names.push(b.name);
            templates.push((b.next.clone(), b.root.clone()));
            slots.push(Slot {
                published: AtomicU64::new(0),
                cell: Mutex::new(Cell {
                    op: Op::Reset,
                    input: b.input,
                    next: b.next,
                    root: b.root,
                    error: None,
                    taken: 0,
                }),
            });
        }
        let mut worker_of = vec![0; n];
        let mut readers_in = Vec::with_capacity(workers);
        let mut worker_states = Vec::with_capacity(workers);
        for (w, s) in starting.into_iter().enumerate() {
            for env in s.envs.clone() {
                worker_of[env] = w;
            }
            readers_in.push(s.reader);
            worker_states.push(Worker {
                envs: s.envs,
                life: Liveness::new(),
                writer: Mutex::new(s.writer),
                child: Mutex::new(s.child),
                pid: s.pid,
                death: Mutex::new(None),
            });
        }
        let (shm, bells) = match shm {
            Some((exchange, bells)) => (Some(exchange), Some(bells)),
            None => (None, None),
        };
        let rows = match &shm {
            Some(exchange) if rows == Rows::Batch => shm_rows(exchange, &slots),
            _ => None,
        };
        let shared = Arc::new(Shared {
            phases: Phases::new(n),
            rows,
            slots,
            workers: worker_states,
            worker_of,
            names,
            signal: Signal::default(),
            shm,
            bells,
            closing: AtomicBool::new(false),
        });
        let backend = ProcBackend {
            shared: Arc::clone(&shared),
            specs,
            templates,
            readers: Mutex::new(Vec::new()),
            exchange_reason,
            shutdown_timeout: options.shutdown_timeout,
            shut_down: AtomicBool::new(false),
        };
        for (w, reader) in readers_in.into_iter().enumerate() {
            let for_reader = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name(format!("rlpool-reader-{w}"))
                .spawn(move || reader_loop(&for_reader, w, reader));
            match spawned {
                Ok(handle) => lock(&backend.readers).push(handle),
                Err(err) => {
                    // Dropping the backend stops the workers started.
                    return Err(ProcError::Spawn {
                        worker: w,
                        program: "a reader thread".into(),
                        message: err.to_string(),
                    });
                }
            }
        }
        Ok(backend)
    }
}

/// The next message of a starting worker, by `deadline`.
fn expect(s: &mut Starting, w: usize, deadline: Instant) -> Result<FromWorker, ProcError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(start_error(
            s,
            w,
            "no answer before the start deadline".into(),
        ));
    }
    let _ = s.reader.stream().set_read_timeout(Some(left));
    match s.reader.read() {
        Ok(Some(bytes)) => FromWorker::decode(&bytes).map_err(|err| ProcError::Protocol {
            worker: w,
            reason: err.to_string(),
        }),
        Ok(None) => Err(start_error(s, w, "it exited".into())),
        Err(err)
            if matches!(
                err.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(start_error(
                s,
                w,
                "no answer before the start deadline".into(),
            ))
        }
        Err(err) => Err(start_error(s, w, format!("its socket failed: {err}"))),
    }
}

/// A start error for worker `w`, with its exit status if it exited.
fn start_error(s: &mut Starting, w: usize, what: String) -> ProcError {
    let status = s
        .child
        .as_mut()
        .and_then(|c| exit_reason(c, Duration::from_millis(50)));
    let reason = match status {
        Some(status) => format!("{what} ({status})"),
        None => what,
    };
    ProcError::Start {
        worker: w,
        envs: s.envs.clone().collect(),
        reason,
    }
}

fn unexpected(w: usize, msg: &FromWorker) -> ProcError {
    match msg {
        FromWorker::Fatal { message } => ProcError::Protocol {
            worker: w,
            reason: message.clone(),
        },
        other => ProcError::Protocol {
            worker: w,
            reason: format!("unexpected message while starting: {other:?}"),
        },
    }
}

/// The pool's own affinity ([`ProcOptions::spread_workers`]): the CPUs
/// this process may use split among the workers in contiguous groups (one
/// CPU each when they are as many), the last taking what is left; `None`
/// when the workers outnumber those CPUs, or when they cannot be read.
fn spread(workers: usize) -> Option<Vec<affinity::CpuList>> {
    let available = crate::available_cpus().ok()?;
    if workers == 0 || workers > available.len() {
        return None;
    }
    let per = available.len() / workers;
    let sets = (0..workers).map(|w| {
        let end = if w + 1 == workers {
            available.len()
        } else {
            (w + 1) * per
        };
        available[w * per..end].to_vec()
    });
    crate::Affinity::per_worker(sets).resolve(workers).ok()
}

/// How many runner threads a worker gets: the option, or as many as the
/// CPUs it may use (its affinity set, else this process's CPUs shared
/// among the workers); at least one, at most one per env.
fn runners(options: &ProcOptions, cpus: Option<usize>, workers: usize, envs: usize) -> usize {
    let by_cpus = || match cpus {
        Some(set) => set,
        None => {
            let available = crate::available_cpus().map_or(1, |c| c.len());
            available / workers.max(1)
        }
    };
    options
        .threads_per_worker
        .map_or_else(by_cpus, std::num::NonZeroUsize::get)
        .clamp(1, envs.max(1))
}

/// The slots' schemas (input, result, next) if every env's buffers fit one
/// layout, else why not; the results' `sized` keys length-prefixed
/// ([`ProcOptions::length_prefixed`]).
fn shm_schemas(
    built: &[BuiltEnv],
    sized: &[NestedKey],
) -> Result<(Schema, Schema, Schema), String> {
    let schema = |pick: fn(&BuiltEnv) -> &TensorDict, what: &str| {
        let templates: Vec<TensorDict> = built.iter().map(|b| pick(b).clone()).collect();
        Schema::validate_envs(&templates)
            .map(|schema| schema.with_sized(sized))
            .map_err(|e| format!("{what}: {e}"))
    };
    Ok((
        schema(|b| &b.input, "inputs (action and state)")?,
        schema(|b| &b.next, "step results")?,
        schema(|b| &b.root, "roots")?,
    ))
}

/// The exchange to use: the schemas for shm, or none (queue), with the
/// reason auto chose the queue.
#[allow(clippy::type_complexity)]
fn choose_exchange(
    options: &ProcOptions,
    built: &[BuiltEnv],
) -> Result<(Option<(Schema, Schema, Schema)>, Option<String>), ProcError> {
    let sized = options.length_prefixed.as_slice();
    match options.exchange {
        ExchangeMode::Queue => Ok((None, None)),
        ExchangeMode::Shm => shm_schemas(built, sized)
            .map(|s| (Some(s), None))
            .map_err(|reason| ProcError::ShmUnavailable { reason }),
        ExchangeMode::Auto => match shm_schemas(built, sized) {
            Ok(s) => Ok((Some(s), None)),
            Err(reason) => Ok((None, Some(reason))),
        },
    }
}
