//! `ProcBackend`: envs in worker processes. The parent keeps, per env, a
//! phase and a cell (input buffer, latest result or error), as the
//! threading backend does; what differs is how work and results travel:
//! through each worker's socket (queue exchange) or through the env's
//! shared-memory slot (shm exchange), and that a worker can die.
//!
//! # Liveness
//! One reader thread per worker reads its socket: results (queue), env
//! failures, and the end of the socket, which is how a dead worker is
//! found (at once, without polling). Then every env of that worker with a
//! command in flight fails with [`ProcError::WorkerDied`] and receivers are
//! woken; later sends to its envs fail the same way.
//!
//! # Phases
//! An env is `IDLE`, `QUEUED` (sent), `DONE` (a result waits in its cell)
//! or `FAILED` (an error waits): `pool_core::Phases`. `QUEUED` is left only
//! under the cell's lock, by whoever sees the result or the failure first.
//! A send and a worker's death meet in `pool_core::Liveness`.
//!
//! # Files
//! `start.rs` is the start handshake, `reader.rs` the reader thread of
//! each worker, `rows.rs` the batch rows of the shm exchange; this file
//! holds the parent's state and the backend's methods.
//!
//! # Caller contract
//! The methods that move commands and results (`send`, `is_done`,
//! `ready_among`, `listen`, `wait`, `peek`, `peek_many`, `gather`,
//! `release`, `published`, `record_batch`, ...) are how the `pool` facade
//! drives this backend, under the facade's rules (a result is peeked only
//! once done, released once taken, an env sent to by one caller at a
//! time). They are hidden from these docs and are not a stable API: use
//! `pool::AsyncEnvPool`.

use std::ops::Range;
use std::os::unix::net::UnixStream;
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use envs::EnvSpecs;
use exchange::{Bells, Exchange, ReadError};
use pool_core::phase::{DONE, FAILED, QUEUED};
use pool_core::spin::{spin_left, SHM_RECEIVER_SPIN};
use pool_core::{lock, peek_cells, BatchRows, Liveness, Op, Output, Phases, Signal};
use tensordict::{NestedKey, TensorDict};

use crate::wire::{write_frame, ToWorker};
use crate::worker::command_word;
use crate::ProcError;
use smallvec::SmallVec;

mod reader;
mod rows;
mod start;

use self::rows::lock_rows;

/// One env's buffers and latest result, in the parent.
struct Cell {
    op: Op,
    /// Its inputs: action and state entries.
    input: TensorDict,
    /// The latest step result (`"next"` entries).
    next: TensorDict,
    /// The latest reset root, or root of the next step.
    root: TensorDict,
    error: Option<ProcError>,
    /// Shm: the clock of the last result read from the env's slot.
    taken: u64,
}

struct Slot {
    /// An order of arrival of results: receivers that take fewer results
    /// than are ready take the oldest. With shm, the time the worker
    /// published the result (ns of the monotonic clock, for the
    /// statistics); with the queue, the signal's generation.
    published: AtomicU64,
    cell: Mutex<Cell>,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Cell> {
        // Nothing panics while a cell is held.
        lock(&self.cell)
    }
}

/// One worker process, as the parent sees it.
struct Worker {
    envs: Range<usize>,
    /// Whether its socket is still open: see `send` and
    /// `Shared::worker_died` for the protocol.
    life: Liveness,
    /// Its socket, for commands and stop (one frame per lock).
    writer: Mutex<UnixStream>,
    /// Taken by whoever reaps it.
    child: Mutex<Option<Child>>,
    pid: u32,
    /// Why it died, once it did.
    death: Mutex<Option<String>>,
}

struct Shared {
    /// Per env: where it stands.
    phases: Phases,
    slots: Vec<Slot>,
    /// Shm with batch rows: every env's latest result in its row of two
    /// batches of all envs, read there straight out of its slot (its cell
    /// is filled from the rows only when read one by one: `CELL_STALE`).
    /// Locked before any cell, never after one.
    rows: Option<Mutex<BatchRows>>,
    workers: Vec<Worker>,
    /// Each env's worker.
    worker_of: Vec<usize>,
    names: Vec<String>,
    signal: Signal,
    shm: Option<Exchange>,
    /// Shm: one doorbell per worker, rung after commands are posted.
    bells: Option<Bells>,
    /// Set by shutdown: a worker's end is expected, not a death to report.
    closing: AtomicBool,
}

