"""`rlpool.torchrl.AsyncEnvPool`: TorchRL's ``AsyncEnvPool`` on rlpool's
Rust pool, a drop-in for ``from torchrl.envs import AsyncEnvPool``.

The class is a ``torchrl.envs.EnvBase`` with TorchRL's constructor and calls.
Its envs run in rlpool's worker threads or worker processes: TorchRL envs
(``GymEnv("CartPole-v1")``, any ``EnvBase``, a callable returning one),
callables returning Gymnasium envs, or rlpool's registered env names. Results
are ``tensordict.TensorDict`` s whose tensors are the pool's arrays taken by
``torch.from_numpy`` (no copy; the pool never writes them again), sorted by
env, with ``"env_index"`` as TorchRL gives it; ``stack="lazy"`` gives a
``LazyStackedTensorDict``.

This module imports torch, tensordict and torchrl (``pip install
rlpool[torchrl]``); ``import rlpool`` does not import it.

>>> import torch
>>> from torchrl.envs import GymEnv
>>> from rlpool.torchrl import AsyncEnvPool
>>> env = AsyncEnvPool([lambda: GymEnv("CartPole-v1")] * 2, backend="threading")
>>> root = env.reset()
>>> root["observation"].shape, list(root["env_index"])
(torch.Size([2, 4]), [0, 1])
>>> out = env.step(env.rand_action(root))
>>> out["next", "reward"].dtype
torch.float32
>>> env.close()
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch
from tensordict import (
    LazyStackedTensorDict,
    NonTensorData,
    NonTensorStack,
    TensorDict,
    TensorDictBase,
)
from torchrl.data import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    Unbounded,
)
from torchrl.envs import EnvBase

from rlpool import _tensordict as rl_td
from rlpool import specs as rl_specs
from rlpool._pool import AsyncEnvPool as _RustPool
from rlpool._pyenv import PyEnvMaker
from rlpool._torchrl_env import numpy_of, torch_dtype_name
from rlpool.errors import InvalidArgument, InvalidType, PoolError

__all__ = ["AsyncEnvPool", "from_torchrl_spec", "to_torchrl_spec"]

_RESET, _STEP, _STEP_AND_MAYBE_RESET = 0, 1, 2
_SPEC_GROUPS = (
    ("output_spec", "full_observation_spec"),
    ("output_spec", "full_reward_spec"),
    ("output_spec", "full_done_spec"),
    ("input_spec", "full_action_spec"),
    ("input_spec", "full_state_spec"),
)
_DONE_KEYS = ("done", "terminated", "truncated")
_INDEX_CACHE_SIZE = 1024


# -- specs, both ways --------------------------------------------------------


def _torch_dtype(dtype: Any) -> Any:
    return getattr(torch, np.dtype(dtype).name)


def _np_dtype(dtype: Any) -> np.dtype[Any]:
    return np.dtype(torch_dtype_name(dtype))


def to_torchrl_spec(spec: rl_specs.TensorSpec) -> Any:
    """The TorchRL spec of an rlpool spec: ``Unbounded``, ``Bounded``,
    ``Categorical``, ``OneHot``, ``Binary``, ``MultiCategorical``,
    ``MultiOneHot``, ``NonTensor`` and ``Composite`` become TorchRL's kind of
    the same name; a :class:`~rlpool.specs.Stacked` becomes the
    ``torch.stack`` of its parts.

    Raises:
        InvalidType: a spec of a kind TorchRL has no counterpart for.
    """
    shape = torch.Size(spec.shape)
    if isinstance(spec, rl_specs.Composite):
        return Composite(
            {name: to_torchrl_spec(spec[name]) for name in spec},
            shape=shape,
        )
    if isinstance(spec, rl_specs.Stacked):
        return torch.stack([to_torchrl_spec(part) for part in spec.parts], dim=0)
    if isinstance(spec, rl_specs.NonTensor):
        return NonTensor(shape=shape)
    dtype = _torch_dtype(spec.dtype)
    if isinstance(spec, rl_specs.Unbounded):
        return Unbounded(shape=shape, dtype=dtype)
    if isinstance(spec, rl_specs.Bounded):
        return Bounded(
            low=torch.as_tensor(np.array(spec.low)),
            high=torch.as_tensor(np.array(spec.high)),
            shape=shape,
            dtype=dtype,
        )
    if isinstance(spec, rl_specs.Categorical):
        return Categorical(spec.n, shape=shape, dtype=dtype)
    if isinstance(spec, rl_specs.OneHot):
        return OneHot(spec.n, shape=shape, dtype=dtype)
    if isinstance(spec, rl_specs.Binary):
        return Binary(n=shape[-1] if len(shape) else None, shape=shape, dtype=dtype)
    if isinstance(spec, rl_specs.MultiCategorical):
        return MultiCategorical(spec.nvec.tolist(), shape=shape, dtype=dtype)
    if isinstance(spec, rl_specs.MultiOneHot):
        return MultiOneHot(spec.nvec.tolist(), shape=shape, dtype=dtype)
    raise InvalidType(f"to_torchrl_spec: no TorchRL spec for {type(spec).__name__}")


def from_torchrl_spec(spec: Any) -> rl_specs.TensorSpec:
    """The rlpool spec of a TorchRL spec (the inverse of
    :func:`to_torchrl_spec`); a stacked TorchRL spec becomes a
    :class:`~rlpool.specs.Stacked` when its parts differ.

    Raises:
        InvalidType: a spec kind rlpool has no counterpart for.
    """
    if not hasattr(spec, "shape") or not hasattr(spec, "dtype"):
        raise InvalidType(f"from_torchrl_spec: {type(spec).__name__} is not a TorchRL spec")
    shape = tuple(int(d) for d in spec.shape)
    if isinstance(spec, Composite):
        if type(spec).__name__.startswith("Stacked"):
            parts = [from_torchrl_spec(part) for part in spec.unbind(0)]
            if any(part != parts[0] or isinstance(part, rl_specs.Stacked) for part in parts):
                return rl_specs.Stacked(parts)
        names = list(spec.keys())
        return rl_specs.Composite(
            {name: from_torchrl_spec(spec[name]) for name in names}, shape=shape
        )
    if type(spec).__name__.startswith("Stacked"):
        return rl_specs.Stacked([from_torchrl_spec(part) for part in spec.unbind(0)])
    if isinstance(spec, NonTensor):
        return rl_specs.NonTensor(shape)
    dtype = _np_dtype(spec.dtype)
    if isinstance(spec, MultiOneHot):
        return rl_specs.MultiOneHot(list(spec.nvec), shape, dtype)
    if isinstance(spec, OneHot):
        return rl_specs.OneHot(int(spec.n), shape, dtype)
    if isinstance(spec, Binary):
        return rl_specs.Binary(shape=shape, dtype=dtype)
    if isinstance(spec, MultiCategorical):
        nvec = spec.nvec.cpu().numpy()
        return rl_specs.MultiCategorical(nvec.reshape(-1)[: shape[-1]].tolist(), shape, dtype)
    if isinstance(spec, Categorical):
        return rl_specs.Categorical(int(spec.n), shape, dtype)
    if isinstance(spec, Bounded):
        low = spec.space.low.cpu().numpy()
        high = spec.space.high.cpu().numpy()
        return rl_specs.Bounded(low, high, shape, dtype)
    if isinstance(spec, Unbounded):
        return rl_specs.Unbounded(shape, dtype)
    raise InvalidType(f"from_torchrl_spec: no rlpool spec for {type(spec).__name__}")


def _done_as_torchrl(spec: Any) -> Any:
    """TorchRL's convention for done flags: a bool ``Categorical(2)``, where
    rlpool's envs declare a bool ``Binary``."""
    out = spec.clone()
    for key, leaf in spec.items(True, True):
        if isinstance(leaf, Binary) and leaf.dtype == torch.bool:
            out[key] = Categorical(2, shape=leaf.shape, dtype=torch.bool)
    return out


