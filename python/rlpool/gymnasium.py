"""Gymnasium's vector API on rlpool's pool: :class:`AsyncVectorEnv`, a
drop-in for ``gymnasium.vector.AsyncVectorEnv``, and :func:`make_vec`.

The envs run in rlpool's workers (processes by default, threads on
request); results come back through shared memory as whole batches, so a
step costs a few numpy operations in this process whatever the number of
envs. Everything else is Gymnasium's: the spaces and their batching, the
three autoreset modes, the infos' vector form, the state errors.

>>> import gymnasium as gym
>>> import numpy as np
>>> from rlpool.gymnasium import AsyncVectorEnv
>>> envs = AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2, backend="threading")
>>> observations, infos = envs.reset(seed=42)
>>> observations.shape, observations.dtype
((2, 4), dtype('float32'))
>>> observations, rewards, terminations, truncations, infos = envs.step(np.array([0, 1]))
>>> rewards
array([1., 1.])
>>> envs.close()
"""

from __future__ import annotations

import contextlib
import copy as _copy
import math
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

import gymnasium
import numpy as np
import numpy.typing as npt
from gymnasium import logger, spaces
from gymnasium.envs.registration import EnvSpec
from gymnasium.error import AlreadyPendingCallError, ClosedEnvironmentError, NoAsyncCallError
from gymnasium.spaces.utils import is_space_dtype_shape_equiv
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.async_vector_env import AsyncState
from gymnasium.vector.utils import batch_differing_spaces, batch_space

from rlpool import AsyncEnvPool, PyEnvMaker, decode_leaf
from rlpool._pyenv import info_rows
from rlpool.errors import (
    Busy,
    EnvFailed,
    InvalidArgument,
    InvalidType,
    PoolError,
    StartError,
    Timeout,
    WorkerDied,
)

__all__ = ["AsyncVectorEnv", "SpaceMismatch", "WaitTimeout", "make_vec"]

Array = npt.NDArray[Any]
EnvFn = Callable[[], gymnasium.Env[Any, Any]]
StepResult = tuple[
    Any, npt.NDArray[np.float64], npt.NDArray[np.bool_], npt.NDArray[np.bool_], dict[str, Any]
]
"""``(observations, rewards, terminations, truncations, infos)``."""

# The dtypes a pool holds as arrays; a leaf of another dtype travels as a
# pickle (a non-tensor leaf).
_POOL_DTYPES = frozenset(
    np.dtype(name)
    for name in ("bool", "uint8", "int8", "int16", "int32", "int64", "float32", "float64")
)

# What Gymnasium's ``call`` refuses to call: the vector env's own calls.
_NOT_CALLABLE = ("reset", "step", "close", "_setattr", "_check_spaces")

# The deadline of a wait that Gymnasium lets run forever (``timeout=None``)
# where the pool's own default is shorter: a year.
_FOREVER = 365 * 24 * 3600.0


class WaitTimeout(Timeout, multiprocessing.TimeoutError):
    """A ``reset_wait``, ``step_wait``, ``call_wait`` or ``recv`` that ran out
    of time: rlpool's :class:`~rlpool.Timeout` (a ``TimeoutError``) and the
    ``multiprocessing.TimeoutError`` that Gymnasium raises.

    Unlike Gymnasium, nothing is lost: the call stays pending, and waiting
    again returns its results.
    """


class SpaceMismatch(StartError, RuntimeError):
    """The envs' spaces differ where Gymnasium requires them equal (the
    ``RuntimeError`` Gymnasium raises). The message names the env and both
    spaces.

    Attributes:
        env: the first env whose space differs from env 0's.
    """

    def __init__(self, message: str, *, env: int) -> None:
        super().__init__(message)
        self.env = env


# -- spaces and the pool's entries -------------------------------------------


class _Leaf:
    """One entry of a space under the pool's root key: an array, or a
    non-tensor entry (a pickled value per env)."""

    __slots__ = ("dtype", "key", "pool_shape", "shape", "td_key")

    def __init__(
        self,
        key: tuple[str, ...],
        dtype: np.dtype[Any] | None,
        shape: tuple[int, ...],
        pool_shape: tuple[int, ...],
    ) -> None:
        self.key = key
        # How a tensordict is indexed for it (a str is the quickest).
        self.td_key: str | tuple[str, ...] = key[0] if len(key) == 1 else key
        # None: a non-tensor entry.
        self.dtype = dtype
        # The space's own shape, and the one the pool holds per env (they
        # differ for the Rust envs' scalar actions, shape [1]).
        self.shape = shape
        self.pool_shape = pool_shape


def _leaf_dtype(space: spaces.Space[Any]) -> np.dtype[Any] | None:
    if isinstance(space, spaces.MultiBinary):
        return np.dtype(np.int8)
    if isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete)):
        dtype = np.dtype(space.dtype)
        return dtype if dtype in _POOL_DTYPES else None
    return None


Build = Callable[[Sequence[Any]], Any]
BuildRow = Callable[[Sequence[Any], int], Any]


class _Codec:
    """How a Gymnasium space's values map to the pool's entries under
    ``root`` (``"action"`` or ``"observation"``): the space's leaves are
    keys nested as the space is (``Dict`` by key, ``Tuple`` by position).

    Built once; converting a batch costs one numpy operation per leaf.
    """

    def __init__(
        self, space: spaces.Space[Any], root: str, pool_shape: tuple[int, ...] | None = None
    ) -> None:
        self.space = space
        self.leaves: list[_Leaf] = []
        self._batch, self._row = self._compile(space, (root,), pool_shape)

    def _compile(
        self, space: spaces.Space[Any], key: tuple[str, ...], pool_shape: tuple[int, ...] | None
    ) -> tuple[Build, BuildRow]:
        if isinstance(space, (spaces.Dict, spaces.Tuple)):
            named = space.items() if isinstance(space, spaces.Dict) else enumerate(space.spaces)
            parts = [(k, *self._compile(sub, (*key, str(k)), None)) for k, sub in named]
            if isinstance(space, spaces.Dict):
                return (
                    lambda leaves: {k: batch(leaves) for k, batch, _ in parts},
                    lambda leaves, i: {k: row(leaves, i) for k, _, row in parts},
                )
            return (
                lambda leaves: tuple(batch(leaves) for _, batch, _ in parts),
                lambda leaves, i: tuple(row(leaves, i) for _, _, row in parts),
            )
        index = len(self.leaves)
        dtype = _leaf_dtype(space)
        shape = tuple(space.shape) if space.shape is not None else ()
        self.leaves.append(_Leaf(key, dtype, shape, shape if pool_shape is None else pool_shape))
        if dtype is None:
            decode = decode_leaf
            return (
                lambda leaves: tuple(decode(v) for v in leaves[index]),
                lambda leaves, i: decode(leaves[index][i]),
            )
        return (lambda leaves: leaves[index], lambda leaves, i: leaves[index][i])

    def read(self, td: Any) -> list[Any]:
        """The leaves' batched entries in ``td``."""
        return [td[leaf.td_key] for leaf in self.leaves]

    def batch(self, leaves: Sequence[Any]) -> Any:
        """Gymnasium's batched value (arrays, dicts and tuples of them)."""
        return self._batch(leaves)

    def row(self, leaves: Sequence[Any], i: int) -> Any:
        """One env's value, row ``i`` of the batch."""
        return self._row(leaves, i)

    def zeros(self, n: int) -> list[Any]:
        """Leaves of ``n`` zero rows (``None`` for non-tensor entries)."""
        return [
            np.zeros((n, *leaf.shape), dtype=leaf.dtype) if leaf.dtype is not None else [None] * n
            for leaf in self.leaves
        ]

    def write(self, value: Any) -> Any:
        """The pool's nested entries for a batched value of the space."""
        return _write(self.space, value, iter(self.leaves))


