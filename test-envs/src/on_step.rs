//! `OnStep`: a `CountingEnv` whose steps go through a closure.

use envs::{CountingEnv, Env, EnvError, EnvSpecs};
use tensordict::TensorDict;

/// A CountingEnv whose steps go through `step` (given the counter and the
/// step's buffers): a test env that does something around a plain step
/// (waits on a gate, records the thread that steps it, breaks its layout).
pub struct OnStep<F> {
    inner: CountingEnv,
    step: F,
}

impl<F> std::fmt::Debug for OnStep<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnStep")
            .field("inner", &self.inner)
            .finish()
    }
}

impl<F> OnStep<F>
where
    F: FnMut(&mut CountingEnv, &TensorDict, &mut TensorDict) -> Result<(), EnvError>
        + Send
        + 'static,
{
    /// `inner` with its steps through `step`.
    pub fn new(inner: CountingEnv, step: F) -> OnStep<F> {
        OnStep { inner, step }
    }

    /// As a boxed env for a pool's maker.
    pub fn boxed(inner: CountingEnv, step: F) -> Box<dyn Env> {
        Box::new(OnStep::new(inner, step))
    }
}

impl<F> Env for OnStep<F>
where
    F: FnMut(&mut CountingEnv, &TensorDict, &mut TensorDict) -> Result<(), EnvError> + Send,
{
    fn specs(&self) -> &EnvSpecs {
        self.inner.specs()
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
        (self.step)(&mut self.inner, input, next)
    }
}
