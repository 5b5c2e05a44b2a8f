"""Python environments in rlpool's pools: :class:`PyEnvMaker`, the adapter
that the Rust side steps (one per env, in the worker), the spaces-to-leaves
description, the pickled infos, and the calls on an env's own methods and
attributes (``env_call`` and friends: in this process with threads, over a
Unix socket to the worker with processes).

Not imported by ``import rlpool`` users directly: :class:`PyEnvMaker`,
:func:`decode_infos`, :func:`decode_info` and :func:`decode_leaf` are
re-exported by the package.

>>> import gymnasium as gym
>>> import rlpool
>>> with rlpool.AsyncEnvPool([lambda: gym.make("CartPole-v1")] * 2) as pool:
...     root = pool.reset()
...     root["observation"].shape, root["observation"].dtype.name
((2, 4), 'float32')
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
import pickle
import secrets
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Client, Connection, answer_challenge, deliver_challenge
from typing import Any, Literal

import numpy as np

from rlpool.errors import InvalidArgument, InvalidType, PoolError, Timeout

__all__ = [
    "MAKER_NAME",
    "PyEnvMaker",
    "decode_info",
    "decode_infos",
    "decode_leaf",
]

MAKER_NAME = "rlpool.python"
"""The registry name under which Python envs are built (Rust side: pyenv.rs)."""

_DTYPES = frozenset(
    ["bool", "uint8", "int8", "int16", "int32", "int64", "float32", "float64"],
)
"""The numpy dtypes a pool's tensors hold."""

_INFO_HEADER = 4


class PyEnvMaker:
    """How to build one Python env in a pool: a callable returning a
    ``gymnasium.Env``, its keyword arguments, and the adapter's options.

    Args:
        fn: called as ``fn(**kwargs)`` in the worker (with processes, it
            travels there with cloudpickle: a lambda, a function of your
            module or a ``functools.partial`` all do).
        kwargs: keyword arguments for ``fn``.
        autoreset: ``"disabled"`` (a step is ``env.step``) or
            ``"next_step"``: the step after one that ended an episode
            (terminated or truncated) resets the env instead, returning the
            reset observation and info, reward 0.0 and both flags False
            (Gymnasium's ``AutoresetMode.NEXT_STEP``), inside the worker.
        max_info_bytes: the room for one step's pickled info dict; 0 drops
            infos (no ``"info"`` entry).

    >>> import gymnasium as gym
    >>> maker = PyEnvMaker(gym.make, {"id": "CartPole-v1"}, autoreset="next_step")
    >>> maker.autoreset
    'next_step'
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        kwargs: Mapping[str, Any] | None = None,
        *,
        autoreset: Literal["disabled", "next_step"] = "disabled",
        max_info_bytes: int = 1024,
    ) -> None:
        if not callable(fn):
            raise InvalidType(f"PyEnvMaker: fn must be callable, got {type(fn).__name__}")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise InvalidType(f"PyEnvMaker: kwargs must be a mapping, got {type(kwargs).__name__}")
        if autoreset not in ("disabled", "next_step"):
            raise InvalidArgument(
                f'PyEnvMaker: autoreset must be "disabled" or "next_step", got {autoreset!r}'
            )
        if isinstance(max_info_bytes, bool) or not isinstance(max_info_bytes, int):
            raise InvalidType(
                f"PyEnvMaker: max_info_bytes must be an int, got {type(max_info_bytes).__name__}"
            )
        if not 0 <= max_info_bytes < 2**31:
            raise InvalidArgument(
                f"PyEnvMaker: max_info_bytes must be in [0, 2**31), got {max_info_bytes}"
            )
        self.fn = fn
        self.kwargs = dict(kwargs or {})
        self.autoreset = autoreset
        self.max_info_bytes = max_info_bytes

    def __repr__(self) -> str:
        return (
            f"PyEnvMaker({self.fn!r}, {self.kwargs!r}, autoreset={self.autoreset!r}, "
            f"max_info_bytes={self.max_info_bytes})"
        )


# -- what crosses to the worker --------------------------------------------

_LOCAL: dict[str, PyEnvMaker] = {}
"""Makers of envs built in this process (threads), by token."""
_LOCAL_ADAPTERS: dict[tuple[str, int], Adapter] = {}
"""The adapters of envs built in this process, by (pool token, env index)."""
_LOCAL_LOCK = threading.Lock()


def maker_kwargs(
    maker: PyEnvMaker, index: int, *, token: str, hub: Hub | None, where: str
) -> dict[str, Any]:
    """The registry kwargs of env ``index``: with a hub (processes), the
    maker pickled; without one (threads), a token for this process's table."""
    if hub is None:
        key = f"{token}:{index}"
        with _LOCAL_LOCK:
            _LOCAL[key] = maker
        return {"payload": "local:" + key, "index": index, "rpc": "", "authkey": ""}
    import cloudpickle

    try:
        data = cloudpickle.dumps(maker)
    except Exception as err:
        raise InvalidArgument(
            f"{where} cannot be pickled for a worker process ({type(err).__name__}: {err}); "
            'use backend="threading" or a maker that cloudpickle can pickle'
        ) from err
    return {
        "payload": "pickle:" + base64.b64encode(data).decode("ascii"),
        "index": index,
        "rpc": hub.address,
        "authkey": hub.authkey.hex(),
    }


