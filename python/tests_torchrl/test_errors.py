"""rlpool.torchrl's errors: rlpool's own (``rlpool.errors``), each also the
built-in a TorchRL user catches, with a message that names the argument,
env, key or worker."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from mocks import BatchedEnv, BrokenEnv, CountingEnv, DelayedCountingEnv

import rlpool
from rlpool.torchrl import AsyncEnvPool

COUNTERS = [partial(CountingEnv)] * 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"backend": "asyncio"}, "backend"),
        ({"stack": "tree"}, "stack"),
        ({"exchange": "pipes"}, "exchange"),
        ({"exchange": "shm"}, "only supported with backend='multiprocessing'"),
        ({"envs_per_worker": 0}, "envs_per_worker"),
        ({"envs_per_worker": 2}, "envs_per_worker is only supported"),
        ({"create_env_kwargs": [{}, {}, {}]}, "length 2"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(rlpool.InvalidArgument, match=match) as caught:
        AsyncEnvPool(COUNTERS, **kwargs)
    assert isinstance(caught.value, ValueError)


def test_a_maker_of_the_wrong_type():
    with pytest.raises(rlpool.InvalidType, match=r"env_makers\[1\] is int") as caught:
        AsyncEnvPool([partial(CountingEnv), 3])
    assert isinstance(caught.value, TypeError)


def test_a_torchrl_env_the_pool_cannot_hold(config):
    """A batched TorchRL env is refused at start, naming the env."""
    with pytest.raises(rlpool.StartError, match=r"env 1 \(BatchedEnv\) has batch size \(2,\)"):
        AsyncEnvPool([partial(CountingEnv), BatchedEnv], **config)


def test_an_env_that_fails(make_pool, config):
    """A TorchRL env's exception reaches the caller as EnvFailed naming the
    env, with its message."""
    env = make_pool([partial(CountingEnv), partial(BrokenEnv)], **config)
    root = env.reset()
    root.set("action", torch.ones((*root.shape, 1)))
    with pytest.raises(rlpool.EnvFailed, match="this env cannot step") as caught:
        env.step(root)
    assert caught.value.env == 1


def test_busy(make_pool):
    """A send to an env in flight is Busy (a RuntimeError, as TorchRL's),
    naming the env."""
    env = make_pool(COUNTERS, backend="threading")
    env.async_reset_send(env_index=[0, 1])
    with pytest.raises(rlpool.Busy, match="0") as caught:
        env.async_reset_send(env_index=[0])
    assert isinstance(caught.value, RuntimeError)
    assert caught.value.envs == [0]
    env.async_reset_recv(min_get=2)


def test_a_receive_that_times_out(make_pool):
    """A result not ready by the deadline: Timeout (a TimeoutError, naming
    the deadline), and the result stays for the next receive."""
    env = make_pool([partial(DelayedCountingEnv, delay=1.0)], backend="threading")
    env.async_reset_send(env_index=[0])
    with pytest.raises(rlpool.Timeout) as caught:
        env.async_reset_recv(min_get=1, timeout=0.05)
    assert isinstance(caught.value, TimeoutError)
    assert list(env.async_reset_recv(min_get=1, timeout=30.0)["env_index"]) == [0]


def test_min_get_above_what_is_in_flight(make_pool):
    env = make_pool([partial(CountingEnv)], backend="threading")
    with pytest.raises(rlpool.InvalidArgument, match="only 0 envs are in flight"):
        env.async_step_recv(min_get=1, timeout=0.0)


def test_closed_pool(make_pool):
    env = make_pool(COUNTERS, backend="threading")
    env.close()
    env.close(raise_if_closed=False)
    with pytest.raises(rlpool.ShutDown):
        env.reset()
