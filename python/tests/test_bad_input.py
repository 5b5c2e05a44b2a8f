"""Bad input, table-driven (the Rust ``pool/tests/bad_input.rs`` from
Python): every call of ``AsyncEnvPool`` with bad arguments raises its typed
exception with a message naming the env, key or argument, and leaves the
pool sound: the envs in flight are the ones that were before the call,
each of their results comes with the right count, and a synchronous step
of every env counts right. All the rows run on one pool per configuration,
so that each row also checks what the ones before it left. Then the calls
after shutdown, and the pools that cannot be built."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from helpers import PATIENCE, action, actions, counting_kwargs, envs_of, item

import rlpool
from rlpool import TensorDict

pytestmark = pytest.mark.timeout(120)

N = 4
STARTS = (0, 100, 200, 300)
IDLE = "idle"
# Envs 0 and 1 in flight from a batch step, env 2 from a per-env step (each
# adding 1); env 3 idle.
BUSY = "busy"


def with_action(n: int, array: Any) -> TensorDict:
    return TensorDict({"action": array}, batch_size=(n,))


def entry(td: TensorDict, envs: list[int], dtype: Any = np.int64) -> TensorDict:
    td["env_index"] = np.array(envs, dtype=dtype)
    return td


@dataclass
class Row:
    name: str
    before: str
    call: Callable[[rlpool.AsyncEnvPool], Any]
    error: Any
    says: list[str] = field(default_factory=list)
    busy: list[int] | None = None


ROWS = [
    # Env indices out of range, in every target and per-env receive.
    Row(
        "send to one env out of range",
        IDLE,
        lambda p: p.async_step_send(action(1), env_index=4),
        rlpool.InvalidArgument,
        ["env index 4 is out of range for a pool of 4 envs"],
    ),
    Row(
        "reset of env 2**64 - 1",
        BUSY,
        lambda p: p.async_reset_send(env_index=2**64 - 1),
        rlpool.InvalidArgument,
        ["out of range"],
    ),
    Row(
        "reset of env 2**70",
        IDLE,
        lambda p: p.async_reset_send(env_index=2**70),
        rlpool.InvalidArgument,
    ),
    Row(
        "send to env -1",
        BUSY,
        lambda p: p.async_step_send(action(1), env_index=-1),
        rlpool.InvalidArgument,
    ),
    Row(
        "a list with an env out of range",
        IDLE,
        lambda p: p.async_step_send(actions([1, 1]), env_index=[0, 9]),
        rlpool.InvalidArgument,
        ["env index 9"],
    ),
    Row(
        "a list with a negative env",
        IDLE,
        lambda p: p.async_step_send(actions([1, 1]), env_index=[0, -2]),
        rlpool.InvalidArgument,
    ),
    Row(
        "a reset list with an env out of range",
        BUSY,
        lambda p: p.async_reset_send(env_index=[3, 5]),
        rlpool.InvalidArgument,
        ["env index 5"],
    ),
    Row(
        "an env_index entry out of range",
        IDLE,
        lambda p: p.async_step_and_maybe_reset_send(entry(actions([1, 1]), [1, 7])),
        rlpool.InvalidArgument,
        ["env index 7"],
    ),
    Row(
        "per-env step receive out of range",
        BUSY,
        lambda p: p.async_step_recv(env_index=4),
        rlpool.InvalidArgument,
        ["env index 4"],
    ),
    Row(
        "per-env reset receive out of range",
        IDLE,
        lambda p: p.async_reset_recv(env_index=2**64 - 1, timeout=0),
        rlpool.InvalidArgument,
        ["out of range"],
    ),
    Row(
        "per-env step-and-maybe-reset receive out of range",
        IDLE,
        lambda p: p.async_step_and_maybe_reset_recv(env_index=8),
        rlpool.InvalidArgument,
        ["env index 8"],
    ),
    Row(
        "per-env receive of env -1",
        BUSY,
        lambda p: p.async_step_recv(env_index=-1),
        rlpool.InvalidArgument,
    ),
    # Duplicates.
    Row(
        "an env twice in a list",
        IDLE,
        lambda p: p.async_step_send(actions([1, 1]), env_index=[1, 1]),
        rlpool.InvalidArgument,
        ["env 1 is addressed twice in one send"],
    ),
    Row(
        "an env twice in a reset list, one busy",
        BUSY,
        lambda p: p.async_reset_send(env_index=[3, 0, 3]),
        rlpool.InvalidArgument,
        ["env 3 is addressed twice"],
    ),
    Row(
        "an env twice in env_index",
        IDLE,
        lambda p: p.async_step_send(entry(actions([1, 1, 1]), [2, 0, 2])),
        rlpool.InvalidArgument,
        ["env 2 is addressed twice"],
    ),
    # Targets and tensordicts that do not match.
    Row(
        "a list of 2 envs with 3 rows",
        IDLE,
        lambda p: p.async_step_send(actions([1, 1, 1]), env_index=[0, 1]),
        rlpool.InvalidArgument,
        ["the target names 2 envs but the tensordict has batch size [3]"],
    ),
    Row(
        "all envs with 3 rows",
        IDLE,
        lambda p: p.async_step_send(actions([1, 1, 1])),
        rlpool.InvalidArgument,
        ["names 4 envs"],
    ),
    Row(
        "one env with 2 rows",
        BUSY,
        lambda p: p.async_step_send(actions([1, 1]), env_index=3),
        rlpool.InvalidArgument,
        ["batch size [2]"],
    ),
    Row(
        "a sync step with 2 rows",
        IDLE,
        lambda p: p.step(actions([1, 1])),
        rlpool.InvalidArgument,
        ["batch size [2]"],
    ),
    Row(
        "a negative env_index entry",
        IDLE,
        lambda p: p.async_step_send(entry(actions([1, 1]), [0, -1])),
        rlpool.InvalidArgument,
        ["env index -1 is negative"],
    ),
    Row(
        "a float env_index entry",
        IDLE,
        lambda p: p.async_step_send(entry(actions([1]), [0], np.float32)),
        rlpool.PoolError,
        ["env_index", "not an integer tensor"],
    ),
    # Receive arguments.
    Row(
        "min_get 0",
        BUSY,
        lambda p: p.async_step_recv(min_get=0),
        rlpool.InvalidArgument,
        ["min_get must be at least 1, got 0"],
    ),
    Row(
        "min_get 0 and max_get 0",
        IDLE,
        lambda p: p.async_step_and_maybe_reset_recv(min_get=0, max_get=0),
        rlpool.InvalidArgument,
        ["min_get must be at least 1"],
    ),
    Row(
        "min_get -1",
        BUSY,
        lambda p: p.async_step_recv(min_get=-1),
        rlpool.InvalidArgument,
        ["min_get"],
    ),
    Row(
        "max_get below min_get",
        BUSY,
        lambda p: p.async_step_recv(min_get=2, max_get=1),
        rlpool.InvalidArgument,
        ["max_get (1) must be at least min_get (2)"],
    ),
    Row(
        "max_get below min_get with nothing in flight",
        IDLE,
        lambda p: p.async_reset_recv(min_get=3, max_get=2, timeout=0),
        rlpool.InvalidArgument,
        ["max_get (2)"],
    ),
    Row(
        "a negative timeout",
        BUSY,
        lambda p: p.async_step_recv(min_get=2, timeout=-0.5),
        rlpool.InvalidArgument,
        ["timeout"],
    ),
    Row(
        "a NaN timeout",
        BUSY,
        lambda p: p.async_step_recv(env_index=2, timeout=float("nan")),
        rlpool.InvalidArgument,
        ["timeout"],
    ),
    Row(
        "min_get above the batch sends in flight",
        BUSY,
        lambda p: p.async_step_recv(min_get=3),
        rlpool.InvalidArgument,
        ["cannot wait for 3 step results: only 2 envs are in flight for step"],
    ),
    Row(
        "a receive of another operation than the one in flight",
        BUSY,
        lambda p: p.async_reset_recv(),
        rlpool.InvalidArgument,
        ["only 0 envs are in flight for reset"],
    ),
    Row(
        "a receive with nothing in flight and no timeout",
        IDLE,
        lambda p: p.async_step_recv(),
        rlpool.InvalidArgument,
        ["only 0 envs"],
    ),
    Row(
        "a poll with nothing in flight",
        IDLE,
        lambda p: p.async_step_and_maybe_reset_recv(timeout=0),
        rlpool.InvalidArgument,
        ["step_and_maybe_reset results"],
    ),
    Row(
        "a timeout too long to represent, nothing in flight",
        IDLE,
        lambda p: p.async_step_recv(timeout=1e30),
        rlpool.InvalidArgument,
    ),
    Row(
        "a batch receive of per-env sends only",
        BUSY,
        lambda p: p.async_step_recv(min_get=3, timeout=0.001),
        rlpool.InvalidArgument,
        ["only 2 envs"],
    ),
    Row(
        "a min_get that is not an int",
        BUSY,
        lambda p: p.async_step_recv(min_get=1.5),
        TypeError,
    ),
    # Per-env receives with nothing in flight for them.
    Row(
        "per-env receive of an idle env",
        BUSY,
        lambda p: p.async_step_recv(env_index=3),
        rlpool.InvalidArgument,
        ["env 3 has no step in flight"],
    ),
    Row(
        "per-env receive of another operation",
        BUSY,
        lambda p: p.async_reset_recv(env_index=0, timeout=PATIENCE),
        rlpool.InvalidArgument,
        ["env 0 has no reset in flight"],
    ),
    Row(
        "per-env step-and-maybe-reset receive of a step",
        BUSY,
        lambda p: p.async_step_and_maybe_reset_recv(env_index=2),
        rlpool.InvalidArgument,
        ["env 2 has no step_and_maybe_reset in flight"],
    ),
    # Sends to busy envs.
    Row(
        "a list with busy envs",
        BUSY,
        lambda p: p.async_step_send(actions([1, 1, 1]), env_index=[3, 2, 1]),
        rlpool.Busy,
        ["envs [2, 1] are busy"],
        busy=[1, 2],
    ),
    Row(
        "a reset of every env",
        BUSY,
        lambda p: p.async_reset_send(),
        rlpool.Busy,
        ["envs [0, 1, 2] are busy: receive their results before sending to them again"],
        busy=[0, 1, 2],
    ),
    Row(
        "a per-env send to a busy env",
        BUSY,
        lambda p: p.async_step_and_maybe_reset_send(action(1), env_index=2),
        rlpool.Busy,
        ["envs [2] are busy"],
        busy=[2],
    ),
    Row(
        "a busy env and an invalid action: busy first",
        BUSY,
        lambda p: p.async_step_send(with_action(2, np.ones((2, 1), np.float32)), env_index=[3, 0]),
        rlpool.Busy,
        ["envs [0] are busy"],
        busy=[0],
    ),
    # Synchronous calls while envs are in flight.
    Row(
        "a sync step with envs in flight",
        BUSY,
        lambda p: p.step(actions([1] * N)),
        rlpool.Busy,
        ["envs [0, 1, 2] are still in flight"],
        busy=[0, 1, 2],
    ),
    Row(
        "a sync reset with envs in flight",
        BUSY,
        lambda p: p.reset(),
        rlpool.Busy,
        ["before a synchronous reset"],
        busy=[0, 1, 2],
    ),
    Row(
        "a sync step-and-maybe-reset with envs in flight",
        BUSY,
        lambda p: p.step_and_maybe_reset(actions([1] * N)),
        rlpool.Busy,
        ["synchronous step_and_maybe_reset"],
        busy=[0, 1, 2],
    ),
    # Actions of the wrong key, shape or dtype.
    Row(
        "no action",
        IDLE,
        lambda p: p.async_step_send(TensorDict({}, batch_size=(N,))),
        rlpool.InvalidArgument,
        ["env 0", 'key "action" not found'],
    ),
    Row(
        "a misspelled action key",
        BUSY,
        lambda p: p.async_step_send(
            TensorDict({"actions": np.ones((1, 1), np.int64)}, batch_size=(1,)), env_index=[3]
        ),
        rlpool.InvalidArgument,
        ["env 3", 'key "action" not found', "actions"],
    ),
    Row(
        "an f32 action",
        IDLE,
        lambda p: p.async_step_send(with_action(N, np.ones((N, 1), np.float32))),
        rlpool.InvalidType,
        ['"action"', "int64", "float32"],
    ),
    Row(
        "an action of shape (n, 2)",
        IDLE,
        lambda p: p.async_step_send(with_action(N, np.ones((N, 2), np.int64))),
        rlpool.InvalidArgument,
        ["env 0", '"action"', "shape [2]", "shape [1]"],
    ),
    Row(
        "an action of shape (n,)",
        IDLE,
        lambda p: p.async_step_send(with_action(N, np.ones((N,), np.int64))),
        rlpool.InvalidArgument,
        ["env 0", '"action"', "shape []", "shape [1]"],
    ),
    Row(
        "one env's action of shape (2,)",
        BUSY,
        lambda p: p.async_step_send(TensorDict({"action": np.ones((2,), np.int64)}), env_index=3),
        rlpool.InvalidArgument,
        ["env 3", '"action"', "shape [2]"],
    ),
    Row(
        "an action that is a dict",
        IDLE,
        lambda p: p.async_step_send({"action": {"x": np.ones((N, 1), np.int64)}}),
        rlpool.InvalidType,
        ['"action"'],
    ),
    Row(
        "an action that is not an array",
        IDLE,
        lambda p: p.async_step_send({"action": object()}, env_index=[1, 0]),
        rlpool.InvalidType,
        ["action"],
    ),
    Row(
        "a tensordict that is not a mapping",
        BUSY,
        lambda p: p.async_step_send([1, 2, 3], env_index=[3]),
        rlpool.InvalidType,
    ),
    Row(
        "a sync step with an f32 action",
        IDLE,
        lambda p: p.step(with_action(N, np.ones((N, 1), np.float32))),
        rlpool.InvalidType,
        ['"action"', "int64", "float32"],
    ),
    Row(
        "a sync step-and-maybe-reset without an action",
        IDLE,
        lambda p: p.step_and_maybe_reset(TensorDict({}, batch_size=(N,))),
        rlpool.InvalidArgument,
        ["env 0", 'key "action" not found'],
    ),
    Row(
        "a batch with an extra batch dim",
        IDLE,
        lambda p: p.async_step_send(
            TensorDict({"action": np.ones((N, 3, 1), np.int64)}, batch_size=(N, 3))
        ),
        rlpool.InvalidArgument,
        ["env 0 has batch size [] but its row of the tensordict has batch size [3]"],
    ),
    Row(
        "one env's tensordict with an extra batch dim",
        BUSY,
        lambda p: p.async_step_send(
            TensorDict({"action": np.ones((1, 2, 1), np.int64)}, batch_size=(1, 2)),
            env_index=3,
        ),
        rlpool.InvalidArgument,
        ["env 3 has batch size []", "batch size [2]"],
    ),
    Row(
        "a reset list whose tensordict has an extra batch dim",
        BUSY,
        lambda p: p.async_reset_send(TensorDict({}, batch_size=(1, 5)), env_index=[3]),
        rlpool.InvalidArgument,
        ["env 3", "batch size [5]"],
    ),
    Row(
        "a sync reset with 3 rows",
        IDLE,
        lambda p: p.reset(TensorDict({}, batch_size=(3,))),
        rlpool.InvalidArgument,
        ["batch size [3]"],
    ),
    Row(
        "a per-env reset with 2 rows",
        BUSY,
        lambda p: p.async_reset_send(TensorDict({}, batch_size=(2,)), env_index=3),
        rlpool.InvalidArgument,
        ["batch size [2]"],
    ),
]


def prepare(pool: rlpool.AsyncEnvPool, before: str, counts: list[int]) -> None:
    if before == BUSY:
        pool.async_step_send(actions([1, 1]), env_index=[0, 1])
        pool.async_step_send(action(1), env_index=2)
        for env in range(3):
            counts[env] += 1


def check_sound(pool: rlpool.AsyncEnvPool, counts: list[int], what: str) -> None:
    """Takes every result in flight (a step of each, with its count), then
    steps every env: each counts once more."""
    for env in pool.in_flight():
        out = pool.async_step_recv(env_index=env, timeout=PATIENCE)
        assert item(out, "env_index") == env, what
        assert item(out, ("next", "observation")) == counts[env], f"{what}: env {env}"
    assert pool.in_flight() == [], what
    out = pool.step(actions([1] * N))
    assert envs_of(out) == list(range(N)), what
    for env, count in enumerate(out["next", "observation"][:, 0]):
        counts[env] += 1
        assert count == counts[env], f"{what}: env {env} after a sync step"


def test_pool_rows(pools, config):
    """Every row on one pool, each followed by the soundness check; then the
    calls after shutdown."""
    workers = {"envs_per_worker": 2} if config.procs else {"num_threads": 2}
    pool = pools(
        ["CountingEnv"] * N, create_env_kwargs=counting_kwargs(STARTS), **config.options(**workers)
    )
    counts = list(STARTS)
    failures = []
    for row in ROWS:
        what = f"{config}: {row.name}"
        prepare(pool, row.before, counts)
        try:
            row.call(pool)
        except Exception as err:
            if not isinstance(err, row.error):
                failures.append(f"{what}: expected {row.error.__name__}, got {err!r}")
            else:
                text = str(err)
                failures += [
                    f"{what}: {text!r} does not say {s!r}" for s in row.says if s not in text
                ]
                if row.busy is not None and sorted(err.envs) != row.busy:
                    failures.append(f"{what}: busy envs {err.envs}, expected {row.busy}")
        else:
            failures.append(f"{what}: expected {row.error.__name__}, got no error")
        expected_in_flight = [0, 1, 2] if row.before == BUSY else []
        assert pool.in_flight() == expected_in_flight, f"{what}: nothing sent, nothing taken"
        check_sound(pool, counts, what)
    assert not failures, "\n".join(failures)
    after_shutdown(pool)


def after_shutdown(pool: rlpool.AsyncEnvPool) -> None:
    """Every call after shutdown (with results in flight) is ``ShutDown``,
    even one whose arguments are bad as well; shutdown is idempotent."""
    prepare(pool, BUSY, [0] * N)
    pool.shutdown()
    pool.shutdown()
    calls = [
        lambda p: p.reset(),
        lambda p: p.step(actions([1] * N)),
        lambda p: p.step_and_maybe_reset(actions([1] * N)),
        lambda p: p.async_reset_send(env_index=3),
        lambda p: p.async_step_send(action(1), env_index=3),
        lambda p: p.async_step_and_maybe_reset_send(actions([1]), env_index=[3]),
        lambda p: p.async_step_send(action(1), env_index=0),
        lambda p: p.async_reset_recv(),
        lambda p: p.async_step_recv(min_get=2),
        lambda p: p.async_step_and_maybe_reset_recv(),
        lambda p: p.async_reset_recv(env_index=3),
        lambda p: p.async_step_recv(env_index=2),
        lambda p: p.async_step_and_maybe_reset_recv(env_index=1),
        lambda p: p.async_step_recv(timeout=0),
    ]
    for call in calls:
        with pytest.raises(rlpool.ShutDown):
            call(pool)


def pinned(config: Any, affinity: Any) -> dict[str, Any]:
    """Options of 2 workers (threads, or processes of 2 envs) pinned to
    ``affinity``."""
    workers = {"num_threads": 2} if not config.procs else {"envs_per_worker": 2}
    return config.options(worker_affinity=affinity, **workers)


def test_build_rows(pools, config):
    """Every pool that cannot be built, with its exception and message;
    afterwards a pool builds and runs."""
    cpu = min(os.sched_getaffinity(0))
    rows: list[tuple[str, Callable[[], Any], Any, list[str]]] = [
        (
            "no env",
            lambda: pools([], **config.options()),
            rlpool.InvalidArgument,
            ["at least one env"],
        ),
        (
            "fewer keyword sets than envs",
            lambda: pools(["CountingEnv"] * 3, create_env_kwargs=[{}, {}], **config.options()),
            rlpool.InvalidArgument,
            ["create_env_kwargs"],
        ),
        (
            "more keyword sets than envs",
            lambda: pools(["CountingEnv"], create_env_kwargs=[{}, {}], **config.options()),
            rlpool.InvalidArgument,
            ["create_env_kwargs"],
        ),
        (
            "an unknown env name",
            lambda: pools(["CountingEnv", "Nope-v0", "Nope-v0"], **config.options()),
            rlpool.StartError,
            ['unknown env "Nope-v0"', "CountingEnv", "CartPole-v1"],
        ),
        (
            "a keyword an env does not accept",
            lambda: pools(
                ["CountingEnv"] * 2, create_env_kwargs=[{}, {"max_step": 3}], **config.options()
            ),
            rlpool.StartError,
            ["env 1", "max_step", "accepted"],
        ),
        (
            "a keyword of the wrong type",
            lambda: pools(
                ["CountingEnv"], create_env_kwargs={"start_val": "ten"}, **config.options()
            ),
            rlpool.StartError,
            ["env 0", '"start_val"', "must be an int"],
        ),
        (
            "a keyword out of range",
            lambda: pools(
                ["CountingEnv"] * 3,
                create_env_kwargs=[{}, {}, {"max_steps": 2**63 - 1}],
                **config.options(),
            ),
            rlpool.StartError,
            ["env 2", '"max_steps"', "does not fit in i32"],
        ),
        (
            "a keyword no env type can carry",
            lambda: pools(
                ["CountingEnv"], create_env_kwargs={"start_val": {1: 2}}, **config.options()
            ),
            TypeError,
            ["start_val"],
        ),
        (
            "a constructor that panics",
            lambda: pools(["CountingEnv", "PanicsWhenBuilt"], **config.options()),
            rlpool.StartError,
            ["deliberate panic in a constructor"],
        ),
        (
            "fewer CPU sets than workers",
            lambda: pools(["CountingEnv"] * 4, **pinned(config, [[cpu]])),
            rlpool.StartError,
            ["1 CPU sets for 2 workers"],
        ),
        (
            "an empty CPU set",
            lambda: pools(["CountingEnv"] * 4, **pinned(config, lambda w: [] if w == 1 else [cpu])),
            rlpool.StartError,
            ["worker 1: empty CPU set"],
        ),
        (
            "a CPU this process may not use",
            lambda: pools(["CountingEnv"] * 4, **pinned(config, [[cpu], [1000]])),
            rlpool.StartError,
            ["worker 1", "CPU 1000 is not available"],
        ),
        (
            "a CPU beyond any CPU set",
            lambda: pools(["CountingEnv"] * 4, **pinned(config, [[cpu], [100_000]])),
            rlpool.StartError,
            ["worker 1", "CPU 100000 is out of range"],
        ),
        (
            "a negative CPU",
            lambda: pools(["CountingEnv"] * 4, **pinned(config, [[cpu], [-1]])),
            rlpool.PoolError,
            [],
        ),
    ]
    if config.name == "shm":
        rows.append(
            (
                "heterogeneous envs on shm",
                lambda: pools(["CartPole-v1", "Pendulum-v1"], **config.options(stack="lazy")),
                rlpool.StartError,
                ['"action"', "env 1", "dtype f32"],
            )
        )
    else:
        rows.append(
            (
                "heterogeneous envs, dense",
                lambda: pools(["CartPole-v1", "Pendulum-v1"], **config.options(stack="dense")),
                rlpool.StartError,
                ["action", "env 1", "env 0"],
            )
        )
    failures = []
    for name, build, error, says in rows:
        try:
            build()
        except Exception as err:
            if not isinstance(err, error):
                failures.append(f"{name}: expected {error.__name__}, got {err!r}")
                continue
            text = str(err)
            failures += [f"{name}: {text!r} does not say {s!r}" for s in says if s not in text]
        else:
            failures.append(f"{name}: expected {error.__name__}, got a pool")
    assert not failures, "\n".join(failures)
    pool = pools(["CountingEnv"] * N, create_env_kwargs=counting_kwargs(STARTS), **config.options())
    check_sound(pool, list(STARTS), f"{config}: after the builder rows")


def test_an_action_of_another_dtype_of_the_same_kind_is_cast(pools, config):
    """An int32 (or uint8) action for an int64 env is cast, as numpy casts
    within a kind; another kind (float for int) is refused above."""
    pool = pools(["CountingEnv"] * 2, **config.options())
    pool.reset()
    for dtype in (np.int32, np.uint8, np.int16):
        out = pool.step({"action": np.ones((2, 1), dtype)})
        assert out["action"].dtype == np.int64
    assert out["next", "observation"].ravel().tolist() == [3, 3]