def forget_local(token: str, *, close: bool = False) -> None:
    """Drops this process's makers and adapters of the pool ``token``,
    closing the envs first if ``close``."""
    with _LOCAL_LOCK:
        for key in [k for k in _LOCAL if k.startswith(token + ":")]:
            del _LOCAL[key]
        adapters = [_LOCAL_ADAPTERS.pop(p) for p in list(_LOCAL_ADAPTERS) if p[0] == token]
    if close:
        for adapter in adapters:
            adapter.close()


def local_adapter(token: str, index: int) -> Adapter | None:
    """The adapter of env ``index`` of the pool ``token`` built in this process."""
    with _LOCAL_LOCK:
        return _LOCAL_ADAPTERS.get((token, index))


def build(payload: str, index: int, rpc: str, authkey: str) -> Adapter:
    """Builds env ``index`` (called by the Rust side, in the worker)."""
    if payload.startswith("local:"):
        key = payload[len("local:") :]
        with _LOCAL_LOCK:
            maker = _LOCAL[key]
    else:
        maker = pickle.loads(base64.b64decode(payload[len("pickle:") :]))
    env = maker.fn(**maker.kwargs)
    adapter: Adapter
    # A TorchRL env (its maker imported torchrl already): its own adapter,
    # whose module is imported only then.
    torchrl_envs = sys.modules.get("torchrl.envs.common")
    if torchrl_envs is not None and isinstance(env, torchrl_envs.EnvBase):
        from rlpool._torchrl_env import TorchRLAdapter

        adapter = TorchRLAdapter(env, index, in_worker=not payload.startswith("local:"))
    else:
        for attribute in ("reset", "step", "action_space", "observation_space"):
            if not hasattr(env, attribute):
                raise TypeError(
                    f"env {index}'s maker returned {type(env).__name__}, which has no "
                    f"`{attribute}`: a maker must return a gymnasium.Env or a TorchRL EnvBase"
                )
        adapter = Adapter(env, index, maker.autoreset, maker.max_info_bytes)
    if payload.startswith("local:"):
        token = payload[len("local:") :].rsplit(":", 1)[0]
        with _LOCAL_LOCK:
            _LOCAL_ADAPTERS[(token, index)] = adapter
    elif rpc:
        # Connected and authenticated here, before the env counts as built
        # (the hub accepts on a thread of its own, so this does not wait
        # for the pool's start): the thread that serves the calls then only
        # reads and writes, and a worker that exits leaves no thread inside
        # the handshake's hashing (a C library that exit tears down).
        conn = Client(rpc, family="AF_UNIX", authkey=bytes.fromhex(authkey))
        conn.send_bytes(pickle.dumps(index))
        threading.Thread(
            target=_serve,
            args=(conn, adapter),
            name=f"rlpool-env-{index}-calls",
            daemon=True,
        ).start()
    return adapter


# -- spaces as leaves ------------------------------------------------------

Leaf = tuple[str, tuple[str, ...], str, str, tuple[int, ...], Any]
"""(group, path, kind, dtype, shape, param): one leaf for the Rust side."""


