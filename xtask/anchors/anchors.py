"""Side-by-side benchmark of rlpool against its anchors: Gymnasium's vector
envs, EnvPool, PufferLib (and TorchRL's AsyncEnvPool with --with-torchrl),
with rlpool driven both from Rust and from Python.

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
`rlpool bench --json --bare`), so a crash or a hang costs that cell, not the
run.

rlpool from Python ("rlpool-python") runs in its own venv, into which `run`
pip-installs the package from this repository (maturin, release build) on
every run: an unchanged tree costs a few seconds, and the figures are always
of the sources measured. Its loops are the bare loops of `rlpool bench
--bare` (sync: step_and_maybe_reset of all N; async: receive exactly N/2,
send to those envs), so the Python layer's cost per call and per env-step is
the difference of the two, both measured in the same run.

Every measurement: the env-steps per second of a loop that draws fresh
random actions, sends them and receives the results, for about `--seconds`
seconds after a short warm-up. The baseline of each system is its own raw
loop (the N envs stepped in turn by one thread); the pool overhead per
env-step is the pool's time per env-step minus the raw loop's.

The workloads come in sets (`run --sets core,python,atari`, default all).
"core" is the above: rlpool's own Rust envs (CartPole-v1 and a no-op env)
beside each anchor's cheapest equivalent. "python" and "atari" are issue
15's real workloads: Gymnasium's Python CartPole-v1, and ALE Pong through
ale-py with the same frames on every system (PONG_FRAMES), in every pool
that runs Python envs (rlpool, Gymnasium's AsyncVectorEnv, PufferLib,
TorchRL) and, for Pong, in EnvPool and ale-py's own vector env; beside the
machine's bound (cores x one process stepping one env in a plain loop),
with rlpool's ratio to each and the issue's goals (REAL_GOALS). Each set
has its own sizes and seconds per measurement unless --sizes/--seconds
say otherwise.

`plot` redraws the figure from a JSON file; `table` prints its figures as
Markdown tables (the README's and docs/performance.md's, with the goals met
or not); `spread` prints the Python front's figures and issue 15's over
several runs' JSON files (median, min and max).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import inspect
import json
import os
import platform
import re
import subprocess
import sys
import time

# The workloads, in sets that `run --sets` picks. "core" (issue 14): rlpool's
# own Rust envs beside each anchor's cheapest equivalent; "noop" is the
# cheapest env each system offers. "python" and "atari" (issue 15's real
# workloads): the same Python envs (Gymnasium's CartPole-v1; ALE Pong through
# ale-py) in every pool that runs Python envs, and, for Pong, the pools that
# run ALE in C++. DESCRIPTIONS says exactly what each system runs.
PY_CARTPOLE = "gym-CartPole-v1"
PONG = "ALE/Pong-v5"
TORCHRL_CARTPOLE = "torchrl-CartPole-v1"
TORCHRL_MOCK = "torchrl-mock"
SETS = {
    "core": ("CartPole-v1", "noop"),
    "python": (PY_CARTPOLE,),
    "atari": (PONG,),
    # Issue 16: TorchRL envs in TorchRL's AsyncEnvPool and in
    # rlpool.torchrl.AsyncEnvPool (only with --with-torchrl).
    "torchrl": (TORCHRL_CARTPOLE, TORCHRL_MOCK),
}
ENVS = tuple(env for envs in SETS.values() for env in envs)
# The issue-15 workloads ("real"), measured by the REAL functions below.
REAL_ENVS = (PY_CARTPOLE, PONG)
# Per set: the numbers of envs and the seconds per measurement (both
# overridden by --sizes and --seconds), and the systems measured, in the
# order of the first workload (then rotated).
SET_SIZES = {
    "core": [2, 8, 32, 64],
    "python": [8, 32, 64],
    "atari": [8, 16],
    "torchrl": [8, 16, 32],
}
SET_SECONDS = {"core": 0.5, "python": 2.0, "atari": 3.0, "torchrl": 2.0}
SET_SYSTEMS = {
    "core": ["gymnasium", "rlpool", "rlpool-python", "envpool", "pufferlib", "torchrl"],
    "python": ["gymnasium", "rlpool-python", "bound", "pufferlib", "torchrl"],
    "atari": ["gymnasium", "rlpool-python", "bound", "envpool", "ale-py"],
    "torchrl": ["torchrl", "rlpool-torchrl", "torchrl-bound"],
}
# The venv a system runs in, when not its own: the machine's bound runs the
# env that rlpool's workers run; ale-py's vector env comes with the ale-py
# that Gymnasium's AsyncVectorEnv steps.
VENV_OF = {
    "bound": "rlpool-python",
    "ale-py": "gymnasium",
    "rlpool-torchrl": "torchrl",
    "torchrl-bound": "torchrl",
}

# The frames of the Pong workload, the same on every system: what all four
# (rlpool and Gymnasium with Python envs, EnvPool, ale-py's vector env) can
# give identically. EnvPool always takes the max of the last two frames of a
# skip, so the Python envs do too (MaxPoolAtari below).
PONG_FRAMES = (
    "grayscale 210x160 uint8 (no resize), frame skip 4 with the max of the last two "
    "frames, one frame (no stacking), repeat_action_probability 0.25, minimal "
    "action set (6), no no-op starts, no fire reset, no reward clipping, no episodic "
    "life, episodes cut at 108000 frames (27000 steps)"
)
PONG_SKIP = 4

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
        "noop": "NoOpEnv (as for gymnasium) wrapped in pufferlib.emulation.GymnasiumPufferEnv",
    },
    "torchrl": {
        "CartPole-v1": "torchrl GymEnv('CartPole-v1') (Gymnasium's Python CartPole)",
        "noop": "NoOpEnv (as for gymnasium) wrapped in torchrl GymWrapper",
    },
}
DESCRIPTIONS["rlpool-python"] = dict(DESCRIPTIONS["rlpool"])
PY_CARTPOLE_IMPL = (
    "gymnasium.make('CartPole-v1') (Python, with make's default wrappers: "
    "TimeLimit, OrderEnforcing, PassiveEnvChecker)"
)
PONG_IMPL = (
    "MaxPoolAtari (anchors.py) around gymnasium.make('ALE/Pong-v5', "
    "obs_type='grayscale', frameskip=1, repeat_action_probability=0.25).unwrapped: "
    f"{PONG_SKIP} ale.act calls per step, the max of the last two grayscale screens, "
    "ale-py's info (lives, frame numbers)"
)
for _system in ("rlpool-python", "gymnasium", "bound", "torchrl", "pufferlib"):
    DESCRIPTIONS.setdefault(_system, {})[PY_CARTPOLE] = PY_CARTPOLE_IMPL
DESCRIPTIONS["pufferlib"][PY_CARTPOLE] = (
    "gymnasium.make('CartPole-v1') (PufferLib's venv: gymnasium 0.29.1) wrapped in "
    "pufferlib.emulation.GymnasiumPufferEnv"
)
DESCRIPTIONS["torchrl"][PY_CARTPOLE] = (
    "torchrl GymWrapper(gymnasium.make('CartPole-v1')) (the same Python env)"
)
for _system in ("rlpool-python", "gymnasium", "bound"):
    DESCRIPTIONS[_system][PONG] = PONG_IMPL
DESCRIPTIONS.setdefault("rlpool-torchrl", {})
DESCRIPTIONS.setdefault("torchrl-bound", {})
for _system in ("torchrl", "rlpool-torchrl", "torchrl-bound"):
    DESCRIPTIONS[_system][TORCHRL_CARTPOLE] = "torchrl GymEnv('CartPole-v1') (TorchRL's env)"
    DESCRIPTIONS[_system][TORCHRL_MOCK] = (
        "TrivialEnv, a torchrl EnvBase in anchors.py: a 4-float observation, reward 0, never "
        "done, its step two TensorDicts and nothing else"
    )
DESCRIPTIONS["envpool"][PONG] = (
    "envpool.make_gymnasium('Pong-v5', img_height=210, img_width=160, gray_scale=True, "
    "stack_num=1, frame_skip=4, noop_max=1, use_fire_reset=False, episodic_life=False, "
    "reward_clip=False, repeat_action_probability=0.25, max_episode_steps=27000) (C++ "
    "ALE; noop_max=1 is EnvPool's least: one no-op frame after each reset; "
    "observations (1, 210, 160))"
)
DESCRIPTIONS["ale-py"] = {
    PONG: "ale_py.vector_env.AtariVectorEnv('pong', img_height=210, img_width=160, "
    "grayscale=True, stack_num=1, frameskip=4, maxpool=True, noop_max=0, "
    "use_fire_reset=False, episodic_life=False, reward_clipping=False, "
    "repeat_action_probability=0.25, max_num_frames_per_episode=108000) (C++ ALE in "
    "threads; observations (1, 210, 160))"
}

# What each system's configurations are, for the JSON and the output.
CONFIGS = {
    "rlpool": "`rlpool bench --json --bare`: threads (one worker thread per core), "
    "processes with the queue exchange, processes with the shm exchange "
    "(envs spread over one worker process per core); sync and async (min_get = N/2) "
    "with the episode tally of `rlpool run`; sync-bare and async-bare: the loops of "
    "rlpool-python driven from Rust (no tally; async-bare: min_get = max_get = N/2, "
    "sent to the envs received)",
    "gymnasium": "SyncVectorEnv (in the calling thread) and AsyncVectorEnv "
    "(one process per env, shared memory); neither can receive part of the "
    "envs, so there is no async (N/2) measurement",
    "envpool": "make_gymnasium(num_envs=N, num_threads=min(cores, N)); sync: "
    "batch_size=N and step(); async: batch_size=N/2 with send()/recv(); raw "
    "loop: a 1-env pool (EnvPool steps no env outside a pool)",
    "pufferlib": "pufferlib.vector.make: Serial (in the calling thread), "
    "Multiprocessing with one worker per core (num_workers=min(cores, N), "
    "overwork=True); async: Multiprocessing with batch_size=N/2",
    "torchrl": "AsyncEnvPool, backend threading and multiprocessing; async: min_get = N/2",
    "rlpool-python": "import rlpool (built from this repository): "
    "AsyncEnvPool([env] * N), backend='threading' (one worker thread per core), "
    "and backend='multiprocessing', exchange='shm', envs_per_worker=ceil(N/cores) "
    "(as rlpool bench); actions {'action': rng.integers(0, 2, size=(k, 1))} "
    "(numpy, int64); sync: step_and_maybe_reset(actions for all N); async: "
    "reset, send to all, then async_step_and_maybe_reset_recv(min_get=N/2, "
    "max_get=N/2) and async_step_and_maybe_reset_send(actions, "
    "env_index=td['env_index'])",
}

# What each system's configurations are in the "python" and "atari" sets
# (issue 15). Every pool steps Python envs in processes unless said;
# sync: every env steps in each iteration; async: the iteration receives
# about N/2 envs and sends to the envs received.
REAL_CONFIGS = {
    "rlpool-python": "rlpool.gymnasium.AsyncVectorEnv(env_fns) where the package has it "
    "(its defaults: shared memory, the envs spread over one worker process per core; "
    "sync: step(actions of all N); async: recv(min_get=N/2) (at most every env ready: "
    "the steps per call are in the JSON), then send(actions, env_id=infos['env_id'])), "
    "else rlpool.AsyncEnvPool(env_fns, "
    "backend='multiprocessing', exchange='shm', envs_per_worker=ceil(N/cores)) "
    "(sync: step_and_maybe_reset; async: async_step_and_maybe_reset_recv(min_get=N/2), "
    "then async_step_and_maybe_reset_send to the envs received); the row's config says "
    "which",
    "gymnasium": "gymnasium.vector.AsyncVectorEnv(env_fns, shared_memory=True) (one process "
    "per env), step(actions of all N); it cannot receive part of the envs: no async row",
    "pufferlib": "pufferlib.vector.Multiprocessing, PufferLib's own recommendation: one "
    "worker per physical core (num_workers=cores), batch_size=N/2, recv then send to the "
    "envs received (async only)",
    "torchrl": "torchrl.envs.AsyncEnvPool(env_fns, backend='multiprocessing'); sync: "
    "step_and_maybe_reset; async: async_step_and_maybe_reset_recv(min_get=N/2) then "
    "async_step_and_maybe_reset_send to the envs received; its processes configured as "
    "rlpool's (envs_per_worker=ceil(N/cores), exchange='shm')",
    "rlpool-torchrl": "rlpool.torchrl.AsyncEnvPool(env_fns, ...) with the options TorchRL's "
    "pool gets (threading; multiprocessing with envs_per_worker=ceil(N/cores), "
    "exchange='shm'), the same loops as TorchRL's",
    "envpool": "make_gymnasium('Pong-v5', num_envs=N, num_threads=min(cores, N), the frames "
    "below); sync: batch_size=N, step(); async: batch_size=N/2, recv() then send() to the "
    "envs received",
    "ale-py": "AtariVectorEnv('pong', num_envs=N, num_threads=min(cores, N), the frames "
    "below); sync: batch_size=N, step(); async: batch_size=N/2, recv() then send() (to the "
    "envs received)",
    "torchrl-bound": "what no pool can go past on this machine, per configuration of the "
    "torchrl set: t_env, one TorchRL env's step alone in a plain loop (env.step on actions "
    "drawn ahead, env.reset when done: what a pool's worker calls), and t_driver, the "
    "benchmark loop's own work on the actions, the same for both pools (sync: rand_action "
    "of N envs; async: the received env_index read, N actions drawn, indexed and set, "
    "timed on a receive of all N envs, its least per env); threads (one GIL: every Python "
    "line of the loop and of the envs on one core at a time): 1 / (t_env + t_driver / N); "
    "processes, sync (the driver waits for the batch): N / (t_driver + N t_env / cores); "
    "processes, async (everything overlaps): min(cores / (t_env + t_driver / N), "
    "N / t_driver)",
    "bound": "the machine's bound: cores x the env-steps per second of one process stepping "
    "one env in a plain Python loop (actions drawn ahead, reset when done), measured in "
    "rlpool-python's venv (the env rlpool's workers run)",
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
    "torchrl": "torch is a download of several GB (PyPI's CUDA build). AsyncEnvPool's "
    "processes run as rlpool's (envs_per_worker=ceil(N/cores), exchange='shm'): with "
    "its defaults (one spawned process per env, each importing torch, about 4 s of "
    "CPU; results through queues, tensors passed as file descriptors: about 50 "
    "env-steps per second at N = 8) N = 64 took minutes and timed out.",
    "rlpool-python": "The same loops driven from Rust are rlpool's sync-bare and "
    "async-bare rows (rlpool bench --bare); the Python layer's cost is the "
    "difference, per call (one step; or one receive and one send) and per env-step.",
}

# The same for the python and atari sets.
REAL_NOTES = {
    "gymnasium": NOTES["gymnasium"],
    "pufferlib": NOTES["pufferlib"],
    "torchrl": NOTES["torchrl"],
    "envpool": "EnvPool always takes the max of the last two frames of a skip and "
    "steps one no-op frame after a reset at least (noop_max=1): the Python envs take "
    "the max too (MaxPoolAtari), the no-op is not copied.",
    "bound": "Independent of N; measured beside every workload so that each N has "
    "one taken in the same minute. Assumes the cores scale perfectly.",
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


def _trivial_torchrl_env_class():
    """TrivialEnv (made on first use: torch is imported only where TorchRL
    runs): a TorchRL env whose step costs as little as an EnvBase can."""
    import torch
    from tensordict import TensorDict
    from torchrl.data import Categorical, Composite, Unbounded
    from torchrl.envs import EnvBase

    class TrivialEnv(EnvBase):
        def __init__(self):
            super().__init__()
            self.observation_spec = Composite(observation=Unbounded((4,)))
            self.reward_spec = Unbounded((1,))
            self.action_spec = Categorical(2, shape=(1,))
            self._obs = torch.zeros(4)
            self._false = torch.zeros(1, dtype=torch.bool)
            self._reward = torch.zeros(1)

        def _set_seed(self, seed):
            pass

        def _reset(self, tensordict, **kwargs):
            return TensorDict(
                {"observation": self._obs, "done": self._false, "terminated": self._false},
                batch_size=(),
            )

        def _step(self, tensordict):
            return TensorDict(
                {
                    "observation": self._obs,
                    "reward": self._reward,
                    "done": self._false,
                    "terminated": self._false,
                },
                batch_size=(),
            )

    return TrivialEnv


def torchrl_trivial():
    return _trivial_torchrl_env_class()()


TORCHRL_SET_MAKERS = {TORCHRL_CARTPOLE: torchrl_cartpole, TORCHRL_MOCK: torchrl_trivial}


def _max_pool_atari_class():
    import gymnasium as gym
    import numpy as np

    class MaxPoolAtari(gym.Env):
        """An ale-py AtariEnv made with frameskip=1, stepped PONG_SKIP frames per
        step, observing the max of the last two grayscale screens (EnvPool's
        frames, and ale-py's vector env's with maxpool=True). The info is
        AtariEnv's own."""

        def __init__(self, env):
            self.env = env
            self.ale = env.ale
            self.actions = env._action_set
            self.action_space = env.action_space
            self.observation_space = gym.spaces.Box(0, 255, (210, 160), np.uint8)
            self.screens = np.zeros((2, 210, 160), dtype=np.uint8)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            _, info = self.env.reset(seed=seed, options=options)
            return self.ale.getScreenGrayscale(), info

        def step(self, action):
            ale = self.ale
            todo = self.actions[int(action)]
            reward = 0.0
            for frame in range(PONG_SKIP):
                reward += ale.act(todo)
                if frame >= PONG_SKIP - 2:
                    ale.getScreenGrayscale(self.screens[frame - PONG_SKIP + 2])
                if ale.game_over():
                    break
            if frame == PONG_SKIP - 1:
                obs = np.maximum(self.screens[0], self.screens[1])
            else:
                obs = ale.getScreenGrayscale()
            terminated = ale.game_over(with_truncation=False)
            truncated = ale.game_truncated()
            info = {
                "lives": ale.lives(),
                "episode_frame_number": ale.getEpisodeFrameNumber(),
                "frame_number": ale.getFrameNumber(),
            }
            return obs, reward, terminated, truncated, info

        def close(self):
            self.env.close()

    return MaxPoolAtari


