//! Environments: the [`Env`] trait, a [`Registry`] of env constructors by
//! name with keyword arguments ([`Kwargs`]), and the reference environments.
//!
//! This crate sits above `tensordict` (the data) and `specs` (what the data
//! may be), and below the pools, which it knows nothing of. A user who writes
//! an environment depends on this crate alone.
//!
//! - [`Env`]: specs, `reset_into` / `step_into` on buffers built once from the
//!   specs, and everything else provided: `reset`, `step` (the result under
//!   `"next"`, TorchRL's layout), `step_mdp`, `step_and_maybe_reset`,
//!   `rand_step`, `rollout`, `fake_tensordict`; and [`check_env_specs`].
//! - [`EnvSpecs`], an env's five composite specs, with
//!   [`EnvSpecs::to_bytes`] / [`EnvSpecs::from_bytes`] (the spec codec of
//!   `specs`) so that a worker process can send them to its parent.
//! - Reference environments, registered by name: [`CartPole`]
//!   (`CartPole-v1`) and [`Pendulum`] (`Pendulum-v1`) with Gymnasium's exact
//!   dynamics, [`CountingEnv`] and [`LatencyEnv`].
//!
//! ```
//! use envs::{Env, Kwargs, Policy};
//! use rand::SeedableRng;
//!
//! # fn main() -> Result<(), envs::EnvError> {
//! let mut env = envs::make("CartPole-v1", &Kwargs::new().with("seed", 7))?;
//! envs::check_env_specs(&mut env, 50, 0)?;
//!
//! let mut rng = rand::rngs::StdRng::seed_from_u64(0);
//! let rollout = env.rollout(500, Policy::Random(&mut rng), true)?;
//! let steps = rollout.batch_size()[0];
//! assert!(steps >= 1 && steps <= 500);
//! let done = rollout.tensor(("next", "done"))?.to_vec::<bool>()?;
//! assert!(done[steps - 1]); // stopped at the first done
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod cartpole;
mod check;
mod counting;
mod env;
mod env_specs;
mod error;
mod kwargs;
mod latency;
mod outputs;
mod pendulum;
mod registry;

pub use crate::cartpole::CartPole;
pub use crate::check::check_env_specs;
pub use crate::counting::CountingEnv;
pub use crate::env::{scalar_action, scalar_action_by, Env, Policy};
pub use crate::env_specs::{standard_done_spec, EnvSpecs};
pub use crate::error::EnvError;
pub use crate::kwargs::{KwValue, Kwargs, KwargsReader};
pub use crate::latency::{LatencyConfig, LatencyEnv, Wait};
pub use crate::pendulum::Pendulum;
pub use crate::registry::{make, register, registered, Constructor, Registry};