def _write(space: spaces.Space[Any], value: Any, leaves: Iterator[_Leaf]) -> Any:
    if isinstance(space, spaces.Dict):
        return {str(k): _write(sub, value[k], leaves) for k, sub in space.items()}
    if isinstance(space, spaces.Tuple):
        return {str(j): _write(sub, value[j], leaves) for j, sub in enumerate(space.spaces)}
    leaf = next(leaves)
    if leaf.dtype is None:
        raise InvalidType(
            f"action entry {'/'.join(leaf.key)!r} ({space}): rlpool sends actions of "
            "Box, Discrete, MultiDiscrete and MultiBinary spaces (of bool, int or float "
            "dtypes), nested in Dict and Tuple spaces"
        )
    array = np.asarray(value, dtype=leaf.dtype)
    if leaf.pool_shape != leaf.shape:
        array = array.reshape((-1, *leaf.pool_shape))
    return array


def _take(tree: Any, rows: Array) -> Any:
    if isinstance(tree, dict):
        return {k: _take(v, rows) for k, v in tree.items()}
    return tree[rows]


# -- infos ------------------------------------------------------------------


def _add_info(infos: dict[str, Any], info: Mapping[str, Any], i: int, n: int) -> dict[str, Any]:
    """Adds env ``i``'s info to the vector form of a batch of ``n`` envs:
    each key an array over the envs with a ``_key`` mask, as Gymnasium's
    ``VectorEnv._add_info`` builds it (nested dicts recursively,
    ``final_obs`` an object array)."""
    for key, value in info.items():
        if key == "final_obs":
            array = infos.get(key)
            if array is None:
                array = np.full(n, None, dtype=object)
            array[i] = value
        elif isinstance(value, dict):
            array = _add_info(infos.get(key, {}), value, i, n)
        else:
            array = infos.get(key)
            if array is None:
                if type(value) in (int, float, bool) or isinstance(value, np.number):
                    array = np.zeros(n, dtype=type(value))
                elif isinstance(value, np.ndarray):
                    array = np.zeros((n, *value.shape), dtype=value.dtype)
                else:
                    array = np.full(n, None, dtype=object)
            array[i] = value
        mask = infos.get(f"_{key}")
        if mask is None:
            mask = np.zeros(n, dtype=np.bool_)
        mask[i] = True
        infos[key], infos[f"_{key}"] = array, mask
    return infos


def _info_rows(info: Array | None) -> tuple[Array, list[dict[str, Any]]]:
    """The rows of a batch's ``"info"`` entry that carry an info, decoded
    (none without an ``"info"`` entry)."""
    if info is None:
        return _NO_ROWS, []
    return info_rows(info)


_NO_ROWS: Array = np.zeros(0, dtype=np.intp)


# -- the vector env ---------------------------------------------------------


class _Ops:
    """The pool calls one kind of step goes through."""

    def __init__(self, pool: AsyncEnvPool, same_step: bool) -> None:
        self.same_step = same_step
        if same_step:
            self.send = pool.async_step_and_maybe_reset_send
            self.recv: Callable[..., Any] = pool.async_step_and_maybe_reset_recv
        else:
            self.send = pool.async_step_send
            self.recv = pool.async_step_recv


