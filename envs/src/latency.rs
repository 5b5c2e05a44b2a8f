//! `LatencyEnv`: a cheap env whose step and reset take a configured time,
//! spinning or sleeping, for tests and benchmarks of pools.

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use specs::TensorSpec;
use tensordict::{DType, Lookup, TensorDict};

use crate::env::scalar_action_by;
use crate::outputs::Outputs;
use crate::{Env, EnvError, EnvSpecs, Kwargs};

/// The registry name.
pub(crate) const NAME: &str = "LatencyEnv";

/// How [`LatencyEnv`] spends its step time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Busy-wait on the clock: holds a core, like a simulator computing.
    Spin,
    /// Sleep: releases the core, like an env waiting on I/O.
    Sleep,
}

/// Options of a [`LatencyEnv`].
#[derive(Clone, Debug, PartialEq)]
pub struct LatencyConfig {
    /// Time each step takes.
    pub step_time: Duration,
    /// Extra step time drawn uniformly from `[0, jitter)`.
    pub jitter: Duration,
    /// Time each reset takes.
    pub reset_time: Duration,
    /// Spin or sleep.
    pub wait: Wait,
    /// Size of the `f32` observation.
    pub obs_dim: usize,
    /// Truncated after this many steps (0: never done).
    pub episode_len: u64,
}

impl Default for LatencyConfig {
    fn default() -> Self {
        LatencyConfig {
            step_time: Duration::ZERO,
            jitter: Duration::ZERO,
            reset_time: Duration::ZERO,
            wait: Wait::Spin,
            obs_dim: 4,
            episode_len: 0,
        }
    }
}

/// An env that does nothing but take time: each step spins or sleeps for
/// `step_time` (plus up to `jitter`), then writes an observation filled with
/// the step count, reward 1, and truncation after `episode_len` steps. The
/// action is an `i64` of shape `[1]` (0 or 1 in its spec), ignored.
///
/// Keywords: `step_us`, `jitter_us`, `reset_us` (microseconds, default 0),
/// `mode` (`"spin"` or `"sleep"`, default spin), `obs_dim` (default 4),
/// `episode_len` (default 0: never done), `seed` (for the jitter).
#[derive(Debug)]
pub struct LatencyEnv {
    config: LatencyConfig,
    steps: u64,
    rng: SmallRng,
    specs: EnvSpecs,
    /// Where the outputs and the action sit in the buffers (kept: a step
    /// compares one name per key).
    step_out: Outputs,
    reset_out: Outputs,
    action: Lookup,
}

impl LatencyEnv {
    /// The largest `obs_dim`.
    pub const MAX_OBS_DIM: usize = 1 << 20;

    /// An env with these options; an error if `obs_dim` is above
    /// [`LatencyEnv::MAX_OBS_DIM`] or a time is above an hour.
    pub fn new(config: LatencyConfig) -> Result<LatencyEnv, EnvError> {
        let invalid = |key: &str, reason: String| EnvError::InvalidKwarg {
            env: NAME.into(),
            key: key.into(),
            reason,
        };
        if config.obs_dim > Self::MAX_OBS_DIM {
            return Err(invalid(
                "obs_dim",
                format!("{} is above {}", config.obs_dim, Self::MAX_OBS_DIM),
            ));
        }
        const HOUR: Duration = Duration::from_secs(3600);
        for (key, time) in [
            ("step_us", config.step_time),
            ("jitter_us", config.jitter),
            ("reset_us", config.reset_time),
        ] {
            if time > HOUR {
                return Err(invalid(key, format!("{time:?} is above an hour")));
            }
        }
        let action = TensorSpec::categorical(&[1], DType::I64, 2)?;
        let observation = TensorSpec::unbounded(&[config.obs_dim], DType::F32);
        Ok(LatencyEnv {
            config,
            steps: 0,
            rng: SmallRng::seed_from_u64(0),
            specs: EnvSpecs::standard(action, observation)?,
            step_out: Outputs::default(),
            reset_out: Outputs::default(),
            action: Lookup::new("action"),
        })
    }

