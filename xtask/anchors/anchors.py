"""Side-by-side benchmark of rlpool against its anchors: Gymnasium's vector
envs, EnvPool, PufferLib (and TorchRL's AsyncEnvPool with --with-torchrl).

`cargo xtask bench --anchors` runs this script with the Python of the
virtual environment under target/bench/venv:

    anchors.py run --rlpool target/release/rlpool --out target/bench/anchors.json \
        --svg target/bench/anchors.svg

`run` installs the anchors that are missing (pip, one package at a time; a
failure is recorded and the run goes on without that anchor), then, for each
workload (env x number of envs), measures every system in turn, rotating the
order from one workload to the next so that a burst of machine noise does not
always land on the same system. Each system's measurements of a workload run
in a fresh subprocess (`anchors.py measure ...`; rlpool's through
`rlpool bench --json`), so a crash or a hang costs that cell, not the run.

Every measurement: the env-steps per second of a loop that draws fresh
random actions, sends them and receives the results, for about `--seconds`
seconds after a short warm-up. The baseline of each system is its own raw
loop (the N envs stepped in turn by one thread); the pool overhead per
env-step is the pool's time per env-step minus the raw loop's.

`plot` redraws the figure from a JSON file; `table` prints its figures as
Markdown tables (the README's).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time

# The workloads. "noop" is the cheapest env each system offers; DESCRIPTIONS
# says exactly which.
ENVS = ("CartPole-v1", "noop")

# What each system runs for each workload, written into the JSON and printed.
DESCRIPTIONS = {
    "rlpool": {
        "CartPole-v1": "rlpool's CartPole-v1 (Rust)",
        "noop": "rlpool's LatencyEnv with its defaults (step_us=0: no wait; "
        "writes a 4-float observation, reward 1, never done)",
    },
    "gymnasium": {
        "CartPole-v1": "gymnasium.make('CartPole-v1') (Python, with make's "
        "default wrappers: TimeLimit, OrderEnforcing, PassiveEnvChecker)",
        "noop": "NoOpEnv, a gymnasium.Env subclass in anchors.py: returns a "
        "fixed 4-float observation, reward 1, never done; no wrappers",
    },
    "envpool": {
        "CartPole-v1": "EnvPool's CartPole-v1 (C++)",
        "noop": "EnvPool's NChain-v0 (C++ toy text env, a few integer "
        "operations per step): EnvPool has no no-op env and runs no Python env",
    },
    "pufferlib": {
        "CartPole-v1": "gymnasium.make('CartPole-v1') wrapped in "
        "pufferlib.emulation.GymnasiumPufferEnv",
        "noop": "NoOpEnv (as for gymnasium) wrapped in "
        "pufferlib.emulation.GymnasiumPufferEnv",
    },
    "torchrl": {
        "CartPole-v1": "torchrl GymEnv('CartPole-v1') (Gymnasium's Python CartPole)",
        "noop": "NoOpEnv (as for gymnasium) wrapped in torchrl GymWrapper",
    },
}

# What each system's configurations are, for the JSON and the output.
CONFIGS = {
    "rlpool": "`rlpool bench --json`: threads (one worker thread per core), "
    "processes with the queue exchange, processes with the shm exchange "
    "(envs spread over one worker process per core); async: min_get = N/2",
    "gymnasium": "SyncVectorEnv (in the calling thread) and AsyncVectorEnv "
    "(one process per env, shared memory); neither can receive part of the "
    "envs, so there is no async (N/2) measurement",
    "envpool": "make_gymnasium(num_envs=N, num_threads=min(cores, N)); sync: "
    "batch_size=N and step(); async: batch_size=N/2 with send()/recv(); raw "
    "loop: a 1-env pool (EnvPool steps no env outside a pool)",
    "pufferlib": "pufferlib.vector.make: Serial (in the calling thread), "
    "Multiprocessing with one worker per core (num_workers=min(cores, N), "
    "overwork=True); async: Multiprocessing with batch_size=N/2",
    "torchrl": "AsyncEnvPool, backend threading and multiprocessing; async: "
    "min_get = N/2",
}

# Facts about an anchor that a reader of the figures needs.
NOTES = {
    "pufferlib": "PufferLib 3.0.0 (the newest) does not build on a machine that "
    "reaches only PyPI: its setup.py downloads raylib and box2d from GitHub, and "
    "its NO_OCEAN=1 switch fails in setup.py; the venv falls back to 1.0.1 (same "
    "vector API), which pins gymnasium 0.29.1 and numpy 1.23.3. Its "
    "Multiprocessing workers and its receiver busy-wait (the workers sleep only "
    "after 0.5 s idle): PufferLib wants a core per worker plus one for the learner.",
    "envpool": "EnvPool's envs are C++; it runs no Python env, so its no-op "
    "workload is its cheapest toy env.",
    "gymnasium": "AsyncVectorEnv runs one process per env (64 processes at N = 64).",
    "torchrl": "The TorchRL measurements of this driver had not yet been run when "
    "it was written (torch is a download of several GB): a failure is recorded "
    "per measurement.",
}

# --------------------------------------------------------------------------
# The envs of the Python anchors.

def _noop_class():
    import gymnasium as gym
    import numpy as np

    class NoOpEnv(gym.Env):
        """The cheapest gymnasium env: a fixed observation, reward 1, never done."""

        observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def __init__(self):
            self._obs = np.zeros(4, dtype=np.float32)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return self._obs, {}

        def step(self, action):
            return self._obs, 1.0, False, False, {}

    return NoOpEnv


def make_gym_env(env: str):
    """A fresh gymnasium env for the workload `env`."""
    if env == "noop":
        return _noop_class()()
    import gymnasium as gym

    return gym.make(env)


def gym_cartpole():
    return make_gym_env("CartPole-v1")


def gym_noop():
    return make_gym_env("noop")


GYM_MAKERS = {"CartPole-v1": gym_cartpole, "noop": gym_noop}


def puffer_cartpole(**kwargs):
    # PufferLib 3 passes buf= and seed=; 1.0 passes nothing.
    import pufferlib.emulation

    return pufferlib.emulation.GymnasiumPufferEnv(env_creator=gym_cartpole, **kwargs)


def puffer_noop(**kwargs):
    import pufferlib.emulation

    return pufferlib.emulation.GymnasiumPufferEnv(env_creator=gym_noop, **kwargs)


PUFFER_MAKERS = {"CartPole-v1": puffer_cartpole, "noop": puffer_noop}


def torchrl_cartpole():
    from torchrl.envs import GymEnv

    return GymEnv("CartPole-v1")


def torchrl_noop():
    from torchrl.envs import GymWrapper

    return GymWrapper(gym_noop())


TORCHRL_MAKERS = {"CartPole-v1": torchrl_cartpole, "noop": torchrl_noop}


# --------------------------------------------------------------------------
# Measuring.

def timed(step, seconds: float) -> float:
    """Env-steps per second of `step` (which returns the env-steps it did),
    called in a loop for `seconds` after a warm-up of a tenth of that."""
    warm = time.perf_counter()
    calls = 0
    while calls < 3 or time.perf_counter() - warm < seconds / 10:
        step()
        calls += 1
    steps = 0
    start = time.perf_counter()
    while True:
        steps += step()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return steps / elapsed


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def raw_python_loop(env: str, n: int, seconds: float) -> float:
    """N gymnasium envs stepped in turn by this thread."""
    import numpy as np

    rng = np.random.default_rng(0)
    envs = [make_gym_env(env) for _ in range(n)]
    for e in envs:
        e.reset(seed=0)

    def step():
        actions = rng.integers(0, 2, size=n)
        for e, a in zip(envs, actions):
            _, _, terminated, truncated, _ = e.step(int(a))
            if terminated or truncated:
                e.reset()
        return n

    return timed(step, seconds)


def row(system, env, n, config, mode, rate=None, status="ok", error=None):
    return {
        "system": system,
        "env": env,
        "env_impl": DESCRIPTIONS[system][env],
        "num_envs": n,
        "config": config,
        "mode": mode,
        "status": status,
        "error": error,
        "steps_per_second": rate,
    }


def guarded(system, env, n, config, mode, measure):
    """One measurement; an exception becomes a failed row."""
    try:
        return row(system, env, n, config, mode, measure())
    except Exception as err:  # noqa: BLE001 - recorded, never dropped
        return row(system, env, n, config, mode, status="failed", error=f"{type(err).__name__}: {err}")


def measure_gymnasium(env, n, seconds):
    import gymnasium as gym
    import numpy as np

    rng = np.random.default_rng(0)

    def vector(cls):
        def measure():
            envs = cls([GYM_MAKERS[env]] * n)
            try:
                envs.reset(seed=0)

                def step():
                    envs.step(rng.integers(0, 2, size=n))
                    return n

                return timed(step, seconds)
            finally:
                envs.close()

        return measure

    yield guarded("gymnasium", env, n, "raw loop", "sync", lambda: raw_python_loop(env, n, seconds))
    yield guarded("gymnasium", env, n, "SyncVectorEnv", "sync", vector(gym.vector.SyncVectorEnv))
    yield guarded("gymnasium", env, n, "AsyncVectorEnv", "sync", vector(gym.vector.AsyncVectorEnv))
    yield row(
        "gymnasium", env, n, "AsyncVectorEnv", "async", status="unsupported",
        error="AsyncVectorEnv.step_wait waits for every env: no receive of part of the envs",
    )


def measure_envpool(env, n, seconds):
    import envpool
    import numpy as np

    task = "NChain-v0" if env == "noop" else env
    rng = np.random.default_rng(0)
    threads = min(cores(), n)

    def sync(num_envs, num_threads):
        def measure():
            pool = envpool.make_gymnasium(task, num_envs=num_envs, batch_size=num_envs, num_threads=num_threads, seed=0)
            pool.reset()

            def step():
                pool.step(rng.integers(0, 2, size=num_envs).astype(np.int32))
                return num_envs

            rate = timed(step, seconds)
            pool.close()
            return rate

        return measure

    def asynchronous():
        batch = max(n // 2, 1)
        pool = envpool.make_gymnasium(task, num_envs=n, batch_size=batch, num_threads=threads, seed=0)
        pool.async_reset()

        def step():
            *_, info = pool.recv()
            ids = info["env_id"]
            pool.send(rng.integers(0, 2, size=len(ids)).astype(np.int32), ids)
            return len(ids)

        rate = timed(step, seconds)
        pool.close()
        return rate

    yield guarded("envpool", env, n, "raw loop (1-env pool)", "sync", sync(1, 1))
    yield guarded("envpool", env, n, "EnvPool", "sync", sync(n, threads))
    yield guarded("envpool", env, n, "EnvPool", "async", asynchronous)


def measure_pufferlib(env, n, seconds):
    import inspect

    import numpy as np
    import pufferlib.vector as pv

    rng = np.random.default_rng(0)
    maker = PUFFER_MAKERS[env]
    workers = min(cores(), n)

    def run(backend, batch, **kwargs):
        def measure():
            vec = pv.make(maker, backend=backend, num_envs=n, batch_size=batch, **kwargs)
            try:
                vec.async_reset(0)
                ids = vec.recv()[5]

                def step():
                    nonlocal ids
                    vec.send(rng.integers(0, 2, size=len(ids)).astype(np.int32))
                    ids = vec.recv()[5]
                    return len(ids)

                return timed(step, seconds)
            finally:
                vec.close()

        return measure

    mp = dict(num_workers=workers)
    if "overwork" in inspect.signature(pv.Multiprocessing.__init__).parameters:
        # PufferLib 3 refuses more workers than physical cores unless told.
        mp["overwork"] = True
    yield guarded("pufferlib", env, n, "raw loop", "sync", lambda: raw_python_loop(env, n, seconds))
    yield guarded("pufferlib", env, n, "Serial", "sync", run(pv.Serial, n))
    yield guarded("pufferlib", env, n, "Multiprocessing", "sync", run(pv.Multiprocessing, n, **mp))
    yield guarded("pufferlib", env, n, "Multiprocessing", "async", run(pv.Multiprocessing, max(n // 2, 1), **mp))


def measure_torchrl(env, n, seconds):
    from torchrl.envs import AsyncEnvPool

    maker = TORCHRL_MAKERS[env]

    def raw():
        envs = [maker() for _ in range(n)]
        roots = [e.reset() for e in envs]

        def step():
            for i, e in enumerate(envs):
                _, roots[i] = e.step_and_maybe_reset(e.rand_action(roots[i]))
            return n

        return timed(step, seconds)

    def pool(backend, min_get):
        def measure():
            p = AsyncEnvPool([maker] * n, backend=backend)
            try:
                root = p.reset()
                if min_get == n:
                    def step():
                        nonlocal root
                        _, root = p.step_and_maybe_reset(p.rand_action(root))
                        return n
                else:
                    p.async_step_and_maybe_reset_send(p.rand_action(root))

                    def step():
                        # recv gives (results, next roots), both with "env_index".
                        _, got = p.async_step_and_maybe_reset_recv(min_get=min_get)
                        idx = got.get("env_index")
                        idx = list(idx.tolist() if hasattr(idx, "tolist") else idx)
                        got.update(p.full_action_spec.rand()[idx])
                        p.async_step_and_maybe_reset_send(got)
                        return len(idx)

                return timed(step, seconds)
            finally:
                p.close()

        return measure

    yield guarded("torchrl", env, n, "raw loop", "sync", raw)
    for backend in ("threading", "multiprocessing"):
        yield guarded("torchrl", env, n, f"AsyncEnvPool {backend}", "sync", pool(backend, n))
        yield guarded("torchrl", env, n, f"AsyncEnvPool {backend}", "async", pool(backend, max(n // 2, 1)))


MEASURE = {
    "gymnasium": measure_gymnasium,
    "envpool": measure_envpool,
    "pufferlib": measure_pufferlib,
    "torchrl": measure_torchrl,
}


def cmd_measure(args):
    """One system, one workload: one JSON line per measurement."""
    for r in MEASURE[args.system](args.env, args.num_envs, args.seconds):
        print(json.dumps(r), flush=True)


# --------------------------------------------------------------------------
# Installing: one virtual environment per anchor, under --venvs, so that
# their pins (PufferLib 3.0.0 wants numpy<2 and gymnasium<=0.29.1) do not
# change what the others run. A venv that exists is reused.

# What each venv gets, one pip install at a time, in this order. A list
# gives alternatives, tried in turn until one installs; every failure is
# recorded.
VENVS = {
    "gymnasium": ["gymnasium"],
    "envpool": ["envpool"],
    # PufferLib 3.0.0, the newest, is a source package whose build downloads
    # raylib and box2d from GitHub (for its Ocean C envs), which a machine
    # that reaches only PyPI cannot do; its NO_OCEAN=1 switch fails with a
    # NameError in its setup.py. 1.0.1 builds from PyPI alone and has the same
    # vector API (Serial, Multiprocessing with batch_size). 1.0.1 imports
    # psutil and filelock without declaring them.
    "pufferlib": [["pufferlib", "pufferlib==1.0.1"], "psutil", "filelock"],
    "torchrl": ["torch", "torchrl", "gymnasium"],
    "plot": ["matplotlib"],
}
IMPORTS = {"gymnasium": "gymnasium", "envpool": "envpool", "pufferlib": "pufferlib.vector, pufferlib.emulation",
           "torchrl": "torchrl.envs", "plot": "matplotlib"}
# Versions recorded from each venv.
REPORTED = ["gymnasium", "envpool", "pufferlib", "torch", "torchrl", "numpy", "matplotlib"]


def tail(text: str, lines: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def venv_python(venvs: str, name: str) -> str:
    return os.path.join(venvs, name, "bin", "python")


def versions_in(python: str) -> dict:
    code = (
        "import importlib.metadata as m, json, platform\n"
        "v = {'python': platform.python_version()}\n"
        f"for p in {REPORTED!r}:\n"
        "    try: v[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(v))"
    )
    done = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def ensure(venvs: str, name: str) -> dict:
    """Creates the venv `name` (unless present), pip-installs what it lacks,
    then checks that the anchor imports. Never raises: a failure is recorded."""
    status = {"venv": os.path.join(venvs, name), "packages": VENVS[name]}
    python = venv_python(venvs, name)
    log_dir = os.path.dirname(os.path.abspath(venvs))
    if not os.path.exists(python):
        print(f"anchors: creating the venv {status['venv']}", flush=True)
        made = subprocess.run([sys.executable, "-m", "venv", status["venv"]], capture_output=True, text=True)
        if made.returncode != 0:
            status.update(status="venv failed", error=tail(made.stderr))
            return status
    status["attempts"] = []
    for wanted in VENVS[name]:
        choices = wanted if isinstance(wanted, list) else [wanted]
        if version_of(python, choices[0].split("==")[0]):
            continue
        for choice in choices:
            print(f"anchors: pip install {choice} (venv {name}) ...", flush=True)
            started = time.perf_counter()
            done = subprocess.run(
                [python, "-m", "pip", "install", "--disable-pip-version-check", choice],
                capture_output=True, text=True,
            )
            log_name = re.sub(r"[^A-Za-z0-9._-]+", "-", choice).strip("-")
            with open(os.path.join(log_dir, f"pip-{name}-{log_name}.log"), "w") as log:
                log.write(done.stdout + done.stderr)
            attempt = {"package": choice, "seconds": round(time.perf_counter() - started, 1), "ok": done.returncode == 0}
            if done.returncode != 0:
                attempt["error"] = why_pip_failed(done.stderr or done.stdout)
                print(f"anchors: {name}: pip install {choice} FAILED: {attempt['error']}", flush=True)
            status["attempts"].append(attempt)
            if attempt["ok"]:
                break
        else:
            status.update(status="install failed", error="; ".join(
                f"{a['package']}: {a['error']}" for a in status["attempts"] if not a["ok"]))
            status["versions"] = versions_in(python)
            return status
    check = subprocess.run([python, "-c", f"import {IMPORTS[name]}"], capture_output=True, text=True)
    status["versions"] = versions_in(python)
    if check.returncode != 0:
        status.update(status="import failed", error=tail(check.stderr))
        print(f"anchors: {name}: IMPORT FAILED:\n{status['error']}", flush=True)
    else:
        status["status"] = "ok"
    return status


def why_pip_failed(text: str) -> str:
    """The line of pip's output that says why, else its last lines."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if any(word in line for word in ("Error:", "Error ", "error:")) and "subprocess-exited-with-error" not in line:
            return line
    return tail(text, 3)


