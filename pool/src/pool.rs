//! `AsyncEnvPool`: the pool's public face. It owns the semantics (busy
//! envs, targets, `min_get` / `max_get` / deadline, ordering, stacking,
//! `env_index`) and drives a backend through a private dispatch enum.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pool_proc::{ProcBackend, ProcOptions};
use pool_thread::{Op, ThreadBackend, ThreadOptions};
use smallvec::SmallVec;
use tensordict::{Entry, NonTensor, StackedTensorDict, TensorDict};

use crate::config::{EnvMaker, MakerKind};
use crate::dispatch::Dispatch;
use crate::{Backend, PoolError, PoolSpecs, Recv, ResolvedExchange, StackMode, Target};

/// Where an env is in its send / receive cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EnvState {
    /// Nothing in flight: a send may address it.
    Idle,
    /// Sent; its result is not yet received. `per_env` results are taken by
    /// per-env receives only.
    InFlight { op: Op, per_env: bool },
    /// Its result is being taken by a receive.
    Taking,
}

/// The tensordict of one send, the root of its envs' step results, kept
/// while any of its envs is not yet released: one shared entry per send,
/// not a clone per env.
#[derive(Debug, Default)]
struct SentTd {
    td: Option<Arc<TensorDict>>,
    /// Its envs not yet released; zero: the entry is free (in
    /// [`Book::free`]).
    envs: usize,
}

/// Where an env's input came from: its send (an index into
/// [`Book::sends`]) and its row there (`None`: the whole tensordict).
#[derive(Clone, Copy, Debug, Default)]
struct Origin {
    send: usize,
    row: Option<usize>,
}

/// An env a send addresses and its row of the sent tensordict (`None`:
/// the whole tensordict).
type Job = (usize, Option<usize>);

/// The facade's bookkeeping of every env, under one lock.
#[derive(Debug)]
struct Book {
    states: Vec<EnvState>,
    /// Per env not idle: where its input came from.
    origins: Vec<Origin>,
    /// The sends that have envs not yet released; free entries are reused.
    sends: Vec<SentTd>,
    /// The free entries of `sends`.
    free: Vec<usize>,
    /// The number of envs not idle.
    busy: usize,
    /// Per op: the number of envs in flight for a batch receive (not sent
    /// with a per-env target).
    batch_in_flight: [usize; 3],
    /// The buffers of the last batch receive, for the next one.
    spare: Spare,
    shut_down: bool,
}

/// A batch receive's lists, kept for the next receive so that a steady
/// collector allocates none.
#[derive(Debug, Default)]
struct Spare {
    envs: Vec<usize>,
    rows: Vec<(usize, Option<usize>)>,
}

impl Book {
    fn new(n: usize) -> Book {
        Book {
            states: vec![EnvState::Idle; n],
            origins: vec![Origin::default(); n],
            sends: Vec::new(),
            free: Vec::new(),
            busy: 0,
            batch_in_flight: [0; 3],
            spare: Spare::default(),
            shut_down: false,
        }
    }

    /// The envs not idle, in order.
    fn busy_envs(&self) -> Vec<usize> {
        (0..self.states.len())
            .filter(|&e| self.states[e] != EnvState::Idle)
            .collect()
    }

    /// Marks the envs of `jobs` (idle) in flight for `op`, their inputs
    /// from `td`.
    fn send(&mut self, op: Op, per_env: bool, jobs: &[Job], td: Option<Arc<TensorDict>>) {
        if jobs.is_empty() {
            return;
        }
        let entry = SentTd {
            td,
            envs: jobs.len(),
        };
        let send = match self.free.pop() {
            Some(free) => {
                self.sends[free] = entry;
                free
            }
            None => {
                self.sends.push(entry);
                self.sends.len() - 1
            }
        };
        let state = EnvState::InFlight { op, per_env };
        for &(env, row) in jobs {
            debug_assert_eq!(self.states[env], EnvState::Idle);
            self.states[env] = state;
            self.origins[env] = Origin { send, row };
        }
        self.busy += jobs.len();
        if !per_env {
            self.batch_in_flight[op as usize] += jobs.len();
        }
    }

    /// Marks the envs of a failed [`Book::send`] idle again.
    fn unsend(&mut self, op: Op, per_env: bool, jobs: &[Job]) {
        if !per_env {
            self.batch_in_flight[op as usize] -= jobs.len();
        }
        for &(env, _) in jobs {
            self.states[env] = EnvState::Taking;
        }
        self.release(jobs.iter().map(|&(env, _)| env));
    }

