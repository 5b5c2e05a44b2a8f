//! `ThreadBackend`: envs owned by slots, stepped by a fixed set of worker
//! threads that pull env indices from a queue.
//!
//! # Caller contract
//! The methods that move commands and results (`send`, `is_done`, `wait`,
//! `wait_for`, `help`, `peek`, `peek_many`, `gather`, `release`, `take`,
//! `published`, ...) are how the `pool` facade drives this backend, under
//! the facade's rules (a result is peeked only once done, released once
//! taken, an env sent to by one caller at a time). They are hidden from
//! these docs and are not a stable API: use `pool::AsyncEnvPool`.
//!
//! # Files
//! `start.rs` builds the envs and starts the workers, `cell.rs` is one
//! env's cell and what a worker does with it, `inputs.rs` what a send
//! checks inputs against, `worker.rs` the worker loop and the publication
//! of a result, `help.rs` a receiver's help; this file holds the shared
//! state and the caller contract (send, wait, peek, gather, release,
//! shutdown).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use envs::{Env, EnvError, EnvSpecs};
use pool_core::phase::{DONE, FAILED};
use pool_core::spin::HELP_MAX_ENV_TIME;
use pool_core::{lock, peek_cells, Output, Phases, Signal};
use tensordict::TensorDict;

use crate::queue::WorkQueue;
use crate::ThreadError;

use self::cell::{sync_root, Cell};
use self::input_rows::InputRows;
use self::inputs::{Checked, Inputs};
use self::row_store::{RowStore, RowViews};
use self::worker::{Held, SpareNaps};

mod cell;
mod help;
#[allow(unsafe_code)]
mod input_rows;
mod inputs;
#[allow(unsafe_code)]
mod row_store;
mod start;
#[cfg(test)]
mod tests;
mod worker;

pub use pool_core::Op;

/// Builds one env, in the thread that builds the backend.
pub type EnvFactory = Box<dyn FnOnce() -> Result<Box<dyn Env>, EnvError> + Send>;

/// How long shutdown waits for the worker threads to finish the envs they
/// are stepping before it leaves them behind.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// What the backend and its workers share.
struct Shared {
    /// Per env: its env, buffers and result.
    cells: Vec<Mutex<Cell>>,
    /// Per env, side by side (a receiver reads many at once): where it
    /// stands.
    phases: Phases,
    /// Per env: when its last result was published (a generation):
    /// receivers that take fewer results than are ready take the oldest
    /// first.
    published: Vec<AtomicU64>,
    /// With [`Rows::Batch`](crate::Rows::Batch) and envs of one layout:
    /// every env's latest result in its row of a batch, lent to the env
    /// (its buffers are views of its rows) or written by the worker that
    /// ran it (`RowStore`). Locked after an env's cell, never before one.
    batch: Option<Mutex<RowStore>>,
    /// With lent batch rows: their view checks, for a worker to find where
    /// an env's result is as it runs it (`RowStore::views`).
    views: Option<RowViews>,
    queue: WorkQueue,
    done: Signal,
    workers: usize,
    /// The spare worker, the last, with workers on every core (at least
    /// two) and none pinned: while envs are quick (as for a receiver's
    /// help, `HELP_MAX_ENV_TIME`) it rests, claiming nothing (`worker.rs`;
    /// sends to some envs queue nothing for it, and what a send to every
    /// env queues for it a helping receiver takes), so that the workers
    /// and the calling thread, which helps in a synchronous step and does
    /// the pool's bookkeeping in an asynchronous one, are no more threads
    /// than the cores: a third thread on two cores takes the core of
    /// whichever is running. It
    /// works as the others while envs are slow, and claims queued jobs
    /// that wait on a stuck worker ([`pool_core::spin::SPARE_NAP`]).
    spare: Option<usize>,
    /// How long the spare worker naps while it rests.
    spare_naps: SpareNaps,
    /// Whether the spare worker naps (a hint: tests wait for it).
    spare_napping: AtomicBool,
    /// The spare worker's thread, set as it starts.
    spare_thread: OnceLock<std::thread::Thread>,
    /// How long a receiver spins before sleeping: `RECEIVER_SPIN`, or the
    /// shorter `RECEIVER_SPIN_NO_SPARE_CORE` when the workers already use
    /// every core (`pool_core::spin`).
    receiver_spin: std::time::Duration,
    /// About how long a recent env step took, in nanoseconds (a moving
    /// average over runs of steps, updated by whoever ran them): receivers
    /// help only while envs are quick, and workers publish quick envs'
    /// results in runs.
    env_nanos: AtomicU64,
    /// Per worker: the results it ran but has not published yet (a run:
    /// `worker.rs`), each with whether it failed. Locked before any cell.
    held: Vec<Mutex<Held>>,
    /// Per worker: when the oldest of its held results was run (ns since
    /// `clock`, plus one; 0: none), for receivers to publish a run whose
    /// worker is inside a long step. A hint: `held` is read under its lock.
    held_since: Vec<AtomicU64>,
    /// The origin of `held_since`.
    clock: Instant,
}

