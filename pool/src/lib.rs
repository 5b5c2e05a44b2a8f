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
//! use pool::envs::{Env, Kwargs, Registry};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut env = Registry::global().make("CartPole-v1", &Kwargs::new())?;
//! env.seed(0);
//! let rollout = env.rollout(10, None, true)?;
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
