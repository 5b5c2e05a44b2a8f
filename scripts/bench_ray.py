"""The figures of docs/scale-out.md: rlpool's pool alone, on two Ray actors
on one node, and on one actor on each of two local nodes, on the same envs.

Run from the workspace root with the environment of `cargo xtask test-ray`
(Ray installed, rlpool built from the tree):

    target/ray/venv/bin/python scripts/bench_ray.py [--seconds 5] [--envs 16]

For each env (rlpool's CartPole-v1, a LatencyEnv of 50 us a step) and each
placement, it runs a synchronous loop (``step`` on every env) and an
asynchronous one (receive half of the envs, send those their next actions)
for the given seconds, and prints env-steps per second and the time per
batch; the Ray hop's cost per batch is the placement's time per
synchronous batch less the pool's own. The cluster is the tests' (a head
and a second node on the loopback), started and stopped by the script.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python" / "tests_ray"))

from conftest import ON_A, ON_B, RAY_ENV, Cluster
from loopback_ray import keep_loopback

import rlpool
import rlpool.ray

os.environ.update(RAY_ENV)

ENVS = {
    "CartPole-v1": ("CartPole-v1", {}),
    "LatencyEnv 50 us": ("LatencyEnv", {"step_us": 50, "mode": "spin"}),
}


def actions(n: int) -> rlpool.TensorDict:
    return rlpool.TensorDict({"action": np.ones((n, 1), dtype=np.int64)}, batch_size=(n,))


def sync_loop(pool: Any, n: int, seconds: float) -> tuple[float, float]:
    pool.reset()
    td = actions(n)
    pool.step(td)
    steps, batches = 0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        pool.step(td)
        steps += n
        batches += 1
    elapsed = time.perf_counter() - start
    return steps / elapsed, elapsed / batches


def async_loop(pool: Any, n: int, seconds: float) -> tuple[float, float]:
    pool.reset()
    half = n // 2
    pool.async_step_send(actions(n))
    steps, batches = 0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        out = pool.async_step_recv(min_get=half, max_get=half, timeout=30.0)
        envs = [int(e) for e in out["env_index"]]
        pool.async_step_send(actions(len(envs)), env_index=envs)
        steps += len(envs)
        batches += 1
    elapsed = time.perf_counter() - start
    pool.async_step_recv(min_get=len(pool.in_flight()), timeout=30.0)
    return steps / elapsed, elapsed / batches


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--envs", type=int, default=16)
    args = parser.parse_args()
    n = args.envs
    # Two worker processes in all, whatever the placement.
    common = {"backend": "multiprocessing", "exchange": "shm"}
    placements = {
        "one pool (no Ray)": None,
        "two actors, one node": [ON_A, ON_A],
        "one actor on each of two nodes": [ON_A, ON_B],
    }
    keep_loopback()
    import ray

    cluster = Cluster()
    rows = []
    try:
        cluster.start_head()
        deadline = time.monotonic() + 120
        while True:
            try:
                ray.init(address=cluster.address, log_to_driver=False)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        cluster.start_node_b()
        cluster.wait_nodes(ray, 2)
        for env_name, (name, kwargs) in ENVS.items():
            for placement, options in placements.items():
                if options is None:
                    pool: Any = rlpool.AsyncEnvPool(
                        [name] * n, create_env_kwargs=kwargs, envs_per_worker=n // 2, **common
                    )
                else:
                    pool = rlpool.ray.AsyncEnvPool(
                        [name] * n,
                        num_actors=2,
                        actor_options=options,
                        create_env_kwargs=kwargs,
                        envs_per_worker=n // 2,
                        **common,
                    )
                try:
                    sync_rate, sync_batch = sync_loop(pool, n, args.seconds)
                    async_rate, async_batch = async_loop(pool, n, args.seconds)
                finally:
                    pool.shutdown()
                row = {
                    "env": env_name,
                    "placement": placement,
                    "sync_steps_per_s": round(sync_rate),
                    "sync_ms_per_batch": round(sync_batch * 1e3, 3),
                    "async_steps_per_s": round(async_rate),
                    "async_ms_per_batch": round(async_batch * 1e3, 3),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        ray.shutdown()
        cluster.stop()
    print(
        json.dumps(
            {
                "envs": n,
                "seconds": args.seconds,
                "machine": f"{os.cpu_count()} cores, {platform.platform()}",
                "load_at_end": os.getloadavg(),
            }
        )
    )


if __name__ == "__main__":
    main()
