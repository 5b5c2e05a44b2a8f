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

use std::num::NonZeroUsize;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use envs::{Env, EnvError, EnvSpecs};
use pool_core::spin::{HELP_MAX_ENV_TIME, RECEIVER_SPIN, RECEIVER_SPIN_NO_SPARE_CORE};
use pool_core::{lock, Output, Phases, Runner, Signal};
use tensordict::TensorDict;

use crate::queue::{Job, WorkQueue, HELP_CHUNK};
use crate::{Rows, ThreadError, ThreadOptions};

pub use pool_core::Op;

/// Builds one env, in the thread that builds the backend.
pub type EnvFactory = Box<dyn FnOnce() -> Result<Box<dyn Env>, EnvError> + Send>;

/// How long shutdown waits for the worker threads to finish the envs they
/// are stepping before it leaves them behind.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// In [`BatchRows::rows`]: the env's row of the `"next"` batch holds its
/// current result.
const NEXT_ROW: u8 = 1;
/// In [`BatchRows::rows`]: the env's row of the root batch holds its
/// current result.
const ROOT_ROW: u8 = 2;

/// One env, its buffers and its result.
struct Cell {
    env: Box<dyn Env>,
    name: String,
    op: Op,
    /// Whether a reset was given an input (its state entries).
    reset_with_input: bool,
    /// The env's buffers (input, `"next"` entries, root), and what it was
    /// doing (for a panic's message).
    runner: Runner,
    error: Option<ThreadError>,
}

/// Every env's latest result in its row of two batches of all envs
/// (EnvPool's state buffer): a worker copies each result there, column by
/// column, before it publishes it, so that a receive of many
/// results copies nothing (all envs, in order: the batches themselves,
/// copied on write if the caller still holds them when the next results
/// arrive) or gathers rows of one storage per entry.
struct BatchRows {
    /// `[num_envs, ..]`: the `"next"` results.
    next: TensorDict,
    /// `[num_envs, ..]`: the reset results and next roots.
    root: TensorDict,
    /// Per env: which of its rows (`NEXT_ROW`, `ROOT_ROW`) hold its current
    /// result (none after a failure, or if its result did not fit).
    rows: Vec<u8>,
    /// The batches last gathered from `next` and `root` for a receive of
    /// some envs: the next gather of as many rows writes into them (in place
    /// once the caller has dropped them, so a steady collector allocates
    /// nothing; copied on write if it still holds them).
    gathered: [Option<TensorDict>; 2],
}

impl BatchRows {
    /// Batches for `cells` if all their results have one layout. The
    /// cells' buffers then share their keys with the first cell's (so that
    /// the copies into the batches compare keys by address).
    fn new(cells: &[Mutex<Cell>]) -> Option<BatchRows> {
        let mut cells: Vec<MutexGuard<'_, Cell>> = cells.iter().map(lock).collect();
        let first = cells.first()?;
        let mut next = TensorDict::zeros_stacked(&first.runner.next, cells.len()).ok()?;
        let mut root = TensorDict::zeros_stacked(&first.runner.root, cells.len()).ok()?;
        let nexts: Vec<&TensorDict> = cells.iter().map(|c| &c.runner.next).collect();
        let roots: Vec<&TensorDict> = cells.iter().map(|c| &c.runner.root).collect();
        next.write_rows(&nexts).ok()?;
        root.write_rows(&roots).ok()?;
        let (first_next, first_root) = (cells[0].runner.next.clone(), cells[0].runner.root.clone());
        for cell in cells.iter_mut().skip(1) {
            // Same layout (checked above): the first cell's keys with this
            // cell's values (written into copies of the storage).
            let mut own = first_next.clone();
            own.fill_from(&cell.runner.next).ok()?;
            cell.runner.next = own;
            let mut own = first_root.clone();
            own.fill_from(&cell.runner.root).ok()?;
            cell.runner.root = own;
        }
        Some(BatchRows {
            next,
            root,
            rows: vec![0; cells.len()],
            gathered: [None, None],
        })
    }

