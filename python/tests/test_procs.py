"""What only worker processes have: workers that are this interpreter run
as ``python -m rlpool._worker``, a worker killed from outside
(``WorkerDied`` naming it and its envs, the other workers' envs go on),
every worker reaped on shutdown, on drop and after a failed start, workers
that die with their parent, the exchange choice and its statistics, CPU
affinity, several envs per worker, and a stuck env among others. On both
exchanges."""

from __future__ import annotations

import gc
import os
import resource
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from helpers import (
    FAULTY,
    PATIENCE,
    actions,
    attempt,
    children,
    counting_kwargs,
    dev_shm,
    envs_of,
    faulty_kwargs,
    gone,
    item,
    reaped,
    wait_until,
)

import rlpool

pytestmark = pytest.mark.timeout(90)


def all_reaped(pids, patience=5.0):
    return wait_until(lambda: all(reaped(pid) for pid in pids), patience)


def test_workers_are_this_interpreter(pools, proc_config):
    """Each worker is ``sys.executable -m rlpool._worker``, started afresh
    (never forked), a child of this process."""
    pool = pools(["CountingEnv"] * 2, backend="multiprocessing", exchange=proc_config.exchange)
    pids = pool.worker_pids
    assert len(pids) == 2, "one env per worker by default"
    assert set(pids) <= children()
    for pid in pids:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode() for a in f.read().split(b"\0") if a]
        assert argv[:3] == [sys.executable, "-m", "rlpool._worker"], argv


def test_a_killed_worker_is_an_error_never_a_hang(pools, proc_config):
    """A worker killed with SIGKILL: the receives that concern it (without
    a deadline too) raise ``WorkerDied`` naming the worker and its envs, at
    once; the other worker's envs go on; its envs keep failing at once;
    shutdown reaps everyone."""
    shm_before = dev_shm()
    pool = pools(
        ["CountingEnv"] * 4,
        create_env_kwargs={"max_steps": 1000},
        **proc_config.options(envs_per_worker=2),
    )
    pool.reset()
    pids = pool.worker_pids
    assert len(pids) == 2
    os.kill(pids[0], signal.SIGKILL)
    pool.async_step_send(actions([1] * 4))
    start = time.monotonic()
    died = []
    ok = []
    while len(died) + len(ok) < 4:
        batch, err = attempt(pool.async_step_recv)
        if err is None:
            ok += envs_of(batch)
        else:
            assert isinstance(err, rlpool.WorkerDied), repr(err)
            assert (err.worker, err.envs) == (0, [0, 1]), err
            assert "signal" in err.reason.lower() or "9" in err.reason, err.reason
            assert "worker 0" in str(err)
            died.append(err)
    elapsed = time.monotonic() - start
    assert len(died) == 2, "one error per env of the dead worker"
    assert sorted(ok) == [2, 3]
    assert elapsed < 5.0, f"reported after {elapsed:.2f} s"
    pool.async_step_send(actions([1, 1]), env_index=[1, 3])
    with pytest.raises(rlpool.WorkerDied, match=r"worker 0 \(envs \[0, 1\]\) died"):
        pool.async_step_recv(env_index=1, timeout=PATIENCE)
    out = pool.async_step_recv(env_index=3, timeout=PATIENCE)
    assert item(out, ("next", "observation")) == 2
    pool.shutdown()
    assert all_reaped(pids), f"workers left: {pids}"
    assert dev_shm() == shm_before


def test_a_worker_killed_mid_step_is_reported_at_once(pools, proc_config):
    """A worker killed in the middle of a long step: the receive waiting
    for it, with no deadline, raises ``WorkerDied`` within a second of the
    kill."""
    pool = pools(
        ["LatencyEnv"],
        create_env_kwargs={"step_us": 30_000_000, "mode": "sleep"},
        **proc_config.options(),
    )
    pool.reset()
    pool.async_step_send(actions([0]))
    pid = pool.worker_pids[0]
    killed = {}

    def kill() -> None:
        time.sleep(0.05)
        killed["at"] = time.monotonic()
        os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    with pytest.raises(rlpool.WorkerDied) as info:
        pool.async_step_recv()
    reported = time.monotonic()
    killer.join()
    assert info.value.worker == 0
    assert info.value.envs == [0]
    latency = reported - killed["at"]
    assert latency < 1.0, f"reported {latency:.3f} s after the kill"


@pytest.mark.parametrize("how", ["shutdown", "drop"])
def test_shutdown_and_drop_reap_every_worker(proc_config, how):
    """Shutdown and drop (with results in flight) reap every worker;
    nothing appears under /dev/shm."""
    shm_before = dev_shm()
    pool = rlpool.AsyncEnvPool(["CartPole-v1"] * 4, **proc_config.options(envs_per_worker=2))
    pids = pool.worker_pids
    try:
        pool.reset()
        pool.async_step_send(actions([1] * 4))
        assert all(not gone(pid) for pid in pids)
    finally:
        if how == "shutdown":
            start = time.monotonic()
            pool.shutdown()
            assert time.monotonic() - start < 5.0
        del pool
        gc.collect()
    assert all_reaped(pids), f"workers left: {pids}"
    assert dev_shm() == shm_before


