//! `ThreadBackend`: envs owned by slots, stepped by a fixed set of worker
//! threads that pull env indices from a queue.

use std::any::Any;
use std::num::NonZeroUsize;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use envs::{Env, EnvError, EnvSpecs};
use tensordict::{Entry, TensorDict};

use crate::queue::WorkQueue;
use crate::signal::Signal;
use crate::ThreadError;

pub use envs::Op;

/// Builds one env, in the thread that builds the backend.
pub type EnvFactory = Box<dyn FnOnce() -> Result<Box<dyn Env>, EnvError> + Send>;

/// Options of the threading backend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadOptions {
    /// Number of worker threads; default: as many as the machine has cores,
    /// at most one per env.
    pub threads: Option<NonZeroUsize>,
}

/// How long shutdown waits for the worker threads to finish the envs they
/// are stepping before it leaves them behind.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// No env work for this slot.
const IDLE: u8 = 0;
/// Queued or being stepped by a worker.
const QUEUED: u8 = 1;
/// The result (or error) is in the slot, waiting to be taken.
const DONE: u8 = 2;
/// The env failed; the error is in the slot, waiting to be taken.
const FAILED: u8 = 3;

/// One env, its buffers and its result.
struct Cell {
    env: Box<dyn Env>,
    name: String,
    op: Op,
    /// The env's inputs for a step: action and state entries.
    input: TensorDict,
    /// Whether a reset was given an input (its state entries).
    reset_with_input: bool,
    /// The step's outputs (`"next"` entries).
    next: TensorDict,
    /// The reset output, or the root of the next step.
    root: TensorDict,
    error: Option<ThreadError>,
    /// What the env is doing (`"reset"` or `"step"`), for a panic's message.
    during: &'static str,
}