def _leaves(space: Any, group: str, path: tuple[str, ...], out: list[Leaf]) -> None:
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        for key, sub in space.spaces.items():
            _leaves(sub, group, (*path, str(key)), out)
        return
    if isinstance(space, spaces.Tuple):
        for i, sub in enumerate(space.spaces):
            _leaves(sub, group, (*path, str(i)), out)
        return
    dtype = np.dtype(space.dtype).name if getattr(space, "dtype", None) is not None else ""
    shape = tuple(int(d) for d in space.shape) if space.shape is not None else ()
    if dtype not in _DTYPES or not isinstance(
        space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
    ):
        out.append((group, path, "object", "", (), None))
        return
    if isinstance(space, spaces.Discrete):
        start, n = int(space.start), int(space.n)
        if start == 0:
            out.append((group, path, "categorical", dtype, shape, n))
        else:
            low = np.full(shape, start, dtype=dtype)
            high = np.full(shape, start + n - 1, dtype=dtype)
            out.append((group, path, "bounded", dtype, shape, (low, high)))
        return
    if isinstance(space, spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec)
        starts = np.asarray(space.start)
        if nvec.ndim == 1 and not starts.any():
            out.append((group, path, "multi_categorical", dtype, shape, [int(n) for n in nvec]))
        else:
            low = np.ascontiguousarray(np.broadcast_to(starts, shape), dtype=dtype)
            high = np.ascontiguousarray(low + (nvec - 1), dtype=dtype)
            out.append((group, path, "bounded", dtype, shape, (low, high)))
        return
    if isinstance(space, spaces.MultiBinary) or dtype == "bool":
        out.append((group, path, "binary", dtype, shape, None))
        return
    low = np.broadcast_to(np.asarray(space.low), shape)
    high = np.broadcast_to(np.asarray(space.high), shape)
    if np.issubdtype(np.dtype(dtype), np.floating):
        if np.isneginf(low).all() and np.isposinf(high).all():
            out.append((group, path, "unbounded", dtype, shape, None))
            return
        # Infinite bounds as the dtype's largest values (a spec's bounds are
        # finite, as in rlpool's own CartPole).
        info = np.finfo(np.dtype(dtype))
        low = np.clip(low, info.min, info.max)
        high = np.clip(high, info.min, info.max)
    low = np.ascontiguousarray(low, dtype=dtype)
    high = np.ascontiguousarray(high, dtype=dtype)
    out.append((group, path, "bounded", dtype, shape, (low, high)))


def leaves_of(space: Any, group: str) -> list[Leaf]:
    """The leaves of a space, in the order of its flattening."""
    out: list[Leaf] = []
    _leaves(space, group, (), out)
    return out


def _is_object_leaf(space: Any) -> bool:
    """Whether a space that is neither a Dict nor a Tuple is a pickled
    non-tensor leaf."""
    return leaves_of(space, "")[0][2] == "object"


def _flattener(space: Any) -> Callable[[Any], tuple[Any, ...]]:
    """A function from a value of ``space`` to its tuple of leaves (non-tensor
    leaves packed as strings)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        keyed = [(key, _flattener(sub)) for key, sub in space.spaces.items()]
        return lambda value: tuple(
            itertools.chain.from_iterable(flat(value[key]) for key, flat in keyed)
        )
    if isinstance(space, spaces.Tuple):
        subs = [_flattener(sub) for sub in space.spaces]
        return lambda value: tuple(
            itertools.chain.from_iterable(flat(item) for flat, item in zip(subs, value))
        )
    if _is_object_leaf(space):
        return lambda value: (_pack(value),)
    return lambda value: (value,)


def _unflattener(space: Any) -> tuple[Callable[[Sequence[Any], int], Any], int]:
    """A function from a tuple of leaves (and where to start in it) to a
    value of ``space``, and the number of leaves it takes."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        parts = [(key, *_unflattener(sub)) for key, sub in space.spaces.items()]

        def unflatten_dict(leaves: Sequence[Any], at: int) -> Any:
            value = {}
            for key, unflat, count in parts:
                value[key] = unflat(leaves, at)
                at += count
            return value

        return unflatten_dict, sum(count for _, _, count in parts)
    if isinstance(space, spaces.Tuple):
        subs = [_unflattener(sub) for sub in space.spaces]

        def unflatten_tuple(leaves: Sequence[Any], at: int) -> Any:
            items = []
            for unflat, count in subs:
                items.append(unflat(leaves, at))
                at += count
            return tuple(items)

        return unflatten_tuple, sum(count for _, count in subs)
    if _is_object_leaf(space):
        return lambda leaves, at: decode_leaf(leaves[at]), 1
    return lambda leaves, at: leaves[at], 1


