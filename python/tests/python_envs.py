"""Gymnasium envs for the tests of Python envs in pools: an env of any
spaces whose observations are its spaces' samples (seeded by reset) and
whose infos echo the action, and envs that fail in each way an env can.

Worker processes import this module by name (the pool gives them the
parent's ``sys.path``, which holds the tests' directory)."""

from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class SpaceEnv(gym.Env):  # type: ignore[type-arg]
    """Observations sampled from ``observation_space`` (its seed drawn from
    the env's own generator at each reset); reward the step count; episodes
    of ``episode`` steps (terminated), or truncated at ``truncate`` steps;
    the info echoes the action, the step count and the reset's options."""

    def __init__(
        self,
        observation_space: spaces.Space,  # type: ignore[type-arg]
        action_space: spaces.Space,  # type: ignore[type-arg]
        episode: int = 5,
        truncate: int = 1 << 30,
        info: bool = True,
    ) -> None:
        self.observation_space = observation_space
        self.action_space = action_space
        self.episode = episode
        self.truncate = truncate
        self.with_info = info
        self.t = 0
        self.label = "unset"

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(1 << 31)))
        self.t = 0
        info = {"reset": True, "options": options} if self.with_info else {}
        return self.observation_space.sample(), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        self.t += 1
        info = {"action": action, "t": self.t} if self.with_info else {}
        terminated = self.t >= self.episode
        truncated = not terminated and self.t >= self.truncate
        return self.observation_space.sample(), float(self.t), terminated, truncated, info

    def slow(self, seconds: float) -> str:
        time.sleep(seconds)
        return f"slept {seconds}"

    def boom(self) -> None:
        raise KeyError("no such thing")


def box_env(dtype: str = "float32", shape: tuple[int, ...] = (3,), **kwargs: Any) -> SpaceEnv:
    """A SpaceEnv with a Box observation of ``dtype`` and a Discrete action."""
    if np.issubdtype(np.dtype(dtype), np.floating):
        low, high = -2.5, 2.5
    elif dtype == "bool":
        return SpaceEnv(spaces.MultiBinary(shape), spaces.Discrete(2), **kwargs)
    else:
        info = np.iinfo(np.dtype(dtype))
        low, high = max(int(info.min), -100), min(int(info.max), 100)
    return SpaceEnv(spaces.Box(low, high, shape, dtype=dtype), spaces.Discrete(2), **kwargs)


def nested_env(**kwargs: Any) -> SpaceEnv:
    """A SpaceEnv whose observation and action are Dicts and Tuples nested
    three deep, with every leaf kind."""
    observation = spaces.Dict(
        {
            "pos": spaces.Box(-1.0, 1.0, (2,), np.float32),
            "inner": spaces.Tuple(
                (
                    spaces.Discrete(3, start=-1),
                    spaces.MultiBinary(4),
                    spaces.Dict({"grid": spaces.Box(0, 255, (2, 3), np.uint8)}),
                )
            ),
            "counts": spaces.MultiDiscrete([3, 5]),
        }
    )
    action = spaces.Tuple(
        (
            spaces.Discrete(4),
            spaces.Dict(
                {
                    "force": spaces.Box(-1.0, 1.0, (2,), np.float64),
                    "keys": spaces.MultiBinary(3),
                }
            ),
        )
    )
    return SpaceEnv(observation, action, **kwargs)


def text_env(**kwargs: Any) -> SpaceEnv:
    """A SpaceEnv whose observation holds a Text leaf (no fixed shape)."""
    observation = spaces.Dict({"word": spaces.Text(8), "x": spaces.Box(-1, 1, (2,), np.float32)})
    return SpaceEnv(observation, spaces.Discrete(2), **kwargs)


def box2() -> spaces.Box:
    """The observation space of ``box_env(shape=(2,))``, a new one per env."""
    return spaces.Box(-2.5, 2.5, (2,), np.float32)


class Raising(SpaceEnv):
    """A Box env that raises ``ValueError`` at step ``fail_at`` (once per
    reset)."""

    def __init__(self, fail_at: int = 2) -> None:
        super().__init__(box2(), spaces.Discrete(2))
        self.fail_at = fail_at

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.t + 1 == self.fail_at:
            self.t += 1
            raise ValueError(f"the simulator diverged at step {self.t}")
        return super().step(action)


class Crashing(SpaceEnv):
    """A Box env whose step with action 1 crashes its process (a read of
    address 0: a segfault, as a broken extension would)."""

    def __init__(self) -> None:
        super().__init__(box2(), spaces.Discrete(2))

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if action == 1:
            ctypes.string_at(0)
        return super().step(action)


class BigInfo(SpaceEnv):
    """A Box env whose step info holds ``size`` bytes."""

    def __init__(self, size: int) -> None:
        super().__init__(box2(), spaces.Discrete(2))
        self.size = size

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"blob": b"x" * self.size}


class VaryingInfo(SpaceEnv):
    """A Box env whose step infos change size: ``sizes[t % len(sizes)]``
    bytes at step ``t`` (0: an empty info)."""

    def __init__(self, sizes: list[int]) -> None:
        super().__init__(box2(), spaces.Discrete(2))
        self.sizes = sizes

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, _ = super().step(action)
        size = self.sizes[self.t % len(self.sizes)]
        return obs, reward, terminated, truncated, {"blob": b"y" * size} if size else {}


class WrongShape(SpaceEnv):
    """A Box env of shape (2,) that returns observations of shape (3,)."""

    def __init__(self) -> None:
        super().__init__(box2(), spaces.Discrete(2))

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return np.zeros(3, np.float32), 0.0, False, False, {}


def failing_maker() -> gym.Env:  # type: ignore[type-arg]
    raise RuntimeError("no simulator licence on this machine")


def not_an_env() -> object:
    return object()


def where_am_i() -> SpaceEnv:
    """A Box env that records the process and directory it was built in."""
    env = box_env()
    env.label = f"{os.getpid()}:{os.getcwd()}"
    return env


class ThreadRecorder(SpaceEnv):
    """A Box env that records the threads it stepped on (``threads``: each
    thread's id and CPU set), and sleeps ``step_s`` in each step (the GIL
    released, as an env waiting on I/O)."""

    def __init__(self, step_s: float = 0.0) -> None:
        super().__init__(box2(), spaces.Discrete(2), episode=1 << 30)
        self.step_s = step_s
        self.threads: set[tuple[int, tuple[int, ...]]] = set()

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        cpus = tuple(sorted(os.sched_getaffinity(0)))
        self.threads.add((threading.get_ident(), cpus))
        if self.step_s:
            time.sleep(self.step_s)
        return super().step(action)


class Closing(SpaceEnv):
    """A Box env that appends a line to ``path`` when closed."""

    def __init__(self, path: str) -> None:
        super().__init__(box2(), spaces.Discrete(2))
        self.path = path

    def close(self) -> None:
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()}\n")


class Hanging(SpaceEnv):
    """A Box env whose first step never returns (for a whole minute)."""

    def __init__(self) -> None:
        super().__init__(box2(), spaces.Discrete(2))

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        time.sleep(60)
        return super().step(action)
