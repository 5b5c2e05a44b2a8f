//! `CartPole`: Gymnasium's `CartPole-v1`, with its exact dynamics.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use specs::TensorSpec;
use tensordict::{DType, Lookup, Tensor, TensorDict};

use crate::env::scalar_action_by;
use crate::outputs::Outputs;
use crate::{Env, EnvError, EnvSpecs, Kwargs};

const GRAVITY: f64 = 9.8;
const MASS_CART: f64 = 1.0;
const MASS_POLE: f64 = 0.1;
const TOTAL_MASS: f64 = MASS_POLE + MASS_CART;
/// Half the pole's length.
const LENGTH: f64 = 0.5;
const POLE_MASS_LENGTH: f64 = MASS_POLE * LENGTH;
const FORCE_MAG: f64 = 10.0;
/// Seconds between state updates.
const TAU: f64 = 0.02;
/// 12 degrees, as Gymnasium computes it.
const THETA_THRESHOLD: f64 = 12.0 * 2.0 * std::f64::consts::PI / 360.0;
const X_THRESHOLD: f64 = 2.4;
/// Gymnasium's `TimeLimit` for `CartPole-v1`.
const MAX_EPISODE_STEPS: u64 = 500;

/// The registry name.
pub(crate) const NAME: &str = "CartPole-v1";

/// A pole on a cart, balanced by pushing the cart left (action 0) or right
/// (action 1): Gymnasium 1.x's `CartPole-v1`, step for step.
///
/// The state is `[x, x_dot, theta, theta_dot]` in `f64`; the observation is
/// that state as `f32` (shape `[4]`). Reward 1 per step, including the step
/// that terminates (0 for steps taken after termination without a reset).
/// Terminated when `|x| > 2.4` or `|theta| > 12°`; truncated after 500 steps
/// (keyword `max_episode_steps`). Reset draws each state variable uniformly
/// from `[-0.05, 0.05)` with the env's seeded RNG. The action is an `i64` of
/// shape `[1]` (shape `[]` is accepted too), 0 or 1.
///
/// ```
/// use envs::{CartPole, Env};
/// use tensordict::{Tensor, TensorDict};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut env = CartPole::new();
/// env.set_seed(0);
/// let mut td = env.reset(None)?;
/// td.set("action", Tensor::from_vec(&[1], vec![1i64])?)?;
/// let td = env.step(td)?;
/// assert_eq!(td.tensor(("next", "reward"))?.to_vec::<f32>()?, vec![1.0]);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct CartPole {
    state: [f64; 4],
    elapsed_steps: u64,
    max_episode_steps: u64,
    steps_beyond_terminated: Option<u64>,
    rng: StdRng,
    specs: EnvSpecs,
    /// Where the outputs and the action sit in the buffers (kept: a step
    /// compares one name per key).
    step_out: Outputs,
    reset_out: Outputs,
    action: Lookup,
}

impl Default for CartPole {
    fn default() -> Self {
        CartPole::new()
    }
}

impl CartPole {
    /// A CartPole with Gymnasium's defaults, seeded with 0.
    pub fn new() -> CartPole {
        CartPole::with_max_episode_steps(MAX_EPISODE_STEPS)
    }

    /// A CartPole truncated after `max_episode_steps` steps.
    pub fn with_max_episode_steps(max_episode_steps: u64) -> CartPole {
        CartPole {
            state: [0.0; 4],
            elapsed_steps: 0,
            max_episode_steps,
            steps_beyond_terminated: None,
            rng: StdRng::seed_from_u64(0),
            specs: cartpole_specs(),
            step_out: Outputs::default(),
            reset_out: Outputs::default(),
            action: Lookup::new("action"),
        }
    }

