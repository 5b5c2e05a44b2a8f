"""What ``env_makers`` may be: TorchRL envs (instances, their classes, any
callable returning one, GymEnv), callables returning Gymnasium envs, and
registered rlpool names; results share memory with the pool's arrays, and
carry what was sent with them."""

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


def test_next_root_keeps_the_sent_entries(make_pool, config):
    """step_and_maybe_reset's next root carries the sent entries the envs
    do not give (the action, the caller's own, nested ones too), as
    TorchRL's step_mdp keeps them; a nested one is the next root's own
    TensorDict (sharing the tensors), so setting into it leaves the result."""
    env = make_pool([CountingEnv] * 2, **config)
    root = env.reset()
    root.set("action", torch.ones((2, 1)))
    root.set(("policy", "hidden"), torch.tensor([[3.0], [4.0]]))
    out, following = env.step_and_maybe_reset(root)
    assert following["action"].reshape(-1).tolist() == [1, 1]
    assert following["policy", "hidden"].reshape(-1).tolist() == [3.0, 4.0]
    assert list(following["env_index"]) == [0, 1]
    following.set(("policy", "other"), torch.zeros((2, 1)))
    assert ("policy", "other") not in out.keys(True)
    assert following["observation"].reshape(-1).tolist() == [1, 1]


def test_a_received_batch_sends_back_to_its_envs(make_pool, config):
    """A batch received from some envs, sent back as it is (its env_index
    names the envs), steps those envs and no other."""
    env = make_pool([CountingEnv] * 4, **config)
    env.async_reset_send(env_index=[1, 3])
    got = env.async_reset_recv(min_get=2)
    assert list(got["env_index"]) == [1, 3]
    got.set("action", torch.ones((2, 1)))
    env.async_step_send(got)
    out = env.async_step_recv(min_get=2)
    assert list(out["env_index"]) == [1, 3]
    assert out["next", "observation"].reshape(-1).tolist() == [1, 1]


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