    /// Copies the result of env `env` (if it ran without error) into its
    /// rows and records which rows hold it. Returns whether its deferred
    /// root was written from its step row; any other deferred root is the
    /// caller's to bring up to date.
    fn store(&mut self, env: usize, cell: &Cell) -> bool {
        self.rows[env] = 0;
        if cell.error.is_some() {
            return false;
        }
        if cell.op != Op::Reset
            && self
                .next
                .write_rows_at(&[env], &[&cell.runner.next])
                .is_ok()
        {
            self.rows[env] |= NEXT_ROW;
        }
        if cell.op == Op::Step {
            return false;
        }
        if !cell.runner.root_is_next() {
            // If it does not fit (an env changed its result's keys or
            // shapes), the row stays unmarked: the receiver then reads the
            // result from its slot and reports it.
            if self
                .root
                .write_rows_at(&[env], &[&cell.runner.root])
                .is_ok()
            {
                self.rows[env] |= ROOT_ROW;
            }
            return false;
        }
        // The root is its step's entries (a step-and-maybe-reset that reset
        // nothing, its root deferred: `Runner::defer_root`): copied from the
        // step row just written.
        let copied = self.rows[env] & NEXT_ROW != 0
            && self.root.fill_rows_from(&[env], &self.next, &[env]).is_ok();
        if copied {
            self.rows[env] |= ROOT_ROW;
        }
        copied
    }
}

/// What a send checks an env's input against: its input buffer's kind
/// (envs whose buffers are alike share one) and whether a reset takes one.
struct Inputs {
    /// Per env: the index of its kind in `templates`.
    kind: Vec<usize>,
    /// One zeroed input buffer per kind.
    templates: Vec<TensorDict>,
    /// Per env: whether a reset is given the sent state entries (the env
    /// has state entries).
    reset_takes_input: Vec<bool>,
}

impl Inputs {
    fn new(cells: &[Mutex<Cell>], specs: &[EnvSpecs]) -> Inputs {
        let mut inputs = Inputs {
            kind: Vec::with_capacity(cells.len()),
            templates: Vec::new(),
            reset_takes_input: Vec::with_capacity(cells.len()),
        };
        for (cell, specs) in cells.iter().zip(specs) {
            let input = &lock(cell).runner.input;
            let kind = match inputs.templates.iter().position(|t| t == input) {
                Some(kind) => kind,
                None => {
                    inputs.templates.push(input.clone());
                    inputs.templates.len() - 1
                }
            };
            inputs.kind.push(kind);
            inputs
                .reset_takes_input
                .push(!input.is_empty() && !specs.full_state_spec().is_empty());
        }
        inputs
    }
}

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
    /// With [`Rows::Batch`] and envs of one layout: every
    /// env's latest result in its row of a batch. Locked after an env's
    /// cell, never before one.
    batch: Option<Mutex<BatchRows>>,
    queue: WorkQueue,
    done: Signal,
    workers: usize,
    /// How long a receiver spins before sleeping: zero when the workers
    /// already use every core.
    receiver_spin: std::time::Duration,
    /// About how long a recent env step took, in nanoseconds (a moving
    /// average over runs of steps, updated by whoever ran them): receivers
    /// help only while envs are quick.
    env_nanos: AtomicU64,
}

