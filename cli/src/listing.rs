//! `rlpool envs`: the registered envs, each with its specs.

use pool::envs::Kwargs;

use crate::failure::Failure;
use crate::output::say;

/// Prints each registered env with its specs (or, for an env that cannot
/// be built without keyword arguments, why).
pub(crate) fn list() -> Result<(), Failure> {
    for name in pool::envs::registered() {
        match pool::envs::make(&name, &Kwargs::new()) {
            Ok(env) => {
                let specs = env.specs();
                say!("{name}")?;
                say!("  batch size:  {:?}", specs.batch_size())?;
                say!("  action:      {}", specs.full_action_spec())?;
                say!("  observation: {}", specs.full_observation_spec())?;
                say!("  reward:      {}", specs.full_reward_spec())?;
                say!("  done:        {}", specs.full_done_spec())?;
                if !specs.full_state_spec().is_empty() {
                    say!("  state:       {}", specs.full_state_spec())?;
                }
            }
            Err(err) => say!("{name}\n  (needs keyword arguments: {err})")?,
        }
    }
    Ok(())
}