def version_of(python: str, package: str):
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


# --------------------------------------------------------------------------
# The run.

def machine() -> dict:
    info = {
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "cores": cores(),
        "python": platform.python_version(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
            info["memory_gib"] = round(kib / 2**20, 1)
    except OSError:
        pass
    return info


def load() -> dict:
    one, five, fifteen = os.getloadavg()
    return {"load_1m": one, "load_5m": five, "load_15m": fifteen, "at": now()}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def run_rlpool(rlpool, env, n, seconds):
    name = "LatencyEnv" if env == "noop" else env
    cmd = [rlpool, "bench", "--env", name, "--sizes", str(n), "--seconds", str(seconds), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return [row("rlpool", env, n, "rlpool bench", "sync", status="failed", error=tail(done.stderr))]
    rows = []
    for line in done.stdout.splitlines():
        got = json.loads(line)
        config = "raw loop" if got["config"].startswith("raw loop") else got["config"]
        rows.append(row("rlpool", env, n, config, got["mode"], got["steps_per_second"]))
    return rows


def run_anchor(python, system, env, n, seconds):
    cmd = [python, os.path.abspath(__file__), "measure", "--system", system,
           "--env", env, "--num-envs", str(n), "--seconds", str(seconds)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120 + 20 * seconds)
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        rows.append(row(system, env, n, "(the rest)", "-", status="failed", error="timed out"))
        return rows
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0:
        rows.append(row(system, env, n, "(process)", "-", status="failed",
                        error=f"exit status {done.returncode}: {tail(done.stderr)}"))
    return rows


def add_overheads(rows):
    """ns per env-step, and the pool overhead per env-step against the same
    system's raw loop of the same workload."""
    raw = {}
    for r in rows:
        if r["status"] == "ok" and r["config"].startswith("raw loop"):
            raw[(r["system"], r["env"], r["num_envs"])] = r["steps_per_second"]
    for r in rows:
        rate = r["steps_per_second"]
        r["ns_per_env_step"] = 1e9 / rate if rate else None
        base = raw.get((r["system"], r["env"], r["num_envs"]))
        if rate and base and not r["config"].startswith("raw loop"):
            r["raw_ns_per_env_step"] = 1e9 / base
            r["overhead_ns_per_env_step"] = 1e9 / rate - 1e9 / base
        else:
            r["raw_ns_per_env_step"] = 1e9 / base if base else None
            r["overhead_ns_per_env_step"] = None


def human_ns(ns):
    if ns is None:
        return "-"
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if abs(ns) >= 1e3:
        return f"{ns / 1e3:.2f} us"
    return f"{ns:.0f} ns"


def print_rows(rows):
    for r in rows:
        if r["status"] == "ok":
            print(f"  {r['system']:<10} {r['config']:<24} {r['mode']:<6} {r['steps_per_second']:>12.0f} /s"
                  f" {human_ns(r['ns_per_env_step']):>10}/step  overhead {human_ns(r['overhead_ns_per_env_step']):>10}",
                  flush=True)
        else:
            print(f"  {r['system']:<10} {r['config']:<24} {r['mode']:<6} {r['status'].upper()}: {r['error']}",
                  flush=True)


def cmd_run(args):
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    started = time.perf_counter()
    anchors = ["gymnasium", "envpool", "pufferlib"] + (["torchrl"] if args.with_torchrl else [])

    installs = {name: ensure(args.venvs, name) for name in anchors + ["plot"]}
    available = {name: installs[name]["status"] == "ok" for name in anchors}
    for name in anchors:
        if not available[name]:
            print(f"anchors: {name} is NOT measured: {installs[name]['status']}", flush=True)

    order = ["gymnasium", "rlpool", "envpool", "pufferlib"] + (["torchrl"] if args.with_torchrl else [])
    rlpool_version = subprocess.run([args.rlpool, "--version"], capture_output=True, text=True).stdout.strip()
    doc = {
        "command": args.command,
        "date": now(),
        "machine": machine(),
        "load_before": load(),
        "uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "seconds_per_measurement": args.seconds,
        "sizes": args.sizes,
        "versions": {
            "rlpool": rlpool_version,
            "git_commit": args.git_commit,
            "rustc": args.rustc,
            "driver_python": platform.python_version(),
            **{name: installs[name].get("versions", {}) for name in installs},
        },
        "installs": installs,
        "systems": {
            name: {
                "measured": name == "rlpool" or available[name],
                "configs": CONFIGS[name],
                "envs": DESCRIPTIONS[name],
                "note": NOTES.get(name),
            }
            for name in order
        },
        "method": (
            "For each workload (env, N), each system in turn, the order rotated "
            "by one place from one workload to the next. A measurement is the "
            "env-steps per second of a loop that draws fresh random actions "
            "(numpy, or rlpool's action spec), sends them and receives the "
            "results, for the given seconds after a warm-up of a tenth of that. "
            "raw loop: the N envs stepped in turn by one thread (EnvPool: a "
            "1-env pool; rlpool: step_into on reused buffers, with 64 random "
            "actions per env drawn ahead and used in turn). overhead_ns_per_env_step = ns per env-step of the "
            "pool minus that of the same system's raw loop of the same workload."
        ),
        "measurements": [],
    }
    for name in anchors:
        if not available[name]:
            doc["measurements"].append(row(name, "CartPole-v1", None, "(all)", "-", status=installs[name]["status"],
                                           error=installs[name].get("error")))

    measured = [name for name in order if name == "rlpool" or available[name]]
    print(f"anchors: measuring {', '.join(measured)}; N in {args.sizes}; {args.seconds} s per measurement", flush=True)
    for name in measured:
        print(f"  {name}: {CONFIGS[name]}")
        if name in NOTES:
            print(f"    note: {NOTES[name]}")
        for env in ENVS:
            print(f"    {env}: {DESCRIPTIONS[name][env]}")
    workload = 0
    for env in ENVS:
        for n in args.sizes:
            k = workload % len(measured)
            turn = measured[k:] + measured[:k]
            workload += 1
            print(f"== {env}, {n} envs (order: {', '.join(turn)})", flush=True)
            for name in turn:
                if name == "rlpool":
                    got = run_rlpool(args.rlpool, env, n, args.seconds)
                else:
                    got = run_anchor(venv_python(args.venvs, name), name, env, n, args.seconds)
                add_overheads(got)
                print_rows(got)
                doc["measurements"].extend(got)
    add_overheads(doc["measurements"])
    doc["load_after"] = load()
    doc["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    doc["run_seconds"] = round(time.perf_counter() - started, 1)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"anchors: wrote {args.out} ({doc['run_seconds']} s; load average {doc['load_before']['load_1m']:.1f} "
          f"before, {doc['load_after']['load_1m']:.1f} after, on {doc['machine']['cores']} cores)", flush=True)
    if installs["plot"]["status"] == "ok":
        drawn = subprocess.run([venv_python(args.venvs, "plot"), os.path.abspath(__file__), "plot",
                                "--json", args.out, "--svg", args.svg], capture_output=True, text=True)
        print(drawn.stdout.strip() if drawn.returncode == 0 else f"anchors: NO PLOT: {tail(drawn.stderr)}")
    else:
        print(f"anchors: NO PLOT: matplotlib: {installs['plot']['status']}")


# --------------------------------------------------------------------------
# The plot.

COLORS = {"rlpool": "tab:red", "gymnasium": "tab:blue", "envpool": "tab:green",
          "pufferlib": "tab:purple", "torchrl": "tab:orange"}
STYLES = ["-", "--", "-."]  # dotted is for the raw loops
MARKERS = ["o", "s", "^", "D"]


def plot(doc, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in doc["measurements"] if r["status"] == "ok" and r["num_envs"]]
    fig, axes = plt.subplots(2, 2, figsize=(13, 10), sharex=True)
    for i, env in enumerate(ENVS):
        for j, mode in enumerate(("sync", "async")):
            ax = axes[i][j]
            lines = {}
            for r in ok:
                if r["env"] != env:
                    continue
                raw = r["config"].startswith("raw loop")
                if raw and mode != "sync":
                    continue
                if not raw and r["mode"] != mode:
                    continue
                lines.setdefault((r["system"], r["config"]), []).append((r["num_envs"], r["steps_per_second"]))
            per_system = {}
            for (system, config), points in sorted(lines.items()):
                points.sort()
                raw = config.startswith("raw loop")
                k = per_system.setdefault(system, [])
                if not raw:
                    k.append(config)
                style = ":" if raw else STYLES[(len(k) - 1) % len(STYLES)]
                ax.plot([p[0] for p in points], [p[1] for p in points],
                        color=COLORS.get(system, "black"), linestyle=style,
                        marker=MARKERS[(len(k) - 1) % len(MARKERS)], markersize=4,
                        linewidth=1 if raw else 1.6, alpha=0.6 if raw else 1.0,
                        label=f"{system}: {config}")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(doc["sizes"])
            ax.set_xticklabels([str(s) for s in doc["sizes"]])
            title = "synchronous (all N per step)" if mode == "sync" else "asynchronous (N/2 per receive)"
            ax.set_title(f"{env}: {title}", fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            if i == 1:
                ax.set_xlabel("number of envs N")
            if j == 0:
                ax.set_ylabel("env-steps per second")
            ax.legend(fontsize=7, loc="best")
    m = doc["machine"]
    missing = sorted({r["system"] for r in doc["measurements"] if not r["num_envs"]})
    fig.suptitle(
        f"rlpool and its anchors: {m.get('cores')} cores, {m.get('cpu', '')}, {doc['date'][:10]}; "
        f"load {doc['load_before']['load_1m']:.1f} before, {doc.get('load_after', {}).get('load_1m', float('nan')):.1f} after; "
        f"{doc['seconds_per_measurement']} s per point; dotted: raw loops"
        + (f"; NOT INSTALLED: {', '.join(missing)}" if missing else ""),
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path)


def cmd_plot(args):
    with open(args.json) as f:
        plot(json.load(f), args.svg)
    print(f"anchors: wrote {args.svg}")


def si(rate):
    if rate >= 1e6:
        return f"{rate / 1e6:.2f} M"
    if rate >= 1e3:
        return f"{rate / 1e3:.1f} k"
    return f"{rate:.0f}"


def cmd_table(args):
    """The figures of a run as Markdown tables (one per env) for the README:
    env-steps per second, and the pool overhead per env-step in brackets."""
    with open(args.json) as f:
        doc = json.load(f)
    sizes = doc["sizes"]
    for r in doc["measurements"]:
        if not r["num_envs"]:
            print(f"{r['system']}: NOT MEASURED ({r['status']}): {r['error']}\n")
    for env in ENVS:
        cells = {}
        for r in doc["measurements"]:
            if r["env"] != env or not r["num_envs"]:
                continue
            key = (r["system"], r["config"], r["mode"])
            if r["status"] == "ok":
                text = si(r["steps_per_second"])
                if r.get("overhead_ns_per_env_step") is not None:
                    text += f" ({human_ns(r['overhead_ns_per_env_step'])})"
            else:
                text = r["status"]
            cells.setdefault(key, {})[r["num_envs"]] = text
        print(f"{env}: env-steps per second (pool overhead per env-step)\n")
        print("| system | configuration | mode | " + " | ".join(f"N = {n}" for n in sizes) + " |")
        print("|---|---|---|" + "---|" * len(sizes))
        for (system, config, mode), by_n in cells.items():
            print(f"| {system} | {config} | {mode} | " + " | ".join(by_n.get(n, "-") for n in sizes) + " |")
        print()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    run = sub.add_parser("run", help="install the anchors, measure everything, write JSON and plot")
    run.add_argument("--rlpool", required=True, help="the rlpool binary (release build)")
    run.add_argument("--out", default="target/bench/anchors.json")
    run.add_argument("--svg", default="target/bench/anchors.svg")
    run.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[2, 8, 32, 64])
    run.add_argument("--seconds", type=float, default=0.5)
    run.add_argument("--venvs", default="target/bench/venv", help="where the per-anchor venvs live")
    run.add_argument("--with-torchrl", action="store_true")
    run.add_argument("--command", default="cargo xtask bench --anchors")
    run.add_argument("--git-commit", default=None)
    run.add_argument("--rustc", default=None)
    measure = sub.add_parser("measure", help="one system, one workload (used by run)")
    measure.add_argument("--system", choices=sorted(MEASURE), required=True)
    measure.add_argument("--env", choices=ENVS, required=True)
    measure.add_argument("--num-envs", type=int, required=True)
    measure.add_argument("--seconds", type=float, default=0.5)
    redraw = sub.add_parser("plot", help="redraw the plot from a JSON file")
    redraw.add_argument("--json", default="target/bench/anchors.json")
    redraw.add_argument("--svg", default="target/bench/anchors.svg")
    table = sub.add_parser("table", help="print a run's figures as Markdown tables")
    table.add_argument("--json", default="target/bench/anchors.json")
    args = parser.parse_args()
    {"run": cmd_run, "measure": cmd_measure, "plot": cmd_plot, "table": cmd_table}[args.verb](args)


if __name__ == "__main__":
    main()
