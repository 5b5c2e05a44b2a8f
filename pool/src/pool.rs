//! `AsyncEnvPool`: the pool's public face. It owns the semantics (busy
//! envs, targets, `min_get` / `max_get` / deadline, ordering, stacking,
//! `env_index`) and drives a backend through a private dispatch enum.

mod assemble;
mod book;
mod builder;
mod resolve;
mod wait;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use pool_core::Op;
use tensordict::{NonTensor, TensorDict};

use crate::dispatch::Dispatch;
use crate::{
    Batch, ExchangeStats, PoolError, PoolSpecs, Recv, ResolvedExchange, StackMode, Target,
};

use self::book::{Book, EnvState, Job, Taken};
pub use self::builder::PoolBuilder;

/// An asynchronous pool of environments, as TorchRL's `AsyncEnvPool`.
///
/// Send actions to some envs (`async_step_send`), go on with other work,
/// and receive whichever results are ready (`async_step_recv` with
/// [`Recv`]: a full batch, the first `k`, all that is ready by a deadline),
/// or one env's result (`async_step_recv_env`). Batches are sorted by env
/// index and carry `"env_index"`. The synchronous `reset`, `step` and
/// `step_and_maybe_reset` address every env.
///
/// The pool is `Send + Sync`: several threads may drive their own envs
/// through per-env sends and receives at once.
///
/// ```
/// use pool::{AsyncEnvPool, Recv, Target};
/// use envs::Kwargs;
/// use tensordict::Tensor;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = AsyncEnvPool::builder().registered_n("CountingEnv", 4, Kwargs::new()).build()?;
/// let root = pool.reset(None)?.into_dense()?;
/// assert_eq!(root.batch_size(), &[4]);
///
/// // Step envs 1 and 3 only, then take their results as they come.
/// let mut actions = tensordict::TensorDict::new(&[2]);
/// actions.set("action", Tensor::from_vec(&[2, 1], vec![1i64, 1])?)?;
/// pool.async_step_send(actions, Target::Envs(vec![1, 3]))?;
/// let batch = pool.async_step_recv(Recv::new().min_get(2))?.into_dense()?;
/// assert_eq!(batch.non_tensor("env_index")?.as_int_vec(), Some(vec![1, 3]));
/// assert_eq!(batch.tensor(("next", "observation"))?.to_vec::<i32>()?, vec![1, 1]);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct AsyncEnvPool {
    backend: Dispatch,
    stack: StackMode,
    specs: PoolSpecs,
    batch_size: Vec<usize>,
    /// Per env: zeros shaped like its `"next"` result and its root result.
    templates: Vec<(TensorDict, TensorDict)>,
    /// Per env: its `"env_index"` value, shaped like its batch size.
    env_index: Vec<NonTensor>,
    /// The `"env_index"` column of a batch of every env in order, made
    /// once (a synchronous step's batches clone it).
    all_env_index: NonTensor,
    /// The keys the pool sets on every batch, made once: `"next"` and
    /// `"env_index"`.
    keys: BatchKeys,
    /// Whether every env's batch size is `batch_size[1..]`.
    same_env_batch: bool,
    /// The jobs of a send to every env: env `i` from row `i`.
    all_jobs: Vec<Job>,
    book: Mutex<Book>,
}

/// The names of the entries a pool adds to every batch, shared by every
/// batch (a `set` of a shared name allocates nothing).
#[derive(Debug)]
struct BatchKeys {
    next: Arc<str>,
    env_index: Arc<str>,
}

impl Default for BatchKeys {
    fn default() -> BatchKeys {
        BatchKeys {
            next: "next".into(),
            env_index: "env_index".into(),
        }
    }
}

impl AsyncEnvPool {
    /// A builder: add envs, choose the backend and stack mode, build.
    pub fn builder() -> PoolBuilder {
        PoolBuilder::default()
    }

    fn backend(&self) -> &Dispatch {
        &self.backend
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        // The book is only changed by short, non-panicking sections.
        pool_core::lock(&self.book)
    }

    /// Number of envs.
    pub fn num_envs(&self) -> usize {
        self.templates.len()
    }

    /// `[num_envs, ..env batch size]`.
    pub fn batch_size(&self) -> &[usize] {
        &self.batch_size
    }

    /// The stack mode.
    pub fn stack_mode(&self) -> StackMode {
        self.stack
    }

    /// The envs' specs stacked along the env dim.
    pub fn specs(&self) -> &PoolSpecs {
        &self.specs
    }

    /// The stacked action specs.
    pub fn full_action_spec(&self) -> &specs::TensorSpec {
        self.specs.full_action_spec()
    }

    /// The stacked observation specs.
    pub fn full_observation_spec(&self) -> &specs::TensorSpec {
        self.specs.full_observation_spec()
    }

