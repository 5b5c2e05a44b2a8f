"""What ``env_makers`` may be: TorchRL envs (instances, their classes, any
callable returning one, GymEnv), callables returning Gymnasium envs, and
registered rlpool names; results share memory with the pool's arrays."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from mocks import CountingEnv
from tensordict import LazyStackedTensorDict, TensorDict
from torchrl.envs import GymEnv
from torchrl.envs.utils import check_env_specs

import rlpool


def cartpole():
    return GymEnv("CartPole-v1")


@pytest.mark.parametrize(
    "makers",
    [
        [cartpole] * 2,
        [CountingEnv, CountingEnv],
        ["CartPole-v1"] * 2,
        [lambda: gym.make("CartPole-v1")] * 2,
    ],
    ids=["GymEnv", "EnvBase-class", "rlpool-name", "gymnasium"],
)
def test_makers_run_and_pass_check_env_specs(make_pool, config, makers):
    env = make_pool(makers, **config)
    root = env.reset()
    assert isinstance(root, TensorDict)
    assert list(root["env_index"]) == [0, 1]
    check_env_specs(env, break_when_any_done="both")
    rollout = env.rollout(4, break_when_any_done=False)
    assert rollout.batch_size == (2, 4)


def test_env_instances_as_makers(make_pool, proc_config):
    """An EnvBase instance: used as is with threads, pickled to the worker
    with processes."""
    env = make_pool([CountingEnv(start_val=3), CountingEnv(start_val=5)], **proc_config)
    assert env.reset()["observation"].reshape(-1).tolist() == [3, 5]
    threads = make_pool([CountingEnv(start_val=2)], backend="threading")
    assert threads.reset()["observation"].reshape(-1).tolist() == [2]


def test_create_env_kwargs(make_pool, config):
    env = make_pool(
        [CountingEnv] * 2,
        create_env_kwargs=[{"start_val": 1, "max_steps": 9}, {"start_val": 7, "max_steps": 9}],
        **config,
    )
    assert env.reset()["observation"].reshape(-1).tolist() == [1, 7]


def test_results_share_the_pools_arrays(make_pool, config, monkeypatch):
    """The tensors of a result are the arrays the pool handed out, taken by
    torch.from_numpy (same memory, no copy)."""
    env = make_pool([CountingEnv] * 2, **config)
    seen = {}
    convert = env._to_torch

    def spying(batch, per_env=None):
        if isinstance(batch, rlpool.TensorDict):
            seen["observation"] = batch["observation"]
        return convert(batch, per_env)

    monkeypatch.setattr(env, "_to_torch", spying)
    root = env.reset()
    array = seen["observation"]
    tensor = root["observation"]
    assert tensor.data_ptr() == array.ctypes.data
    tensor += 1
    assert np.array_equal(array, tensor.numpy())


def test_lazy_stacks(make_pool, config):
    env = make_pool([CountingEnv] * 2, stack="lazy", **config)
    root = env.reset()
    assert isinstance(root, LazyStackedTensorDict)
    root.set("action", torch.ones((2, 1)))
    out = env.step(root)
    assert isinstance(out, LazyStackedTensorDict)
    assert out["next", "observation"].reshape(-1).tolist() == [1, 1]


def test_registered_names_with_shared_memory(make_pool):
    """Registered rlpool envs (Rust) take the shm exchange; their specs are
    rlpool's converted (an int64 categorical action)."""
    env = make_pool(["CartPole-v1"] * 2, backend="multiprocessing", exchange="shm")
    assert env.resolved_exchange == "shm"
    assert env.full_action_spec["action"].dtype == torch.int64