impl Worker {
    /// Its process, for whoever reaps it (once).
    fn take_child(&self) -> Option<Child> {
        lock(&self.child).take()
    }
}

/// A receiver's view of the events so far, for [`ProcBackend::wait`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket {
    generation: u64,
    bell: u32,
}

/// Envs in worker processes (see the module docs). The pool's semantics
/// (busy envs, targets, `min_get`, ordering, stacking) are the facade's;
/// this type starts the workers, moves commands and results, and reports
/// failures and deaths.
///
/// # Panics
/// The methods that take an env index (`templates`, `is_done`,
/// `is_failed`, `published`, `peek`, `peek_many`, `release`) panic if it
/// is not below [`ProcBackend::num_envs`]; `send` returns an error instead.
pub struct ProcBackend {
    shared: Arc<Shared>,
    specs: Vec<EnvSpecs>,
    templates: Vec<(TensorDict, TensorDict)>,
    readers: Mutex<Vec<JoinHandle<()>>>,
    /// Why `Auto` chose the queue, if it did.
    exchange_reason: Option<String>,
    shutdown_timeout: Duration,
    shut_down: AtomicBool,
}

impl std::fmt::Debug for ProcBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcBackend")
            .field("envs", &self.num_envs())
            .field("workers", &self.shared.workers.len())
            .field("shm", &self.shared.shm.is_some())
            .finish_non_exhaustive()
    }
}

/// How a worker ended, waiting up to `patience` for it to be reaped;
/// `None` if it still runs then.
fn exit_reason(child: &mut Child, patience: Duration) -> Option<String> {
    let deadline = Instant::now() + patience;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status.to_string()),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            Ok(None) => return None,
            Err(err) => return Some(format!("status unknown ({err})")),
        }
    }
}

impl ProcBackend {
    /// Number of envs.
    pub fn num_envs(&self) -> usize {
        self.shared.slots.len()
    }

    /// Number of worker processes.
    pub fn num_workers(&self) -> usize {
        self.shared.workers.len()
    }

    /// The process id of each worker.
    pub fn worker_pids(&self) -> Vec<u32> {
        self.shared.workers.iter().map(|w| w.pid).collect()
    }

    /// The worker hosting `env`.
    pub fn worker_of(&self, env: usize) -> usize {
        self.shared.worker_of[env]
    }

    /// Each env's specs, as its worker reported them.
    pub fn env_specs(&self) -> &[EnvSpecs] {
        &self.specs
    }

    /// Each env's name.
    pub fn env_names(&self) -> &[String] {
        &self.shared.names
    }

    /// Zeros shaped like env `env`'s step result and its root result.
    pub fn templates(&self, env: usize) -> (TensorDict, TensorDict) {
        self.templates[env].clone()
    }

    /// Whether results travel through shared-memory slots.
    pub fn is_shm(&self) -> bool {
        self.shared.shm.is_some()
    }

    /// Why [`ExchangeMode::Auto`](crate::ExchangeMode::Auto) chose the queue (`None` if it chose shm or
    /// the mode was not auto).
    pub fn exchange_reason(&self) -> Option<&str> {
        self.exchange_reason.as_deref()
    }

