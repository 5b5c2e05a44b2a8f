"""What the tests of ``rlpool.ray`` share: counter envs whose observations
name their env, actions, and readers of batches.

Env ``i`` is a CountingEnv starting at ``100 * i``; a test sends env ``i``
the action ``i + 1``, so after ``k`` steps its observation is ``100 * i +
k * (i + 1)``: a result that went to the wrong env or actor, was lost or
counted twice shows in the counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import rlpool
from rlpool import LazyStackedTensorDict, TensorDict

NEVER_DONE = 1 << 30

# A deadline that results which are coming always meet.
PATIENCE = 30.0


def counting_kwargs(n: int, max_steps: int = NEVER_DONE) -> list[dict[str, Any]]:
    """CountingEnv keywords: env ``i`` starts at ``100 * i``."""
    return [{"start_val": 100 * i, "max_steps": max_steps} for i in range(n)]


def actions(envs: Sequence[int]) -> TensorDict:
    """The actions of ``envs``: env ``i`` gets ``i + 1``."""
    values = np.asarray([e + 1 for e in envs], dtype=np.int64).reshape(len(envs), 1)
    return TensorDict({"action": values}, batch_size=(len(envs),))


def expected(env: int, steps: int) -> int:
    """Env ``env``'s count after ``steps`` steps of :func:`actions`."""
    return 100 * env + steps * (env + 1)


def envs_of(batch: Any) -> list[int]:
    """A batch's global envs, checked sorted and int64."""
    if isinstance(batch, LazyStackedTensorDict):
        envs = [int(np.asarray(t["env_index"]).reshape(-1)[0]) for t in batch.tensordicts]
    else:
        column = np.asarray(batch["env_index"])
        assert column.dtype == np.int64, column.dtype
        envs = [int(e) for e in column.reshape(-1)]
    assert envs == sorted(set(envs)), f"a batch is sorted by env without repeats: {envs}"
    return envs


def counts_of(batch: Any, key: Any = ("next", "observation")) -> list[int]:
    """The count at ``key`` of each row."""
    if isinstance(batch, LazyStackedTensorDict):
        return [int(np.asarray(t[key]).reshape(-1)[0]) for t in batch.tensordicts]
    return [int(v) for v in np.asarray(batch[key]).reshape(len(batch), -1)[:, 0]]


def check_counts(batch: Any, steps: dict[int, int]) -> None:
    """Each row's count is its env's after ``steps[env]`` steps."""
    envs = envs_of(batch)
    assert counts_of(batch) == [expected(e, steps[e]) for e in envs], (envs, counts_of(batch))


def writable(batch: Any) -> bool:
    """Whether every array of a dense batch is writable (the caller's own)."""
    return all(np.asarray(v).flags.writeable for v in batch.values(True, True))


def pool_error(call: Any, *args: Any, **kwargs: Any) -> rlpool.PoolError:
    """The pool error ``call`` raises (fails if it raises none)."""
    try:
        call(*args, **kwargs)
    except rlpool.PoolError as err:
        return err
    raise AssertionError(f"{call.__name__} raised no pool error")