    /// The stacked reward specs.
    pub fn full_reward_spec(&self) -> &specs::TensorSpec {
        self.specs.full_reward_spec()
    }

    /// The stacked done specs.
    pub fn full_done_spec(&self) -> &specs::TensorSpec {
        self.specs.full_done_spec()
    }

    /// The stacked state specs, with `"env_index"`.
    pub fn full_state_spec(&self) -> &specs::TensorSpec {
        self.specs.full_state_spec()
    }

    /// Env `env`'s own batch size (`[]` for a single env).
    fn env_batch(&self, env: usize) -> &[usize] {
        self.backend().env_specs()[env].batch_size()
    }

    /// The `"env_index"` column of a batch of `envs`.
    fn env_index_column(&self, envs: &[usize]) -> NonTensor {
        // The envs of a batch are distinct and ascending: as many as there
        // are envs is every env, in order.
        if envs.len() == self.env_index.len() {
            return self.all_env_index.clone();
        }
        if self.same_env_batch && self.batch_size.len() == 1 {
            // Unbatched envs: each index is the integer itself, made
            // rather than cloned.
            return NonTensor::Stack(envs.iter().map(|&env| NonTensor::Int(env as i64)).collect());
        }
        NonTensor::Stack(
            envs.iter()
                .map(|&env| self.env_index[env].clone())
                .collect(),
        )
    }

    /// Each env's own batch size (`[]` for an unbatched env), as
    /// TorchRL's `env_batch_sizes`.
    pub fn env_batch_sizes(&self) -> Vec<Vec<usize>> {
        self.backend()
            .env_specs()
            .iter()
            .map(|s| s.batch_size().to_vec())
            .collect()
    }

    /// The name of each env.
    pub fn env_names(&self) -> &[String] {
        self.backend().env_names()
    }

    /// The exchange in use: `Queue` for threads; for processes, `Shm` or
    /// `Queue` as chosen at build (see [`AsyncEnvPool::exchange_reason`]).
    pub fn resolved_exchange(&self) -> ResolvedExchange {
        match &self.backend {
            Dispatch::Procs(b) if b.is_shm() => ResolvedExchange::Shm,
            _ => ResolvedExchange::Queue,
        }
    }

    /// Why [`pool_proc::ExchangeMode::Auto`] chose the queue exchange (the
    /// key, shape or dtype that cannot go through slots), if it did.
    pub fn exchange_reason(&self) -> Option<&str> {
        match &self.backend {
            Dispatch::Procs(b) => b.exchange_reason(),
            Dispatch::Threads(_) => None,
        }
    }

    /// The keys the shared-memory exchange carries (actions and state in,
    /// results and roots out), sorted: none for threads or the queue.
    pub fn exchange_keys(&self) -> Vec<tensordict::NestedKey> {
        match &self.backend {
            Dispatch::Procs(b) => b.exchange_keys(),
            Dispatch::Threads(_) => Vec::new(),
        }
    }

    /// Exchange statistics (batches, items, fill ratio, latencies), as
    /// TorchRL's `stats()`: `None` without a shared-memory exchange (threads,
    /// or the queue exchange), as TorchRL returns an empty dict there. With
    /// `reset`, the counters start again after this snapshot.
    /// [`ExchangeStats::to_map`] gives them by TorchRL's names.
    ///
    /// ```
    /// use pool::{AsyncEnvPool, Backend, ExchangeMode, ProcOptions, StatValue};
    /// use pool::envs::Kwargs;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # pool::init();
    /// let pool = AsyncEnvPool::builder()
    ///     .backend(Backend::Multiprocessing(ProcOptions::default().exchange(ExchangeMode::Shm)))
    ///     .registered_n("CountingEnv", 2, Kwargs::new())
    ///     .build()?;
    /// pool.reset(None)?;
    /// let stats = pool.stats(false).expect("the shm exchange keeps statistics");
    /// assert_eq!((stats.batches, stats.items), (1, 2));
    /// // TorchRL's names, counts as integers.
    /// assert_eq!(stats.to_map()["items"], StatValue::Count(2));
    /// # Ok(()) }
    /// ```
    pub fn stats(&self, reset: bool) -> Option<ExchangeStats> {
        match &self.backend {
            Dispatch::Procs(b) => b.stats(reset),
            Dispatch::Threads(_) => None,
        }
    }

    /// The process id of each worker process: empty for threads.
    pub fn worker_pids(&self) -> Vec<u32> {
        match &self.backend {
            Dispatch::Procs(b) => b.worker_pids(),
            Dispatch::Threads(_) => Vec::new(),
        }
    }