def make_pong():
    """The Pong workload's env for the Python pools (PONG_FRAMES)."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    inner = gym.make(
        "ALE/Pong-v5",
        obs_type="grayscale",
        frameskip=1,
        repeat_action_probability=0.25,
        max_num_frames_per_episode=108000,
    ).unwrapped
    return _max_pool_atari_class()(inner)


# The makers of the issue-15 workloads' Python envs, and their number of
# actions (both Discrete).
REAL_MAKERS = {PY_CARTPOLE: gym_cartpole, PONG: make_pong}
REAL_ACTIONS = {PY_CARTPOLE: 2, PONG: 6}


# --------------------------------------------------------------------------
# Measuring.


def timed(step, seconds: float) -> float:
    """Env-steps per second of `step` (which returns the env-steps it did),
    called in a loop for `seconds` after a warm-up of a tenth of that."""
    return timed_per_call(step, seconds)[0]


def timed_per_call(step, seconds: float) -> tuple:
    """`timed`, with the env-steps per call of `step` as a second figure."""
    warm = time.perf_counter()
    calls = 0
    while calls < 3 or time.perf_counter() - warm < seconds / 10:
        step()
        calls += 1
    steps = calls = 0
    start = time.perf_counter()
    while True:
        steps += step()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return steps / elapsed, {"steps_per_call": steps / calls}


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


def row(system, env, n, config, mode, rate=None, status="ok", error=None, **extra):
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
        **extra,
    }


def guarded(system, env, n, config, mode, measure):
    """One measurement; an exception becomes a failed row. `measure` returns
    the env-steps per second, or that and a dict of more figures."""
    try:
        got = measure()
        rate, extra = got if isinstance(got, tuple) else (got, {})
        return row(system, env, n, config, mode, rate, **extra)
    except Exception as err:
        return row(
            system, env, n, config, mode, status="failed", error=f"{type(err).__name__}: {err}"
        )


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
        "gymnasium",
        env,
        n,
        "AsyncVectorEnv",
        "async",
        status="unsupported",
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
            pool = envpool.make_gymnasium(
                task, num_envs=num_envs, batch_size=num_envs, num_threads=num_threads, seed=0
            )
            pool.reset()

            def step():
                pool.step(rng.integers(0, 2, size=num_envs).astype(np.int32))
                return num_envs

            got = timed_per_call(step, seconds)
            pool.close()
            return got

        return measure

    def asynchronous():
        batch = max(n // 2, 1)
        pool = envpool.make_gymnasium(
            task, num_envs=n, batch_size=batch, num_threads=threads, seed=0
        )
        pool.async_reset()

        def step():
            *_, info = pool.recv()
            ids = info["env_id"]
            pool.send(rng.integers(0, 2, size=len(ids)).astype(np.int32), ids)
            return len(ids)

        got = timed_per_call(step, seconds)
        pool.close()
        return got

    yield guarded("envpool", env, n, "raw loop (1-env pool)", "sync", sync(1, 1))
    yield guarded("envpool", env, n, "EnvPool", "sync", sync(n, threads))
    yield guarded("envpool", env, n, "EnvPool", "async", asynchronous)


def measure_pufferlib(env, n, seconds):

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
    yield guarded(
        "pufferlib",
        env,
        n,
        "Multiprocessing",
        "async",
        run(pv.Multiprocessing, max(n // 2, 1), **mp),
    )


def measure_torchrl(env, n, seconds):
    maker = TORCHRL_MAKERS[env]

    def raw():
        envs = [maker() for _ in range(n)]
        roots = [e.reset() for e in envs]

        def step():
            for i, e in enumerate(envs):
                _, roots[i] = e.step_and_maybe_reset(e.rand_action(roots[i]))
            return n

        return timed(step, seconds)

    yield guarded("torchrl", env, n, "raw loop", "sync", raw)
    yield from torchrl_pools(env, n, seconds, [maker] * n, ("threading", "multiprocessing"))


def torchrl_options(backend, n):
    """TorchRL AsyncEnvPool's options for `backend`: its processes
    configured as rlpool's (ceil(N/cores) envs per worker process, the
    shared-memory exchange) where the installed TorchRL has those options.
    With its defaults (one spawned process per env, each importing torch:
    about 4 s of CPU each; results through queues, tensors passed as file
    descriptors: tens of env-steps per second), N = 64 took minutes and the
    measurements timed out."""
    from torchrl.envs import AsyncEnvPool

    if backend != "multiprocessing":
        return "AsyncEnvPool threading", {"backend": backend}
    params = inspect.signature(AsyncEnvPool.__init__).parameters
    options = {"backend": backend}
    config = "AsyncEnvPool processes"
    if "envs_per_worker" in params:
        options["envs_per_worker"] = -(-n // cores())
    if "exchange" in params:
        options["exchange"] = "shm"
        config += ", shm"
    return config, options


def draw_for_received(got, spec):
    """The async loop's actions: for the envs of `got` (a received batch,
    with "env_index"), actions drawn from the pool's `spec` and set into
    it. Returns how many envs it holds."""
    idx = got.get("env_index")
    idx = list(idx.tolist() if hasattr(idx, "tolist") else idx)
    got.update(spec.rand()[idx])
    return len(idx)


def torchrl_pools(env, n, seconds, makers, backends, system="torchrl"):
    """TorchRL's AsyncEnvPool (or, for system rlpool-torchrl,
    rlpool.torchrl.AsyncEnvPool, with the same options) over `makers`: for
    each backend, the sync loop (step_and_maybe_reset of all N) and the async
    one (receive min_get = N/2, send to the envs received)."""
    if system == "rlpool-torchrl":
        from rlpool.torchrl import AsyncEnvPool
    else:
        from torchrl.envs import AsyncEnvPool

    def pool(options, min_get):
        def measure():
            p = AsyncEnvPool(makers, **options)
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
                        received = draw_for_received(got, p.full_action_spec)
                        p.async_step_and_maybe_reset_send(got)
                        return received

                rate, extra = timed_per_call(step, seconds)
                extra["options"] = {k: v for k, v in options.items() if k != "backend"}
                return rate, extra
            finally:
                p.close()

        return measure

    for backend in backends:
        config, options = torchrl_options(backend, n)
        yield guarded(system, env, n, config, "sync", pool(options, n))
        yield guarded(system, env, n, config, "async", pool(options, max(n // 2, 1)))


def torchrl_bound(env, n, seconds):
    """The torchrl set's bound for `env` at `n` (REAL_CONFIGS["torchrl-bound"]):
    one row per configuration of the pools, from the env's step alone and
    the two loops' own work on the actions (torchrl_pools), timed here."""
    import torch
    from tensordict import NonTensorStack, TensorDict

    e = TORCHRL_SET_MAKERS[env]()
    e.reset()
    drawn = [e.full_action_spec.rand() for _ in range(256)]

    def step():
        for action in drawn:
            out = e.step(action).get("next")
            if bool(out.get("done")):
                e.reset()
        return len(drawn)

    spec = e.full_action_spec.expand(n)
    root = TensorDict({"done": torch.zeros(n, 1, dtype=torch.bool)}, batch_size=(n,))
    got = root.clone()
    got.set("env_index", NonTensorStack(*range(n)))

    def sync_driver():
        # The sync loop's: rand_action of the N envs.
        root.update(spec.rand())
        return 1

    def async_driver():
        # The async loop's, on a receive of all N envs (its least per env).
        draw_for_received(got, spec)
        return 1

    t_env = 1.0 / timed(step, seconds)
    t_sync = 1.0 / timed(sync_driver, seconds / 4)
    t_async = 1.0 / timed(async_driver, seconds / 4)
    k = cores()
    figures = {
        "t_env_us": t_env * 1e6,
        "t_sync_driver_us": t_sync * 1e6,
        "t_async_driver_us": t_async * 1e6,
        "cores": k,
    }
    threads, _ = torchrl_options("threading", n)
    processes, _ = torchrl_options("multiprocessing", n)
    bounds = {
        (threads, "sync"): 1.0 / (t_env + t_sync / n),
        (threads, "async"): 1.0 / (t_env + t_async / n),
        (processes, "sync"): n / (t_sync + n * t_env / k),
        (processes, "async"): min(k / (t_env + t_async / n), n / t_async),
    }
    for (config, mode), rate in bounds.items():
        yield row("torchrl-bound", env, n, config, mode, rate, **figures)
    e.close()


