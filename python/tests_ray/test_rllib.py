"""``rlpool.gymnasium.make_vec`` as the ``vector_entry_point`` of RLlib's env
runners, driven by the calls RLlib's ``SingleAgentEnvRunner`` makes.

RLlib itself is not installed (its extras and a deep-learning framework
are heavy); these tests repeat what ``SingleAgentEnvRunner.make_env`` and
``_sample`` do in Ray 2.60 (``ray/rllib/env/single_agent_env_runner.py``):

- ``gymnasium.register(name, entry_point=..., vector_entry_point=lambda
  num_envs: creator(env_ctx | {"num_envs": num_envs}))`` for an env
  registered with ``ray.tune.register_env(name, creator)``;
- ``DictInfoToList(gymnasium.make_vec(name, num_envs=N,
  vectorization_mode=VectorizeMode("vector_entry_point")))`` with the
  config's ``gym_env_vectorize_mode="vector_entry_point"``;
- ``num_envs``, ``single_observation_space``, ``single_action_space``,
  ``observation_space``, ``action_space``, ``unwrapped``;
- ``reset(seed=..., options=None)``, then ``action_space.sample()`` and
  ``step(actions)`` in a loop, expecting Gymnasium's NEXT_STEP autoreset
  (the step after an episode's end is the reset: RLlib starts a new
  episode with that observation); ``close()``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from conftest import ON_B, Cluster
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import DictInfoToList

import rlpool.gymnasium


def creator(env_config: dict[str, Any]) -> Any:
    """What a user registers with ``ray.tune.register_env`` (see
    ``docs/scale-out.md``)."""
    return rlpool.gymnasium.make_vec(
        env_config.get("id", "CartPole-v1"), num_envs=env_config.get("num_envs", 1)
    )


def make_env(name: str, env_ctx: dict[str, Any], num_envs: int) -> Any:
    """``SingleAgentEnvRunner.make_env`` for an env registered by name."""
    gym.register(
        name,
        entry_point=lambda: creator(env_ctx),
        vector_entry_point=lambda num_envs: creator(env_ctx | {"num_envs": num_envs}),
    )
    return DictInfoToList(
        gym.make_vec(
            name,
            num_envs=num_envs,
            vectorization_mode=gym.VectorizeMode("vector_entry_point"),
        )
    )


def sample(env: Any, steps: int, seed: int) -> dict[str, Any]:
    """RLlib's sampling loop with random actions; checks NEXT_STEP autoreset
    on every step and returns what it saw."""
    n = env.num_envs
    observations, infos = env.reset(seed=seed, options=None)
    assert observations.shape == (n, *env.single_observation_space.shape)
    assert isinstance(infos, list)
    assert len(infos) == n
    env.action_space.seed(seed)
    ended = np.zeros(n, dtype=bool)
    episodes = 0
    for _ in range(steps):
        actions = env.action_space.sample()
        observations, rewards, terminated, truncated, infos = env.step(actions)
        assert observations.shape == (n, *env.single_observation_space.shape)
        assert rewards.shape == terminated.shape == truncated.shape == (n,)
        assert isinstance(infos, list)
        assert len(infos) == n
        # The step after an episode's end is the reset: reward 0, not done.
        assert np.all(rewards[ended] == 0.0)
        assert not np.any(terminated[ended] | truncated[ended])
        for i in np.flatnonzero(ended):
            assert env.single_observation_space.contains(observations[i])
        ended = terminated | truncated
        episodes += int(ended.sum())
    return {
        "num_envs": n,
        "episodes": episodes,
        "autoreset": env.metadata.get("autoreset_mode"),
        "obs_space": env.single_observation_space,
    }


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1"])
def test_make_vec_as_rllibs_vector_entry_point(env_id: str) -> None:
    env = make_env(f"rlpool-test-{env_id}", {"id": env_id}, num_envs=4)
    try:
        assert env.num_envs == 4
        assert isinstance(env.unwrapped, rlpool.gymnasium.AsyncVectorEnv)
        assert env.observation_space.shape == (4, *env.single_observation_space.shape)
        assert env.action_space.shape == (4,)
        seen = sample(env, steps=300 if env_id == "CartPole-v1" else 50, seed=0)
        assert seen["autoreset"] == AutoresetMode.NEXT_STEP
        if env_id == "CartPole-v1":
            assert seen["episodes"] > 0
    finally:
        env.close()


class EnvRunner:
    """The env-building part of an RLlib env runner, as a Ray actor."""

    def run(self, num_envs: int, steps: int) -> dict[str, Any]:
        env = make_env("rlpool-runner-CartPole-v1", {"id": "CartPole-v1"}, num_envs)
        try:
            return sample(env, steps, seed=1)
        finally:
            env.close()


def test_an_env_runner_actor_on_the_second_node(ray_cluster: Cluster) -> None:
    import ray

    runner = ray.remote(EnvRunner).options(**ON_B, num_cpus=1).remote()
    try:
        seen = ray.get(runner.run.remote(8, 300), timeout=120)
    finally:
        ray.kill(runner)
    assert seen["num_envs"] == 8
    assert seen["autoreset"] == AutoresetMode.NEXT_STEP
    assert seen["episodes"] > 0