def _pack(value: Any) -> str:
    import cloudpickle

    return base64.b64encode(cloudpickle.dumps(value)).decode("ascii")


def decode_leaf(value: str) -> Any:
    """The Python object of a non-tensor leaf of a Python env's results (a
    space without a fixed shape, such as ``Text``, ``Graph`` or ``Sequence``).

    >>> from rlpool._pyenv import _pack
    >>> decode_leaf(_pack(("a", 1)))
    ('a', 1)
    """
    return pickle.loads(base64.b64decode(value))


def coerce(value: Any, dtype: str, shape: list[int], key: str) -> np.ndarray:
    """An observation leaf as a C-contiguous array of ``dtype`` and ``shape``
    (called by the Rust side when the env's value is not one already)."""
    try:
        array = np.asarray(value)
        if array.dtype != dtype:
            array = array.astype(dtype, casting="same_kind")
    except (TypeError, ValueError) as err:
        raise ValueError(f"{key}: the env returned {value!r}, not a {dtype} array: {err}") from err
    if array.shape != tuple(shape):
        raise ValueError(
            f"{key}: the env returned shape {array.shape}, its space says {tuple(shape)}"
        )
    # (np.ascontiguousarray would make a 0-d array 1-d.)
    return array if array.flags.c_contiguous else array.copy(order="C")


def format_exception(error: BaseException) -> str:
    """An exception's traceback, as Python prints it."""
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


# -- infos -----------------------------------------------------------------


def decode_info(row: np.ndarray) -> dict[str, Any]:
    """One env's info dict from its ``"info"`` entry (``{}`` when empty).

    >>> decode_info(np.zeros(8, dtype=np.uint8))
    {}
    """
    n = int.from_bytes(row[:_INFO_HEADER].tobytes(), "little")
    if n == 0:
        return {}
    info: dict[str, Any] = pickle.loads(row[_INFO_HEADER : _INFO_HEADER + n].tobytes())
    return info


def info_rows(array: np.ndarray) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """The rows of a batch's ``"info"`` entry (``(N, 4 + max_info_bytes)``
    bytes) whose env returned an info, and those infos decoded: one look at
    the length headers, and nothing decoded when every env returned ``{}``.

    >>> rows, infos = info_rows(np.zeros((2, 8), dtype=np.uint8))
    >>> rows.tolist(), infos
    ([], [])
    """
    lengths = np.ascontiguousarray(array[:, :_INFO_HEADER]).view("<u4").reshape(-1)
    rows = np.flatnonzero(lengths)
    return rows, [decode_info(array[r]) for r in rows]


def decode_infos(array: np.ndarray) -> list[dict[str, Any]]:
    """The info dicts of a batch's ``"info"`` entry (``(N, 4 + max_info_bytes)``
    bytes), one per row; rows of envs that returned ``{}`` cost one look.

    >>> decode_infos(np.zeros((2, 8), dtype=np.uint8))
    [{}, {}]
    """
    if array.ndim == 1:
        return [decode_info(array)]
    infos: list[dict[str, Any]] = [{} for _ in range(array.shape[0])]
    for row, info in zip(*info_rows(array)):
        infos[row] = info
    return infos


# -- the adapter (in the worker) -------------------------------------------


