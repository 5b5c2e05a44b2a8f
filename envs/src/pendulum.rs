//! `Pendulum`: Gymnasium's `Pendulum-v1`, with its exact dynamics.

use std::f64::consts::PI;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use specs::TensorSpec;
use tensordict::{DType, Lookup, Tensor, TensorDict};

use crate::env::scalar_action_by;
use crate::outputs::Outputs;
use crate::{Env, EnvError, EnvSpecs, Kwargs};

const MAX_SPEED: f64 = 8.0;
const MAX_TORQUE: f32 = 2.0;
const DT: f64 = 0.05;
const DEFAULT_G: f64 = 10.0;
const MASS: f64 = 1.0;
const LENGTH: f64 = 1.0;
/// Gymnasium's `TimeLimit` for `Pendulum-v1`.
const MAX_EPISODE_STEPS: u64 = 200;

/// The registry name.
pub(crate) const NAME: &str = "Pendulum-v1";

/// An inverted pendulum swung up by a bounded torque: Gymnasium 1.x's
/// `Pendulum-v1`, step for step.
///
/// The state is `[theta, theta_dot]` in `f64`; the observation is
/// `[cos theta, sin theta, theta_dot]` as `f32`. The action is an `f32`
/// torque of shape `[1]`, clipped to `[-2, 2]`. The reward is
/// `-(angle² + 0.1 theta_dot² + 0.001 u²)`, computed with the same mix of
/// `f64` and `f32` arithmetic as Gymnasium under NumPy 2. Never terminated;
/// truncated after 200 steps (keyword `max_episode_steps`). Reset draws
/// `theta` from `[-pi, pi)` and `theta_dot` from `[-1, 1)`. Keyword `g`
/// sets gravity (default 10).
#[derive(Debug)]
pub struct Pendulum {
    state: [f64; 2],
    g: f64,
    elapsed_steps: u64,
    max_episode_steps: u64,
    rng: StdRng,
    specs: EnvSpecs,
    /// Where the outputs and the action sit in the buffers (kept: a step
    /// compares one name per key).
    step_out: Outputs,
    reset_out: Outputs,
    action: Lookup,
}

impl Default for Pendulum {
    fn default() -> Self {
        Pendulum::new()
    }
}

/// `((x + pi) mod 2 pi) - pi` with a floored modulo, as NumPy's `%`.
fn angle_normalize(x: f64) -> f64 {
    (x + PI).rem_euclid(2.0 * PI) - PI
}

impl Pendulum {
    /// A Pendulum with Gymnasium's defaults, seeded with 0.
    pub fn new() -> Pendulum {
        Pendulum::with_options(DEFAULT_G, MAX_EPISODE_STEPS)
    }

    /// A Pendulum with gravity `g`, truncated after `max_episode_steps`.
    pub fn with_options(g: f64, max_episode_steps: u64) -> Pendulum {
        Pendulum {
            state: [0.0; 2],
            g,
            elapsed_steps: 0,
            max_episode_steps,
            rng: StdRng::seed_from_u64(0),
            specs: pendulum_specs(),
            step_out: Outputs::default(),
            reset_out: Outputs::default(),
            action: Lookup::new("action"),
        }
    }

    /// The registry constructor: keywords `g` (default 10),
    /// `max_episode_steps` (default 200) and `seed` (default 0).
    pub fn from_kwargs(kwargs: &Kwargs) -> Result<Pendulum, EnvError> {
        let reader = kwargs.reader(NAME, &["g", "max_episode_steps", "seed"]);
        let g = reader.float("g", Some(DEFAULT_G))?;
        if !g.is_finite() {
            return Err(reader.invalid("g", format!("must be finite, got {g}")));
        }
        let max_episode_steps = reader.uint("max_episode_steps", Some(MAX_EPISODE_STEPS))?;
        if max_episode_steps == 0 {
            return Err(reader.invalid("max_episode_steps", "must be at least 1"));
        }
        let seed = reader.uint("seed", Some(0))?;
        reader.finish()?;
        let mut env = Pendulum::with_options(g, max_episode_steps);
        env.set_seed(seed);
        Ok(env)
    }

    /// The physical state `[theta, theta_dot]`.
    pub fn state(&self) -> [f64; 2] {
        self.state
    }

    /// Sets the physical state (to replay a trajectory from a given state);
    /// the episode's step count starts afresh.
    pub fn set_state(&mut self, state: [f64; 2]) {
        self.state = state;
        self.elapsed_steps = 0;
    }

