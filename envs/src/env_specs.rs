//! `EnvSpecs`: the five composite specs that describe an env's input and
//! output (action, observation, reward, done, state) and its batch size.

use specs::{Composite, TensorSpec};
use tensordict::{NestedKey, Shape};

use crate::EnvError;

/// The specs of an env, as TorchRL's `full_*_spec`s: each a [`Composite`]
/// whose shape is the env's batch size.
///
/// - action: what `step` reads (`"action"` for the reference envs);
/// - observation: what `reset` and `step` write (`"observation"`);
/// - reward: what `step` writes (`"reward"`);
/// - done: `"done"`, and usually `"terminated"` and `"truncated"`;
/// - state: other inputs an env reads and writes back (often empty).
#[derive(Clone, Debug, PartialEq)]
pub struct EnvSpecs {
    batch_size: Shape,
    action: Composite,
    observation: Composite,
    reward: Composite,
    done: Composite,
    state: Composite,
}

impl EnvSpecs {
    /// Specs from their composites; an error if a composite's shape is not
    /// `batch_size` or the done spec has no `"done"` entry.
    pub fn new(
        batch_size: &[usize],
        action: Composite,
        observation: Composite,
        reward: Composite,
        done: Composite,
        state: Composite,
    ) -> Result<EnvSpecs, EnvError> {
        for (name, spec) in [
            ("action", &action),
            ("observation", &observation),
            ("reward", &reward),
            ("done", &done),
            ("state", &state),
        ] {
            if spec.shape() != batch_size {
                return Err(EnvError::InvalidSpecs {
                    reason: format!(
                        "the {name} spec has shape {:?} but the env's batch size is {batch_size:?}",
                        spec.shape()
                    ),
                });
            }
        }
        // Every key once across the five composites (the templates merge
        // them), and every composite able to give its zeros (no shape too
        // large, no ragged stack): the provided methods rely on both.
        let composites = [
            ("action", &action),
            ("observation", &observation),
            ("reward", &reward),
            ("done", &done),
            ("state", &state),
        ];
        for (i, (name, spec)) in composites.iter().enumerate() {
            if let Err(err) = spec.try_zero() {
                return Err(EnvError::InvalidSpecs {
                    reason: format!("the {name} spec cannot give zeros: {err}"),
                });
            }
            for (other_name, other) in &composites[i + 1..] {
                for key in spec.keys(true, true) {
                    for other_key in other.keys(true, true) {
                        let (a, b) = (key.parts(), other_key.parts());
                        let n = a.len().min(b.len());
                        if a[..n] == b[..n] {
                            return Err(EnvError::InvalidSpecs {
                                reason: format!(
                                    "key {key} of the {name} spec collides with key {other_key} of the {other_name} spec"
                                ),
                            });
                        }
                    }
                }
            }
        }
        if !done.contains("done") {
            return Err(EnvError::InvalidSpecs {
                reason: format!(
                    "the done spec has no \"done\" entry (keys: {:?})",
                    done.keys(true, true)
                ),
            });
        }
        Ok(EnvSpecs {
            batch_size: batch_size.into(),
            action,
            observation,
            reward,
            done,
            state,
        })
    }

    /// The standard specs of an unbatched env: `"action"`, `"observation"`,
    /// a `"reward"` of shape `[1]` f32, and `"done"`, `"terminated"`,
    /// `"truncated"` bools of shape `[1]`; no state.
    pub fn standard(action: TensorSpec, observation: TensorSpec) -> Result<EnvSpecs, EnvError> {
        let reward = Composite::new(&[]).with(
            "reward",
            TensorSpec::unbounded(&[1], tensordict::DType::F32),
        )?;
        EnvSpecs::new(
            &[],
            Composite::new(&[]).with("action", action)?,
            Composite::new(&[]).with("observation", observation)?,
            reward,
            standard_done_spec(&[])?,
            Composite::new(&[]),
        )
    }

    /// The batch size.
    pub fn batch_size(&self) -> &[usize] {
        &self.batch_size
    }

    /// The full action spec.
    pub fn full_action_spec(&self) -> &Composite {
        &self.action
    }

    /// The full observation spec.
    pub fn full_observation_spec(&self) -> &Composite {
        &self.observation
    }

    /// The full reward spec.
    pub fn full_reward_spec(&self) -> &Composite {
        &self.reward
    }

    /// The full done spec.
    pub fn full_done_spec(&self) -> &Composite {
        &self.done
    }

