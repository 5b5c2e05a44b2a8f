"""Paired A/B runs of two builds of the rlpool Python package, for a shared
machine where one figure moves by tens of percent from one second to the
next.

Each side is a long-lived process with its own pool (its package found
through PYTHONPATH, which the pool's workers inherit), and the driver
alternates short timed runs (A B, B A, A B, ...). It prints each side's
median rate, the median of the per-pair ratios B/A with its quartiles, and
each side's CPU time per env-step (the process and its workers, from
/proc: spinning counts).

Build the two sides as release wheels unpacked into directories:

    target/python/venv/bin/maturin build --release \\
        --interpreter target/bench/venv/rlpool-python/bin/python -o /tmp/wheels/A
    target/bench/venv/rlpool-python/bin/pip install --no-deps \\
        --target /tmp/sites/A /tmp/wheels/A/*.whl

then, with the bench venv's Python (numpy and gymnasium installed):

    python xtask/anchors/paired.py /tmp/sites/A /tmp/sites/B cartpole 32

A side may carry environment variables and its own workload:
`/tmp/sites/B,KIND=noop0,SOME_VAR=1`; `VEC=1` drives
`rlpool.gymnasium.AsyncVectorEnv` (its defaults; `cartpole` or the no-op
env) with `step` instead of the pool's `step_and_maybe_reset`. Workloads: `cartpole`
(gymnasium.make("CartPole-v1")), `noopN` (a no-op Python env with
max_info_bytes=N, default 1024), `busyK` (a Python env looping K times per
step), or a registered rlpool name. Options: pairs (default 10), seconds
per run (default 0.4), backend (default multiprocessing: shm, one worker
per core).
"""

import os
import statistics
import subprocess
import sys

CHILD = r"""
import glob, math, os, sys, time
import numpy as np
import gymnasium as gym
import rlpool

class NoOp(gym.Env):
    def __init__(self, k=0):
        self.observation_space = gym.spaces.Box(-1, 1, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._obs = np.zeros(4, np.float32)
        self.k = k
    def reset(self, *, seed=None, options=None):
        return self._obs, {}
    def step(self, action):
        x = 0
        for i in range(self.k):
            x += i
        return self._obs, 1.0, False, False, {}

kind, n, backend = os.environ.get("KIND", sys.argv[1]), int(sys.argv[2]), sys.argv[3]
if kind == "cartpole":
    maker = rlpool.PyEnvMaker(gym.make, {"id": "CartPole-v1"})
elif kind.startswith("noop"):
    maker = rlpool.PyEnvMaker(NoOp, max_info_bytes=int(kind[4:] or 1024))
elif kind.startswith("busy"):
    maker = rlpool.PyEnvMaker(NoOp, {"k": int(kind[4:] or 0)})
else:
    maker = kind
rng = np.random.default_rng(0)
if os.environ.get("VEC") == "1":
    # rlpool.gymnasium.AsyncVectorEnv (its defaults), as the anchors drive it.
    import rlpool.gymnasium
    fns = [lambda: gym.make("CartPole-v1")] * n if kind == "cartpole" else [NoOp] * n
    vec = rlpool.gymnasium.AsyncVectorEnv(fns, backend=backend)
    vec.reset(seed=0)

    def batch():
        vec.step(rng.integers(0, 2, size=(n,)))

    close = vec.close
else:
    options = {}
    if backend == "multiprocessing":
        options = dict(exchange="shm", envs_per_worker=math.ceil(n / (os.cpu_count() or 1)))
    pool = rlpool.AsyncEnvPool([maker] * n, backend=backend, **options)
    pool.reset()

    def batch():
        pool.step_and_maybe_reset({"action": rng.integers(0, 2, size=(n,))})

    close = pool.shutdown

def cpu():
    ticks = os.sysconf("SC_CLK_TCK")
    pids = [os.getpid()]
    for path in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        pids += [int(x) for x in open(path).read().split()]
    total = 0.0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total

for _ in range(100):
    batch()
print("ready", flush=True)
for line in sys.stdin:
    seconds = float(line)
    c0, t0, k = cpu(), time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        batch()
        k += 1
    elapsed = time.perf_counter() - t0
    print(k * n / elapsed, (cpu() - c0) / (k * n) * 1e6, flush=True)
close()
"""


def main() -> None:
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    a, b, kind, n = sys.argv[1:5]
    pairs = int(sys.argv[5]) if len(sys.argv) > 5 else 10
    seconds = float(sys.argv[6]) if len(sys.argv) > 6 else 0.4
    backend = sys.argv[7] if len(sys.argv) > 7 else "multiprocessing"
    sides = {}
    for name, spec in (("A", a), ("B", b)):
        site, *assigns = spec.split(",")
        env = dict(os.environ, PYTHONPATH=site)
        env.update(x.split("=", 1) for x in assigns)
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, kind, n, backend],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            sys.exit(f"side {name} ({spec}) did not start")
        sides[name] = proc

    def run(name: str) -> tuple[float, float]:
        proc = sides[name]
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(f"{seconds}\n")
        proc.stdin.flush()
        rate, cpu_us = map(float, proc.stdout.readline().split())
        return rate, cpu_us

    rates: dict[str, list[float]] = {"A": [], "B": []}
    cpus: dict[str, list[float]] = {"A": [], "B": []}
    ratios = []
    for i in range(pairs):
        got = {side: run(side) for side in (("A", "B") if i % 2 == 0 else ("B", "A"))}
        for side, (rate, cpu_us) in got.items():
            rates[side].append(rate)
            cpus[side].append(cpu_us)
        ratios.append(got["B"][0] / got["A"][0])
    for proc in sides.values():
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    med = statistics.median
    low, _, high = statistics.quantiles(ratios, n=4)
    print(
        f"{kind} N={n} {backend}: A {med(rates['A']):.0f}/s, B {med(rates['B']):.0f}/s; "
        f"B/A median {med(ratios):.3f} (quartiles {low:.3f} .. {high:.3f}); CPU us per "
        f"env-step A {med(cpus['A']):.2f}, B {med(cpus['B']):.2f}"
    )


if __name__ == "__main__":
    main()