DOOMED = """
import os, signal, sys
import rlpool
pool = rlpool.AsyncEnvPool(["CountingEnv"] * 2, backend="multiprocessing", exchange=sys.argv[2])
pool.reset()
print("worker pids:", *pool.worker_pids, flush=True)
how = sys.argv[1]
if how == "abort":
    os.abort()
if how == "sigkill":
    os.kill(os.getpid(), signal.SIGKILL)
if how == "exit":
    os._exit(3)
raise RuntimeError("deliberate failure with the pool alive")
"""


def no_core_dump() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


@pytest.mark.parametrize("how", ["exception", "exit", "abort", "sigkill"])
def test_workers_die_with_their_parent(proc_config, how):
    """A parent that fails with the pool alive (an uncaught exception,
    ``os._exit``, an abort, a SIGKILL: no cleanup at all) leaves no worker
    behind."""
    done = subprocess.run(
        [sys.executable, "-c", DOOMED, how, proc_config.exchange],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=no_core_dump,
        check=False,
    )
    assert done.returncode != 0, f"{how}: the parent was to fail"
    lines = [line for line in done.stdout.splitlines() if line.startswith("worker pids:")]
    assert lines, f"no pids in {done.stdout!r} {done.stderr!r}"
    pids = [int(p) for p in lines[0].split(":", 1)[1].split()]
    assert len(pids) == 2
    assert wait_until(lambda: all(gone(pid) for pid in pids), 10.0), f"{how}: left {pids}"


def test_a_failed_start_names_the_env_and_reaps_the_workers(pools, proc_config):
    """A worker whose env cannot be built (a bad keyword, a constructor that
    panics) is a ``StartError`` naming the env and worker; the workers
    started are reaped."""
    before = children()
    shm_before = dev_shm()
    with pytest.raises(rlpool.StartError) as info:
        pools(
            ["CountingEnv"] * 4,
            create_env_kwargs=[{}, {}, {}, {"no_such_kwarg": 1}],
            **proc_config.options(envs_per_worker=2),
        )
    text = str(info.value)
    assert text.startswith("env 3 (CountingEnv, worker 1)"), text
    assert "no_such_kwarg" in text, text
    with pytest.raises(rlpool.StartError) as info:
        pools(["CountingEnv", "PanicsWhenBuilt"], **proc_config.options())
    assert "(its constructor panicked)" in str(info.value)
    assert "deliberate panic in a constructor" in str(info.value)
    assert wait_until(lambda: children() <= before, 5.0), children() - before
    assert dev_shm() == shm_before


def test_exchange_choice_and_report(pools):
    """Shm is refused for envs whose data differ (naming the key and env);
    ``"auto"`` falls back to the queue and says why; with envs that allow
    it, ``"auto"`` is shm."""
    procs = {"backend": "multiprocessing", "stack": "lazy"}
    with pytest.raises(rlpool.StartError) as info:
        pools(["CartPole-v1", "Pendulum-v1"], exchange="shm", **procs)
    text = str(info.value)
    assert '"action"' in text, text
    assert "env 1" in text, text
    pool = pools(["CartPole-v1", "Pendulum-v1"], exchange="auto", **procs)
    assert pool.resolved_exchange == "queue"
    assert "env 1" in pool.exchange_reason
    assert pool.stats() is None
    pool.reset()
    pool = pools(["CartPole-v1"] * 2, backend="multiprocessing", exchange="auto")
    assert pool.resolved_exchange == "shm"
    assert pool.exchange_reason is None
    pool = pools(["CartPole-v1"] * 2, backend="multiprocessing", exchange="queue")
    assert pool.resolved_exchange == "queue"


def test_deadline_batching_statistics(pools):
    """TorchRL's deadline batching with statistics on the shm exchange: a
    poll (``max_get=4, timeout=0``) takes the one reset ready, a receive of
    exactly three takes the rest: two batches, four items, a fill ratio of
    4/7, half the batches partial, and no consumer busy time (resets wait
    for no action). ``reset=True`` clears the figures after reading."""
    pool = pools(["CountingEnv"] * 4, backend="multiprocessing", exchange="shm")
    pool.reset()
    pool.stats(reset=True)
    pool.async_reset_send(env_index=[1])
    while True:
        try:
            first = pool.async_reset_recv(min_get=1, max_get=4, timeout=0)
            break
        except rlpool.Timeout:
            time.sleep(0)  # A poll that finds nothing ready is no batch.
    assert envs_of(first) == [1]
    pool.async_reset_send(env_index=[0, 2, 3])
    rest = pool.async_reset_recv(min_get=3, max_get=3, timeout=10.0)
    assert envs_of(rest) == [0, 2, 3]
    stats = pool.stats(reset=True)
    assert stats is not None
    assert stats["batches"] == 2
    assert stats["items"] == 4
    assert stats["avg_batch_size"] == 2.0
    assert stats["batch_fill_ratio"] == pytest.approx(4 / 7, abs=1e-9)
    assert stats["partial_batch_fraction"] == 0.5
    assert stats["consumer_busy_fraction"] == 0.0
    assert pool.stats()["batches"] == 0


