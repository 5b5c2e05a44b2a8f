"""rlpool pools on Ray actors, presented as one pool: :class:`AsyncEnvPool`.

Each of ``num_actors`` Ray actors holds one :class:`rlpool.AsyncEnvPool`
(any backend, any exchange) with a contiguous block of the envs; this
class offers that pool's calls with global env indices. A send is routed
to the actors of its envs; a receive gathers whatever results the actors
have ready (``ray.wait``) under the rules of :class:`rlpool.AsyncEnvPool`:
``min_get`` a hard bound, one ``timeout`` for the whole call, nothing lost
on a timeout. rlpool never manages nodes: where the actors run is Ray's
business (``actor_options``: resources, scheduling strategies).

Ray is imported when a pool is made, never by ``import rlpool``.

>>> import pytest
>>> ray = pytest.importorskip("ray")
>>> import rlpool.ray
>>> _ = ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1")
>>> # Two actors of two envs, each on one worker thread (num_cpus=2 apiece).
>>> with rlpool.ray.AsyncEnvPool(["CountingEnv"] * 4, num_actors=2, num_threads=1) as pool:
...     root = pool.reset()
...     pool.async_step_send(pool.rand_action())
...     first = pool.async_step_recv(min_get=2, max_get=2, timeout=30.0)  # from either actor
...     rest = pool.async_step_recv(min_get=2, timeout=30.0)
...     sorted(first["env_index"].tolist() + rest["env_index"].tolist())
[0, 1, 2, 3]
>>> ray.shutdown()
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Union, cast

import numpy as np

from rlpool import errors as _errors
from rlpool._pool import AsyncEnvPool as _LocalPool
from rlpool._pool import Batch, EnvMaker, TensorDictLike
from rlpool._tensordict import LazyStackedTensorDict, TensorDict
from rlpool.errors import (
    ActorDied,
    Busy,
    InvalidArgument,
    InvalidType,
    PoolError,
    ShutDown,
    StartError,
    Timeout,
)

__all__ = ["AsyncEnvPool"]

_OPS = ("reset", "step", "step_and_maybe_reset")

PUMP_SLICE = 0.25
"""Seconds an actor waits for a first result before it answers a pump
with nothing: a live actor answers every call within about this long,
which is what the pool's liveness timeout counts on."""

_TICK = 0.05
"""The longest the driver sleeps in ``ray.wait`` before it looks at the
actors' liveness and its deadline again."""

Wire = Any
"""A batch as it crosses Ray: plain dicts of numpy arrays (see
:func:`_to_wire`)."""


# -- the actor -----------------------------------------------------------------


def _wire_error(err: BaseException) -> tuple[str, str, dict[str, Any]]:
    """An exception as plain data: rlpool's exceptions take keyword-only
    arguments, which pickling does not restore."""
    attrs = {
        k: v for k, v in vars(err).items() if isinstance(v, (int, str, list, float, type(None)))
    }
    return (type(err).__name__, str(err), attrs)


def _to_wire(batch: Any) -> Wire:
    if isinstance(batch, tuple):
        return ("t", [_to_wire(b) for b in batch])
    if isinstance(batch, LazyStackedTensorDict):
        return ("l", [(t.to_dict(), t.batch_size) for t in batch.tensordicts])
    return ("d", batch.to_dict(), batch.batch_size)


