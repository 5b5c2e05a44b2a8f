"""Waits release the GIL and answer Ctrl-C: a Python thread makes progress
while the main thread blocks in a receive (or a synchronous step) on a held
env, and a SIGINT during such a wait raises ``KeyboardInterrupt`` within
about 100 ms, after which the pool is usable and the result comes with a
later receive (nothing lost). On every configuration."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from helpers import FAULTY, PATIENCE, Release, actions, counts_of, envs_of, item, recv_all

pytestmark = pytest.mark.timeout(60)

WAYS = ["batch", "per_env", "sync"]


def held_pool(make_pool, release):
    """Two FaultyCounters whose env 0 holds its first step until
    ``release``; reset."""
    kwargs = [release.kwargs(fail_at=1, hold_ms=15_000), {}]
    pool = make_pool([FAULTY] * 2, create_env_kwargs=kwargs)
    pool.reset()
    return pool


def blocking_call(pool, how):
    """The call that blocks on the held env: a batch receive of both envs,
    a per-env receive of env 0 (both after a send to both), or a
    synchronous step."""
    if how == "batch":
        return pool.async_step_recv(min_get=2)
    if how == "per_env":
        return pool.async_step_recv(env_index=0)
    return pool.step(actions([1, 1]))


@pytest.mark.parametrize("how", WAYS)
def test_waits_release_the_gil(make_pool, tmp_path, how):
    """While the main thread waits for the held env, a pure-Python thread
    runs: it counts, then releases the env itself, so the wait ends only if
    the thread could run during it (else it ends when the hold expires, 15
    s later)."""
    with Release(tmp_path) as release:
        pool = held_pool(make_pool, release)
        if how != "sync":
            pool.async_step_send(actions([1, 1]))
        counted = []

        def count_then_release() -> None:
            n = 0
            while n < 300_000:  # Bytecode: needs the GIL all along.
                n += 1
            counted.append(n)
            release.release()

        thread = threading.Thread(target=count_then_release, daemon=True)
        start = time.monotonic()
        thread.start()
        out = blocking_call(pool, how)
        waited = time.monotonic() - start
        thread.join(PATIENCE)
        assert counted == [300_000]
        assert waited < 8.0, f"the wait held the GIL: it ended after {waited:.1f} s"
        if how == "per_env":
            assert item(out, ("next", "observation")) == 1
            out = pool.async_step_recv(env_index=1, timeout=PATIENCE)
            assert item(out, ("next", "observation")) == 1
        else:
            assert counts_of(out) == [1, 1]


@contextmanager
def interrupt_after(delay: float) -> Iterator[dict[str, float]]:
    """Sends this process a SIGINT after ``delay`` seconds, from another
    thread. The handler raises ``KeyboardInterrupt`` only inside the
    ``with`` block, so that a SIGINT that comes late (a wait that did not
    answer it) cannot end the test session."""
    armed = threading.Event()
    sent: dict[str, float] = {}

    def handler(signum: int, frame: object) -> None:
        if armed.is_set():
            armed.clear()
            raise KeyboardInterrupt

    def interrupt() -> None:
        time.sleep(delay)
        sent["at"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, handler)
    timer = threading.Thread(target=interrupt, daemon=True)
    try:
        armed.set()
        timer.start()
        yield sent
    finally:
        armed.clear()
        timer.join(PATIENCE)
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("how", WAYS)
def test_ctrl_c_during_a_blocking_wait(make_pool, tmp_path, how):
    """A SIGINT while the main thread waits for the held env raises
    ``KeyboardInterrupt`` within about 100 ms (held to 1 s here, for a
    loaded machine); the pool stays usable, and the results come with a
    later receive."""
    with Release(tmp_path) as release:
        pool = held_pool(make_pool, release)
        if how != "sync":
            pool.async_step_send(actions([1, 1]))
        with interrupt_after(0.2) as sent, pytest.raises(KeyboardInterrupt):
            blocking_call(pool, how)
        answered = time.monotonic()
        assert "at" in sent, "the wait ended before the SIGINT"
        latency = answered - sent["at"]
        assert latency < 1.0, f"KeyboardInterrupt {latency:.3f} s after the SIGINT"
        assert pool.in_flight() == [0, 1], "nothing was taken or dropped"
        release.release()
        if how == "per_env":
            out = pool.async_step_recv(env_index=0, timeout=PATIENCE)
            assert item(out, ("next", "observation")) == 1
            out = pool.async_step_recv(env_index=1, timeout=PATIENCE)
            assert item(out, ("next", "observation")) == 1
        else:
            batch = recv_all(pool, 2)
            assert envs_of(batch) == [0, 1]
            assert counts_of(batch) == [1, 1]
        assert counts_of(pool.step(actions([1, 1]))) == [2, 2]
