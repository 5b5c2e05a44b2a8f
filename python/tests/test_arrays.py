"""The arrays of results: numpy arrays over memory the result owns
(``arr.base`` is set, two reads share memory), writable, never
aliased by another result, and unchanged by later calls, by writes into
other results, and by the pool's shutdown. On every configuration and
stacking mode."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from helpers import (
    PATIENCE,
    STACKS,
    action,
    actions,
    counts_of,
    item,
    recv_all,
    rows,
)

from rlpool import LazyStackedTensorDict, TensorDict

pytestmark = pytest.mark.timeout(60)


def leaves(result):
    """``(key, array)`` of every leaf of a result: a dense batch's own
    arrays, or each part's of a lazy one."""
    if isinstance(result, LazyStackedTensorDict):
        return [
            ((i, key), part[key])
            for i, part in enumerate(result.tensordicts)
            for key in part.keys(include_nested=True, leaves_only=True)
        ]
    assert isinstance(result, TensorDict)
    return [(key, result[key]) for key in result.keys(include_nested=True, leaves_only=True)]


def is_next(key):
    key = key[1] if isinstance(key, tuple) and isinstance(key[0], int) else key
    return isinstance(key, tuple) and key[0] == "next"


def snapshot(result):
    """Copies of every leaf, taken now."""
    return {key: np.array(array, copy=True) for key, array in leaves(result)}


def assert_unchanged(result, copies, what):
    now = dict(leaves(result))
    assert set(now) == set(copies), what
    for key, copy in copies.items():
        assert np.array_equal(now[key], copy), f"{what}: {key!r} changed"


@pytest.mark.parametrize("stack", STACKS)
def test_results_are_writable_views(make_pool, stack):
    """A result's arrays are numpy arrays over the result's own memory (a
    base; reading an entry twice gives views of the same memory), and
    writable; no array of one result shares memory with another result's."""
    pool = make_pool(["CountingEnv"] * 3, stack=stack, create_env_kwargs={"max_steps": 1000})
    root = pool.reset()
    first = pool.step(actions([1, 1, 1]))
    second = pool.step(actions([1, 1, 1]))
    pool.async_step_send(action(1), env_index=1)
    single = pool.async_step_recv(env_index=1, timeout=PATIENCE)
    results = [root, first, second, single]
    for result in results:
        found = leaves(result)
        assert found
        for key, array in found:
            assert isinstance(array, np.ndarray), key
            assert array.flags.writeable, f"{key!r} is read-only"
            if is_next(key) or key == "observation":
                assert array.base is not None, f"{key!r} is a copy, not a view"
    for result in (first, second):
        if isinstance(result, TensorDict):
            a = result["next", "observation"]
            b = result["next", "observation"]
            assert np.shares_memory(a, b)
            assert np.shares_memory(a, result.to_dict()["next"]["observation"])
            assert np.shares_memory(a[1], result[1]["next", "observation"])
    for i, one in enumerate(results):
        for other in results[i + 1 :]:
            for key, a in leaves(one):
                for other_key, b in leaves(other):
                    assert not np.shares_memory(a, b), f"{key!r} aliases {other_key!r}"


@pytest.mark.parametrize("stack", STACKS)
def test_held_results_are_never_overwritten(make_pool, stack):
    """A result the caller keeps is never changed by later calls: batches,
    per-env results, step-and-maybe-reset roots and reset roots keep their
    values while their envs step ten more times."""
    pool = make_pool(["CountingEnv"] * 2, stack=stack, create_env_kwargs={"max_steps": 1000})
    root = pool.reset()
    first = pool.step(actions([1, 1]))
    pool.async_step_send(action(1), env_index=0)
    single = pool.async_step_recv(env_index=0, timeout=PATIENCE)
    step, next_root = pool.step_and_maybe_reset(actions([1, 1]))
    pool.async_step_send(actions([2, 2]))
    partial = recv_all(pool, 2)
    kept = [root, first, single, step, next_root, partial]
    copies = [snapshot(result) for result in kept]
    for _ in range(10):
        pool.step(actions([5, 5]))
        pool.step_and_maybe_reset(actions([5, 5]))
        pool.async_reset_send(env_index=[1])
        recv_all(pool, 1, "reset")
    for i, (result, copy) in enumerate(zip(kept, copies)):
        assert_unchanged(result, copy, f"result {i}")
    assert counts_of(first) == [1, 1]
    assert item(single, ("next", "observation")) == 2
    assert counts_of(step) == [3, 2]
    assert counts_of(next_root, "observation") == [3, 2]
    assert counts_of(partial) == [5, 4]


