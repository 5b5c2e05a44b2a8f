//! `CountingEnv`: TorchRL's counting test env; the observation counts the
//! increments it is sent.

use specs::TensorSpec;
use tensordict::{DType, Lookup, TensorDict};

use crate::env::scalar_action_by;
use crate::outputs::Outputs;
use crate::{Env, EnvError, EnvSpecs, Kwargs};

/// The registry name.
pub(crate) const NAME: &str = "CountingEnv";

/// A counter, as TorchRL's `CountingEnv`: the observation (`i32`, shape
/// `[1]`) starts at `start_val` and each step adds the action (an `i64` of
/// shape `[1]`, a 0/1 increment in its spec; any integer is accepted). Done
/// (and terminated) whenever the count is greater than `max_steps`, at reset
/// too; the reward is 0, as TorchRL's. Unlike TorchRL's, it also writes a
/// `"truncated"` flag (always false), so that its done spec is the one the
/// other reference envs have. Useful to check that no result is lost or
/// duplicated.
///
/// ```
/// use envs::{CountingEnv, Env};
/// use tensordict::Tensor;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut env = CountingEnv::new(0, 2);
/// let mut td = env.reset(None)?;
/// for count in 1..=3 {
///     td.set("action", Tensor::from_vec(&[1], vec![1i64])?)?;
///     let out = env.step(td)?;
///     assert_eq!(out.tensor(("next", "observation"))?.to_vec::<i32>()?, vec![count]);
///     assert_eq!(out.tensor(("next", "done"))?.to_vec::<bool>()?, vec![count > 2]);
///     td = env.step_mdp(&out)?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct CountingEnv {
    count: i32,
    start_val: i32,
    max_steps: i32,
    specs: EnvSpecs,
    /// Where the outputs and the action sit in the buffers (kept: a step
    /// compares one name per key).
    step_out: Outputs,
    reset_out: Outputs,
    action: Lookup,
}

impl CountingEnv {
    /// A counter that starts at `start_val` and is done past `max_steps`.
    pub fn new(start_val: i32, max_steps: i32) -> CountingEnv {
        let action = TensorSpec::binary(&[1], DType::I64).expect("valid");
        let observation = TensorSpec::unbounded(&[1], DType::I32);
        CountingEnv {
            count: start_val,
            start_val,
            max_steps,
            specs: EnvSpecs::standard(action, observation).expect("standard specs are valid"),
            step_out: Outputs::default(),
            reset_out: Outputs::default(),
            action: Lookup::new("action"),
        }
    }

    /// The registry constructor: keywords `start_val` (default 0),
    /// `max_steps` (default 5) and `seed` (accepted and ignored: the env is
    /// deterministic).
    pub fn from_kwargs(kwargs: &Kwargs) -> Result<CountingEnv, EnvError> {
        let reader = kwargs.reader(NAME, &["start_val", "max_steps", "seed"]);
        reader.uint("seed", Some(0))?;
        let to_i32 = |key: &str, v: i64| {
            i32::try_from(v).map_err(|_| reader.invalid(key, format!("{v} does not fit in i32")))
        };
        let start_val = to_i32("start_val", reader.int("start_val", Some(0))?)?;
        let max_steps = to_i32("max_steps", reader.int("max_steps", Some(5))?)?;
        reader.finish()?;
        Ok(CountingEnv::new(start_val, max_steps))
    }

    /// The current count.
    pub fn count(&self) -> i32 {
        self.count
    }
}

impl Env for CountingEnv {
    fn specs(&self) -> &EnvSpecs {
        &self.specs
    }

    fn set_seed(&mut self, _seed: u64) {}

    fn name(&self) -> &str {
        NAME
    }

    fn reset_into(
        &mut self,
        _input: Option<&TensorDict>,
        out: &mut TensorDict,
    ) -> Result<(), EnvError> {
        self.count = self.start_val;
        out.tensor_mut("observation")?.as_mut_slice::<i32>()?[0] = self.count;
        self.reset_out
            .write_flags(out, self.count > self.max_steps, false)
    }

    fn step_into(&mut self, input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError> {
        let action = scalar_action_by::<i64>(NAME, input, &mut self.action)?;
        self.count = i32::try_from(action)
            .ok()
            .and_then(|a| self.count.checked_add(a))
            .ok_or_else(|| EnvError::InvalidAction {
                env: NAME.into(),
                reason: format!("adding {action} to the count {} overflows i32", self.count),
            })?;
        let done = self.count > self.max_steps;
        next.tensor_mut("observation")?.as_mut_slice::<i32>()?[0] = self.count;
        next.tensor_mut("reward")?.as_mut_slice::<f32>()?[0] = 0.0;
        self.step_out.write_flags(next, done, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensordict::Tensor;

    #[test]
    fn counts_and_resets() {
        let mut env =
            CountingEnv::from_kwargs(&Kwargs::new().with("start_val", 3).with("max_steps", 4))
                .unwrap();
        let mut td = env.reset(None).unwrap();
        assert_eq!(
            td.tensor("observation").unwrap().to_vec::<i32>().unwrap(),
            vec![3]
        );
        td.set("action", Tensor::from_vec(&[1], vec![2i64]).unwrap())
            .unwrap();
        let (out, root) = env.step_and_maybe_reset(td).unwrap();
        assert_eq!(
            out.tensor(("next", "observation"))
                .unwrap()
                .to_vec::<i32>()
                .unwrap(),
            vec![5]
        );
        // Done, so the next root was reset.
        assert_eq!(
            root.tensor("observation").unwrap().to_vec::<i32>().unwrap(),
            vec![3]
        );
        assert_eq!(
            root.tensor("done").unwrap().to_vec::<bool>().unwrap(),
            vec![false]
        );
    }

    #[test]
    fn done_at_reset_when_the_start_is_past_max_steps_and_reward_is_zero() {
        let mut env = CountingEnv::new(10, 5);
        let td = env.reset(None).unwrap();
        assert_eq!(
            td.tensor("done").unwrap().to_vec::<bool>().unwrap(),
            vec![true]
        );
        let mut td = CountingEnv::new(0, 5).reset(None).unwrap();
        td.set("action", Tensor::from_vec(&[1], vec![1i64]).unwrap())
            .unwrap();
        let out = CountingEnv::new(0, 5).step(td).unwrap();
        assert_eq!(
            out.tensor(("next", "reward"))
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![0.0]
        );
        assert!(CountingEnv::from_kwargs(&Kwargs::new().with("seed", 3)).is_ok());
    }

    #[test]
    fn overflow_and_bad_kwargs_are_errors() {
        let mut env = CountingEnv::new(i32::MAX, 10);
        let mut td = env.reset(None).unwrap();
        td.set("action", Tensor::from_vec(&[1], vec![1i64]).unwrap())
            .unwrap();
        assert!(env
            .step(td)
            .unwrap_err()
            .to_string()
            .contains("overflows i32"));
        let err = CountingEnv::from_kwargs(&Kwargs::new().with("max_steps", i64::MAX)).unwrap_err();
        assert!(err.to_string().contains("does not fit in i32"));
    }
}
