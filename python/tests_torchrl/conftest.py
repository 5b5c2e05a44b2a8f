"""Fixtures of the TorchRL suite (``cargo xtask test-torchrl``; never part of
``cargo xtask test-all``, whose environment has no torch): the pool
configurations every ported test runs on, and pools that always shut down."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import CONFIGS, PROC_CONFIGS, config_id

from rlpool.torchrl import AsyncEnvPool


@pytest.fixture(params=CONFIGS, ids=config_id)
def config(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The keyword arguments of each configuration (backend, exchange)."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=PROC_CONFIGS, ids=config_id)
def proc_config(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The process configurations (queue, shm)."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def make_pool() -> Iterator[Callable[..., AsyncEnvPool]]:
    """A factory of :class:`rlpool.torchrl.AsyncEnvPool` whose pools are
    shut down after the test, whatever happens."""
    pools: list[Any] = []

    def make(*args: Any, **kwargs: Any) -> AsyncEnvPool:
        pool = AsyncEnvPool(*args, **kwargs)
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close(raise_if_closed=False)
