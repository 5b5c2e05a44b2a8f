//! `Stateful`: a `CountingEnv` with a state entry.

use envs::{CountingEnv, Env, EnvError, EnvSpecs};
use specs::{Composite, TensorSpec};
use tensordict::{DType, TensorDict};

/// A CountingEnv with a state entry `"hidden"` (so its state spec differs
/// from a plain CountingEnv's).
#[derive(Debug)]
pub struct Stateful {
    inner: CountingEnv,
    specs: EnvSpecs,
}

impl Stateful {
    /// A new one, counting from 0 to 100.
    pub fn new() -> Stateful {
        let inner = CountingEnv::new(0, 100);
        let own = inner.specs();
        let state = Composite::new(&[])
            .with("hidden", TensorSpec::unbounded(&[2], DType::F32))
            .unwrap();
        let specs = EnvSpecs::new(
            &[],
            own.full_action_spec().clone(),
            own.full_observation_spec().clone(),
            own.full_reward_spec().clone(),
            own.full_done_spec().clone(),
            state,
        )
        .unwrap();
        Stateful { inner, specs }
    }
}

impl Env for Stateful {
    fn specs(&self) -> &EnvSpecs {
        &self.specs
    }
    fn set_seed(&mut self, seed: u64) {
        self.inner.set_seed(seed);
    }
    fn reset_into(
        &mut self,
        input: Option<&TensorDict>,
        out: &mut TensorDict,
    ) -> Result<(), EnvError> {
        self.inner.reset_into(input, out)
    }
    fn step_into(&mut self, input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError> {
        self.inner.step_into(input, next)
    }
}

impl Default for Stateful {
    fn default() -> Self {
        Stateful::new()
    }
}
