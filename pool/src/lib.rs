//! rlpool: an asynchronous pool of reinforcement-learning environments.
//!
//! A learner sends actions to some environments, goes on with its own work,
//! and collects whichever results are ready: a full batch, the first `k`,
//! all that is ready before a deadline, or one given environment. This is
//! the facade crate: [`AsyncEnvPool`] with its [`Backend`] (worker threads
//! or worker processes), and the layers below it re-exported so that a user
//! can depend on this crate alone:
//!
//! - [`tensordict`]: the data model (tensors, tensordicts, stacking, codec);
//! - [`specs`]: tensor specs and their stacking across envs;
//! - [`envs`]: the `Env` trait, the registry and the reference environments.
//!
//! ```
//! use std::time::Duration;
//! use pool::{AsyncEnvPool, Recv, Target};
//! use pool::envs::Kwargs;
//! use pool::tensordict::{Tensor, TensorDict};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = AsyncEnvPool::builder().registered_n("CartPole-v1", 8, Kwargs::new()).build()?;
//! pool.reset(None)?;
//!
//! // Push every cart right, then collect the first 4 results to arrive.
//! let mut actions = TensorDict::new(&[8]);
//! actions.set("action", Tensor::full(&[8, 1], 1i64))?;
//! pool.async_step_send(actions, Target::All)?;
//! let first = pool.async_step_recv(Recv::new().min_get(4).max_get(4))?;
//! assert_eq!(first.len(), 4);
//! // ... and the rest, with a deadline.
//! let rest = pool.async_step_recv(Recv::new().min_get(4).timeout(Duration::from_secs(5)))?;
//! assert_eq!(rest.len(), 4);
//! # Ok(()) }
//! ```
//!
//! # Worker processes
//!
//! With [`Backend::Multiprocessing`], envs run in worker processes: your
//! own program started again in worker mode. Call [`init`] at the top of
//! `main`, after registering your own envs (workers build envs by registry
//! name); in a worker it runs the worker and never returns, anywhere else
//! it returns at once. In an integration test, add a test that registers
//! the envs and calls [`init`], and start the workers with
//! [`ProcOptions::for_test`] naming it.
//!
//! ```
//! use pool::{AsyncEnvPool, Backend, ExchangeMode, ProcOptions, ResolvedExchange};
//! use pool::envs::Kwargs;
//! use pool::tensordict::{Tensor, TensorDict};
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // envs::register("MyEnv", ...) first, for envs of your own.
//!     pool::init();
//!     let pool = AsyncEnvPool::builder()
//!         .backend(Backend::Multiprocessing(
//!             ProcOptions::default().envs_per_worker(2).exchange(ExchangeMode::Shm),
//!         ))
//!         .registered_n("CartPole-v1", 4, Kwargs::new().with("seed", 1))
//!         .build()?;
//!     assert_eq!(pool.resolved_exchange(), ResolvedExchange::Shm);
//!     pool.reset(None)?;
//!     let mut actions = TensorDict::new(&[4]);
//!     actions.set("action", Tensor::full(&[4, 1], 1i64))?;
//!     let batch = pool.step(actions)?.into_dense()?;
//!     assert_eq!(batch.tensor(("next", "observation"))?.shape(), &[4, 4]);
//!     Ok(())
//! }
//! ```
#![forbid(unsafe_code)]

mod batch;
mod config;
mod dispatch;
mod error;
mod interrupt;
mod pool;
mod pool_specs;
mod target;

pub use crate::batch::Batch;
pub use crate::config::{Backend, EnvMaker, ResolvedExchange, StackMode};
pub use crate::error::{EnvFailure, PoolError};
pub use crate::interrupt::{interruptible, CHECK_EVERY};
pub use crate::pool::{AsyncEnvPool, PoolBuilder};
pub use crate::pool_specs::PoolSpecs;
pub use crate::target::{Recv, Target};
#[doc(inline)]
pub use exchange::{ExchangeStats, StatValue};

#[doc(inline)]
pub use envs;
#[doc(inline)]
pub use specs;
#[doc(inline)]
pub use tensordict;

#[doc(inline)]
pub use pool_thread::{ThreadError, ThreadOptions};

#[doc(inline)]
pub use affinity::{available_cpus, current_cpus, Affinity, AffinityError};

#[doc(inline)]
pub use pool_proc::{init, is_worker, libtest_worker_args, ExchangeMode, ProcError, ProcOptions};

/// The README's code blocks, compiled and run as doc tests so that the quick
/// start never goes stale.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
