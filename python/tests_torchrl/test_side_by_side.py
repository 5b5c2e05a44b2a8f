"""The same cases on TorchRL's own ``AsyncEnvPool`` and on
:class:`rlpool.torchrl.AsyncEnvPool`: same makers, same seeds, same actions,
and the results must agree (every key TorchRL gives, with its dtype and
values; ``env_index`` too)."""

from __future__ import annotations

import warnings
from functools import partial

import pytest
import torch
from helpers import CONFIGS, config_id
from mocks import CountingEnv
from tensordict import TensorDict
from torchrl.envs import AsyncEnvPool as TorchRLPool
from torchrl.envs import GymEnv

from rlpool.torchrl import AsyncEnvPool

N = 3


def seeded_cartpole(seed: int) -> GymEnv:
    """TorchRL's GymEnv("CartPole-v1"), seeded."""
    env = GymEnv("CartPole-v1")
    env.set_seed(seed)
    return env


MAKERS = {
    "counting": [partial(CountingEnv, max_steps=3, start_val=i) for i in range(N)],
    "cartpole": [partial(seeded_cartpole, seed=i) for i in range(N)],
}


PAIRS = [(makers, config) for makers in MAKERS for config in CONFIGS]


@pytest.fixture(scope="module", params=PAIRS, ids=lambda p: f"{p[0]}-{config_id(p[1])}")
def pools(request):
    """A TorchRL pool and an rlpool pool of the same makers, shared by the
    module's tests (each drives both the same way, so they stay in step;
    TorchRL's default exchange is given explicitly, to keep its warning
    quiet)."""
    name, config = request.param
    makers = MAKERS[name]
    backend, exchange = config["backend"], config["exchange"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        theirs = TorchRLPool(
            makers,
            backend=backend,
            **(
                {"exchange": exchange, "envs_per_worker": config["envs_per_worker"]}
                if backend == "multiprocessing"
                else {}
            ),
        )
    ours = AsyncEnvPool(makers, **config)
    yield theirs, ours
    theirs.close(raise_if_closed=False)
    ours.close(raise_if_closed=False)


def actions(env, steps: int) -> list[TensorDict]:
    """``steps`` random actions for the pool, drawn from a seeded generator.

    Each pool gets its own copy: TorchRL's queue exchange moves a sent
    tensor's storage into shared memory from its queue's feeder thread, so a
    tensor shared with the other pool could be read while it moves."""
    torch.manual_seed(0)
    return [env.full_action_spec.rand() for _ in range(steps)]


def same(theirs, ours) -> None:
    """Every key of TorchRL's result is in ours with the same dtype, shape
    and values; env_index agrees."""
    keys = [k for k in theirs.keys(True, True) if k != "env_index"]
    assert sorted(map(str, keys)) == sorted(
        map(str, [k for k in ours.keys(True, True) if k != "env_index"])
    )
    for key in keys:
        a, b = theirs.get(key), ours.get(key)
        assert a.dtype == b.dtype, key
        assert a.shape == b.shape, key
        torch.testing.assert_close(a, b, msg=lambda m, key=key: f"{key}: {m}")
    if "env_index" in theirs.keys():  # noqa: SIM118
        assert list(theirs["env_index"]) == list(ours["env_index"])


def test_specs_agree(pools):
    theirs, ours = pools
    assert theirs.batch_size == ours.batch_size
    for name in (
        "full_action_spec",
        "full_observation_spec",
        "full_reward_spec",
        "full_done_spec",
        "full_state_spec",
    ):
        assert getattr(theirs, name) == getattr(ours, name), name


def test_reset_and_steps_agree(pools):
    theirs, ours = pools
    same(theirs.reset(), ours.reset())
    for action in actions(theirs, 6):
        a, b = theirs.reset(), ours.reset()
        a.update(action)
        b.update(action.clone())
        same(theirs.step(a), ours.step(b))


def test_step_and_maybe_reset_agrees(pools):
    theirs, ours = pools
    a, b = theirs.reset(), ours.reset()
    for action in actions(theirs, 8):
        a.update(action)
        b.update(action.clone())
        out_a, a = theirs.step_and_maybe_reset(a)
        out_b, b = ours.step_and_maybe_reset(b)
        same(out_a, out_b)
        same(a, b)


def test_async_per_env_agrees(pools):
    theirs, ours = pools
    for pool in (theirs, ours):
        pool.async_reset_send(env_index=1)
    same(
        theirs.async_reset_recv(env_index=1).unsqueeze(0),
        ours.async_reset_recv(env_index=1).unsqueeze(0),
    )


def test_async_full_batch_agrees(pools):
    theirs, ours = pools
    a, b = theirs.reset(), ours.reset()
    for action in actions(theirs, 4):
        a.update(action)
        b.update(action.clone())
        theirs.async_step_send(a)
        ours.async_step_send(b)
        out_a = theirs.async_step_recv(min_get=N)
        out_b = ours.async_step_recv(min_get=N)
        # Each pool's result carries the action it was sent.
        assert torch.equal(out_b["action"], action["action"]), "rlpool's"
        assert torch.equal(out_a["action"], action["action"]), "TorchRL's"
        same(out_a, out_b)
        a, b = theirs.step_mdp(out_a), ours.step_mdp(out_b)


def test_rollouts_agree(pools):
    theirs, ours = pools
    torch.manual_seed(1)
    fixed = actions(theirs, 1)[0]

    def policy(td):
        return td.update(fixed.clone())

    a = theirs.rollout(5, policy, break_when_any_done=False)
    b = ours.rollout(5, policy, break_when_any_done=False)
    same(a.exclude("env_index"), b.exclude("env_index"))