    fn send(&self, op: Op, td: Option<TensorDict>, target: Target) -> Result<(), PoolError> {
        if op != Op::Reset && td.is_none() {
            return Err(PoolError::MissingInput { op: op.name() });
        }
        let per_env = matches!(target, Target::Env(_));
        let all = matches!(target, Target::All);
        let jobs = self.resolve(target, td.as_ref())?;
        // The root of each result: the sent tensordict without any "next" or
        // "env_index" (the pool sets its own), shared by the envs of the send.
        let td = td.map(|td| {
            Arc::new(if td.contains("next") || td.contains("env_index") {
                td.exclude(["next", "env_index"])
            } else {
                td
            })
        });
        {
            let mut book = self.book();
            if book.shut_down {
                return Err(PoolError::ShutDown);
            }
            if book.busy > 0 {
                let busy: Vec<usize> = jobs
                    .iter()
                    .map(|&(env, _)| env)
                    .filter(|&env| book.state(env) != EnvState::Idle)
                    .collect();
                if !busy.is_empty() {
                    return Err(PoolError::Busy { envs: busy });
                }
            }
            if all {
                book.send_all(op, per_env, &jobs, td.clone());
            } else {
                book.send(op, per_env, &jobs, td.clone());
            }
        }
        if let Err(err) = self.backend().send(op, &jobs, td.as_ref()) {
            self.book().unsend(op, per_env, &jobs);
            // A receiver may be waiting for these envs.
            self.backend().wake_receivers();
            return Err(err);
        }
        Ok(())
    }

    /// Drops the results of taken envs and marks them idle; wakes other
    /// receivers, whose `min_get` may now be out of reach.
    fn release(&self, envs: &[usize]) {
        let backend = self.backend();
        backend.release_all(envs);
        self.book().release(envs.iter().copied());
        backend.wake_receivers();
    }

    /// Receives a batch: waits, builds it, and only then releases the envs;
    /// a batch that cannot be built is an error and its results stay for the
    /// next receive (a per-env receive can take them one by one).
    fn recv_batch(&self, op: Op, recv: Recv) -> Result<(Batch, Option<Batch>), PoolError> {
        let taken = self.collect(op, recv)?;
        match self.build(op, &taken) {
            Ok((step, root)) => {
                self.backend().record_batch(&taken.envs, recv.max_get, op);
                self.release(&taken.envs);
                let Taken { envs, rows, .. } = taken;
                let mut book = self.book();
                book.spare.envs = Vec::new();
                book.spare.rows = rows;
                drop(book);
                let root = root.map(|root| Batch::new(root, envs.clone()));
                Ok((Batch::new(step, envs), root))
            }
            Err(err) => {
                self.put_back(op, &taken.envs, false);
                Err(err)
            }
        }
    }

    fn recv_one(
        &self,
        op: Op,
        env: usize,
        timeout: Option<Duration>,
    ) -> Result<(Option<TensorDict>, Option<TensorDict>), PoolError> {
        let taken = self.collect_env(op, env, timeout)?;
        match self.env_result(op, env, taken.td.as_deref(), taken.row) {
            Ok(result) => {
                self.backend().record_batch(&[env], Some(1), op);
                self.release(&[env]);
                Ok(result)
            }
            Err(err) if self.backend().first_failed(&[env]).is_some() => {
                // The env itself failed (or its worker), whatever the kind
                // of error: its error is its result (as a batch receive
                // takes it).
                self.release(&[env]);
                Err(err)
            }
            Err(err) => {
                self.put_back(op, &[env], taken.per_env);
                Err(err)
            }
        }
    }

    /// Returns taken envs to in flight, their results untouched, and wakes
    /// receivers that may want them.
    fn put_back(&self, op: Op, envs: &[usize], per_env: bool) {
        self.book().put_back(op, envs, per_env);
        self.backend().wake_receivers();
    }

    fn check_idle(&self, op: Op) -> Result<(), PoolError> {
        let book = self.book();
        if book.shut_down {
            return Err(PoolError::ShutDown);
        }
        if book.busy == 0 {
            Ok(())
        } else {
            Err(PoolError::InFlight {
                op: op.name(),
                envs: book.busy_envs(),
            })
        }
    }

    /// Resets every env; `td` (batch size `[num_envs, ..]`) may carry state
    /// entries. An error if any env is in flight.
    pub fn reset(&self, td: Option<TensorDict>) -> Result<Batch, PoolError> {
        self.check_idle(Op::Reset)?;
        self.send(Op::Reset, td, Target::All)?;
        Ok(self.recv_batch(Op::Reset, Recv::all(self.num_envs()))?.0)
    }