    /// The keys the shared-memory slots carry (input, result and next
    /// areas), sorted; empty for the queue exchange.
    pub fn exchange_keys(&self) -> Vec<NestedKey> {
        let Some(shm) = &self.shared.shm else {
            return Vec::new();
        };
        let layout = shm.layout();
        let mut keys: Vec<NestedKey> = exchange::Area::ALL
            .into_iter()
            .flat_map(|area| layout.schema(area).keys().cloned().collect::<Vec<_>>())
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// The shared-memory exchange's statistics (empty for the queue).
    pub fn stats(&self, reset: bool) -> Option<exchange::ExchangeStats> {
        self.shared.shm.as_ref().map(|shm| shm.stats(reset))
    }

    /// Records a batch taken by a receive in the exchange's statistics.
    #[doc(hidden)]
    pub fn record_batch(&self, envs: &[usize], max_get: Option<usize>, op: Op) {
        if let Some(shm) = &self.shared.shm {
            let taken: Vec<(usize, u64)> = envs
                .iter()
                // With shm, `published` holds the publish time read from
                // the slot.
                .map(|&env| (env, self.published(env)))
                .collect();
            shm.record_received(&taken, max_get, op != Op::Reset);
        }
    }

    /// Sends `op` to each `(env, row)` of `jobs`, with the env's inputs
    /// (action and state entries) from row `row` of `src` (or `src` itself
    /// when `row` is `None`). Every input is copied before anything is
    /// sent, so an invalid input sends nothing. An env of a dead worker
    /// fails at once (its receive reports it).
    #[doc(hidden)]
    pub fn send(
        &self,
        op: Op,
        jobs: &[(usize, Option<usize>)],
        src: Option<&TensorDict>,
    ) -> Result<(), ProcError> {
        let n = self.num_envs();
        let mut addressed = vec![false; n];
        for &(env, _) in jobs {
            if env >= n {
                return Err(ProcError::NoSuchEnv { env, num_envs: n });
            }
            if std::mem::replace(&mut addressed[env], true) || !self.shared.phases.is_idle(env) {
                return Err(ProcError::Busy { env });
            }
        }
        // Shm, each env given a row of `src` that has every input key: the
        // rows go straight from `src` into the slots (its columns looked up
        // once), not through each env's input buffer.
        let input_rows = match (&self.shared.shm, src) {
            (Some(shm), Some(src))
                if jobs.iter().all(|&(_, row)| row.is_some())
                    // A row of `src` has the envs' batch size (as `read_row`
                    // checks).
                    && src.batch_size().get(1..)
                        == Some(shm.layout().schema(exchange::Area::Input).batch_size()) =>
            {
                shm.input_rows(src).ok().filter(|rows| {
                    rows.is_complete() && jobs.iter().all(|&(_, row)| row < Some(rows.rows()))
                })
            }
            _ => None,
        };
        let mut with_input = Vec::with_capacity(jobs.len());
        for &(env, row) in jobs {
            let mut cell = self.shared.slots[env].lock();
            let input = match (op, src) {
                (Op::Reset, None) => false,
                (Op::Reset, Some(_))
                    if cell.input.is_empty() || self.specs[env].full_state_spec().is_empty() =>
                {
                    false
                }
                _ => true,
            };
            if input && input_rows.is_none() {
                let copied = match (src, row) {
                    (Some(src), Some(row)) => src.read_row(row, &mut cell.input),
                    (Some(src), None) => cell.input.fill_from(src),
                    (None, _) => Err(tensordict::TensorDictError::KeyNotFound {
                        key: "action".into(),
                        available: Vec::new(),
                    }),
                };
                copied.map_err(|source| ProcError::Input {
                    env,
                    name: self.shared.names[env].clone(),
                    source: Box::new(source),
                })?;
            }
            with_input.push(input);
        }
        let mut failed = false;
        let mut rung = vec![false; self.shared.workers.len()];
        // One send time for every command of the send.
        let sent_ns = self.shared.shm.as_ref().map_or(0, |_| exchange::now_ns());
        for (&(env, row), &input) in jobs.iter().zip(&with_input) {
            let slot = &self.shared.slots[env];
            let worker = &self.shared.workers[self.shared.worker_of[env]];
            let alive;
            let sent = {
                let mut cell = slot.lock();
                cell.op = op;
                cell.error = None;
                // QUEUED, then whether the worker lives (`Liveness`): a
                // worker that dies from now on fails the env in its scan.
                alive = worker.life.queue(&self.shared.phases, env);
                match &self.shared.shm {
                    // A dead worker takes no command: failed below.
                    _ if !alive => Ok(()),
                    Some(shm) => {
                        let written = match (&input_rows, row) {
                            (Some(rows), Some(row)) if input => shm.write_input_row(env, rows, row),
                            _ if input || op != Op::Reset => shm.write_input(env, &cell.input),
                            _ => Ok(()),
                        };
                        written
                            .and_then(|()| shm.post_at(env, command_word(op, input), sent_ns))
                            .map_err(|e| ProcError::Shm {
                                message: format!("env {env}: {e}"),
                            })
                    }
                    None => {
                        let msg = ToWorker::Command {
                            env: env as u32,
                            op,
                            input: if input {
                                tensordict::encode(&cell.input)
                            } else {
                                Vec::new()
                            },
                        };
                        let stream = lock(&worker.writer);
                        // A socket that refuses the command belongs to a
                        // worker that is gone or going: its reader sees the
                        // end and fails the env with the reason (exit
                        // status); the check of `alive` below covers a
                        // reader that already did.
                        let _ = write_frame(&stream, &msg.encode(), &[]);
                        Ok(())
                    }
                }
            };
            match sent {
                Ok(()) => rung[self.shared.worker_of[env]] = true,
                Err(err) => failed |= self.shared.fail(env, err),
            }
            // The worker was dead when the env was queued (or died since:
            // then its scan fails the env too; failing is done once).
            if !alive || !worker.life.is_alive() {
                let err = self
                    .shared
                    .died_error(self.shared.worker_of[env], String::new());
                failed |= self.shared.fail(env, err);
            }
        }
        if let Some(bells) = &self.shared.bells {
            // One wake-up per worker for the whole send.
            for (w, _) in rung.iter().enumerate().filter(|(_, &r)| r) {
                bells.ring(w);
            }
        }
        if failed {
            self.wake_receivers();
        }
        Ok(())
    }

    /// Wakes every receiver (their `min_get` may be out of reach now).
    #[doc(hidden)]
    pub fn wake_receivers(&self) {
        self.shared.wake();
    }

    /// Whether [`ProcBackend::shutdown`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::Acquire)
    }

