"""Generate reference trajectories from real Gymnasium for the rlpool env tests.

The Rust crate ``envs`` re-implements Gymnasium's ``CartPole-v1`` and
``Pendulum-v1``.  This script records episodes from the real Python
implementation so that a Rust test can replay them (same initial state, same
actions) and check that states, observations, rewards and the
terminated/truncated flags match.

How to run (from the repository root)::

    python3 -m venv target/gymvenv && target/gymvenv/bin/pip install "gymnasium>=1.0,<2" numpy && target/gymvenv/bin/python scripts/gen_trajectories.py

Output: ``envs/tests/data/gym_trajectories.json`` (path is relative to the
repository root and resolved from this file's location, so the current
directory does not matter).  The output is fully deterministic: all seeds are
fixed, and re-running with the same Gymnasium/NumPy versions produces a
byte-identical file.

File layout::

    {
      "gymnasium_version": "...",
      "numpy_version": "...",
      "cartpole": [episode, ...],
      "pendulum": [episode, ...]
    }

    episode = {
      "seed": int,              # passed to env.reset(seed=...)
      "policy": str,            # how actions were chosen (informational)
      "action_seed": int|null,  # seed of the numpy RNG used for actions
      "initial_state": [f64],   # env.unwrapped.state right after reset
      "initial_observation": [f64],
      "steps": [
        {"action": ..., "observation": [...], "reward": f64,
         "terminated": bool, "truncated": bool,
         "state": [f64]}        # env.unwrapped.state after the step
      ]
    }

* CartPole: state is ``[x, x_dot, theta, theta_dot]`` (float64), the
  observation is that state cast to float32, the action is an int (0 or 1).
  Episodes run until terminated or truncated (TimeLimit of 500 steps).  Two
  episodes use a uniformly random policy (they terminate early); one uses a
  simple deterministic balancing controller and is truncated at 500 steps.
* Pendulum: state is ``[th, thdot]`` (float64, ``th`` is *not* wrapped), the
  observation is ``[cos th, sin th, thdot]`` cast to float32, the action is a
  float32 torque.  Actions are drawn uniformly in [-2, 2] and rounded to
  float32; every 10th step uses an out-of-range torque (2.7 or -3.1, as
  float32) to exercise clipping.  Episodes always truncate at 200 steps.

All floats are written with Python's ``repr`` (shortest round-trip form), and
float32 values are converted with ``float(np.float32(...))``, which is exact,
so every number in the file is the exact value Gymnasium produced.
"""

from __future__ import annotations

import json
import pathlib
import sys

import gymnasium as gym
import numpy as np

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
OUTPUT = REPO_ROOT / "envs" / "tests" / "data" / "gym_trajectories.json"

# Seeds for env.reset(seed=...).
SEEDS = (0, 1, 2)
# The action RNG of an episode is np.random.default_rng(ACTION_SEED_OFFSET + seed).
ACTION_SEED_OFFSET = 1000

CARTPOLE_MAX_STEPS = 500  # TimeLimit of CartPole-v1
PENDULUM_MAX_STEPS = 200  # TimeLimit of Pendulum-v1

# Out-of-range Pendulum torques used on every 10th step (cycled through).
PENDULUM_OUT_OF_RANGE = (np.float32(2.7), np.float32(-3.1))


def f64_list(values) -> list[float]:
    """Convert an array-like of numpy floats to exact Python floats."""
    return [float(v) for v in np.asarray(values).ravel()]


def balance_policy(obs: np.ndarray) -> int:
    """A simple deterministic controller that keeps the pole upright.

    Pushes right when the pole leans/rotates right (and a little against the
    cart's velocity drift).  From the seed-2 start it lasts the full 500 steps.
    """
    _x, x_dot, theta, theta_dot = (float(v) for v in obs)
    return 1 if 10.0 * theta + theta_dot + 0.1 * x_dot > 0.0 else 0


def run_cartpole(seed: int, policy: str) -> dict:
    env = gym.make("CartPole-v1")
    assert env.spec is not None and env.spec.max_episode_steps == CARTPOLE_MAX_STEPS
    obs, _ = env.reset(seed=seed)
    action_seed = ACTION_SEED_OFFSET + seed if policy == "random" else None
    rng = np.random.default_rng(action_seed) if policy == "random" else None
    episode = {
        "seed": seed,
        "policy": policy,
        "action_seed": action_seed,
        "initial_state": f64_list(env.unwrapped.state),
        "initial_observation": f64_list(obs),
        "steps": [],
    }
    for _ in range(CARTPOLE_MAX_STEPS):
        if policy == "random":
            action = int(rng.integers(0, 2))
        elif policy == "balance":
            action = balance_policy(obs)
        else:
            raise ValueError(policy)
        obs, reward, terminated, truncated, _ = env.step(action)
        episode["steps"].append(
            {
                "action": action,
                "observation": f64_list(obs),
                "reward": float(reward),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
                "state": f64_list(env.unwrapped.state),
            }
        )
        if terminated or truncated:
            break
    env.close()
    return episode