def test_affinity_is_applied(pools, proc_config):
    """A worker pinned to a CPU (by a list of sets or a function of the
    worker) runs its envs there, in its own process; bad sets are refused
    before anything starts."""
    first = min(os.sched_getaffinity(0))
    for affinity in ([[first], [first]], lambda w: [first]):
        pool = pools(
            ["WhereAmI"] * 2, worker_affinity=affinity, **proc_config.options(envs_per_worker=1)
        )
        root = pool.reset()
        obs = np.asarray(root["observation"])
        pids = pool.worker_pids
        assert obs.dtype == np.int64
        assert obs.tolist() == [[1, first, pids[0]], [1, first, pids[1]]]
    one_each = proc_config.options(envs_per_worker=1)
    with pytest.raises(rlpool.StartError, match="1 CPU sets for 2 workers"):
        pools(["WhereAmI"] * 2, worker_affinity=[[first]], **one_each)
    with pytest.raises(rlpool.StartError, match="worker 1: empty CPU set"):
        pools(["WhereAmI"] * 2, worker_affinity=[[first], []], **one_each)


def test_workers_are_spread_unless_affinity_is_false(pools, proc_config):
    """By default the worker processes get a group of CPUs each (one when
    they are as many as the CPUs); worker_affinity=False leaves them every
    CPU, and True is no CPU list."""
    cpus = sorted(os.sched_getaffinity(0))
    one_each = proc_config.options(envs_per_worker=1)
    obs = np.asarray(pools(["WhereAmI"] * 2, **one_each).reset()["observation"])
    if len(cpus) >= 2:
        half = len(cpus) // 2
        assert obs[:, :2].tolist() == [[half, cpus[0]], [len(cpus) - half, cpus[half]]]
    else:
        assert obs[:, :2].tolist() == [[1, cpus[0]]] * 2
    pool = pools(["WhereAmI"] * 2, worker_affinity=False, **one_each)
    obs = np.asarray(pool.reset()["observation"])
    assert obs[:, :2].tolist() == [[len(cpus), cpus[0]]] * 2
    with pytest.raises(rlpool.InvalidType, match="or False"):
        pools(["WhereAmI"] * 2, worker_affinity=True, **one_each)


def test_eight_envs_on_two_workers(pools, proc_config):
    """Several envs share a worker: 8 envs on 2 workers run in the right
    process and step correctly."""
    pool = pools(["WhereAmI"] * 8, **proc_config.options(envs_per_worker=4))
    pids = pool.worker_pids
    assert len(pids) == 2
    obs = np.asarray(pool.reset()["observation"])
    assert obs[:, 2].tolist() == [pids[e // 4] for e in range(8)]

    pool = pools(
        ["CountingEnv"] * 8,
        create_env_kwargs=counting_kwargs(range(8), 1000),
        **proc_config.options(envs_per_worker=4),
    )
    pool.reset()
    for step in range(1, 21):
        pool.async_step_send(actions([1] * 8))
        seen = 0
        while seen < 8:
            batch = pool.async_step_recv()
            for env, count in zip(envs_of(batch), batch["next", "observation"][:, 0]):
                assert count == env + step
                seen += 1


def test_a_stuck_env_does_not_stop_its_neighbours(pools, proc_config):
    """An env stuck in a step does not stop the other envs of its worker;
    its receive times out and loses nothing; shutdown still reaps the
    worker within its deadline."""
    pool = pools(
        [FAULTY] * 3,
        create_env_kwargs=[faulty_kwargs(1, "hang"), {}, {}],
        **proc_config.options(envs_per_worker=3),
    )
    pool.reset()
    pool.async_step_send(actions([1] * 3))
    batch = pool.async_step_recv(min_get=2, max_get=2, timeout=PATIENCE)
    assert envs_of(batch) == [1, 2]
    with pytest.raises(rlpool.Timeout) as info:
        pool.async_step_recv(timeout=0.05)
    assert info.value.ready == 0
    assert pool.in_flight() == [0]
    pids = pool.worker_pids
    start = time.monotonic()
    pool.shutdown()
    assert time.monotonic() - start < 10.0
    assert all_reaped(pids)