impl Shared {
    /// Whether env steps are quick (a moving average under
    /// `HELP_MAX_ENV_TIME`): receivers help, and the spare worker rests.
    fn envs_are_quick(&self) -> bool {
        self.env_nanos.load(Ordering::Relaxed) < HELP_MAX_ENV_TIME.as_nanos() as u64
    }

    /// Whether the spare worker rests (see [`Shared::spare`]): it claims
    /// nothing, and sends to some envs queue nothing for it.
    fn spare_rests(&self) -> bool {
        self.spare.is_some() && self.envs_are_quick()
    }

    /// Wakes the spare worker from a nap, if it naps or is about to
    /// (`std::thread::park_timeout`: an unpark before the park ends the
    /// park at once): after a send once envs are slow, so that the jobs
    /// queued for it do not wait for the end of its nap. A spare that is
    /// not resting is asleep on the queue's signal, or working: one atomic
    /// swap then, which leaves a token that cuts its next nap short (the
    /// nap goes on for the rest: `worker.rs`, `nap`).
    fn wake_spare(&self) {
        if let Some(spare) = self.spare_thread.get() {
            spare.unpark();
        }
    }

    /// Nanoseconds since `clock`.
    fn now(&self) -> u64 {
        u64::try_from(self.clock.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Envs stepped by worker threads. Each env lives in a slot; a send copies
/// the env's input into the slot and queues the env (a chunk of envs per
/// worker); a worker claims queued envs one at a time, runs each, and
/// publishes its result in a short run (a result never waits long for
/// another env's step, and an env queued behind a long step is claimed by
/// another worker); the owner takes the
/// result out. An env is stepped by one worker at a time.
///
/// This type does the work; the pool's semantics (busy envs, targets,
/// `min_get`, ordering, stacking) are the facade's.
///
/// # Panics
/// The methods that take an env index (`templates`, `is_done`, `is_failed`,
/// `published`, `peek`, `peek_many`, `release`, `take`) panic if it is not
/// below [`ThreadBackend::num_envs`]; `send` returns an error instead.
pub struct ThreadBackend {
    shared: Arc<Shared>,
    specs: Vec<EnvSpecs>,
    names: Vec<String>,
    inputs: Inputs,
    /// The envs' inputs as rows of one batch that a send writes (envs whose
    /// inputs have one layout of tensors), else `None`: each worker copies
    /// its env's input from the sent tensordict.
    input_rows: Option<InputRows>,
    handles: Mutex<Vec<JoinHandle<()>>>,
    /// Whether the worker threads are pinned ([`ThreadOptions::affinity`]).
    pinned: bool,
    /// The jobs of a send to every env, env `j` from row `j`
    /// ([`ThreadBackend::every_env_jobs`]).
    every_env_jobs: Box<[(usize, Option<usize>)]>,
}

impl std::fmt::Debug for ThreadBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadBackend")
            .field("envs", &self.names)
            .field("workers", &self.shared.workers)
            .finish()
    }
}

impl ThreadBackend {
    /// Number of envs.
    pub fn num_envs(&self) -> usize {
        self.specs.len()
    }

