//! Tensor specs for reinforcement-learning environments, as TorchRL's
//! `torchrl.data.tensor_specs`: what each entry of an env's input and output
//! looks like (shape, dtype, domain).
//!
//! # Where it sits
//!
//! `specs` is the second layer of rlpool: above [`tensordict`] (whose
//! [`Tensor`](tensordict::Tensor), [`TensorDict`](tensordict::TensorDict)
//! and [`NestedKey`](tensordict::NestedKey) it describes) and below `envs`
//! (whose `Env` trait declares its specs with this crate) and the pools
//! (which stack their envs' specs). It knows nothing of envs or pools.
//!
//! # What it does
//!
//! - Leaves: [`TensorSpec::unbounded`], [`TensorSpec::bounded`] (scalar or
//!   per-element bounds), [`TensorSpec::categorical`],
//!   [`TensorSpec::one_hot`], [`TensorSpec::binary`],
//!   [`TensorSpec::multi_categorical`], [`TensorSpec::non_tensor`]; the
//!   constructors check the spec (including that its size fits `usize`;
//!   [`TensorSpec::try_unbounded`] and [`TensorSpec::try_non_tensor`] are
//!   the forms that return the error), so every spec can be sampled (up to
//!   [`MAX_VALUE_BYTES`] per value).
//! - [`Composite`]: the spec of a tensordict, nested keys included.
//! - Values: [`TensorSpec::rand`] (from a caller's seeded generator),
//!   [`TensorSpec::zero`], refused (a typed error) above
//!   [`MAX_VALUE_BYTES`] rather than left to the allocator; containment:
//!   [`TensorSpec::check`] and [`Composite::check`], with errors that name
//!   the key, the env (inside a stack) and what is wrong.
//! - Stacking across envs along a new leading dim: dense
//!   ([`TensorSpec::stack`], equal specs; the error names the key and the
//!   env that differs) and lazy ([`TensorSpec::lazy_stack`], heterogeneous
//!   envs, differing entries kept as [`StackedSpec`]s); [`TensorSpec::index`]
//!   gives one env's spec back.
//! - A binary codec, for a worker process to send its env's specs to the
//!   parent: [`TensorSpec::encode`] and [`TensorSpec::decode`], which never
//!   panics on malformed bytes, nests at most [`MAX_DECODE_DEPTH`] levels
//!   and rebuilds every spec through the constructors
//!   ([`SpecError::Decode`] names the byte offset and the key otherwise).
//!
//! ```
//! use rand::{rngs::StdRng, SeedableRng};
//! use specs::{Composite, TensorSpec};
//! use tensordict::DType;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Pendulum-v1's specs.
//! let spec = Composite::new(&[])
//!     .with("observation", TensorSpec::bounded(&[3], DType::F32, -8.0, 8.0)?)?
//!     .with("action", TensorSpec::bounded(&[1], DType::F32, -2.0, 2.0)?)?
//!     .with(("next", "reward"), TensorSpec::unbounded(&[1], DType::F32))?
//!     .with(("next", "done"), TensorSpec::categorical(&[1], DType::Bool, 2)?)?;
//!
//! // A random step, reproducible from the seed, is in the spec.
//! let mut rng = StdRng::seed_from_u64(0);
//! let step = spec.rand(&mut rng);
//! spec.check(&step)?;
//!
//! // Eight envs, stacked; env 3's spec back.
//! let batch = Composite::stack(&vec![spec.clone(); 8])?;
//! assert_eq!(batch.shape(), &[8]);
//! assert_eq!(batch.spec("action")?.shape().as_slice(), &[8, 1]);
//! assert_eq!(batch.index(3)?, spec);
//! println!("{batch}");
//!
//! // To another process and back.
//! let batch = TensorSpec::from(batch);
//! assert_eq!(TensorSpec::decode(&batch.encode())?, batch);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

mod check;
mod codec;
mod composite;
mod display;
mod elements;
mod error;
mod form;
mod sample;
mod spec;
mod stack;
mod stacked;

pub use tensordict;

pub use crate::codec::MAX_DECODE_DEPTH;
pub use crate::composite::Composite;
pub use crate::error::{DecodeProblem, Mismatch, SpecError};
pub use crate::sample::{MAX_NON_TENSOR_NDIM, MAX_VALUE_BYTES};
pub use crate::spec::{
    Binary, Bounded, Categorical, MultiCategorical, NonTensorSpec, OneHot, TensorSpec, Unbounded,
};
pub use crate::stacked::StackedSpec;