    /// The full state spec.
    pub fn full_state_spec(&self) -> &Composite {
        &self.state
    }

    /// The single leaf of a composite, or an error naming its keys.
    fn only_leaf<'a>(what: &str, composite: &'a Composite) -> Result<&'a TensorSpec, EnvError> {
        match composite.leaves().as_slice() {
            [(_, spec)] => Ok(spec),
            leaves => Err(EnvError::InvalidSpecs {
                reason: format!(
                    "the {what} spec has {} leaves ({:?}), not one",
                    leaves.len(),
                    leaves.iter().map(|(k, _)| k).collect::<Vec<_>>()
                ),
            }),
        }
    }

    /// The action spec when there is one action leaf.
    pub fn action_spec(&self) -> Result<&TensorSpec, EnvError> {
        EnvSpecs::only_leaf("action", &self.action)
    }

    /// The observation spec when there is one observation leaf.
    pub fn observation_spec(&self) -> Result<&TensorSpec, EnvError> {
        EnvSpecs::only_leaf("observation", &self.observation)
    }

    /// The reward spec when there is one reward leaf.
    pub fn reward_spec(&self) -> Result<&TensorSpec, EnvError> {
        EnvSpecs::only_leaf("reward", &self.reward)
    }

    /// The `"done"` spec.
    pub fn done_spec(&self) -> Result<&TensorSpec, EnvError> {
        Ok(self.done.spec("done")?)
    }

    /// The action keys (leaves).
    pub fn action_keys(&self) -> Vec<NestedKey> {
        self.action.keys(true, true)
    }

    /// The reward keys (leaves).
    pub fn reward_keys(&self) -> Vec<NestedKey> {
        self.reward.keys(true, true)
    }

    /// The done keys (leaves).
    pub fn done_keys(&self) -> Vec<NestedKey> {
        self.done.keys(true, true)
    }

    /// The observation keys (leaves).
    pub fn observation_keys(&self) -> Vec<NestedKey> {
        self.observation.keys(true, true)
    }

    /// The state keys (leaves).
    pub fn state_keys(&self) -> Vec<NestedKey> {
        self.state.keys(true, true)
    }
}

/// `"done"`, `"terminated"` and `"truncated"`: bools of shape
/// `batch_size + [1]`.
pub fn standard_done_spec(batch_size: &[usize]) -> Result<Composite, EnvError> {
    let mut shape = batch_size.to_vec();
    shape.push(1);
    let flag = TensorSpec::binary(&shape, tensordict::DType::Bool)?;
    let mut done = Composite::new(batch_size);
    for key in ["done", "terminated", "truncated"] {
        done.set(key, flag.clone())?;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensordict::DType;

    #[test]
    fn standard_specs_have_the_usual_keys() {
        let specs = EnvSpecs::standard(
            TensorSpec::categorical(&[1], DType::I64, 2).unwrap(),
            TensorSpec::unbounded(&[4], DType::F32),
        )
        .unwrap();
        assert_eq!(specs.batch_size(), &[] as &[usize]);
        assert_eq!(specs.done_keys().len(), 3);
        assert_eq!(specs.action_spec().unwrap().shape().as_slice(), &[1]);
        assert_eq!(specs.reward_spec().unwrap().dtype(), Some(DType::F32));
        assert!(specs.done_spec().is_ok());
        assert!(specs.full_state_spec().is_empty());
    }

    #[test]
    fn invalid_specs_are_errors() {
        let err = EnvSpecs::new(
            &[2],
            Composite::new(&[2]),
            Composite::new(&[]),
            Composite::new(&[2]),
            standard_done_spec(&[2]).unwrap(),
            Composite::new(&[2]),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid env specs: the observation spec has shape [] but the env's batch size is [2]"
        );
        let err = EnvSpecs::new(
            &[],
            Composite::new(&[]),
            Composite::new(&[]),
            Composite::new(&[]),
            Composite::new(&[]),
            Composite::new(&[]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("no \"done\" entry"));
        let specs = EnvSpecs::new(
            &[],
            Composite::new(&[]),
            Composite::new(&[]),
            Composite::new(&[]),
            standard_done_spec(&[]).unwrap(),
            Composite::new(&[]),
        )
        .unwrap();
        assert!(specs
            .action_spec()
            .unwrap_err()
            .to_string()
            .contains("has 0 leaves"));
    }
}