    /// Marks `envs` (in flight for a batch receive of `op`) taken, and
    /// gathers their inputs' origins.
    fn take(&mut self, op: Op, envs: Vec<usize>) -> Taken {
        let mut rows = std::mem::take(&mut self.spare.rows);
        rows.clear();
        rows.reserve(envs.len());
        let mut taken = Taken {
            rows,
            sends: SmallVec::new(),
            tds: SmallVec::new(),
            envs,
        };
        // The previous env's send and its index in `taken.sends`: the envs
        // of one send are usually taken together.
        let mut last = None;
        for &env in &taken.envs {
            debug_assert_eq!(self.states[env], EnvState::InFlight { op, per_env: false });
            self.states[env] = EnvState::Taking;
            let Origin { send, row } = self.origins[env];
            let at = match last {
                Some((last_send, at)) if last_send == send => at,
                _ => match taken.sends.iter().position(|&s| s == send) {
                    Some(at) => at,
                    None => {
                        taken.sends.push(send);
                        taken.tds.push(self.sends[send].td.clone());
                        taken.sends.len() - 1
                    }
                },
            };
            last = Some((send, at));
            taken.rows.push((at, row));
        }
        self.batch_in_flight[op as usize] -= taken.envs.len();
        taken
    }

    /// Marks env `env` (in flight for `op`, sent with a per-env target or
    /// not) taken.
    fn take_env(&mut self, env: usize, op: Op, per_env: bool) -> TakenEnv {
        debug_assert_eq!(self.states[env], EnvState::InFlight { op, per_env });
        self.states[env] = EnvState::Taking;
        if !per_env {
            self.batch_in_flight[op as usize] -= 1;
        }
        let Origin { send, row } = self.origins[env];
        TakenEnv {
            td: self.sends[send].td.clone(),
            row,
            per_env,
        }
    }

    /// Returns taken envs to in flight for `op`.
    fn put_back(&mut self, op: Op, envs: &[usize], per_env: bool) {
        for &env in envs {
            debug_assert_eq!(self.states[env], EnvState::Taking);
            self.states[env] = EnvState::InFlight { op, per_env };
        }
        if !per_env {
            self.batch_in_flight[op as usize] += envs.len();
        }
    }

    /// Marks taken envs idle, and drops a send's tensordict once none of
    /// its envs is left.
    fn release(&mut self, envs: impl ExactSizeIterator<Item = usize>) {
        self.busy -= envs.len();
        for env in envs {
            debug_assert_eq!(self.states[env], EnvState::Taking);
            self.states[env] = EnvState::Idle;
            let send = self.origins[env].send;
            let sent = &mut self.sends[send];
            sent.envs -= 1;
            if sent.envs == 0 {
                sent.td = None;
                self.free.push(send);
            }
        }
    }
}

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
    /// Whether every env's batch size is `batch_size[1..]`.
    same_env_batch: bool,
    /// The jobs of a send to every env: env `i` from row `i`.
    all_jobs: Vec<Job>,
    book: Mutex<Book>,
}

/// Builds an [`AsyncEnvPool`].
#[derive(Debug, Default)]
pub struct PoolBuilder {
    makers: Vec<EnvMaker>,
    backend: Backend,
    stack: StackMode,
    error: Option<PoolError>,
}

impl PoolBuilder {
    /// Adds one env built by `make` (threads only).
    pub fn env<F>(mut self, make: F) -> PoolBuilder
    where
        F: FnOnce() -> Result<Box<dyn envs::Env>, envs::EnvError> + Send + 'static,
    {
        self.makers.push(EnvMaker::closure(make));
        self
    }

    /// Adds one env made by an [`EnvMaker`].
    pub fn maker(mut self, maker: EnvMaker) -> PoolBuilder {
        self.makers.push(maker);
        self
    }

    /// Adds `n` envs registered as `name`, all with `kwargs`.
    pub fn registered_n(mut self, name: &str, n: usize, kwargs: envs::Kwargs) -> PoolBuilder {
        for _ in 0..n {
            self.makers.push(EnvMaker::registry(name, kwargs.clone()));
        }
        self
    }

    /// Adds `n` envs registered as `name`, env `i` with `kwargs[i]`; an
    /// error at `build` if there are not `n` sets.
    pub fn registered_each(
        mut self,
        name: &str,
        n: usize,
        kwargs: Vec<envs::Kwargs>,
    ) -> PoolBuilder {
        if kwargs.len() != n {
            self.error.get_or_insert(PoolError::KwargsLength {
                name: name.to_owned(),
                expected: n,
                found: kwargs.len(),
            });
            return self;
        }
        for k in kwargs {
            self.makers.push(EnvMaker::registry(name, k));
        }
        self
    }

    /// Sets the backend (default: threads).
    pub fn backend(mut self, backend: Backend) -> PoolBuilder {
        self.backend = backend;
        self
    }

