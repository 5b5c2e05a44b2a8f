"""Small Gymnasium envs for the differential tests of ``rlpool.gymnasium``.

Each draws everything from its own ``np_random``, so that two copies given
the same seed and actions agree step for step; episodes are short and end
both ways (terminated at random, truncated after ``max_steps``); infos come
in several shapes (none, ints, arrays, strings, nested dicts).
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces


class Countdown(gymnasium.Env[np.ndarray, np.int64]):
    """A Box observation (float32, shape (3,)) and a Discrete(3) action.

    Terminates with probability ``p_end`` per step, truncates after
    ``max_steps``. The reward is ``scale * action - t / 4``. Infos: every
    third step ``{"t": int, "vec": int64 array}``, ``{"why": "end"}`` on
    termination, ``{}`` otherwise; a reset's info is ``{"opts": options}``
    when options were given, else ``{}``. Attributes ``scale`` and
    ``delay`` (seconds slept in each step), a method ``peek(k)``. ``bound``
    and ``actions`` change the spaces (the observations' bounds, the
    number of actions) for tests of spaces that differ; ``close()`` appends
    a line to the file ``close_log``.
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 4}  # noqa: RUF012

    def __init__(
        self,
        max_steps: int = 6,
        p_end: float = 0.2,
        delay: float = 0.0,
        render_mode: str | None = None,
        bound: float = np.inf,
        actions: int = 3,
        close_log: str | None = None,
    ) -> None:
        self.observation_space = spaces.Box(-bound, bound, (3,), np.float32)
        self.action_space = spaces.Discrete(actions)
        self.max_steps = max_steps
        self.p_end = p_end
        self.delay = delay
        self.render_mode = render_mode
        self.scale = 1.0
        self.t = 0
        self.obs = np.zeros(3, np.float32)
        self.close_log = close_log

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        self.obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return self.obs.copy(), ({"opts": dict(options)} if options else {})

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.delay:
            time.sleep(self.delay)
        self.t += 1
        noise = self.np_random.normal(size=3).astype(np.float32)
        self.obs = (self.obs * 0.5 + int(action) + noise).astype(np.float32)
        reward = self.scale * float(action) - self.t / 4
        terminated = bool(self.np_random.random() < self.p_end)
        truncated = self.t >= self.max_steps
        info: dict[str, Any] = {}
        if self.t % 3 == 0:
            info = {"t": self.t, "vec": np.arange(2, dtype=np.int64) * self.t}
        if terminated:
            info["why"] = "end"
        return self.obs.copy(), reward, terminated, truncated, info

    def close(self) -> None:
        if self.close_log is not None:
            with open(self.close_log, "a") as log:
                log.write("closed\n")

    def peek(self, k: int) -> int:
        return self.t * k

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return np.full((2, 2, 3), self.t, dtype=np.uint8)


class Nested(gymnasium.Env[dict[str, Any], tuple[Any, ...]]):
    """A Dict observation with a Tuple inside, a Tuple action with a Dict
    inside: Box (float64, int16), Discrete with a start, MultiDiscrete and
    MultiBinary leaves. Nested infos (``{"sub": {"k": ...}}``)."""

    def __init__(self, max_steps: int = 5) -> None:
        self.observation_space = spaces.Dict(
            {
                "pos": spaces.Box(-1.0, 1.0, (2,), np.float64),
                "flags": spaces.MultiBinary(3),
                "inner": spaces.Tuple((spaces.Discrete(4, start=1), spaces.MultiDiscrete([2, 3]))),
            }
        )
        self.action_space = spaces.Tuple(
            (
                spaces.Dict(
                    {
                        "move": spaces.Box(-1.0, 1.0, (2,), np.float32),
                        "grid": spaces.Box(0, 9, (2, 2), np.int16),
                    }
                ),
                spaces.Discrete(3),
            )
        )
        self.max_steps = max_steps
        self.t = 0
        self.pos = np.zeros(2)

    def _obs(self) -> dict[str, Any]:
        return {
            "pos": self.pos.copy(),
            "flags": self.np_random.integers(0, 2, 3).astype(np.int8),
            "inner": (
                int(self.np_random.integers(1, 5)),
                self.np_random.integers(0, [2, 3]).astype(np.int64),
            ),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        self.pos = self.np_random.uniform(-1, 1, 2)
        return self._obs(), {"sub": {"start": self.pos.copy()}}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        move, pick = action
        self.t += 1
        grid = np.asarray(move["grid"], dtype=np.float64).sum() / 100
        self.pos = np.clip(self.pos + np.asarray(move["move"], np.float64) / 4 + grid, -1, 1)
        reward = float(pick) + float(self.pos.sum())
        terminated = bool(abs(self.pos[0]) >= 1.0)
        truncated = self.t >= self.max_steps
        info = {"sub": {"pick": int(pick)}} if pick == 2 else {}
        return self._obs(), reward, terminated, truncated, info


class Failing(Countdown):
    """A Countdown whose step number ``fail_at`` raises ``ValueError``."""

    def __init__(self, fail_at: int = 2) -> None:
        super().__init__(max_steps=100, p_end=0.0)
        self.fail_at = fail_at

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.t + 1 == self.fail_at:
            raise ValueError(f"deliberate failure at step {self.fail_at}")
        return super().step(action)


class Labeled(gymnasium.Env[dict[str, Any], np.int64]):
    """A Dict observation with a ``Text`` entry (no fixed shape: it travels
    pickled, by the queue exchange) beside a Box."""

    def __init__(self) -> None:
        self.observation_space = spaces.Dict(
            {"pos": spaces.Box(-1.0, 1.0, (2,), np.float32), "name": spaces.Text(5)}
        )
        self.action_space = spaces.Discrete(2)

    def _obs(self) -> dict[str, Any]:
        length = int(self.np_random.integers(1, 6))
        return {
            "pos": self.np_random.uniform(-1, 1, 2).astype(np.float32),
            "name": "abcde"[:length],
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        return self._obs(), float(action), bool(self.np_random.random() < 0.3), False, {}


class Spoken(Countdown):
    """A Countdown whose action space is ``Text``: a space rlpool cannot
    send actions of."""

    def __init__(self) -> None:
        super().__init__()
        self.action_space = spaces.Text(3)  # type: ignore[assignment]