class AsyncVectorEnv(VectorEnv[Any, Any, Array]):
    """Gymnasium's ``AsyncVectorEnv``, with the envs in rlpool's workers.

    Takes Gymnasium's arguments and has every method of Gymnasium's class,
    with the same results step for step: the same spaces (batched by
    Gymnasium's ``batch_space``), observations, ``float64`` rewards, flags
    and infos (Gymnasium's vector form with ``_key`` masks), the same
    autoreset modes and the same state errors (``AlreadyPendingCallError``,
    ``NoAsyncCallError``, ``ClosedEnvironmentError``). Beyond Gymnasium, it
    has EnvPool's asynchronous calls: :meth:`send` actions to some envs and
    :meth:`recv` whichever results are ready.

    Where it differs from Gymnasium's class:

    - An exception raised by an env is :class:`~rlpool.EnvFailed` naming the
      env and carrying the env's traceback (Gymnasium re-raises the env's
      exception type); the other envs go on, and the failed env can be
      reset.
    - A wait that runs out of time raises :class:`WaitTimeout` and keeps the
      call pending (Gymnasium drops it): wait again for its results.
    - Results are always arrays of their own (never aliased by later
      steps), whatever ``copy`` says.
    - Actions are converted to the action space's dtype before they are
      sent (a float64 action of a float32 ``Box`` reaches the env as
      float32).
    - ``call_async`` starts the calls when ``call_wait`` is called.
    - A reset with ``reset_mask`` fills the other envs' rows with their
      observations of the last ``step`` or ``reset`` (not of ``recv``).

    Args:
        env_fns: functions that create the envs (``gymnasium.Env``\\ s). With
            processes they travel to the workers with cloudpickle (a
            lambda, a function of your module and a ``functools.partial``
            all work).
        shared_memory: ``True``: results travel through shared memory when
            every space has a fixed shape and dtype (``exchange="auto"``);
            ``False``: over sockets (``exchange="queue"``).
        copy: accepted for compatibility; results never alias each other.
        context: accepted and ignored: workers are always fresh
            interpreters (``python -m rlpool._worker``, as ``"spawn"``).
        daemon: accepted and ignored: workers always end with this process.
        worker: must be ``None``: rlpool's workers run their own loop (wrap
            the env in a ``gymnasium.Wrapper`` to change its step or reset).
        observation_mode: ``"same"``, ``"different"``, or a tuple
            ``(observation_space, single_observation_space)``, as in
            Gymnasium.
        autoreset_mode: an ``AutoresetMode`` (or its value): ``NEXT_STEP``
            (default), ``SAME_STEP`` or ``DISABLED``.
        max_concurrency: at most this many envs step at once: without
            ``envs_per_worker``, the envs are spread over this many workers.
        envs_per_worker: envs per worker process (default: the envs spread
            over one worker per CPU).
        exchange: ``"auto"``, ``"shm"`` or ``"queue"``, as
            :class:`~rlpool.AsyncEnvPool` takes it.
        worker_affinity: CPU sets of the workers, as
            :class:`~rlpool.AsyncEnvPool` takes them (by default, one
            worker process per CPU, each pinned to its own; ``False``
            leaves them to the scheduler).
        batch_size: how many results :meth:`recv` returns by default
            (default: every env).
        backend: ``"multiprocessing"`` (default) or ``"threading"`` (the
            envs in threads of this process, under its GIL).
        max_info_bytes: the largest info dict an env returns, pickled.

    Raises:
        InvalidArgument: an argument out of range (the message names it),
            or a ``worker``.
        SpaceMismatch: an env's space differs from env 0's.
        StartError: an env could not be built or a worker did not start.
    """

    metadata: dict[str, Any]
    render_mode: str | None
    num_envs: int
    env_fns: Sequence[EnvFn]
    shared_memory: bool
    copy: bool
    context: str | None
    daemon: bool
    observation_mode: str | tuple[spaces.Space[Any], spaces.Space[Any]]
    autoreset_mode: AutoresetMode

    def __init__(
        self,
        env_fns: Sequence[EnvFn],
        shared_memory: bool = True,
        copy: bool = True,
        context: str | None = None,
        daemon: bool = True,
        worker: Callable[..., None] | None = None,
        observation_mode: str | tuple[spaces.Space[Any], spaces.Space[Any]] = "same",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        max_concurrency: int | None = None,
        *,
        envs_per_worker: int | None = None,
        exchange: Literal["auto", "shm", "queue"] = "auto",
        worker_affinity: Sequence[Sequence[int]]
        | Callable[[int], Sequence[int]]
        | Literal[False]
        | None = None,
        batch_size: int | None = None,
        backend: Literal["multiprocessing", "threading"] = "multiprocessing",
        max_info_bytes: int = 1024,
    ) -> None:
        if worker is not None:
            raise InvalidArgument(
                f"worker={worker!r}: rlpool's workers run their own loop, not a Gymnasium "
                "worker function; wrap the env in a gymnasium.Wrapper to change how it "
                "steps or resets"
            )
        env_fns = list(env_fns)
        if not env_fns:
            raise InvalidArgument("env_fns is empty: a vector env needs at least one env")
        mode = _autoreset_mode(autoreset_mode)
        num_envs = len(env_fns)
        if max_concurrency is not None and (
            not isinstance(max_concurrency, (int, np.integer)) or max_concurrency < 1
        ):
            raise InvalidArgument(
                f"max_concurrency={max_concurrency!r}: a positive integer or None"
            )
        if envs_per_worker is None:
            workers = max_concurrency if max_concurrency is not None else os.cpu_count() or 1
            envs_per_worker = math.ceil(num_envs / min(workers, num_envs))
        _check_batch_size(batch_size, num_envs)
        if backend not in ("multiprocessing", "threading"):
            raise InvalidArgument(f'backend={backend!r}: "multiprocessing" or "threading"')
        makers = [
            PyEnvMaker(
                fn,
                autoreset="next_step" if mode is AutoresetMode.NEXT_STEP else "disabled",
                max_info_bytes=max_info_bytes,
            )
            for fn in env_fns
        ]
        # "maybe_dense": envs whose spaces differ start, so that the check
        # below says how (Gymnasium's error), and observation_mode="different"
        # takes spaces of different bounds.
        pool = AsyncEnvPool(
            makers,
            backend=backend,
            stack="maybe_dense",
            exchange="queue" if not shared_memory and exchange == "auto" else exchange,
            envs_per_worker=envs_per_worker,
            worker_affinity=worker_affinity,
        )
        try:
            meta = pool.env_get_attr("metadata", env_index=0)[0]
            render_mode = pool.env_get_attr("render_mode", env_index=0)[0]
            action_spaces = pool.env_get_attr("action_space")
            obs_spaces = pool.env_get_attr("observation_space")
            single_obs, obs_space = _observation_spaces(observation_mode, obs_spaces)
            _check_spaces(observation_mode, single_obs, action_spaces[0], obs_spaces, action_spaces)
        except BaseException:
            pool.shutdown()
            raise
        self.env_fns = env_fns
        self.shared_memory = shared_memory
        self.context = context
        self.daemon = daemon
        self.observation_mode = observation_mode
        self.max_concurrency = max_concurrency
        self._start(
            pool,
            action_space=action_spaces[0],
            single_obs=single_obs,
            obs_space=obs_space,
            metadata=meta,
            render_mode=render_mode,
            autoreset_mode=mode,
            copy=copy,
            batch_size=batch_size,
            rust=None,
            infos=max_info_bytes > 0,
        )

    def _start(
        self,
        pool: AsyncEnvPool,
        *,
        action_space: spaces.Space[Any],
        single_obs: spaces.Space[Any],
        obs_space: spaces.Space[Any],
        metadata: Mapping[str, Any],
        render_mode: str | None,
        autoreset_mode: AutoresetMode,
        copy: bool,
        batch_size: int | None,
        rust: _RustEnvs | None,
        infos: bool,
    ) -> None:
        """What both kinds of envs (Python envs, rlpool's Rust envs) share."""
        self._pool = pool
        self._rust = rust
        self.num_envs = n = pool.num_envs
        self.copy = copy
        self.autoreset_mode = autoreset_mode
        self.metadata = dict(metadata)
        self.metadata["autoreset_mode"] = autoreset_mode
        self.render_mode = render_mode
        self.single_action_space = action_space
        self.action_space = batch_space(action_space, n)
        self.single_observation_space = single_obs
        self.observation_space = obs_space
        self._batch_size = n if batch_size is None else batch_size
        self._actions = _Codec(action_space, "action", rust.action_shape if rust else None)
        self._obs = _Codec(single_obs, "observation")
        # The Rust envs' NEXT_STEP: the pool steps and resets in one go
        # (SAME_STEP) and the reset's observation waits here for the env's
        # next step, as if the env reset then.
        self._deferred = rust is not None and autoreset_mode is AutoresetMode.NEXT_STEP
        self._ops = _Ops(pool, autoreset_mode is AutoresetMode.SAME_STEP or self._deferred)
        self._waiting = np.zeros(n, dtype=np.bool_)  # a reset is waiting (deferred)
        self._waiting_obs: list[Any] | None = None
        self._flight = np.zeros(n, dtype=np.bool_)  # sent, result not received
        self._ready = np.zeros(n, dtype=np.bool_)  # sent, result waiting here (deferred)
        self._sent = False  # send() was called since the envs were last all idle
        self._infos = infos
        self._last: list[Any] | None = None  # the last observations, by leaf
        self._reset_ids: Array | None = None
        self._call: tuple[str, tuple[Any, ...], dict[str, Any]] | None = None
        self._state = AsyncState.DEFAULT

    @property
    def pool(self) -> AsyncEnvPool:
        """The :class:`~rlpool.AsyncEnvPool` underneath (its
        ``resolved_exchange``, ``exchange_reason``, ``worker_pids``, ...)."""
        return self._pool

    # -- Gymnasium's calls ----------------------------------------------------

    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]
        """Each env's ``np_random_seed``."""
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]
        """Each env's random number generator (copies of them, with processes)."""
        return self.get_attr("np_random")

    def reset(
        self,
        *,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Resets the envs (those of ``options["reset_mask"]``, a bool array,
        if given) and returns their observations and infos.

        Args:
            seed: ``None``, an int (env ``i`` gets ``seed + i``) or a list
                of one seed (or ``None``) per env.
            options: passed to every env's ``reset`` (``reset_mask`` taken
                out of it).
        """
        self.reset_async(seed=seed, options=options)
        return self.reset_wait()

    def reset_async(
        self,
        seed: int | list[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        """Sends the resets; :meth:`reset_wait` collects them.

        Raises:
            ClosedEnvironmentError: the vector env was closed.
            AlreadyPendingCallError: a call is pending.
            InvalidArgument: ``seed`` or ``reset_mask`` do not fit the envs.
        """
        self._assert_is_running()
        n = self.num_envs
        if seed is None:
            seeds: list[int | None] = [None] * n
        elif isinstance(seed, int):
            seeds = [seed + i for i in range(n)]
        else:
            seeds = list(seed)
        if len(seeds) != n:
            raise InvalidArgument(
                f"If seeds are passed as a list the length must match num_envs={n} but got "
                f"length={len(seeds)}."
            )
        self._assert_idle("reset_async")
        if options is not None and "reset_mask" in options:
            ids = np.flatnonzero(_reset_mask(options.pop("reset_mask"), n))
        else:
            ids = np.arange(n)
        env_seeds = [seeds[i] for i in ids]
        if self._rust is not None:
            self._rust.prepare_reset(self, env_seeds, ids, options)
        elif options is not None or any(s is not None for s in env_seeds):
            self._pool.set_reset_args(seed=env_seeds, options=options, env_index=ids.tolist())
        self._pool.async_reset_send(env_index=None if len(ids) == n else ids.tolist())
        self._waiting[ids] = False
        self._reset_ids = ids
        self._state = AsyncState.WAITING_RESET

    def reset_wait(self, timeout: float | None = None) -> tuple[Any, dict[str, Any]]:
        """Waits for the resets sent by :meth:`reset_async`.

        Raises:
            NoAsyncCallError: no reset was sent.
            WaitTimeout: ``timeout`` seconds passed; the resets stay pending.
            EnvFailed: an env's reset raised.
        """
        self._assert_is_running()
        if self._state != AsyncState.WAITING_RESET or self._reset_ids is None:
            raise NoAsyncCallError(
                "Calling `reset_wait` without any prior call to `reset_async`.",
                AsyncState.WAITING_RESET.value,
            )
        ids = self._reset_ids
        td = self._receive_all(self._pool.async_reset_recv, len(ids), timeout, "reset_wait")
        leaves = self._obs.read(td)
        n = self.num_envs
        if len(ids) < n:
            leaves = _merge_rows(self._last_or_zeros(), ids, leaves)
        self._last = leaves
        rows, infos_of_rows = _info_rows(td["info"] if self._infos else None)
        infos: dict[str, Any] = {}
        for row, info in zip(rows, infos_of_rows):
            _add_info(infos, info, int(ids[row]), n)
        self._reset_ids = None
        self._state = AsyncState.DEFAULT
        return self._obs.batch(leaves), infos

    def step(self, actions: Any) -> StepResult:
        """Steps every env with its action (a batch of the action space):
        ``(observations, rewards, terminations, truncations, infos)``."""
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: Any) -> None:
        """Sends the actions; :meth:`step_wait` collects the results.

        Raises:
            ClosedEnvironmentError: the vector env was closed.
            AlreadyPendingCallError: a call is pending.
        """
        self._assert_is_running()
        self._assert_idle("step_async")
        self._send(self._actions.write(actions), None)
        self._state = AsyncState.WAITING_STEP

    def step_wait(self, timeout: float | None = None) -> StepResult:
        """Waits for the steps sent by :meth:`step_async`.

        Raises:
            NoAsyncCallError: no step was sent.
            WaitTimeout: ``timeout`` seconds passed; the steps stay pending.
            EnvFailed: an env's step raised (the others' results are
                dropped, as Gymnasium drops them).
        """
        self._assert_is_running()
        if self._state != AsyncState.WAITING_STEP:
            raise NoAsyncCallError(
                "Calling `step_wait` without any prior call to `step_async`.",
                AsyncState.WAITING_STEP.value,
            )
        flying = int(self._flight.sum()) if self._deferred else self.num_envs
        got = self._receive_all(self._ops.recv, flying, timeout, "step_wait") if flying else None
        obs, leaves, rewards, terminated, truncated, infos, _ = self._results(got)
        self._last = leaves
        self._state = AsyncState.DEFAULT
        return obs, rewards, terminated, truncated, infos

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Calls ``name`` on every env with ``args`` and ``kwargs`` (or reads it,
        if it is not callable): one result per env."""
        self.call_async(name, *args, **kwargs)
        return self.call_wait()

    def render(self) -> tuple[Any, ...] | None:
        """Every env's ``render()``."""
        if self._rust is not None:
            return (None,) * self.num_envs
        return self.call("render")

    def call_async(self, name: str, /, *args: Any, **kwargs: Any) -> None:
        """Records a call of ``name`` on every env; :meth:`call_wait` makes it.

        Raises:
            AlreadyPendingCallError: a call is pending.
            InvalidArgument: ``name`` is one of the vector env's own calls
                (``reset``, ``step``, ``close``).
        """
        self._assert_is_running()
        self._assert_idle("call_async")
        if name in _NOT_CALLABLE:
            raise InvalidArgument(
                f"Trying to call function `{name}` with `call`, use `{name}` directly instead."
            )
        self._call = (name, args, kwargs)
        self._state = AsyncState.WAITING_CALL

    def call_wait(self, timeout: float | None = None) -> tuple[Any, ...]:
        """Makes the call recorded by :meth:`call_async` and returns its results.

        Raises:
            NoAsyncCallError: no call was recorded.
            WaitTimeout: ``timeout`` seconds passed.
        """
        self._assert_is_running()
        if self._state != AsyncState.WAITING_CALL or self._call is None:
            raise NoAsyncCallError(
                "Calling `call_wait` without any prior call to `call_async`.",
                AsyncState.WAITING_CALL.value,
            )
        name, args, kwargs = self._call
        self._call = None
        self._state = AsyncState.DEFAULT
        try:
            results = self._pool.env_call(
                name, args, kwargs, timeout=_FOREVER if timeout is None else timeout
            )
        except Timeout as err:
            raise _wait_timeout(err, "call_wait", timeout) from None
        return tuple(results)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """Every env's attribute ``name``."""
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | object) -> None:
        """Sets attribute ``name`` of every env: ``values`` one per env (a list
        or tuple), or one value for all.

        Raises:
            InvalidArgument: a list or tuple whose length is not ``num_envs``.
            AlreadyPendingCallError: a call is pending.
        """
        self._assert_is_running()
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise InvalidArgument(
                "Values must be a list or tuple with length equal to the number of "
                f"environments. Got `{len(values)}` values for {self.num_envs} environments."
            )
        self._assert_idle("set_attr")
        self._pool.env_set_attr(name, list(values), timeout=_FOREVER)

    def close_extras(self, timeout: float | None = None, terminate: bool = False) -> None:
        """Closes the envs (their ``close()`` runs) and stops the workers. A
        pending call is waited for first, at most ``timeout`` seconds (not
        at all with ``terminate``); its results, or its failure, are
        dropped."""
        try:
            if self._state != AsyncState.DEFAULT:
                logger.warn(
                    f"Calling `close` while waiting for a pending call to "
                    f"`{self._state.value}` to complete."
                )
                getattr(self, f"{self._state.value}_wait")(0 if terminate else timeout)
        except PoolError:
            pass
        finally:
            if hasattr(self, "_pool"):
                self._pool.shutdown()
                # With threads, the envs are closed when the pool is dropped.
                del self._pool, self._ops

    def __del__(self) -> None:
        if not getattr(self, "closed", True) and hasattr(self, "_state"):
            with contextlib.suppress(Exception):
                self.close(terminate=True)

    def __enter__(self) -> AsyncVectorEnv:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- EnvPool's calls ------------------------------------------------------

    def send(self, actions: Any, env_id: Sequence[int] | Array | None = None) -> None:
        """Sends actions to some envs without waiting (EnvPool's ``send``):
        ``actions`` a batch of the action space with one row per env of
        ``env_id`` (default: every env). :meth:`recv` collects the results.

        Raises:
            AlreadyPendingCallError: a Gymnasium call (``step_async``, ...)
                is pending.
            Busy: an env of ``env_id`` was sent to and not received yet.
        """
        self._assert_is_running()
        if self._state != AsyncState.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `send` while waiting for a pending call to `{self._state.value}` "
                "to complete.",
                str(self._state.value),
            )
        ids = None if env_id is None else np.asarray(env_id, dtype=np.int64).reshape(-1)
        self._send(self._actions.write(actions), ids)
        self._sent = True

    def recv(
        self,
        min_get: int | None = None,
        max_get: int | None = None,
        timeout: float | None = None,
    ) -> StepResult:
        """Receives the results of envs sent to (EnvPool's ``recv``): at least
        ``min_get`` (default: ``max_get``, or every env in flight if fewer),
        at most ``max_get`` (default: the ``batch_size`` given at
        construction), within ``timeout`` seconds. The batch holds the envs
        in order of their index, in ``infos["env_id"]`` (``int32``); the
        infos' arrays follow that order.

        Raises:
            NoAsyncCallError: nothing was sent.
            WaitTimeout: ``timeout`` passed before ``min_get`` results were
                ready; nothing is lost.
        """
        self._assert_is_running()
        flying = int(self._flight.sum()) + int(self._ready.sum())
        if flying == 0:
            raise NoAsyncCallError("Calling `recv` without any prior call to `send`.", "send")
        max_get = self._batch_size if max_get is None else max_get
        min_get = min(max_get, flying) if min_get is None else min_get
        if not 1 <= min_get <= max_get:
            raise InvalidArgument(
                f"min_get={min_get}, max_get={max_get}: 1 <= min_get <= max_get is required"
            )
        ready = int(self._ready.sum())
        got = None
        if ready < min_get:
            try:
                got = self._ops.recv(
                    min_get=min_get - ready, max_get=max_get - ready, timeout=timeout
                )
            except Timeout as err:
                raise _wait_timeout(err, "recv", timeout) from None
        elif ready < max_get and self._flight.any():
            try:
                got = self._ops.recv(min_get=1, max_get=max_get - ready, timeout=0)
            except Timeout:
                got = None
        obs, _, rewards, terminated, truncated, infos, ids = self._results(got, max_get)
        infos["env_id"] = ids.astype(np.int32)
        return obs, rewards, terminated, truncated, infos

    # -- inside ---------------------------------------------------------------

    def _assert_is_running(self) -> None:
        if self.closed:
            raise ClosedEnvironmentError(
                f"Trying to operate on `{type(self).__name__}`, after a call to `close()`."
            )

    def _assert_idle(self, call: str) -> None:
        if self._state != AsyncState.DEFAULT:
            raise AlreadyPendingCallError(
                f"Calling `{call}` while waiting for a pending call to `{self._state.value}` "
                "to complete.",
                str(self._state.value),
            )
        if not self._sent:
            return
        if self._flight.any() or self._ready.any():
            envs = np.flatnonzero(self._flight | self._ready).tolist()
            raise AlreadyPendingCallError(
                f"Calling `{call}` while envs {envs} have results to `recv` (sent by `send`).",
                "send",
            )
        self._sent = False

    def _last_or_zeros(self) -> list[Any]:
        if self._last is None:
            self._last = self._obs.zeros(self.num_envs)
        return self._last

    def _send(self, actions: Any, ids: Array | None) -> None:
        """Sends actions (the pool's entries) to envs ``ids`` (``None``: all).
        With deferred resets, an env whose reset waits here is not sent to:
        its result is that reset, ready at once."""
        n = self.num_envs
        if self._deferred and self._ready.any():
            busy = np.flatnonzero(self._ready) if ids is None else ids[self._ready[ids]]
            if len(busy):
                raise Busy(
                    f"envs {busy.tolist()} were sent to and their results not received; "
                    "recv them first",
                    envs=busy.tolist(),
                )
        if self._deferred and self._waiting.any():
            ids = np.arange(n) if ids is None else ids
            waiting = self._waiting[ids]
            if waiting.any():
                self._ready[ids[waiting]] = True
                self._waiting[ids[waiting]] = False
                ids = ids[~waiting]
                actions = _take(actions, np.flatnonzero(~waiting))
                if len(ids) == 0:
                    return
        self._ops.send({"action": actions}, env_index=None if ids is None else ids.tolist())
        self._flight[slice(None) if ids is None else ids] = True

    def _receive_all(
        self, recv: Callable[..., Any], count: int, timeout: float | None, call: str
    ) -> Any:
        """Receives ``count`` results of one op: every env the call sent to.

        A failed env is taken alone: the others are still received (and
        dropped) so that the envs are all idle again, then the first
        failure is raised, the others in its notes.
        """
        try:
            out = recv(min_get=count, max_get=count, timeout=timeout)
        except Timeout as err:
            raise _wait_timeout(err, call, timeout) from None
        except (EnvFailed, WorkerDied) as err:
            self._fail(err, recv, timeout)
            raise
        return out

    def _fail(self, first: PoolError, recv: Callable[..., Any], timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = len(self._pool.in_flight())
            if left == 0:
                break
            try:
                wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                recv(min_get=left, max_get=left, timeout=wait)
            except (EnvFailed, WorkerDied) as err:
                _add_note(first, f"also: {err}")
            except Timeout:
                break
        self._flight[:] = False
        self._ready[:] = False
        self._reset_ids = None
        self._state = AsyncState.DEFAULT

    def _results(
        self, got: Any, max_ready: int | None = None
    ) -> tuple[Any, list[Any], Array, Array, Array, dict[str, Any], Array]:
        """Gymnasium's step results from what the pool returned (``got``, or
        ``None``) and, with deferred resets, at most ``max_ready`` of the
        results waiting here: the observations (and their leaves), rewards,
        flags, infos and env ids, in order of env."""
        if got is None:
            td = root = None
        elif self._ops.same_step:
            td, root = got
        else:
            td, root = got, None
        if td is not None:
            ids = np.asarray(td["env_index"], dtype=np.int64)
            nxt = td["next"]
            size = len(ids)
            rewards = np.asarray(nxt["reward"], dtype=np.float64).reshape(size)
            terminated = np.asarray(nxt["terminated"]).reshape(size)
            truncated = np.asarray(nxt["truncated"]).reshape(size)
            final = self._obs.read(nxt)
            leaves = final if root is None or self._deferred else self._obs.read(root)
            info = nxt["info"] if self._infos else None
            self._flight[ids] = False
        else:
            ids = _NO_ROWS.astype(np.int64)
            rewards = np.zeros(0)
            terminated = truncated = np.zeros(0, dtype=np.bool_)
            final = leaves = self._obs.zeros(0)
            info = None
        if self._deferred:
            if td is not None:
                done = np.flatnonzero(terminated | truncated)
                if len(done):
                    self._keep_resets(ids[done], [leaf[done] for leaf in self._obs.read(root)])
            if self._ready.any():
                return self._with_ready(ids, leaves, rewards, terminated, truncated, max_ready)
            return self._obs.batch(leaves), leaves, rewards, terminated, truncated, {}, ids
        size = len(ids)
        infos: dict[str, Any] = {}
        rows, row_infos = _info_rows(info)
        if root is not None and td is not None:
            done = np.flatnonzero(terminated | truncated)
            if len(done):
                by_row = dict(zip(rows.tolist(), row_infos))
                reset_rows, reset_infos = _info_rows(root["info"] if self._infos else None)
                resets = dict(zip(reset_rows.tolist(), reset_infos))
                for r in done.tolist():
                    by_row[r] = {
                        "final_info": by_row.get(r, {}),
                        "final_obs": self._obs.row(final, r),
                        **resets.get(r, {}),
                    }
                rows = np.array(sorted(by_row), dtype=np.intp)
                row_infos = [by_row[r] for r in rows.tolist()]
        for row, row_info in zip(rows.tolist(), row_infos):
            _add_info(infos, row_info, row, size)
        return self._obs.batch(leaves), leaves, rewards, terminated, truncated, infos, ids

    def _keep_resets(self, ids: Array, leaves: list[Any]) -> None:
        if self._waiting_obs is None:
            self._waiting_obs = self._obs.zeros(self.num_envs)
        for store, leaf in zip(self._waiting_obs, leaves):
            store[ids] = leaf
        self._waiting[ids] = True

    def _with_ready(
        self,
        ids: Array,
        leaves: list[Any],
        rewards: Array,
        terminated: Array,
        truncated: Array,
        max_ready: int | None,
    ) -> tuple[Any, list[Any], Array, Array, Array, dict[str, Any], Array]:
        """Adds the deferred resets' results (reward 0, not done) to a batch."""
        ready = np.flatnonzero(self._ready)
        if max_ready is not None:
            ready = ready[: max(max_ready - len(ids), 0)]
        self._ready[ready] = False
        assert self._waiting_obs is not None
        all_ids = np.concatenate([ids, ready])
        order = np.argsort(all_ids, kind="stable")
        merged = [
            np.concatenate([leaf, store[ready]])[order]
            for leaf, store in zip(leaves, self._waiting_obs)
        ]
        zeros = np.zeros(len(ready), dtype=np.bool_)
        return (
            self._obs.batch(merged),
            merged,
            np.concatenate([rewards, np.zeros(len(ready))])[order],
            np.concatenate([terminated, zeros])[order],
            np.concatenate([truncated, zeros])[order],
            {},
            all_ids[order],
        )


def _merge_rows(base: list[Any], ids: Array, leaves: list[Any]) -> list[Any]:
    """``base``'s leaves with rows ``ids`` replaced by ``leaves``' rows (new
    arrays: ``base`` is not changed)."""
    merged: list[Any] = []
    for old, new in zip(base, leaves):
        if isinstance(old, np.ndarray):
            array = old.copy()
            array[ids] = new
            merged.append(array)
        else:
            values = list(old)
            for row, i in enumerate(ids.tolist()):
                values[i] = new[row]
            merged.append(values)
    return merged


def _add_note(err: BaseException, note: str) -> None:
    # BaseException.add_note is Python 3.11's.
    notes = getattr(err, "__notes__", None)
    if notes is None:
        notes = []
        err.__notes__ = notes
    notes.append(note)


def _wait_timeout(err: Timeout, call: str, timeout: float | None) -> WaitTimeout:
    return WaitTimeout(
        f"The call to `{call}` has timed out after {timeout} second(s) ({err}); "
        "the call is still pending.",
        op=err.op,
        timeout=err.timeout,
        ready=err.ready,
        min_get=err.min_get,
        env=err.env,
    )


def _check_batch_size(batch_size: int | None, n: int) -> None:
    if batch_size is not None and not 1 <= batch_size <= n:
        raise InvalidArgument(f"batch_size={batch_size}: between 1 and num_envs={n}")


def _autoreset_mode(mode: str | AutoresetMode) -> AutoresetMode:
    if isinstance(mode, AutoresetMode):
        return mode
    try:
        return AutoresetMode(mode)
    except ValueError:
        choices = [m.value for m in AutoresetMode]
        raise InvalidArgument(f"autoreset_mode={mode!r}: one of {choices}") from None


def _reset_mask(mask: Any, n: int) -> Array:
    if not isinstance(mask, np.ndarray):
        raise InvalidType(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
    if mask.shape != (n,):
        raise InvalidArgument(f"`options['reset_mask']` must have shape `({n},)`, got {mask.shape}")
    if mask.dtype != np.bool_:
        raise InvalidType(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
    if not mask.any():
        raise InvalidArgument(
            "`options['reset_mask']` must contain a boolean array with at least one True "
            f"value, got reset_mask={mask}"
        )
    return mask


def _observation_spaces(
    mode: Any, env_spaces: Sequence[spaces.Space[Any]]
) -> tuple[spaces.Space[Any], spaces.Space[Any]]:
    """``(single_observation_space, observation_space)`` for an
    ``observation_mode``, as Gymnasium picks them."""
    if isinstance(mode, tuple) and len(mode) == 2:
        if not all(isinstance(s, spaces.Space) for s in mode):
            raise InvalidType(
                f"Expected both elements of observation_mode to be Spaces, got "
                f"{type(mode[0])} and {type(mode[1])}"
            )
        return mode[1], mode[0]
    if mode == "same":
        return env_spaces[0], batch_space(env_spaces[0], len(env_spaces))
    if mode == "different":
        return env_spaces[0], batch_differing_spaces(list(env_spaces))
    raise InvalidArgument(
        "Invalid `observation_mode`, expected: 'same' or 'different' or tuple of single and "
        f"batch observation space, actual got {mode}"
    )


def _check_spaces(
    mode: Any,
    single_obs: spaces.Space[Any],
    single_action: spaces.Space[Any],
    obs_spaces: Sequence[spaces.Space[Any]],
    action_spaces: Sequence[spaces.Space[Any]],
) -> None:
    for i, (obs, action) in enumerate(zip(obs_spaces, action_spaces)):
        same = obs == single_obs if mode == "same" else is_space_dtype_shape_equiv(obs, single_obs)
        if not same:
            raise SpaceMismatch(
                f"env {i}'s observation space {obs} differs from {single_obs} "
                f"(observation_mode={mode!r}); use observation_mode='different' if this is "
                "intended",
                env=i,
            )
        if action != single_action:
            raise SpaceMismatch(
                f"env {i}'s action space {action} differs from env 0's {single_action}: "
                "actions are batched, so every env must take the same space",
                env=i,
            )


# -- rlpool's Rust envs under Gymnasium's ids -------------------------------


class _RustEnvs:
    """A Gymnasium id that rlpool implements in Rust: its registered name,
    keywords and seeds (rebuilt with new seeds when a reset is seeded)."""

    def __init__(
        self,
        name: str,
        num_envs: int,
        kwargs: dict[str, Any],
        action_shape: tuple[int, ...],
        pool_options: dict[str, Any],
    ) -> None:
        self.name = name
        self.kwargs = kwargs
        self.action_shape = action_shape
        self.pool_options = pool_options
        self.num_envs = num_envs

    def pool(self, seeds: Sequence[int | None]) -> AsyncEnvPool:
        rng = np.random.default_rng()
        kwargs = [
            {**self.kwargs, "seed": int(rng.integers(2**63)) if s is None else int(s)}
            for s in seeds
        ]
        return AsyncEnvPool(
            [self.name] * self.num_envs, create_env_kwargs=kwargs, **self.pool_options
        )

    def prepare_reset(
        self,
        env: AsyncVectorEnv,
        seeds: list[int | None],
        ids: Array,
        options: dict[str, Any] | None,
    ) -> None:
        if options:
            raise InvalidArgument(
                f"options={options!r}: rlpool's Rust {self.name} takes no reset options "
                "(make it with wrappers=[] and vectorization_mode='async' for Gymnasium's)"
            )
        if all(s is None for s in seeds):
            return
        if len(ids) != self.num_envs:
            raise InvalidArgument(
                f"seed={seeds!r} with a reset_mask: rlpool's Rust {self.name} is seeded "
                "when it is built, so a seeded reset resets every env"
            )
        env._pool.shutdown()
        env._pool = self.pool(seeds)
        env._ops = _Ops(env._pool, env._ops.same_step)


_RUST_IDS: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {
    # id: (the keywords the Rust env takes, its action's shape)
    "CartPole-v1": (("max_episode_steps",), (1,)),
    "Pendulum-v1": (("g", "max_episode_steps"), (1,)),
}

_VECTORIZE_MODES = ("async", "sync", "vector_entry_point")


def make_vec(
    id: str | EnvSpec,
    num_envs: int = 1,
    vectorization_mode: str | None = None,
    vector_kwargs: dict[str, Any] | None = None,
    wrappers: Sequence[Callable[[gymnasium.Env[Any, Any]], gymnasium.Wrapper[Any, Any, Any, Any]]]
    | None = None,
    **env_kwargs: Any,
) -> AsyncVectorEnv:
    """Gymnasium's ``make_vec`` on rlpool: ``num_envs`` envs of ``id`` in an
    :class:`AsyncVectorEnv`.

    ``"CartPole-v1"`` and ``"Pendulum-v1"`` without wrappers run rlpool's
    Rust envs in threads, with no Python in the step: the same dynamics,
    spaces and autoreset as Gymnasium's, but their own random streams (a
    seed gives other initial states than Gymnasium's), no ``render``,
    ``call``, ``get_attr`` or ``set_attr``, and a seeded reset resets
    every env. Every other id (or one with wrappers, or keywords the Rust
    env does not take) runs ``gymnasium.make(id, **env_kwargs)`` in worker
    processes.

    Usable as a ``vector_entry_point``:
    ``gymnasium.register("MyCartPole-v1", vector_entry_point=functools.partial(
    rlpool.gymnasium.make_vec, "CartPole-v1"))``.

    Args:
        id: a Gymnasium id (or ``EnvSpec``).
        num_envs: the number of envs.
        vectorization_mode: ``None`` or ``"vector_entry_point"`` (the Rust
            envs where they exist, else processes), ``"async"`` (Gymnasium's
            env in worker processes) or ``"sync"`` (Gymnasium's env in
            threads of this process).
        vector_kwargs: :class:`AsyncVectorEnv`'s keyword arguments.
        wrappers: wrappers applied to each env, in order.
        **env_kwargs: the env's keyword arguments (``gymnasium.make``'s).

    >>> from rlpool.gymnasium import make_vec
    >>> envs = make_vec("CartPole-v1", num_envs=3)
    >>> observations, infos = envs.reset(seed=1)
    >>> observations.shape, envs.action_space
    ((3, 4), MultiDiscrete([2 2 2]))
    >>> envs.close()
    """
    vector_kwargs = dict(vector_kwargs or {})
    wrappers = list(wrappers or [])
    if vectorization_mode is not None:
        mode = getattr(vectorization_mode, "value", vectorization_mode)
        if mode not in _VECTORIZE_MODES:
            raise InvalidArgument(
                f"vectorization_mode={vectorization_mode!r}: None or one of {_VECTORIZE_MODES}"
            )
    else:
        mode = None
    env_spec = id if isinstance(id, EnvSpec) else gymnasium.spec(id)
    name = id if isinstance(id, str) else env_spec.id
    rust_kwargs = _rust_kwargs(name, env_kwargs)
    env: AsyncVectorEnv
    if mode in (None, "vector_entry_point") and not wrappers and rust_kwargs is not None:
        env = _rust_vector_env(name, num_envs, env_kwargs, rust_kwargs, vector_kwargs)
    else:
        if mode == "sync":
            vector_kwargs.setdefault("backend", "threading")
        env = AsyncVectorEnv([_Maker(env_spec, env_kwargs, wrappers)] * num_envs, **vector_kwargs)
    spec = _copy.deepcopy(env_spec)
    spec.kwargs = dict(env_kwargs)
    if num_envs != 1:
        spec.kwargs["num_envs"] = num_envs
    spec.kwargs["vectorization_mode"] = mode or "vector_entry_point"
    if vector_kwargs:
        spec.kwargs["vector_kwargs"] = vector_kwargs
    if wrappers:
        spec.kwargs["wrappers"] = wrappers
    env.spec = spec
    return env


class _Maker:
    """``gymnasium.make(spec, **kwargs)`` then the wrappers: picklable, so
    that it travels to worker processes."""

    def __init__(
        self, spec: EnvSpec, kwargs: dict[str, Any], wrappers: Sequence[Callable[[Any], Any]]
    ) -> None:
        self.spec = spec
        self.kwargs = kwargs
        self.wrappers = list(wrappers)

    def __call__(self) -> gymnasium.Env[Any, Any]:
        env = gymnasium.make(self.spec, **self.kwargs)
        for wrapper in self.wrappers:
            env = wrapper(env)
        return env


def _rust_kwargs(name: str, env_kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Rust env's keywords for Gymnasium's, or ``None`` if ``name`` has no
    Rust env or the keywords need Gymnasium's."""
    if name not in _RUST_IDS:
        return None
    allowed, _ = _RUST_IDS[name]
    out: dict[str, Any] = {}
    for key, value in env_kwargs.items():
        if key == "render_mode" and value is None:
            continue
        if key not in allowed:
            return None
        out[key] = value
    return out


def _rust_vector_env(
    name: str,
    num_envs: int,
    env_kwargs: dict[str, Any],
    rust_kwargs: dict[str, Any],
    vector_kwargs: dict[str, Any],
) -> AsyncVectorEnv:
    options = dict(vector_kwargs)
    unknown = set(options) - {
        "shared_memory",
        "copy",
        "context",
        "daemon",
        "observation_mode",
        "autoreset_mode",
        "max_concurrency",
        "envs_per_worker",
        "exchange",
        "worker_affinity",
        "batch_size",
        "backend",
        "max_info_bytes",
    }
    if unknown:
        raise InvalidArgument(f"vector_kwargs: unknown keys {sorted(unknown)}")
    if options.get("observation_mode", "same") != "same":
        raise InvalidArgument(
            f"observation_mode={options['observation_mode']!r}: rlpool's Rust {name} envs "
            "all have the same observation space"
        )
    _check_batch_size(options.get("batch_size"), num_envs)
    mode = _autoreset_mode(options.get("autoreset_mode", AutoresetMode.NEXT_STEP))
    # Gymnasium's own env gives the spaces and metadata (cheap for these two).
    probe = gymnasium.make(name, **env_kwargs)
    try:
        action_space, single_obs = probe.action_space, probe.observation_space
        metadata = dict(probe.metadata)
    finally:
        probe.close()
    pool_options: dict[str, Any] = {"backend": options.get("backend", "threading")}
    if pool_options["backend"] == "multiprocessing":
        pool_options["envs_per_worker"] = options.get(
            "envs_per_worker", math.ceil(num_envs / min(os.cpu_count() or 1, num_envs))
        )
        pool_options["exchange"] = options.get(
            "exchange", "auto" if options.get("shared_memory", True) else "queue"
        )
    if options.get("worker_affinity") is not None:
        pool_options["worker_affinity"] = options["worker_affinity"]
    rust = _RustEnvs(name, num_envs, rust_kwargs, _RUST_IDS[name][1], pool_options)
    env = AsyncVectorEnv.__new__(AsyncVectorEnv)
    env.env_fns = [_Maker(gymnasium.spec(name), env_kwargs, [])] * num_envs
    env.shared_memory = options.get("shared_memory", True)
    env.context = options.get("context")
    env.daemon = options.get("daemon", True)
    env.observation_mode = "same"
    env._start(
        rust.pool([None] * num_envs),
        action_space=action_space,
        single_obs=single_obs,
        obs_space=batch_space(single_obs, num_envs),
        metadata=metadata,
        render_mode=None,
        autoreset_mode=mode,
        copy=options.get("copy", True),
        batch_size=options.get("batch_size"),
        rust=rust,
        infos=False,
    )
    return env