@pytest.mark.parametrize("stack", STACKS)
def test_writes_into_results_stay_in_them(make_pool, stack):
    """Writing into a result's arrays changes that result only: later
    results are the envs' own, and the write stays."""
    pool = make_pool(["CountingEnv"] * 2, stack=stack, create_env_kwargs={"max_steps": 1000})
    pool.reset()
    out = pool.step(actions([1, 1]))
    for part in rows(out) if isinstance(out, LazyStackedTensorDict) else [out]:
        part["next", "observation"][...] = 999
        part["next", "reward"][...] = -5.0
    again = pool.step(actions([1, 1]))
    assert counts_of(again) == [2, 2]
    assert all(r == 0.0 for r in np.concatenate([np.ravel(p) for p in _rewards(again)]))
    assert counts_of(out) == [999, 999]
    pool.async_step_send(action(1), env_index=0)
    single = pool.async_step_recv(env_index=0, timeout=PATIENCE)
    single["next", "observation"][...] = -1
    assert counts_of(pool.step(actions([1, 1]))) == [4, 3]
    assert item(single, ("next", "observation")) == -1


def _rewards(result):
    if isinstance(result, LazyStackedTensorDict):
        return result["next", "reward"]
    return [result["next", "reward"]]


@pytest.mark.parametrize("stack", STACKS)
def test_results_outlive_the_pool(config, stack):
    """A result's arrays stay valid and unchanged after the pool is shut
    down and dropped (their base keeps the storage alive)."""
    import rlpool

    pool = rlpool.AsyncEnvPool(
        ["CountingEnv"] * 2,
        create_env_kwargs={"max_steps": 1000},
        **config.options(stack=stack),
    )
    try:
        pool.reset()
        out = pool.step(actions([3, 4]))
        pool.async_step_send(action(2), env_index=1)
        single = pool.async_step_recv(env_index=1, timeout=PATIENCE)
        copies = snapshot(out)
    finally:
        pool.shutdown()
    del pool
    gc.collect()
    assert_unchanged(out, copies, "after shutdown")
    assert counts_of(out) == [3, 4]
    assert item(single, ("next", "observation")) == 6
    for _key, array in leaves(out):
        array[...] = array  # Still writable memory.


@pytest.mark.parametrize("stack", STACKS)
def test_large_results_are_writable_and_kept(make_pool, stack):
    """Entries above the bindings' small-copy threshold (64 KiB) keep their
    own storage instead of a copy into the call's buffer: the same
    guarantees hold (writable, unaliased, unchanged by later calls)."""
    obs_dim = 40_000  # 160 KB per env, 640 KB per batch of 4
    pool = make_pool(
        ["LatencyEnv"] * 4,
        stack=stack,
        create_env_kwargs={"step_us": 0, "obs_dim": obs_dim},
    )
    first = pool.reset()
    copies = snapshot(first)
    second = pool.step({"action": np.zeros((4, 1), dtype=np.int64)})
    third = pool.step({"action": np.zeros((4, 1), dtype=np.int64)})
    for result in (first, second, third):
        for key, array in leaves(result):
            assert array.flags.writeable, key
    for _key, array in leaves(second):
        array[...] = 0 if array.dtype != np.bool_ else False
    assert_unchanged(first, copies, "after two steps and writes into the second")
    big = [a for _, a in leaves(third) if a.nbytes >= 64 * 1024]
    assert big or stack != "dense"
    others = [a for _, a in leaves(first)] + [a for _, a in leaves(second)]
    for array in big:
        assert not any(np.shares_memory(array, o) for o in others)