def torchrl_set(system):
    """The torchrl set's measurement of `system` (torchrl or rlpool-torchrl):
    the pool over TorchRL envs, threads and processes, sync and async."""

    def measure(env, n, seconds):
        makers = [TORCHRL_SET_MAKERS[env]] * n
        yield from torchrl_pools(
            env, n, seconds, makers, ("threading", "multiprocessing"), system=system
        )

    return measure


TORCHRL_SET = {
    "torchrl": torchrl_set("torchrl"),
    "rlpool-torchrl": torchrl_set("rlpool-torchrl"),
    "torchrl-bound": torchrl_bound,
}


def measure_rlpool_python(env, n, seconds):
    """rlpool from Python: the bare loops of `rlpool bench --bare`, with the
    actions drawn by numpy."""
    import numpy as np

    import rlpool

    name = "LatencyEnv" if env == "noop" else env
    half = max(n // 2, 1)
    configs = [
        ("threads", {"backend": "threading"}),
        (
            "processes, shm",
            {"backend": "multiprocessing", "exchange": "shm", "envs_per_worker": -(-n // cores())},
        ),
    ]

    def actions(rng, k):
        # Both workloads' actions: categorical(n=2), shape [1], int64.
        return {"action": rng.integers(0, 2, size=(k, 1))}

    def draw_cost(k):
        """ns per call of drawing k actions alone (numpy, and the dict)."""
        rng = np.random.default_rng(0)
        calls = 20000
        start = time.perf_counter()
        for _ in range(calls):
            actions(rng, k)
        return (time.perf_counter() - start) / calls * 1e9

    def run(options, sync):
        def measure():
            rng = np.random.default_rng(0)
            with rlpool.AsyncEnvPool([name] * n, **options) as pool:
                pool.reset()
                if sync:

                    def step():
                        pool.step_and_maybe_reset(actions(rng, n))
                        return n
                else:
                    pool.async_step_and_maybe_reset_send(actions(rng, n))

                    def step():
                        td, _ = pool.async_step_and_maybe_reset_recv(min_get=half, max_get=half)
                        envs = td["env_index"]
                        pool.async_step_and_maybe_reset_send(
                            actions(rng, len(envs)), env_index=envs
                        )
                        return len(envs)

                rate, extra = timed_per_call(step, seconds)
                extra["resolved_exchange"] = pool.resolved_exchange
            extra["draw_ns_per_call"] = draw_cost(n if sync else half)
            extra["rlpool_version"] = rlpool.__version__
            return rate, extra

        return measure

    for config, options in configs:
        yield guarded("rlpool-python", env, n, config, "sync", run(options, True))
        yield guarded("rlpool-python", env, n, config, "async", run(options, False))


# --------------------------------------------------------------------------
# The issue-15 workloads ("python" and "atari" sets): Python envs in pools.


def real_bound(env, n, seconds):
    """The machine's bound: cores x the rate of one process stepping one env
    in a plain loop, actions drawn ahead, reset when done. Independent of N;
    measured with every workload so that each N has one taken beside it."""
    import numpy as np

    e = REAL_MAKERS[env]()
    e.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, REAL_ACTIONS[env], size=4096).tolist()

    def step():
        for a in actions[:256]:
            _, _, terminated, truncated, _ = e.step(a)
            if terminated or truncated:
                e.reset()
        actions.append(actions.pop(0))
        return 256

    def measure():
        rate = timed(step, seconds)
        return rate * cores(), {"one_env_steps_per_second": rate, "cores": cores()}

    yield guarded("bound", env, n, "cores x one env, plain loop", "sync", measure)
    e.close()


def real_gymnasium(env, n, seconds):
    import gymnasium as gym
    import numpy as np

    rng = np.random.default_rng(0)
    k = REAL_ACTIONS[env]

    def measure():
        envs = gym.vector.AsyncVectorEnv([REAL_MAKERS[env]] * n, shared_memory=True)
        try:
            envs.reset(seed=0)

            def step():
                envs.step(rng.integers(0, k, size=n))
                return n

            return timed_per_call(step, seconds)
        finally:
            envs.close()

    yield guarded("gymnasium", env, n, "AsyncVectorEnv", "sync", measure)
    yield row(
        "gymnasium",
        env,
        n,
        "AsyncVectorEnv",
        "async",
        status="unsupported",
        error="AsyncVectorEnv.step_wait waits for every env: no receive of part of the envs",
    )


def real_rlpool(env, n, seconds):
    """rlpool with the Python envs in worker processes, shared memory:
    rlpool.gymnasium.AsyncVectorEnv where the package has it, else
    AsyncEnvPool with the contract's options."""
    import numpy as np

    import rlpool

    rng = np.random.default_rng(0)
    k = REAL_ACTIONS[env]
    half = max(n // 2, 1)
    fns = [REAL_MAKERS[env]] * n
    try:
        from rlpool.gymnasium import AsyncVectorEnv
    except ImportError:
        AsyncVectorEnv = None

    def vector(sync):
        def measure():
            envs = AsyncVectorEnv(fns)
            try:
                envs.reset(seed=0)
                if sync:

                    def step():
                        envs.step(rng.integers(0, k, size=n))
                        return n
                else:
                    envs.send(rng.integers(0, k, size=n), env_id=np.arange(n))

                    def step():
                        *_, infos = envs.recv(min_get=half)
                        ids = infos["env_id"]
                        envs.send(rng.integers(0, k, size=len(ids)), env_id=ids)
                        return len(ids)

                rate, extra = timed_per_call(step, seconds)
            finally:
                envs.close()
            extra["rlpool_version"] = rlpool.__version__
            return rate, extra

        return measure

    def pool(sync):
        def measure():
            options = {
                "backend": "multiprocessing",
                "exchange": "shm",
                "envs_per_worker": -(-n // cores()),
            }
            with rlpool.AsyncEnvPool(fns, **options) as p:
                p.reset()
                if sync:

                    def step():
                        p.step_and_maybe_reset({"action": rng.integers(0, k, size=n)})
                        return n
                else:
                    p.async_step_and_maybe_reset_send({"action": rng.integers(0, k, size=n)})

                    def step():
                        td, _ = p.async_step_and_maybe_reset_recv(min_get=half)
                        ids = td["env_index"]
                        p.async_step_and_maybe_reset_send(
                            {"action": rng.integers(0, k, size=len(ids))}, env_index=ids
                        )
                        return len(ids)

                rate, extra = timed_per_call(step, seconds)
                extra["resolved_exchange"] = p.resolved_exchange
            extra["rlpool_version"] = rlpool.__version__
            return rate, extra

        return measure

    if AsyncVectorEnv is not None:
        config, run = "AsyncVectorEnv", vector
    else:
        config, run = "AsyncEnvPool processes, shm", pool
    yield guarded("rlpool-python", env, n, config, "sync", run(True))
    yield guarded("rlpool-python", env, n, config, "async", run(False))


def real_pufferlib(env, n, seconds):
    import numpy as np
    import pufferlib.vector as pv

    rng = np.random.default_rng(0)
    k = REAL_ACTIONS[env]
    workers = min(cores(), n)
    batch = max(n // 2, 1)

    def measure():
        mp = {"num_workers": workers, "batch_size": batch}
        if "overwork" in inspect.signature(pv.Multiprocessing.__init__).parameters:
            mp["overwork"] = True
        vec = pv.make(puffer_cartpole, backend=pv.Multiprocessing, num_envs=n, **mp)
        try:
            vec.async_reset(0)
            ids = vec.recv()[5]

            def step():
                nonlocal ids
                vec.send(rng.integers(0, k, size=len(ids)).astype(np.int32))
                ids = vec.recv()[5]
                return len(ids)

            return timed_per_call(step, seconds)
        finally:
            vec.close()

    yield guarded("pufferlib", env, n, "Multiprocessing", "async", measure)


def real_torchrl(env, n, seconds):
    yield from torchrl_pools(
        env, n, seconds, [functools.partial(torchrl_real_env, env)] * n, ("multiprocessing",)
    )


def torchrl_real_env(env):
    from torchrl.envs import GymWrapper

    return GymWrapper(REAL_MAKERS[env]())


def real_envpool(env, n, seconds):
    import envpool
    import numpy as np

    rng = np.random.default_rng(0)
    k = REAL_ACTIONS[env]
    frames = dict(
        img_height=210,
        img_width=160,
        gray_scale=True,
        stack_num=1,
        frame_skip=PONG_SKIP,
        noop_max=1,
        use_fire_reset=False,
        episodic_life=False,
        reward_clip=False,
        repeat_action_probability=0.25,
        max_episode_steps=108000 // PONG_SKIP,
    )

    def measure(batch):
        def run():
            pool = envpool.make_gymnasium(
                "Pong-v5",
                num_envs=n,
                batch_size=batch,
                num_threads=min(cores(), n),
                seed=0,
                **frames,
            )
            try:
                if batch == n:
                    pool.reset()

                    def step():
                        pool.step(rng.integers(0, k, size=n).astype(np.int32))
                        return n
                else:
                    pool.async_reset()

                    def step():
                        *_, info = pool.recv()
                        ids = info["env_id"]
                        pool.send(rng.integers(0, k, size=len(ids)).astype(np.int32), ids)
                        return len(ids)

                return timed_per_call(step, seconds)
            finally:
                pool.close()

        return run

    yield guarded("envpool", env, n, "EnvPool", "sync", measure(n))
    yield guarded("envpool", env, n, "EnvPool", "async", measure(max(n // 2, 1)))


def real_ale(env, n, seconds):
    import numpy as np
    from ale_py.vector_env import AtariVectorEnv

    rng = np.random.default_rng(0)
    k = REAL_ACTIONS[env]
    frames = dict(
        img_height=210,
        img_width=160,
        grayscale=True,
        stack_num=1,
        frameskip=PONG_SKIP,
        maxpool=True,
        noop_max=0,
        use_fire_reset=False,
        episodic_life=False,
        reward_clipping=False,
        repeat_action_probability=0.25,
        max_num_frames_per_episode=108000,
    )

    def measure(batch):
        def run():
            vec = AtariVectorEnv(
                "pong", num_envs=n, batch_size=batch, num_threads=min(cores(), n), **frames
            )
            try:
                _, info = vec.reset(seed=0)
                got = len(info["env_id"])

                def step():
                    nonlocal got
                    # send() steps the envs of the last batch received.
                    vec.send(rng.integers(0, k, size=got))
                    *_, info = vec.recv()
                    got = len(info["env_id"])
                    return got

                return timed_per_call(step, seconds)
            finally:
                vec.close()

        return run

    yield guarded("ale-py", env, n, "AtariVectorEnv", "sync", measure(n))
    yield guarded("ale-py", env, n, "AtariVectorEnv", "async", measure(max(n // 2, 1)))


REAL = {
    "rlpool-python": real_rlpool,
    "gymnasium": real_gymnasium,
    "pufferlib": real_pufferlib,
    "torchrl": real_torchrl,
    "envpool": real_envpool,
    "ale-py": real_ale,
    "bound": real_bound,
}


MEASURE = {
    "rlpool-python": measure_rlpool_python,
    "gymnasium": measure_gymnasium,
    "envpool": measure_envpool,
    "pufferlib": measure_pufferlib,
    "torchrl": measure_torchrl,
}


def cmd_measure(args):
    """One system, one workload: one JSON line per measurement."""
    measure = (
        TORCHRL_SET if args.env in SETS["torchrl"] else REAL if args.env in REAL_ENVS else MEASURE
    )
    for r in measure[args.system](args.env, args.num_envs, args.seconds):
        print(json.dumps(r), flush=True)


# --------------------------------------------------------------------------
# Installing: one virtual environment per anchor, under --venvs, so that
# their pins (PufferLib 3.0.0 wants numpy<2 and gymnasium<=0.29.1) do not
# change what the others run. A venv that exists is reused.

# What each venv gets, one pip install at a time, in this order. A list
# gives alternatives, tried in turn until one installs; every failure is
# recorded.
VENVS = {
    # ale-py for the Pong workload: Gymnasium's AsyncVectorEnv steps its
    # Python env, and its own vector env (system "ale-py") runs from here.
    "gymnasium": ["gymnasium==1.4.0", "ale-py==0.12.1"],
    "envpool": ["envpool"],
    # PufferLib 3.0.0, the newest, is a source package whose build downloads
    # raylib and box2d from GitHub (for its Ocean C envs), which a machine
    # that reaches only PyPI cannot do; its NO_OCEAN=1 switch fails with a
    # NameError in its setup.py. 1.0.1 builds from PyPI alone and has the same
    # vector API (Serial, Multiprocessing with batch_size). 1.0.1 imports
    # psutil and filelock without declaring them.
    "pufferlib": [["pufferlib", "pufferlib==1.0.1"], "psutil", "filelock"],
    # maturin: rlpool.torchrl is installed into this venv from the working
    # tree too (install_repo builds without isolation).
    "torchrl": ["torch", "torchrl", "gymnasium", "maturin", "cloudpickle"],
    "plot": ["matplotlib"],
    # Then rlpool itself from this repository (install_repo, every run);
    # the Python envs of the python and atari sets need gymnasium,
    # cloudpickle (the makers travel to the workers with it) and ale-py,
    # pinned as python/requirements-dev.txt pins them.
    "rlpool-python": [
        "maturin",
        "numpy",
        "gymnasium==1.4.0",
        "cloudpickle==3.1.3",
        "ale-py==0.12.1",
    ],
}
IMPORTS = {
    "gymnasium": "gymnasium",
    "envpool": "envpool",
    "pufferlib": "pufferlib.vector, pufferlib.emulation",
    "torchrl": "torchrl.envs, rlpool.torchrl",
    "plot": "matplotlib",
    "rlpool-python": "rlpool",
}
# Versions recorded from each venv.
REPORTED = [
    "gymnasium",
    "ale-py",
    "cloudpickle",
    "tensordict",
    "envpool",
    "pufferlib",
    "torch",
    "torchrl",
    "numpy",
    "matplotlib",
    "maturin",
    "rlpool",
]
# The repository's root (anchors.py is xtask/anchors/anchors.py).
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
        made = subprocess.run(
            [sys.executable, "-m", "venv", status["venv"]], capture_output=True, text=True
        )
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
                capture_output=True,
                text=True,
            )
            log_name = re.sub(r"[^A-Za-z0-9._-]+", "-", choice).strip("-")
            with open(os.path.join(log_dir, f"pip-{name}-{log_name}.log"), "w") as log:
                log.write(done.stdout + done.stderr)
            attempt = {
                "package": choice,
                "seconds": round(time.perf_counter() - started, 1),
                "ok": done.returncode == 0,
            }
            if done.returncode != 0:
                attempt["error"] = why_pip_failed(done.stderr or done.stdout)
                print(
                    f"anchors: {name}: pip install {choice} FAILED: {attempt['error']}", flush=True
                )
            status["attempts"].append(attempt)
            if attempt["ok"]:
                break
        else:
            status.update(
                status="install failed",
                error="; ".join(
                    f"{a['package']}: {a['error']}" for a in status["attempts"] if not a["ok"]
                ),
            )
            status["versions"] = versions_in(python)
            return status
    if name in ("rlpool-python", "torchrl"):
        # rlpool.torchrl runs in TorchRL's venv, beside TorchRL's own pool.
        attempt = install_repo(python, log_dir)
        status["attempts"].append(attempt)
        if not attempt["ok"]:
            status.update(
                status="install failed",
                error=f"{attempt['package']}: {attempt['error']}",
                versions=versions_in(python),
            )
            return status
    check = subprocess.run(
        [python, "-c", f"import {IMPORTS[name]}"], capture_output=True, text=True
    )
    status["versions"] = versions_in(python)
    if check.returncode != 0:
        status.update(status="import failed", error=tail(check.stderr))
        print(f"anchors: {name}: IMPORT FAILED:\n{status['error']}", flush=True)
    else:
        status["status"] = "ok"
    return status


def install_repo(python: str, log_dir: str) -> dict:
    """pip-installs rlpool from this repository's working tree into the venv
    of `python` (maturin, release build, in the workspace's target
    directory). Done on every run: with the sources unchanged, cargo has
    nothing to rebuild and the install takes a few seconds; after a change,
    the crates that changed are rebuilt (the first build, a few minutes)."""
    print(f"anchors: pip install {REPO} (rlpool, release build) ...", flush=True)
    started = time.perf_counter()
    done = subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-build-isolation",
            "--no-cache-dir",
            "--force-reinstall",
            "--no-deps",
            REPO,
        ],
        capture_output=True,
        text=True,
    )
    with open(os.path.join(log_dir, "pip-rlpool-python-repo.log"), "w") as log:
        log.write(done.stdout + done.stderr)
    attempt = {
        "package": f"rlpool from {REPO}",
        "seconds": round(time.perf_counter() - started, 1),
        "ok": done.returncode == 0,
    }
    if done.returncode != 0:
        attempt["error"] = why_pip_failed(done.stderr or done.stdout)
        print(
            f"anchors: rlpool-python: pip install of the repository FAILED: {attempt['error']}",
            flush=True,
        )
    else:
        print(
            f"anchors: rlpool installed from the repository in {attempt['seconds']} s", flush=True
        )
    return attempt


def why_pip_failed(text: str) -> str:
    """The line of pip's output that says why, else its last lines."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if (
            any(word in line for word in ("Error:", "Error ", "error:"))
            and "subprocess-exited-with-error" not in line
        ):
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
    cmd = [
        rlpool,
        "bench",
        "--env",
        name,
        "--sizes",
        str(n),
        "--seconds",
        str(seconds),
        "--json",
        "--bare",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return [
            row("rlpool", env, n, "rlpool bench", "sync", status="failed", error=tail(done.stderr))
        ]
    rows = []
    for line in done.stdout.splitlines():
        got = json.loads(line)
        config = "raw loop" if got["config"].startswith("raw loop") else got["config"]
        extra = {
            k: got[k] for k in ("steps_per_call", "draw_ns_per_call", "paired_ratio") if got.get(k)
        }
        rows.append(row("rlpool", env, n, config, got["mode"], got["steps_per_second"], **extra))
    return rows


def run_anchor(python, system, env, n, seconds):
    cmd = [
        python,
        os.path.abspath(__file__),
        "measure",
        "--system",
        system,
        "--env",
        env,
        "--num-envs",
        str(n),
        "--seconds",
        str(seconds),
    ]
    try:
        # Pools of Python envs start a process per env (AsyncVectorEnv) or
        # import torch in each worker (TorchRL): the startup grows with N.
        timeout = 120 + 20 * seconds + 3 * n
        if env in SETS["torchrl"]:
            # Four pools (two backends, sync and async), each starting its
            # workers (torch imported in each) and stepping TorchRL envs.
            timeout = 300 + 60 * seconds + 10 * n
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        rows.append(
            row(
                system, env, n, "(the rest)", "-", status="failed", error=f"timed out ({timeout} s)"
            )
        )
        return rows
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0:
        rows.append(
            row(
                system,
                env,
                n,
                "(process)",
                "-",
                status="failed",
                error=f"exit status {done.returncode}: {tail(done.stderr)}",
            )
        )
    return rows


# The system whose raw loop is another's baseline: rlpool driven from Python
# steps the same Rust envs as rlpool driven from Rust.
RAW_OF = {"rlpool-python": "rlpool"}


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
        base = raw.get((RAW_OF.get(r["system"], r["system"]), r["env"], r["num_envs"]))
        if rate and base and not r["config"].startswith("raw loop"):
            r["raw_ns_per_env_step"] = 1e9 / base
            r["overhead_ns_per_env_step"] = 1e9 / rate - 1e9 / base
        else:
            r["raw_ns_per_env_step"] = 1e9 / base if base else None
            r["overhead_ns_per_env_step"] = None


# The goals of issue 14 for rlpool driven from Python.
SPEED_GOAL = 3.0  # x EnvPool's rate, CartPole-v1, N = 64, same loop, same run
LAYER_US_PER_CALL = 5.0  # the Python layer's cost per pool call, at most...
LAYER_NS_PER_STEP = 50.0  # ...plus this per env-step
# Pool calls per loop iteration: sync, one step_and_maybe_reset; async, one
# receive and one send.
CALLS = {"sync": 1, "async": 2}


def python_front(rows):
    """For each rlpool-python measurement: the same loop driven from Rust
    (rlpool's `<mode>-bare` row), EnvPool's same loop, the Python layer's
    cost per call and per env-step, and the goals."""
    ok = {
        (r["system"], r["env"], r["num_envs"], r["config"], r["mode"]): r
        for r in rows
        if r["status"] == "ok" and r["num_envs"]
    }
    front = []
    for (system, env, n, config, mode), py in ok.items():
        if system != "rlpool-python":
            continue
        rust = ok.get(("rlpool", env, n, config, f"{mode}-bare"))
        envpool = ok.get(("envpool", env, n, "EnvPool", mode))
        spc = py.get("steps_per_call") or (n if mode == "sync" else max(n // 2, 1))
        entry = {
            "env": env,
            "num_envs": n,
            "config": config,
            "mode": mode,
            "python_steps_per_second": py["steps_per_second"],
            "rust_steps_per_second": rust["steps_per_second"] if rust else None,
            "envpool_steps_per_second": envpool["steps_per_second"] if envpool else None,
            "steps_per_iteration": spc,
            "calls_per_iteration": CALLS[mode],
            "python_us_per_iteration": spc / py["steps_per_second"] * 1e6,
            "python_draw_us_per_iteration": (py.get("draw_ns_per_call") or 0) / 1e3 or None,
            "layer_budget_us_per_iteration": CALLS[mode] * LAYER_US_PER_CALL
            + spc * LAYER_NS_PER_STEP / 1e3,
        }
        if rust:
            rust_spc = rust.get("steps_per_call") or spc
            entry["rust_us_per_iteration"] = rust_spc / rust["steps_per_second"] * 1e6
            entry["python_layer_us_per_call"] = (
                entry["python_us_per_iteration"] - entry["rust_us_per_iteration"]
            )
            entry["python_layer_ns_per_env_step"] = (
                1e9 / py["steps_per_second"] - 1e9 / rust["steps_per_second"]
            )
            entry["rust_draw_us_per_iteration"] = (rust.get("draw_ns_per_call") or 0) / 1e3 or None
            # Without the drawing of the actions (numpy's in Python, the
            # action spec's in Rust): what the rlpool package adds. The goal
            # is judged on it.
            entry["python_layer_us_per_call_without_draws"] = (
                entry["python_layer_us_per_call"]
                - (entry["python_draw_us_per_iteration"] or 0)
                + (entry["rust_draw_us_per_iteration"] or 0)
            )
            entry["python_layer_ns_per_env_step_without_draws"] = (
                entry["python_layer_us_per_call_without_draws"] * 1e3 / spc
            )
            entry["layer_goal_met"] = (
                entry["python_layer_us_per_call_without_draws"]
                <= entry["layer_budget_us_per_iteration"]
            )
        if envpool:
            entry["over_envpool"] = py["steps_per_second"] / envpool["steps_per_second"]
            entry["speed_goal_met"] = entry["over_envpool"] >= SPEED_GOAL
        front.append(entry)
    return front


def front_fit(front):
    """Per (env, config, mode), when two sizes or more were measured: the
    least-squares line through the Python layer's cost per call (without the
    draws) against the env-steps per call, i.e. a fixed cost per pool call
    and a cost per env-step."""
    groups = {}
    for e in front:
        if e.get("python_layer_us_per_call_without_draws") is not None:
            groups.setdefault((e["env"], e["config"], e["mode"]), []).append(
                (e["steps_per_iteration"], e["python_layer_us_per_call_without_draws"])
            )
    fits = []
    for (env, config, mode), points in groups.items():
        xs = [p[0] for p in points]
        if len(set(xs)) < 2:
            continue
        mx, my = sum(xs) / len(xs), sum(p[1] for p in points) / len(points)
        slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
        fits.append(
            {
                "env": env,
                "config": config,
                "mode": mode,
                "sizes": len(points),
                "us_per_pool_call": (my - slope * mx) / CALLS[mode],
                "ns_per_env_step": slope * 1e3,
            }
        )
    return fits


FRONT_HEAD = [
    "env",
    "N",
    "config",
    "mode",
    "Python",
    "Rust",
    "EnvPool",
    "Python / EnvPool",
    "layer per call",
    "draws Py / Rust",
    "layer w/o draws",
    "per env-step",
    "budget",
]


def front_cells(e):
    """One row of the Python front's table."""

    def rate(v):
        return si(v) if v else "-"

    def us(v):
        return human_ns(v * 1e3) if v is not None else "-"

    layer = e.get("python_layer_us_per_call_without_draws")
    verdict = "" if layer is None else (" met" if e["layer_goal_met"] else " NOT met")
    return [
        e["env"],
        str(e["num_envs"]),
        e["config"],
        e["mode"],
        rate(e["python_steps_per_second"]),
        rate(e["rust_steps_per_second"]),
        rate(e["envpool_steps_per_second"]),
        f"{e['over_envpool']:.2f}x" if e.get("over_envpool") else "-",
        us(e.get("python_layer_us_per_call")),
        f"{us(e.get('python_draw_us_per_iteration'))} / {us(e.get('rust_draw_us_per_iteration'))}",
        us(layer),
        human_ns(e.get("python_layer_ns_per_env_step_without_draws")),
        us(e["layer_budget_us_per_iteration"]) + verdict,
    ]


def front_lines(doc, markdown):
    """The Python front's figures as text lines (a Markdown table when
    `markdown`)."""
    front = doc.get("python_front") or []
    if not front:
        return []
    rows = [
        front_cells(e)
        for e in sorted(
            front, key=lambda e: (ENVS.index(e["env"]), e["num_envs"], e["config"], e["mode"])
        )
    ]
    if markdown:
        lines = ["| " + " | ".join(FRONT_HEAD) + " |", "|" + "---|" * len(FRONT_HEAD)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        widths = [max(len(r[i]) for r in [FRONT_HEAD, *rows]) for i in range(len(FRONT_HEAD))]
        lines = [
            "  "
            + "  ".join(
                c.ljust(w) if i < 4 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))
            )
            for r in [FRONT_HEAD, *rows]
        ]
    for f in doc.get("python_front_fit") or []:
        lines.append(
            f"{'- ' if markdown else '  '}fit over {f['sizes']} sizes, {f['env']}, {f['config']}, "
            f"{f['mode']}: {f['us_per_pool_call']:.2f} us per pool call "
            f"({f['us_per_pool_call'] * CALLS[f['mode']]:.2f} us per iteration), "
            f"{f['ns_per_env_step']:+.0f} ns per env-step (layer without draws)"
        )
    return lines


def goals(front):
    """Issue 14's goals, judged on the CartPole-v1 rows at N = 64: the speed
    goal on the async loop (EnvPool's send/recv loop) and, for the record,
    on the sync one; the layer goal (without the draws) on both."""
    out = []
    for e in front:
        if e["env"] != "CartPole-v1" or e["num_envs"] != 64:
            continue
        if e.get("over_envpool") is not None:
            out.append(
                {
                    "goal": f"rlpool-python >= {SPEED_GOAL:g}x EnvPool",
                    "config": e["config"],
                    "mode": e["mode"],
                    "figure": round(e["over_envpool"], 2),
                    "met": e["speed_goal_met"],
                }
            )
        if e.get("python_layer_us_per_call_without_draws") is not None:
            out.append(
                {
                    "goal": f"Python layer <= {LAYER_US_PER_CALL:g} us per pool call + "
                    f"{LAYER_NS_PER_STEP:g} ns per env-step (without the draws)",
                    "config": e["config"],
                    "mode": e["mode"],
                    "figure": round(e["python_layer_us_per_call_without_draws"], 2),
                    "with_draws": round(e["python_layer_us_per_call"], 2),
                    "budget": round(e["layer_budget_us_per_iteration"], 2),
                    "met": e["layer_goal_met"],
                }
            )
    return out


def goal_lines(goals_):
    lines = []
    for g in goals_:
        if "budget" in g:
            figure = (
                f"{g['figure']} us per call (budget {g['budget']} us; "
                f"with the draws {g['with_draws']} us)"
            )
        else:
            figure = f"{g['figure']}x"
        lines.append(
            f"{'met' if g['met'] else 'NOT MET'}: {g['goal']}, CartPole-v1, N = 64, "
            f"{g['config']}, {g['mode']}: {figure}"
        )
    return lines


# Issue 15's goals for rlpool driven from Python with Python envs: per
# workload, the sizes judged (None: every size measured) and, per anchor
# system, the least ratio of rlpool's rate to the anchor's.
REAL_GOALS = {
    PY_CARTPOLE: {"sizes": [32], "targets": {"gymnasium": 5.0, "pufferlib": 1.5, "bound": 0.8}},
    PONG: {"sizes": None, "targets": {"gymnasium": 1.5, "envpool": 0.8}},
}


def real_comparisons(rows):
    """For each issue-15 workload, N and rlpool-python loop (sync, async):
    rlpool's rate over each other system's. An anchor is compared in the
    same loop when it has one, else in the loop it has (Gymnasium's
    AsyncVectorEnv: sync only; PufferLib: async only; the bound: one).
    Where REAL_GOALS names the anchor and the size, the goal and whether
    it is met."""
    ok = [r for r in rows if r["status"] == "ok" and r["num_envs"] and r["env"] in REAL_ENVS]
    out = []
    for py in ok:
        if py["system"] != "rlpool-python":
            continue
        env, n = py["env"], py["num_envs"]
        others = {}
        for r in ok:
            if r["env"] != env or r["num_envs"] != n or r["system"] == "rlpool-python":
                continue
            have = others.get((r["system"], r["config"]))
            if have is None or (r["mode"] == py["mode"] and have["mode"] != py["mode"]):
                others[(r["system"], r["config"])] = r
        goal = REAL_GOALS.get(env, {})
        for (system, config), r in sorted(others.items()):
            entry = {
                "env": env,
                "num_envs": n,
                "rlpool_config": py["config"],
                "mode": py["mode"],
                "system": system,
                "config": config,
                "against_mode": r["mode"],
                "rlpool_steps_per_second": py["steps_per_second"],
                "steps_per_second": r["steps_per_second"],
                "ratio": py["steps_per_second"] / r["steps_per_second"],
            }
            target = goal.get("targets", {}).get(system)
            sizes = goal.get("sizes")
            if target is not None and (sizes is None or n in sizes):
                entry["goal"] = target
                entry["met"] = entry["ratio"] >= target
            out.append(entry)
    order = {s: i for i, s in enumerate(REAL_SYSTEM_ORDER)}
    out.sort(
        key=lambda e: (
            REAL_ENVS.index(e["env"]),
            e["num_envs"],
            {"sync": 0, "async": 1}.get(e["mode"], 9),
            order.get(e["system"], 99),
        )
    )
    return out


def torchrl_comparisons(measurements):
    """For each row of TorchRL's pool in the torchrl set, rlpool.torchrl's
    rate in the same configuration over it, and the configuration's bound
    (torchrl_bound): how far over TorchRL it lets any pool go, and the share
    of it that rlpool.torchrl reached."""

    def by_config(system):
        return {
            (r["env"], r["num_envs"], r["config"], r["mode"]): r
            for r in measurements
            if r["system"] == system and r["status"] == "ok"
        }

    ours, bounds = by_config("rlpool-torchrl"), by_config("torchrl-bound")
    out = []
    for r in measurements:
        if r["system"] != "torchrl" or r["status"] != "ok" or r["env"] not in SETS["torchrl"]:
            continue
        key = (r["env"], r["num_envs"], r["config"], r["mode"])
        mine = ours.get(key)
        if mine is None:
            continue
        entry = {
            "env": r["env"],
            "num_envs": r["num_envs"],
            "config": r["config"],
            "mode": r["mode"],
            "rlpool_steps_per_second": mine["steps_per_second"],
            "torchrl_steps_per_second": r["steps_per_second"],
            "ratio": mine["steps_per_second"] / r["steps_per_second"],
        }
        bound = bounds.get(key)
        if bound is not None:
            entry["bound_steps_per_second"] = bound["steps_per_second"]
            entry["bound_over_torchrl"] = bound["steps_per_second"] / r["steps_per_second"]
            entry["share_of_bound"] = mine["steps_per_second"] / bound["steps_per_second"]
        out.append(entry)
    return out


def ratio_text(system, ratio):
    """rlpool's rate over a system's: a percentage of the machine's bound,
    else a factor."""
    return f"{ratio:.0%}" if system == "bound" else f"{ratio:.2f}x"


def goal_text(system, goal):
    return f"{goal:.0%}" if system == "bound" else f"{goal:g}x"


def against_text(system, config):
    return "the machine's bound" if system == "bound" else f"{system} {config}"


def real_goal_lines(comparisons):
    """The goals of issue 15 that the run could judge, one line each."""
    lines = []
    for e in comparisons:
        if "goal" not in e:
            continue
        verdict = "met" if e["met"] else "NOT MET"
        where = f"{e['env']}, N = {e['num_envs']}"
        if e["system"] == "bound":
            lines.append(
                f"{verdict}: rlpool {e['mode']} >= {e['goal']:.0%} of the machine's bound, "
                f"{where}: {e['ratio']:.0%}"
            )
        else:
            lines.append(
                f"{verdict}: rlpool {e['mode']} >= {e['goal']:g}x {e['system']} {e['config']} "
                f"({e['against_mode']}), {where}: {e['ratio']:.2f}x"
            )
    return lines


def real_tables(doc):
    """The issue-15 workloads as Markdown: per workload, the env-steps per
    second of every system (one column per N), then rlpool's rate over each
    other system's with the goals."""
    rows = [r for r in doc["measurements"] if r["env"] in REAL_ENVS and r["num_envs"]]
    comparisons = real_comparisons(doc["measurements"])
    lines = []
    for env in REAL_ENVS:
        mine = [r for r in rows if r["env"] == env]
        if not mine:
            continue
        sizes = sizes_of(doc, env)
        lines.append(f"{REAL_TITLES[env]}: env-steps per second\n")
        lines.append(
            "| system | configuration | mode | " + " | ".join(f"N = {n}" for n in sizes) + " |"
        )
        lines.append("|---|---|---|" + "---|" * len(sizes))
        cells = {}
        for r in mine:
            if r["status"] == "ok":
                text = si(r["steps_per_second"])
            elif r["status"] == "unsupported":
                continue
            else:
                text = r["status"]
            cells.setdefault((r["system"], r["config"], r["mode"]), {})[r["num_envs"]] = text
        order = {s: i for i, s in enumerate(REAL_SYSTEM_ORDER)}
        modes = {"sync": 0, "async": 1}
        for key in sorted(
            cells, key=lambda k: (order.get(k[0], 99), k[1], modes.get(k[2], 9), k[2])
        ):
            system, config, mode = key
            lines.append(
                f"| {system} | {config} | {mode} | "
                + " | ".join(cells[key].get(n, "-") for n in sizes)
                + " |"
            )
        lines.append("")
        failed = [r for r in mine if r["status"] not in ("ok", "unsupported")]
        for r in failed:
            why = (r["error"] or "").strip().splitlines() or [""]
            lines.append(
                f"- {r['system']} {r['config']} {r['mode']}, N = {r['num_envs']}: "
                f"{r['status']}: {why[-1]}"
            )
        if failed:
            lines.append("")
        mine_cmp = [e for e in comparisons if e["env"] == env]
        if mine_cmp:
            lines.append(f"{REAL_TITLES[env]}: rlpool's rate over each other system's\n")
            lines.append(
                "| rlpool loop | against | its loop | "
                + " | ".join(f"N = {n}" for n in sizes)
                + " | goal |"
            )
            lines.append("|---|---|---|" + "---|" * len(sizes) + "---|")
            by_key = {}
            for e in mine_cmp:
                key = (e["mode"], e["system"], e["config"], e["against_mode"])
                by_key.setdefault(key, {})[e["num_envs"]] = e
            for key in sorted(
                by_key, key=lambda k: (modes.get(k[0], 9), order.get(k[1], 99), k[2])
            ):
                mode, system, config, against = key
                goal = "-"
                texts = []
                for n in sizes:
                    e = by_key[key].get(n)
                    if e is None:
                        texts.append("-")
                        continue
                    text = ratio_text(system, e["ratio"])
                    if "goal" in e:
                        text += " (met)" if e["met"] else " (NOT met)"
                        judged = REAL_GOALS[env]["sizes"]
                        goal = f">= {goal_text(system, e['goal'])}" + (
                            f" at N = {', '.join(map(str, judged))}" if judged else ""
                        )
                    texts.append(text)
                lines.append(
                    f"| {mode} | {against_text(system, config)} | {against} | "
                    + " | ".join(texts)
                    + f" | {goal} |"
                )
            lines.append("")
    return lines


def sizes_of(doc, env):
    """The numbers of envs measured for `env` in the run of `doc`."""
    for name, envs in SETS.items():
        if env in envs and name in (doc.get("sets") or {}):
            return doc["sets"][name]["sizes"]
    return doc["sizes"]


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
            print(
                f"  {r['system']:<13} {r['config']:<24} {r['mode']:<10} "
                f"{r['steps_per_second']:>12.0f} /s {human_ns(r['ns_per_env_step']):>10}/step  "
                f"overhead {human_ns(r['overhead_ns_per_env_step']):>10}",
                flush=True,
            )
        else:
            print(
                f"  {r['system']:<13} {r['config']:<24} {r['mode']:<10} "
                f"{r['status'].upper()}: {r['error']}",
                flush=True,
            )


# How the run measures, written into the JSON.
METHOD = (
    "For each workload (env, N), each system in turn, the order rotated "
    "by one place from one workload to the next. A measurement is the "
    "env-steps per second of a loop that draws fresh random actions "
    "(numpy, or rlpool's action spec), sends them and receives the "
    "results, for the given seconds after a warm-up of a tenth of that. "
    "raw loop: the N envs stepped in turn by one thread (EnvPool: a "
    "1-env pool; rlpool: step_into on reused buffers, with 64 random "
    "actions per env drawn ahead and used in turn). "
    "overhead_ns_per_env_step = ns per env-step of the pool minus that "
    "of the same system's raw loop of the same workload (rlpool-python: "
    "rlpool's). python_front: each rlpool-python measurement beside the "
    "same loop driven from Rust (rlpool bench --bare: sync-bare, "
    "async-bare) and EnvPool's (sync: step of all N; async: batch_size = "
    "N/2, recv then send to the envs received). A call is one loop "
    "iteration: one step_and_maybe_reset (sync), or one receive and one "
    "send (async). python_layer_us_per_call = Python's time per "
    "iteration minus Rust's; python_layer_ns_per_env_step = the same per "
    f"env-step; the goal: at most {LAYER_US_PER_CALL:g} us per pool call "
    f"(1 sync, 2 async) plus {LAYER_NS_PER_STEP:g} ns per env-step; and "
    f"rlpool-python at least {SPEED_GOAL:g}x EnvPool's rate on "
    "CartPole-v1 at N = 64. The layer goal is judged without the draws: "
    "draw_ns_per_call is the time of drawing one call's actions alone "
    "(numpy's rng.integers in Python; the action spec's sampling and a "
    "row gather in Rust), python_layer_us_per_call_without_draws = "
    "python_layer_us_per_call - Python's draw + Rust's draw."
    " The python and atari sets (issue 15): the same Python envs (REAL_MAKERS) in "
    "every pool that runs Python envs, the actions drawn by numpy; the bound: "
    "cores x one process stepping one env in a plain loop (actions drawn ahead, "
    "reset when done), measured beside each workload; real_comparisons: "
    "rlpool-python's rate over each other system's, in the same loop where that "
    "system has it, with issue 15's goals (REAL_GOALS)."
)


def cmd_run(args):
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    started = time.perf_counter()
    sets = args.sets or [name for name in SETS if name != "torchrl" or args.with_torchrl]
    if "torchrl" in sets and not args.with_torchrl:
        sys.exit("anchors.py run: the torchrl set needs --with-torchrl (torch: several GB)")
    if "core" in sets and not args.rlpool:
        sys.exit("anchors.py run: the core set needs --rlpool (the rlpool binary)")
    plan = {
        name: {
            "envs": list(SETS[name]),
            "sizes": args.sizes or SET_SIZES[name],
            "seconds": args.seconds if args.seconds is not None else SET_SECONDS[name],
            "systems": [
                system for system in SET_SYSTEMS[name] if system != "torchrl" or args.with_torchrl
            ],
        }
        for name in sets
    }
    # The systems of the sets chosen, each once, in the sets' order; the
    # venvs they run in (rlpool from Rust needs none).
    systems = list(dict.fromkeys(x for name in sets for x in plan[name]["systems"]))
    anchors = list(dict.fromkeys(VENV_OF.get(x, x) for x in systems if x != "rlpool"))

    installs = {name: ensure(args.venvs, name) for name in [*anchors, "plot"]}
    available = {x: x == "rlpool" or installs[VENV_OF.get(x, x)]["status"] == "ok" for x in systems}
    for x in systems:
        if not available[x]:
            venv = VENV_OF.get(x, x)
            print(f"anchors: {x} is NOT measured: {venv}: {installs[venv]['status']}", flush=True)

    rlpool_version = (
        subprocess.run([args.rlpool, "--version"], capture_output=True, text=True).stdout.strip()
        if args.rlpool
        else None
    )
    core = plan.get("core")
    doc = {
        "command": args.command,
        "date": now(),
        "machine": machine(),
        "load_before": load(),
        "uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "sets": plan,
        # The core set's (the plot and tables of issue 14's runs read these).
        "seconds_per_measurement": core["seconds"] if core else None,
        "sizes": core["sizes"] if core else None,
        "versions": {
            "rlpool": rlpool_version,
            "git_commit": args.git_commit,
            "rustc": args.rustc,
            "driver_python": platform.python_version(),
            **{name: installs[name].get("versions", {}) for name in installs},
        },
        "installs": installs,
        "systems": {
            x: {
                "measured": available[x],
                "venv": None if x == "rlpool" else VENV_OF.get(x, x),
                "configs": CONFIGS.get(x) if core else None,
                "real_configs": REAL_CONFIGS.get(x),
                "envs": DESCRIPTIONS[x],
                "note": NOTES.get(x) if core else None,
                "real_note": REAL_NOTES.get(x),
            }
            for x in systems
        },
        "pong_frames": PONG_FRAMES if "atari" in sets else None,
        "method": METHOD,
        "measurements": [],
    }
    for x in systems:
        if not available[x]:
            doc["measurements"].append(
                row(
                    x,
                    plan[next(name for name in sets if x in plan[name]["systems"])]["envs"][0],
                    None,
                    "(all)",
                    "-",
                    status=installs[VENV_OF.get(x, x)]["status"],
                    error=installs[VENV_OF.get(x, x)].get("error"),
                )
            )

    for name in sets:
        measured = [x for x in plan[name]["systems"] if available[x]]
        print(
            f"anchors: set {name}: measuring {', '.join(measured)}; N in "
            f"{plan[name]['sizes']}; {plan[name]['seconds']} s per measurement",
            flush=True,
        )
        for x in measured:
            config = CONFIGS.get(x) if name == "core" else REAL_CONFIGS.get(x)
            print(f"  {x}: {config}")
            note = NOTES.get(x) if name == "core" else REAL_NOTES.get(x)
            if note:
                print(f"    note: {note}")
            for env in SETS[name]:
                print(f"    {env}: {DESCRIPTIONS[x][env]}")
        if name == "atari":
            print(f"  the frames, on every system: {PONG_FRAMES}")
    workload = 0
    for name in sets:
        measured = [x for x in plan[name]["systems"] if available[x]]
        if not measured:
            print(f"== set {name}: no system could be measured", flush=True)
            continue
        seconds = plan[name]["seconds"]
        for env in SETS[name]:
            for n in plan[name]["sizes"]:
                k = workload % len(measured)
                turn = measured[k:] + measured[:k]
                workload += 1
                print(f"== {env}, {n} envs (order: {', '.join(turn)})", flush=True)
                for x in turn:
                    if x == "rlpool":
                        got = run_rlpool(args.rlpool, env, n, seconds)
                    else:
                        python = venv_python(args.venvs, VENV_OF.get(x, x))
                        got = run_anchor(python, x, env, n, seconds)
                    doc["measurements"].extend(got)
                    add_overheads(doc["measurements"])
                    print_rows(got)
    add_overheads(doc["measurements"])
    if "torchrl" in sets:
        doc["torchrl_comparisons"] = torchrl_comparisons(doc["measurements"])
        print(
            "rlpool.torchrl.AsyncEnvPool over TorchRL's AsyncEnvPool (the same envs, options "
            "and loop; issue 16's goal: 10x at N = 16 on every configuration):",
            flush=True,
        )
        for c in doc["torchrl_comparisons"]:
            bound = (
                f"; bound {si(c['bound_steps_per_second'])} = {c['bound_over_torchrl']:.1f}x "
                f"TorchRL, rlpool at {c['share_of_bound']:.0%} of it"
                if "bound_steps_per_second" in c
                else ""
            )
            print(
                f"  {c['env']}, N = {c['num_envs']}, {c['config']}, {c['mode']}: "
                f"{si(c['rlpool_steps_per_second'])} / {si(c['torchrl_steps_per_second'])} "
                f"= {c['ratio']:.1f}x{bound}",
                flush=True,
            )
    if core:
        doc["python_front"] = python_front(doc["measurements"])
        doc["python_front_fit"] = front_fit(doc["python_front"])
        doc["goals"] = goals(doc["python_front"])
        print(
            "rlpool from Python beside rlpool from Rust (the same loop) and EnvPool; the Python "
            "layer's cost per call (sync: one step; async: one receive and one send) and per "
            "env-step:",
            flush=True,
        )
        for line in front_lines(doc, markdown=False):
            print(line, flush=True)
        for line in goal_lines(doc["goals"]):
            print(f"  {line}", flush=True)
    if any(name != "core" for name in sets):
        doc["real_comparisons"] = real_comparisons(doc["measurements"])
        doc["real_goals"] = [e for e in doc["real_comparisons"] if "goal" in e]
        print("rlpool with Python envs beside the others (issue 15):", flush=True)
        for line in real_tables(doc):
            print(f"  {line}", flush=True)
        for line in real_goal_lines(doc["real_comparisons"]):
            print(f"  {line}", flush=True)
    doc["load_after"] = load()
    doc["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    doc["run_seconds"] = round(time.perf_counter() - started, 1)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
    print(
        f"anchors: wrote {args.out} ({doc['run_seconds']} s; "
        f"load average {doc['load_before']['load_1m']:.1f} "
        f"before, {doc['load_after']['load_1m']:.1f} after, on {doc['machine']['cores']} cores)",
        flush=True,
    )
    if installs["plot"]["status"] == "ok":
        drawn = subprocess.run(
            [
                venv_python(args.venvs, "plot"),
                os.path.abspath(__file__),
                "plot",
                "--json",
                args.out,
                "--svg",
                args.svg,
            ],
            capture_output=True,
            text=True,
        )
        print(
            drawn.stdout.strip()
            if drawn.returncode == 0
            else f"anchors: NO PLOT: {tail(drawn.stderr)}"
        )
    else:
        print(f"anchors: NO PLOT: matplotlib: {installs['plot']['status']}")


# --------------------------------------------------------------------------
# The plot.

# The order of the systems in the tables.
SYSTEM_ORDER = ["gymnasium", "rlpool", "rlpool-python", "envpool", "pufferlib", "torchrl"]
REAL_SYSTEM_ORDER = [
    "rlpool-python",
    "bound",
    "gymnasium",
    "pufferlib",
    "torchrl",
    "rlpool-torchrl",
    "torchrl-bound",
    "envpool",
    "ale-py",
]
REAL_TITLES = {
    TORCHRL_CARTPOLE: "TorchRL's GymEnv('CartPole-v1') in TorchRL's pool and rlpool.torchrl's",
    TORCHRL_MOCK: "A TorchRL env with a trivial step (TrivialEnv) in both pools",
    PY_CARTPOLE: "Gymnasium's CartPole-v1 (a Python env, gymnasium.make's default wrappers)",
    PONG: f"ALE/Pong-v5 through ale-py ({PONG_FRAMES})",
}

COLORS = {
    "bound": "black",
    "ale-py": "tab:cyan",
    "rlpool": "tab:red",
    "rlpool-python": "tab:brown",
    "gymnasium": "tab:blue",
    "envpool": "tab:green",
    "pufferlib": "tab:purple",
    "torchrl": "tab:orange",
    "rlpool-torchrl": "tab:olive",
    "torchrl-bound": "black",
}
STYLES = ["-", "--", "-."]  # dotted is for the raw loops
MARKERS = ["o", "s", "^", "D"]


def plot(doc, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in doc["measurements"] if r["status"] == "ok" and r["num_envs"]]
    # One row of panels per workload measured: sync, async.
    envs = [env for env in ENVS if any(r["env"] == env for r in ok)]
    fig, axes = plt.subplots(len(envs), 2, figsize=(13, 5 * len(envs)), squeeze=False)
    for i, env in enumerate(envs):
        sizes = sizes_of(doc, env)
        for j, mode in enumerate(("sync", "async")):
            ax = axes[i][j]
            lines = {}
            for r in ok:
                if r["env"] != env:
                    continue
                # Raw loops and the machine's bound: dotted, in both panels.
                raw = r["config"].startswith("raw loop") or r["system"] == "bound"
                if raw and mode != "sync" and r["system"] != "bound":
                    continue
                if not raw and r["mode"] != mode:
                    continue
                lines.setdefault((r["system"], r["config"]), []).append(
                    (r["num_envs"], r["steps_per_second"])
                )
            per_system = {}
            for (system, config), points in sorted(lines.items()):
                points.sort()
                raw = config.startswith("raw loop") or system == "bound"
                k = per_system.setdefault(system, [])
                if not raw:
                    k.append(config)
                style = ":" if raw else STYLES[(len(k) - 1) % len(STYLES)]
                ax.plot(
                    [p[0] for p in points],
                    [p[1] for p in points],
                    color=COLORS.get(system, "black"),
                    linestyle=style,
                    marker=MARKERS[(len(k) - 1) % len(MARKERS)],
                    markersize=4,
                    linewidth=1 if raw else 1.6,
                    alpha=0.6 if raw else 1.0,
                    label=f"{system}: {config}",
                )
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(sizes)
            ax.set_xticklabels([str(n) for n in sizes])
            title = (
                "synchronous (all N per step)"
                if mode == "sync"
                else "asynchronous (N/2 per receive)"
            )
            ax.set_title(f"{env}: {title}", fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
            if i == len(envs) - 1:
                ax.set_xlabel("number of envs N")
            if j == 0:
                ax.set_ylabel("env-steps per second")
            ax.legend(fontsize=7, loc="best")
    m = doc["machine"]
    missing = sorted({r["system"] for r in doc["measurements"] if not r["num_envs"]})
    fig.suptitle(
        f"rlpool and its anchors: {m.get('cores')} cores, {m.get('cpu', '')}, {doc['date'][:10]}; "
        f"load {doc['load_before']['load_1m']:.1f} before, "
        f"{doc.get('load_after', {}).get('load_1m', float('nan')):.1f} after; "
        "s per point: "
        + ", ".join(f"{k} {v['seconds']:g}" for k, v in (doc.get("sets") or {}).items())
        + (f"{doc['seconds_per_measurement']}" if "sets" not in doc else "")
        + "; dotted: raw loops, the machine's bound"
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
    """The figures of a run as Markdown tables for the README and
    docs/performance.md: for the core set, one per env, env-steps per second
    and the pool overhead per env-step in brackets; for the python and
    atari sets, each workload's rates and rlpool's ratios with the goals."""
    with open(args.json) as f:
        doc = json.load(f)
    m = doc["machine"]
    print(
        f"`{doc['command']}` at commit {doc['versions'].get('git_commit')}, {doc['date'][:16]}, "
        f"{m.get('cores')} cores ({m.get('cpu', '')}); load average "
        f"{doc['load_before']['load_1m']:.1f} before, "
        f"{doc.get('load_after', {}).get('load_1m', float('nan')):.1f} after\n"
    )
    for r in doc["measurements"]:
        if not r["num_envs"]:
            print(f"{r['system']}: NOT MEASURED ({r['status']}): {r['error']}\n")
    for env in SETS["core"]:
        if not any(r["env"] == env and r["num_envs"] for r in doc["measurements"]):
            continue
        sizes = sizes_of(doc, env)
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
        # Systems in a fixed order (the run's order rotates), each system's
        # rows as measured.
        systems = [*SYSTEM_ORDER, *sorted({k[0] for k in cells} - set(SYSTEM_ORDER))]
        keys = sorted(cells, key=lambda k: systems.index(k[0]))
        for system, config, mode in keys:
            by_n = cells[(system, config, mode)]
            print(
                f"| {system} | {config} | {mode} | "
                + " | ".join(by_n.get(n, "-") for n in sizes)
                + " |"
            )
        print()
    lines = front_lines(doc, markdown=True)
    if lines:
        print(
            "rlpool from Python beside rlpool from Rust (the same loop) and EnvPool: env-steps per "
            "second; the Python layer's cost per call (sync: one step; async: one receive and one "
            "send) and per env-step\n"
        )
        for line in lines:
            print(line)
        print()
        for line in goal_lines(doc.get("goals") or []):
            print(f"- {line}")
        print()
    for line in real_tables(doc):
        print(line)
    for line in real_goal_lines(real_comparisons(doc["measurements"])):
        print(f"- {line}")


SPREAD = [
    ("python_steps_per_second", "Python", si),
    ("rust_steps_per_second", "Rust", si),
    ("envpool_steps_per_second", "EnvPool", si),
    ("over_envpool", "Python / EnvPool", lambda v: f"{v:.2f}x"),
    ("python_layer_us_per_call", "layer per call", lambda v: human_ns(v * 1e3)),
    ("python_layer_us_per_call_without_draws", "layer w/o draws", lambda v: human_ns(v * 1e3)),
    ("python_layer_ns_per_env_step_without_draws", "per env-step", human_ns),
]


def median(values):
    values = sorted(values)
    half = len(values) // 2
    return values[half] if len(values) % 2 else (values[half - 1] + values[half]) / 2


def median_text(values, fmt):
    """median (min .. max) of `values`, each formatted by `fmt`."""
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(median(values))} ({fmt(min(values))} .. {fmt(max(values))})"


def cmd_spread(args):
    """The figures of several runs (JSON files of `run`): median (min ..
    max) of each, as Markdown tables: the Python front's (core set),
    rlpool's rates and ratios on issue 15's workloads with the goals (the
    goal judged on the median; how many runs met it), and the torchrl set's
    ratios with their bounds."""
    docs = []
    for path in args.json:
        with open(path) as f:
            docs.append(json.load(f))
    print(
        f"{len(docs)} runs: "
        + "; ".join(
            f"{d['date'][:16]} commit {d['versions'].get('git_commit')} "
            f"load {d['load_before']['load_1m']:.1f}"
            f"/{d.get('load_after', {}).get('load_1m', float('nan')):.1f}"
            for d in docs
        )
        + "\n"
    )
    if spread_table([d.get("python_front") or [] for d in docs], SPREAD, lambda mode: mode):
        print()
    real = {}
    for doc in docs:
        for e in real_comparisons(doc["measurements"]):
            key = (e["env"], e["num_envs"], e["mode"], e["system"], e["config"], e["against_mode"])
            got = real.setdefault(key, {"rlpool": [], "other": [], "ratio": [], "met": []})
            got["rlpool"].append(e["rlpool_steps_per_second"])
            got["other"].append(e["steps_per_second"])
            got["ratio"].append(e["ratio"])
            if "goal" in e:
                got["goal"] = e["goal"]
                got["met"].append(e["met"])
    if real:
        head = ["workload", "N", "rlpool loop", "rlpool", "against", "its rate", "ratio", "goal"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        order = {x: i for i, x in enumerate(REAL_SYSTEM_ORDER)}
        modes = {"sync": 0, "async": 1}
        for key in sorted(
            real,
            key=lambda k: (REAL_ENVS.index(k[0]), k[1], modes.get(k[2], 9), order.get(k[3], 99)),
        ):
            env, n, mode, system, config, against = key
            got = real[key]
            goal = "-"
            if "goal" in got:
                verdict = "met" if median(got["ratio"]) >= got["goal"] else "NOT met"
                goal = (
                    f">= {goal_text(system, got['goal'])}: {verdict} "
                    f"(in {sum(got['met'])} of {len(got['met'])} runs)"
                )
            ratio = median_text(got["ratio"], functools.partial(ratio_text, system))
            print(
                f"| {env} | {n} | {mode} | {median_text(got['rlpool'], si)} | "
                f"{against_text(system, config)} ({against}) | "
                f"{median_text(got['other'], si)} | {ratio} | {goal} |"
            )
    torchrl_spread(docs)


# The torchrl set's figures that `spread` reports: field, column, format.
TORCHRL_SPREAD = [
    ("torchrl_steps_per_second", "TorchRL", si),
    ("rlpool_steps_per_second", "rlpool.torchrl", si),
    ("ratio", "ratio", lambda x: f"{x:.1f}x"),
    ("bound_steps_per_second", "bound", si),
    ("bound_over_torchrl", "bound / TorchRL", lambda x: f"{x:.1f}x"),
    ("share_of_bound", "rlpool / bound", lambda x: f"{x:.0%}"),
]


def torchrl_spread(docs):
    """`spread`'s table of the torchrl set (issue 16: the goal is 10x
    TorchRL at N = 16), one row per configuration."""
    runs = [d.get("torchrl_comparisons") or [] for d in docs]
    if any(runs):
        modes = {"sync": 0, "async": 1}
        print()
        spread_table(runs, TORCHRL_SPREAD, lambda mode: modes.get(mode, 9))


def spread_table(runs, fields, mode_order):
    """One Markdown row per (env, N, config, mode) of the entries of
    `runs` (a list per run), with the median (min .. max) of each of
    `fields` ((field, column, format)); whether there was any."""
    cells = {}
    for entries in runs:
        for e in entries:
            key = (e["env"], e["num_envs"], e["config"], e["mode"])
            for field, _, _ in fields:
                if e.get(field) is not None:
                    cells.setdefault(key, {}).setdefault(field, []).append(e[field])
    if not cells:
        return False
    head = ["env", "N", "config", "mode"] + [name for _, name, _ in fields]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for key in sorted(cells, key=lambda k: (ENVS.index(k[0]), k[1], k[2], mode_order(k[3]))):
        row_cells = [key[0], str(key[1]), key[2], key[3]]
        for field, _, fmt in fields:
            values = cells[key].get(field, [])
            row_cells.append(median_text(values, fmt) if values else "-")
        print("| " + " | ".join(row_cells) + " |")
    return True


def sets_arg(text):
    """--sets: names of SETS, comma-separated, kept in SETS's order."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SETS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown set {', '.join(unknown) or '(none)'}: choose from {', '.join(SETS)}"
        )
    return [name for name in SETS if name in names]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    run = sub.add_parser("run", help="install the anchors, measure everything, write JSON and plot")
    run.add_argument(
        "--rlpool", default=None, help="the rlpool binary (release build; the core set needs it)"
    )
    run.add_argument("--out", default="target/bench/anchors.json")
    run.add_argument("--svg", default="target/bench/anchors.svg")
    run.add_argument(
        "--sets",
        type=sets_arg,
        default=None,
        help=f"the workload sets to run, comma-separated, from {', '.join(SETS)} (default: "
        "all; torchrl only with --with-torchrl)",
    )
    run.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",")],
        default=None,
        help="the numbers of envs, for every set (default: each set's own: "
        + "; ".join(f"{k} {','.join(map(str, v))}" for k, v in SET_SIZES.items())
        + ")",
    )
    run.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="seconds per measurement, for every set (default: each set's own: "
        + "; ".join(f"{k} {v:g}" for k, v in SET_SECONDS.items())
        + ")",
    )
    run.add_argument("--venvs", default="target/bench/venv", help="where the per-anchor venvs live")
    run.add_argument("--with-torchrl", action="store_true")
    run.add_argument("--command", default="cargo xtask bench --anchors")
    run.add_argument("--git-commit", default=None)
    run.add_argument("--rustc", default=None)
    measure = sub.add_parser("measure", help="one system, one workload (used by run)")
    measure.add_argument("--system", choices=sorted({*MEASURE, *REAL, *TORCHRL_SET}), required=True)
    measure.add_argument("--env", choices=ENVS, required=True)
    measure.add_argument("--num-envs", type=int, required=True)
    measure.add_argument("--seconds", type=float, default=0.5)
    redraw = sub.add_parser("plot", help="redraw the plot from a JSON file")
    redraw.add_argument("--json", default="target/bench/anchors.json")
    redraw.add_argument("--svg", default="target/bench/anchors.svg")
    table = sub.add_parser("table", help="print a run's figures as Markdown tables")
    table.add_argument("--json", default="target/bench/anchors.json")
    spread = sub.add_parser(
        "spread", help="the Python front's figures over several runs: median (min .. max)"
    )
    spread.add_argument("json", nargs="+", help="JSON files written by run")
    args = parser.parse_args()
    verbs = {
        "run": cmd_run,
        "measure": cmd_measure,
        "plot": cmd_plot,
        "table": cmd_table,
        "spread": cmd_spread,
    }
    verbs[args.verb](args)


if __name__ == "__main__":
    main()
