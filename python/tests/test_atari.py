"""Atari through ale-py (its wheel carries the ROMs): Pong in rlpool's
worker processes, step for step equal to the same envs in Gymnasium's own
vector env (observations, rewards, flags and infos), through shared
memory."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlpool.gymnasium import AsyncVectorEnv

pytestmark = pytest.mark.timeout(120)

ale_py = pytest.importorskip("ale_py")


def pong() -> Any:
    gym.register_envs(ale_py)
    return gym.make("ALE/Pong-v5", obs_type="grayscale", frameskip=4)


def test_pong_equals_gymnasium_step_for_step():
    reference = gym.vector.SyncVectorEnv([pong] * 2)
    envs = AsyncVectorEnv([pong] * 2, envs_per_worker=1, exchange="shm")
    try:
        assert envs.pool.resolved_exchange == "shm"
        assert envs.single_observation_space == reference.single_observation_space
        want, want_info = reference.reset(seed=[3, 4])
        got, got_info = envs.reset(seed=[3, 4])
        np.testing.assert_array_equal(got, want)
        assert got.shape == (2, 210, 160)
        assert sorted(got_info) == sorted(want_info)
        rng = np.random.default_rng(0)
        for _ in range(40):
            actions = rng.integers(0, 6, size=2)
            expected = reference.step(actions)
            result = envs.step(actions)
            for mine, theirs in zip(result[:4], expected[:4]):
                np.testing.assert_array_equal(mine, theirs)
                assert mine.dtype == theirs.dtype
            for key, value in expected[4].items():
                np.testing.assert_array_equal(result[4][key], value, err_msg=key)
    finally:
        envs.close()
        reference.close()
