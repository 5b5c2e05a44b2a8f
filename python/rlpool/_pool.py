"""`AsyncEnvPool`: the Rust pool with TorchRL's calls.

>>> import numpy as np
>>> import rlpool
>>> with rlpool.AsyncEnvPool(["CartPole-v1"] * 4, create_env_kwargs={"seed": 0}) as pool:
...     root = pool.reset()
...     pool.async_step_send(pool.rand_action())
...     first = pool.async_step_recv(min_get=2, max_get=2)  # the first two ready
...     rest = pool.async_step_recv(min_get=2, timeout=5.0)
...     sorted(np.concatenate([first["env_index"], rest["env_index"]]).tolist())
[0, 1, 2, 3]
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import weakref
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Union, cast

import numpy as np

from rlpool import _native
from rlpool._pyenv import MAKER_NAME, Hub, PyEnvMaker, forget_local, local_adapter, maker_kwargs
from rlpool._tensordict import LazyStackedTensorDict, TensorDict
from rlpool.errors import InvalidArgument, InvalidType, ShutDown
from rlpool.specs import Composite, Stacked, from_description

__all__ = ["AsyncEnvPool", "Batch", "EnvMaker", "TensorDictLike"]

EnvMaker = Union[str, Callable[..., Any], PyEnvMaker]
"""An env maker: a registered env name (``"CartPole-v1"``), a callable
returning a ``gymnasium.Env`` (called with the env's ``create_env_kwargs``),
or a :class:`PyEnvMaker`."""

TensorDictLike = Union[TensorDict, Mapping[str, Any]]
"""A :class:`TensorDict`, or a plain (nested) dict of arrays."""

Batch = Union[TensorDict, LazyStackedTensorDict]
"""What a receive returns: a dense :class:`TensorDict`, or a
:class:`LazyStackedTensorDict` of per-env tensordicts."""

_RESET, _STEP, _STEP_AND_MAYBE_RESET = 0, 1, 2


class AsyncEnvPool:
    """A pool of environments stepped in worker threads or processes, with
    TorchRL's ``AsyncEnvPool`` calls.

    Synchronous calls (:meth:`reset`, :meth:`step`,
    :meth:`step_and_maybe_reset`) address every env. Asynchronous calls send
    to some envs (``async_step_send``) and collect whichever results are
    ready (``async_step_recv``): at least ``min_get``, at most ``max_get``,
    within ``timeout`` seconds, or one given env's. Results are
    :class:`TensorDict`\\ s sorted by env, with an ``"env_index"`` entry; their
    arrays are the caller's own (one buffer per call; large entries handed
    over without a copy), writable, valid and unchanged for as long as you
    keep them.

    Every wait releases the GIL and answers Ctrl-C within 100 ms
    (``KeyboardInterrupt``; the results in flight stay for a later receive).

    Args:
        env_makers: one maker per env: a registered env name
            (``"CartPole-v1"``, ``"Pendulum-v1"``, ...), a callable returning
            a ``gymnasium.Env`` (called as ``maker(**create_env_kwargs[i])``;
            with processes it travels to the worker with cloudpickle), or a
            :class:`PyEnvMaker`. A Python env's tensordicts hold its spaces'
            leaves under ``"action"`` and ``"observation"`` (a ``Dict`` or
            ``Tuple`` space nested by key or position), a float64
            ``"reward"``, the done flags, and ``"info"``: its pickled info
            dict (:func:`decode_infos`).
        backend: ``"threading"`` (worker threads of this process) or
            ``"multiprocessing"`` (worker processes: this interpreter started
            again, ``python -m rlpool._worker``, never forked).
        stack: how results are stacked: ``"dense"`` (every env's keys and
            shapes identical), ``"maybe_dense"`` (dense where possible),
            ``"lazy"`` (a :class:`LazyStackedTensorDict`).
        exchange: with processes, how results travel: ``"shm"`` (shared
            memory slots, fixed shapes only), ``"queue"`` (any data) or
            ``"auto"`` (shm when the envs allow it); see
            :attr:`resolved_exchange` and :attr:`exchange_reason`.
        create_env_kwargs: keyword arguments of the envs: one dict for all,
            or a list of one dict per env.
        envs_per_worker: with processes, how many envs share one worker.
        worker_affinity: CPU sets: one list of CPU ids per worker (thread or
            process), or a function of the worker index returning one. By
            default (``None``) worker processes are spread over the CPUs,
            a group of them each, when they are no more than the CPUs (on
            2 cores, 1.3x-1.8x faster than leaving them to the scheduler);
            ``False`` leaves them to the scheduler.
        num_threads: with threads, the number of worker threads (default:
            one per env, at most the CPUs available; with Python envs, which
            hold the GIL while they step, 1, or one per CPU set of a
            ``worker_affinity`` list); with processes, the
            threads that run each worker's envs (default: the worker's CPUs;
            1 when there are Python envs).
        start_timeout: seconds the workers have to start.

    Raises:
        StartError: an env could not be built, the envs' specs do not stack,
            or a worker could not start.
        InvalidArgument: an argument out of range (the message names it).
        InvalidType: an argument of the wrong type.
    """

    def __init__(
        self,
        env_makers: Sequence[EnvMaker] | EnvMaker,
        *,
        backend: Literal["threading", "multiprocessing"] = "threading",
        stack: Literal["dense", "maybe_dense", "lazy"] = "dense",
        exchange: Literal["auto", "queue", "shm"] = "auto",
        create_env_kwargs: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        envs_per_worker: int = 1,
        worker_affinity: Sequence[Sequence[int]]
        | Callable[[int], Sequence[int]]
        | Literal[False]
        | None = None,
        num_threads: int | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        given: list[EnvMaker]
        if isinstance(env_makers, (str, PyEnvMaker)) or callable(env_makers):
            given = [env_makers]
        else:
            given = list(env_makers)
        if create_env_kwargs is None or isinstance(create_env_kwargs, Mapping):
            per_env: list[Any] = [create_env_kwargs] * len(given)
        else:
            per_env = list(create_env_kwargs)
            if len(per_env) != len(given):
                raise InvalidArgument(
                    f"create_env_kwargs has {len(per_env)} dicts for {len(given)} envs"
                )
        self._token = f"{id(self):x}-{secrets.token_hex(4)}"
        self._hub: Hub | None = None
        self._python_envs: list[int] = []
        makers: list[str] = []
        kwargs: list[Any] = []
        try:
            for i, maker in enumerate(given):
                if isinstance(maker, str):
                    makers.append(maker)
                    kwargs.append(per_env[i])
                    continue
                if not isinstance(maker, PyEnvMaker):
                    if not callable(maker):
                        raise InvalidType(
                            f"env_makers[{i}] is {type(maker).__name__}: a maker is a registered "
                            "env name (str), a callable returning a gymnasium.Env, or a PyEnvMaker"
                        )
                    maker = PyEnvMaker(maker, per_env[i])
                elif per_env[i]:
                    maker = PyEnvMaker(
                        maker.fn,
                        {**per_env[i], **maker.kwargs},
                        autoreset=maker.autoreset,
                        max_info_bytes=maker.max_info_bytes,
                    )
                if backend == "multiprocessing" and self._hub is None:
                    self._hub = Hub()
                makers.append(MAKER_NAME)
                kwargs.append(
                    maker_kwargs(
                        maker,
                        i,
                        token=self._token,
                        hub=self._hub if backend == "multiprocessing" else None,
                        where=f"env_makers[{i}]",
                    )
                )
                self._python_envs.append(i)
        except BaseException:
            # A maker refused half-way: nothing of the pool's is left behind.
            _release(self._token, self._hub)
            raise
        # Closes the hub and forgets this process's makers however the pool ends.
        self._finalizer = weakref.finalize(self, _release, self._token, self._hub)
        max_threads = None
        if self._python_envs and num_threads is None:
            # Python envs hold the GIL while they step, so more threads only
            # take turns, and hand the GIL over on every step (two worker
            # threads over 16-64 Gymnasium CartPoles: half the rate of one).
            # Ask for more where the envs release it; a list of CPU sets for
            # the threads says how many.
            num_threads = 1
            if backend == "threading" and isinstance(worker_affinity, (list, tuple)):
                num_threads = max(len(worker_affinity), 1)
        if self._python_envs and backend == "multiprocessing":
            # One runner per worker, and no spare runner when an env's step
            # runs long.
            max_threads = num_threads
        try:
            self._native = _native.Pool(
                makers,
                kwargs,
                backend=backend,
                stack=stack,
                exchange=exchange,
                envs_per_worker=envs_per_worker,
                worker_affinity=worker_affinity,
                num_threads=num_threads,
                start_timeout=start_timeout,
                worker_command=_worker_command(),
                max_threads=max_threads,
            )
        except BaseException:
            self._finalizer()
            raise
        self._specs: dict[str, Composite | Stacked] | None = None

    # -- description -------------------------------------------------------

    @property
    def num_envs(self) -> int:
        """The number of envs."""
        return int(self._native.num_envs)

    @property
    def batch_size(self) -> tuple[int, ...]:
        """The pool's batch size: ``(num_envs, *env_batch_size)``."""
        return tuple(self._native.batch_size)

    @property
    def env_batch_sizes(self) -> list[tuple[int, ...]]:
        """Each env's own batch size."""
        return [tuple(b) for b in self._native.env_batch_sizes]

    @property
    def env_names(self) -> list[str]:
        """Each env's registered name."""
        return list(self._native.env_names)

    @property
    def backend(self) -> str:
        """``"threading"`` or ``"multiprocessing"``."""
        return str(self._native.backend)

    @property
    def stack(self) -> str:
        """The stacking mode."""
        return str(self._native.stack)

    @property
    def resolved_exchange(self) -> str:
        """The exchange in use: ``"shm"`` (shared-memory slots, processes
        only) or ``"queue"`` (tensordicts passed whole: in memory with
        threads, over sockets with processes)."""
        return str(self._native.resolved_exchange)

    @property
    def exchange_reason(self) -> str | None:
        """Why ``exchange="auto"`` chose the queue (the key and env that
        forced it), or ``None``."""
        value = self._native.exchange_reason
        return None if value is None else str(value)

    @property
    def worker_pids(self) -> list[int]:
        """The worker processes' ids (empty with threads)."""
        return list(self._native.worker_pids)

    def _spec(self, name: str) -> Composite | Stacked:
        if self._specs is None:
            specs: dict[str, Composite | Stacked] = {}
            for key, desc in self._native.specs().items():
                spec = from_description(desc)
                if not isinstance(spec, (Composite, Stacked)):
                    raise TypeError(f"{key} is a {type(spec).__name__}, not a composite")
                specs[key] = spec
            self._specs = specs
        return self._specs[name]

    @property
    def full_action_spec(self) -> Composite | Stacked:
        """The actions every env takes, stacked over the pool."""
        return self._spec("full_action_spec")

    @property
    def full_observation_spec(self) -> Composite | Stacked:
        """The observations, stacked over the pool."""
        return self._spec("full_observation_spec")

    @property
    def full_reward_spec(self) -> Composite | Stacked:
        """The rewards, stacked over the pool."""
        return self._spec("full_reward_spec")

    @property
    def full_done_spec(self) -> Composite | Stacked:
        """The done flags (``done``, ``terminated``, ``truncated``)."""
        return self._spec("full_done_spec")

    @property
    def full_state_spec(self) -> Composite | Stacked:
        """The state entries a reset may take."""
        return self._spec("full_state_spec")

    @property
    def action_spec(self) -> Any:
        """The action's own spec (the leaf of :attr:`full_action_spec` when
        there is one key)."""
        return _leaf(self.full_action_spec)

    @property
    def observation_spec(self) -> Composite | Stacked:
        """The same as :attr:`full_observation_spec` (TorchRL's name)."""
        return self.full_observation_spec

    @property
    def reward_spec(self) -> Any:
        """The reward's own spec."""
        return _leaf(self.full_reward_spec)

    @property
    def done_spec(self) -> Any:
        """The same as :attr:`full_done_spec`."""
        return self.full_done_spec

    def rand_action(self, rng: np.random.Generator | None = None) -> Batch:
        """A random action for every env (a :class:`TensorDict` with the
        pool's batch size), drawn from :attr:`full_action_spec`."""
        action: Batch = self.full_action_spec.rand(rng)
        return action

    # -- synchronous calls -------------------------------------------------

    def reset(self, td: TensorDictLike | None = None) -> Batch:
        """Resets every env; ``td`` may carry state entries. Raises
        :class:`~rlpool.Busy` if an env is in flight."""
        return self._native.reset(td)

    def step(self, td: TensorDictLike) -> Batch:
        """Steps every env with its row of ``td``: ``td``'s entries with the
        results under ``"next"`` and ``"env_index"``."""
        return self._native.step(td)

    def step_and_maybe_reset(self, td: TensorDictLike) -> tuple[Batch, Batch]:
        """Steps every env and resets those that are done: ``(result,
        next_root)``, ``next_root`` the next step's input (reset where
        done)."""
        return self._native.step_and_maybe_reset(td)

    # -- asynchronous calls ------------------------------------------------

    def _recv_env(self, op: int, env_index: int, timeout: float | None) -> Any:
        return self._native.recv_env(op, int(env_index), timeout)

    def async_reset_send(
        self, td: TensorDictLike | None = None, env_index: int | Sequence[int] | None = None
    ) -> None:
        """Sends a reset to the envs of ``env_index`` (an int, a list, or
        ``None``: the ``"env_index"`` entry of ``td``, or every env)."""
        self._native.send(_RESET, td, env_index)

    def async_reset_recv(
        self,
        min_get: int = 1,
        env_index: int | None = None,
        *,
        max_get: int | None = None,
        timeout: float | None = None,
    ) -> Batch:
        """Receives reset results (see :meth:`async_step_recv`)."""
        out: Batch = (
            self._native.recv(_RESET, min_get, max_get, timeout)
            if env_index is None
            else self._recv_env(_RESET, env_index, timeout)
        )
        return out

    def async_step_send(
        self, td: TensorDictLike, env_index: int | Sequence[int] | None = None
    ) -> None:
        """Sends the actions of ``td`` to the envs of ``env_index``: one env
        (an int; its result is taken by ``async_step_recv(env_index=i)``
        only), a list (one per row of ``td``), or ``None`` (the ``"env_index"``
        entry of ``td``, or every env if it has none). Raises
        :class:`~rlpool.Busy` naming envs whose previous result is still to be
        received."""
        self._native.send(_STEP, td, env_index)

    def async_step_recv(
        self,
        min_get: int = 1,
        env_index: int | None = None,
        *,
        max_get: int | None = None,
        timeout: float | None = None,
    ) -> Batch:
        """Receives step results: at least ``min_get`` (a hard bound), at most
        ``max_get`` (default: every one ready), sorted by env with
        ``"env_index"``; or env ``env_index``'s result alone. ``timeout``
        (seconds) bounds the whole call; ``0`` polls. On a timeout,
        :class:`~rlpool.Timeout` is raised and nothing is lost."""
        out: Batch = (
            self._native.recv(_STEP, min_get, max_get, timeout)
            if env_index is None
            else self._recv_env(_STEP, env_index, timeout)
        )
        return out

    def async_step_and_maybe_reset_send(
        self, td: TensorDictLike, env_index: int | Sequence[int] | None = None
    ) -> None:
        """Sends the actions of ``td``, to step and reset where done."""
        self._native.send(_STEP_AND_MAYBE_RESET, td, env_index)

    def async_step_and_maybe_reset_recv(
        self,
        min_get: int = 1,
        env_index: int | None = None,
        *,
        max_get: int | None = None,
        timeout: float | None = None,
    ) -> tuple[Batch, Batch]:
        """Receives ``(result, next_root)`` pairs (see
        :meth:`async_step_recv`)."""
        out: tuple[Batch, Batch] = (
            self._native.recv(_STEP_AND_MAYBE_RESET, min_get, max_get, timeout)
            if env_index is None
            else self._recv_env(_STEP_AND_MAYBE_RESET, env_index, timeout)
        )
        return out

    # -- calls on the Python envs themselves ------------------------------

    def _envs_called(self, env_index: int | Sequence[int] | None) -> list[int]:
        envs = list(range(self.num_envs)) if env_index is None else _indices(env_index)
        for env in envs:
            if not 0 <= env < self.num_envs:
                raise InvalidArgument(f"env_index {env} is out of range for {self.num_envs} envs")
            if env not in self._python_envs:
                raise InvalidArgument(
                    f"env {env} is the registered env {self.env_names[env]!r}, not a Python "
                    "env: only Python envs take calls on their attributes"
                )
        if self.is_closed:
            raise ShutDown("the pool is shut down")
        return envs

    def _request(self, env: int, request: tuple[Any, ...], timeout: float | None) -> Any:
        timeout = 60.0 if timeout is None else float(timeout)
        if not timeout > 0:
            raise InvalidArgument(f"timeout must be a positive number of seconds, got {timeout}")
        if self._hub is not None:
            return self._hub.request(env, request, timeout)
        adapter = local_adapter(self._token, env)
        if adapter is None:
            raise ShutDown(f"env {env} is gone (the pool is shut down)")
        return adapter.handle(request)

    def env_call(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        env_index: int | Sequence[int] | None = None,
        timeout: float | None = None,
    ) -> list[Any]:
        """Calls ``name`` on each Python env of ``env_index`` (default: all)
        with ``args`` and ``kwargs``, in its worker; an attribute that is not
        callable is returned as is (Gymnasium's ``call``). The results are in
        the order of ``env_index``. An env in the middle of a step answers
        once the step is done; ``timeout`` (seconds, default 60) bounds each
        env's answer. The env's own exception is raised as is.

        >>> import gymnasium as gym
        >>> import rlpool
        >>> with rlpool.AsyncEnvPool([lambda: gym.make("CartPole-v1")] * 2) as pool:
        ...     pool.env_call("get_wrapper_attr", ("spec",))[0].id
        'CartPole-v1'
        """
        request = ("call", name, tuple(args), dict(kwargs or {}))
        return [self._request(env, request, timeout) for env in self._envs_called(env_index)]

    def env_get_attr(
        self,
        name: str,
        *,
        env_index: int | Sequence[int] | None = None,
        timeout: float | None = None,
    ) -> list[Any]:
        """The attribute ``name`` of each Python env of ``env_index``."""
        return [self._request(env, ("get", name), timeout) for env in self._envs_called(env_index)]

    def env_set_attr(
        self,
        name: str,
        values: Any,
        *,
        env_index: int | Sequence[int] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Sets the attribute ``name`` of each Python env of ``env_index``:
        ``values`` a list or tuple of one value per env, or one value for all."""
        envs = self._envs_called(env_index)
        per_env = _per_env("values", values, len(envs), (list, tuple))
        for env, value in zip(envs, per_env):
            self._request(env, ("set", name, value), timeout)

    def set_reset_args(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: Mapping[str, Any] | Sequence[Mapping[str, Any] | None] | None = None,
        env_index: int | Sequence[int] | None = None,
        timeout: float | None = None,
    ) -> None:
        """The seed and options of the next reset of each Python env of
        ``env_index``: ``env.reset(seed=..., options=...)`` once, then plain
        resets again. ``seed``: an int or ``None`` for every env, or a list
        of one per env; ``options``: a dict or ``None``, or a list."""
        envs = self._envs_called(env_index)
        seeds = _per_env("seed", seed, len(envs), (list, tuple, np.ndarray))
        all_options = _per_env("options", options, len(envs), (list, tuple))
        for env, one_seed, one_options in zip(envs, seeds, all_options):
            if one_seed is not None and not isinstance(one_seed, (int, np.integer)):
                raise InvalidType(
                    f"seed of env {env} must be an int, got {type(one_seed).__name__}"
                )
            if one_options is not None and not isinstance(one_options, Mapping):
                raise InvalidType(
                    f"options of env {env} must be a dict, got {type(one_options).__name__}"
                )
            request = (
                "reset_args",
                None if one_seed is None else int(one_seed),
                None if one_options is None else dict(one_options),
            )
            self._request(env, request, timeout)

    # -- the rest ----------------------------------------------------------

    def stats(self, *, reset: bool = False) -> dict[str, float] | None:
        """The exchange's statistics with TorchRL's names (batches, items,
        average batch size, fill ratio, partial batch fraction, latencies,
        consumer busy fraction); ``reset`` clears them after reading.
        ``None`` when the pool keeps none."""
        stats = self._native.stats(reset)
        return None if stats is None else dict(stats)

    def in_flight(self) -> list[int]:
        """The envs sent to whose result has not been received."""
        return list(self._native.in_flight())

    def shutdown(self) -> None:
        """Stops the pool: results not received are dropped, workers are
        stopped, killed after a deadline, and reaped. Later calls raise
        :class:`~rlpool.ShutDown`. Idempotent; also done by ``close``, on
        leaving a ``with`` block, and when the pool is collected."""
        try:
            self._native.shutdown()
        finally:
            # With threads, the envs are this process's: closed now, as
            # worker processes close theirs when they stop.
            forget_local(self._token, close=True)
            self._finalizer()

    def close(self) -> None:
        """The same as :meth:`shutdown` (TorchRL's name)."""
        self.shutdown()

    @property
    def is_closed(self) -> bool:
        """Whether the pool was shut down."""
        return bool(self._native.is_shut_down)

    def __enter__(self) -> AsyncEnvPool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    def __len__(self) -> int:
        return self.num_envs

    def __repr__(self) -> str:
        return (
            f"AsyncEnvPool(num_envs={self.num_envs}, backend={self.backend!r}, "
            f"stack={self.stack!r}, exchange={self.resolved_exchange!r})"
        )


def _indices(env_index: int | Sequence[int]) -> list[int]:
    if isinstance(env_index, (int, np.integer)) and not isinstance(env_index, bool):
        return [int(env_index)]
    try:
        return [int(i) for i in env_index]  # type: ignore[union-attr]
    except TypeError:
        raise InvalidType(
            f"env_index must be an int or a list of ints, got {type(env_index).__name__}"
        ) from None


def _per_env(what: str, value: Any, n: int, sequences: tuple[type, ...]) -> list[Any]:
    if isinstance(value, sequences):
        values: list[Any] = list(cast("Sequence[Any]", value))
        if len(values) != n:
            raise InvalidArgument(f"{what} has {len(values)} values for {n} envs")
        return values
    return [value] * n


def _worker_command() -> list[str]:
    """This interpreter, started as a worker with this process's module
    search path and working directory (as multiprocessing's spawn does)."""
    setup = json.dumps({"sys_path": sys.path, "cwd": os.getcwd()})
    return [sys.executable, "-m", "rlpool._worker", setup]


def _release(token: str, hub: Hub | None) -> None:
    forget_local(token)
    if hub is not None:
        hub.close()


def _leaf(spec: Composite | Stacked) -> Any:
    keys = spec.keys(include_nested=True, leaves_only=True)
    return spec[keys[0]] if len(keys) == 1 else spec