    /// Whether env `env`'s result (or failure) is ready to be taken. With
    /// the shm exchange, a result newly published in its slot is read here:
    /// into its rows with [`Rows::Batch`], else into its cell.
    #[doc(hidden)]
    pub fn is_done(&self, env: usize) -> bool {
        match self.shared.phases.get(env) {
            DONE | FAILED => true,
            QUEUED if self.shared.rows.is_some() => {
                let mut ready = Vec::new();
                self.ready_among(std::iter::once(env), &mut ready);
                !ready.is_empty()
            }
            QUEUED if self.shared.shm.is_some() => self.shared.poll_slot(env),
            _ => false,
        }
    }

    /// Appends to `ready` those of `envs` whose result (or failure) is
    /// ready to be taken, as [`ProcBackend::is_done`] for each; with batch
    /// rows, the results newly published are read into their rows in one
    /// pass (the batches' columns made writable once for all of them).
    /// Returns whether any of those appended failed.
    #[doc(hidden)]
    pub fn ready_among(&self, envs: impl Iterator<Item = usize>, ready: &mut Vec<usize>) -> bool {
        let start = ready.len();
        let failed = |ready: &[usize]| ready[start..].iter().any(|&env| self.is_failed(env));
        let (Some(rows), Some(shm)) = (&self.shared.rows, &self.shared.shm) else {
            ready.extend(envs.filter(|&env| self.is_done(env)));
            return failed(ready);
        };
        // A cheap look at each slot first: most polls find nothing new.
        let mut fresh: SmallVec<[usize; 64]> = SmallVec::new();
        for env in envs {
            match self.shared.phases.get(env) {
                DONE | FAILED => ready.push(env),
                QUEUED if shm.published_after(env, self.shared.slots[env].lock().taken) => {
                    fresh.push(env)
                }
                _ => {}
            }
        }
        if !fresh.is_empty() {
            self.shared.read_into_rows(rows, shm, fresh, ready);
            ready[start..].sort_unstable();
        }
        failed(ready)
    }