class Adapter:
    """One Python env as the Rust side steps it (``pyenv.rs``): spaces
    described once, observations flattened into leaves, actions put back
    together, infos pickled, Gymnasium's next-step autoreset, and the calls
    on the env's own attributes, which wait for a step in progress."""

    def __init__(self, env: Any, index: int, autoreset: str, max_info_bytes: int) -> None:
        self.env = env
        self.index = index
        spec = getattr(env, "spec", None)
        self.name = getattr(spec, "id", None) or type(getattr(env, "unwrapped", env)).__name__
        self.max_info_bytes = max_info_bytes
        self.lock = threading.Lock()
        # A space of one tensor leaf crosses as the value itself, without a
        # tuple around it (and without a call to put it in one).
        self._flat_action = _is_flat(env.action_space)
        self._flat_observation = _is_flat(env.observation_space)
        self._flatten = _flattener(env.observation_space)
        unflatten, _ = _unflattener(env.action_space)
        self._unflatten = unflatten
        self._next_step = autoreset == "next_step"
        self._needs_reset = False
        self._seed: int | None = None
        self._options: dict[str, Any] | None = None
        self._closed = False

    def describe(self) -> tuple[str, list[Leaf], int, bool, bool]:
        """The env's name, its leaves, the room for its infos, and whether
        the action and the observation cross as one value (not a tuple)."""
        leaves = leaves_of(self.env.action_space, "action")
        leaves += leaves_of(self.env.observation_space, "observation")
        return (
            self.name,
            leaves,
            self.max_info_bytes,
            self._flat_action,
            self._flat_observation,
        )

    def _info(self, info: Any) -> bytes | None:
        if not info or self.max_info_bytes == 0:
            return None
        data = pickle.dumps(info, protocol=pickle.HIGHEST_PROTOCOL)
        if len(data) > self.max_info_bytes:
            raise ValueError(
                f"the info dict pickles to {len(data)} bytes, more than max_info_bytes="
                f"{self.max_info_bytes} (keys: {sorted(map(str, info))}); pass a larger "
                "max_info_bytes"
            )
        return data

    def _reset(self) -> tuple[Any, bytes | None]:
        seed, options = self._seed, self._options
        self._seed = self._options = None
        self._needs_reset = False
        if seed is None and options is None:
            obs, info = self.env.reset()
        else:
            obs, info = self.env.reset(seed=seed, options=options)
        return (obs if self._flat_observation else self._flatten(obs)), self._info(info)

    def reset(self) -> tuple[Any, bytes | None]:
        """Resets the env: (observation leaves, pickled info or None)."""
        with self.lock:
            return self._reset()

    def step(self, action: Any) -> tuple[Any, ...]:
        """Steps the env: (observation leaves, reward, terminated, truncated,
        pickled info or None); ``action`` is its leaves, or the action itself
        when flat (and so is the observation returned)."""
        with self.lock:
            if self._needs_reset:
                leaves, packed = self._reset()
                return leaves, 0.0, False, False, packed
            obs, reward, terminated, truncated, info = self.env.step(
                action if self._flat_action else self._unflatten(action, 0)
            )
            if self._next_step:
                self._needs_reset = bool(terminated or truncated)
            return (
                obs if self._flat_observation else self._flatten(obs),
                reward,
                terminated,
                truncated,
                self._info(info) if info else None,
            )

    def set_reset_args(self, seed: int | None, options: dict[str, Any] | None) -> None:
        """The seed and options of the next reset (once)."""
        self._seed = None if seed is None else int(seed)
        self._options = options

    def handle(self, request: tuple[Any, ...]) -> Any:
        """One call on the env: ``("call", name, args, kwargs)``,
        ``("get", name)``, ``("set", name, value)`` or
        ``("reset_args", seed, options)``; waits for a step in progress."""
        with self.lock:
            kind = request[0]
            if kind == "torchrl_specs":
                # A Gymnasium env has no TorchRL specs (rlpool.torchrl then
                # converts the pool's own).
                return None
            if kind == "reset_args":
                self.set_reset_args(request[1], request[2])
                return None
            if kind == "set":
                setter = getattr(self.env, "set_wrapper_attr", None)
                if setter is not None:
                    setter(request[1], request[2])
                else:
                    setattr(self.env, request[1], request[2])
                return None
            getter = getattr(self.env, "get_wrapper_attr", None)
            value = getter(request[1]) if getter is not None else getattr(self.env, request[1])
            if kind == "call" and callable(value):
                return value(*request[2], **request[3])
            return value

    def close(self) -> None:
        """Closes the env once (at the pool's shutdown with threads, when the
        pool drops it with processes). An env still inside a step after a
        second (one that never returns) is left as it is: closing it would
        wait for it forever."""
        if not self.lock.acquire(timeout=1.0):
            return
        try:
            if self._closed:
                return
            self._closed = True
            close = getattr(self.env, "close", None)
            if close is not None:
                close()
        finally:
            self.lock.release()


def _is_flat(space: Any) -> bool:
    """Whether a space is one tensor leaf (not a Dict or Tuple, not a
    pickled non-tensor leaf)."""
    from gymnasium import spaces

    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        return False
    return not _is_object_leaf(space)


# -- calls on the envs over a socket (processes) ---------------------------


