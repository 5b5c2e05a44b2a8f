"""A model-based test of the pool's bookkeeping from Python (the Rust
``pool/tests/model.rs``, with seeded random sequences instead of
proptest): random calls against a pool of four CountingEnvs (async sends
of every operation to random targets: every env, one env, lists with
duplicates and indices out of range, ``"env_index"`` entries and arrays;
batch receives with random ``min_get``/``max_get``/timeouts; per-env
receives; the synchronous calls). A model of each env (idle, or in flight
for an operation from a batch or a per-env send, with the counts its
result must carry) says after every call what the pool must have done:
which calls fail and with which exception, which results come back (once
each, sorted, with their env index, the action sent and the count), and
which envs are still in flight.

Where the outcome depends on timing (how many results a poll or a short
timeout finds), the model accepts any outcome the rules allow: a batch of
``min_get`` up to ``max_get`` of the envs in flight, or a ``Timeout`` with
fewer than ``min_get`` ready that takes nothing.

``RLPOOL_MODEL_SEQUENCES`` overrides the number of sequences per pool.
"""

from __future__ import annotations

import os
import random
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from helpers import STACKS, attempt, counting_kwargs, env_of, envs_of, item, rows

import rlpool
from rlpool import TensorDict

pytestmark = pytest.mark.timeout(150)

N = 4
STARTS = [0, 1000, 2000, 3000]
# Envs 1 and 3 are done after a few increments (so that step-and-maybe-reset
# resets them), envs 0 and 2 never.
MAX_STEPS = [1 << 30, 1004, 1 << 30, 3006]
INDEX_END = N + 2
GENEROUS = 20.0
KINDS = ("reset", "step", "step_and_maybe_reset")
SEQUENCES = int(os.environ.get("RLPOOL_MODEL_SEQUENCES", "6"))
MAX_CALLS = 48


@dataclass(frozen=True)
class Expect:
    """What an env's result must carry."""

    action: int | None = None
    next: tuple[int, bool] | None = None
    root: int | None = None


@dataclass(frozen=True)
class Slot:
    kind: str
    per_env: bool
    expect: Expect


@dataclass(frozen=True)
class Expected:
    """An error the model expects: its class, what its message says, and
    for ``Busy`` the envs."""

    error: Any
    says: str
    busy: tuple[int, ...] | None = None


class Model:
    def __init__(self) -> None:
        self.count = list(STARTS)
        self.slots: list[Slot | None] = [None] * N

    def advance(self, env: int, kind: str, action: int) -> Expect:
        if kind == "reset":
            self.count[env] = STARTS[env]
            return Expect(root=self.count[env])
        self.count[env] += action
        nxt = (self.count[env], self.count[env] > MAX_STEPS[env])
        root = None
        if kind == "step_and_maybe_reset":
            if nxt[1]:
                self.count[env] = STARTS[env]
            root = self.count[env]
        return Expect(action=action, next=nxt, root=root)

    def in_flight(self) -> list[int]:
        return [e for e in range(N) if self.slots[e] is not None]

    def batch(self, kind: str) -> list[int]:
        return [
            e
            for e in range(N)
            if (s := self.slots[e]) is not None and s.kind == kind and not s.per_env
        ]

    def resolve(self, envs: list[int]) -> list[tuple[int, int]] | Expected:
        """The ``(env, row)`` pairs a send to ``envs`` addresses, or its
        error: the first env out of range or repeated, then the busy
        envs."""
        seen = set()
        for env in envs:
            if env >= N:
                return out_of_range(env)
            if env in seen:
                return Expected(rlpool.InvalidArgument, f"env {env} is addressed twice")
            seen.add(env)
        busy = self.busy(envs)
        return busy if busy is not None else [(e, r) for r, e in enumerate(envs)]

    def busy(self, envs: list[int]) -> Expected | None:
        busy = tuple(e for e in envs if self.slots[e] is not None)
        if busy:
            return Expected(rlpool.Busy, "are busy", tuple(sorted(busy)))
        return None


def out_of_range(env: int) -> Expected:
    return Expected(
        rlpool.InvalidArgument, f"env index {env} is out of range for a pool of {N} envs"
    )


def check_error(err: BaseException, expected: Expected, what: str) -> None:
    assert isinstance(err, expected.error), f"{what}: expected {expected}, got {err!r}"
    assert expected.says in str(err), f"{what}: {str(err)!r} does not say {expected.says!r}"
    if expected.busy is not None:
        assert tuple(sorted(err.envs)) == expected.busy, f"{what}: busy {err.envs}"


