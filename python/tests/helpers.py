"""Helpers shared by the test files: the backend configurations the suite
runs on, builders of actions, readers of batches, and what the test envs
take and say.

The envs are mostly CountingEnvs: env ``i``'s observation (an ``int32`` of
shape ``(1,)``) starts at its ``start_val`` and each step adds the action
(an ``int64`` of shape ``(1,)``); done once the count is above
``max_steps``. A result that went to the wrong env, was lost or was counted
twice shows in the counts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import rlpool
from rlpool import LazyStackedTensorDict, TensorDict

# A CountingEnv that is never done in a test.
NEVER_DONE = 1 << 30

# A deadline that results which are coming always meet (a receive that
# should succeed waits at most this long, so that a bug fails instead of
# hanging).
PATIENCE = 20.0

# The three stack modes; most tests run in each, since the pool builds
# dense and lazy batches on different paths.
STACKS = ("dense", "maybe_dense", "lazy")

# The registry name of the test envs' faulty counter.
FAULTY = "FaultyCounter"

# Env i of the shared counter pools (conftest's ``counters``) starts at
# STARTS[i], far apart so that a count names its env.
STARTS = (0, 100, 200, 300)


# Envs per worker process in the configurations' pools (see Config.options).
ENVS_PER_WORKER = 2


@dataclass(frozen=True)
class Config:
    """Where a pool runs: worker threads, or worker processes with the
    queue or the shared-memory exchange."""

    name: str

    @property
    def backend(self) -> str:
        return "threading" if self.name == "threading" else "multiprocessing"

    @property
    def procs(self) -> bool:
        """Whether envs run in worker processes."""
        return self.name != "threading"

    @property
    def exchange(self) -> str:
        return "auto" if self.name == "threading" else self.name

    def options(self, **overrides: Any) -> dict[str, Any]:
        """The pool's keyword arguments for this configuration, with
        ``overrides``. Worker processes take two envs each unless told
        otherwise: a worker costs an interpreter's start, and envs that
        share a worker must not wait on each other."""
        options: dict[str, Any] = {"backend": self.backend, "exchange": self.exchange}
        if self.procs:
            options["envs_per_worker"] = ENVS_PER_WORKER
        options.update(overrides)
        return options

    def worker_of(self, env: int) -> int | None:
        """The worker of env ``env`` with :meth:`options`' default
        (``None`` with threads)."""
        return env // ENVS_PER_WORKER if self.procs else None

    def __str__(self) -> str:
        return self.name


CONFIGS = (Config("threading"), Config("queue"), Config("shm"))
PROC_CONFIGS = (Config("queue"), Config("shm"))


def counting_kwargs(
    starts: Sequence[int], max_steps: int | Sequence[int] = NEVER_DONE
) -> list[dict[str, Any]]:
    """CountingEnv keywords, env ``i`` starting at ``starts[i]``."""
    if isinstance(max_steps, int):
        max_steps = [max_steps] * len(starts)
    return [{"start_val": s, "max_steps": m} for s, m in zip(starts, max_steps)]


def faulty_kwargs(fail_at: int, fault: str, **more: Any) -> dict[str, Any]:
    """FaultyCounter keywords: the ``fail_at``-th step call (from 1) fails
    with ``fault`` (0: never)."""
    return {"fail_at": fail_at, "fault": fault, **more}


def fault_message(fault: str, call: int) -> str:
    """What a FaultyCounter's failure at step (or reset) ``call`` says."""
    return {
        "panic": f"deliberate panic at step {call}",
        "error": f"deliberate error at step {call}",
        "error_on_reset": f"deliberate error at reset {call}",
    }[fault]


class Release:
    """What ends a FaultyCounter's held step (``fault="hold"``): a file the
    env waits to see, in any process. Created on :meth:`release` and when
    the ``with`` block ends, so that no env stays held past its test."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / f"release-{os.getpid()}-{time.monotonic_ns()}"

    def kwargs(self, fail_at: int = 1, hold_ms: int = 15_000) -> dict[str, Any]:
        """FaultyCounter keywords for an env whose ``fail_at``-th step lasts
        until released (at most ``hold_ms``)."""
        return faulty_kwargs(fail_at, "hold", release=str(self.path), hold_ms=hold_ms)

    def release(self) -> None:
        self.path.write_bytes(b"released")

    def __enter__(self) -> Release:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def actions(values: Sequence[int]) -> TensorDict:
    """A batch of CountingEnv actions, one row per value: batch size
    ``(len,)``, ``"action"`` an int64 array of shape ``(len, 1)``."""
    array = np.asarray(values, dtype=np.int64).reshape(len(values), 1)
    return TensorDict({"action": array}, batch_size=(len(values),))


def action(value: int) -> TensorDict:
    """One env's action: batch size ``()``, ``"action"`` of shape ``(1,)``."""
    return TensorDict({"action": np.array([value], dtype=np.int64)}, batch_size=())


