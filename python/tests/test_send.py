"""Sends: the envs a send addresses (``env_index`` as an int, a list, a
numpy array, or ``None``: the tensordict's ``"env_index"`` entry, else every
env), the order results come back in, the busy guard, synchronous calls
while envs are in flight, and the sends the pool refuses (indices out of
range or repeated, a target that does not fit the tensordict, actions of
the wrong key, shape or dtype). Ported from the Rust conformance suite, on
every configuration."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    PATIENCE,
    STARTS,
    action,
    actions,
    counts_of,
    envs_of,
    item,
    recv_all,
    rows,
)

import rlpool
from rlpool import TensorDict

pytestmark = pytest.mark.timeout(60)


def test_out_of_order_sends_come_back_sorted(stacked_counters):
    """Envs sent out of order (a list, an ``"env_index"`` entry, an array,
    a received batch sent back) come back sorted by env, each with its own
    row: env ``e`` gets the action ``e + 1``, so a row sent to the wrong env
    would show in the counts."""
    pool = stacked_counters
    counts = list(STARTS)

    def incs(envs):
        return actions([e + 1 for e in envs])

    def check(batch, sent):
        expected = sorted(sent)
        assert envs_of(batch) == expected
        for row, env in zip(rows(batch), expected):
            counts[env] += env + 1
            assert item(row, "action") == env + 1
            assert item(row, ("next", "observation")) == counts[env], f"env {env}'s own row"

    envs = [3, 0, 2]
    pool.async_step_send(incs(envs), env_index=envs)
    check(recv_all(pool, 3), envs)

    envs = [2, 3, 0]
    td = incs(envs)
    td["env_index"] = np.array(envs, dtype=np.int64)
    pool.async_step_send(td)
    batch = recv_all(pool, 3)
    check(batch, envs)

    # TorchRL's loop: the next actions set in the received batch (it carries
    # env_index and "next"), sent back as it is.
    if isinstance(batch, TensorDict):
        batch["action"] = np.array([[1], [3], [4]], dtype=np.int64)
        pool.async_step_send(batch)
        check(recv_all(pool, 3), [0, 2, 3])

    envs = [1, 3, 0]
    pool.async_step_send(incs(envs), env_index=np.array(envs, dtype=np.int32))
    check(recv_all(pool, 3), envs)

    # A partial batch is sorted too.
    envs = [3, 1, 2]
    pool.async_step_send(incs(envs), env_index=envs)
    got: list[int] = []
    while len(got) < 3:
        got += envs_of(pool.async_step_recv())
    assert sorted(got) == [1, 2, 3]


def test_sends_with_different_env_index_kinds_stack(stacked_counters):
    """Envs of one batch sent by different sends (an int64 ``"env_index"``
    entry, an int32 one, a list argument, an int): the batch is built, the
    pool setting its own ``"env_index"``."""
    pool = stacked_counters
    first = actions([1])
    first["env_index"] = np.array([0], dtype=np.int64)
    pool.async_step_send(first)
    second = actions([2])
    second["env_index"] = np.array([1], dtype=np.int32)
    pool.async_step_send(second)
    pool.async_step_send(actions([3]), env_index=[2])
    pool.async_step_send(action(4), env_index=3)
    # Env 3 was sent to per env: a batch receive leaves it.
    batch = recv_all(pool, 3)
    assert envs_of(batch) == [0, 1, 2]
    assert counts_of(batch) == [STARTS[0] + 1, STARTS[1] + 2, STARTS[2] + 3]
    assert item(pool.async_step_recv(env_index=3), ("next", "observation")) == STARTS[3] + 4


def test_env_index_argument_kinds(counters):
    """``env_index=None`` without an ``"env_index"`` entry addresses every
    env; an int addresses one env (batch size ``()`` or ``(1,)``); a numpy
    integer is an int."""
    pool = counters
    pool.async_step_send(actions([1, 2, 3, 4]), env_index=None)
    assert counts_of(recv_all(pool, 4)) == [s + i + 1 for i, s in enumerate(STARTS)]
    pool.async_step_send(actions([5]), env_index=np.int64(2))
    out = pool.async_step_recv(env_index=2, timeout=PATIENCE)
    assert isinstance(out, TensorDict)
    assert out.batch_size == ()
    assert item(out, ("next", "observation")) == STARTS[2] + 3 + 5
    pool.async_reset_send(env_index=np.int32(1))
    root = pool.async_reset_recv(env_index=np.int64(1), timeout=PATIENCE)
    assert item(root, "observation") == STARTS[1]


def test_busy_send_lists_the_busy_envs(counters):
    """A send to envs whose results were not received is ``Busy`` naming
    them; it sends nothing, not even to the idle envs it addressed."""
    pool = counters
    pool.async_step_send(actions([1, 1]), env_index=[0, 1])

    def busy(send, *args, **kwargs):
        with pytest.raises(rlpool.Busy) as info:
            send(*args, **kwargs)
        return sorted(info.value.envs)

    assert busy(pool.async_step_send, actions([1, 1, 1]), env_index=[1, 2, 3]) == [1]
    assert busy(pool.async_step_send, actions([1] * 4), env_index=[3, 1, 0, 2]) == [0, 1]
    assert busy(pool.async_step_send, actions([1] * 4)) == [0, 1]
    assert busy(pool.async_step_send, action(1), env_index=1) == [1]
    assert busy(pool.async_reset_send) == [0, 1]
    assert busy(pool.async_step_and_maybe_reset_send, actions([1]), env_index=[0]) == [0]
    td = actions([1, 1])
    td["env_index"] = np.array([2, 1])
    assert busy(pool.async_step_send, td) == [1]
    with pytest.raises(rlpool.Busy) as info:
        pool.async_step_send(actions([1, 1]), env_index=[1, 2])
    assert "envs [1] are busy: receive their results before sending to them again" in str(
        info.value
    )
    assert pool.in_flight() == [0, 1], "a refused send sends nothing"
    assert counts_of(recv_all(pool, 2)) == [STARTS[0] + 1, STARTS[1] + 1], "stepped once"
    pool.async_step_send(actions([1] * 4))
    assert len(recv_all(pool, 4)) == 4


def test_sync_calls_fail_while_envs_are_in_flight(counters):
    """The synchronous calls raise ``Busy`` naming the envs in flight (a
    per-env send counts too), and send nothing."""
    pool = counters
    pool.async_step_send(actions([1, 1]), env_index=[3, 1])
    with pytest.raises(rlpool.Busy) as info:
        pool.step(actions([1] * 4))
    assert sorted(info.value.envs) == [1, 3]
    assert "envs [1, 3] are still in flight" in str(info.value)
    with pytest.raises(rlpool.Busy, match="still in flight") as info:
        pool.reset()
    assert sorted(info.value.envs) == [1, 3]
    with pytest.raises(rlpool.Busy) as info:
        pool.step_and_maybe_reset(actions([1] * 4))
    assert sorted(info.value.envs) == [1, 3]
    assert len(recv_all(pool, 2)) == 2
    pool.async_reset_send(env_index=2)
    with pytest.raises(rlpool.Busy) as info:
        pool.step(actions([1] * 4))
    assert info.value.envs == [2]
    pool.async_reset_recv(env_index=2, timeout=PATIENCE)
    assert len(pool.step(actions([1] * 4))) == 4


def test_out_of_range_envs_are_errors(counters):
    """Env indices out of range (or negative) are ``InvalidArgument`` in
    every kind of target and in per-env receives; nothing is sent."""
    pool = counters
    bad_sends = [
        (pool.async_step_send, (action(1),), {"env_index": 4}, "env index 4"),
        (pool.async_reset_send, (), {"env_index": 9}, "env index 9"),
        (pool.async_step_send, (actions([1, 1]),), {"env_index": [0, 7]}, "env index 7"),
        (pool.async_reset_send, (), {"env_index": [4]}, "env index 4"),
        (pool.async_step_send, (action(1),), {"env_index": 2**70}, None),
        (pool.async_step_send, (action(1),), {"env_index": -1}, None),
        (pool.async_step_send, (actions([1, 1]),), {"env_index": [0, -1]}, None),
    ]
    for send, args, kwargs, says in bad_sends:
        with pytest.raises(rlpool.InvalidArgument) as info:
            send(*args, **kwargs)
        if says is not None:
            assert says in str(info.value)
            assert "out of range for a pool of 4 envs" in str(info.value)
    td = actions([1, 1])
    td["env_index"] = np.array([1, 5])
    with pytest.raises(rlpool.InvalidArgument, match="env index 5"):
        pool.async_step_send(td)
    with pytest.raises(rlpool.InvalidArgument) as info:
        pool.async_step_recv(env_index=4)
    assert "env index 4 is out of range for a pool of 4 envs" in str(info.value)
    with pytest.raises(rlpool.InvalidArgument, match="env index 10"):
        pool.async_reset_recv(env_index=10)
    with pytest.raises(rlpool.InvalidArgument):
        pool.async_step_recv(env_index=-1)
    assert pool.in_flight() == [], "nothing was sent"


def test_duplicate_envs_are_errors(counters):
    """An env addressed twice in one send is ``InvalidArgument``; nothing
    is sent."""
    pool = counters
    with pytest.raises(rlpool.InvalidArgument) as info:
        pool.async_step_send(actions([1, 1]), env_index=[1, 1])
    assert "env 1 is addressed twice in one send" in str(info.value)
    td = actions([1, 1, 1])
    td["env_index"] = np.array([2, 0, 2])
    with pytest.raises(rlpool.InvalidArgument, match="env 2 is addressed twice"):
        pool.async_step_send(td)
    with pytest.raises(rlpool.InvalidArgument, match="env 3 is addressed twice"):
        pool.async_reset_send(env_index=[3, 0, 3])
    assert pool.in_flight() == [], "nothing was sent"


def test_target_length_mismatch_is_an_error(counters):
    """A target whose number of envs is not the tensordict's first batch
    dim is ``InvalidArgument``; nothing is sent. One env's tensordict may
    have a leading dim of 1."""
    pool = counters
    with pytest.raises(rlpool.InvalidArgument) as info:
        pool.async_step_send(actions([1, 1, 1]), env_index=[0, 1])
    assert "the target names 2 envs but the tensordict has batch size [3]" in str(info.value)
    with pytest.raises(rlpool.InvalidArgument, match="names 4 envs"):
        pool.async_step_send(actions([1, 1, 1]))
    with pytest.raises(rlpool.InvalidArgument, match=r"batch size \[2\]"):
        pool.async_step_send(actions([1, 1]), env_index=0)
    with pytest.raises(rlpool.InvalidArgument, match=r"batch size \[2\]"):
        pool.step(actions([1, 1]))
    with pytest.raises(rlpool.InvalidArgument, match=r"batch size \[3\]"):
        pool.reset(TensorDict({}, batch_size=(3,)))
    assert pool.in_flight() == [], "nothing was sent"
    pool.async_step_send(actions([1]), env_index=3)
    out = pool.async_step_recv(env_index=3, timeout=PATIENCE)
    assert item(out, ("next", "observation")) == STARTS[3] + 1


def test_env_index_entry_errors(counters):
    """An ``"env_index"`` entry must hold non-negative integers; anything
    else is refused (naming ``env_index``) and sends nothing. int32
    indices are fine."""
    pool = counters

    def refused(td, error=rlpool.InvalidArgument):
        with pytest.raises(error) as info:
            pool.async_step_send(td)
        return str(info.value)

    negative = actions([1, 1])
    negative["env_index"] = np.array([0, -1], dtype=np.int64)
    text = refused(negative)
    assert "-1" in text, text
    assert "negative" in text, text
    floats = actions([1, 1])
    floats["env_index"] = np.array([0.0, 1.0], dtype=np.float32)
    text = refused(floats, rlpool.PoolError)
    assert "env_index" in text, text
    nested = actions([1, 1])
    nested["env_index", "x"] = np.array([0, 1])
    text = refused(nested, rlpool.PoolError)
    assert "env_index" in text, text
    assert pool.in_flight() == [], "nothing was sent"

    ok = actions([1, 1])
    ok["env_index"] = np.array([3, 1], dtype=np.int32)
    pool.async_step_send(ok)
    assert envs_of(recv_all(pool, 2)) == [1, 3]


def test_a_step_without_a_fitting_action_is_an_error(counters):
    """A step whose tensordict lacks the action, or holds it with the wrong
    shape, is ``InvalidArgument`` naming the env and the key; one of the
    wrong dtype, or that is no array, is ``InvalidType`` (a ``TypeError``)
    naming the key. Nothing is sent, and the pool is unharmed."""
    pool = counters
    n = 4
    cases = [
        (rlpool.InvalidArgument, lambda: pool.async_step_send(TensorDict({}, batch_size=(n,)))),
        (
            rlpool.InvalidArgument,
            lambda: pool.async_step_and_maybe_reset_send(
                TensorDict({}, batch_size=(2,)), env_index=[2, 1]
            ),
        ),
        (rlpool.InvalidArgument, lambda: pool.async_step_send(TensorDict(), env_index=3)),
        (
            rlpool.InvalidArgument,
            lambda: pool.async_step_send(
                TensorDict({"actions": np.ones((n, 1), np.int64)}, batch_size=(n,))
            ),
        ),
        (
            rlpool.InvalidArgument,
            lambda: pool.async_step_send(
                TensorDict({"action": np.ones((n, 2), np.int64)}, batch_size=(n,))
            ),
        ),
        (
            rlpool.InvalidArgument,
            lambda: pool.async_step_send(
                TensorDict({"action": np.ones((n,), np.int64)}, batch_size=(n,))
            ),
        ),
        (
            rlpool.InvalidType,
            lambda: pool.async_step_send(
                TensorDict({"action": np.ones((n, 1), np.float32)}, batch_size=(n,))
            ),
        ),
        (rlpool.InvalidType, lambda: pool.async_step_send({"action": object()})),
        (rlpool.InvalidArgument, lambda: pool.step(TensorDict({}, batch_size=(n,)))),
        (
            rlpool.InvalidType,
            lambda: pool.step(TensorDict({"action": np.ones((n, 1), np.float64)}, batch_size=(n,))),
        ),
        (
            rlpool.InvalidArgument,
            lambda: pool.step_and_maybe_reset(TensorDict({}, batch_size=(n,))),
        ),
    ]
    for i, (error, call) in enumerate(cases):
        with pytest.raises(error) as info:
            call()
        assert "action" in str(info.value), f"case {i}: {info.value}"
        assert pool.in_flight() == [], f"case {i}: nothing was sent"
    with pytest.raises(rlpool.InvalidArgument) as info:
        pool.async_step_send(TensorDict({}, batch_size=(n,)))
    assert "env 0" in str(info.value)
    with pytest.raises(rlpool.InvalidArgument) as info:
        pool.async_step_send(TensorDict(), env_index=3)
    assert "env 3" in str(info.value)
    with pytest.raises(TypeError):
        pool.async_step_send(42)
    assert counts_of(pool.step(actions([1] * 4))) == [s + 1 for s in STARTS]


def test_a_plain_dict_is_taken_wherever_a_tensordict_is(counters):
    """A plain (nested) dict of arrays is a tensordict for every call."""
    pool = counters
    ones = {"action": np.ones((4, 1), np.int64)}
    assert counts_of(pool.step(ones)) == [s + 1 for s in STARTS]
    step, root = pool.step_and_maybe_reset(ones)
    assert counts_of(step) == [s + 2 for s in STARTS]
    assert counts_of(root, "observation") == [s + 2 for s in STARTS]
    pool.async_step_send({"action": np.ones((2, 1), np.int64)}, env_index=[3, 0])
    assert counts_of(recv_all(pool, 2)) == [STARTS[0] + 3, STARTS[3] + 3]
    pool.async_step_send({"action": np.full((2, 1), 2, np.int64), "env_index": np.array([2, 1])})
    assert counts_of(recv_all(pool, 2)) == [STARTS[1] + 4, STARTS[2] + 4]
    pool.async_step_and_maybe_reset_send({"action": np.array([1], np.int64)}, env_index=1)
    step, root = pool.async_step_and_maybe_reset_recv(env_index=1, timeout=PATIENCE)
    assert item(step, ("next", "observation")) == STARTS[1] + 5
    pool.async_reset_send({}, env_index=[0])
    assert counts_of(recv_all(pool, 1, "reset"), "observation") == [STARTS[0]]
    assert counts_of(pool.reset({}), "observation") == list(STARTS)
    # Extra entries, nested ones too, travel with the send.
    extra = {"action": np.ones((4, 1), np.int64), "info": {"tag": np.arange(4.0)}}
    out = pool.step(extra)
    assert np.array_equal(out["info", "tag"], np.arange(4.0))
