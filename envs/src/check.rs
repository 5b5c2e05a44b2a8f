//! `check_env_specs`: a short rollout whose every entry is checked against
//! the env's specs.

use rand::rngs::StdRng;
use rand::SeedableRng;
use specs::Composite;
use tensordict::{KeyLike, NestedKey, TensorDict};

use crate::{Env, EnvError};

/// Runs `steps` random steps (resetting where done) and checks every entry
/// against the specs: the action, the observation, done and state entries at
/// the root; the observation, reward, done and state entries under `"next"`;
/// that `done` is `terminated | truncated` wherever both exist; and that
/// every step has exactly the keys of [`Env::fake_tensordict`].
///
/// The error names the step and the key.
pub fn check_env_specs<E: Env + ?Sized>(
    env: &mut E,
    steps: usize,
    seed: u64,
) -> Result<(), EnvError> {
    let mut rng = StdRng::seed_from_u64(seed);
    env.set_seed(seed);
    let mut expected = env.fake_tensordict().keys(true, true);
    expected.sort();
    let mut root = env.reset(None)?;
    for step in 0..steps {
        root.update(&env.rand_action(&mut rng))?;
        let (td, next_root) = env.step_and_maybe_reset(root)?;
        check_step(&*env, step, &expected, &td)?;
        root = next_root;
    }
    Ok(())
}

/// Checks one step's keys against `expected` and its entries against the
/// specs.
fn check_step<E: Env + ?Sized>(
    env: &E,
    step: usize,
    expected: &[NestedKey],
    td: &TensorDict,
) -> Result<(), EnvError> {
    let mut found = td.keys(true, true);
    found.sort();
    if expected != found {
        let missing: Vec<_> = expected.iter().filter(|k| !found.contains(k)).collect();
        let extra: Vec<_> = found.iter().filter(|k| !expected.contains(k)).collect();
        return Err(EnvError::SpecCheck {
            step,
            key: missing.first().or(extra.first()).map_or_else(NestedKey::default, |k| (*k).clone()),
            reason: format!("the step's keys differ from fake_tensordict's: missing {missing:?}, unexpected {extra:?}"),
        });
    }
    let specs = env.specs();
    let next = td.dict("next")?;
    for composite in [
        specs.full_action_spec(),
        specs.full_observation_spec(),
        specs.full_done_spec(),
        specs.full_state_spec(),
    ] {
        check_leaves(step, &NestedKey::default(), composite, td)?;
    }
    for composite in [
        specs.full_observation_spec(),
        specs.full_reward_spec(),
        specs.full_done_spec(),
        specs.full_state_spec(),
    ] {
        check_leaves(step, &"next".to_key(), composite, next)?;
    }
    check_done(step, &NestedKey::default(), td)?;
    check_done(step, &"next".to_key(), next)
}

fn full_key(prefix: &NestedKey, key: &NestedKey) -> NestedKey {
    NestedKey::new(prefix.parts().iter().chain(key.parts()).map(String::as_str))
}

fn check_leaves(
    step: usize,
    prefix: &NestedKey,
    composite: &Composite,
    td: &TensorDict,
) -> Result<(), EnvError> {
    for (key, spec) in composite.leaves() {
        let entry = td.get(&key).ok_or_else(|| EnvError::SpecCheck {
            step,
            key: full_key(prefix, &key),
            reason: "missing from the rollout".into(),
        })?;
        spec.check(&key, entry).map_err(|err| EnvError::SpecCheck {
            step,
            key: full_key(prefix, &key),
            reason: err.to_string(),
        })?;
    }
    Ok(())
}

fn check_done(step: usize, prefix: &NestedKey, td: &TensorDict) -> Result<(), EnvError> {
    let Ok(done) = td.tensor("done") else {
        return Ok(());
    };
    let done = done.as_slice::<bool>()?;
    // done = terminated | truncated, over whichever of the two the env has.
    let mut expected = vec![false; done.len()];
    let mut flags = Vec::new();
    for name in ["terminated", "truncated"] {
        if let Ok(flag) = td.tensor(name) {
            let flag = flag.as_slice::<bool>()?;
            if flag.len() != done.len() {
                return Err(EnvError::SpecCheck {
                    step,
                    key: full_key(prefix, &name.to_key()),
                    reason: format!("has {} elements but done has {}", flag.len(), done.len()),
                });
            }
            for (e, &f) in expected.iter_mut().zip(flag) {
                *e |= f;
            }
            flags.push(format!("{name} {flag:?}"));
        }
    }
    if flags.is_empty() || done == expected.as_slice() {
        Ok(())
    } else {
        Err(EnvError::SpecCheck {
            step,
            key: full_key(prefix, &"done".to_key()),
            reason: format!("done {done:?} is not the or of {}", flags.join(" and ")),
        })
    }
}
