"""A TorchRL env (an ``EnvBase``) in a pool's worker: the adapter that the
Rust side steps, beside :class:`rlpool._pyenv.Adapter` (Gymnasium's). Its
specs become rlpool leaves once; each call turns the action leaves into a
``tensordict.TensorDict``, calls ``env.step`` (or ``env.reset``) and gives the
result's leaves back as numpy arrays.

torch is imported only where a TorchRL env was built (its maker imported
it already); this module itself imports nothing of torch at import time, so
``import rlpool`` stays free of it.

>>> is_torchrl_env(object())
False
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from rlpool._pyenv import Adapter, Leaf

__all__ = ["TorchRLAdapter", "is_torchrl_env", "numpy_of", "torch_dtype_name"]

_DONE_KEYS = ("done", "terminated", "truncated")

_DTYPES = frozenset(
    ["bool", "uint8", "int8", "int16", "int32", "int64", "float32", "float64"],
)


def is_torchrl_env(env: Any) -> bool:
    """Whether ``env`` is a TorchRL ``EnvBase`` (checked without importing
    torchrl: a maker that built one imported it already)."""
    common = sys.modules.get("torchrl.envs.common")
    return common is not None and isinstance(env, common.EnvBase)


def torch_dtype_name(dtype: Any) -> str:
    """The numpy name of a torch dtype (``torch.float32`` -> ``"float32"``)."""
    return str(dtype).rsplit(".", 1)[-1]


def _key_str(key: Any) -> str:
    return key if isinstance(key, str) else "/".join(key)


def _spec_leaf(group: str, path: tuple[str, ...], spec: Any, where: str) -> Leaf:
    """One TorchRL leaf spec as an rlpool leaf ``(group, path, kind, dtype,
    shape, param)``; raises a ``TypeError`` naming the key for a spec the
    pool's buffers cannot hold."""
    from torchrl.data import (
        Binary,
        Bounded,
        Categorical,
        MultiCategorical,
        MultiOneHot,
        NonTensor,
        OneHot,
    )

    if isinstance(spec, NonTensor):
        raise TypeError(
            f"{where}: the non-tensor spec at {_key_str((group, *path))!r} has no place in "
            "the pool's buffers (rlpool runs TorchRL envs whose entries are tensors)"
        )
    dtype = torch_dtype_name(spec.dtype)
    if dtype not in _DTYPES:
        raise TypeError(
            f"{where}: the spec at {_key_str((group, *path))!r} has dtype {dtype}, which the "
            f"pool does not hold (one of {', '.join(sorted(_DTYPES))})"
        )
    shape = tuple(int(d) for d in spec.shape)
    if isinstance(spec, (Binary, MultiOneHot, OneHot)):
        # Zeros and ones in the buffers; the parent keeps the exact spec.
        return (group, path, "binary", dtype, shape, None)
    if isinstance(spec, MultiCategorical):
        nvec = spec.nvec.cpu().numpy()
        if nvec.ndim == 1 and shape and shape[-1] == len(nvec):
            return (group, path, "multi_categorical", dtype, shape, [int(n) for n in nvec])
        low = np.zeros(shape, dtype=dtype)
        high = np.ascontiguousarray(np.broadcast_to(nvec - 1, shape), dtype=dtype)
        return (group, path, "bounded", dtype, shape, (low, high))
    if isinstance(spec, Categorical):
        return (group, path, "categorical", dtype, shape, int(spec.n))
    if isinstance(spec, Bounded):
        low = np.ascontiguousarray(spec.space.low.cpu().numpy(), dtype=dtype)
        high = np.ascontiguousarray(spec.space.high.cpu().numpy(), dtype=dtype)
        return (group, path, "bounded", dtype, shape, (low, high))
    return (group, path, "unbounded", dtype, shape, None)


def _tensor(torch: Any, value: Any) -> Any:
    """An action leaf from the pool (an array, or a Python scalar for
    shape ``()``) as a tensor sharing its memory."""
    return torch.from_numpy(value) if isinstance(value, np.ndarray) else torch.as_tensor(value)


def _getter(td: Any) -> Any:
    """A lookup of ``td``'s own entries by string key: the dict inside a
    plain ``TensorDict`` (a dict lookup, where ``TensorDict.get`` spends
    about 2 us on its checks: several per step), else ``td.get``."""
    entries = getattr(td, "_tensordict", None)
    return entries.get if type(entries) is dict else td.get


def numpy_of(tensor: Any) -> Any:
    """A CPU tensor as a numpy array sharing its memory; a tensor that
    needs grad or lives on another device is detached and copied first."""
    try:
        return tensor.numpy()
    except (RuntimeError, TypeError):
        return tensor.detach().cpu().numpy()