def check_step(row: TensorDict, env: int, expect: Expect, what: str) -> None:
    assert env_of(row) == env, f"{what}: env_index"
    assert expect.next is not None
    assert expect.action is not None
    count, done = expect.next
    assert item(row, ("next", "observation")) == count, f"{what}: env {env}'s count"
    assert item(row, ("next", "done")) is done, f"{what}: env {env}'s done flag"
    assert item(row, "action") == expect.action, f"{what}: env {env}'s root row"


def check_root(row: TensorDict, env: int, expect: Expect, what: str) -> None:
    assert env_of(row) == env, f"{what}: env_index"
    assert item(row, "observation") == expect.root, f"{what}: env {env}'s root count"
    assert item(row, "done") is False, f"{what}: a root is never done"


def check(kind: str, step: Any, root: Any, env: int, expect: Expect, what: str) -> None:
    if kind == "reset":
        check_root(root, env, expect, what)
    else:
        check_step(step, env, expect, what)
        if kind == "step_and_maybe_reset":
            check_root(root, env, expect, what)


# -- drawing calls -----------------------------------------------------------


def weighted(rng: random.Random, choices: list[tuple[int, Any]]) -> Any:
    total = sum(w for w, _ in choices)
    pick = rng.randrange(total)
    for weight, value in choices:
        if pick < weight:
            return value() if callable(value) else value
        pick -= weight
    raise AssertionError("unreachable")


def draw_index(rng: random.Random) -> int:
    return rng.randrange(N) if rng.randrange(7) < 6 else rng.randrange(N, INDEX_END)


def draw_env_list(rng: random.Random) -> list[int]:
    if rng.randrange(4) < 3:
        envs = rng.sample(range(N), rng.randint(1, N))
        rng.shuffle(envs)
        return envs
    return [rng.randrange(INDEX_END) for _ in range(rng.randint(0, N + 1))]


def draw_aim(rng: random.Random) -> tuple[Any, ...]:
    return weighted(
        rng,
        [
            (1, lambda: ("all",)),
            (2, lambda: ("env", draw_index(rng), rng.random() < 0.5)),
            (3, lambda: ("envs", draw_env_list(rng), rng.random() < 0.1)),
            (2, lambda: ("entry", draw_env_list(rng), rng.choice(["int64", "int32", "array"]))),
        ],
    )


def draw_wait(rng: random.Random) -> tuple[str, float | None]:
    return weighted(
        rng,
        [
            (3, ("poll", 0.0)),
            (1, lambda: ("short", rng.randint(1, 3) / 1000)),
            (2, ("generous", GENEROUS)),
            (1, ("forever", None)),
        ],
    )


def draw_count(rng: random.Random) -> tuple[str, int]:
    return weighted(
        rng,
        [
            (1, ("fixed", 0)),
            (4, lambda: ("fixed", rng.randint(1, N + 1))),
            (5, lambda: ("below", rng.randint(0, 2))),
        ],
    )


def resolve_count(count: tuple[str, int], in_flight: int) -> int:
    how, n = count
    return n if how == "fixed" else max(in_flight - n, 1)


def draw_call(rng: random.Random) -> tuple[Any, ...]:
    def values() -> list[int]:
        return [rng.randrange(4) for _ in range(N + 2)]

    return weighted(
        rng,
        [
            (
                6,
                lambda: ("send", rng.choice(KINDS), draw_aim(rng), values(), rng.random() < 0.3),
            ),
            (
                6,
                lambda: (
                    "recv",
                    rng.choice(KINDS) if rng.random() < 0.4 else None,
                    draw_count(rng),
                    draw_count(rng) if rng.random() < 0.5 else None,
                    draw_wait(rng),
                ),
            ),
            (
                5,
                lambda: (
                    "recv_env",
                    (rng.choice(KINDS), draw_index(rng)) if rng.random() < 0.4 else None,
                    rng.randrange(1000),
                    draw_wait(rng),
                ),
            ),
            (1, lambda: ("sync", rng.choice(KINDS), values())),
        ],
    )


# -- running calls -----------------------------------------------------------