class _PoolActor:
    """What runs in one Ray actor: an :class:`rlpool.AsyncEnvPool` of the
    actor's envs (local indices), driven by :class:`AsyncEnvPool`.

    Its methods never raise an rlpool error: they return it as data
    (``("error", ...)``), so that the driver rebuilds it with global env
    indices."""

    def __init__(self, env_makers: list[Any], pool_kwargs: dict[str, Any]) -> None:
        self._pool: _LocalPool | None = None
        self._error: tuple[str, str, dict[str, Any]] | None = None
        try:
            self._pool = _LocalPool(env_makers, **pool_kwargs)
        except Exception as err:
            self._error = _wire_error(err)

    def info(self) -> dict[str, Any]:
        import ray

        ctx = ray.get_runtime_context()
        pool = self._pool
        return {
            "error": self._error,
            "pid": os.getpid(),
            "node_id": ctx.get_node_id(),
            "worker_pids": [] if pool is None else pool.worker_pids,
            "num_envs": 0 if pool is None else pool.num_envs,
            "backend": None if pool is None else pool.backend,
            "exchange": None if pool is None else pool.resolved_exchange,
        }

    def _live(self) -> _LocalPool:
        if self._pool is None:
            raise ShutDown("the actor's pool did not start or was shut down")
        return self._pool

    def send(self, op: int, td: Any, env_index: Any) -> Any:
        try:
            pool = self._live()
            send: Any = (
                pool.async_reset_send,
                pool.async_step_send,
                pool.async_step_and_maybe_reset_send,
            )[op]
            send(None if td is None else TensorDict(td[0], batch_size=td[1]), env_index)
            return None
        except Exception as err:
            return ("error", _wire_error(err))

    def pump(self, op: int, wait: float) -> tuple[list[Wire], Any]:
        """The results of ``op`` ready within ``wait`` seconds: none, or the
        first one and every other one ready then; and an error (an env
        failed, a worker died) that came with them or instead of them."""
        out: list[Wire] = []
        try:
            pool = self._live()
            recv = (
                pool.async_reset_recv,
                pool.async_step_recv,
                pool.async_step_and_maybe_reset_recv,
            )[op]
            try:
                out.append(_to_wire(recv(min_get=1, max_get=1, timeout=wait)))
            except Timeout:
                return out, None
            # Then every other one ready (none: a Timeout; nothing more in
            # flight: an InvalidArgument).
            with contextlib.suppress(Timeout, InvalidArgument):
                out.append(_to_wire(recv(min_get=1, timeout=0.0)))
            return out, None
        except Exception as err:
            return out, _wire_error(err)

    def recv_env(self, op: int, env: int, timeout: float) -> Any:
        try:
            pool = self._live()
            recv = (
                pool.async_reset_recv,
                pool.async_step_recv,
                pool.async_step_and_maybe_reset_recv,
            )[op]
            return ("ok", _to_wire(recv(env_index=env, timeout=timeout)))
        except Exception as err:
            return ("error", _wire_error(err))

    def rand_action(self) -> Any:
        try:
            return ("ok", _to_wire(self._live().rand_action()))
        except Exception as err:
            return ("error", _wire_error(err))

    def stats(self, reset: bool) -> dict[str, float] | None:
        return None if self._pool is None else self._pool.stats(reset=reset)

    def ping(self) -> int:
        return os.getpid()

    def shutdown(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown()


# -- batches on the driver -----------------------------------------------------


def _own(array: Any) -> np.ndarray[Any, Any]:
    """The array, writable and the caller's (Ray hands out read-only views of
    its object store)."""
    out: np.ndarray[Any, Any] = np.asarray(array)
    return out if out.flags.writeable else out.copy()


def _own_tree(node: dict[str, Any]) -> dict[str, Any]:
    return {k: _own_tree(v) if isinstance(v, dict) else _own(v) for k, v in node.items()}


def _shift(node: dict[str, Any], offset: int) -> None:
    if "env_index" in node and offset:
        node["env_index"] = node["env_index"] + offset


def _from_wire(wire: Wire, offset: int) -> Any:
    kind = wire[0]
    if kind == "t":
        return tuple(_from_wire(w, offset) for w in wire[1])
    if kind == "l":
        parts = []
        for data, batch_size in wire[1]:
            data = _own_tree(data)
            _shift(data, offset)
            parts.append(TensorDict._wrap(data, tuple(batch_size)))
        return LazyStackedTensorDict(parts)
    data = _own_tree(wire[1])
    _shift(data, offset)
    return TensorDict._wrap(data, tuple(wire[2]))


def _env_indices(batch: Batch) -> list[int]:
    if isinstance(batch, LazyStackedTensorDict):
        return [int(np.asarray(t["env_index"]).reshape(-1)[0]) for t in batch.tensordicts]
    return [int(e) for e in np.asarray(batch["env_index"]).reshape(len(batch), -1)[:, 0]]


def _rows(batch: Batch, index: Sequence[int]) -> Batch:
    if isinstance(batch, LazyStackedTensorDict):
        return LazyStackedTensorDict([batch.tensordicts[i] for i in index])
    return batch[np.asarray(index, dtype=np.intp)]  # type: ignore[no-any-return]


def _dense_cat(nodes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The nodes' arrays concatenated along the first dim, or ``None`` if
    their keys or trailing shapes differ."""
    keys = list(nodes[0])
    out: dict[str, Any] = {}
    for key in keys:
        values = [n.get(key) for n in nodes]
        if any(v is None for v in values):
            return None
        if isinstance(values[0], dict):
            if not all(isinstance(v, dict) for v in values):
                return None
            inner = _dense_cat([v for v in values if isinstance(v, dict)])
            if inner is None:
                return None
            out[key] = inner
            continue
        arrays = [np.asarray(v) for v in values]
        if any(a.shape[1:] != arrays[0].shape[1:] or a.dtype != arrays[0].dtype for a in arrays):
            return None
        out[key] = np.concatenate(arrays, axis=0)
    if any(set(n) != set(keys) for n in nodes):
        return None
    return out


def _cat(batches: list[Batch]) -> Batch:
    """One batch of the rows of ``batches``, dense when every part is dense
    and they agree, else lazy."""
    if len(batches) == 1:
        return batches[0]
    if all(isinstance(b, TensorDict) for b in batches):
        dense = [b for b in batches if isinstance(b, TensorDict)]
        rest = {b.batch_size[1:] for b in dense}
        if len(rest) == 1:
            data = _dense_cat([b._data for b in dense])
            if data is not None:
                n = sum(b.batch_size[0] for b in dense)
                return TensorDict._wrap(data, (n, *rest.pop()))
    parts: list[TensorDict] = []
    for b in batches:
        parts.extend(b.tensordicts if isinstance(b, LazyStackedTensorDict) else b.unbind(0))
    return LazyStackedTensorDict(parts)


def _sorted(parts: tuple[Batch, ...]) -> tuple[Batch, ...]:
    envs = _env_indices(parts[0])
    if all(a < b for a, b in zip(envs, envs[1:])):
        return parts
    order = [int(i) for i in np.argsort(np.asarray(envs), kind="stable")]
    return tuple(_rows(p, order) for p in parts)


class _Chunk:
    """Results an actor returned that no receive has handed out yet: one
    or two batches (``step_and_maybe_reset``) and their global envs."""

    __slots__ = ("envs", "parts")

    def __init__(self, parts: tuple[Batch, ...]) -> None:
        self.parts = parts
        self.envs = _env_indices(parts[0])

    def split(self, n: int) -> tuple[_Chunk, _Chunk]:
        head = list(range(n))
        tail = list(range(n, len(self.envs)))
        return (
            _Chunk(tuple(_rows(p, head) for p in self.parts)),
            _Chunk(tuple(_rows(p, tail) for p in self.parts)),
        )


class _Actor:
    """The driver's view of one actor: its handle, its envs, its calls in
    flight and whether it is alive."""

    def __init__(self, index: int, handle: Any, first: int, count: int) -> None:
        self.index = index
        self.handle = handle
        self.first = first
        self.count = count
        self.info: dict[str, Any] = {}
        # op -> (the pump's ObjectRef, when it was sent, how long it may take)
        self.pumps: dict[int, tuple[Any, float]] = {}
        self.dead: str | None = None
        self.reported = False
        self.calls = {"sends": 0, "pumps": 0, "results": 0}

    @property
    def envs(self) -> list[int]:
        return list(range(self.first, self.first + self.count))

    def name(self) -> str:
        last = self.first + self.count - 1
        node = self.info.get("node_id")
        where = f" on node {node[:12]}" if node else ""
        return f"actor {self.index} (envs {self.first}..{last}{where})"


# -- the pool ------------------------------------------------------------------


ActorOptions = Union[Mapping[str, Any], Sequence[Mapping[str, Any]], None]


class AsyncEnvPool:
    """One pool over ``num_actors`` Ray actors, each holding an
    :class:`rlpool.AsyncEnvPool` of a contiguous block of the envs, with
    that class's calls and global env indices.

    Results are the types :class:`rlpool.AsyncEnvPool` returns (a
    :class:`~rlpool.TensorDict`, a :class:`~rlpool.LazyStackedTensorDict`,
    or a pair of them for ``step_and_maybe_reset``), sorted by global env
    index, with a global ``"env_index"``; their arrays are the caller's own
    and writable.

    A receive asks each actor with envs in flight for whatever it has ready
    (one call in flight per actor at a time, a *pump*), keeps what the
    actors returned, and hands out at least ``min_get`` and at most
    ``max_get`` of them. Results that the call does not hand out (beyond
    ``max_get``, or that arrived after a timeout) stay for the next
    receive: nothing is lost.

    An actor that dies (killed, its node lost), or that answers no call for
    ``liveness_timeout`` seconds beyond what the call may take, is killed
    (``ray.kill``; its pool's workers die with it) and reported once, by the
    next receive or send that involves it, as :class:`~rlpool.ActorDied`
    naming the actor, its envs and those whose results were lost. Results
    it returned before it died are still handed out; the other actors' envs
    go on.

    Args:
        env_makers: one maker per env, as :class:`rlpool.AsyncEnvPool`
            takes them (callables travel to the actors with cloudpickle).
        num_actors: the number of actors; the envs are split into
            contiguous blocks, the first actors taking one more when the
            split is uneven.
        actor_options: Ray's actor options (``num_cpus``, ``resources``,
            ``scheduling_strategy``, ...): one dict for every actor, or a
            list of one per actor. ``num_cpus`` defaults to the actor's
            pool's workers plus one (processes: one per
            ``envs_per_worker`` envs; threads: ``num_threads``, else one per
            env).
        liveness_timeout: seconds past a call's own duration after which a
            silent actor is declared dead.
        call_timeout: the deadline, in seconds, of the calls that have no
            ``timeout`` argument (sends, synchronous calls without one,
            the start).
        **pool_kwargs: :class:`rlpool.AsyncEnvPool`'s keyword arguments
            (``backend``, ``exchange``, ``stack``, ``envs_per_worker``,
            ...); ``create_env_kwargs`` as a list is split among the actors
            with the envs. Worker processes are left to the scheduler
            (``worker_affinity=False``) unless you give CPU sets: actors
            that share a node would otherwise pin theirs to the same CPUs.

    Raises:
        StartError: an actor's pool could not start (the message names the
            actor and its envs), or the actors did not start within
            ``call_timeout``.
        InvalidArgument: an argument out of range.
    """

    def __init__(
        self,
        env_makers: Sequence[EnvMaker] | EnvMaker,
        *,
        num_actors: int,
        actor_options: ActorOptions = None,
        liveness_timeout: float = 1.0,
        call_timeout: float = 120.0,
        **pool_kwargs: Any,
    ) -> None:
        import ray

        self._ray = ray
        given: list[EnvMaker] = (
            [env_makers]
            if isinstance(env_makers, str) or callable(env_makers)
            else list(env_makers)  # type: ignore[arg-type]
        )
        if not isinstance(num_actors, int) or not 1 <= num_actors <= len(given):
            raise InvalidArgument(
                f"num_actors must be between 1 and the number of envs ({len(given)}), "
                f"got {num_actors!r}"
            )
        if not liveness_timeout > 0 or not call_timeout > 0:
            raise InvalidArgument("liveness_timeout and call_timeout must be positive")
        if actor_options is None or isinstance(actor_options, Mapping):
            per_actor: list[Mapping[str, Any]] = [actor_options or {}] * num_actors
        else:
            per_actor = list(actor_options)
            if len(per_actor) != num_actors:
                raise InvalidArgument(
                    f"actor_options has {len(per_actor)} dicts for {num_actors} actors"
                )
        kwargs_list = pool_kwargs.get("create_env_kwargs")
        split_kwargs = kwargs_list is not None and not isinstance(kwargs_list, Mapping)
        if split_kwargs and len(list(kwargs_list)) != len(given):  # type: ignore[arg-type]
            raise InvalidArgument(
                f"create_env_kwargs has {len(list(kwargs_list))} dicts for {len(given)} envs"  # type: ignore[arg-type]
            )
        self._liveness = float(liveness_timeout)
        self._call_timeout = float(call_timeout)
        self._lock = threading.RLock()
        self._closed = False
        self.num_envs = len(given)
        # What the driver knows of each env: in flight for which op (and
        # whether sent alone, for a per-env receive), and the results the
        # actors returned that are still to be handed out.
        self._in_flight: dict[int, int] = {}
        self._alone: set[int] = set()
        self._chunks: list[list[_Chunk]] = [[] for _ in _OPS]
        self._errors: list[list[PoolError]] = [[] for _ in _OPS]
        self._stats = {"batches": 0, "items": 0}

        remote = ray.remote(_PoolActor)
        base, extra = divmod(len(given), num_actors)
        self._actors: list[_Actor] = []
        first = 0
        for index in range(num_actors):
            count = base + (1 if index < extra else 0)
            kwargs = dict(pool_kwargs)
            if split_kwargs:
                kwargs["create_env_kwargs"] = list(kwargs_list)[first : first + count]  # type: ignore[arg-type]
            if kwargs.get("backend") == "multiprocessing":
                # Ray does not pin actors: pools of actors that share a node
                # would spread their workers over the same CPUs.
                kwargs.setdefault("worker_affinity", False)
            options = dict(per_actor[index])
            options.setdefault("num_cpus", _workers(count, kwargs) + 1)
            # A receive (a pump) may wait while a send goes through.
            options.setdefault("max_concurrency", 8)
            options.setdefault("max_restarts", 0)
            handle = remote.options(**options).remote(given[first : first + count], kwargs)
            self._actors.append(_Actor(index, handle, first, count))
            first += count
        self._owner = [a for a in self._actors for _ in range(a.count)]
        try:
            calls = {a.index: (a.handle.info.remote(), self._call_timeout) for a in self._actors}
            done, failed = self._wait_calls(calls, time.monotonic() + self._call_timeout)
            for actor in self._actors:
                if actor.index in failed:
                    raise StartError(f"{actor.name()} did not start: {failed[actor.index]}")
                if actor.index not in done:
                    raise StartError(
                        f"{actor.name()} did not start within {self._call_timeout} s "
                        "(are there nodes with the resources it asks for?)"
                    )
                actor.info = done[actor.index]
                if actor.info["error"] is not None:
                    name, message, _ = actor.info["error"]
                    raise StartError(f"{actor.name()}: its pool did not start: {name}: {message}")
        except BaseException:
            self._kill_all()
            raise

    # -- description -----------------------------------------------------------

    @property
    def num_actors(self) -> int:
        """The number of actors."""
        return len(self._actors)

    def actor_envs(self, actor: int) -> list[int]:
        """The global envs of actor ``actor``."""
        return self._actors[actor].envs

    def actor_of(self, env: int) -> int:
        """The actor that holds env ``env``."""
        self._check_envs([env])
        return self._owner[env].index

    @property
    def actor_handles(self) -> list[Any]:
        """The Ray actor handles, in order."""
        return [a.handle for a in self._actors]

    @property
    def actor_info(self) -> list[dict[str, Any]]:
        """Per actor: its process id (``pid``), Ray node (``node_id``), its
        pool's worker processes (``worker_pids``), backend and exchange."""
        return [dict(a.info) for a in self._actors]

    def in_flight(self) -> list[int]:
        """The envs sent to whose result has not been handed out (the envs
        of a dead actor leave once it is reported)."""
        with self._lock:
            return sorted(self._in_flight)

    @property
    def is_closed(self) -> bool:
        """Whether the pool was shut down."""
        return self._closed

    # -- sends -----------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ShutDown("the pool is shut down")

    def _check_envs(self, envs: Sequence[int]) -> None:
        for env in envs:
            if not 0 <= env < self.num_envs:
                raise InvalidArgument(f"env_index {env} is out of range for {self.num_envs} envs")
        if len(set(envs)) != len(envs):
            raise InvalidArgument(f"env_index lists an env twice: {list(envs)}")

    def _send(
        self, op: int, td: TensorDictLike | None, env_index: int | Sequence[int] | None
    ) -> None:
        with self._lock:
            self._check_open()
            alone = False
            if td is not None and not isinstance(td, TensorDict):
                td = TensorDict(td, batch_size=_batch_of(td, env_index))
            if isinstance(env_index, (int, np.integer)) and not isinstance(env_index, bool):
                envs, alone = [int(env_index)], True
            elif isinstance(env_index, (str, bytes)):
                raise InvalidType(f"env_index must be an int or a list of ints, got {env_index!r}")
            elif env_index is not None:
                try:
                    envs = [int(e) for e in cast("Sequence[int]", env_index)]
                except (TypeError, ValueError):
                    raise InvalidType(
                        f"env_index must be an int or a list of ints, got "
                        f"{type(env_index).__name__}"
                    ) from None
            elif td is not None and "env_index" in td:
                envs = [int(e) for e in np.asarray(td["env_index"]).reshape(-1)]
            else:
                envs = list(range(self.num_envs))
            self._check_envs(envs)
            if td is not None and not alone and td.batch_size[:1] != (len(envs),):
                raise InvalidArgument(
                    f"the tensordict has batch size {td.batch_size} for {len(envs)} envs"
                )
            self._raise_dead([self._owner[e] for e in envs])
            busy = sorted(e for e in envs if e in self._in_flight)
            if busy:
                raise Busy(
                    f"envs {busy} are busy: their previous results have not been received",
                    envs=busy,
                )
            # Per actor: its rows of td and its local env indices.
            plan: dict[int, tuple[list[int], list[int]]] = {}
            for row, env in enumerate(envs):
                actor = self._owner[env]
                rows, local = plan.setdefault(actor.index, ([], []))
                rows.append(row)
                local.append(env - actor.first)
            calls = {}
            for index, (rows, local) in plan.items():
                actor = self._actors[index]
                part: Any = None
                if td is not None:
                    part = td if alone else td[np.asarray(rows, dtype=np.intp)]
                    part = part.exclude("env_index", "next").to_dict()
                    part = (part, td.batch_size if alone else (len(rows), *td.batch_size[1:]))
                target: Any = local[0] if alone else local
                calls[index] = (actor.handle.send.remote(op, part, target), 0.0)
                actor.calls["sends"] += 1
            done, failed = self._wait_calls(calls, time.monotonic() + self._call_timeout)
            first_error: PoolError | None = None
            for index in plan:
                actor = self._actors[index]
                if index in failed:
                    self._declare_dead(actor, failed[index])
                elif index not in done:
                    self._declare_dead(actor, f"no answer to a send within {self._call_timeout} s")
                elif done[index] is not None:
                    err = self._rebuild(actor, done[index][1])
                    first_error = first_error or err
                    continue
                else:
                    for env in plan[index][1]:
                        self._in_flight[actor.first + env] = op
                        if alone:
                            self._alone.add(actor.first + env)
                    continue
            dead = [self._actors[i] for i in plan if self._actors[i].dead]
            if dead:
                # The envs that reached live actors stay sent.
                self._raise_dead(dead)
            if first_error is not None:
                raise first_error

    def async_reset_send(
        self, td: TensorDictLike | None = None, env_index: int | Sequence[int] | None = None
    ) -> None:
        """Sends a reset to the envs of ``env_index`` (see
        :meth:`rlpool.AsyncEnvPool.async_reset_send`)."""
        self._send(0, td, env_index)

    def async_step_send(
        self, td: TensorDictLike, env_index: int | Sequence[int] | None = None
    ) -> None:
        """Sends the actions of ``td`` to the envs of ``env_index`` (global
        indices; one int, a list, or ``None``: ``td``'s ``"env_index"`` or
        every env), each env's row to its actor. Returns once every actor
        has taken its part; raises :class:`~rlpool.Busy` naming envs still
        in flight, :class:`~rlpool.ActorDied` if an env's actor is dead."""
        self._send(1, td, env_index)

    def async_step_and_maybe_reset_send(
        self, td: TensorDictLike, env_index: int | Sequence[int] | None = None
    ) -> None:
        """Sends the actions of ``td``, to step and reset where done."""
        self._send(2, td, env_index)

    # -- receives --------------------------------------------------------------

    def _recv(
        self, op: int, min_get: int, max_get: int | None, timeout: float | None
    ) -> tuple[Batch, ...]:
        start = time.monotonic()
        with self._lock:
            self._check_open()
            if not isinstance(min_get, int) or min_get < 1:
                raise InvalidArgument(f"min_get must be at least 1, got {min_get!r}")
            if max_get is not None and max_get < min_get:
                raise InvalidArgument(f"max_get ({max_get}) is below min_get ({min_get})")
            if timeout is not None and not timeout >= 0:
                raise InvalidArgument(f"timeout must be >= 0 seconds, got {timeout}")
            deadline = None if timeout is None else start + timeout
            while True:
                self._collect(op)
                if self._errors[op]:
                    raise self._errors[op].pop(0)
                self._report_dead(op)
                ready = sum(len(c.envs) for c in self._chunks[op])
                expected = sum(
                    1 for e, o in self._in_flight.items() if o == op and e not in self._alone
                )
                if min_get > expected:
                    raise InvalidArgument(
                        f"min_get={min_get} but only {expected} envs are in flight for {_OPS[op]}"
                    )
                cap = expected if max_get is None else min(max_get, expected)
                now = time.monotonic()
                late = deadline is not None and now >= deadline
                if ready >= min_get and (deadline is None or ready >= cap or late):
                    return self._take(op, min(ready, cap))
                if late:
                    # A poll (or a call out of time) still asks the actors,
                    # so that their results are here for the next receive.
                    self._pump(op)
                    raise Timeout(
                        f"{_OPS[op]}: {ready} results ready within {timeout} s, "
                        f"min_get={min_get}; nothing was lost",
                        op=_OPS[op],
                        timeout=float(timeout or 0.0),
                        ready=ready,
                        min_get=min_get,
                    )
                self._pump(op)
                left = _TICK if deadline is None else max(0.0, min(_TICK, deadline - now))
                refs = [ref for a in self._actors for o, (ref, _) in a.pumps.items() if o == op]
                if refs:
                    self._ray.wait(refs, num_returns=1, timeout=left)
                else:
                    time.sleep(left)

    def _pump(self, op: int) -> None:
        """Asks each live actor with envs of ``op`` in flight and not yet
        returned for its ready results, unless it is being asked already."""
        held = {e for c in self._chunks[op] for e in c.envs}
        for actor in self._actors:
            if actor.dead or op in actor.pumps:
                continue
            if any(
                self._in_flight.get(e) == op and e not in held and e not in self._alone
                for e in actor.envs
            ):
                actor.pumps[op] = (actor.handle.pump.remote(op, PUMP_SLICE), time.monotonic())
                actor.calls["pumps"] += 1

    def _collect(self, op: int | None = None) -> None:
        """Takes in the pumps that answered, and declares dead the actors
        that did not answer in time."""
        now = time.monotonic()
        for actor in self._actors:
            for pop, (ref, sent) in list(actor.pumps.items()):
                ready, _ = self._ray.wait([ref], timeout=0)
                if not ready:
                    if now - sent > PUMP_SLICE + self._liveness:
                        self._declare_dead(
                            actor,
                            f"no answer for {now - sent:.1f} s (liveness timeout "
                            f"{self._liveness} s)",
                        )
                    continue
                del actor.pumps[pop]
                try:
                    wires, error = self._ray.get(ref)
                except Exception as err:
                    self._declare_dead(actor, _ray_reason(err))
                    continue
                for wire in wires:
                    batch = _from_wire(wire, actor.first)
                    chunk = _Chunk(batch if isinstance(batch, tuple) else (batch,))
                    actor.calls["results"] += len(chunk.envs)
                    self._chunks[pop].append(chunk)
                if error is not None:
                    failure = self._rebuild(actor, error)
                    # The failed env (or a dead worker's envs) is idle again
                    # in the actor's pool.
                    for env in _envs_named(failure):
                        self._in_flight.pop(env, None)
                        self._alone.discard(env)
                    self._errors[pop].append(failure)

    def _take(self, op: int, n: int) -> tuple[Batch, ...]:
        taken: list[_Chunk] = []
        chunks = self._chunks[op]
        while n > 0:
            chunk = chunks[0]
            if len(chunk.envs) <= n:
                chunks.pop(0)
            else:
                chunk, chunks[0] = chunk.split(n)
            taken.append(chunk)
            n -= len(chunk.envs)
        for chunk in taken:
            for env in chunk.envs:
                self._in_flight.pop(env, None)
        parts = tuple(_cat([c.parts[i] for c in taken]) for i in range(len(taken[0].parts)))
        self._stats["batches"] += 1
        self._stats["items"] += len(_env_indices(parts[0]))
        return _sorted(parts)

    def _recv_env(self, op: int, env: int, timeout: float | None) -> tuple[Batch, ...]:
        with self._lock:
            self._check_open()
            self._check_envs([env])
            self._collect(op)
            for i, chunk in enumerate(self._chunks[op]):
                if env in chunk.envs:
                    at = chunk.envs.index(env)
                    rest = [j for j in range(len(chunk.envs)) if j != at]
                    self._chunks[op][i] = _Chunk(tuple(_rows(p, rest) for p in chunk.parts))
                    if not self._chunks[op][i].envs:
                        self._chunks[op].pop(i)
                    self._in_flight.pop(env, None)
                    return tuple(
                        p.tensordicts[at] if isinstance(p, LazyStackedTensorDict) else p[at]
                        for p in chunk.parts
                    )
            actor = self._owner[env]
            self._raise_dead([actor])
            if self._in_flight.get(env) != op:
                raise InvalidArgument(f"env {env} is not in flight for {_OPS[op]}")
            wait = self._call_timeout if timeout is None else float(timeout)
            calls = {actor.index: (actor.handle.recv_env.remote(op, env - actor.first, wait), wait)}
            done, failed = self._wait_calls(calls, time.monotonic() + wait + self._call_timeout)
            if actor.index in failed or actor.index not in done:
                self._declare_dead(actor, failed.get(actor.index, "no answer to a receive"))
                self._raise_dead([actor])
            kind, payload = done[actor.index]
            if kind == "error":
                err = self._rebuild(actor, payload)
                if not isinstance(err, Timeout):
                    self._in_flight.pop(env, None)
                    self._alone.discard(env)
                raise err
            self._in_flight.pop(env, None)
            self._alone.discard(env)
            batch = _from_wire(payload, actor.first)
            return batch if isinstance(batch, tuple) else (batch,)

    def async_reset_recv(
        self,
        min_get: int = 1,
        env_index: int | None = None,
        *,
        max_get: int | None = None,
        timeout: float | None = None,
    ) -> Batch:
        """Receives reset results (see :meth:`async_step_recv`)."""
        return self._receive(0, min_get, env_index, max_get, timeout)[0]

    def async_step_recv(
        self,
        min_get: int = 1,
        env_index: int | None = None,
        *,
        max_get: int | None = None,
        timeout: float | None = None,
    ) -> Batch:
        """Receives step results from every actor: at least ``min_get`` (a
        hard bound), at most ``max_get`` (default: all in flight; without a
        ``timeout``, all ready once ``min_get`` are), sorted by global env
        with ``"env_index"``; or env ``env_index``'s result alone.
        ``timeout`` (seconds) bounds the whole call; ``0`` polls. On a
        timeout :class:`~rlpool.Timeout` is raised and nothing is lost.
        Raises :class:`~rlpool.ActorDied` once for a dead actor (its
        results in flight are lost), :class:`~rlpool.EnvFailed` for a
        failed env (with global indices)."""
        return self._receive(1, min_get, env_index, max_get, timeout)[0]

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
        out = self._receive(2, min_get, env_index, max_get, timeout)
        return out[0], out[1]

    def _receive(
        self,
        op: int,
        min_get: int,
        env_index: int | None,
        max_get: int | None,
        timeout: float | None,
    ) -> tuple[Batch, ...]:
        """A receive of ``op``'s results: env ``env_index``'s alone, or a
        batch of every actor's."""
        if env_index is not None:
            return self._recv_env(op, env_index, timeout)
        return self._recv(op, min_get, max_get, timeout)

    # -- synchronous calls -----------------------------------------------------

    def _sync(self, op: int, td: TensorDictLike | None, timeout: float | None) -> tuple[Batch, ...]:
        with self._lock:
            self._check_open()
            if self._in_flight:
                envs = sorted(self._in_flight)
                raise Busy(f"envs {envs} are in flight: receive them first", envs=envs)
            self._send(op, td, None)
            wait = self._call_timeout if timeout is None else timeout
            return self._recv(op, self.num_envs, None, wait)

    def reset(self, td: TensorDictLike | None = None, *, timeout: float | None = None) -> Batch:
        """Resets every env (``td`` may carry state entries); raises
        :class:`~rlpool.Busy` if an env is in flight. ``timeout`` (default:
        ``call_timeout``) bounds the call."""
        return self._sync(0, td, timeout)[0]

    def step(self, td: TensorDictLike, *, timeout: float | None = None) -> Batch:
        """Steps every env with its row of ``td``: ``td``'s entries with the
        results under ``"next"`` and ``"env_index"``."""
        return self._sync(1, td, timeout)[0]

    def step_and_maybe_reset(
        self, td: TensorDictLike, *, timeout: float | None = None
    ) -> tuple[Batch, Batch]:
        """Steps every env and resets those that are done: ``(result,
        next_root)``."""
        out = self._sync(2, td, timeout)
        return out[0], out[1]

    def rand_action(self) -> Batch:
        """A random action for every env, drawn by each actor from its
        pool's action spec."""
        with self._lock:
            self._check_open()
            calls = {a.index: (a.handle.rand_action.remote(), 0.0) for a in self._actors}
            done, failed = self._wait_calls(calls, time.monotonic() + self._call_timeout)
            parts = []
            for actor in self._actors:
                if actor.index not in done:
                    self._declare_dead(actor, failed.get(actor.index, "no answer"))
                    self._raise_dead([actor])
                kind, payload = done[actor.index]
                if kind == "error":
                    raise self._rebuild(actor, payload)
                parts.append(_from_wire(payload, actor.first))
            return _cat(parts)

    # -- liveness and errors ---------------------------------------------------

    def _wait_calls(
        self, calls: dict[int, tuple[Any, float]], deadline: float
    ) -> tuple[dict[int, Any], dict[int, str]]:
        """Waits for one call per actor (its ref and how long it may take),
        at most until ``deadline``: the answers, and the actors that died or
        stayed silent past the call's duration plus the liveness timeout."""
        done: dict[int, Any] = {}
        failed: dict[int, str] = {}
        start = time.monotonic()
        pending = dict(calls)
        while pending:
            refs = [ref for ref, _ in pending.values()]
            now = time.monotonic()
            ready, _ = self._ray.wait(
                refs, num_returns=len(refs), timeout=max(0.0, min(_TICK, deadline - now))
            )
            ready_ids = set(ready)
            for index, (ref, allowed) in list(pending.items()):
                if ref in ready_ids:
                    del pending[index]
                    try:
                        done[index] = self._ray.get(ref)
                    except Exception as err:
                        failed[index] = _ray_reason(err)
                elif time.monotonic() - start > allowed + self._liveness:
                    del pending[index]
                    failed[index] = (
                        f"no answer for {time.monotonic() - start:.1f} s (liveness timeout "
                        f"{self._liveness} s)"
                    )
            if pending and time.monotonic() >= deadline:
                break
        return done, failed

    def _declare_dead(self, actor: _Actor, reason: str) -> None:
        if actor.dead is not None:
            return
        actor.dead = reason
        actor.pumps.clear()
        with contextlib.suppress(Exception):
            self._ray.kill(actor.handle, no_restart=True)

    def _dead_error(self, actor: _Actor) -> ActorDied:
        lost = sorted(
            e
            for e in actor.envs
            if e in self._in_flight and not any(e in c.envs for cs in self._chunks for c in cs)
        )
        return ActorDied(
            f"{actor.name()} died: {actor.dead}; its envs {actor.envs} cannot be used again"
            + (f"; the results of envs {lost} in flight are lost" if lost else ""),
            actor=actor.index,
            envs=actor.envs,
            lost=lost,
            reason=actor.dead or "",
        )

    def _report_dead(self, op: int) -> None:
        """Raises :class:`ActorDied` for a dead actor not reported yet whose
        envs were in flight for ``op`` (once; its results already returned
        stay)."""
        for actor in self._actors:
            if actor.dead is None or actor.reported:
                continue
            held = {e for c in self._chunks[op] for e in c.envs}
            if any(self._in_flight.get(e) == op and e not in held for e in actor.envs):
                err = self._dead_error(actor)
                self._forget(actor)
                raise err

    def _forget(self, actor: _Actor) -> None:
        actor.reported = True
        held = {e for cs in self._chunks for c in cs for e in c.envs}
        for env in actor.envs:
            if env not in held:
                self._in_flight.pop(env, None)
                self._alone.discard(env)

    def _raise_dead(self, actors: Sequence[_Actor]) -> None:
        for actor in actors:
            if actor.dead is not None:
                err = self._dead_error(actor)
                if not actor.reported:
                    self._forget(actor)
                raise err

    def _rebuild(self, actor: _Actor, wire: tuple[str, str, dict[str, Any]]) -> PoolError:
        """An actor's rlpool error with global env indices, its message
        naming the actor."""
        name, message, attrs = wire
        cls = getattr(_errors, name, None)
        if not (isinstance(cls, type) and issubclass(cls, PoolError)):
            cls = {"ValueError": InvalidArgument, "TypeError": InvalidType}.get(name, PoolError)
            message = f"{name}: {message}"
        attrs = dict(attrs)
        if isinstance(attrs.get("env"), int):
            local = attrs["env"]
            attrs["env"] = local + actor.first
            message = f"env {local + actor.first} (env {local} of {actor.name()}): {message}"
        else:
            message = f"{actor.name()}: {message}"
        if isinstance(attrs.get("envs"), list):
            attrs["envs"] = [e + actor.first for e in attrs["envs"]]
        err = cls.__new__(cls)
        Exception.__init__(err, message)
        err.__dict__.update(attrs)
        err.__dict__["actor"] = actor.index
        return err

    # -- the rest --------------------------------------------------------------

    def stats(self, *, reset: bool = False) -> dict[str, Any]:
        """Statistics: per actor (``"actors"``: its pool's own statistics,
        ``None`` when it keeps none, and the driver's counts of its calls:
        ``sends``, ``pumps``, ``results``) and in total (``"total"``:
        the driver's batches and items handed out, the calls to the actors,
        and the actors' pools' batches and items summed)."""
        with self._lock:
            self._check_open()
            live = [a for a in self._actors if a.dead is None]
            calls = {a.index: (a.handle.stats.remote(reset), 0.0) for a in live}
            done, _ = self._wait_calls(calls, time.monotonic() + self._call_timeout)
            per_actor = []
            total: dict[str, Any] = dict(self._stats)
            total["avg_batch_size"] = total["items"] / total["batches"] if total["batches"] else 0.0
            for key in ("sends", "pumps", "results"):
                total[key] = sum(a.calls[key] for a in self._actors)
            total["results_per_pump"] = total["results"] / total["pumps"] if total["pumps"] else 0.0
            pool_batches = pool_items = 0.0
            for actor in self._actors:
                pool = done.get(actor.index)
                if pool:
                    pool_batches += pool.get("batches", 0)
                    pool_items += pool.get("items", 0)
                per_actor.append({"actor": actor.index, "pool": pool, **actor.calls})
            total["actor_batches"] = pool_batches
            total["actor_items"] = pool_items
            if reset:
                self._stats = {"batches": 0, "items": 0}
                for actor in self._actors:
                    actor.calls = {"sends": 0, "pumps": 0, "results": 0}
            return {"actors": per_actor, "total": total}

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stops every actor's pool (its workers stopped, killed after their
        deadline, reaped), then kills the actors; returns within about
        ``timeout`` seconds whatever the actors do. Idempotent; later calls
        raise :class:`~rlpool.ShutDown`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            deadline = time.monotonic() + timeout
            refs = []
            for actor in self._actors:
                if actor.dead is None:
                    with contextlib.suppress(Exception):
                        refs.append(actor.handle.shutdown.remote())
            if refs:
                with contextlib.suppress(Exception):
                    self._ray.wait(
                        refs, num_returns=len(refs), timeout=max(0.0, deadline - time.monotonic())
                    )
            self._kill_all()
            self._chunks = [[] for _ in _OPS]
            self._in_flight.clear()

    def _kill_all(self) -> None:
        for actor in self._actors:
            actor.pumps.clear()
            with contextlib.suppress(Exception):
                self._ray.kill(actor.handle, no_restart=True)

    def close(self) -> None:
        """The same as :meth:`shutdown`."""
        self.shutdown()

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
        return f"rlpool.ray.AsyncEnvPool(num_envs={self.num_envs}, num_actors={self.num_actors})"


def _workers(count: int, kwargs: Mapping[str, Any]) -> int:
    """The workers of a pool of ``count`` envs made with ``kwargs``."""
    if kwargs.get("backend", "threading") == "multiprocessing":
        return math.ceil(count / int(kwargs.get("envs_per_worker", 1)))
    threads = kwargs.get("num_threads")
    return int(threads) if threads else count


def _batch_of(td: Mapping[str, Any], env_index: Any) -> tuple[int, ...]:
    """The batch size of a plain dict sent to ``env_index``: one env's is
    ``()``, a batch's is the first dim of its entries."""
    if isinstance(env_index, (int, np.integer)) and not isinstance(env_index, bool):
        return ()
    for value in td.values():
        if isinstance(value, Mapping):
            return _batch_of(value, env_index)
        return np.asarray(value).shape[:1]
    return ()


def _envs_named(err: PoolError) -> list[int]:
    env = getattr(err, "env", None)
    if isinstance(env, int):
        return [env]
    envs = getattr(err, "envs", None)
    return list(envs) if isinstance(envs, list) else []


def _ray_reason(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"
