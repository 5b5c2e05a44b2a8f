//! `PoolBuilder`: envs, backend and stack mode in; a started pool out.

use std::sync::Mutex;

use pool_core::Rows;
use pool_proc::ProcBackend;
use pool_thread::ThreadBackend;
use tensordict::NonTensor;

use super::assemble::env_index_value;
use super::book::Book;
use super::AsyncEnvPool;
use crate::config::{EnvMaker, MakerKind};
use crate::dispatch::Dispatch;
use crate::{Backend, PoolError, PoolSpecs, StackMode};

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
        // A dense batch gathers every result into rows of one batch: the
        // backends do it as results arrive, when the envs' results share
        // one layout. So does a maybe-dense one, which is dense then.
        let rows = match self.stack {
            StackMode::Dense | StackMode::MaybeDense => Rows::Batch,
            StackMode::Lazy => Rows::PerEnv,
        };
        let backend = match self.backend {
            Backend::Threading(options) => {
                let factories = self
                    .makers
                    .into_iter()
                    .map(EnvMaker::into_factory)
                    .collect();
                Dispatch::Threads(ThreadBackend::start(factories, &options, rows)?)
            }
            Backend::Multiprocessing(options) => {
                let mut entries = Vec::with_capacity(self.makers.len());
                for (env, maker) in self.makers.into_iter().enumerate() {
                    match maker.0 {
                        MakerKind::Registry { name, kwargs } => entries.push((name, kwargs)),
                        MakerKind::Closure(_) => return Err(PoolError::NeedsRegistry { env }),
                    }
                }
                Dispatch::Procs(ProcBackend::start(entries, &options, rows)?)
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
        let env_index: Vec<NonTensor> = children
            .iter()
            .enumerate()
            .map(|(env, c)| env_index_value(env, c.batch_size()))
            .collect();
        let all_env_index = NonTensor::Stack(env_index.clone().into());
        let same_env_batch = children.iter().all(|c| c.batch_size() == &batch_size[1..]);
        Ok(AsyncEnvPool {
            backend,
            stack: self.stack,
            specs,
            batch_size,
            templates,
            env_index,
            all_env_index,
            keys: Default::default(),
            same_env_batch,
            all_jobs: (0..n).map(|env| (env, Some(env))).collect(),
            book: Mutex::new(Book::new(n)),
        })
    }
}