    /// The jobs of a send to every env, env `j` from row `j` of the sent
    /// tensordict: a send given this very list knows it without a look at
    /// each job.
    #[doc(hidden)]
    pub fn every_env_jobs(&self) -> &[(usize, Option<usize>)] {
        &self.every_env_jobs
    }

    /// Number of worker threads.
    pub fn num_workers(&self) -> usize {
        self.shared.workers
    }

    /// The specs of each env.
    pub fn env_specs(&self) -> &[EnvSpecs] {
        &self.specs
    }

    /// The name of each env.
    pub fn env_names(&self) -> &[String] {
        &self.names
    }

    /// Zeros shaped like env `env`'s `"next"` result and root result (the
    /// templates a caller stacks results into).
    pub fn templates(&self, env: usize) -> (TensorDict, TensorDict) {
        let cell = lock(&self.shared.cells[env]);
        (cell.runner.next.clone(), cell.runner.root.clone())
    }

    /// Sends `op` to each `(env, row)` of `jobs`: queues the envs, each
    /// with its inputs (action and state entries): row `row` of `src` (or
    /// `src` itself when `row` is `None`), which the worker that runs the env
    /// copies into its input buffer (the send shares `src`, a clone, and
    /// copies nothing). A reset needs no input (`src` may be `None`); a step
    /// does.
    ///
    /// Every input is checked before anything is queued, so an invalid input
    /// queues nothing. A send to an env whose result was not taken, to one
    /// env twice, or to an env past the last is an error naming it (and
    /// queues nothing). Sends to one env from several threads at once are
    /// the caller's to prevent (the facade's busy guard does).
    #[doc(hidden)]
    pub fn send(
        &self,
        op: Op,
        jobs: &[(usize, Option<usize>)],
        src: Option<&TensorDict>,
    ) -> Result<(), ThreadError> {
        self.send_shared(op, jobs, src.map(|src| Arc::new(src.clone())).as_ref())
    }

    /// [`ThreadBackend::send`] of a tensordict the caller already shares:
    /// the queued jobs take another reference to it rather than a clone
    /// (the facade keeps each send's input in an `Arc` anyway).
    #[doc(hidden)]
    pub fn send_shared(
        &self,
        op: Op,
        jobs: &[(usize, Option<usize>)],
        shared_src: Option<&Arc<TensorDict>>,
    ) -> Result<(), ThreadError> {
        let src = shared_src.map(|src| &**src);
        // A send to every env, env `j` from row `j` (the synchronous path):
        // each env addressed once by construction, queued as one chunk per
        // worker's block. Known at once when the jobs are the backend's own
        // list of them.
        let every_env = std::ptr::eq(jobs, &*self.every_env_jobs)
            || jobs.len() == self.num_envs()
                && jobs.iter().enumerate().fold(true, |all, (j, &(env, row))| {
                    all & (env == j) & (row == Some(j))
                });
        if !every_env {
            if let Some(&(env, _)) = jobs.iter().find(|&&(env, _)| env >= self.num_envs()) {
                return Err(ThreadError::NoSuchEnv {
                    env,
                    num_envs: self.num_envs(),
                });
            }
        }
        // The envs are claimed first (the claim is the check that each is
        // idle, and that none is addressed twice: its second claim fails),
        // and given back if an input is wrong.
        let claimed = input_rows::claim(&self.shared.phases, jobs)
            .map_err(|env| ThreadError::Busy { env })?;
        // Every input is checked here, once per kind of env input buffer
        // (the rows of one send all have one layout), before anything is
        // queued; then written into the envs' input rows, or copied by the
        // worker that runs the env.
        let mut checked = Checked::default();
        let rows = src.and_then(|src| src.batch_size().first().copied());
        let takes_input = |env: usize| op != Op::Reset || self.inputs.reset_takes_input[env];
        // A send to envs of one kind (every env, or some, each from a row):
        // one check for all.
        let checked_at_once = if every_env {
            self.inputs.check_every_env(op, src)
        } else {
            self.inputs.check_alike_jobs(op, src, jobs)
        };
        let to_check: &[(usize, Option<usize>)] = if checked_at_once { &[] } else { jobs };
        if let Err(err) = self.check_inputs(op, to_check, src, rows, &mut checked) {
            claimed.give_back();
            return Err(err);
        }
        if let (Some(input_rows), Some(src)) = (&self.input_rows, src) {
            // The inputs straight into the rows the envs read (checked
            // above, so this cannot fail but for a bug).
            input_rows
                .write(claimed, every_env, src, takes_input)
                .map_err(|(env, source)| ThreadError::Input {
                    env,
                    name: self.names[env].clone(),
                    source: Box::new(source),
                })?;
        }
        if let Some(batch) = &self.shared.batch {
            // The envs may write their lent rows from now on: the rows no
            // longer hold their results.
            lock(batch).sent(jobs.iter().map(|&(env, _)| env));
        }
        // The jobs go straight into the workers' queues, a chunk per
        // worker's block of envs. While the spare worker rests, a send to
        // some envs queues none for it; a send to every env (a synchronous
        // step, whose receiver helps) queues its block too, which a helping
        // receiver takes first (`help`): the same envs on the calling
        // thread every step, apart from the other workers'.
        let shared_src = shared_src.cloned();
        let rests = self.shared.spare_rests();
        let but_last = rests && !every_env;
        if every_env {
            self.shared
                .queue
                .push_every_env(op, shared_src, takes_input, but_last);
        } else {
            self.shared
                .queue
                .push_jobs(op, shared_src, jobs, takes_input, but_last);
        }
        if !rests {
            self.shared.wake_spare();
        }
        Ok(())
    }

