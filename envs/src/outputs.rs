//! Writers of the standard outputs that the reference envs share:
//! `"observation"`, `"reward"` and the `"done"` / `"terminated"` /
//! `"truncated"` flags.

use tensordict::TensorDict;

use crate::EnvError;

/// Writes the standard step outputs into `next`.
pub(crate) fn write_step<const N: usize>(
    next: &mut TensorDict,
    observation: &[f32; N],
    reward: f32,
    terminated: bool,
    truncated: bool,
) -> Result<(), EnvError> {
    write_observation(next, observation)?;
    next.tensor_mut("reward")?.as_mut_slice::<f32>()?[0] = reward;
    write_flags(next, terminated, truncated)
}

/// Writes the standard reset outputs into `out`: the observation, and every
/// flag false.
pub(crate) fn write_reset<const N: usize>(
    out: &mut TensorDict,
    observation: &[f32; N],
) -> Result<(), EnvError> {
    write_observation(out, observation)?;
    write_flags(out, false, false)
}

/// Writes an `f32` observation.
fn write_observation<const N: usize>(
    td: &mut TensorDict,
    observation: &[f32; N],
) -> Result<(), EnvError> {
    td.tensor_mut("observation")?
        .as_mut_slice::<f32>()?
        .copy_from_slice(observation);
    Ok(())
}

/// Writes `done`, `terminated` and `truncated`.
pub(crate) fn write_flags(
    td: &mut TensorDict,
    terminated: bool,
    truncated: bool,
) -> Result<(), EnvError> {
    td.tensor_mut("done")?.as_mut_slice::<bool>()?[0] = terminated || truncated;
    td.tensor_mut("terminated")?.as_mut_slice::<bool>()?[0] = terminated;
    td.tensor_mut("truncated")?.as_mut_slice::<bool>()?[0] = truncated;
    Ok(())
}
