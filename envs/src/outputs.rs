//! Writers of the standard outputs that the reference envs share:
//! `"observation"`, `"reward"` and the `"done"` / `"terminated"` /
//! `"truncated"` flags, each found through a [`Lookup`] the env keeps, so
//! that a step compares one pointer per key rather than searching.

use tensordict::{Lookup, TensorDict};

use crate::EnvError;

/// Where the standard outputs sit in one of an env's buffers (one set for
/// the step buffer, one for the reset buffer: their keys differ).
#[derive(Clone, Debug)]
pub(crate) struct Outputs {
    observation: Lookup,
    reward: Lookup,
    done: Lookup,
    terminated: Lookup,
    truncated: Lookup,
}

impl Default for Outputs {
    fn default() -> Outputs {
        Outputs {
            observation: Lookup::new("observation"),
            reward: Lookup::new("reward"),
            done: Lookup::new("done"),
            terminated: Lookup::new("terminated"),
            truncated: Lookup::new("truncated"),
        }
    }
}

impl Outputs {
    /// Writes the standard step outputs into `next`.
    pub(crate) fn write_step<const N: usize>(
        &mut self,
        next: &mut TensorDict,
        observation: &[f32; N],
        reward: f32,
        terminated: bool,
        truncated: bool,
    ) -> Result<(), EnvError> {
        self.write_observation(next, observation)?;
        next.tensor_mut_by(&mut self.reward)?.fill(reward)?;
        self.write_flags(next, terminated, truncated)
    }

    /// Writes the standard reset outputs into `out`: the observation, and
    /// every flag false.
    pub(crate) fn write_reset<const N: usize>(
        &mut self,
        out: &mut TensorDict,
        observation: &[f32; N],
    ) -> Result<(), EnvError> {
        self.write_observation(out, observation)?;
        self.write_flags(out, false, false)
    }

    /// Writes an `f32` observation.
    fn write_observation<const N: usize>(
        &mut self,
        td: &mut TensorDict,
        observation: &[f32; N],
    ) -> Result<(), EnvError> {
        td.tensor_mut_by(&mut self.observation)?
            .as_mut_slice::<f32>()?
            .copy_from_slice(observation);
        Ok(())
    }

    /// Writes `done`, `terminated` and `truncated`.
    pub(crate) fn write_flags(
        &mut self,
        td: &mut TensorDict,
        terminated: bool,
        truncated: bool,
    ) -> Result<(), EnvError> {
        // Written without reading (`fill`): a bool slice would check the
        // old bytes, a load of the cache line that the other envs' flags
        // share, which another core may have just written.
        td.tensor_mut_by(&mut self.done)?
            .fill(terminated || truncated)?;
        td.tensor_mut_by(&mut self.terminated)?.fill(terminated)?;
        td.tensor_mut_by(&mut self.truncated)?.fill(truncated)?;
        Ok(())
    }
}
