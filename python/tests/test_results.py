"""What the pool says about itself and what its results hold: shapes and
dtypes, the pool's description, the stacking modes (dense, maybe_dense,
lazy), ``step_and_maybe_reset``, heterogeneous envs, the sent root kept in
step results, and a batch that cannot be built. Ported from the Rust
conformance suite, on every configuration."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    PATIENCE,
    STACKS,
    STARTS,
    action,
    actions,
    attempt,
    children,
    counting_kwargs,
    envs_of,
    item,
    recv_all,
    rows,
)

import rlpool
from rlpool import LazyStackedTensorDict, TensorDict

pytestmark = pytest.mark.timeout(60)

STAT_KEYS = {
    "batches",
    "items",
    "avg_batch_size",
    "batch_fill_ratio",
    "partial_batch_fraction",
    "avg_observation_to_batch_ms",
    "avg_batch_to_action_ms",
    "consumer_busy_fraction",
}


@pytest.mark.parametrize("stack", STACKS)
def test_description_shapes_and_dtypes(make_pool, config, stack):
    """The pool's batch size is ``(num_envs,)``; it describes its backend,
    stacking and exchange; CartPole's reset and step results have the
    stacked shapes and dtypes (lazily stacked with ``stack="lazy"``)."""
    n = 4
    pool = make_pool(["CartPole-v1"] * n, stack=stack, create_env_kwargs={"seed": 3})
    assert pool.num_envs == len(pool) == n
    assert pool.batch_size == (n,)
    assert pool.env_batch_sizes == [()] * n
    assert pool.env_names == ["CartPole-v1"] * n
    assert pool.backend == config.backend
    assert pool.stack == stack
    assert pool.resolved_exchange == (config.name if config.procs else "queue")
    assert pool.exchange_reason is None
    assert not pool.is_closed
    assert f"num_envs={n}" in repr(pool)
    pids = pool.worker_pids
    if config.procs:
        assert len(set(pids)) == n // 2, "two envs per worker process"
        assert set(pids) <= children(), "the workers are this process's children"
    else:
        assert pids == []

    root = pool.reset()
    assert isinstance(root, LazyStackedTensorDict if stack == "lazy" else TensorDict)
    assert root.batch_size == (n,)
    assert envs_of(root) == list(range(n))
    out = pool.step(actions([0, 1, 1, 0]))
    assert out.batch_size == (n,)
    assert envs_of(out) == list(range(n))
    expected = {
        ("next", "observation"): ((4,), np.float32),
        ("next", "reward"): ((1,), np.float32),
        ("next", "done"): ((1,), np.bool_),
        ("next", "terminated"): ((1,), np.bool_),
        ("next", "truncated"): ((1,), np.bool_),
        "action": ((1,), np.int64),
    }
    for key, (shape, dtype) in expected.items():
        if isinstance(out, TensorDict):
            assert out[key].shape == (n, *shape), key
            assert out[key].dtype == dtype, key
        for part in rows(out):
            assert part[key].shape == shape, key
            assert part[key].dtype == dtype, key
    for key in ("observation", "done", "terminated", "truncated"):
        assert all(key in part for part in rows(root)), key
    keys = out.keys(include_nested=True, leaves_only=True)
    assert ("next", "observation") in keys, keys
    assert "action" in keys, keys


def test_maybe_dense_of_identical_envs_is_dense(make_pool):
    """``stack="maybe_dense"`` of identical envs gives dense batches."""
    pool = make_pool(["CartPole-v1"] * 2, stack="maybe_dense")
    assert isinstance(pool.reset(), TensorDict)
    assert isinstance(pool.step(actions([0, 1])), TensorDict)


@pytest.mark.parametrize("stack", STACKS)
def test_step_and_maybe_reset_resets_done_envs(make_pool, stack):
    """``step_and_maybe_reset`` returns the step results and the next roots,
    reset exactly where the env was done (CountingEnvs with different start
    values reach their end at different steps): synchronously, and
    asynchronously with a batch receive and a per-env one."""
    n, max_steps = 4, 3
    starts = list(range(n))
    pool = make_pool(
        ["CountingEnv"] * n, stack=stack, create_env_kwargs=counting_kwargs(starts, max_steps)
    )
    pool.reset()
    counts = list(starts)

    def advance(env, step, root):
        nxt = counts[env] + 1
        done = nxt > max_steps
        assert item(step, ("next", "observation")) == nxt, f"env {env}"
        assert item(step, ("next", "done")) is done, f"env {env}"
        assert item(step, "action") == 1
        counts[env] = starts[env] if done else nxt
        assert item(root, "observation") == counts[env], f"env {env}: reset iff done"
        assert item(root, "done") is False, "a next root is never done"
        assert item(root, "env_index") == env
        return done

    resets = 0
    for _ in range(6):
        step, root = pool.step_and_maybe_reset(actions([1] * n))
        envs = envs_of(step)
        assert envs == envs_of(root) == list(range(n))
        for s, r, env in zip(rows(step), rows(root), envs):
            resets += advance(env, s, r)
    assert resets >= n, "every env was reset at least once"

    for _ in range(4):
        td = actions([1, 1])
        td["env_index"] = np.array([3, 1])
        pool.async_step_and_maybe_reset_send(td)
        step, root = recv_all(pool, 2, "step_and_maybe_reset")
        assert envs_of(step) == envs_of(root) == [1, 3]
        for s, r, env in zip(rows(step), rows(root), [1, 3]):
            advance(env, s, r)
        pool.async_step_and_maybe_reset_send(action(1), env_index=0)
        s, r = pool.async_step_and_maybe_reset_recv(env_index=0, timeout=PATIENCE)
        assert isinstance(s, TensorDict)
        assert isinstance(r, TensorDict)
        assert item(s, "env_index") == 0
        advance(0, s, r)


@pytest.mark.parametrize("stack", ["lazy", "maybe_dense"])
def test_heterogeneous_envs_stack_lazily(make_pool, config, stack):
    """CartPole next to Pendulum (other observation and action shapes and
    dtypes): with lazy and maybe-dense stacking the pool builds (on shm
    ``exchange="auto"`` falls back to the queue, saying why), and its
    batches keep each env's own result."""
    pool = make_pool(["CartPole-v1", "Pendulum-v1"], stack=stack, exchange="auto")
    assert pool.batch_size == (2,)
    if config.procs:
        assert pool.resolved_exchange == "queue"
        assert "env 1" in (pool.exchange_reason or "")
    root = pool.reset()
    assert isinstance(root, LazyStackedTensorDict), "observations of two shapes"
    assert envs_of(root) == [0, 1]
    assert root[0]["observation"].shape == (4,)
    assert root[1]["observation"].shape == (3,)
    assert root.batch_size == (2,)

    # One send per env: their actions have different dtypes.
    pool.async_step_send(actions([1]), env_index=[0])
    torque = TensorDict({"action": np.array([[0.5]], dtype=np.float32)}, batch_size=(1,))
    pool.async_step_send(torque, env_index=[1])
    batch = recv_all(pool, 2)
    assert isinstance(batch, LazyStackedTensorDict)
    assert envs_of(batch) == [0, 1]
    cart, pendulum = batch[0], batch[1]
    assert cart["next", "observation"].shape == (4,)
    assert pendulum["next", "observation"].shape == (3,)
    assert cart["action"].dtype == np.int64
    assert pendulum["action"].dtype == np.float32
    assert [r.shape for r in batch["next", "reward"]] == [(1,), (1,)]
    assert ("next", "reward") in batch.keys(include_nested=True, leaves_only=True)

    torque = TensorDict({"action": np.array([-0.5], dtype=np.float32)})
    pool.async_step_and_maybe_reset_send(torque, env_index=1)
    step, root = pool.async_step_and_maybe_reset_recv(env_index=1, timeout=PATIENCE)
    assert step["next", "observation"].shape == (3,)
    assert root["observation"].shape == (3,)