/// Envs stepped by worker threads. Each env lives in a slot; a send copies
/// the env's input into the slot and queues the env; a worker takes queued
/// envs one at a time, runs each, and publishes its result in the slot at
/// once (a result never waits for another env's step, and an env queued
/// behind a long step is taken by another worker); the owner takes the
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
    handles: Mutex<Vec<JoinHandle<()>>>,
    /// Whether the worker threads are pinned ([`ThreadOptions::affinity`]).
    pinned: bool,
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
    /// Builds the envs (in this thread, in order) and starts the workers.
    /// An env that fails or panics while being built is an error naming it;
    /// so is a bad [`ThreadOptions::affinity`] (checked before any env is
    /// built) or one that a worker thread could not apply, naming the
    /// worker.
    pub fn start(
        factories: Vec<EnvFactory>,
        options: &ThreadOptions,
        rows: Rows,
    ) -> Result<ThreadBackend, ThreadError> {
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        let workers = options
            .threads
            .map_or(cores.min(factories.len().max(1)), NonZeroUsize::get);
        let pins = match &options.affinity {
            Some(affinity) => Some(affinity.resolve(workers)?),
            None => None,
        };
        let mut cells = Vec::with_capacity(factories.len());
        let mut specs = Vec::with_capacity(factories.len());
        let mut names = Vec::with_capacity(factories.len());
        for (index, factory) in factories.into_iter().enumerate() {
            let env = match catch_unwind(AssertUnwindSafe(factory)) {
                Ok(Ok(env)) => env,
                Ok(Err(source)) => {
                    return Err(ThreadError::Build {
                        env: index,
                        source: Box::new(source),
                    })
                }
                Err(payload) => {
                    return Err(ThreadError::BuildPanicked {
                        env: index,
                        message: pool_core::panic_message(&*payload),
                    })
                }
            };
            specs.push(env.specs().clone());
            names.push(env.name().to_owned());
            let cell = Cell {
                name: env.name().to_owned(),
                op: Op::Reset,
                reset_with_input: false,
                runner: Runner::new(&*env),
                error: None,
                env,
            };
            cells.push(Mutex::new(cell));
        }
        let inputs = Inputs::new(&cells, &specs);
        let batch = if rows == Rows::Batch {
            BatchRows::new(&cells).map(Mutex::new)
        } else {
            None
        };
        if batch.is_some() {
            // A root that is its step's entries is copied from the step's
            // batch row (`BatchRows::store`), not into the cell first.
            for cell in &cells {
                lock(cell).runner.defer_root = true;
            }
        }
        let receiver_spin = if workers >= cores {
            RECEIVER_SPIN_NO_SPARE_CORE
        } else {
            RECEIVER_SPIN
        };
        let cells_len = cells.len();
        let shared = Arc::new(Shared {
            phases: Phases::new(cells.len()),
            published: cells.iter().map(|_| AtomicU64::new(0)).collect(),
            cells,
            batch,
            queue: WorkQueue::new(workers, cells_len),
            done: Signal::default(),
            workers,
            receiver_spin,
            // No helping until runs of steps showed quick envs.
            env_nanos: AtomicU64::new(HELP_MAX_ENV_TIME.as_nanos() as u64),
        });
        // A pinned worker reports whether it could pin itself before it
        // takes any work.
        let (report, reports) = std::sync::mpsc::channel();
        let mut handles = Vec::with_capacity(workers);
        let mut failure = None;
        for worker in 0..workers {
            let for_worker = Arc::clone(&shared);
            let pin = pins
                .as_ref()
                .map(|sets| (sets[worker].clone(), report.clone()));
            let spawned = std::thread::Builder::new()
                .name(format!("rlpool-worker-{worker}"))
                .spawn(move || {
                    if let Some((cpus, report)) = pin {
                        if !pin_worker(worker, cpus.as_slice(), &report) {
                            return;
                        }
                    }
                    worker_loop(&for_worker, worker);
                });
            match spawned {
                Ok(handle) => handles.push(handle),
                Err(err) => {
                    failure = Some(ThreadError::Spawn {
                        worker,
                        message: err.to_string(),
                    });
                    break;
                }
            }
        }
        drop(report);
        if failure.is_none() {
            // Cannot block forever: every started worker sends one report
            // (`sched_setaffinity` returns at once) or drops its sender, and
            // the iteration ends once every sender is gone. The lowest
            // worker that failed is the one reported.
            failure = reports
                .iter()
                .filter_map(|(worker, pinned): (usize, Result<(), _>)| {
                    pinned.err().map(|err| (worker, err))
                })
                .min_by_key(|&(worker, _)| worker)
                .map(|(_, err)| ThreadError::Affinity(err));
        }
        if let Some(err) = failure {
            shared.queue.stop();
            for handle in handles {
                let _ = handle.join();
            }
            return Err(err);
        }
        Ok(ThreadBackend {
            shared,
            specs,
            names,
            inputs,
            handles: Mutex::new(handles),
            pinned: pins.is_some(),
        })
    }

    /// Number of envs.
    pub fn num_envs(&self) -> usize {
        self.specs.len()
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
        // One bit per env addressed.
        let mut addressed = vec![0u64; self.num_envs().div_ceil(64)];
        for &(env, _) in jobs {
            if env >= self.num_envs() {
                return Err(ThreadError::NoSuchEnv {
                    env,
                    num_envs: self.num_envs(),
                });
            }
            let (word, bit) = (env / 64, 1u64 << (env % 64));
            if addressed[word] & bit != 0 || !self.shared.phases.is_idle(env) {
                return Err(ThreadError::Busy { env });
            }
            addressed[word] |= bit;
        }
        // Every input is checked here, once per kind of env input buffer
        // (the rows of one send all have one layout), before anything is
        // queued; the worker that runs the env copies it.
        let mut checked: Vec<(usize, bool)> = Vec::new();
        let takes_input = |env: usize| op != Op::Reset || self.inputs.reset_takes_input[env];
        for &(env, row) in jobs {
            match src {
                // Only state entries travel into a reset, when the env has any.
                _ if !takes_input(env) => {}
                Some(src) => self.check_input(env, src, row, &mut checked)?,
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
        for &(env, _) in jobs {
            // The job carries the input (the worker takes it under the
            // queue's lock); nothing else of the env's is written by a send.
            self.shared.phases.queue(env);
        }
        // The jobs go straight into the workers' queues.
        let shared_src = src.map(|src| Arc::new(src.clone()));
        self.shared.queue.push_all(jobs.iter().map(|&(env, row)| {
            Job {
                env,
                op,
                input: shared_src
                    .as_ref()
                    .filter(|_| takes_input(env))
                    .map(|src| (Arc::clone(src), row)),
            }
        }));
        Ok(())
    }

    /// Checks that env `env`'s input buffer can be filled from `src` (row
    /// `row`, or all of it), as the worker will: once per kind of input
    /// buffer and per way of reading (`checked` holds those seen by this
    /// send), and each row's index.
    fn check_input(
        &self,
        env: usize,
        src: &TensorDict,
        row: Option<usize>,
        checked: &mut Vec<(usize, bool)>,
    ) -> Result<(), ThreadError> {
        let kind = self.inputs.kind[env];
        let in_range = row.is_none_or(|row| src.batch_size().first().is_some_and(|&n| row < n));
        if in_range && checked.contains(&(kind, row.is_some())) {
            return Ok(());
        }
        // A copy into a scratch buffer: the errors of the worker's copy.
        let mut scratch = self.inputs.templates[kind].clone();
        copy_input(src, row, &mut scratch).map_err(|source| ThreadError::Input {
            env,
            name: self.names[env].clone(),
            source: Box::new(source),
        })?;
        checked.push((kind, row.is_some()));
        Ok(())
    }

    /// Runs queued envs (at most 8, each published as it finishes) in the
    /// calling thread, if any is queued and env steps have been quick (a
    /// moving average under `HELP_MAX_ENV_TIME`): a receiver that would
    /// otherwise wait helps the workers. Returns
    /// whether it ran anything. Never with [`ThreadOptions::affinity`]:
    /// the envs then run on the worker threads' CPUs only.
    ///
    /// On as many workers as cores, a waiting receiver shares a core with
    /// a worker; waiting, it hands that core back and forth with the
    /// worker at each yield. Helping, it steps the envs in the worker's
    /// place instead, and the batch is done sooner (docs/performance.md has
    /// the `perf sched` figures). It blocks for as long as those envs take, so a
    /// receiver helps only when it has to wait for every queued env anyway.
    #[doc(hidden)]
    pub fn help(&self) -> bool {
        let quick =
            self.shared.env_nanos.load(Ordering::Relaxed) < HELP_MAX_ENV_TIME.as_nanos() as u64;
        if self.pinned || !quick {
            return false;
        }
        let mut timing = StepTiming::new();
        let mut ran = 0;
        while ran < HELP_CHUNK {
            let Some(job) = self.shared.queue.try_pop_any() else {
                break;
            };
            timing.start(job.op);
            run_job(&self.shared, &job);
            timing.ran(&self.shared.env_nanos);
            ran += 1;
        }
        // The run ends here (the helper returns to its receive).
        timing.end(&self.shared.env_nanos);
        ran > 0
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
        self.shared.done.wait(seen, deadline)
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
        self.shared.done.wait_for(target, epoch, deadline, spin)
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
        let mut cell = lock(&self.shared.cells[env]);
        // A deferred root here is in its batch row (the worker synced any
        // other), so this copy fits; if it did not, the error is the env's.
        sync_root(env, &mut cell);
        match &cell.error {
            Some(err) => Err(err.clone()),
            None => Ok(read(Output {
                op: cell.op,
                next: &cell.runner.next,
                root: &cell.runner.root,
            })),
        }
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
        let mut order: Vec<usize> = (0..envs.len()).collect();
        order.sort_by_key(|&j| envs[j]);
        let mut guards: Vec<Option<MutexGuard<'_, Cell>>> = (0..envs.len()).map(|_| None).collect();
        for j in order {
            let mut cell = lock(&self.shared.cells[envs[j]]);
            // As in `peek`.
            sync_root(envs[j], &mut cell);
            guards[j] = Some(cell);
        }
        let cells: Vec<&Cell> = guards.iter().flatten().map(|g| &**g).collect();
        if let Some(err) = cells.iter().find_map(|cell| cell.error.clone()) {
            return Err(err);
        }
        let outputs: Vec<Output<'_>> = cells
            .iter()
            .map(|cell| Output {
                op: cell.op,
                next: &cell.runner.next,
                root: &cell.runner.root,
            })
            .collect();
        Ok(read(&outputs))
    }

    /// The results of `op` of `envs` (done, distinct, ascending) as batches,
    /// from the batch rows that workers fill with
    /// [`Rows::Batch`]: the `"next"` batch (for a step) and the
    /// root batch (for a reset or step-and-maybe-reset). For all envs in
    /// order these are the backend's batches themselves (shared: the next
    /// results are written into a copy if the caller still holds them);
    /// otherwise their rows gathered into new batches. `None` without batch
    /// rows, or if a result is not in its row (read it with
    /// [`ThreadBackend::peek_many`], which reports what is wrong with it).
    #[doc(hidden)]
    pub fn gather(
        &self,
        op: Op,
        envs: &[usize],
    ) -> Option<(Option<TensorDict>, Option<TensorDict>)> {
        let mut batch = lock(self.shared.batch.as_ref()?);
        let batch = &mut *batch;
        let want = match op {
            Op::Reset => ROOT_ROW,
            Op::Step => NEXT_ROW,
            Op::StepAndMaybeReset => NEXT_ROW | ROOT_ROW,
        };
        if envs.iter().any(|&env| batch.rows[env] & want != want) {
            return None;
        }
        let [next_cache, root_cache] = &mut batch.gathered;
        let next = if want & NEXT_ROW != 0 {
            Some(batch.next.gather_rows_reusing(envs, next_cache).ok()?)
        } else {
            None
        };
        let root = if want & ROOT_ROW != 0 {
            Some(batch.root.gather_rows_reusing(envs, root_cache).ok()?)
        } else {
            None
        };
        Some((next, root))
    }

    /// Marks env `env` idle, dropping its result or error (after a
    /// [`ThreadBackend::peek`]). Takes no lock: the next send overwrites the
    /// slot's buffers and clears any error.
    #[doc(hidden)]
    #[inline]
    pub fn release(&self, env: usize) {
        self.shared.phases.release(env);
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

/// Copies the env's inputs from `src` (row `row`, or all of it).
fn copy_input(
    src: &TensorDict,
    row: Option<usize>,
    input: &mut TensorDict,
) -> Result<(), tensordict::TensorDictError> {
    match row {
        Some(row) => src.read_row(row, input),
        None => input.fill_from(src),
    }
}

/// Pins the calling worker thread to `cpus` and reports the outcome;
/// returns whether it may go on.
fn pin_worker(
    worker: usize,
    cpus: &[usize],
    report: &std::sync::mpsc::Sender<(usize, Result<(), affinity::AffinityError>)>,
) -> bool {
    let pinned = affinity::pin_current_thread(worker, cpus);
    let ok = pinned.is_ok();
    // The receiver lives until every worker reported.
    let _ = report.send((worker, pinned));
    ok
}

/// A worker: takes its envs one at a time and publishes each result as
/// soon as it is ready, so that no result waits on another env's step and
/// no queued env waits behind one (another worker can take it meanwhile).
fn worker_loop(shared: &Shared, worker: usize) {
    let mut timing = StepTiming::new();
    loop {
        let job = match shared.queue.try_pop(worker) {
            Some(job) => job,
            None => {
                // Nothing queued: the run of steps ends before the wait.
                timing.end(&shared.env_nanos);
                match shared.queue.pop(worker) {
                    Some(job) => job,
                    None => return,
                }
            }
        };
        timing.start(job.op);
        run_job(shared, &job);
        timing.ran(&shared.env_nanos);
    }
}

/// The times of a run of env steps, folded into `Shared::env_nanos` once
/// per run (at most [`TIMED_RUN`] envs, or until nothing is queued): two
/// clock reads per run, not per env.
struct StepTiming {
    /// When the run began.
    since: Option<Instant>,
    /// Envs run since then.
    envs: usize,
    /// Whether a reset was among them (an env's reset may take far less
    /// than its step: such a run is not counted).
    reset: bool,
}

/// The most envs of one timed run ([`StepTiming`]).
const TIMED_RUN: usize = 16;

impl StepTiming {
    fn new() -> StepTiming {
        StepTiming {
            since: None,
            envs: 0,
            reset: false,
        }
    }

    /// An env of `op` is about to run.
    fn start(&mut self, op: Op) {
        if self.since.is_none() {
            self.since = Some(Instant::now());
        }
        self.reset |= op == Op::Reset;
    }

    /// An env ran: ends the run after [`TIMED_RUN`] envs.
    fn ran(&mut self, average: &AtomicU64) {
        self.envs += 1;
        if self.envs >= TIMED_RUN {
            self.end(average);
        }
    }

    /// Ends the run: folds its time per env into `average` (unless it held
    /// a reset or no env).
    fn end(&mut self, average: &AtomicU64) {
        if let Some(since) = self.since.take() {
            if !self.reset && self.envs > 0 {
                record_env_time(average, since.elapsed(), self.envs);
            }
        }
        self.envs = 0;
        self.reset = false;
    }
}

/// Runs one env (its input copied in first), copies its result into the
/// batch rows (if any), then publishes it.
fn run_job(shared: &Shared, job: &Job) {
    let env = job.env;
    let failed = {
        let mut cell = lock(&shared.cells[env]);
        let mut failed = prepare(job, &mut cell) || run_cell(env, &mut cell);
        // The cell stays locked until its result is in the batch rows
        // (nobody else touches a queued env's cell).
        let root_in_row = match &shared.batch {
            Some(batch) => lock(batch).store(env, &cell),
            None => false,
        };
        // A deferred root that is not in its row is brought up to date in
        // its cell now, so that a failure to (an env that changed its
        // layout) is this env's failure, reported like any other.
        if !root_in_row && !failed && sync_root(env, &mut cell) {
            failed = true;
        }
        failed
    };
    // Relaxed: read only after the Acquire of DONE below.
    shared.published[env].store(shared.done.generation(), Ordering::Relaxed);
    // The result written under the cell's lock (and into the batch rows) is
    // visible to whoever sees DONE.
    shared.phases.publish(env, failed);
    // One count per result; a sleeping receiver is woken only once the
    // count it waits for is reached (`Signal::notify_n`).
    shared.done.notify();
}

/// Folds a run's time into the moving average of one env's
/// (`Shared::env_nanos`, weight 1/8 per run). Workers race on it; a lost
/// update only makes the average a little older.
fn record_env_time(average: &AtomicU64, elapsed: Duration, envs: usize) {
    let sample = u64::try_from(elapsed.as_nanos() / envs.max(1) as u128).unwrap_or(u64::MAX);
    let old = average.load(Ordering::Relaxed);
    let new = if sample >= old {
        old + (sample - old) / 8
    } else {
        old - (old - sample) / 8
    };
    average.store(new, Ordering::Relaxed);
}

/// Brings env `env`'s root up to date if its last step deferred it (see
/// `Runner::defer_root`), before anyone reads the cell's root; a failure
/// to (an env that changed its buffers' layout) becomes the env's error.
/// Returns whether it failed.
fn sync_root(env: usize, cell: &mut Cell) -> bool {
    match cell.runner.sync_root() {
        Ok(()) => false,
        Err(source) => {
            cell.error.get_or_insert_with(|| ThreadError::Env {
                env,
                name: cell.name.clone(),
                during: "step",
                source: Box::new(source.into()),
            });
            true
        }
    }
}

/// Sets the cell up for `job`: its operation, and its input copied from the
/// sent tensordict. An input that cannot be copied (the send checked it, so
/// only if the env changed its input buffer's keys) is the env's error.
/// Returns whether it failed.
fn prepare(job: &Job, cell: &mut Cell) -> bool {
    cell.op = job.op;
    cell.reset_with_input = false;
    let Some((src, row)) = &job.input else {
        return false;
    };
    cell.reset_with_input = job.op == Op::Reset;
    match copy_input(src, *row, &mut cell.runner.input) {
        Ok(()) => false,
        Err(source) => {
            cell.error = Some(ThreadError::Input {
                env: job.env,
                name: cell.name.clone(),
                source: Box::new(source),
            });
            true
        }
    }
}

/// Runs one env's operation, catching a panic; records its error in the
/// cell. Returns whether it failed.
fn run_cell(env: usize, cell: &mut Cell) -> bool {
    let Cell {
        env: inner,
        runner,
        op,
        reset_with_input,
        ..
    } = cell;
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        runner.run(&mut **inner, *op, *reset_with_input)
    }));
    let error = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(pool_core::RunError { during, source })) => Some(ThreadError::Env {
            env,
            name: cell.name.clone(),
            during,
            source,
        }),
        Err(payload) => Some(ThreadError::Panicked {
            env,
            name: cell.name.clone(),
            during: cell.runner.during,
            message: pool_core::panic_message(&*payload),
        }),
    };
    let failed = error.is_some();
    cell.error = error;
    failed
}

