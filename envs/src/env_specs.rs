//! `EnvSpecs`: the five composite specs that describe an env's input and
//! output (action, observation, reward, done, state) and its batch size.

use specs::{Composite, SpecError, TensorSpec};
use tensordict::{NestedKey, Shape};

use crate::EnvError;

/// The entries of the composite that [`EnvSpecs::to_bytes`] writes, one per
/// composite of the specs, in the order of [`EnvSpecs::new`]'s arguments.
const COMPOSITES: [&str; 5] = ["action", "observation", "reward", "done", "state"];

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
            if let Err(err) = spec.check_zero() {
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

    /// The five composites, named as in [`COMPOSITES`].
    fn composites(&self) -> [(&'static str, &Composite); 5] {
        let [action, observation, reward, done, state] = COMPOSITES;
        [
            (action, &self.action),
            (observation, &self.observation),
            (reward, &self.reward),
            (done, &self.done),
            (state, &self.state),
        ]
    }

    /// Encodes the specs for [`EnvSpecs::from_bytes`], so that a worker
    /// process can send its env's specs to the parent: one spec message
    /// ([`TensorSpec::encode`]) of a composite whose shape is the batch size
    /// and whose entries `"action"`, `"observation"`, `"reward"`, `"done"`
    /// and `"state"` are the five composites.
    ///
    /// ```
    /// use envs::{EnvSpecs, Kwargs};
    /// # fn main() -> Result<(), envs::EnvError> {
    /// let env = envs::make("Pendulum-v1", &Kwargs::new())?;
    /// let bytes = env.specs().to_bytes();
    /// assert_eq!(&EnvSpecs::from_bytes(&bytes)?, env.specs());
    /// # Ok(()) }
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut root = Composite::new(&self.batch_size);
        for (name, composite) in self.composites() {
            // Cloning shares the bounds' storage; every composite's shape is
            // the batch size (checked by `EnvSpecs::new`), so each fits.
            root.set(name, TensorSpec::Composite(composite.clone()))
                .expect("each composite's shape is the batch size");
        }
        TensorSpec::Composite(root).encode()
    }

    /// Reads specs written by [`EnvSpecs::to_bytes`], rebuilt with
    /// [`EnvSpecs::new`] so that its checks apply.
    ///
    /// An error [`EnvError::DecodeSpecs`] for bytes that are not such a
    /// message (the spec decoder's error, [`SpecError::Decode`], names the
    /// byte offset and key), or whose spec is not a composite of the five
    /// composites; [`EnvError::InvalidSpecs`] for an entry besides the
    /// five, or for composites that [`EnvSpecs::new`] refuses.
    pub fn from_bytes(bytes: &[u8]) -> Result<EnvSpecs, EnvError> {
        let undecodable = |source: SpecError| EnvError::DecodeSpecs {
            len: bytes.len(),
            source: Box::new(source),
        };
        let mut root = match TensorSpec::decode(bytes).map_err(undecodable)? {
            TensorSpec::Composite(root) => root,
            other => {
                return Err(undecodable(SpecError::WrongKind {
                    key: NestedKey::default(),
                    expected: "composite",
                    found: other.kind(),
                }))
            }
        };
        let available: Vec<String> = root.iter().map(|(key, _)| key.to_owned()).collect();
        let mut take = |name: &str| match root.remove(name) {
            Some(TensorSpec::Composite(composite)) => Ok(composite),
            Some(other) => Err(undecodable(SpecError::WrongKind {
                key: NestedKey::from(name),
                expected: "composite",
                found: other.kind(),
            })),
            None => Err(undecodable(SpecError::KeyNotFound {
                key: NestedKey::from(name),
                available: available.clone(),
            })),
        };
        let [action, observation, reward, done, state] = COMPOSITES.map(&mut take);
        let (action, observation, reward, done, state) =
            (action?, observation?, reward?, done?, state?);
        if let Some((extra, _)) = root.iter().next() {
            return Err(EnvError::InvalidSpecs {
                reason: format!(
                    "the decoded specs have an entry {extra:?} besides the five composites {COMPOSITES:?}"
                ),
            });
        }
        EnvSpecs::new(root.shape(), action, observation, reward, done, state)
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

    fn standard() -> EnvSpecs {
        EnvSpecs::standard(
            TensorSpec::categorical(&[1], DType::I64, 2).unwrap(),
            TensorSpec::bounded(&[4], DType::F32, -1.0, 1.0).unwrap(),
        )
        .unwrap()
    }

    /// A spec message of a composite with these entries.
    fn message(shape: &[usize], entries: &[(&str, TensorSpec)]) -> Vec<u8> {
        let mut root = Composite::new(shape);
        for (key, spec) in entries {
            root.set(*key, spec.clone()).unwrap();
        }
        TensorSpec::Composite(root).encode()
    }

    #[test]
    fn bytes_round_trip() {
        let specs = standard();
        let bytes = specs.to_bytes();
        assert_eq!(EnvSpecs::from_bytes(&bytes).unwrap(), specs);
        // The message is a spec: a composite of the five composites.
        let root = TensorSpec::decode(&bytes).unwrap();
        let keys: Vec<String> = root
            .as_composite()
            .unwrap()
            .keys(false, false)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            keys,
            [
                r#""action""#,
                r#""done""#,
                r#""observation""#,
                r#""reward""#,
                r#""state""#
            ]
        );
    }

    #[test]
    fn specs_of_huge_values_decode_without_making_them() {
        // A few hundred bytes may describe an observation of 16 GiB (the
        // largest value a spec may make): checking that its zeros can be
        // made must not make them (found by fuzzing `from_bytes`).
        let specs = EnvSpecs::standard(
            TensorSpec::categorical(&[1], DType::I64, 2).unwrap(),
            TensorSpec::unbounded(&[1 << 31], DType::F64),
        )
        .unwrap();
        let bytes = specs.to_bytes();
        assert!(bytes.len() < 1000);
        assert_eq!(EnvSpecs::from_bytes(&bytes).unwrap(), specs);
        // One more element is too large: refused, still without making it.
        let err = EnvSpecs::standard(
            TensorSpec::categorical(&[1], DType::I64, 2).unwrap(),
            TensorSpec::unbounded(&[(1 << 31) + 1], DType::F64),
        )
        .unwrap_err();
        assert!(err.to_string().contains("cannot give zeros"), "{err}");
    }

    #[test]
    fn undecodable_bytes_name_what_failed() {
        let err = EnvSpecs::from_bytes(b"garbage").unwrap_err();
        assert!(
            matches!(err, EnvError::DecodeSpecs { len: 7, .. }),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "cannot decode env specs from 7 bytes: cannot decode spec at byte 0 (key <root>): \
             not a spec message: the first byte is 0x67, not 0x53 ('S')"
        );
        let bytes = standard().to_bytes();
        let err = EnvSpecs::from_bytes(&bytes[..bytes.len() - 1]).unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "cannot decode env specs from {} bytes: cannot decode spec at byte",
                bytes.len() - 1
            )),
            "{err}"
        );

        // A spec, but not a composite.
        let bytes = TensorSpec::non_tensor(&[]).encode();
        assert_eq!(
            EnvSpecs::from_bytes(&bytes).unwrap_err().to_string(),
            "cannot decode env specs from 11 bytes: spec at key <root> is non_tensor, not composite"
        );
        // A composite without the five composites, or with a leaf for one.
        let empty = Composite::new(&[]);
        let done = TensorSpec::Composite(standard_done_spec(&[]).unwrap());
        let bytes = message(&[], &[("done", done.clone())]);
        let err = EnvSpecs::from_bytes(&bytes).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                r#"cannot decode env specs from {} bytes: key "action" not found; keys present: [done]"#,
                bytes.len()
            )
        );
        let leaf = TensorSpec::unbounded(&[1], DType::F32);
        let entries = |action: TensorSpec| {
            vec![
                ("action", action),
                ("observation", empty.clone().into()),
                ("reward", empty.clone().into()),
                ("done", done.clone()),
                ("state", empty.clone().into()),
            ]
        };
        let err = EnvSpecs::from_bytes(&message(&[], &entries(leaf))).unwrap_err();
        assert!(
            err.to_string()
                .ends_with(r#"bytes: spec at key "action" is unbounded, not composite"#),
            "{err}"
        );

        // An entry besides the five.
        let mut extra = entries(empty.clone().into());
        extra.push(("info", empty.clone().into()));
        assert_eq!(
            EnvSpecs::from_bytes(&message(&[], &extra))
                .unwrap_err()
                .to_string(),
            r#"invalid env specs: the decoded specs have an entry "info" besides the five composites ["action", "observation", "reward", "done", "state"]"#
        );
        // Composites that `EnvSpecs::new` refuses: a batch size [2] whose
        // composites have shape [2, 1].
        let batched = |shape: &[usize]| TensorSpec::Composite(Composite::new(shape));
        let done = standard_done_spec(&[2, 1]).unwrap();
        let bytes = message(
            &[2],
            &[
                ("action", batched(&[2, 1])),
                ("observation", batched(&[2, 1])),
                ("reward", batched(&[2, 1])),
                ("done", done.into()),
                ("state", batched(&[2, 1])),
            ],
        );
        assert_eq!(
            EnvSpecs::from_bytes(&bytes).unwrap_err().to_string(),
            "invalid env specs: the action spec has shape [2, 1] but the env's batch size is [2]"
        );
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