def test_heterogeneous_envs_are_a_start_error_when_dense(make_pool):
    """With dense stacking, envs whose specs differ cannot start: a
    ``StartError`` naming the key and the env."""
    with pytest.raises(rlpool.StartError) as info:
        make_pool(["CartPole-v1", "Pendulum-v1"], stack="dense", exchange="auto")
    text = str(info.value)
    assert "env 1" in text, text
    assert '"action"' in text or '"observation"' in text, text


@pytest.mark.parametrize("stack", STACKS)
def test_step_results_keep_the_sent_root(make_pool, stack):
    """TorchRL's layout: a step result holds the sent root entries (the
    reset observation and the action) and the env's result under
    ``"next"``; a reset may be given a tensordict (of state entries, none
    here)."""
    starts = [10, 20, 30]
    pool = make_pool(["CountingEnv"] * 3, stack=stack, create_env_kwargs=counting_kwargs(starts))
    root = pool.reset(TensorDict({}, batch_size=(3,)))
    obs = np.stack([part["observation"] for part in rows(root)])
    td = TensorDict({"observation": obs}, batch_size=(3,))
    td["action"] = np.array([[1], [2], [3]], dtype=np.int64)
    out = pool.step(td)
    for env, row in enumerate(rows(out)):
        assert item(row, "observation") == starts[env], "the root is kept"
        assert item(row, "action") == env + 1
        assert item(row, ("next", "observation")) == starts[env] + env + 1
        assert ("next", "reward") in row
    pool.async_reset_send(TensorDict({}), env_index=1)
    one = pool.async_reset_recv(env_index=1, timeout=PATIENCE)
    assert item(one, "observation") == 20
    assert item(one, "env_index") == 1