def _serve(conn: Connection, adapter: Adapter) -> None:
    """In the worker: answers the hub's calls on the adapter's env until the
    connection ends."""
    import cloudpickle

    while True:
        try:
            seq, request = pickle.loads(conn.recv_bytes())
        except (OSError, EOFError):
            return
        try:
            reply = ("ok", adapter.handle(request))
            data = cloudpickle.dumps((seq, reply))
        except BaseException as err:  # the caller gets it, whatever it is
            text = format_exception(err)
            try:
                pickled: bytes | None = cloudpickle.dumps(err)
            except Exception:
                pickled = None
            data = cloudpickle.dumps((seq, ("err", pickled, text)))
        try:
            conn.send_bytes(data)
        except (OSError, EOFError):
            return


class Hub:
    """In the parent: a listening Unix socket (abstract namespace, nothing on
    disk) that each Python env's worker connects to, authenticated with a
    random key, and the calls sent over those connections."""

    def __init__(self) -> None:
        self.authkey = secrets.token_bytes(32)
        self.address = f"\0rlpool-{os.getpid()}-{secrets.token_hex(8)}"
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.bind(self.address)
        self._socket.listen(128)
        self._socket.settimeout(0.2)
        self._conns: dict[int, Connection] = {}
        self._locks: dict[int, threading.Lock] = {}
        self._seq = itertools.count()
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="rlpool-hub", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._socket.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            sock.setblocking(True)
            # A peer gets 5 s to authenticate and name its env (reads past
            # that fail), so that no stranger holds this thread.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 5, 0))
            conn = Connection(sock.detach())
            try:
                deliver_challenge(conn, self.authkey)
                answer_challenge(conn, self.authkey)
                index = pickle.loads(conn.recv_bytes())
                with socket.socket(fileno=os.dup(conn.fileno())) as view:
                    view.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", 0, 0))
            except Exception:
                conn.close()
                continue
            with self._changed:
                old = self._conns.pop(index, None)
                if old is not None:
                    old.close()
                self._conns[index] = conn
                self._locks.setdefault(index, threading.Lock())
                self._changed.notify_all()

    def request(self, index: int, request: tuple[Any, ...], timeout: float) -> Any:
        """Sends one call to env ``index`` and returns its answer; the env's
        exception is raised as is (its traceback in a note)."""
        deadline = time.monotonic() + timeout

        def timed_out(what: str) -> Timeout:
            return Timeout(
                f"env {index}: {what} within {timeout} s", op="call", timeout=timeout, env=index
            )

        with self._changed:
            while index not in self._conns:
                if self._closed:
                    raise PoolError(f"env {index}: the pool is shut down")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise timed_out("its worker did not connect for calls")
                self._changed.wait(min(left, 0.05))
            conn, lock = self._conns[index], self._locks[index]
        with lock:
            seq = next(self._seq)
            try:
                conn.send_bytes(pickle.dumps((seq, request)))
            except Exception as err:
                if isinstance(err, (OSError, EOFError)):
                    raise PoolError(
                        f"env {index}: its worker is gone (the call {request[0]} "
                        f"{request[1]!r} could not be sent: {err})"
                    ) from err
                raise InvalidArgument(
                    f"env {index}: the call's arguments cannot be pickled: {err}"
                ) from err
            while True:
                # Short polls, so that Ctrl-C is answered.
                left = deadline - time.monotonic()
                if left <= 0:
                    raise timed_out(f"no answer to {request[0]} {request[1]!r}")
                try:
                    ready = conn.poll(min(left, 0.05))
                    if not ready:
                        continue
                    answer_seq, reply = pickle.loads(conn.recv_bytes())
                except (OSError, EOFError) as err:
                    raise PoolError(
                        f"env {index}: its worker is gone (no answer to {request[0]} "
                        f"{request[1]!r})"
                    ) from err
                if answer_seq == seq:
                    break
                # An answer to an earlier call that timed out: skipped.
        if reply[0] == "ok":
            return reply[1]
        _, pickled, text = reply
        error: BaseException | None = None
        if pickled is not None:
            try:
                error = pickle.loads(pickled)
            except Exception:
                error = None
        if not isinstance(error, BaseException):
            raise PoolError(f"env {index}: {request[0]} {request[1]!r} failed:\n{text}")
        if hasattr(error, "add_note"):
            error.add_note(f"in env {index}'s worker:\n{text}")
        raise error

    def close(self) -> None:
        """Stops accepting and closes every connection."""
        with self._changed:
            self._closed = True
            conns = list(self._conns.values())
            self._conns.clear()
            self._changed.notify_all()
        with contextlib.suppress(OSError):
            self._socket.close()
        for conn in conns:
            conn.close()
