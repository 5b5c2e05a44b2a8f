//! `PoolSpecs`: the envs' specs stacked along the env dim, with
//! `env_index` in the state spec.

use envs::EnvSpecs;
use specs::{Composite, TensorSpec};

use crate::{PoolError, StackMode};

/// The pool's specs: each of the envs' composites stacked along a new
/// leading env dim (densely, or lazily where the envs differ), and
/// `"env_index"` in the state spec: a non-tensor of shape `[num_envs]` when
/// the state specs stack densely, else an entry of each env's part.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolSpecs {
    action: TensorSpec,
    observation: TensorSpec,
    reward: TensorSpec,
    done: TensorSpec,
    state: TensorSpec,
}

fn stack(
    which: &'static str,
    parts: Vec<Composite>,
    mode: StackMode,
) -> Result<TensorSpec, PoolError> {
    let error = |source| PoolError::Specs {
        which,
        source: Box::new(source),
    };
    match mode {
        StackMode::Dense => Composite::stack(&parts)
            .map(TensorSpec::Composite)
            .map_err(error),
        StackMode::Lazy | StackMode::MaybeDense => {
            TensorSpec::lazy_stack(parts.into_iter().map(TensorSpec::Composite).collect())
                .map_err(error)
        }
    }
}

/// `[num_envs, ..env batch size]`: one env index per sub-env of each env.
fn env_index_shape(children: &[EnvSpecs]) -> Vec<usize> {
    let mut shape = vec![children.len()];
    shape.extend_from_slice(children.first().map_or(&[][..], EnvSpecs::batch_size));
    shape
}

impl PoolSpecs {
    pub(crate) fn new(children: &[EnvSpecs], mode: StackMode) -> Result<PoolSpecs, PoolError> {
        let part =
            |f: fn(&EnvSpecs) -> &Composite| children.iter().map(f).cloned().collect::<Vec<_>>();
        let state_error = |source| PoolError::Specs {
            which: "state",
            source: Box::new(source),
        };
        let mut state = stack("state", part(EnvSpecs::full_state_spec), mode)?;
        match state.as_composite_mut() {
            Some(composite) => composite
                .set(
                    "env_index",
                    TensorSpec::non_tensor(&env_index_shape(children)),
                )
                .map_err(state_error)?,
            None => {
                // The envs' state specs differ (a lazy stack): each env's
                // part carries its own env_index.
                let parts = children
                    .iter()
                    .map(|child| {
                        let mut composite = child.full_state_spec().clone();
                        composite.set("env_index", TensorSpec::non_tensor(child.batch_size()))?;
                        Ok(TensorSpec::Composite(composite))
                    })
                    .collect::<Result<Vec<_>, specs::SpecError>>()
                    .map_err(state_error)?;
                state = TensorSpec::lazy_stack(parts).map_err(state_error)?;
            }
        }
        Ok(PoolSpecs {
            action: stack("action", part(EnvSpecs::full_action_spec), mode)?,
            observation: stack("observation", part(EnvSpecs::full_observation_spec), mode)?,
            reward: stack("reward", part(EnvSpecs::full_reward_spec), mode)?,
            done: stack("done", part(EnvSpecs::full_done_spec), mode)?,
            state,
        })
    }

    /// The stacked action specs.
    pub fn full_action_spec(&self) -> &TensorSpec {
        &self.action
    }

    /// The stacked observation specs.
    pub fn full_observation_spec(&self) -> &TensorSpec {
        &self.observation
    }

    /// The stacked reward specs.
    pub fn full_reward_spec(&self) -> &TensorSpec {
        &self.reward
    }

    /// The stacked done specs.
    pub fn full_done_spec(&self) -> &TensorSpec {
        &self.done
    }

    /// The stacked state specs, with `"env_index"`.
    pub fn full_state_spec(&self) -> &TensorSpec {
        &self.state
    }
}