    /// The registry constructor (see the keywords above).
    pub fn from_kwargs(kwargs: &Kwargs) -> Result<LatencyEnv, EnvError> {
        let reader = kwargs.reader(
            NAME,
            &[
                "step_us",
                "jitter_us",
                "reset_us",
                "mode",
                "obs_dim",
                "episode_len",
                "seed",
            ],
        );
        let micros = |key: &str| reader.uint(key, Some(0)).map(Duration::from_micros);
        let step_time = micros("step_us")?;
        let jitter = micros("jitter_us")?;
        let reset_time = micros("reset_us")?;
        let wait = match reader.string("mode", Some("spin"))?.as_str() {
            "spin" => Wait::Spin,
            "sleep" => Wait::Sleep,
            other => {
                return Err(
                    reader.invalid("mode", format!("{other:?} is not \"spin\" or \"sleep\""))
                )
            }
        };
        let obs_dim = reader.uint("obs_dim", Some(4))?;
        let obs_dim = usize::try_from(obs_dim).unwrap_or(usize::MAX);
        let episode_len = reader.uint("episode_len", Some(0))?;
        let seed = reader.uint("seed", Some(0))?;
        reader.finish()?;
        let mut env = LatencyEnv::new(LatencyConfig {
            step_time,
            jitter,
            reset_time,
            wait,
            obs_dim,
            episode_len,
        })?;
        env.set_seed(seed);
        Ok(env)
    }

    /// The options.
    pub fn config(&self) -> &LatencyConfig {
        &self.config
    }

    fn take(&self, time: Duration) {
        if time.is_zero() {
            return;
        }
        match self.config.wait {
            Wait::Sleep => std::thread::sleep(time),
            Wait::Spin => {
                let start = Instant::now();
                while start.elapsed() < time {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

impl Env for LatencyEnv {
    fn specs(&self) -> &EnvSpecs {
        &self.specs
    }

    fn set_seed(&mut self, seed: u64) {
        self.rng = SmallRng::seed_from_u64(seed);
    }

    fn name(&self) -> &str {
        NAME
    }

    fn reset_into(
        &mut self,
        _input: Option<&TensorDict>,
        out: &mut TensorDict,
    ) -> Result<(), EnvError> {
        self.take(self.config.reset_time);
        self.steps = 0;
        out.tensor_mut("observation")?
            .as_mut_slice::<f32>()?
            .fill(0.0);
        self.reset_out.write_flags(out, false, false)
    }

    fn step_into(&mut self, input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError> {
        scalar_action_by::<i64>(NAME, input, &mut self.action)?;
        let jitter = if self.config.jitter.is_zero() {
            Duration::ZERO
        } else {
            self.config.jitter.mul_f64(self.rng.random::<f64>())
        };
        self.take(self.config.step_time + jitter);
        self.steps += 1;
        let truncated = self.config.episode_len > 0 && self.steps >= self.config.episode_len;
        next.tensor_mut("observation")?
            .as_mut_slice::<f32>()?
            .fill(self.steps as f32);
        next.tensor_mut("reward")?.as_mut_slice::<f32>()?[0] = 1.0;
        self.step_out.write_flags(next, false, truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensordict::Tensor;

    #[test]
    fn steps_take_at_least_the_configured_time() {
        let mut env = LatencyEnv::from_kwargs(
            &Kwargs::new()
                .with("step_us", 2000)
                .with("mode", "sleep")
                .with("episode_len", 2)
                .with("obs_dim", 2),
        )
        .unwrap();
        let mut td = env.reset(None).unwrap();
        td.set("action", Tensor::from_vec(&[1], vec![0i64]).unwrap())
            .unwrap();
        let start = Instant::now();
        let (out, root) = env.step_and_maybe_reset(td).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(2));
        assert_eq!(
            out.tensor(("next", "observation"))
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![1.0, 1.0]
        );
        let mut td = root;
        td.set("action", Tensor::from_vec(&[1], vec![0i64]).unwrap())
            .unwrap();
        let out = env.step(td).unwrap();
        assert_eq!(
            out.tensor(("next", "done"))
                .unwrap()
                .to_vec::<bool>()
                .unwrap(),
            vec![true]
        );
    }

    #[test]
    fn bad_kwargs_are_errors() {
        let err = LatencyEnv::from_kwargs(&Kwargs::new().with("mode", "nap")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "LatencyEnv: keyword argument \"mode\" is invalid: \"nap\" is not \"spin\" or \"sleep\""
        );
        assert!(LatencyEnv::from_kwargs(&Kwargs::new().with("step_us", -1)).is_err());
        let err = LatencyEnv::from_kwargs(&Kwargs::new().with("obs_dim", 1i64 << 40)).unwrap_err();
        assert!(
            err.to_string()
                .contains("\"obs_dim\" is invalid: 1099511627776 is above 1048576"),
            "{err}"
        );
        let err = LatencyEnv::new(LatencyConfig {
            step_time: Duration::MAX,
            ..LatencyConfig::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("is above an hour"), "{err}");
    }
}