class Case:
    def __init__(self, pool: rlpool.AsyncEnvPool) -> None:
        self.pool = pool
        self.model = Model()

    def run(self, call: tuple[Any, ...], what: str) -> None:
        name = call[0]
        if name == "send":
            self.send(*call[1:], what=what)
        elif name == "recv":
            self.recv(*call[1:], what=what)
        elif name == "recv_env":
            self.recv_env(*call[1:], what=what)
        else:
            self.sync(*call[1:], what=what)
        assert self.pool.in_flight() == self.model.in_flight(), f"{what}: the envs in flight"

    def send(self, kind: str, aim: tuple[Any, ...], values: list[int], with_td: bool, what: str):
        td_needed = kind != "reset" or with_td or (aim[0] == "entry" and aim[2] != "array")

        def batch(rows: int) -> TensorDict | None:
            if kind == "reset":
                return TensorDict({}, batch_size=(rows,)) if td_needed else None
            td = TensorDict(
                {"action": np.array(values[:rows], np.int64).reshape(rows, 1)},
                batch_size=(rows,),
            )
            return td

        env_index: Any = None
        per_env = False
        if aim[0] == "all":
            td = batch(N)
            expected = self.model.resolve(list(range(N)))
        elif aim[0] == "env":
            _, env, leading = aim
            per_env = True
            env_index = env
            if kind == "reset":
                td = TensorDict({}, batch_size=(1,) if leading else ()) if td_needed else None
            elif leading:
                td = batch(1)
            else:
                td = TensorDict({"action": np.array(values[:1], np.int64)})
            in_range = env < N
            expected = (self.model.busy([env]) or [(env, 0)]) if in_range else out_of_range(env)
        elif aim[0] == "envs":
            _, envs, extra_row = aim
            rows = len(envs) + int(extra_row)
            td = batch(rows)
            env_index = list(envs)
            if extra_row and td_needed:
                expected = Expected(
                    rlpool.InvalidArgument,
                    f"the target names {len(envs)} envs but the tensordict has batch size [{rows}]",
                )
            else:
                expected = self.model.resolve(envs)
        else:
            _, envs, how = aim
            td = batch(len(envs))
            if how == "array":
                env_index = np.array(envs, dtype=np.int64)
            else:
                assert td is not None
                td["env_index"] = np.array(envs, dtype=np.int64 if how == "int64" else np.int32)
            expected = self.model.resolve(envs)

        send = {
            "reset": self.pool.async_reset_send,
            "step": self.pool.async_step_send,
            "step_and_maybe_reset": self.pool.async_step_and_maybe_reset_send,
        }[kind]
        if isinstance(expected, Expected):
            with pytest.raises(rlpool.PoolError) as info:
                send(td, env_index=env_index)
            check_error(info.value, expected, what)
            return
        send(td, env_index=env_index)
        for env, row in expected:
            expect = self.model.advance(env, kind, values[row])
            self.model.slots[env] = Slot(kind, per_env, expect)

    def recv(self, kind, min_count, max_count, wait, what: str) -> None:
        if kind is None:
            kinds = [s.kind for s in self.model.slots if s is not None and not s.per_env]
            kind = kinds[0] if kinds else "step"
        candidates = self.model.batch(kind)
        in_flight = len(candidates)
        min_get = resolve_count(min_count, in_flight)
        max_get = None if max_count is None else resolve_count(max_count, in_flight)
        wait_name, timeout = wait
        what = f"{what} as min_get={min_get}, max_get={max_get}, timeout={timeout} of {kind}"
        expected = None
        if min_get < 1:
            expected = Expected(rlpool.InvalidArgument, "min_get must be at least 1")
        elif max_get is not None and max_get < min_get:
            expected = Expected(
                rlpool.InvalidArgument, f"max_get ({max_get}) must be at least min_get ({min_get})"
            )
        elif min_get > in_flight:
            expected = Expected(
                rlpool.InvalidArgument,
                f"cannot wait for {min_get} {kind} results: only {in_flight} envs are in flight "
                f"for {kind}",
            )
        receive = {
            "reset": self.pool.async_reset_recv,
            "step": self.pool.async_step_recv,
            "step_and_maybe_reset": self.pool.async_step_and_maybe_reset_recv,
        }[kind]
        result, err = attempt(receive, min_get=min_get, max_get=max_get, timeout=timeout)
        if isinstance(err, rlpool.Timeout) and expected is None:
            assert wait_name in ("poll", "short"), f"{what}: {err!r}"
            assert (err.op, err.min_get) == (kind, min_get), f"{what}: {err!r}"
            assert err.ready < min_get, f"{what}: timed out with {err.ready} ready"
            return
        if err is not None:
            assert expected is not None, f"{what}: the receive must succeed: {err!r}"
            check_error(err, expected, what)
            return
        assert expected is None, f"{what}: expected {expected}, got a result"
        step, root = result if kind == "step_and_maybe_reset" else (result, result)
        main = step if kind != "reset" else root
        envs = envs_of(main)
        assert set(envs) <= set(candidates), f"{what}: {envs} not among {candidates}"
        limit = min(max_get if max_get is not None else in_flight, in_flight)
        assert min_get <= len(envs) <= limit, f"{what}: {len(envs)} results"
        if wait_name == "generous":
            assert len(envs) == limit, f"{what}: a generous deadline"
        if kind == "step_and_maybe_reset":
            assert envs_of(root) == envs, f"{what}: the roots' envs"
        steps, roots = rows(step), rows(root)
        for j, env in enumerate(envs):
            slot = self.model.slots[env]
            assert slot is not None
            check(kind, steps[j], roots[j], env, slot.expect, what)
            self.model.slots[env] = None

    def recv_env(self, pick, nth, wait, what: str) -> None:
        if pick is None:
            in_flight = self.model.in_flight()
            if in_flight:
                env = in_flight[nth % len(in_flight)]
                slot = self.model.slots[env]
                assert slot is not None
                kind = slot.kind
            else:
                kind, env = "step", 0
        else:
            kind, env = pick
        wait_name, timeout = wait
        what = f"{what} as env {env}, timeout={timeout} of {kind}"
        expected = None
        if env >= N:
            expected = out_of_range(env)
        elif (slot := self.model.slots[env]) is None or slot.kind != kind:
            expected = Expected(rlpool.InvalidArgument, f"env {env} has no {kind} in flight")
        receive = {
            "reset": self.pool.async_reset_recv,
            "step": self.pool.async_step_recv,
            "step_and_maybe_reset": self.pool.async_step_and_maybe_reset_recv,
        }[kind]
        result, err = attempt(receive, env_index=env, timeout=timeout)
        if isinstance(err, rlpool.Timeout) and expected is None:
            assert wait_name in ("poll", "short"), f"{what}: {err!r}"
            assert (err.op, err.env) == (kind, env), f"{what}: {err!r}"
            return
        if err is not None:
            assert expected is not None, f"{what}: the receive must succeed: {err!r}"
            check_error(err, expected, what)
            return
        assert expected is None, f"{what}: expected {expected}, got a result"
        step, root = result if kind == "step_and_maybe_reset" else (result, result)
        slot = self.model.slots[env]
        assert slot is not None
        check(kind, step, root, env, slot.expect, what)
        self.model.slots[env] = None

    def sync(self, kind: str, values: list[int], what: str) -> None:
        in_flight = self.model.in_flight()
        td = TensorDict({"action": np.array(values[:N], np.int64).reshape(N, 1)}, batch_size=(N,))
        call = {
            "reset": lambda: self.pool.reset(),
            "step": lambda: self.pool.step(td),
            "step_and_maybe_reset": lambda: self.pool.step_and_maybe_reset(td),
        }[kind]
        if in_flight:
            with pytest.raises(rlpool.Busy) as info:
                call()
            check_error(
                info.value, Expected(rlpool.Busy, "still in flight", tuple(in_flight)), what
            )
            return
        result = call()
        step, root = result if kind == "step_and_maybe_reset" else (result, result)
        main = step if kind != "reset" else root
        assert envs_of(main) == list(range(N)), f"{what}: every env"
        if kind == "step_and_maybe_reset":
            assert envs_of(root) == list(range(N)), f"{what}: every env's root"
        steps, roots = rows(step), rows(root)
        for env in range(N):
            expect = self.model.advance(env, kind, values[env])
            check(kind, steps[env], roots[env], env, expect, what)

    def drain(self) -> None:
        """Takes every result still in flight (each must come, with its
        values), then steps every env once more: nothing was lost or
        counted twice."""
        for env in self.model.in_flight():
            slot = self.model.slots[env]
            assert slot is not None
            self.recv_env((slot.kind, env), 0, ("generous", GENEROUS), "drain")
            assert self.model.slots[env] is None, f"drain: env {env}"
        self.sync("step", [1] * (N + 2), "final step")
        assert self.pool.in_flight() == []


@pytest.mark.parametrize("stack", STACKS)
def test_the_pool_follows_the_model(pools, config, stack):
    """Random sequences of calls on one pool, each checked against the
    model, drained at the end of each sequence."""
    workers: dict[str, Any]
    if config.procs:
        workers = {"envs_per_worker": 2 if stack == "dense" else 4}
    else:
        workers = {"num_threads": 1 if stack == "dense" else 2}
    pool = pools(
        ["CountingEnv"] * N,
        create_env_kwargs=counting_kwargs(STARTS, MAX_STEPS),
        **config.options(stack=stack, **workers),
    )
    case = Case(pool)
    base = zlib.crc32(f"{config}/{stack}".encode())
    for sequence in range(SEQUENCES):
        seed = base + sequence
        rng = random.Random(seed)
        calls = [draw_call(rng) for _ in range(rng.randint(1, MAX_CALLS))]
        for i, call in enumerate(calls):
            what = f"seed {seed}, call {i} {call!r} with {case.model.in_flight()} in flight"
            case.run(call, what)
        case.drain()
