"""TorchRL's own tests of ``AsyncEnvPool``, ported in our words.

Source: pytorch/rl, ``test/envs/test_special.py``, class ``TestAsyncEnvPool``
(every test of it, in its order). Each runs against
:class:`rlpool.torchrl.AsyncEnvPool` on threads and on processes with each
exchange (TorchRL runs the ``shared_memory`` ones on processes with shm
only: here they run on every configuration where they mean something). Where
our behaviour differs on purpose, the test says so and checks ours.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from mocks import CountingEnv, DelayedCountingEnv
from tensordict import (
    LazyStackedTensorDict,
    NonTensorStack,
    TensorDict,
    assert_allclose_td,
    set_capture_non_tensor_stack,
)
from torchrl.envs import StepCounter, TransformedEnv
from torchrl.envs.utils import check_env_specs

COUNTERS = [partial(CountingEnv)] * 4


def test_specs(make_pool, config):
    """The pool's batch size is its number of envs; reset and a random step
    have that shape; TorchRL's check_env_specs passes, stopping and not
    stopping at done."""
    env = make_pool(COUNTERS, **config)
    assert env.batch_size == (4,)
    root = env.reset()
    assert root.shape == env.shape
    out = env.rand_step(root)
    assert out.shape == env.shape
    env.check_env_specs(break_when_any_done="both")
    check_env_specs(env, break_when_any_done="both")


@pytest.mark.parametrize("min_get", [None, 1, 2])
@set_capture_non_tensor_stack(False)
def test_async_reset_and_step(make_pool, config, min_get):
    """A reset sent to every env by an ``env_index`` NonTensorStack, then a
    step of what came back: each receive has at least ``min_get`` results
    and carries ``env_index``."""
    env = make_pool(COUNTERS, **config)
    env.async_reset_send(
        TensorDict(
            {env._env_idx_key: NonTensorStack(*range(env.batch_size.numel()))},
            batch_size=env.batch_size,
        )
    )
    root = env.async_reset_recv(min_get=min_get)
    assert root.numel() >= (min_get or 1)
    assert env._env_idx_key in root
    root.set("action", torch.ones((*root.shape, 1)))
    env.async_step_send(root)
    out = env.async_step_recv(min_get=min_get)
    assert out.numel() >= (min_get or 1)
    assert env._env_idx_key in out


def test_async_transformed(make_pool, config):
    """The pool inside a TransformedEnv (StepCounter) passes
    check_env_specs."""
    env = TransformedEnv(make_pool(COUNTERS, **config), StepCounter())
    env.check_env_specs(break_when_any_done="both")


@set_capture_non_tensor_stack(False)
def test_shared_memory_exchange(make_pool, proc_config):
    """step_and_maybe_reset then a full async step; with shm the pool keeps
    statistics (TorchRL's names) and the consumer was busy some of the
    time. (TorchRL also checks its own input buffer is shared memory: ours
    are memfd slots inside the Rust pool, checked by the Rust suite.)"""
    env = make_pool(COUNTERS, **proc_config)
    assert env.resolved_exchange == proc_config["exchange"]
    root = env.reset()
    root.set("action", torch.ones((*root.shape, 1)))
    out, next_root = env.step_and_maybe_reset(root)
    assert out.shape == env.shape
    assert next_root.shape == env.shape
    assert env._env_idx_key in out
    assert env._env_idx_key in next_root
    next_root.set("action", torch.ones((*next_root.shape, 1)))
    env.async_step_send(next_root)
    env.async_step_recv(min_get=env.num_envs)
    stats = env.stats()
    if proc_config["exchange"] == "shm":
        assert stats["avg_batch_to_action_ms"] >= 0
        assert stats["consumer_busy_fraction"] > 0
        assert env.exchange_keys == ("action",)
    else:
        assert stats == {}
        assert env.exchange_keys == ()


@set_capture_non_tensor_stack(False)
def test_shared_memory_full_batch_preserves_env_order(make_pool, config):
    """Envs that finish in reverse order still come back sorted by env."""
    makers = [
        partial(DelayedCountingEnv, delay=(3 - i) * 0.05, max_steps=100, start_val=i)
        for i in range(4)
    ]
    env = make_pool(makers, **config)
    root = env.reset()
    expected = torch.arange(4, dtype=torch.int32)
    torch.testing.assert_close(root["observation"].squeeze(-1), expected)
    root.set("action", torch.ones((*root.shape, 1)))
    out = env.step(root)
    torch.testing.assert_close(out["next", "observation"].squeeze(-1), expected + 1)


@set_capture_non_tensor_stack(False)
def test_shared_memory_per_env_result_owns_storage(make_pool, config):
    """A per-env result (``env_index=0``) keeps its values after the env
    steps again."""
    env = make_pool(COUNTERS, **config)
    env.async_reset_send(env_index=0)
    root = env.async_reset_recv(env_index=0)
    root.set("action", torch.ones((*root.shape, 1)))
    env.async_step_and_maybe_reset_send(root, env_index=0)
    out, next_root = env.async_step_and_maybe_reset_recv(env_index=0)
    out_before = out.clone()
    next_root.set("action", torch.ones((*next_root.shape, 1)))
    next_before = next_root.clone()
    env.async_step_and_maybe_reset_send(next_root, env_index=0)
    env.async_step_and_maybe_reset_recv(env_index=0)
    assert_allclose_td(out, out_before)
    assert_allclose_td(next_root, next_before)


@set_capture_non_tensor_stack(False)
def test_shared_memory_lazy_result_lifetime(make_pool, config):
    """A lazy batch kept across the next step.

    TorchRL's lazy shm results are views of its slots: its test checks that
    they *change* when the envs step again. rlpool's results are the
    caller's own (the pool never writes an array it handed out), so here the
    kept batch keeps its values: the difference is on purpose (see
    docs/migrating-from-torchrl.md)."""
    env = make_pool(COUNTERS, **config, stack="lazy")
    root = env.reset()
    root.set("action", torch.ones((*root.shape, 1)))
    env.async_step_and_maybe_reset_send(root)
    out, next_root = env.async_step_and_maybe_reset_recv(min_get=env.num_envs)
    assert isinstance(out, LazyStackedTensorDict)
    before = out.clone()
    next_root.set("action", torch.ones((*next_root.shape, 1)))
    env.async_step_and_maybe_reset_send(next_root)
    again, _ = env.async_step_and_maybe_reset_recv(min_get=env.num_envs)
    assert torch.equal(out["observation"], before["observation"])
    assert not torch.equal(again["next", "observation"], out["next", "observation"])


@set_capture_non_tensor_stack(False)
def test_shared_memory_deadline_batching(make_pool, proc_config):
    """A first receive of at most 4, then one of the rest; with shm the pool
    keeps TorchRL's statistics, which ``stats(reset=True)`` clears.

    TorchRL's test polls (``timeout=0``) right after the send and expects
    exactly one result, which depends on timing; here the first receive
    waits for one and takes the ``k`` ready (1 to 4), and the expected
    statistics follow from ``k``."""
    env = make_pool(COUNTERS, **proc_config)
    env.async_reset_send(env_index=list(range(env.num_envs)))
    first = env.async_reset_recv(min_get=1, max_get=4, timeout=30.0)
    k = first.shape[0]
    assert 1 <= k <= 4
    if k < 4:
        rest = env.async_reset_recv(min_get=4 - k, max_get=4 - k, timeout=30.0)
        assert rest.shape[0] == 4 - k
    if proc_config["exchange"] != "shm":
        assert env.stats() == {}
        return
    batches = 1 if k == 4 else 2
    stats = env.stats(reset=True)
    assert stats["batches"] == batches
    assert stats["items"] == 4
    assert stats["avg_batch_size"] == 4 / batches
    assert stats["batch_fill_ratio"] == pytest.approx(4 / (4 + (4 - k if k < 4 else 0)))
    assert stats["partial_batch_fraction"] == (0.0 if k == 4 else 0.5)
    assert stats["avg_observation_to_batch_ms"] >= 0
    assert stats["consumer_busy_fraction"] >= 0
    assert env.stats()["batches"] == 0


def test_deadline_batching(make_pool, config):
    """``max_get`` caps a batch; the rest come with the next receive."""
    env = make_pool(COUNTERS, **config)
    env.async_reset_send(env_index=list(range(env.num_envs)))
    first = env.async_reset_recv(min_get=1, max_get=1, timeout=5.0)
    rest = env.async_reset_recv(min_get=3, max_get=3, timeout=5.0)
    assert first.shape[0] == 1
    assert rest.shape[0] == 3


def test_deadline_batch_validation(make_pool, config):
    """``max_get < min_get`` is a ValueError naming max_get."""
    env = make_pool(COUNTERS, **config)
    env.async_reset_send(env_index=list(range(env.num_envs)))
    with pytest.raises(ValueError, match="max_get"):
        env.async_reset_recv(min_get=2, max_get=1)