def pendulum_action(rng: np.random.Generator, step_index: int) -> np.float32:
    """Uniform torque in [-2, 2] as float32; every 10th step is out of range."""
    if step_index % 10 == 9:
        return PENDULUM_OUT_OF_RANGE[(step_index // 10) % len(PENDULUM_OUT_OF_RANGE)]
    return np.float32(rng.uniform(-2.0, 2.0))


def run_pendulum(seed: int) -> dict:
    env = gym.make("Pendulum-v1")
    assert env.spec is not None and env.spec.max_episode_steps == PENDULUM_MAX_STEPS
    obs, _ = env.reset(seed=seed)
    action_seed = ACTION_SEED_OFFSET + seed
    rng = np.random.default_rng(action_seed)
    episode = {
        "seed": seed,
        "policy": "random_uniform_with_out_of_range_every_10th",
        "action_seed": action_seed,
        "initial_state": f64_list(env.unwrapped.state),
        "initial_observation": f64_list(obs),
        "steps": [],
    }
    for i in range(PENDULUM_MAX_STEPS):
        a = pendulum_action(rng, i)
        obs, reward, terminated, truncated, _ = env.step(np.array([a], dtype=np.float32))
        episode["steps"].append(
            {
                "action": float(a),  # exact float32 value
                "observation": f64_list(obs),
                "reward": float(reward),
                "terminated": bool(terminated),
                "truncated": bool(truncated),
                "state": f64_list(env.unwrapped.state),
            }
        )
        if terminated or truncated:
            break
    env.close()
    return episode


def dump(data: dict) -> str:
    """Serialize with one step per line: readable, diffable and compact."""

    def compact(obj) -> str:
        return json.dumps(obj, separators=(",", ":"), allow_nan=False)

    def episode_text(ep: dict) -> str:
        head = ",\n".join(
            f"      {json.dumps(k)}: {compact(v)}" for k, v in ep.items() if k != "steps"
        )
        steps = ",\n".join(f"        {compact(s)}" for s in ep["steps"])
        return f'    {{\n{head},\n      "steps": [\n{steps}\n      ]\n    }}'

    parts = []
    for key, value in data.items():
        if isinstance(value, list):
            eps = ",\n".join(episode_text(ep) for ep in value)
            parts.append(f"  {json.dumps(key)}: [\n{eps}\n  ]")
        else:
            parts.append(f"  {json.dumps(key)}: {compact(value)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main() -> int:
    cartpole = [
        run_cartpole(0, "random"),
        run_cartpole(1, "random"),
        run_cartpole(2, "balance"),
    ]
    pendulum = [run_pendulum(seed) for seed in SEEDS]

    # Sanity checks on how the episodes ended.
    for ep in cartpole:
        last = ep["steps"][-1]
        if ep["policy"] == "balance":
            assert len(ep["steps"]) == CARTPOLE_MAX_STEPS and last["truncated"], ep["seed"]
            assert not any(s["terminated"] for s in ep["steps"])
        else:
            assert last["terminated"], ep["seed"]
    for ep in pendulum:
        assert len(ep["steps"]) == PENDULUM_MAX_STEPS and ep["steps"][-1]["truncated"]
        assert not any(s["terminated"] for s in ep["steps"])

    data = {
        "gymnasium_version": gym.__version__,
        "numpy_version": np.__version__,
        "cartpole": cartpole,
        "pendulum": pendulum,
    }
    text = dump(data)
    assert json.loads(text) == data  # the custom layout is valid, lossless JSON

    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text, encoding="utf-8")

    print(f"wrote {OUTPUT} ({len(text.encode())} bytes)")
    print(f"gymnasium {gym.__version__}, numpy {np.__version__}")
    for name, eps in (("CartPole-v1", cartpole), ("Pendulum-v1", pendulum)):
        for ep in eps:
            last = ep["steps"][-1]
            end = "terminated" if last["terminated"] else "truncated" if last["truncated"] else "?"
            print(f"  {name} seed={ep['seed']} policy={ep['policy']}: {len(ep['steps'])} steps, {end}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
