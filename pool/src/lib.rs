//! rlpool: an asynchronous pool of reinforcement-learning environments.
//!
//! This is the facade crate. It will hold `AsyncEnvPool`, the `Backend`
//! enum and the builder; today it re-exports the layers below it so that a
//! user can depend on this crate alone:
//!
//! - [`tensordict`]: the data model (tensors, tensordicts, stacking, codec);
//! - [`specs`]: tensor specs and their stacking across envs;
//! - [`envs`]: the `Env` trait, the registry and the reference environments.
//!
//! ```
//! use pool::envs::{self, Env, Kwargs, Policy};
//! use rand::SeedableRng;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut env = envs::make("CartPole-v1", &Kwargs::new().with("seed", 0))?;
//! let mut rng = rand::rngs::StdRng::seed_from_u64(0);
//! let rollout = env.rollout(10, Policy::Random(&mut rng), true)?;
//! assert!(rollout.batch_size()[0] <= 10);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

#[doc(inline)]
pub use envs;
#[doc(inline)]
pub use specs;
#[doc(inline)]
pub use tensordict;

/// The README's code blocks, compiled and run as doc tests so that the quick
/// start never goes stale.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