struct Slot {
    /// `IDLE`, `QUEUED`, `DONE` or `FAILED`.
    phase: AtomicU8,
    /// When the last result was published (a generation): receivers that
    /// take fewer results than are ready take the oldest first.
    published: AtomicU64,
    cell: Mutex<Cell>,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Cell> {
        // A panic inside an env is caught while the lock is held, so the
        // mutex is never poisoned by one; recover from any other cause.
        self.cell.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct Shared {
    slots: Vec<Slot>,
    queue: WorkQueue,
    done: Signal,
    workers: usize,
    /// How long a receiver spins before sleeping: zero when the workers
    /// already use every core.
    receiver_spin: std::time::Duration,
}

/// The result of one env, borrowed from its slot while it is taken.
#[derive(Debug)]
pub struct EnvOutput<'a> {
    /// The operation that produced it.
    pub op: Op,
    /// For a step: the `"next"` entries.
    pub next: &'a TensorDict,
    /// For a reset: the reset root; for step-and-maybe-reset: the root of
    /// the next step.
    pub root: &'a TensorDict,
}

/// Envs stepped by worker threads. Each env lives in a slot; a send copies
/// the env's input into the slot and queues the env; a worker pulls a chunk
/// of queued envs, runs each, and publishes its result in the slot; the
/// owner takes the result out. An env is stepped by one worker at a time.
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
    handles: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for ThreadBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadBackend")
            .field("envs", &self.names)
            .field("workers", &self.shared.workers)
            .finish()
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

/// The input buffer of an env: zeros for its action and state entries.
fn input_template(env: &dyn Env) -> TensorDict {
    let specs = env.specs();
    let mut td = specs.full_action_spec().zero();
    for (key, entry) in specs.full_state_spec().zero().items(true, true) {
        td.set(&key, entry.clone()).expect("same batch size");
    }
    td
}

/// The root of the next step: `next` without its reward entries.
fn next_root_template(env: &dyn Env) -> TensorDict {
    env.step_template().exclude(env.specs().reward_keys())
}

impl ThreadBackend {
    /// Builds the envs (in this thread, in order) and starts the workers.
    /// An env that fails or panics while being built is an error naming it.
    pub fn start(
        factories: Vec<EnvFactory>,
        options: &ThreadOptions,
    ) -> Result<ThreadBackend, ThreadError> {
        let mut slots = Vec::with_capacity(factories.len());
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
                        message: panic_message(&*payload),
                    })
                }
            };
            specs.push(env.specs().clone());
            names.push(env.name().to_owned());
            let cell = Cell {
                name: env.name().to_owned(),
                op: Op::Reset,
                input: input_template(&*env),
                reset_with_input: false,
                next: env.step_template(),
                root: next_root_template(&*env),
                error: None,
                during: "reset",
                env,
            };
            slots.push(Slot {
                phase: AtomicU8::new(IDLE),
                published: AtomicU64::new(0),
                cell: Mutex::new(cell),
            });
        }
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        let workers = options
            .threads
            .map_or(cores.min(slots.len().max(1)), NonZeroUsize::get);
        let receiver_spin = if workers >= cores {
            std::time::Duration::from_micros(50)
        } else {
            crate::signal::SPIN
        };
        let shared = Arc::new(Shared {
            slots,
            queue: WorkQueue::default(),
            done: Signal::default(),
            workers,
            receiver_spin,
        });
        let mut handles = Vec::with_capacity(workers);
        for worker in 0..workers {
            let for_worker = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name(format!("rlpool-worker-{worker}"))
                .spawn(move || worker_loop(&for_worker));
            match spawned {
                Ok(handle) => handles.push(handle),
                Err(err) => {
                    shared.queue.stop();
                    for handle in handles {
                        let _ = handle.join();
                    }
                    return Err(ThreadError::Spawn {
                        worker,
                        message: err.to_string(),
                    });
                }
            }
        }
        Ok(ThreadBackend {
            shared,
            specs,
            names,
            handles: Mutex::new(handles),
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
        let cell = self.shared.slots[env].lock();
        (cell.next.clone(), cell.root.clone())
    }

    /// Sends `op` to each `(env, row)` of `jobs`: copies the env's inputs
    /// (action and state entries) from row `row` of `src` (or from `src`
    /// itself when `row` is `None`) into its slot, then queues the envs.
    /// A reset needs no input (`src` may be `None`); a step does.
    ///
    /// Every input is copied before anything is queued, so an invalid input
    /// queues nothing. A send to an env whose result was not taken, to one
    /// env twice, or to an env past the last is an error naming it (and
    /// queues nothing). Sends to one env from several threads at once are
    /// the caller's to prevent (the facade's busy guard does).
    pub fn send(
        &self,
        op: Op,
        jobs: &[(usize, Option<usize>)],
        src: Option<&TensorDict>,
    ) -> Result<(), ThreadError> {
        let mut addressed = vec![false; self.num_envs()];
        for &(env, _) in jobs {
            if env >= self.num_envs() {
                return Err(ThreadError::NoSuchEnv {
                    env,
                    num_envs: self.num_envs(),
                });
            }
            // Acquire: pairs with the Release of IDLE in `release`/`take`.
            if std::mem::replace(&mut addressed[env], true)
                || self.shared.slots[env].phase.load(Ordering::Acquire) != IDLE
            {
                return Err(ThreadError::Busy { env });
            }
        }
        for &(env, row) in jobs {
            let slot = &self.shared.slots[env];
            let mut cell = slot.lock();
            let cell = &mut *cell;
            cell.op = op;
            cell.error = None;
            cell.reset_with_input = false;
            let copied = match (op, src) {
                (Op::Reset, None) => Ok(()),
                (Op::Reset, Some(src)) => {
                    // Only state entries travel into a reset, when the env has any.
                    if cell.input.is_empty() || self.specs[env].full_state_spec().is_empty() {
                        Ok(())
                    } else {
                        cell.reset_with_input = true;
                        copy_input(src, row, &mut cell.input)
                    }
                }
                (_, Some(src)) => copy_input(src, row, &mut cell.input),
                (_, None) => Err(tensordict::TensorDictError::KeyNotFound {
                    key: "action".into(),
                    available: Vec::new(),
                }),
            };
            copied.map_err(|source| ThreadError::Input {
                env,
                name: cell.name.clone(),
                source: Box::new(source),
            })?;
        }
        for &(env, _) in jobs {
            // Release: the input written above is visible to the worker that
            // sees QUEUED (it also takes the cell's lock).
            self.shared.slots[env]
                .phase
                .store(QUEUED, Ordering::Release);
        }
        self.shared.queue.push_all(jobs.iter().map(|&(env, _)| env));
        Ok(())
    }

    /// Runs a chunk of queued envs in the calling thread, if any is queued:
    /// a receiver that would otherwise wait helps the workers (and pays no
    /// wake-up latency). Returns whether it ran anything.
    pub fn help(&self) -> bool {
        let mut chunk = Vec::new();
        if self.shared.queue.try_pull(self.shared.workers, &mut chunk) {
            run_chunk(&self.shared, &chunk);
            true
        } else {
            false
        }
    }

    /// Wakes every thread waiting for results once (after results were taken
    /// by someone else, a waiter may have to give up).
    pub fn wake_receivers(&self) {
        self.shared.done.wake_all();
    }

    /// True once [`ThreadBackend::shutdown`] has begun.
    pub fn is_shut_down(&self) -> bool {
        self.shared.done.is_closed()
    }

    /// True if env `env`'s result (or error) is waiting to be taken.
    pub fn is_done(&self, env: usize) -> bool {
        // Acquire: pairs with the worker's Release store of DONE/FAILED.
        matches!(
            self.shared.slots[env].phase.load(Ordering::Acquire),
            DONE | FAILED
        )
    }

    /// When env `env`'s result was published (a generation; smaller is
    /// older). Meaningful once [`ThreadBackend::is_done`] is true.
    pub fn published(&self, env: usize) -> u64 {
        self.shared.slots[env].published.load(Ordering::Relaxed)
    }

    /// True if env `env` failed and its error is waiting to be taken.
    pub fn is_failed(&self, env: usize) -> bool {
        self.shared.slots[env].phase.load(Ordering::Acquire) == FAILED
    }

    /// The number of results published so far (moves on every result).
    pub fn generation(&self) -> u64 {
        self.shared.done.generation()
    }

    /// Waits until a result is published after generation `seen`, or the
    /// deadline; returns the generation then. Spins briefly, then sleeps.
    pub fn wait(&self, seen: u64, deadline: Option<Instant>) -> u64 {
        self.shared.done.wait(seen, deadline)
    }

    /// The number of [`ThreadBackend::wake_receivers`] calls so far; read it
    /// (with [`ThreadBackend::generation`]) before looking at the state a
    /// wait depends on.
    pub fn epoch(&self) -> u64 {
        self.shared.done.epoch()
    }

    /// Waits until the generation reaches `target` (for example the
    /// generation seen plus the number of results still needed), a
    /// [`ThreadBackend::wake_receivers`] after `epoch`, a shutdown, or the
    /// deadline; returns the generation then.
    ///
    /// When the workers are as many as the cores, the caller spins only
    /// briefly (yielding) before it sleeps: a spinning caller would take a
    /// core from a worker.
    pub fn wait_for(&self, target: u64, epoch: u64, deadline: Option<Instant>) -> u64 {
        self.shared
            .done
            .wait_for(target, epoch, deadline, self.shared.receiver_spin)
    }

    /// Reads env `env`'s result without taking it: calls `read` on it while
    /// the slot is locked; the result stays (a later `peek` or `take` sees it
    /// again). An env that failed gives its error (which stays too).
    /// The caller guarantees the env is done ([`ThreadBackend::is_done`]).
    pub fn peek<R>(
        &self,
        env: usize,
        read: impl FnOnce(EnvOutput<'_>) -> R,
    ) -> Result<R, ThreadError> {
        let cell = self.shared.slots[env].lock();
        match &cell.error {
            Some(err) => Err(err.clone()),
            None => Ok(read(EnvOutput {
                op: cell.op,
                next: &cell.next,
                root: &cell.root,
            })),
        }
    }

    /// Reads the results of several envs at once, all their slots locked (in
    /// ascending order) while `read` runs: what a batch gathers column by
    /// column. An env that failed gives its error. The caller guarantees the
    /// envs are done and distinct.
    pub fn peek_many<R>(
        &self,
        envs: &[usize],
        read: impl FnOnce(&[EnvOutput<'_>]) -> R,
    ) -> Result<R, ThreadError> {
        let mut order: Vec<usize> = (0..envs.len()).collect();
        order.sort_by_key(|&j| envs[j]);
        let mut guards: Vec<Option<MutexGuard<'_, Cell>>> = (0..envs.len()).map(|_| None).collect();
        for j in order {
            guards[j] = Some(self.shared.slots[envs[j]].lock());
        }
        let cells: Vec<&Cell> = guards.iter().flatten().map(|g| &**g).collect();
        if let Some(err) = cells.iter().find_map(|cell| cell.error.clone()) {
            return Err(err);
        }
        let outputs: Vec<EnvOutput<'_>> = cells
            .iter()
            .map(|cell| EnvOutput {
                op: cell.op,
                next: &cell.next,
                root: &cell.root,
            })
            .collect();
        Ok(read(&outputs))
    }

    /// Marks env `env` idle, dropping its result or error (after a
    /// [`ThreadBackend::peek`]). Takes no lock: the next send overwrites the
    /// slot's buffers and clears any error.
    pub fn release(&self, env: usize) {
        // Release: pairs with the Acquire of the next send's check (through
        // the facade's book lock) and the worker's Acquire of QUEUED.
        self.shared.slots[env].phase.store(IDLE, Ordering::Release);
    }

    /// Takes env `env`'s result: calls `read` on it while the slot is
    /// locked, then marks the env idle. An env that failed gives its error.
    /// The caller guarantees the env is done ([`ThreadBackend::is_done`]).
    pub fn take<R>(
        &self,
        env: usize,
        read: impl FnOnce(EnvOutput<'_>) -> R,
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
        let handles = std::mem::take(&mut *self.handles.lock().unwrap_or_else(|p| p.into_inner()));
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

fn worker_loop(shared: &Shared) {
    let mut chunk = Vec::new();
    while shared.queue.pull(shared.workers, &mut chunk) {
        run_chunk(shared, &chunk);
    }
}

/// Runs each env of a chunk and publishes its result.
fn run_chunk(shared: &Shared, chunk: &[usize]) {
    {
        for &env in chunk {
            let slot = &shared.slots[env];
            let failed = {
                let mut cell = slot.lock();
                let cell = &mut *cell;
                let outcome = catch_unwind(AssertUnwindSafe(|| run(cell)));
                let error = match outcome {
                    Ok(Ok(())) => None,
                    Ok(Err((during, source))) => Some(ThreadError::Env {
                        env,
                        name: cell.name.clone(),
                        during,
                        source,
                    }),
                    Err(payload) => Some(ThreadError::Panicked {
                        env,
                        name: cell.name.clone(),
                        during: cell.during,
                        message: panic_message(&*payload),
                    }),
                };
                let failed = error.is_some();
                cell.error = error;
                failed
            };
            // Relaxed: read only after the Acquire of DONE below.
            slot.published
                .store(shared.done.generation(), Ordering::Relaxed);
            // Release: the result written under the lock is visible to
            // whoever sees DONE (pairs with the Acquire in `is_done`).
            slot.phase
                .store(if failed { FAILED } else { DONE }, Ordering::Release);
            shared.done.notify();
        }
    }
}

/// Runs the cell's operation on its buffers.
fn run(cell: &mut Cell) -> Result<(), (&'static str, Box<EnvError>)> {
    match cell.op {
        Op::Reset => {
            cell.during = "reset";
            let input = cell.reset_with_input.then_some(&cell.input);
            cell.env
                .reset_into(input, &mut cell.root)
                .map_err(|e| ("reset", Box::new(e)))
        }
        Op::Step => {
            cell.during = "step";
            cell.env
                .step_into(&cell.input, &mut cell.next)
                .map_err(|e| ("step", Box::new(e)))
        }
        Op::StepAndMaybeReset => {
            cell.during = "step";
            cell.env
                .step_into(&cell.input, &mut cell.next)
                .map_err(|e| ("step", Box::new(e)))?;
            // The next root: the step's entries without the reward, reset
            // where done.
            cell.root
                .fill_from(&cell.next)
                .map_err(|e| ("step", Box::new(EnvError::from(e))))?;
            let done = match cell.next.get("done") {
                Some(Entry::Tensor(t)) => t
                    .as_slice::<bool>()
                    .map(|d| d.iter().any(|&x| x))
                    .unwrap_or(false),
                _ => false,
            };
            if done {
                cell.during = "reset";
                // A batched env resets the rows its "_reset" mask names (the
                // done flags); its buffer starts as the current root, so the
                // other rows keep their values. As `Env::step_and_maybe_reset`.
                let input = if cell.env.batch_size().is_empty() {
                    None
                } else {
                    let mut input = cell.root.clone();
                    let mask = match cell.next.get("done") {
                        Some(Entry::Tensor(t)) => t.clone(),
                        _ => unreachable!("done was read above"),
                    };
                    input
                        .set("_reset", mask)
                        .map_err(|e| ("reset", Box::new(EnvError::from(e))))?;
                    Some(input)
                };
                cell.env
                    .reset_into(input.as_ref(), &mut cell.root)
                    .map_err(|e| ("reset", Box::new(e)))?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envs::CountingEnv;
    use tensordict::Tensor;

    fn counters(n: usize) -> ThreadBackend {
        let factories: Vec<EnvFactory> = (0..n)
            .map(|_| {
                Box::new(|| Ok(Box::new(CountingEnv::new(0, 1000)) as Box<dyn Env>)) as EnvFactory
            })
            .collect();
        ThreadBackend::start(factories, &ThreadOptions::default()).unwrap()
    }

    fn wait_done(backend: &ThreadBackend, env: usize) {
        while !backend.is_done(env) {
            backend.wait(backend.generation(), None);
        }
    }

    #[test]
    fn sends_to_a_busy_env_twice_or_past_the_last_are_errors() {
        let backend = counters(2);
        backend.send(Op::Reset, &[(0, None)], None).unwrap();
        assert_eq!(
            backend.send(Op::Reset, &[(0, None)], None),
            Err(ThreadError::Busy { env: 0 })
        );
        wait_done(&backend, 0);
        backend.take(0, |_| ()).unwrap();
        assert_eq!(
            backend.send(Op::Reset, &[(1, None), (1, None)], None),
            Err(ThreadError::Busy { env: 1 })
        );
        let err = backend.send(Op::Reset, &[(2, None)], None).unwrap_err();
        assert_eq!(err.to_string(), "env index 2 is out of range for 2 envs");
        // Nothing was queued by the failed sends.
        assert!(!backend.is_done(1));
        let mut action = TensorDict::new(&[]);
        action
            .set("action", Tensor::from_vec(&[1], vec![1i64]).unwrap())
            .unwrap();
        backend.send(Op::Step, &[(0, None)], Some(&action)).unwrap();
        wait_done(&backend, 0);
        let count = backend
            .take(0, |out| {
                out.next
                    .tensor("observation")
                    .unwrap()
                    .to_vec::<i32>()
                    .unwrap()
            })
            .unwrap();
        assert_eq!(count, vec![1]);
    }
}