def rows(batch: Any) -> list[TensorDict]:
    """The per-env tensordicts of a batch, dense or lazy."""
    if isinstance(batch, LazyStackedTensorDict):
        return list(batch.tensordicts)
    assert isinstance(batch, TensorDict), f"a batch is a TensorDict, got {type(batch)}"
    return batch.unbind(0)


def item(td: TensorDict, key: Any) -> Any:
    """The single element of the array at ``key``, as a Python scalar."""
    array = np.asarray(td[key])
    assert array.size == 1, f"{key!r} holds {array.shape}, not one element"
    return array.reshape(-1)[0].item()


def env_of(td: TensorDict) -> int:
    """The ``"env_index"`` of one env's result (or one row of a batch)."""
    array = np.asarray(td["env_index"])
    assert array.dtype == np.int64, f"env_index has dtype {array.dtype}"
    assert array.size == 1, f"one env's env_index, got {array.shape}"
    return int(array.reshape(-1)[0])


def envs_of(batch: Any) -> list[int]:
    """A batch's envs: checks that its ``"env_index"`` is sorted without
    duplicates, int64, one per row, and carried by each row."""
    parts = rows(batch)
    if isinstance(batch, TensorDict):
        column = np.asarray(batch["env_index"])
        assert column.dtype == np.int64, f"env_index has dtype {column.dtype}"
        assert column.shape == (len(batch),), f"env_index of shape {column.shape}"
        envs = [int(e) for e in column]
    else:
        envs = [env_of(part) for part in parts]
    assert len(envs) == len(parts), "one env_index per row"
    assert all(a < b for a, b in zip(envs, envs[1:])), f"a batch is sorted by env: {envs}"
    for part, env in zip(parts, envs):
        assert env_of(part) == env, "each row carries its env_index"
    return envs


def sleepers_kwargs(step_us: Sequence[int]) -> list[dict[str, Any]]:
    """LatencyEnv keywords: env ``i`` sleeps ``step_us[i]`` microseconds a
    step (its observation holds its step count)."""
    return [{"step_us": us, "mode": "sleep"} for us in step_us]


def counts_of(batch: Any, key: Any = ("next", "observation")) -> list[int]:
    """The counter at ``key`` of each row of a batch."""
    return [int(item(part, key)) for part in rows(batch)]


def recv_all(pool: rlpool.AsyncEnvPool, n: int, op: str = "step") -> Any:
    """A receive of exactly ``n`` results of ``op``, waiting at most
    :data:`PATIENCE`."""
    receive = {
        "step": pool.async_step_recv,
        "reset": pool.async_reset_recv,
        "step_and_maybe_reset": pool.async_step_and_maybe_reset_recv,
    }[op]
    return receive(min_get=n, max_get=n, timeout=PATIENCE)


def children() -> set[int]:
    """The ids of this process's child processes (zombies included: a child
    that was not reaped is still one)."""
    me = os.getpid()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name is in parentheses and may hold anything.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me:
            found.add(int(entry))
    return found


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended: no ``/proc`` entry, or a zombie
    that is not ours to reap (a grandchild whose parent died)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def reaped(pid: int) -> bool:
    """Whether child ``pid`` is gone and reaped (no ``/proc`` entry)."""
    return not os.path.exists(f"/proc/{pid}")


def wait_until(predicate: Any, patience: float = 10.0) -> bool:
    """Polls ``predicate`` until it holds or ``patience`` seconds pass."""
    deadline = time.monotonic() + patience
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)


def dev_shm() -> set[str]:
    """The entries of ``/dev/shm`` that carry rlpool's name (the pool's
    shared memory is a memfd: it must add none)."""
    try:
        return {name for name in os.listdir("/dev/shm") if "rlpool" in name.lower()}
    except OSError:
        return set()


def rlpool_memfds() -> list[str]:
    """This process's open descriptors of the pools' memfds
    (``memfd:rlpool...``)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/memfd:rlpool"):
            found.append(target)
    return found


def attempt(call: Any, *args: Any, **kwargs: Any) -> tuple[Any, rlpool.PoolError | None]:
    """``(result, None)``, or ``(None, error)`` if the call raised a pool
    error: for calls whose outcome depends on timing, where either is
    allowed and checked afterwards."""
    try:
        return call(*args, **kwargs), None
    except rlpool.PoolError as err:
        return None, err
