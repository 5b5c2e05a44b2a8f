//! `WhereAmI`: an env that reports the CPUs and process it runs on.

use envs::{Env, EnvError, EnvSpecs};
use specs::TensorSpec;
use tensordict::{DType, TensorDict};

/// The registry name of [`WhereAmI`].
pub const WHERE_AM_I: &str = "WhereAmI";

/// An env that reports where it runs: its observation (`i64`, shape `[3]`)
/// is the number of CPUs its thread may run on, the first of them, and its
/// process id. Steps count nothing and are never done.
#[derive(Debug)]
pub struct WhereAmI {
    specs: EnvSpecs,
}

impl WhereAmI {
    /// A new one.
    pub fn new() -> WhereAmI {
        let action = TensorSpec::binary(&[1], DType::I64).expect("valid");
        let observation = TensorSpec::unbounded(&[3], DType::I64);
        WhereAmI {
            specs: EnvSpecs::standard(action, observation).expect("valid"),
        }
    }

    fn observe(out: &mut TensorDict) -> Result<(), EnvError> {
        let cpus =
            affinity::current_cpus().map_err(|e| EnvError::failed(WHERE_AM_I, e.to_string()))?;
        let obs = [
            cpus.len() as i64,
            cpus[0] as i64,
            i64::from(std::process::id()),
        ];
        out.tensor_mut("observation")?
            .as_mut_slice::<i64>()?
            .copy_from_slice(&obs);
        Ok(())
    }
}

impl Env for WhereAmI {
    fn specs(&self) -> &EnvSpecs {
        &self.specs
    }

    fn set_seed(&mut self, _seed: u64) {}

    fn reset_into(
        &mut self,
        _input: Option<&TensorDict>,
        out: &mut TensorDict,
    ) -> Result<(), EnvError> {
        WhereAmI::observe(out)
    }

    fn step_into(&mut self, _input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError> {
        WhereAmI::observe(next)
    }

    fn name(&self) -> &str {
        WHERE_AM_I
    }
}

impl Default for WhereAmI {
    fn default() -> Self {
        WhereAmI::new()
    }
}