class TorchRLAdapter(Adapter):
    """One TorchRL env as the Rust side steps it (``pyenv.rs``): the same
    calls as a Gymnasium env's :class:`~rlpool._pyenv.Adapter` (``describe``,
    ``reset``, ``step``, ``set_reset_args``, ``handle``, ``close``), on
    ``env.reset()`` and ``env.step(td)``.

    Args:
        env: the ``EnvBase``, of batch size ``()``.
        index: the env's index in the pool.
        in_worker: whether this is a worker process (torch then runs one
            thread, as TorchRL's workers do).

    Raises:
        TypeError: an env the pool cannot hold (a batch size, a reward of
            another key or shape, a done key other than ``done``,
            ``terminated`` and ``truncated``, state entries, a non-tensor
            entry, an action not under ``"action"``); the message names the
            env and the key.
    """

    def __init__(self, env: Any, index: int, *, in_worker: bool) -> None:
        import torch
        from tensordict import TensorDict

        if in_worker:
            torch.set_num_threads(1)
        self._torch = torch
        self._td_class = TensorDict
        self._no_batch = torch.Size(())
        self.env = env
        self.index = index
        self.name = type(env).__name__
        self.max_info_bytes = 0
        import threading

        self.lock = threading.Lock()
        self._closed = False
        self._seed: int | None = None
        self._options: dict[str, Any] | None = None
        self._next_step = False
        self._needs_reset = False
        where = f"env {index} ({self.name})"
        if tuple(env.batch_size) != ():
            raise TypeError(
                f"{where} has batch size {tuple(env.batch_size)}: rlpool runs TorchRL envs of "
                "batch size () (one env per pool slot)"
            )
        reward = env.full_reward_spec
        reward_keys = list(reward.keys(True, True))
        if reward_keys != ["reward"] or tuple(reward["reward"].shape) != (1,):
            raise TypeError(
                f"{where}: its reward spec has keys {[_key_str(k) for k in reward_keys]}; rlpool "
                "runs TorchRL envs with one reward of shape (1,) under 'reward'"
            )
        self.reward_dtype = torch_dtype_name(reward["reward"].dtype)
        if self.reward_dtype not in ("float32", "float64"):
            raise TypeError(
                f"{where}: its reward at 'reward' is {self.reward_dtype}; rlpool holds float32 "
                "or float64 rewards"
            )
        for key in env.full_done_spec.keys(True, True):
            if key not in _DONE_KEYS or tuple(env.full_done_spec[key].shape) != (1,):
                raise TypeError(
                    f"{where}: the done entry {_key_str(key)!r} is not one of done, terminated, "
                    "truncated of shape (1,), the flags rlpool's envs give"
                )
        for key in env.full_state_spec.keys(True, True):
            raise TypeError(
                f"{where}: its state spec has the entry {_key_str(key)!r}; rlpool runs TorchRL "
                "envs without state entries"
            )
        self._action_keys: list[Any] = []
        self._leaves: list[Leaf] = []
        for key, spec in env.full_action_spec.items(True, True):
            path = (key,) if isinstance(key, str) else tuple(key)
            if path[0] != "action":
                raise TypeError(
                    f"{where}: its action is at {_key_str(key)!r}; rlpool takes the actions "
                    "of TorchRL envs under 'action'"
                )
            self._leaves.append(_spec_leaf("action", path[1:], spec, where))
            self._action_keys.append(key)
        self._observation_keys: list[Any] = []
        for key, spec in env.full_observation_spec.items(True, True):
            path = (key,) if isinstance(key, str) else tuple(key)
            if path[0] in ("reward", "info", *_DONE_KEYS):
                raise TypeError(
                    f"{where}: its observation {_key_str(key)!r} has a name the pool keeps "
                    "for its own entries"
                )
            self._leaves.append(_spec_leaf(path[0], path[1:], spec, where))
            self._observation_keys.append(key)
        if not self._action_keys:
            raise TypeError(f"{where} has no action")
        if not self._observation_keys:
            raise TypeError(f"{where} has no observation")
        self._flat_action = self._action_keys == ["action"]
        self._flat_observation = len(self._observation_keys) == 1
        self._has_truncated = "truncated" in env.full_done_spec.keys()  # noqa: SIM118

    def describe(self) -> tuple[str, list[Leaf], int, bool, bool, str]:  # type: ignore[override]
        """The env's name, its leaves, no info, whether the action and the
        observation cross as one value, and the reward's dtype."""
        return (
            self.name,
            list(self._leaves),
            0,
            self._flat_action,
            self._flat_observation,
            self.reward_dtype,
        )

    def _observation(self, td: Any) -> Any:
        get = _getter(td)
        keys = self._observation_keys
        leaves = tuple(numpy_of(get(key) if type(key) is str else td.get(key)) for key in keys)
        return leaves[0] if self._flat_observation else leaves

    def _reset(self) -> tuple[Any, bytes | None]:
        seed = self._seed
        self._seed = self._options = None
        if seed is not None:
            self.env.set_seed(seed)
        return self._observation(self.env.reset()), None

    def step(self, action: Any) -> tuple[Any, ...]:
        """Steps the env: (observation leaves, reward, terminated,
        truncated, None)."""
        torch = self._torch
        with self.lock:
            if self._flat_action:
                # One tensor under "action": the TensorDict without the
                # checks of its constructor (half its cost), as the rest of
                # rlpool.torchrl builds them.
                td = self._td_class._new_unsafe(
                    {"action": _tensor(torch, action)}, batch_size=self._no_batch
                )
            else:
                source = {
                    key: _tensor(torch, value) for key, value in zip(self._action_keys, action)
                }
                td = self._td_class(source, batch_size=())
            out = self.env.step(td).get("next")
            get = _getter(out)
            done = bool(get("done"))
            terminated = bool(get("terminated", done))
            truncated = bool(get("truncated")) if self._has_truncated else False
            if done and not (terminated or truncated):
                terminated = True
            return (
                self._observation(out),
                float(get("reward")),
                terminated,
                truncated,
                None,
            )

    def set_reset_args(self, seed: int | None, options: dict[str, Any] | None) -> None:
        """The seed of the next reset (``env.set_seed`` before it); TorchRL
        envs take no reset options."""
        self._seed = None if seed is None else int(seed)
        self._options = options

    def handle(self, request: tuple[Any, ...]) -> Any:
        """As :meth:`Adapter.handle`, and ``("torchrl_specs",)``: the env's
        ``specs`` (a TorchRL ``Composite``)."""
        if request[0] == "torchrl_specs":
            with self.lock:
                return self.env.specs.clone()
        return super().handle(request)
