//! `TwoCounters`: two counters in one env (batch size `[2]`).

use envs::{standard_done_spec, Env, EnvError, EnvSpecs};
use specs::{Composite, TensorSpec};
use tensordict::{DType, TensorDict};

/// Two counters in one env (batch size `[2]`), each done past its own max.
#[derive(Debug)]
pub struct TwoCounters {
    count: [i32; 2],
    max: [i32; 2],
    specs: EnvSpecs,
}

impl TwoCounters {
    /// Counters at 0, done past 1 and past 100.
    pub fn new() -> TwoCounters {
        let b = [2usize];
        let with = |key: &str, spec| Composite::new(&b).with(key, spec).unwrap();
        TwoCounters {
            count: [0, 0],
            max: [1, 100],
            specs: EnvSpecs::new(
                &b,
                with("action", TensorSpec::unbounded(&[2, 1], DType::I64)),
                with("observation", TensorSpec::unbounded(&[2, 1], DType::I32)),
                with("reward", TensorSpec::unbounded(&[2, 1], DType::F32)),
                standard_done_spec(&b).unwrap(),
                Composite::new(&b),
            )
            .unwrap(),
        }
    }

    fn write(&self, out: &mut TensorDict) -> Result<(), EnvError> {
        out.tensor_mut("observation")?
            .as_mut_slice::<i32>()?
            .copy_from_slice(&self.count);
        let done = [self.count[0] > self.max[0], self.count[1] > self.max[1]];
        out.tensor_mut("done")?
            .as_mut_slice::<bool>()?
            .copy_from_slice(&done);
        out.tensor_mut("terminated")?
            .as_mut_slice::<bool>()?
            .copy_from_slice(&done);
        Ok(())
    }
}

impl Env for TwoCounters {
    fn specs(&self) -> &EnvSpecs {
        &self.specs
    }
    fn set_seed(&mut self, _seed: u64) {}
    fn reset_into(
        &mut self,
        input: Option<&TensorDict>,
        out: &mut TensorDict,
    ) -> Result<(), EnvError> {
        let mask = match input.and_then(|i| i.tensor("_reset").ok()) {
            Some(mask) => mask.to_vec::<bool>()?,
            None => vec![true, true],
        };
        for (count, reset) in self.count.iter_mut().zip(mask) {
            if reset {
                *count = 0;
            }
        }
        self.write(out)
    }
    fn step_into(&mut self, input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError> {
        let action = input.tensor("action")?.to_vec::<i64>()?;
        for (count, a) in self.count.iter_mut().zip(action) {
            *count += a as i32;
        }
        self.write(next)
    }
}

impl Default for TwoCounters {
    fn default() -> Self {
        TwoCounters::new()
    }
}