# -- makers -------------------------------------------------------------------


class _Given:
    """A maker that returns one given env (TorchRL takes env instances as
    makers; with processes, the worker builds its copy by unpickling)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def __call__(self, **_kwargs: Any) -> Any:
        return self.env


def _maker(maker: Any, index: int) -> Any:
    if isinstance(maker, (str, PyEnvMaker)):
        return maker
    if isinstance(maker, EnvBase):
        return PyEnvMaker(_Given(maker), max_info_bytes=0)
    if callable(maker):
        return PyEnvMaker(maker, max_info_bytes=0)
    raise InvalidType(
        f"env_makers[{index}] is {type(maker).__name__}: a maker is a TorchRL env, a callable "
        "returning a TorchRL env or a gymnasium.Env, or a registered rlpool env name"
    )


# -- the pool -----------------------------------------------------------------


class AsyncEnvPool(EnvBase):  # type: ignore[misc]
    """TorchRL's ``AsyncEnvPool`` on rlpool's Rust pool.

    Args:
        env_makers: a maker or a list of makers, one per env: a TorchRL env
            (``EnvBase``; with processes, pickled to the worker), a callable
            returning a TorchRL env or a ``gymnasium.Env`` (called with the
            env's ``create_env_kwargs``), or a registered rlpool env name
            (``"CartPole-v1"``).
        backend: ``"threading"`` or ``"multiprocessing"`` (worker processes
            started fresh, never forked).
        stack: ``"dense"``, ``"maybe_dense"`` or ``"lazy"``.
        exchange: ``"queue"``, ``"shm"`` or ``"auto"`` (default ``None``:
            ``"auto"``, TorchRL's announced default).
        worker_affinity: CPU sets, one per worker (thread or process), or a
            function of the worker index.
        envs_per_worker: with processes, the envs each worker hosts.
        create_env_kwargs: keyword arguments of the makers: one dict, or a
            list of one per env.

    Raises:
        rlpool.InvalidArgument: an argument out of range (a ``ValueError``).
        rlpool.InvalidType: a maker of the wrong type (a ``TypeError``).
        rlpool.StartError: an env could not be built or its specs do not
            stack (the message names the env and key).
    """

    _env_idx_key = "env_index"

    def __init__(
        self,
        env_makers: Callable[[], Any] | Any | Sequence[Any],
        *,
        backend: Literal["threading", "multiprocessing", "asyncio"] = "threading",
        stack: Literal["dense", "maybe_dense", "lazy"] = "dense",
        exchange: Literal["queue", "shm", "auto"] | None = None,
        worker_affinity: Sequence[Sequence[int]] | Callable[[int], Sequence[int]] | None = None,
        envs_per_worker: int = 1,
        create_env_kwargs: dict[str, Any] | list[dict[str, Any]] | None = None,
    ) -> None:
        if isinstance(env_makers, (str, EnvBase)) or not isinstance(env_makers, Sequence):
            env_makers = [env_makers]
        self.min_get = 1
        self.env_makers = list(env_makers)
        self.num_envs = len(self.env_makers)
        if backend not in ("threading", "multiprocessing"):
            raise InvalidArgument(
                f'backend must be "threading" or "multiprocessing", got {backend!r}'
            )
        self.backend = backend
        if (
            isinstance(envs_per_worker, bool)
            or not isinstance(envs_per_worker, int)
            or envs_per_worker < 1
        ):
            raise InvalidArgument(
                f"envs_per_worker must be a positive integer, got {envs_per_worker!r}"
            )
        if backend != "multiprocessing" and envs_per_worker != 1:
            raise InvalidArgument(
                "envs_per_worker is only supported with backend='multiprocessing'"
            )
        self.envs_per_worker = envs_per_worker
        self.worker_affinity = worker_affinity
        if exchange is None:
            exchange = "auto"
        if exchange not in ("queue", "shm", "auto"):
            raise InvalidArgument(f"exchange must be 'queue', 'shm' or 'auto', got {exchange!r}")
        if backend != "multiprocessing" and exchange == "shm":
            raise InvalidArgument("exchange='shm' is only supported with backend='multiprocessing'")
        self.exchange = exchange
        if create_env_kwargs is None:
            create_env_kwargs = {}
        if isinstance(create_env_kwargs, Mapping):
            per_env = [dict(create_env_kwargs)] * self.num_envs
        else:
            per_env = [dict(kw or {}) for kw in create_env_kwargs]
        if len(per_env) != self.num_envs:
            raise InvalidArgument(
                f"create_env_kwargs must be a dict or a list of dicts with length "
                f"{self.num_envs}, got {len(per_env)}"
            )
        self.create_env_kwargs = per_env
        if stack not in ("dense", "maybe_dense", "lazy"):
            raise InvalidArgument(f"stack must be 'dense', 'maybe_dense' or 'lazy', got {stack!r}")
        self.stack = stack
        makers = [_maker(maker, i) for i, maker in enumerate(self.env_makers)]
        self.__dict__["_rlpool"] = None
        self._rlpool: _RustPool = _RustPool(
            makers,
            backend=backend,
            stack=stack,
            exchange=exchange,
            create_env_kwargs=per_env,
            envs_per_worker=envs_per_worker,
            worker_affinity=worker_affinity,
        )
        try:
            self._child_specs = self._make_child_specs()
            self._hidden = self._hidden_keys()
            specs = torch.stack(list(self._child_specs), dim=0)
            output_spec = specs["output_spec"].clone()
            input_spec = specs["input_spec"].clone()
            input_spec["full_state_spec"].set(
                self._env_idx_key, NonTensor(example_data=0, shape=input_spec.shape)
            )
            self.__dict__["_output_spec"] = output_spec
            self.__dict__["_input_spec"] = input_spec
            super().__init__(batch_size=input_spec.shape)
            self._input_dtypes = self._make_input_dtypes()
            self._index_cache: dict[tuple[int, ...], Any] = {}
            self._index_items: list[Any] = [None] * self.num_envs
        except BaseException:
            self._rlpool.shutdown()
            raise

    # -- specs ---------------------------------------------------------------

    def _make_child_specs(self) -> list[Any]:
        """Each env's TorchRL specs (a ``Composite`` with ``output_spec`` and
        ``input_spec``): the env's own for TorchRL envs, else rlpool's
        converted."""
        pool = self._rlpool
        own: list[Any] = [None] * self.num_envs
        python_envs = set(pool._python_envs)
        for i in range(self.num_envs):
            if i in python_envs:
                own[i] = pool._request(i, ("torchrl_specs",), 60.0)
        if all(spec is not None for spec in own):
            return own
        converted: dict[str, Any] = {}
        for _, name in _SPEC_GROUPS:
            spec = to_torchrl_spec(getattr(pool, name))
            if name == "full_state_spec":
                spec = spec.clone()
                del spec[self._env_idx_key]
            if name == "full_done_spec":
                spec = _done_as_torchrl(spec)
            converted[name] = spec
        children = []
        for i in range(self.num_envs):
            if own[i] is not None:
                children.append(own[i])
                continue
            batch = torch.Size(pool.env_batch_sizes[i])
            child = Composite(
                output_spec=Composite(
                    {name: converted[name][i] for group, name in _SPEC_GROUPS[:3]},
                    shape=batch,
                ),
                input_spec=Composite(
                    {name: converted[name][i] for group, name in _SPEC_GROUPS[3:]},
                    shape=batch,
                ),
                shape=batch,
            )
            children.append(child)
        return children

    def _hidden_keys(self) -> frozenset[str]:
        """The done flags the pool's envs give that the TorchRL specs do not
        declare (a TorchRL env without ``"truncated"``): left out of results."""
        declared = set()
        for child in self._child_specs:
            declared |= set(child["output_spec", "full_done_spec"].keys())
        return frozenset(key for key in _DONE_KEYS if key not in declared)

    def _make_input_dtypes(self) -> dict[Any, Any]:
        """The dtype the envs take at each action and state key."""
        out: dict[Any, Any] = {}
        for name in ("full_action_spec", "full_state_spec"):
            spec = getattr(self._rlpool, name)
            for key, leaf in spec.items(True, True):
                if leaf.dtype is not None:
                    out[key] = _torch_dtype(leaf.dtype)
        return out

    def _get_child_specs(self) -> list[Any]:
        """Each env's TorchRL specs."""
        return list(self._child_specs)

    def _stacked(self, group: str, name: str) -> Any:
        """The children's ``name`` specs stacked over the envs, made once
        (TorchRL stacks them at every access)."""
        cache = self.__dict__.setdefault("_stacked_specs", {})
        spec = cache.get(name)
        if spec is None:
            spec = torch.stack([s[group][name] for s in self._child_specs], dim=0)
            if name == "full_state_spec":
                spec.set(self._env_idx_key, NonTensor(example_data=0, shape=spec.shape))
            cache[name] = spec
        return spec

    @property
    def full_action_spec(self) -> Any:
        """The actions, stacked over the envs."""
        return self._stacked("input_spec", "full_action_spec")

    @property
    def full_observation_spec(self) -> Any:
        """The observations, stacked over the envs."""
        return self._stacked("output_spec", "full_observation_spec")

    @property
    def full_reward_spec(self) -> Any:
        """The rewards, stacked over the envs."""
        return self._stacked("output_spec", "full_reward_spec")

    @property
    def full_done_spec(self) -> Any:
        """The done flags, stacked over the envs."""
        return self._stacked("output_spec", "full_done_spec")

    @property
    def full_state_spec(self) -> Any:
        """The state entries, stacked over the envs, with ``"env_index"``."""
        return self._stacked("input_spec", "full_state_spec")

    @property
    def env_batch_sizes(self) -> list[Any]:
        """Each env's batch size."""
        return [torch.Size(b) for b in self._rlpool.env_batch_sizes]

    @property
    def resolved_exchange(self) -> str:
        """The exchange in use: ``"shm"`` or ``"queue"`` (always with
        threads)."""
        return self._rlpool.resolved_exchange

    @property
    def exchange_keys(self) -> tuple[Any, ...]:
        """The input keys the shared-memory slots carry (the action and
        state entries); ``()`` with the queue exchange."""
        if self.resolved_exchange != "shm":
            return ()
        return tuple(self._input_dtypes)

    # -- conversions -----------------------------------------------------------

    def _index(self, envs: tuple[int, ...]) -> Any:
        cached = self._index_cache.get(envs)
        if cached is None:
            if len(self._index_cache) >= _INDEX_CACHE_SIZE:
                self._index_cache.clear()
            # NonTensorStack.from_list would make a NonTensorData per env
            # (30 us each); the stack is of the envs' own, made once.
            items = self._index_items
            for env in envs:
                if items[env] is None:
                    items[env] = NonTensorData(data=env)
            cached = NonTensorStack(*[items[env] for env in envs])
            self._index_cache[envs] = cached
        return cached

    def _tree(self, data: dict[str, Any]) -> dict[str, Any]:
        hidden = self._hidden
        out: dict[str, Any] = {}
        for key, value in data.items():
            if type(value) is dict:
                out[key] = self._tree(value)
            elif key in hidden or key == "env_index":
                continue
            elif isinstance(value, np.ndarray) and value.dtype != object:
                out[key] = torch.from_numpy(value)
            else:
                out[key] = value
        return out

    def _dense(self, td: rl_td.TensorDict, per_env: int | None = None, kept: Any = None) -> Any:
        """``td`` as a ``TensorDict`` sharing its arrays, with ``"env_index"``;
        ``kept``: another result's entries (a dict) added where ``td`` has
        none of that key (``"next"`` and ``"env_index"`` excepted)."""
        data = td._data
        tree = self._tree(data)
        if kept:
            for key, value in kept.items():
                if key not in tree and key != "next" and key != self._env_idx_key:
                    # A nested entry gets its own TensorDict (sharing the
                    # tensors), so that setting into one leaves the other.
                    tree[key] = value.copy() if isinstance(value, TensorDictBase) else value
        batch_size = torch.Size(td.batch_size)
        envs = data.get("env_index") if per_env is None else None
        index = None if envs is None else self._index(tuple(envs.reshape(-1).tolist()))
        if index is not None and batch_size == index.batch_size:
            # The cached stack, stored as TensorDict.set would store it
            # (its batch size is the batch's), without set's checks.
            tree[self._env_idx_key] = index
            index = None
        out = TensorDict._new_unsafe(tree, batch_size=batch_size)
        if per_env is not None:
            out.set(self._env_idx_key, NonTensorData(data=per_env))
        elif index is not None:
            out.set(self._env_idx_key, index)
        return out

    def _to_torch(self, batch: Any, per_env: int | None = None) -> Any:
        if isinstance(batch, rl_td.LazyStackedTensorDict):
            parts = []
            for part in batch.tensordicts:
                env = part._data.get("env_index")
                index = int(np.asarray(env).reshape(-1)[0]) if env is not None else None
                parts.append(self._dense(part, index))
            return LazyStackedTensorDict(*parts, stack_dim=0)
        return self._dense(batch, per_env)

    def _numpy_tree(self, td: Any, prefix: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in td.items():
            if key == self._env_idx_key and not prefix:
                continue
            if isinstance(value, torch.Tensor):
                wanted = self._input_dtypes.get((*prefix, key) if prefix else key)
                if wanted is not None and value.dtype != wanted:
                    value = value.to(wanted)
                out[key] = numpy_of(value)
            elif isinstance(value, TensorDictBase) and not getattr(value, "_is_non_tensor", False):
                if isinstance(value, LazyStackedTensorDict) and value.stack_dim == 0:
                    value = value.contiguous() if _stackable(value) else value
                if isinstance(value, LazyStackedTensorDict):
                    continue
                out[key] = self._numpy_tree(value, (*prefix, key))
        return out

    def _to_numpy(self, td: Any) -> Any:
        """A TorchRL tensordict as rlpool's input: nested dicts of numpy
        arrays (CPU tensors shared, not copied; action and state entries
        cast to the dtype the envs take)."""
        if td is None:
            return None
        if isinstance(td, LazyStackedTensorDict) and td.stack_dim == 0 and not _stackable(td):
            parts = [
                rl_td.TensorDict(self._numpy_tree(part, ()), batch_size=tuple(part.batch_size))
                for part in td.tensordicts
            ]
            return rl_td.LazyStackedTensorDict(parts)
        return rl_td.TensorDict._wrap(self._numpy_tree(td, ()), tuple(td.batch_size))

    def _targets(self, td: Any, env_index: int | Sequence[int] | Any | None) -> Any:
        """``env_index`` as rlpool takes it (an int, a list, or ``None``),
        read from ``td``'s ``"env_index"`` when ``None``, as TorchRL does."""
        if env_index is None:
            if td is None or self._env_idx_key not in td:
                return None
            value = td.get(self._env_idx_key)
            if isinstance(value, torch.Tensor):
                listed = value.reshape(-1).tolist()
            elif isinstance(value, NonTensorStack):
                listed = _stack_values(value)
            elif hasattr(value, "tolist"):
                listed = value.tolist()
            else:
                listed = value
            if isinstance(listed, int):
                return [listed]
            flat: list[int] = []
            _flatten_ints(listed, flat)
            rows = td.batch_size[0] if td.batch_dims else 1
            if len(flat) != rows and rows and len(flat) % rows == 0:
                flat = flat[:: len(flat) // rows]
            return flat
        if isinstance(env_index, torch.Tensor):
            env_index = env_index.tolist()
        return env_index

    def _input(self, td: Any, target: Any) -> Any:
        """``td`` as rlpool's input for ``target``: an int target takes the
        env's own tensordict (batch size of the env); a single row of a
        batch whose ``"env_index"`` named one env is squeezed to it."""
        if td is None:
            return None
        if isinstance(target, int) and td.batch_dims > len(self.env_batch_sizes[target]):
            td = td[0]
        elif isinstance(target, list) and td.batch_dims == len(self.batch_size) - 1:
            td = td.unsqueeze(0)
        return self._to_numpy(td)

    # -- synchronous calls -----------------------------------------------------

    def reset(self, tensordict: Any = None, **kwargs: Any) -> Any:
        """Resets every env: the stacked reset results, with
        ``"env_index"``. Raises :class:`rlpool.Busy` if an env is in flight."""
        return self._to_torch(self._rlpool.reset(self._reset_input(tensordict)))

    def _reset_input(self, tensordict: Any) -> Any:
        if tensordict is None or not self._input_dtypes:
            return None
        return self._to_numpy(tensordict.select(*self._input_dtypes, strict=False))

    def _reset(self, tensordict: Any = None, **kwargs: Any) -> Any:
        envs = None
        if tensordict is not None and "_reset" in tensordict:
            mask = tensordict.get("_reset").reshape(self.num_envs, -1).any(-1)
            envs = mask.nonzero().reshape(-1).tolist()
        if envs is None or len(envs) == self.num_envs:
            return self.reset(tensordict)
        # A partial reset (TransformedEnv and rollout ask for one where some
        # envs are done): only those envs reset; the others keep their
        # current entries, which the caller merges in by the "_reset" mask.
        out = tensordict.exclude("_reset", "next").clone()
        if envs:
            self.async_reset_send(None, env_index=envs)
            reset = self.async_reset_recv(min_get=len(envs))
            out[torch.tensor(envs)] = reset.exclude(self._env_idx_key).select(
                *out.keys(True, True), strict=False
            )
        return out

    def step(self, tensordict: Any) -> Any:
        """Steps every env with its row of ``tensordict``: its entries, the
        results under ``"next"``, and ``"env_index"``."""
        return self._to_torch(self._rlpool.step(self._to_numpy(tensordict)))

    def _step(self, tensordict: Any) -> Any:
        out = self._to_torch(self._rlpool.step(self._to_numpy(tensordict)))
        return out.get("next")

    def step_and_maybe_reset(self, tensordict: Any) -> tuple[Any, Any]:
        """Steps every env and resets those done: ``(result, next_root)``,
        both with ``"env_index"``."""
        result, root = self._rlpool.step_and_maybe_reset(self._to_numpy(tensordict))
        return self._pair(result, root)

    def _pair(self, result: Any, root: Any, env: int | None = None) -> tuple[Any, Any]:
        """``(result, next_root)`` as TorchRL gives them: the next root also
        carries the result's own root entries (the action, what the caller
        added), as TorchRL's ``step_mdp`` keeps them."""
        result = self._to_torch(result, env)
        if isinstance(result, TensorDict) and isinstance(root, rl_td.TensorDict):
            # Dense: the result's root entries go into the next root's dict
            # as it is built (select and update cost twice the rest).
            return result, self._dense(root, env, kept=result._tensordict)
        root = self._to_torch(root, env)
        kept = [k for k in result.keys() if k != "next" and k not in root.keys()]  # noqa: SIM118 (a TensorDict iterates over rows)
        if kept:
            root.update(result.select(*kept))
        return result, root

    def _set_seed(self, seed: int | None) -> None:
        raise NotImplementedError(
            "AsyncEnvPool has no pool-wide seed: seed each env in its maker or create_env_kwargs"
        )

    # -- asynchronous calls ----------------------------------------------------

    def _send(self, op: int, tensordict: Any, env_index: Any) -> None:
        target = self._targets(tensordict, env_index)
        self._rlpool._native.send(op, self._input(tensordict, target), target)

    def _recv(
        self,
        op: int,
        min_get: int | None,
        env_index: int | None,
        max_get: int | None,
        timeout: float | None,
    ) -> Any:
        if env_index is not None:
            if isinstance(env_index, torch.Tensor):
                env_index = int(env_index)
            return self._rlpool._recv_env(op, env_index, timeout), int(env_index)
        if min_get is None:
            min_get = self.min_get
        return self._rlpool._native.recv(op, min_get, max_get, timeout), None

    def async_reset_send(self, tensordict: Any = None, env_index: Any = None) -> None:
        """Sends a reset to the envs of ``env_index`` (an int, a list or a
        tensor; ``None``: the ``"env_index"`` entry of ``tensordict``, or
        every env)."""
        self._send(_RESET, tensordict, env_index)

    def async_reset_recv(
        self,
        min_get: int | None = None,
        env_index: int | None = None,
        *,
        max_get: int | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Receives reset results (as :meth:`async_step_recv`)."""
        out, env = self._recv(_RESET, min_get, env_index, max_get, timeout)
        return self._to_torch(out, env)

    def async_step_send(self, tensordict: Any, env_index: Any = None) -> None:
        """Sends the actions of ``tensordict`` to the envs of ``env_index``
        (as :meth:`async_reset_send`). Raises :class:`rlpool.Busy` naming
        envs whose previous result is still to be received."""
        self._send(_STEP, tensordict, env_index)

    def async_step_recv(
        self,
        min_get: int | None = None,
        env_index: int | None = None,
        *,
        max_get: int | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Receives step results: at least ``min_get`` (default
        ``self.min_get``), at most ``max_get`` (default: all ready), within
        ``timeout`` seconds from the call (``0`` polls; a timeout before
        ``min_get`` raises :class:`rlpool.Timeout`, a ``TimeoutError``, and
        loses nothing); or env ``env_index``'s result alone."""
        out, env = self._recv(_STEP, min_get, env_index, max_get, timeout)
        return self._to_torch(out, env)

    def async_step_and_maybe_reset_send(self, tensordict: Any, env_index: Any = None) -> None:
        """Sends the actions of ``tensordict``, to step and reset where done."""
        self._send(_STEP_AND_MAYBE_RESET, tensordict, env_index)

    def async_step_and_maybe_reset_recv(
        self,
        min_get: int | None = None,
        env_index: int | None = None,
        *,
        max_get: int | None = None,
        timeout: float | None = None,
    ) -> tuple[Any, Any]:
        """Receives ``(result, next_root)`` pairs (as
        :meth:`async_step_recv`)."""
        (result, root), env = self._recv(
            _STEP_AND_MAYBE_RESET, min_get, env_index, max_get, timeout
        )
        return self._pair(result, root, env)

    # -- the rest --------------------------------------------------------------

    def stats(self, *, reset: bool = False) -> dict[str, float | int]:
        """The shared-memory exchange's statistics (TorchRL's names);
        ``reset`` clears them after reading. ``{}`` with the queue exchange
        and with threads."""
        return self._rlpool.stats(reset=reset) or {}

    def shutdown(self) -> None:
        """Stops the pool: workers stopped (killed after a deadline) and
        reaped. Idempotent."""
        pool = self.__dict__.get("_rlpool")
        if pool is not None:
            pool.shutdown()

    def _maybe_shutdown(self) -> None:
        with contextlib.suppress(PoolError):
            self.shutdown()

    def close(self, *, raise_if_closed: bool = True) -> None:
        """The same as :meth:`shutdown` (``raise_if_closed`` as TorchRL's:
        with ``False``, errors while shutting down are ignored)."""
        if raise_if_closed:
            self.shutdown()
        else:
            self._maybe_shutdown()
        self.is_closed = True

    def __del__(self) -> None:
        self._maybe_shutdown()

    def __repr__(self) -> str:
        pool = self.__dict__.get("_rlpool")
        if pool is None:
            return "AsyncEnvPool(not started)"
        return (
            f"AsyncEnvPool(num_envs={self.num_envs}, backend={self.backend!r}, "
            f"stack={self.stack!r}, exchange={pool.resolved_exchange!r})"
        )


def _stackable(td: Any) -> bool:
    """Whether a lazy stack's parts have one set of keys and shapes."""
    try:
        first = td.tensordicts[0]
        keys = set(first.keys(True, True))
        return all(
            set(part.keys(True, True)) == keys
            and all(part.get(k).shape == first.get(k).shape for k in keys)
            for part in td.tensordicts[1:]
        )
    except Exception:
        return False


def _stack_values(stack: Any) -> Any:
    """``stack.tolist()`` of a ``NonTensorStack`` of ``NonTensorData``
    read straight from each one's storage (``tolist`` spends about 14 us
    per env on attribute lookups); a stack of anything else goes through
    ``tolist``."""
    parts = stack.tensordicts
    try:
        if all(type(part) is NonTensorData for part in parts):
            return [part._non_tensordict["data"] for part in parts]
    except (AttributeError, KeyError):
        pass
    return stack.tolist()


def _flatten_ints(value: Any, out: list[int]) -> None:
    if isinstance(value, (list, tuple)):
        for item in value:
            _flatten_ints(item, out)
    else:
        out.append(int(value))