    /// Checks the inputs of `jobs` (see [`ThreadBackend::send`]): `rows` is
    /// `src`'s first dim; `checked` the kinds of input checked so far.
    fn check_inputs(
        &self,
        op: Op,
        jobs: &[(usize, Option<usize>)],
        src: Option<&TensorDict>,
        rows: Option<usize>,
        checked: &mut Checked,
    ) -> Result<(), ThreadError> {
        for &(env, row) in jobs {
            match src {
                // Only state entries travel into a reset, when the env has any.
                _ if op == Op::Reset && !self.inputs.reset_takes_input[env] => {}
                Some(src) => self
                    .inputs
                    .check(env, src, row, rows, checked)
                    .map_err(|source| ThreadError::Input {
                        env,
                        name: self.names[env].clone(),
                        source: Box::new(source),
                    })?,
                None if op == Op::Reset => {}
                None => {
                    return Err(ThreadError::Input {
                        env,
                        name: self.names[env].clone(),
                        source: Box::new(tensordict::TensorDictError::KeyNotFound {
                            key: "action".into(),
                            available: Vec::new(),
                        }),
                    })
                }
            }
        }
        Ok(())
    }

    /// Wakes every thread waiting for results once (after results were taken
    /// by someone else, a waiter may have to give up).
    #[doc(hidden)]
    pub fn wake_receivers(&self) {
        self.shared.done.wake_all();
    }

    /// True once [`ThreadBackend::shutdown`] has begun.
    pub fn is_shut_down(&self) -> bool {
        self.shared.done.is_closed()
    }

    /// True if env `env`'s result (or error) is waiting to be taken.
    #[doc(hidden)]
    #[inline]
    pub fn is_done(&self, env: usize) -> bool {
        self.shared.phases.is_done(env)
    }

    /// How many of a range of envs have their result (or error) waiting to
    /// be taken, and whether any failed; appended to `ready` as
    /// [`ThreadBackend::ready_among`] does when at least `min` are or one
    /// failed ([`Phases::done_in`](pool_core::Phases::done_in)).
    #[doc(hidden)]
    #[inline]
    pub fn ready_in(
        &self,
        envs: std::ops::Range<usize>,
        min: usize,
        ready: &mut Vec<usize>,
    ) -> (usize, bool) {
        self.shared.phases.done_in(envs, min, ready)
    }