    /// One step of the dynamics with torque `u`: the observation, the
    /// reward and truncated.
    pub fn step_physics(&mut self, u: f32) -> ([f32; 3], f64, bool) {
        let [th, thdot] = self.state;
        // NumPy clips the float32 action in float32.
        let u = u.clamp(-MAX_TORQUE, MAX_TORQUE);
        let angle = angle_normalize(th);
        // `0.001 * u**2` is a float32 product under NumPy 2 (NEP 50).
        let costs = angle * angle + 0.1 * (thdot * thdot) + f64::from(0.001f32 * (u * u));
        // `3.0 / (m * l**2) * u` is float32 too; the rest is float64.
        let torque_term = f64::from((3.0 / (MASS * LENGTH * LENGTH)) as f32 * u);
        let new_thdot = thdot + (3.0 * self.g / (2.0 * LENGTH) * th.sin() + torque_term) * DT;
        let new_thdot = new_thdot.clamp(-MAX_SPEED, MAX_SPEED);
        let new_th = th + new_thdot * DT;
        self.state = [new_th, new_thdot];
        self.elapsed_steps += 1;
        let truncated = self.elapsed_steps >= self.max_episode_steps;
        (self.observation(), -costs, truncated)
    }

    fn observation(&self) -> [f32; 3] {
        let [th, thdot] = self.state;
        [th.cos() as f32, th.sin() as f32, thdot as f32]
    }
}

fn pendulum_specs() -> EnvSpecs {
    let high = [1.0f32, 1.0, MAX_SPEED as f32];
    let observation = TensorSpec::bounded_tensors(
        Tensor::from_vec(&[3], high.map(|v| -v).to_vec()).expect("3 values"),
        Tensor::from_vec(&[3], high.to_vec()).expect("3 values"),
    )
    .expect("low <= high");
    let action = TensorSpec::bounded(
        &[1],
        DType::F32,
        -f64::from(MAX_TORQUE),
        f64::from(MAX_TORQUE),
    )
    .expect("low <= high");
    EnvSpecs::standard(action, observation).expect("standard specs are valid")
}

impl Env for Pendulum {
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
        let th = self.rng.random_range(-PI..PI);
        let thdot = self.rng.random_range(-1.0..1.0);
        self.set_state([th, thdot]);
        let observation = self.observation();
        self.reset_out.write_reset(out, &observation)
    }

    fn step_into(&mut self, input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError> {
        let u = scalar_action_by::<f32>(NAME, input, &mut self.action)?;
        let (observation, reward, truncated) = self.step_physics(u);
        self.step_out
            .write_step(next, &observation, reward as f32, false, truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn angle_normalize_is_floored() {
        assert!((angle_normalize(3.0 * PI) - (-PI)).abs() < 1e-12);
        assert!((angle_normalize(-0.5) + 0.5).abs() < 1e-15);
        assert!((angle_normalize(-3.5 * PI) - 0.5 * PI).abs() < 1e-12);
    }

    #[test]
    fn torque_is_clipped_and_reward_is_negative_cost() {
        let mut a = Pendulum::new();
        let mut b = Pendulum::new();
        a.set_state([0.5, 0.1]);
        b.set_state([0.5, 0.1]);
        assert_eq!(a.step_physics(5.0), b.step_physics(2.0));
        a.set_state([0.0, 0.0]);
        let (_, reward, truncated) = a.step_physics(0.0);
        assert_eq!(reward, 0.0);
        assert!(!truncated);
    }

    #[test]
    fn truncates_and_never_terminates() {
        let mut env = Pendulum::with_options(10.0, 2);
        env.reset(None).unwrap();
        let mut td = env.reset(None).unwrap();
        for expected in [false, true] {
            td.set("action", Tensor::from_vec(&[1], vec![0.5f32]).unwrap())
                .unwrap();
            let out = env.step(td).unwrap();
            assert_eq!(
                out.tensor(("next", "truncated"))
                    .unwrap()
                    .to_vec::<bool>()
                    .unwrap(),
                vec![expected]
            );
            assert_eq!(
                out.tensor(("next", "terminated"))
                    .unwrap()
                    .to_vec::<bool>()
                    .unwrap(),
                vec![false]
            );
            td = env.step_mdp(&out).unwrap();
        }
    }

    #[test]
    fn kwargs() {
        let env = Pendulum::from_kwargs(&Kwargs::new().with("g", 9)).unwrap();
        assert_eq!(env.g, 9.0);
        assert!(Pendulum::from_kwargs(&Kwargs::new().with("g", f64::NAN)).is_err());
        assert!(Pendulum::from_kwargs(&Kwargs::new().with("g", "ten")).is_err());
    }
}