    /// When env `env`'s result arrived (an increasing order).
    #[doc(hidden)]
    pub fn published(&self, env: usize) -> u64 {
        // Relaxed: read after `is_done`'s Acquire.
        self.shared.slots[env].published.load(Ordering::Relaxed)
    }

    /// Whether env `env` failed (its error waits to be taken).
    #[doc(hidden)]
    pub fn is_failed(&self, env: usize) -> bool {
        self.shared.phases.is_failed(env)
    }

    /// A ticket for [`ProcBackend::wait`]: take it before checking results.
    #[doc(hidden)]
    pub fn listen(&self) -> Ticket {
        Ticket {
            generation: self.shared.signal.generation(),
            bell: self.shared.shm.as_ref().map_or(0, Exchange::listen),
        }
    }

    /// Waits until something happened after `ticket` was taken (a result,
    /// a failure, a wake-up), or `deadline`. With the shm exchange the
    /// caller spins on the bell until `waiting_since` (when it began to wait
    /// for this receive, across several calls) plus a short budget, then
    /// sleeps.
    #[doc(hidden)]
    pub fn wait(&self, ticket: Ticket, deadline: Option<Instant>, waiting_since: Instant) {
        match &self.shared.shm {
            // Failures and wake-ups ring the bell too.
            Some(shm) => {
                let spin = spin_left(SHM_RECEIVER_SPIN, waiting_since);
                shm.wait_bell_spinning(ticket.bell, deadline, spin);
            }
            // The queue sleeps at once (see `pool_core::spin`).
            None => {
                let signal = &self.shared.signal;
                let target = ticket.generation.wrapping_add(1);
                signal.wait_for(target, signal.epoch(), deadline, Duration::ZERO);
            }
        }
    }