    /// Appends to `ready` those of `envs` whose result (or error) is
    /// waiting to be taken, as [`ThreadBackend::is_done`] for each; returns
    /// whether any of them failed (one look at each env's phase tells both).
    #[doc(hidden)]
    #[inline]
    pub fn ready_among(&self, envs: impl Iterator<Item = usize>, ready: &mut Vec<usize>) -> bool {
        let mut failed = false;
        for env in envs {
            match self.shared.phases.get(env) {
                DONE => ready.push(env),
                FAILED => {
                    ready.push(env);
                    failed = true;
                }
                _ => {}
            }
        }
        failed
    }

    /// When env `env`'s result was published (a generation; smaller is
    /// older). Meaningful once [`ThreadBackend::is_done`] is true.
    #[doc(hidden)]
    #[inline]
    pub fn published(&self, env: usize) -> u64 {
        self.shared.published[env].load(Ordering::Relaxed)
    }

    /// True if env `env` failed and its error is waiting to be taken.
    #[doc(hidden)]
    #[inline]
    pub fn is_failed(&self, env: usize) -> bool {
        self.shared.phases.is_failed(env)
    }

    /// The number of results published so far (moves on every result).
    #[doc(hidden)]
    pub fn generation(&self) -> u64 {
        self.shared.done.generation()
    }

    /// Waits until a result is published after generation `seen`, or the
    /// deadline; returns the generation then. Spins briefly, then sleeps.
    #[doc(hidden)]
    pub fn wait(&self, seen: u64, deadline: Option<Instant>) -> u64 {
        let generation = self.shared.done.wait(seen, deadline);
        if generation == seen {
            self.rescue();
        }
        generation
    }

    /// Publishes the runs of results that workers have held for longer than
    /// `RESCUE_AFTER` (their worker is inside a long step): a receiver that
    /// waits or looks again calls it, so that no finished result waits on
    /// another env's step for much longer than that. Cheap when nothing is
    /// held: one load per worker.
    #[doc(hidden)]
    pub fn rescue(&self) {
        worker::rescue(&self.shared);
    }

    /// The number of [`ThreadBackend::wake_receivers`] calls so far; read it
    /// (with [`ThreadBackend::generation`]) before looking at the state a
    /// wait depends on.
    #[doc(hidden)]
    pub fn epoch(&self) -> u64 {
        self.shared.done.epoch()
    }

    /// Waits until the generation reaches `target` (for example the
    /// generation seen plus the number of results still needed), a
    /// [`ThreadBackend::wake_receivers`] after `epoch`, a shutdown, or the
    /// deadline; returns the generation then.
    ///
    /// The caller spins (yielding) until `waiting_since` (when it began to
    /// wait for this receive, across several calls) plus a short budget,
    /// then sleeps. When the workers are as many as the cores, the budget
    /// is short: a spinning caller would take a core from a worker.
    #[doc(hidden)]
    pub fn wait_for(
        &self,
        target: u64,
        epoch: u64,
        deadline: Option<Instant>,
        waiting_since: Instant,
    ) -> u64 {
        let spin = self
            .shared
            .receiver_spin
            .saturating_sub(waiting_since.elapsed());
        let generation = self.shared.done.wait_for(target, epoch, deadline, spin);
        if generation < target {
            self.rescue();
        }
        generation
    }

