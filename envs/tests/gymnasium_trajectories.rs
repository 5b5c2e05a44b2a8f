//! Replays trajectories recorded from Gymnasium itself (CartPole-v1 and
//! Pendulum-v1; `scripts/gen_trajectories.py` regenerates the data file) and
//! checks that our envs agree: observations and rewards to 1e-6, the
//! terminated and truncated flags exactly.
//!
//! Each episode is replayed from its recorded initial state with its recorded
//! actions, through the `Env` API (`step` on a tensordict), without
//! re-synchronising the state: an error would compound, so agreement over a
//! whole episode (up to 500 steps) is strong evidence of identical arithmetic.

use envs::{CartPole, Env, Pendulum};
use serde_json::Value;
use tensordict::{Tensor, TensorDict};

const TOLERANCE: f64 = 1e-6;

fn data() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/gym_trajectories.json"
    );
    let text = std::fs::read_to_string(path).expect("the trajectory file is committed");
    serde_json::from_str(&text).expect("valid JSON")
}

fn floats(value: &Value) -> Vec<f64> {
    value
        .as_array()
        .expect("an array")
        .iter()
        .map(|v| v.as_f64().expect("a number"))
        .collect()
}

/// Steps `env` with `action` under the root `td`; checks the result against
/// the recorded step; returns the next root.
fn check_step<E: Env>(
    env: &mut E,
    mut td: TensorDict,
    action: Tensor,
    recorded: &Value,
    what: &str,
) -> TensorDict {
    td.set("action", action).unwrap();
    let out = env.step(td).unwrap();
    let observation: Vec<f64> = out.tensor(("next", "observation")).unwrap().to_f64_vec();
    let expected = floats(&recorded["observation"]);
    assert_eq!(observation.len(), expected.len(), "{what}");
    for (i, (got, want)) in observation.iter().zip(&expected).enumerate() {
        assert!(
            (got - want).abs() <= TOLERANCE,
            "{what}: observation[{i}] is {got}, Gymnasium has {want}"
        );
    }
    let reward = out
        .tensor(("next", "reward"))
        .unwrap()
        .to_vec::<f32>()
        .unwrap()[0] as f64;
    let want = recorded["reward"].as_f64().unwrap();
    assert!(
        (reward - want).abs() <= TOLERANCE,
        "{what}: reward is {reward}, Gymnasium has {want}"
    );
    let flag = |key: &str| out.tensor(("next", key)).unwrap().to_vec::<bool>().unwrap()[0];
    let terminated = recorded["terminated"].as_bool().unwrap();
    let truncated = recorded["truncated"].as_bool().unwrap();
    assert_eq!(flag("terminated"), terminated, "{what}: terminated");
    assert_eq!(flag("truncated"), truncated, "{what}: truncated");
    assert_eq!(flag("done"), terminated || truncated, "{what}: done");
    env.step_mdp(&out).unwrap()
}

#[test]
fn cartpole_matches_gymnasium() {
    let data = data();
    let episodes = data["cartpole"].as_array().unwrap();
    assert!(episodes.len() >= 3);
    let mut steps_checked = 0;
    for episode in episodes {
        let seed = &episode["seed"];
        let mut env = CartPole::new();
        let mut td = env.reset(None).unwrap();
        let initial: [f64; 4] = floats(&episode["initial_state"]).try_into().unwrap();
        env.set_state(initial);
        for (t, step) in episode["steps"].as_array().unwrap().iter().enumerate() {
            let action = step["action"].as_i64().unwrap();
            let what = format!("CartPole seed {seed} step {t}");
            td = check_step(
                &mut env,
                td,
                Tensor::from_vec(&[1], vec![action]).unwrap(),
                step,
                &what,
            );
            let state = floats(&step["state"]);
            for (got, want) in env.state().iter().zip(&state) {
                assert!(
                    (got - want).abs() <= TOLERANCE,
                    "{what}: state {:?} vs {state:?}",
                    env.state()
                );
            }
            steps_checked += 1;
        }
    }
    // The balanced episode runs to truncation at 500.
    assert!(steps_checked > 500, "only {steps_checked} steps checked");
}

#[test]
fn pendulum_matches_gymnasium() {
    let data = data();
    let episodes = data["pendulum"].as_array().unwrap();
    assert!(episodes.len() >= 3);
    for episode in episodes {
        let seed = &episode["seed"];
        let mut env = Pendulum::new();
        let mut td = env.reset(None).unwrap();
        let initial: [f64; 2] = floats(&episode["initial_state"]).try_into().unwrap();
        env.set_state(initial);
        let steps = episode["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 200, "Pendulum episodes truncate at 200");
        for (t, step) in steps.iter().enumerate() {
            // Recorded as the exact f32 value, widened to f64.
            let torque = step["action"].as_f64().unwrap() as f32;
            let what = format!("Pendulum seed {seed} step {t}");
            td = check_step(
                &mut env,
                td,
                Tensor::from_vec(&[1], vec![torque]).unwrap(),
                step,
                &what,
            );
            let state = floats(&step["state"]);
            for (got, want) in env.state().iter().zip(&state) {
                assert!(
                    (got - want).abs() <= TOLERANCE,
                    "{what}: state {:?} vs {state:?}",
                    env.state()
                );
            }
        }
    }
}