    /// Sets the stack mode (default: dense).
    pub fn stack(mut self, stack: StackMode) -> PoolBuilder {
        self.stack = stack;
        self
    }

    /// Builds the envs and starts the backend. An error if there is no env,
    /// an env cannot be made, or the envs' specs cannot be stacked in the
    /// chosen mode (the error names the key and env).
    pub fn build(self) -> Result<AsyncEnvPool, PoolError> {
        if let Some(err) = self.error {
            return Err(err);
        }
        if self.makers.is_empty() {
            return Err(PoolError::NoEnvs);
        }
        // A registry name that is not registered is an error before any env
        // is built.
        let known = envs::registered();
        for maker in &self.makers {
            if let MakerKind::Registry { name, .. } = &maker.0 {
                if !known.contains(name) {
                    return Err(envs::EnvError::UnknownEnv {
                        name: name.clone(),
                        known,
                    }
                    .into());
                }
            }
        }
        let backend = match self.backend {
            Backend::Threading { threads, affinity } => {
                let factories = self
                    .makers
                    .into_iter()
                    .map(EnvMaker::into_factory)
                    .collect();
                let options = ThreadOptions {
                    threads,
                    // A dense batch gathers every result into rows of one
                    // batch: the workers do it as they publish.
                    batch_rows: self.stack == StackMode::Dense,
                    affinity,
                };
                Dispatch::Threads(ThreadBackend::start(factories, &options)?)
            }
            Backend::Multiprocessing(options) => {
                let mut entries = Vec::with_capacity(self.makers.len());
                for (env, maker) in self.makers.into_iter().enumerate() {
                    match maker.0 {
                        MakerKind::Registry { name, kwargs } => entries.push((name, kwargs)),
                        MakerKind::Closure(_) => return Err(PoolError::NeedsRegistry { env }),
                    }
                }
                let options = ProcOptions {
                    // As for threads: a dense batch takes results from
                    // rows of one batch.
                    batch_rows: self.stack == StackMode::Dense,
                    ..options
                };
                Dispatch::Procs(ProcBackend::start(entries, &options)?)
            }
        };
        let children = backend.env_specs();
        let specs = PoolSpecs::new(children, self.stack)?;
        let templates = (0..backend.num_envs())
            .map(|i| backend.templates(i))
            .collect();
        let n = children.len();
        let mut batch_size = vec![n];
        batch_size.extend_from_slice(children[0].batch_size());
        let env_index = children
            .iter()
            .enumerate()
            .map(|(env, c)| env_index_value(env, c.batch_size()))
            .collect();
        let same_env_batch = children.iter().all(|c| c.batch_size() == &batch_size[1..]);
        Ok(AsyncEnvPool {
            backend,
            stack: self.stack,
            specs,
            batch_size,
            templates,
            env_index,
            same_env_batch,
            all_jobs: (0..n).map(|env| (env, Some(env))).collect(),
            book: Mutex::new(Book::new(n)),
        })
    }
}

/// A batch receive's envs, taken from the backend (their state `Taking`).
#[derive(Debug)]
struct Taken {
    envs: Vec<usize>,
    /// Per env: its send's tensordict (an index into `tds`) and its row.
    rows: Vec<(usize, Option<usize>)>,
    /// The sends of the envs (indices into [`Book::sends`]), each once.
    sends: SmallVec<[usize; 2]>,
    /// Their tensordicts, one clone per send.
    tds: SmallVec<[Option<Arc<TensorDict>>; 2]>,
}

/// A per-env receive's env, taken (its state `Taking`).
#[derive(Debug)]
struct TakenEnv {
    /// Its send's tensordict and its row there.
    td: Option<Arc<TensorDict>>,
    row: Option<usize>,
    /// Whether it was sent with a per-env target.
    per_env: bool,
}

