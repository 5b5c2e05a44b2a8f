//! `EnvError`, the failures of environments, their registry and their
//! keyword arguments.

use specs::SpecError;
use tensordict::{NestedKey, TensorDictError};

/// What went wrong with an environment. Each message names the env, the
/// keyword argument or the key involved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvError {
    /// A name the registry does not know.
    #[error("unknown env {name:?}; registered envs: [{}]", known.join(", "))]
    UnknownEnv {
        /// The name asked for.
        name: String,
        /// The names the registry knows.
        known: Vec<String>,
    },
    /// A name registered twice.
    #[error("env {name:?} is already registered")]
    AlreadyRegistered {
        /// The name.
        name: String,
    },
    /// A keyword argument that the env needs and was not given.
    #[error("{env}: missing keyword argument {key:?}; accepted: [{}]", accepted.join(", "))]
    MissingKwarg {
        /// The env.
        env: String,
        /// The keyword.
        key: String,
        /// The keywords the env accepts.
        accepted: Vec<String>,
    },
    /// A keyword argument of the wrong type.
    #[error("{env}: keyword argument {key:?} must be {expected}, got {found}")]
    KwargType {
        /// The env.
        env: String,
        /// The keyword.
        key: String,
        /// The type expected.
        expected: &'static str,
        /// The value given, with its type.
        found: String,
    },
    /// Keyword arguments that the env does not accept.
    #[error("{env}: unknown keyword argument(s) [{}]; accepted: [{}]", keys.join(", "), accepted.join(", "))]
    UnknownKwargs {
        /// The env.
        env: String,
        /// The keywords not accepted.
        keys: Vec<String>,
        /// The keywords the env accepts.
        accepted: Vec<String>,
    },
    /// A keyword argument of the right type with a value out of range.
    #[error("{env}: keyword argument {key:?} is invalid: {reason}")]
    InvalidKwarg {
        /// The env.
        env: String,
        /// The keyword.
        key: String,
        /// Why.
        reason: String,
    },
    /// A `key=value` string that cannot be parsed.
    #[error("cannot parse keyword argument {text:?}: expected key=value")]
    KwargSyntax {
        /// The text.
        text: String,
    },
    /// An action outside the env's action space.
    #[error("{env}: invalid action: {reason}")]
    InvalidAction {
        /// The env.
        env: String,
        /// What is wrong.
        reason: String,
    },
    /// Specs that do not describe a valid env (a composite whose batch size
    /// is not the env's, a done spec without `done`).
    #[error("invalid env specs: {reason}")]
    InvalidSpecs {
        /// Why.
        reason: String,
    },
    /// Bytes that [`EnvSpecs::from_bytes`](crate::EnvSpecs::from_bytes)
    /// cannot read: not a spec message ([`SpecError::Decode`], with the byte
    /// offset and key), or a spec that is not the composite of the five
    /// composites ([`SpecError::WrongKind`], [`SpecError::KeyNotFound`]).
    #[error("cannot decode env specs from {len} bytes: {source}")]
    DecodeSpecs {
        /// The number of bytes given.
        len: usize,
        /// What is wrong with them (boxed, to keep `EnvError` small).
        source: Box<SpecError>,
    },
    /// A rollout entry that its spec does not contain (`check_env_specs`).
    #[error("spec check failed at step {step}, key {key}: {reason}")]
    SpecCheck {
        /// The rollout step.
        step: usize,
        /// The key.
        key: NestedKey,
        /// What is wrong.
        reason: String,
    },
    /// A failure of the data model (a missing key, a wrong dtype or shape).
    #[error(transparent)]
    Data(#[from] TensorDictError),
    /// A failure of a spec (construction, containment, stacking).
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// An env's own failure, with its message.
    #[error("{env}: {message}")]
    Failed {
        /// The env.
        env: String,
        /// The message.
        message: String,
    },
}

impl EnvError {
    /// An env's own failure: `EnvError::failed("MyEnv", "simulator diverged")`.
    pub fn failed(env: impl Into<String>, message: impl Into<String>) -> EnvError {
        EnvError::Failed {
            env: env.into(),
            message: message.into(),
        }
    }
}