    /// The registry constructor: keywords `max_episode_steps` (default 500)
    /// and `seed` (default 0).
    pub fn from_kwargs(kwargs: &Kwargs) -> Result<CartPole, EnvError> {
        let reader = kwargs.reader(NAME, &["max_episode_steps", "seed"]);
        let max_episode_steps = reader.uint("max_episode_steps", Some(MAX_EPISODE_STEPS))?;
        if max_episode_steps == 0 {
            return Err(reader.invalid("max_episode_steps", "must be at least 1"));
        }
        let seed = reader.uint("seed", Some(0))?;
        reader.finish()?;
        let mut env = CartPole::with_max_episode_steps(max_episode_steps);
        env.set_seed(seed);
        Ok(env)
    }

    /// The physical state `[x, x_dot, theta, theta_dot]`.
    pub fn state(&self) -> [f64; 4] {
        self.state
    }

    /// Sets the physical state (to replay a trajectory from a given state);
    /// the episode's step count and termination record start afresh.
    pub fn set_state(&mut self, state: [f64; 4]) {
        self.state = state;
        self.elapsed_steps = 0;
        self.steps_beyond_terminated = None;
    }

    /// One step of the dynamics with `action` (0 or 1): the observation,
    /// the reward, terminated and truncated.
    pub fn step_physics(&mut self, action: i64) -> Result<([f32; 4], f64, bool, bool), EnvError> {
        if action != 0 && action != 1 {
            return Err(EnvError::InvalidAction {
                env: NAME.into(),
                reason: format!("action {action} is not 0 or 1"),
            });
        }
        let [x, x_dot, theta, theta_dot] = self.state;
        let force = if action == 1 { FORCE_MAG } else { -FORCE_MAG };
        let cos_theta = theta.cos();
        let sin_theta = theta.sin();
        let temp = (force + POLE_MASS_LENGTH * (theta_dot * theta_dot) * sin_theta) / TOTAL_MASS;
        let theta_acc = (GRAVITY * sin_theta - cos_theta * temp)
            / (LENGTH * (4.0 / 3.0 - MASS_POLE * (cos_theta * cos_theta) / TOTAL_MASS));
        let x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos_theta / TOTAL_MASS;
        // Euler integration, as Gymnasium's default `kinematics_integrator`.
        let x = x + TAU * x_dot;
        let x_dot = x_dot + TAU * x_acc;
        let theta = theta + TAU * theta_dot;
        let theta_dot = theta_dot + TAU * theta_acc;
        self.state = [x, x_dot, theta, theta_dot];

        // Gymnasium's comparisons, kept as written: a NaN state is not
        // terminated, where `!range.contains(..)` would say it is.
        #[allow(clippy::manual_range_contains)]
        let terminated = x < -X_THRESHOLD
            || x > X_THRESHOLD
            || theta < -THETA_THRESHOLD
            || theta > THETA_THRESHOLD;
        let reward = if !terminated {
            1.0
        } else if self.steps_beyond_terminated.is_none() {
            self.steps_beyond_terminated = Some(0);
            1.0
        } else {
            self.steps_beyond_terminated = self.steps_beyond_terminated.map(|s| s + 1);
            0.0
        };
        self.elapsed_steps += 1;
        let truncated = self.elapsed_steps >= self.max_episode_steps;
        Ok((self.observation(), reward, terminated, truncated))
    }

    fn observation(&self) -> [f32; 4] {
        self.state.map(|v| v as f32)
    }
}

fn cartpole_specs() -> EnvSpecs {
    // Gymnasium's bounds: twice the thresholds, and the largest finite f32
    // (`np.finfo(np.float32).max`) for the velocities.
    let high = [
        (X_THRESHOLD * 2.0) as f32,
        f32::MAX,
        (THETA_THRESHOLD * 2.0) as f32,
        f32::MAX,
    ];
    let low = high.map(|v| -v);
    let observation = TensorSpec::bounded_tensors(
        Tensor::from_vec(&[4], low.to_vec()).expect("4 values"),
        Tensor::from_vec(&[4], high.to_vec()).expect("4 values"),
    )
    .expect("low <= high");
    let action = TensorSpec::categorical(&[1], DType::I64, 2).expect("n = 2");
    EnvSpecs::standard(action, observation).expect("standard specs are valid")
}