def test_a_batch_that_cannot_be_built_loses_nothing(counters):
    """A batch receive that fails while building its batch (dense stacking
    of rows from two sends whose tensordicts have different keys) loses no
    result: each can still be received."""
    pool = counters
    pool.async_step_send(actions([1]), env_index=[0])
    tagged = actions([2])
    tagged["tag"] = np.array([7.0], dtype=np.float32)
    pool.async_step_send(tagged, env_index=[1])
    batch, err = attempt(recv_all, pool, 2)
    if err is None:
        assert envs_of(batch) == [0, 1]
    else:
        assert pool.in_flight() == [0, 1], f"after {err}: results lost"
        for env, inc in ((0, 1), (1, 2)):
            out = pool.async_step_recv(env_index=env, timeout=PATIENCE)
            assert item(out, ("next", "observation")) == STARTS[env] + inc


def test_stats(make_pool, config):
    """Only the shared-memory exchange keeps statistics (TorchRL's names);
    threads and the queue keep none."""
    pool = make_pool(["CountingEnv"] * 2)
    pool.step(actions([1, 1]))
    if config.name == "shm":
        stats = pool.stats()
        assert stats is not None
        assert set(stats) == STAT_KEYS
        assert all(isinstance(v, (int, float)) for v in stats.values())
        assert pool.stats(reset=True) is not None
        assert pool.stats()["batches"] == 0
    else:
        assert pool.stats() is None
        assert pool.stats(reset=True) is None


def test_results_are_tensordicts(counters):
    """A dense result is a ``TensorDict``: nested keys as tuples, ``items``
    and ``to_dict`` give the same arrays, ``"env_index"`` is an int64
    array, and indexing a row gives that env's entries."""
    pool = counters
    out = pool.step(actions([1] * 4))
    assert isinstance(out, TensorDict)
    keys = out.keys(include_nested=True, leaves_only=True)
    for key in (
        "action",
        "env_index",
        ("next", "observation"),
        ("next", "reward"),
        ("next", "done"),
        ("next", "terminated"),
        ("next", "truncated"),
    ):
        assert key in keys, key
    assert "next" in out
    for key, value in out.items(include_nested=True, leaves_only=True):
        assert isinstance(value, np.ndarray), key
        assert value.shape[:1] == (4,), key
    tree = out.to_dict()
    assert tree["next"]["observation"] is out["next", "observation"]
    assert out["env_index"].dtype == np.int64
    assert out["env_index"].tolist() == [0, 1, 2, 3]
    row = out[1]
    assert row.batch_size == ()
    assert item(row, ("next", "observation")) == STARTS[1] + 1