    /// Steps every env with its row of `td`; returns `td`'s rows with the
    /// results under `"next"` and `"env_index"`. An error if any env is in
    /// flight.
    pub fn step(&self, td: TensorDict) -> Result<Batch, PoolError> {
        self.check_idle(Op::Step)?;
        self.send(Op::Step, Some(td), Target::All)?;
        Ok(self.recv_batch(Op::Step, Recv::all(self.num_envs()))?.0)
    }

    /// Steps every env, resetting those that are done: returns the step
    /// results and the roots of the next step (reset where done).
    pub fn step_and_maybe_reset(&self, td: TensorDict) -> Result<(Batch, Batch), PoolError> {
        self.check_idle(Op::StepAndMaybeReset)?;
        self.send(Op::StepAndMaybeReset, Some(td), Target::All)?;
        let (step, root) = self.recv_batch(Op::StepAndMaybeReset, Recv::all(self.num_envs()))?;
        Ok((step, root.expect("step_and_maybe_reset builds roots")))
    }

    /// Sends a reset to the `target` envs (`td` may carry their state
    /// entries). An error naming the envs that are busy.
    pub fn async_reset_send(
        &self,
        td: Option<TensorDict>,
        target: Target,
    ) -> Result<(), PoolError> {
        self.send(Op::Reset, td, target)
    }

    /// Receives reset results (see [`Recv`]).
    pub fn async_reset_recv(&self, recv: Recv) -> Result<Batch, PoolError> {
        Ok(self.recv_batch(Op::Reset, recv)?.0)
    }

    /// Receives env `env`'s reset result (sent with any target).
    pub fn async_reset_recv_env(
        &self,
        env: usize,
        timeout: Option<Duration>,
    ) -> Result<TensorDict, PoolError> {
        let (_, root) = self.recv_one(Op::Reset, env, timeout)?;
        Ok(root.expect("a reset builds a root"))
    }

    /// Sends the actions in `td` to the `target` envs. An error naming the
    /// envs that are busy.
    pub fn async_step_send(&self, td: TensorDict, target: Target) -> Result<(), PoolError> {
        self.send(Op::Step, Some(td), target)
    }

    /// Receives step results (see [`Recv`]): the sent rows with the results
    /// under `"next"`, sorted by env, with `"env_index"`.
    pub fn async_step_recv(&self, recv: Recv) -> Result<Batch, PoolError> {
        Ok(self.recv_batch(Op::Step, recv)?.0)
    }

    /// Receives env `env`'s step result (sent with any target); never takes
    /// another env's result.
    pub fn async_step_recv_env(
        &self,
        env: usize,
        timeout: Option<Duration>,
    ) -> Result<TensorDict, PoolError> {
        let (step, _) = self.recv_one(Op::Step, env, timeout)?;
        Ok(step.expect("a step builds a step result"))
    }

    /// Sends the actions in `td` to the `target` envs, to step and reset
    /// where done.
    pub fn async_step_and_maybe_reset_send(
        &self,
        td: TensorDict,
        target: Target,
    ) -> Result<(), PoolError> {
        self.send(Op::StepAndMaybeReset, Some(td), target)
    }

    /// Receives step-and-maybe-reset results: the step results and the roots
    /// of the next steps (reset where done).
    pub fn async_step_and_maybe_reset_recv(&self, recv: Recv) -> Result<(Batch, Batch), PoolError> {
        let (step, root) = self.recv_batch(Op::StepAndMaybeReset, recv)?;
        Ok((step, root.expect("step_and_maybe_reset builds roots")))
    }

    /// Receives env `env`'s step-and-maybe-reset result.
    pub fn async_step_and_maybe_reset_recv_env(
        &self,
        env: usize,
        timeout: Option<Duration>,
    ) -> Result<(TensorDict, TensorDict), PoolError> {
        let (step, root) = self.recv_one(Op::StepAndMaybeReset, env, timeout)?;
        Ok((
            step.expect("a step builds a step result"),
            root.expect("step_and_maybe_reset builds a root"),
        ))
    }

    /// Whether [`AsyncEnvPool::shutdown`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.book().shut_down
    }

    /// The envs in flight (sent, result not yet received).
    pub fn in_flight(&self) -> Vec<usize> {
        self.book().busy_envs()
    }

    /// Stops the pool: results not received are dropped; worker threads
    /// finish the env they are stepping and are joined (one still inside
    /// an env after two seconds is left behind, detached: a thread cannot
    /// be killed), worker processes are asked to stop, killed after the
    /// shutdown deadline, and reaped. Later calls are errors
    /// ([`PoolError::ShutDown`]). Idempotent; also done on drop.
    pub fn shutdown(&self) {
        self.book().shut_down = true;
        self.backend.shutdown();
    }
}

impl Drop for AsyncEnvPool {
    fn drop(&mut self) {
        self.shutdown();
    }
}