    /// Reads env `env`'s result in its cell (it must be done): the output,
    /// or the env's error.
    #[doc(hidden)]
    pub fn peek<R>(&self, env: usize, read: impl FnOnce(Output<'_>) -> R) -> Result<R, ProcError> {
        self.peek_many(&[env], |outputs| read(outputs[0]))
    }

    /// Reads the results of several done envs at once, their cells locked
    /// (in ascending order) while `read` runs; an env that failed gives its
    /// error.
    #[doc(hidden)]
    pub fn peek_many<R>(
        &self,
        envs: &[usize],
        read: impl FnOnce(&[Output<'_>]) -> R,
    ) -> Result<R, ProcError> {
        // The rows before any cell; unlocked once every cell is.
        let mut rows = self.shared.rows.as_ref().map(lock_rows);
        peek_cells(
            envs,
            |env| self.shared.slots[env].lock(),
            move |env, cell: &mut Cell| {
                if let Some(rows) = rows.as_mut() {
                    // Cannot fail: the rows and the cells have the slots'
                    // layouts.
                    rows.sync_cell(env, &mut cell.next, &mut cell.root);
                }
            },
            |cell| match &cell.error {
                Some(err) => Err(err.clone()),
                None => Ok(Output {
                    op: cell.op,
                    next: &cell.next,
                    root: &cell.root,
                }),
            },
            read,
        )
    }

    /// The results of `op` of `envs` (done, none failed, distinct,
    /// ascending) as batches, from the batch rows that
    /// [`Rows::Batch`] fills with the shm exchange (`BatchRows::gather`): the
    /// `"next"` batch (for a step) and the root batch (for a reset or
    /// step-and-maybe-reset). For all envs in order these are the rows
    /// themselves (shared: the next results are written into a copy if the
    /// caller still holds them); otherwise their rows gathered into batches
    /// of their own. `None` without batch rows.
    #[doc(hidden)]
    pub fn gather(
        &self,
        op: Op,
        envs: &[usize],
    ) -> Option<(Option<TensorDict>, Option<TensorDict>)> {
        lock_rows(self.shared.rows.as_ref()?).gather(op, envs)
    }

    /// Marks env `env`'s result taken: a send may address it again.
    #[doc(hidden)]
    pub fn release(&self, env: usize) {
        self.shared.slots[env].lock().error = None;
        self.shared.phases.release(env);
    }

    /// Stops the workers: each is asked to stop, given the shutdown
    /// deadline, then killed; every one is reaped, and the reader threads
    /// are joined. Receivers are woken; idempotent; also done on drop.
    pub fn shutdown(&self) {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return;
        }
        let shared = &self.shared;
        shared.closing.store(true, Ordering::SeqCst);
        let stop = ToWorker::Stop.encode();
        for worker in &shared.workers {
            let stream = lock(&worker.writer);
            let _ = write_frame(&stream, &stop, &[]);
        }
        let deadline = Instant::now() + self.shutdown_timeout;
        for worker in &shared.workers {
            let child = worker.take_child();
            if let Some(mut child) = child {
                let left = deadline.saturating_duration_since(Instant::now());
                if exit_reason(&mut child, left).is_none() {
                    let _ = child.kill();
                }
                let _ = child.wait();
            }
            // Ends the reader's wait even if some other process still
            // holds the worker's end.
            let stream = lock(&worker.writer);
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        let readers = std::mem::take(&mut *lock(&self.readers));
        for reader in readers {
            let _ = reader.join();
        }
        shared.signal.close();
        shared.wake();
    }
}

impl Drop for ProcBackend {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Shared {
    fn wake(&self) {
        self.signal.notify();
        if let Some(shm) = &self.shm {
            shm.ring();
        }
    }

    /// The error of an env of dead worker `w`.
    fn died_error(&self, w: usize, fallback: String) -> ProcError {
        let worker = &self.workers[w];
        let reason = lock(&worker.death).clone().unwrap_or(fallback);
        ProcError::WorkerDied {
            worker: w,
            envs: worker.envs.clone().collect(),
            reason,
        }
    }

    /// Fails env `env` with `err` if its command is still in flight; whether
    /// it did.
    fn fail(&self, env: usize, err: ProcError) -> bool {
        let slot = &self.slots[env];
        let mut cell = slot.lock();
        if self.phases.get(env) != QUEUED {
            return false;
        }
        cell.error = Some(err);
        // Relaxed: read after the Acquire of FAILED.
        slot.published
            .store(self.signal.generation(), Ordering::Relaxed);
        // The error is visible to whoever sees FAILED.
        self.phases.publish(env, true);
        true
    }

    /// Shm: reads a result newly published in env `env`'s slot into its
    /// cell; whether the env is done (or failed) now.
    fn poll_slot(&self, env: usize) -> bool {
        let Some(shm) = &self.shm else { return false };
        self.poll_with(env, |cell| {
            let Cell {
                next, root, taken, ..
            } = cell;
            shm.read_into(env, *taken, next, root)
        })
    }

    /// Shm: reads a result newly published in env `env`'s slot with `read`
    /// (given its cell, whose clock says what was read last); whether the
    /// env is done (or failed) now.
    pub(super) fn poll_with(
        &self,
        env: usize,
        read: impl FnOnce(&mut Cell) -> Result<Option<exchange::SlotRead>, ReadError>,
    ) -> bool {
        let slot = &self.slots[env];
        let mut cell = slot.lock();
        match self.phases.get(env) {
            QUEUED => {}
            DONE | FAILED => return true,
            _ => return false,
        }
        match read(&mut cell) {
            Ok(Some(read)) => {
                cell.taken = read.clock;
                // Relaxed: read after the Acquire of DONE.
                slot.published.store(read.published_ns, Ordering::Relaxed);
                // The result read above is visible to whoever sees DONE.
                self.phases.publish(env, false);
                true
            }
            Ok(None) | Err(ReadError::Busy { .. }) => false,
            Err(err) => {
                cell.error = Some(ProcError::Shm {
                    message: format!("env {env}: {err}"),
                });
                self.phases.publish(env, true);
                true
            }
        }
    }
}
