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
    next.tensor_mut("observation")?
        .as_mut_slice::<f32>()?
        .copy_from_slice(observation);
    next.tensor_mut("reward")?.as_mut_slice::<f32>()?[0] = reward;
    write_flags(next, terminated, truncated)
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