impl Env for CartPole {
    fn specs(&self) -> &EnvSpecs {
        &self.specs
    }

    fn set_seed(&mut self, seed: u64) {
        self.rng = StdRng::seed_from_u64(seed);
    }

    fn name(&self) -> &str {
        NAME
    }

    fn reset_into(
        &mut self,
        _input: Option<&TensorDict>,
        out: &mut TensorDict,
    ) -> Result<(), EnvError> {
        let state = std::array::from_fn(|_| self.rng.random_range(-0.05..0.05));
        self.set_state(state);
        let observation = self.observation();
        self.reset_out.write_reset(out, &observation)
    }

    fn step_into(&mut self, input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError> {
        let action = scalar_action_by::<i64>(NAME, input, &mut self.action)?;
        let (observation, reward, terminated, truncated) = self.step_physics(action)?;
        self.step_out
            .write_step(next, &observation, reward as f32, terminated, truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_is_seeded_and_small() {
        let mut a = CartPole::new();
        let mut b = CartPole::new();
        a.set_seed(7);
        b.set_seed(7);
        assert_eq!(a.reset(None).unwrap(), b.reset(None).unwrap());
        assert!(a.state().iter().all(|v| v.abs() < 0.05));
    }

    #[test]
    fn pushing_one_way_terminates_and_rewards_follow_gymnasium() {
        let mut env = CartPole::new();
        env.set_state([0.0; 4]);
        let mut rewards = Vec::new();
        let mut terminated_at = None;
        for t in 0..40 {
            let (_, reward, terminated, _) = env.step_physics(1).unwrap();
            rewards.push(reward);
            if terminated && terminated_at.is_none() {
                terminated_at = Some(t);
            }
        }
        let t = terminated_at.expect("the pole falls");
        assert!(rewards[..=t].iter().all(|&r| r == 1.0));
        assert!(rewards[t + 1..].iter().all(|&r| r == 0.0));
    }

    #[test]
    fn truncates_at_max_episode_steps() {
        let mut env = CartPole::with_max_episode_steps(3);
        env.set_state([0.0; 4]);
        let flags: Vec<bool> = (0..3).map(|i| env.step_physics(i % 2).unwrap().3).collect();
        assert_eq!(flags, [false, false, true]);
    }

    #[test]
    fn bad_actions_are_errors() {
        let mut env = CartPole::new();
        let err = env.step_physics(2).unwrap_err();
        assert_eq!(
            err.to_string(),
            "CartPole-v1: invalid action: action 2 is not 0 or 1"
        );
        let td = env.reset(None).unwrap();
        let err = env.step(td.clone()).unwrap_err();
        assert!(err.to_string().contains("no \"action\" entry"), "{err}");
        let mut wrong = td.clone();
        wrong
            .set("action", Tensor::from_vec(&[1], vec![1.0f32]).unwrap())
            .unwrap();
        assert!(env
            .step(wrong)
            .unwrap_err()
            .to_string()
            .contains("dtype mismatch"));
        let mut wide = td;
        wide.set("action", Tensor::from_vec(&[2], vec![1i64, 0]).unwrap())
            .unwrap();
        assert!(env
            .step(wide)
            .unwrap_err()
            .to_string()
            .contains("expected [1] or []"));
        let mut scalar = env.reset(None).unwrap();
        scalar.set("action", Tensor::scalar(0i64)).unwrap();
        assert!(env.step(scalar).is_ok());
    }

    #[test]
    fn kwargs() {
        let env = CartPole::from_kwargs(&Kwargs::new().with("max_episode_steps", 10)).unwrap();
        assert_eq!(env.max_episode_steps, 10);
        assert!(CartPole::from_kwargs(&Kwargs::new().with("max_episode_steps", 0)).is_err());
        assert!(CartPole::from_kwargs(&Kwargs::new().with("gravity", 1.0)).is_err());
    }
}