    /// Reads env `env`'s result without taking it: calls `read` on it while
    /// the slot is locked; the result stays (a later `peek` or `take` sees it
    /// again). An env that failed gives its error (which stays too).
    /// The caller guarantees the env is done ([`ThreadBackend::is_done`]).
    #[doc(hidden)]
    pub fn peek<R>(
        &self,
        env: usize,
        read: impl FnOnce(Output<'_>) -> R,
    ) -> Result<R, ThreadError> {
        self.peek_many(&[env], |outputs| read(outputs[0]))
    }

    /// Reads the results of several envs at once, all their slots locked (in
    /// ascending order) while `read` runs: what a batch gathers column by
    /// column. An env that failed gives its error. The caller guarantees the
    /// envs are done and distinct.
    #[doc(hidden)]
    pub fn peek_many<R>(
        &self,
        envs: &[usize],
        read: impl FnOnce(&[Output<'_>]) -> R,
    ) -> Result<R, ThreadError> {
        peek_cells(
            envs,
            |env| lock(&self.shared.cells[env]),
            |env, cell: &mut Cell| {
                // A deferred root here is in its batch row (the worker
                // synced any other), so this copy fits; if it did not, the
                // error is the env's.
                sync_root(env, cell);
            },
            |cell| match &cell.error {
                Some(err) => Err(err.clone()),
                None => Ok(Output {
                    op: cell.op,
                    next: &cell.runner.next,
                    root: &cell.runner.root,
                }),
            },
            read,
        )
    }

    /// The results of `op` of `envs` (done, distinct, ascending) as batches,
    /// from the batch rows of [`Rows::Batch`](crate::Rows::Batch): the
    /// `"next"` batch (for a step) and the root batch (for a reset or
    /// step-and-maybe-reset). Rows lent to the envs (results of tensors
    /// only: the envs write them in place) are copied out, all the
    /// batch's tensors in one storage; rows the workers copy results into
    /// (`BatchRows::gather`) are, for all envs in order, the backend's
    /// batches themselves (shared: the next results are written into a
    /// copy if the caller still holds them), otherwise their rows gathered
    /// into new batches. `None` without batch rows, or if a result is not
    /// in its row (read it with [`ThreadBackend::peek_many`], which
    /// reports what is wrong with it).
    #[doc(hidden)]
    pub fn gather(
        &self,
        op: Op,
        envs: &[usize],
    ) -> Option<(Option<TensorDict>, Option<TensorDict>)> {
        lock(self.shared.batch.as_ref()?).gather(op, envs)
    }

    /// Marks env `env` idle, dropping its result or error (after a
    /// [`ThreadBackend::peek`]); an env without one (in flight, or idle)
    /// is left as it is. Takes no lock: the next send overwrites the
    /// slot's buffers and clears any error.
    #[doc(hidden)]
    #[inline]
    pub fn release(&self, env: usize) {
        self.shared.phases.release(env);
    }

    /// Marks `envs` idle once their receiver took their results (each is
    /// done or failed, as the receiver's look saw): a store each, no
    /// exchange ([`Phases::release_taken`](pool_core::Phases::release_taken)).
    #[doc(hidden)]
    #[inline]
    pub fn release_taken(&self, envs: &[usize]) {
        for &env in envs {
            self.shared.phases.release_taken(env);
        }
    }

    /// Takes env `env`'s result: calls `read` on it while the slot is
    /// locked, then marks the env idle. An env that failed gives its error.
    /// The caller guarantees the env is done ([`ThreadBackend::is_done`]).
    #[doc(hidden)]
    pub fn take<R>(
        &self,
        env: usize,
        read: impl FnOnce(Output<'_>) -> R,
    ) -> Result<R, ThreadError> {
        let result = self.peek(env, read);
        self.release(env);
        result
    }

    /// Stops the workers and joins them. A worker finishes the env it is
    /// stepping first (a thread cannot be killed): one still inside an env
    /// after [`SHUTDOWN_GRACE`] is left behind, detached, to exit once the
    /// env returns, so that an env step that never returns cannot hang
    /// shutdown (or drop). Queued envs that no worker started are dropped.
    /// Idempotent.
    pub fn shutdown(&self) {
        self.shared.queue.stop();
        // Receivers blocked on results return (and see the shutdown).
        self.shared.done.close();
        let handles = std::mem::take(&mut *lock(&self.handles));
        // A resting spare worker naps: woken to see the stop.
        for handle in &handles {
            handle.thread().unpark();
        }
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        for handle in handles {
            while !handle.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            if handle.is_finished() {
                // A worker never panics (env panics are caught); nothing to
                // report.
                let _ = handle.join();
            }
        }
    }
}

impl Drop for ThreadBackend {
    fn drop(&mut self) {
        self.shutdown();
    }
}