#[cfg(test)]
mod tests {
    use super::*;
    use envs::CountingEnv;
    use std::sync::atomic::AtomicBool;
    use std::thread::ThreadId;

    /// A CountingEnv (env `index`) that records the threads that step it,
    /// and whose steps wait while `hold` is set if it is env `held`.
    fn held(
        index: usize,
        held: usize,
        hold: Arc<AtomicBool>,
        ran_on: Arc<Mutex<Vec<ThreadId>>>,
    ) -> Box<dyn Env> {
        test_envs::OnStep::boxed(CountingEnv::new(0, 100), move |inner, input, next| {
            lock(&ran_on).push(std::thread::current().id());
            let until = Instant::now() + Duration::from_secs(10);
            while index == held && hold.load(Ordering::SeqCst) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            inner.step_into(input, next)
        })
    }

    /// Waits (at most 10 s) until every one of `envs` is done, and
    /// releases them.
    fn collect(backend: &ThreadBackend, envs: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(0..envs).all(|env| backend.is_done(env)) {
            assert!(Instant::now() < deadline, "the envs did not finish");
            std::thread::sleep(Duration::from_millis(1));
        }
        for env in 0..envs {
            backend.release(env);
        }
    }

    /// A waiting receiver's help (`ThreadBackend::help`): none while env
    /// steps look slow (the starting estimate), none with pinned workers;
    /// with quick steps, it runs queued envs in the calling thread while the
    /// only worker is stuck in env 0.
    #[test]
    fn a_receiver_helps_only_while_envs_are_quick_and_workers_are_not_pinned() {
        let hold = Arc::new(AtomicBool::new(true));
        let ran_on = Arc::new(Mutex::new(Vec::new()));
        let start = |affinity: Option<affinity::Affinity>| {
            let factories: Vec<EnvFactory> = (0..4)
                .map(|index| {
                    let (hold, ran_on) = (Arc::clone(&hold), Arc::clone(&ran_on));
                    Box::new(move || Ok(held(index, 0, hold, ran_on))) as EnvFactory
                })
                .collect();
            let mut options = ThreadOptions::default().threads(1);
            if let Some(affinity) = affinity {
                options = options.affinity(affinity);
            }
            let backend = ThreadBackend::start(factories, &options, Rows::PerEnv).unwrap();
            let all: Vec<(usize, Option<usize>)> = (0..4).map(|env| (env, None)).collect();
            backend.send(Op::Reset, &all, None).unwrap();
            collect(&backend, 4);
            backend
        };
        let mut actions = TensorDict::new(&[4]);
        actions
            .set("action", tensordict::Tensor::full(&[4, 1], 1i64))
            .unwrap();
        let rows: Vec<(usize, Option<usize>)> = (0..4).map(|env| (env, Some(env))).collect();
        let me = std::thread::current().id();
        for pinned in [false, true] {
            let affinity = pinned.then(|| {
                let cpu = affinity::available_cpus().unwrap()[0];
                affinity::Affinity::per_worker([[cpu]])
            });
            let backend = start(affinity);
            hold.store(true, Ordering::SeqCst);
            lock(&ran_on).clear();
            backend.send(Op::Step, &rows, Some(&actions)).unwrap();
            // The worker is stuck in env 0; envs 1, 2 and 3 wait in the
            // queue.
            let deadline = Instant::now() + Duration::from_secs(10);
            while lock(&ran_on).is_empty() {
                assert!(Instant::now() < deadline, "the worker did not start");
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(!backend.help(), "helped with slow-looking envs");
            backend.shared.env_nanos.store(0, Ordering::Relaxed);
            assert_eq!(backend.help(), !pinned);
            let here = lock(&ran_on).iter().filter(|&&t| t == me).count();
            assert_eq!(here > 0, !pinned, "{here} env steps ran here");
            hold.store(false, Ordering::SeqCst);
            collect(&backend, 4);
        }
    }

    /// A result never waits for another env's step, and an env queued
    /// behind a step that does not return is taken by the other worker:
    /// with env `stuck` stuck in its step (first or second of worker 0's
    /// envs), every other env's result is published while it is still
    /// stuck (no timing involved: the held env waits until released).
    #[test]
    fn results_do_not_wait_for_a_stuck_env() {
        for stuck in [0, 1] {
            let hold = Arc::new(AtomicBool::new(false));
            let ran_on = Arc::new(Mutex::new(Vec::new()));
            let factories: Vec<EnvFactory> = (0..8)
                .map(|index| {
                    let (hold, ran_on) = (Arc::clone(&hold), Arc::clone(&ran_on));
                    Box::new(move || Ok(held(index, stuck, hold, ran_on))) as EnvFactory
                })
                .collect();
            let options = ThreadOptions::default().threads(2);
            let backend = ThreadBackend::start(factories, &options, Rows::Batch).unwrap();
            let all: Vec<(usize, Option<usize>)> = (0..8).map(|env| (env, None)).collect();
            backend.send(Op::Reset, &all, None).unwrap();
            collect(&backend, 8);
            let mut actions = TensorDict::new(&[8]);
            actions
                .set("action", tensordict::Tensor::full(&[8, 1], 1i64))
                .unwrap();
            let rows: Vec<(usize, Option<usize>)> = (0..8).map(|env| (env, Some(env))).collect();
            hold.store(true, Ordering::SeqCst);
            backend.send(Op::Step, &rows, Some(&actions)).unwrap();
            let others: Vec<usize> = (0..8).filter(|&env| env != stuck).collect();
            let deadline = Instant::now() + Duration::from_secs(10);
            while !others.iter().all(|&env| backend.is_done(env)) {
                assert!(
                    Instant::now() < deadline,
                    "env {stuck} stuck: results waited for it"
                );
                backend.wait(backend.generation(), Some(deadline));
            }
            assert!(!backend.is_done(stuck), "env {stuck} not stuck");
            // Their rows are in the batch too.
            let (next, _) = backend.gather(Op::Step, &others).expect("in their rows");
            let counts = next.unwrap().tensor("observation").unwrap().to_vec::<i32>();
            assert_eq!(counts.unwrap(), vec![1; 7], "env {stuck} stuck");
            hold.store(false, Ordering::SeqCst);
            collect(&backend, 8);
        }
    }

    /// A worker thread that cannot pin itself reports the kernel's refusal,
    /// naming the worker, and does not go on (`start` then stops the
    /// others and returns that error).
    #[test]
    fn a_worker_that_cannot_pin_itself_reports_it_and_stops() {
        let available = affinity::available_cpus().unwrap();
        // A CPU a set can hold but this machine does not have.
        let Some(cpu) = (0..1024).rev().find(|cpu| !available.contains(cpu)) else {
            return;
        };
        let (report, reports) = std::sync::mpsc::channel();
        let went_on = std::thread::spawn(move || pin_worker(3, &[cpu], &report))
            .join()
            .unwrap();
        assert!(!went_on);
        let (worker, pinned) = reports.recv().unwrap();
        assert_eq!(worker, 3);
        let err = ThreadError::Affinity(pinned.unwrap_err());
        assert!(
            err.to_string().starts_with(&format!(
                "worker thread CPU affinity: worker 3: could not pin to [{cpu}]"
            )),
            "{err}"
        );
    }
}
