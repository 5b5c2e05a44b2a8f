"""What the TorchRL suite's modules share: the pool configurations."""

from __future__ import annotations

from typing import Any

CONFIGS: list[dict[str, Any]] = [
    {"backend": "threading", "exchange": "queue"},
    {"backend": "multiprocessing", "exchange": "queue", "envs_per_worker": 2},
    {"backend": "multiprocessing", "exchange": "shm", "envs_per_worker": 2},
]
"""The keyword arguments of each configuration: threads (which have no
shared-memory exchange), and processes with each exchange. Two envs per
worker process: each worker imports torch (seconds of CPU), and the
per-worker paths are the same with one env or several."""

PROC_CONFIGS = CONFIGS[1:]
"""The process configurations only."""


def config_id(config: dict[str, Any]) -> str:
    """A test id for a configuration: ``threading-queue``, ..."""
    return f"{config['backend']}-{config['exchange']}"
