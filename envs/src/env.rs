//! The `Env` trait: specs, `reset_into` / `step_into` on buffers built once
//! from the specs, and the provided `reset`, `step`, `step_mdp`,
//! `step_and_maybe_reset`, `rand_step`, `rollout` and `fake_tensordict`.

use rand::RngCore;
use tensordict::{Entry, Lookup, NestedKey, Tensor, TensorDict};

use crate::{EnvError, EnvSpecs};

/// How [`Env::rollout`] picks actions.
pub enum Policy<'a> {
    /// Uniform random actions from the action spec, drawn from this RNG.
    Random(&'a mut dyn RngCore),
    /// A function that writes the action entries into the current root
    /// tensordict (observation, done flags, ...).
    Fn(&'a mut dyn FnMut(&mut TensorDict) -> Result<(), EnvError>),
}

impl std::fmt::Debug for Policy<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Policy::Random(_) => "Policy::Random",
            Policy::Fn(_) => "Policy::Fn",
        })
    }
}

/// An environment, in TorchRL's layout: `reset` gives the root entries
/// (observation, done flags), `step` reads the action from the root and
/// writes its result under `"next"` (observation, reward, done, terminated,
/// truncated).
///
/// Implementors write two methods that fill buffers built once from the
/// specs ([`Env::reset_into`], [`Env::step_into`]); everything else is
/// provided on top of them. A pool calls the `_into` methods on reused
/// buffers, so a fixed-shape env allocates nothing per step.
///
/// ```
/// use envs::{Env, EnvError, EnvSpecs, Policy};
/// use specs::TensorSpec;
/// use tensordict::{DType, TensorDict};
///
/// /// Counts down from 3; the action is ignored.
/// struct Countdown {
///     left: i64,
///     specs: EnvSpecs,
/// }
///
/// impl Env for Countdown {
///     fn specs(&self) -> &EnvSpecs {
///         &self.specs
///     }
///     fn set_seed(&mut self, _seed: u64) {}
///     fn reset_into(&mut self, _input: Option<&TensorDict>, out: &mut TensorDict) -> Result<(), EnvError> {
///         self.left = 3;
///         out.tensor_mut("observation")?.as_mut_slice::<i64>()?[0] = self.left;
///         for key in ["done", "terminated", "truncated"] {
///             out.tensor_mut(key)?.as_mut_slice::<bool>()?[0] = false;
///         }
///         Ok(())
///     }
///     fn step_into(&mut self, _input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError> {
///         self.left -= 1;
///         let done = self.left == 0;
///         next.tensor_mut("observation")?.as_mut_slice::<i64>()?[0] = self.left;
///         next.tensor_mut("reward")?.as_mut_slice::<f32>()?[0] = 1.0;
///         next.tensor_mut("done")?.as_mut_slice::<bool>()?[0] = done;
///         next.tensor_mut("terminated")?.as_mut_slice::<bool>()?[0] = done;
///         next.tensor_mut("truncated")?.as_mut_slice::<bool>()?[0] = false;
///         Ok(())
///     }
/// }
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut env = Countdown {
///     left: 0,
///     specs: EnvSpecs::standard(
///         TensorSpec::categorical(&[1], DType::I64, 2)?,
///         TensorSpec::unbounded(&[1], DType::I64),
///     )?,
/// };
/// envs::check_env_specs(&mut env, 10, 0)?;
/// let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(0);
/// let rollout = env.rollout(100, Policy::Random(&mut rng), true)?;
/// assert_eq!(rollout.batch_size(), &[3]);
/// assert_eq!(rollout.tensor(("next", "observation"))?.to_vec::<i64>()?, vec![2, 1, 0]);
/// # Ok(()) }
/// ```
pub trait Env: Send {
    /// The env's specs.
    fn specs(&self) -> &EnvSpecs;

    /// Seeds the env's own random number generator (the reset distribution).
    fn set_seed(&mut self, seed: u64);

    /// Resets the env and writes the observation, done flags and state
    /// entries into `out`, a buffer shaped like [`Env::reset_template`].
    /// `input` carries what the caller passed to `reset` (for a batched env,
    /// a `"_reset"` mask of the rows to reset).
    fn reset_into(
        &mut self,
        input: Option<&TensorDict>,
        out: &mut TensorDict,
    ) -> Result<(), EnvError>;

    /// Steps the env with the action entries of `input` and writes the
    /// observation, reward, done flags and state entries into `next`, a
    /// buffer shaped like [`Env::step_template`].
    fn step_into(&mut self, input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError>;

    /// A short name for messages (the registry name for the reference envs).
    fn name(&self) -> &str {
        "env"
    }

    /// The batch size (`[]` for a single env).
    fn batch_size(&self) -> &[usize] {
        self.specs().batch_size()
    }

    /// Zeros for what `reset_into` writes: observation, done and state.
    fn reset_template(&self) -> TensorDict {
        let specs = self.specs();
        let mut td = specs.full_observation_spec().zero();
        merge(&mut td, specs.full_done_spec().zero());
        merge(&mut td, specs.full_state_spec().zero());
        td
    }

    /// Zeros for what `step_into` writes: observation, reward, done and
    /// state.
    fn step_template(&self) -> TensorDict {
        let mut td = self.reset_template();
        merge(&mut td, self.specs().full_reward_spec().zero());
        td
    }

    /// Resets the env: a new tensordict with the observation, done flags and
    /// state.
    fn reset(&mut self, input: Option<TensorDict>) -> Result<TensorDict, EnvError> {
        let mut out = self.reset_template();
        self.reset_into(input.as_ref(), &mut out)?;
        Ok(out)
    }

    /// Steps the env with the action in `td`; returns `td` with the result
    /// under `"next"`.
    fn step(&mut self, mut td: TensorDict) -> Result<TensorDict, EnvError> {
        let mut next = self.step_template();
        self.step_into(&td, &mut next)?;
        td.set("next", next)?;
        Ok(td)
    }

    /// The root of the next step: the entries under `"next"` moved to the
    /// root without the reward, and the other root entries kept except the
    /// action (TorchRL's `step_mdp` with its defaults).
    fn step_mdp(&self, td: &TensorDict) -> Result<TensorDict, EnvError> {
        let specs = self.specs();
        let next = td.dict("next")?;
        let mut drop: Vec<NestedKey> = specs.action_keys();
        drop.extend(specs.reward_keys());
        drop.push("next".into());
        let mut root = td.exclude(&drop);
        root.update(&next.exclude(specs.reward_keys()))?;
        Ok(root)
    }

    /// Steps, then resets where the env is done: returns the step result and
    /// the root of the next step (reset where done).
    ///
    /// A batched env gets a `"_reset"` mask (the shape of `"done"`) in its
    /// reset input, and its `reset_into` buffer starts as the current root,
    /// so the rows it does not reset keep their values.
    fn step_and_maybe_reset(
        &mut self,
        td: TensorDict,
    ) -> Result<(TensorDict, TensorDict), EnvError> {
        let td = self.step(td)?;
        let mut root = self.step_mdp(&td)?;
        let done = root.tensor("done")?;
        if done.as_slice::<bool>()?.iter().any(|&d| d) {
            if self.batch_size().is_empty() {
                let reset = self.reset(None)?;
                root.update(&reset)?;
            } else {
                let mut input = root.clone();
                input.set("_reset", done.clone())?;
                let mut out = self.reset_template();
                out.fill_from(&root)?;
                self.reset_into(Some(&input), &mut out)?;
                root.update(&out)?;
            }
        }
        Ok((td, root))
    }

    /// Random action entries drawn from the action spec.
    fn rand_action(&self, rng: &mut dyn RngCore) -> TensorDict {
        self.specs().full_action_spec().rand(rng)
    }

    /// Steps with a random action from `td` (or from a fresh reset).
    fn rand_step(
        &mut self,
        td: Option<TensorDict>,
        rng: &mut dyn RngCore,
    ) -> Result<TensorDict, EnvError> {
        let mut td = match td {
            Some(td) => td,
            None => self.reset(None)?,
        };
        td.update(&self.rand_action(rng))?;
        self.step(td)
    }

    /// Resets, then runs up to `max_steps` steps with `policy`, and stacks
    /// the steps into a tensordict of batch size `[steps, ..batch]`: time is
    /// the first dim (TorchRL puts it last, `[..batch, steps]`; for an
    /// unbatched env the two agree). With
    /// `break_when_any_done` it stops after the first step where any env is
    /// done; otherwise it resets where done and goes on.
    fn rollout(
        &mut self,
        max_steps: usize,
        mut policy: Policy<'_>,
        break_when_any_done: bool,
    ) -> Result<TensorDict, EnvError> {
        let mut root = self.reset(None)?;
        let mut steps = Vec::with_capacity(max_steps.min(4096));
        for _ in 0..max_steps {
            match &mut policy {
                Policy::Random(rng) => root.update(&self.rand_action(&mut **rng))?,
                Policy::Fn(f) => f(&mut root)?,
            }
            let (td, next_root) = if break_when_any_done {
                let td = self.step(root)?;
                let next_root = self.step_mdp(&td)?;
                (td, next_root)
            } else {
                self.step_and_maybe_reset(root)?
            };
            let done = any_true(td.tensor(("next", "done"))?)?;
            steps.push(td);
            root = next_root;
            if break_when_any_done && done {
                break;
            }
        }
        if steps.is_empty() {
            let mut batch = vec![0];
            batch.extend_from_slice(self.batch_size());
            return Ok(TensorDict::new(&batch));
        }
        Ok(TensorDict::stack(&steps)?)
    }

    /// Zeros for every entry of a step: action, observation, done and state
    /// at the root, and observation, reward, done and state under `"next"`.
    fn fake_tensordict(&self) -> TensorDict {
        let mut td = self.reset_template();
        merge(&mut td, self.specs().full_action_spec().zero());
        let next = self.step_template();
        td.set("next", next).expect("same batch size");
        td
    }
}

impl<E: Env + ?Sized> Env for Box<E> {
    fn specs(&self) -> &EnvSpecs {
        (**self).specs()
    }
    fn set_seed(&mut self, seed: u64) {
        (**self).set_seed(seed)
    }
    fn reset_into(
        &mut self,
        input: Option<&TensorDict>,
        out: &mut TensorDict,
    ) -> Result<(), EnvError> {
        (**self).reset_into(input, out)
    }
    fn step_into(&mut self, input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError> {
        (**self).step_into(input, next)
    }
    fn name(&self) -> &str {
        (**self).name()
    }
}

/// Moves every entry of `src` into `dst` (same batch size by construction).
fn merge(dst: &mut TensorDict, src: TensorDict) {
    dst.update(&src)
        .expect("specs of one env share a batch size");
}

fn any_true(tensor: &Tensor) -> Result<bool, EnvError> {
    Ok(tensor.as_slice::<bool>()?.iter().any(|&d| d))
}

/// Reads the one element of a shape-`[1]` (or `[]`) action of dtype `T`,
/// with an error naming the env otherwise.
pub fn scalar_action<T: tensordict::Element>(
    env: &str,
    input: &TensorDict,
    key: &str,
) -> Result<T, EnvError> {
    scalar_of(env, input, key, input.get(key))
}

/// [`scalar_action`] through a [`Lookup`] of the key that the env keeps
/// ([`TensorDict::get_by`]): what an env that reads its action on every
/// step uses, one pointer comparison instead of a search.
pub fn scalar_action_by<T: tensordict::Element>(
    env: &str,
    input: &TensorDict,
    lookup: &mut Lookup,
) -> Result<T, EnvError> {
    let entry = input.get_by(lookup);
    scalar_of(env, input, lookup.key(), entry)
}

/// The one element of `entry`, `input`'s entry at `key`.
fn scalar_of<T: tensordict::Element>(
    env: &str,
    input: &TensorDict,
    key: &str,
    entry: Option<&Entry>,
) -> Result<T, EnvError> {
    let entry = entry.ok_or_else(|| EnvError::InvalidAction {
        env: env.to_owned(),
        reason: format!(
            "no {key:?} entry in the input (keys: {:?})",
            input.keys(true, true)
        ),
    })?;
    let Entry::Tensor(t) = entry else {
        return Err(EnvError::InvalidAction {
            env: env.to_owned(),
            reason: format!("{key:?} is a {}, not a tensor", entry.kind()),
        });
    };
    if t.numel() != 1 || t.ndim() > 1 {
        return Err(EnvError::InvalidAction {
            env: env.to_owned(),
            reason: format!("{key:?} has shape {:?}; expected [1] or []", t.shape()),
        });
    }
    t.item::<T>().map_err(|err| EnvError::InvalidAction {
        env: env.to_owned(),
        reason: format!("{key:?}: {err}"),
    })
}