impl Taken {
    /// The `j`-th env's sent tensordict and row.
    fn origin(&self, j: usize) -> (Option<&TensorDict>, Option<usize>) {
        let (at, row) = self.rows[j];
        (self.tds[at].as_deref(), row)
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
        self.book.lock().unwrap_or_else(|p| p.into_inner())
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

    /// Exchange statistics (batches, items, fill ratio, latencies), by
    /// name; empty without a shared-memory exchange. With `reset`, the
    /// counters start again.
    pub fn stats(&self, reset: bool) -> BTreeMap<String, f64> {
        match &self.backend {
            Dispatch::Procs(b) => b.stats(reset).map(stats_map).unwrap_or_default(),
            Dispatch::Threads(_) => BTreeMap::new(),
        }
    }

    /// The process id of each worker process: empty for threads.
    pub fn worker_pids(&self) -> Vec<u32> {
        match &self.backend {
            Dispatch::Procs(b) => b.worker_pids(),
            Dispatch::Threads(_) => Vec::new(),
        }
    }

    /// The envs addressed by `target`, each with its row of `td`.
    fn resolve(
        &self,
        target: Target,
        td: Option<&TensorDict>,
    ) -> Result<Cow<'_, [Job]>, PoolError> {
        let n = self.num_envs();
        let rows = |count: usize| -> Result<(), PoolError> {
            match td {
                Some(td) if td.batch_size().first() != Some(&count) => {
                    Err(PoolError::TargetLength {
                        targets: count,
                        batch_size: td.batch_size().to_vec(),
                    })
                }
                _ => Ok(()),
            }
        };
        let envs: Vec<usize> = match target {
            Target::All => {
                rows(n)?;
                self.check_rows(td, 0..n)?;
                return Ok(Cow::Borrowed(&self.all_jobs));
            }
            Target::Envs(envs) => {
                rows(envs.len())?;
                envs
            }
            Target::Env(env) => {
                if env >= n {
                    return Err(PoolError::EnvOutOfRange { env, num_envs: n });
                }
                // One env's tensordict: its own batch size, or a leading 1.
                let own = self.env_batch(env);
                let row = match td {
                    Some(td) if td.batch_size() == own => None,
                    Some(td) if td.batch_size().first() == Some(&1) => {
                        if &td.batch_size()[1..] != own {
                            return Err(PoolError::RowBatchSize {
                                env,
                                expected: own.to_vec(),
                                found: td.batch_size()[1..].to_vec(),
                            });
                        }
                        Some(0)
                    }
                    Some(td) => {
                        return Err(PoolError::TargetLength {
                            targets: 1,
                            batch_size: td.batch_size().to_vec(),
                        })
                    }
                    None => None,
                };
                return Ok(Cow::Owned(vec![(env, row)]));
            }
            Target::EnvIndex => {
                let td = td.ok_or_else(|| PoolError::EnvIndex {
                    reason: "no tensordict to read \"env_index\" from".into(),
                })?;
                let envs = env_index_of(td)?;
                rows(envs.len())?;
                envs
            }
        };
        let mut seen: SmallVec<[bool; 256]> = smallvec::smallvec![false; n];
        for &env in &envs {
            if env >= n {
                return Err(PoolError::EnvOutOfRange { env, num_envs: n });
            }
            if std::mem::replace(&mut seen[env], true) {
                return Err(PoolError::DuplicateEnv { env });
            }
        }
        self.check_rows(td, envs.iter().copied())?;
        Ok(Cow::Owned(
            envs.into_iter()
                .enumerate()
                .map(|(row, env)| (env, Some(row)))
                .collect(),
        ))
    }

    /// Each row of `td` must have its env's batch size (the backends copy
    /// rows into buffers of that size): an error naming the first of `envs`
    /// whose batch size differs.
    fn check_rows(
        &self,
        td: Option<&TensorDict>,
        mut envs: impl Iterator<Item = usize>,
    ) -> Result<(), PoolError> {
        let Some(td) = td else {
            return Ok(());
        };
        let found = &td.batch_size()[1..];
        let wrong = if self.same_env_batch {
            // Every env's batch size is this one: all rows fit, or none.
            if found == &self.batch_size[1..] {
                None
            } else {
                envs.next()
            }
        } else {
            envs.find(|&env| found != self.env_batch(env))
        };
        match wrong {
            Some(env) => Err(PoolError::RowBatchSize {
                env,
                expected: self.env_batch(env).to_vec(),
                found: found.to_vec(),
            }),
            None => Ok(()),
        }
    }

