"""The TorchRL envs the suite runs, written here (TorchRL's own mocks live in
``torchrl.testing.mocking_classes``; these are re-created in our words so
that the suite depends on TorchRL's public API only).

- :class:`CountingEnv`: an int32 counter that each step adds its action to;
  done (and terminated) once the count passes ``max_steps``. Its specs are
  those of TorchRL's mock: a ``Binary`` int8 action of shape (1,), a float32
  reward, ``Categorical(2)`` bool done flags, no ``truncated``.
- :class:`DelayedCountingEnv`: the same, each call waiting ``delay`` seconds
  first (to make envs finish in a chosen order).
- :class:`TrivialEnv`: the cheapest step there is (the bench's mock env).
- :class:`BrokenEnv`: a step that raises, for the error tests.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from tensordict import TensorDict
from torchrl.data import Binary, Categorical, Composite, Unbounded
from torchrl.envs import EnvBase


class CountingEnv(EnvBase):
    """Counts: observation = start + the sum of the actions so far."""

    def __init__(self, max_steps: int = 5, start_val: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_steps = max_steps
        self.start_val = start_val
        self.observation_spec = Composite(observation=Unbounded((1,), dtype=torch.int32))
        self.reward_spec = Unbounded((1,))
        self.done_spec = Categorical(2, dtype=torch.bool, shape=(1,))
        self.action_spec = Binary(n=1, shape=(1,))
        self.count = torch.zeros(1, dtype=torch.int32)

    def _set_seed(self, seed: int | None) -> None:
        torch.manual_seed(seed)

    def _flags(self) -> dict[str, torch.Tensor]:
        over = self.count > self.max_steps
        return {"observation": self.count.clone(), "done": over, "terminated": over.clone()}

    def _reset(self, tensordict: Any, **kwargs: Any) -> TensorDict:
        if tensordict is not None and "_reset" in tensordict:
            self.count[tensordict.get("_reset")] = self.start_val
        else:
            self.count[:] = self.start_val
        return TensorDict(self._flags(), batch_size=())

    def _step(self, tensordict: Any) -> TensorDict:
        self.count += tensordict.get("action").to(torch.int32)
        out = self._flags()
        out["reward"] = torch.zeros(1, dtype=torch.float32)
        return TensorDict(out, batch_size=())


class DelayedCountingEnv(CountingEnv):
    """A :class:`CountingEnv` whose reset and step first wait ``delay`` s."""

    def __init__(self, *args: Any, delay: float, **kwargs: Any) -> None:
        self.delay = delay
        super().__init__(*args, **kwargs)

    def _reset(self, tensordict: Any, **kwargs: Any) -> TensorDict:
        threading.Event().wait(self.delay)
        return super()._reset(tensordict, **kwargs)

    def _step(self, tensordict: Any) -> TensorDict:
        threading.Event().wait(self.delay)
        return super()._step(tensordict)


class TrivialEnv(EnvBase):
    """A float32 observation of 4 zeros, reward 0, never done."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.observation_spec = Composite(observation=Unbounded((4,)))
        self.reward_spec = Unbounded((1,))
        self.action_spec = Categorical(2, shape=(1,))
        self._obs = torch.zeros(4)
        self._false = torch.zeros(1, dtype=torch.bool)

    def _set_seed(self, seed: int | None) -> None:
        pass

    def _reset(self, tensordict: Any, **kwargs: Any) -> TensorDict:
        return TensorDict(
            {"observation": self._obs, "done": self._false, "terminated": self._false},
            batch_size=(),
        )

    def _step(self, tensordict: Any) -> TensorDict:
        return TensorDict(
            {
                "observation": self._obs,
                "reward": torch.zeros(1),
                "done": self._false,
                "terminated": self._false,
            },
            batch_size=(),
        )


class BrokenEnv(CountingEnv):
    """A :class:`CountingEnv` whose step raises."""

    def _step(self, tensordict: Any) -> TensorDict:
        raise RuntimeError("this env cannot step")


class BatchedEnv(CountingEnv):
    """A :class:`CountingEnv` of batch size (2,): rlpool refuses it."""

    def __init__(self) -> None:
        EnvBase.__init__(self, batch_size=(2,))
        self.observation_spec = Composite(
            observation=Unbounded((2, 1), dtype=torch.int32), shape=(2,)
        )
        self.reward_spec = Unbounded((2, 1))
        self.action_spec = Binary(n=1, shape=(2, 1))