    fn send(&self, op: Op, td: Option<TensorDict>, target: Target) -> Result<(), PoolError> {
        if op != Op::Reset && td.is_none() {
            return Err(PoolError::MissingInput { op: op.name() });
        }
        let per_env = matches!(target, Target::Env(_));
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
                    .filter(|&env| book.states[env] != EnvState::Idle)
                    .collect();
                if !busy.is_empty() {
                    return Err(PoolError::Busy { envs: busy });
                }
            }
            book.send(op, per_env, &jobs, td.clone());
        }
        if let Err(err) = self.backend().send(op, &jobs, td.as_deref()) {
            self.book().unsend(op, per_env, &jobs);
            // A receiver may be waiting for these envs.
            self.backend().wake_receivers();
            return Err(err);
        }
        Ok(())
    }

    /// Waits for the results of a batch receive and marks them taken.
    fn collect(&self, op: Op, recv: Recv) -> Result<Taken, PoolError> {
        let start = Instant::now();
        if recv.min_get < 1 {
            return Err(PoolError::MinGet {
                min_get: recv.min_get,
            });
        }
        if let Some(max_get) = recv.max_get {
            if max_get < recv.min_get {
                return Err(PoolError::MaxGet {
                    min_get: recv.min_get,
                    max_get,
                });
            }
        }
        // A timeout too long to represent is no deadline.
        let deadline = recv.timeout.and_then(|t| start.checked_add(t));
        let limit = recv.max_get.unwrap_or(usize::MAX);
        let backend = self.backend();
        let batch_state = EnvState::InFlight { op, per_env: false };
        let mut ready = Vec::new();
        loop {
            // Read before the book: a result or a wake-up after this point
            // ends the wait below.
            let ticket = backend.listen();
            let mut book = self.book();
            if book.shut_down || backend.is_shut_down() {
                return Err(PoolError::ShutDown);
            }
            if ready.capacity() == 0 {
                ready = std::mem::take(&mut book.spare.envs);
            }
            // Checked on every pass: another thread may have taken results
            // (per-env receives) since the call began.
            let in_flight = book.batch_in_flight[op as usize];
            if recv.min_get > in_flight {
                return Err(PoolError::NotEnoughInFlight {
                    op: op.name(),
                    min_get: recv.min_get,
                    in_flight,
                });
            }
            ready.clear();
            ready.reserve(in_flight);
            if in_flight == book.states.len() {
                // Every env is in flight for this receive (a send to all):
                // no state to look at.
                backend.ready_among(0..in_flight, &mut ready);
            } else {
                let candidates = book.states.iter().enumerate();
                let candidates = candidates.filter(|&(_, &state)| state == batch_state);
                backend.ready_among(candidates.map(|(env, _)| env), &mut ready);
            }
            // A failed env is reported first, alone; the other results stay.
            if let Some(failed) = backend.first_failed(&ready) {
                book.take_env(failed, op, false);
                drop(book);
                let result = backend.peek(failed, |_| ());
                // Idle again, and other receivers (which may have counted on
                // this result) woken.
                self.release(&[failed]);
                return Err(match result {
                    Err(err) => err,
                    Ok(()) => PoolError::NotInFlight {
                        op: op.name(),
                        env: failed,
                    },
                });
            }
            let past_deadline = deadline.is_some_and(|d| Instant::now() >= d);
            let enough = ready.len() >= recv.min_get;
            let no_more_coming = ready.len() == in_flight;
            if enough
                && (deadline.is_none() || ready.len() >= limit || past_deadline || no_more_coming)
            {
                if ready.len() > limit {
                    // The oldest results first (as a completion queue gives
                    // them), then in env order.
                    ready.sort_by_key(|&env| backend.published(env));
                    ready.truncate(limit);
                    ready.sort_unstable();
                }
                return Ok(book.take(op, ready));
            }
            if past_deadline {
                return Err(PoolError::Timeout {
                    op: op.name(),
                    timeout: recv.timeout.unwrap_or(Duration::ZERO),
                    ready: ready.len(),
                    min_get: recv.min_get,
                });
            }
            // Every env not idle is one whose result this receive must
            // have (a synchronous step, or a receive of all in flight): it
            // runs queued envs itself rather than wait for a worker, since
            // it cannot return before they are done anyway. (Envs another
            // thread sends meanwhile may be in a chunk it runs: chunks are
            // small, of quick envs, and it looks again after each.)
            let may_help =
                deadline.is_none() && recv.min_get == in_flight && book.busy == in_flight;
            drop(book);
            if may_help && backend.help() {
                continue;
            }
            // At least this many more results must be published before the
            // batch can be complete.
            let needed = if enough {
                1
            } else {
                recv.min_get - ready.len()
            };
            backend.wait(ticket, needed, deadline, start);
        }
    }

    /// Waits for env `env`'s result of `op` and marks it taken.
    fn collect_env(
        &self,
        op: Op,
        env: usize,
        timeout: Option<Duration>,
    ) -> Result<TakenEnv, PoolError> {
        let start = Instant::now();
        let deadline = timeout.and_then(|t| start.checked_add(t));
        if env >= self.num_envs() {
            return Err(PoolError::EnvOutOfRange {
                env,
                num_envs: self.num_envs(),
            });
        }
        let backend = self.backend();
        loop {
            let ticket = backend.listen();
            let mut book = self.book();
            if book.shut_down || backend.is_shut_down() {
                return Err(PoolError::ShutDown);
            }
            let per_env = match book.states[env] {
                EnvState::InFlight {
                    op: sent_op,
                    per_env,
                } if sent_op == op => per_env,
                _ => return Err(PoolError::NotInFlight { op: op.name(), env }),
            };
            if backend.is_done(env) {
                return Ok(book.take_env(env, op, per_env));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(PoolError::EnvTimeout {
                    op: op.name(),
                    env,
                    timeout: timeout.unwrap_or(Duration::ZERO),
                });
            }
            drop(book);
            // No helping here: a chunk of other envs run on this thread
            // could keep it long after its own env is done.
            backend.wait(ticket, 1, deadline, start);
        }
    }

    /// Drops the results of taken envs and marks them idle; wakes other
    /// receivers, whose `min_get` may now be out of reach.
    fn release(&self, envs: &[usize]) {
        let backend = self.backend();
        for &env in envs {
            backend.release(env);
        }
        self.book().release(envs.iter().copied());
        backend.wake_receivers();
    }

    /// The root part of an env's step result: its row of the sent
    /// tensordict.
    fn root_row(td: Option<&TensorDict>, row: Option<usize>) -> Result<TensorDict, PoolError> {
        Ok(match (td, row) {
            (Some(td), Some(row)) => td.index(row)?,
            (Some(td), None) => td.clone(),
            (None, _) => TensorDict::new(&[]),
        })
    }

    /// The root part of a dense batch of step results: the sent rows of
    /// each taken env, in order.
    fn step_roots(&self, taken: &Taken) -> Result<TensorDict, PoolError> {
        let k = taken.envs.len();
        let in_order = taken
            .rows
            .iter()
            .enumerate()
            .all(|(j, &(_, row))| row == Some(j));
        match taken.origin(0) {
            // The sync path: every row of one send, in order. The sent
            // tensordict is the root batch itself.
            (Some(td), _)
                if taken.tds.len() == 1 && in_order && td.batch_size().first() == Some(&k) =>
            {
                Ok(td.clone())
            }
            (first, first_row) => {
                let template = Self::root_row(first, first_row)?;
                let mut batch = TensorDict::zeros_stacked(&template, k)?;
                // One send at a time, its rows column by column.
                let mut at: SmallVec<[usize; 64]> = SmallVec::new();
                let mut rows: SmallVec<[usize; 64]> = SmallVec::new();
                for (send, td) in taken.tds.iter().enumerate() {
                    // A reset's envs: no root entries.
                    let Some(td) = td.as_deref() else {
                        continue;
                    };
                    at.clear();
                    rows.clear();
                    for (j, &(of, row)) in taken.rows.iter().enumerate() {
                        match row {
                            _ if of != send => {}
                            Some(row) => {
                                at.push(j);
                                rows.push(row);
                            }
                            None => batch.write_row(j, td)?,
                        }
                    }
                    batch.copy_rows(&at, td, &rows)?;
                }
                Ok(batch)
            }
        }
    }

    /// Builds the batch of step results (root rows and `"next"`) and, for
    /// step-and-maybe-reset, the batch of next roots.
    fn build(
        &self,
        op: Op,
        taken: &Taken,
    ) -> Result<(StackedTensorDict, Option<StackedTensorDict>), PoolError> {
        let backend = self.backend();
        let k = taken.envs.len();
        let first = taken.envs[0];
        let wants_root = op != Op::Step;
        let wants_step = op != Op::Reset;
        if self.stack == StackMode::Dense {
            let step_batch = if wants_step {
                Some(self.step_roots(taken)?)
            } else {
                None
            };
            // The results: from the batch rows the workers filled, else read
            // in place, column by column. The envs are released only once
            // the whole batch is built, so that a batch that cannot be built
            // loses nothing.
            let (next_batch, root_batch) = match backend.gather(op, &taken.envs) {
                Some(batches) => batches,
                None => {
                    let mut next_batch = if wants_step {
                        Some(TensorDict::zeros_stacked(&self.templates[first].0, k)?)
                    } else {
                        None
                    };
                    let mut root_batch = if wants_root {
                        Some(TensorDict::zeros_stacked(&self.templates[first].1, k)?)
                    } else {
                        None
                    };
                    backend.peek_many(&taken.envs, |outputs| -> Result<(), PoolError> {
                        if let Some(next) = next_batch.as_mut() {
                            let rows: SmallVec<[&TensorDict; 64]> =
                                outputs.iter().map(|o| o.next).collect();
                            next.write_rows(&rows)?;
                        }
                        if let Some(root) = root_batch.as_mut() {
                            let rows: SmallVec<[&TensorDict; 64]> =
                                outputs.iter().map(|o| o.root).collect();
                            root.write_rows(&rows)?;
                        }
                        Ok(())
                    })??;
                    (next_batch, root_batch)
                }
            };
            let env_index = self.env_index_column(&taken.envs);
            let (step, root) = match (step_batch, next_batch, root_batch) {
                (Some(mut step), Some(next), root) => {
                    step.set("next", next)?;
                    let root = match root {
                        Some(mut root) => {
                            root.set("env_index", env_index.clone())?;
                            Some(StackedTensorDict::Dense(root))
                        }
                        None => None,
                    };
                    step.set("env_index", env_index)?;
                    (step, root)
                }
                (_, _, Some(mut root)) => {
                    root.set("env_index", env_index)?;
                    (root, None)
                }
                _ => unreachable!("every op wants a step or a root"),
            };
            return Ok((StackedTensorDict::Dense(step), root));
        }
        let mut steps = Vec::with_capacity(k);
        let mut roots = Vec::with_capacity(k);
        for (j, &env) in taken.envs.iter().enumerate() {
            let (td, row) = taken.origin(j);
            let (step, root) = self.env_result(op, env, td, row)?;
            steps.extend(step);
            roots.extend(root);
        }
        let stack = |parts: Vec<TensorDict>| -> Result<StackedTensorDict, PoolError> {
            Ok(match self.stack {
                StackMode::Lazy => StackedTensorDict::Lazy(TensorDict::lazy_stack(parts)?),
                _ => TensorDict::maybe_dense_stack(parts)?,
            })
        };
        Ok(match op {
            Op::Reset => (stack(roots)?, None),
            Op::Step => (stack(steps)?, None),
            Op::StepAndMaybeReset => (stack(steps)?, Some(stack(roots)?)),
        })
    }

    /// One env's step result and root result, as owned tensordicts.
    fn env_result(
        &self,
        op: Op,
        env: usize,
        td: Option<&TensorDict>,
        row: Option<usize>,
    ) -> Result<(Option<TensorDict>, Option<TensorDict>), PoolError> {
        let mut step = if op == Op::Reset {
            None
        } else {
            Some(Self::root_row(td, row)?)
        };
        let (next, root) = self
            .backend()
            .peek(env, |out| (out.next.clone(), out.root.clone()))?;
        let index = self.env_index[env].clone();
        if let Some(step) = step.as_mut() {
            step.set("next", next)?;
            step.set("env_index", index.clone())?;
        }
        let root = if op == Op::Step {
            None
        } else {
            let mut root = root;
            root.set("env_index", index)?;
            Some(root)
        };
        Ok((step, root))
    }

    /// Receives a batch: waits, builds it, and only then releases the envs;
    /// a batch that cannot be built is an error and its results stay for the
    /// next receive (a per-env receive can take them one by one).
    fn recv_batch(
        &self,
        op: Op,
        recv: Recv,
    ) -> Result<(StackedTensorDict, Option<StackedTensorDict>), PoolError> {
        let taken = self.collect(op, recv)?;
        match self.build(op, &taken) {
            Ok(built) => {
                self.backend().record_batch(&taken.envs, recv.max_get, op);
                self.release(&taken.envs);
                let Taken { envs, rows, .. } = taken;
                self.book().spare = Spare { envs, rows };
                Ok(built)
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
            Err(err @ (PoolError::Backend(_) | PoolError::Proc(_))) => {
                // The env itself failed: its error is its result.
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
    pub fn reset(&self, td: Option<TensorDict>) -> Result<StackedTensorDict, PoolError> {
        self.check_idle(Op::Reset)?;
        self.send(Op::Reset, td, Target::All)?;
        Ok(self.recv_batch(Op::Reset, Recv::all(self.num_envs()))?.0)
    }

    /// Steps every env with its row of `td`; returns `td`'s rows with the
    /// results under `"next"` and `"env_index"`. An error if any env is in
    /// flight.
    pub fn step(&self, td: TensorDict) -> Result<StackedTensorDict, PoolError> {
        self.check_idle(Op::Step)?;
        self.send(Op::Step, Some(td), Target::All)?;
        Ok(self.recv_batch(Op::Step, Recv::all(self.num_envs()))?.0)
    }

    /// Steps every env, resetting those that are done: returns the step
    /// results and the roots of the next step (reset where done).
    pub fn step_and_maybe_reset(
        &self,
        td: TensorDict,
    ) -> Result<(StackedTensorDict, StackedTensorDict), PoolError> {
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
    pub fn async_reset_recv(&self, recv: Recv) -> Result<StackedTensorDict, PoolError> {
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
    pub fn async_step_recv(&self, recv: Recv) -> Result<StackedTensorDict, PoolError> {
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
    pub fn async_step_and_maybe_reset_recv(
        &self,
        recv: Recv,
    ) -> Result<(StackedTensorDict, StackedTensorDict), PoolError> {
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

/// An exchange's statistics by TorchRL's names.
fn stats_map(s: exchange::ExchangeStats) -> BTreeMap<String, f64> {
    [
        ("batches", s.batches as f64),
        ("items", s.items as f64),
        ("avg_batch_size", s.avg_batch_size),
        ("batch_fill_ratio", s.batch_fill_ratio),
        ("partial_batch_fraction", s.partial_batch_fraction),
        (
            "avg_observation_to_batch_ms",
            s.avg_observation_to_batch.as_secs_f64() * 1e3,
        ),
        (
            "avg_batch_to_action_ms",
            s.avg_batch_to_action.as_secs_f64() * 1e3,
        ),
        ("consumer_busy_fraction", s.consumer_busy_fraction),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// Env `env`'s index shaped like its batch size: the integer itself for an
/// unbatched env, else a stack of it with one element per sub-env.
fn env_index_value(env: usize, batch: &[usize]) -> NonTensor {
    match batch.split_first() {
        None => NonTensor::Int(env as i64),
        Some((&n, rest)) => NonTensor::Stack(vec![env_index_value(env, rest); n]),
    }
}

/// The env indices of a tensordict's `"env_index"` entry: a stack of
/// integers, or a 1-D integer tensor.
fn env_index_of(td: &TensorDict) -> Result<Vec<usize>, PoolError> {
    let bad = |reason: String| PoolError::EnvIndex { reason };
    let values: Vec<i64> = match td.get("env_index") {
        None => {
            return Err(bad(format!(
                "the tensordict has no \"env_index\" entry (keys: {:?})",
                td.keys(false, false)
            )))
        }
        Some(Entry::NonTensor(v)) => v
            .as_int_vec()
            .or_else(|| v.as_int().map(|i| vec![i]))
            .ok_or_else(|| bad(format!("\"env_index\" is {v}, not integers")))?,
        Some(Entry::Tensor(t)) => match t.dtype() {
            tensordict::DType::I64 => t.to_vec::<i64>()?,
            tensordict::DType::I32 => t.to_vec::<i32>()?.into_iter().map(i64::from).collect(),
            other => {
                return Err(bad(format!(
                    "\"env_index\" is a tensor of dtype {other}, not an integer tensor"
                )))
            }
        },
        Some(Entry::Dict(_)) => return Err(bad("\"env_index\" is a tensordict".into())),
    };
    values
        .into_iter()
        .map(|v| usize::try_from(v).map_err(|_| bad(format!("env index {v} is negative"))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn td(n: usize) -> Option<Arc<TensorDict>> {
        Some(Arc::new(TensorDict::new(&[n])))
    }

    #[test]
    fn the_book_counts_envs_and_frees_a_send_with_its_last_env() {
        let mut book = Book::new(4);
        let first = td(2);
        book.send(
            Op::Step,
            false,
            &[(1, Some(0)), (3, Some(1))],
            first.clone(),
        );
        book.send(Op::Step, true, &[(0, None)], td(1));
        assert_eq!(book.busy, 3);
        assert_eq!(book.batch_in_flight, [0, 2, 0]);
        assert_eq!(book.busy_envs(), vec![0, 1, 3]);

        // Two envs of one send: one tensordict, rows in order.
        let taken = book.take(Op::Step, vec![1, 3]);
        assert_eq!(taken.tds.len(), 1);
        assert_eq!(taken.rows, vec![(0, Some(0)), (0, Some(1))]);
        assert_eq!(book.batch_in_flight, [0, 0, 0]);
        book.put_back(Op::Step, &[1, 3], false);
        assert_eq!(book.batch_in_flight, [0, 2, 0]);

        let one = book.take_env(3, Op::Step, false);
        assert_eq!(one.row, Some(1));
        book.release([3].into_iter());
        // Env 1 still holds the send: its tensordict stays.
        assert_eq!(Arc::strong_count(first.as_ref().unwrap()), 4);
        drop((taken, one));
        book.take_env(1, Op::Step, false);
        book.release([1].into_iter());
        assert_eq!(Arc::strong_count(first.as_ref().unwrap()), 1);
        assert_eq!(book.busy, 1);
        assert_eq!(book.batch_in_flight, [0, 0, 0]);

        // The freed entry is reused by the next send.
        let sends = book.sends.len();
        book.send(Op::Reset, false, &[(2, Some(0))], None);
        assert_eq!(book.sends.len(), sends);
        book.unsend(Op::Reset, false, &[(2, Some(0))]);
        assert_eq!(book.busy, 1);
        assert_eq!(book.batch_in_flight, [0, 0, 0]);
    }
}
