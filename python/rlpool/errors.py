"""The exceptions rlpool raises: one hierarchy under :class:`PoolError`.

Each carries the same information as the Rust error it comes from, as
attributes (the env, the worker, the envs involved) and in its message.
Exceptions about the caller's arguments also subclass the built-in a Python
user would catch (``ValueError``, ``TypeError``), a receive that runs out of
time is also a ``TimeoutError``, and a send to a busy env is also a
``RuntimeError`` (what TorchRL raises there).

>>> import rlpool
>>> issubclass(rlpool.Timeout, TimeoutError)
True
>>> with rlpool.AsyncEnvPool(["CartPole-v1"] * 2) as pool:
...     try:
...         pool.async_step_recv(min_get=1)
...     except rlpool.InvalidArgument as err:
...         print(type(err).__name__, isinstance(err, ValueError))
InvalidArgument True
"""

from __future__ import annotations

__all__ = [
    "ActorDied",
    "Busy",
    "EnvFailed",
    "InvalidArgument",
    "InvalidType",
    "PoolError",
    "ShutDown",
    "StartError",
    "Timeout",
    "WorkerDied",
]


class PoolError(Exception):
    """The base class of every error rlpool raises."""


class Timeout(PoolError, TimeoutError):
    """A receive whose deadline passed before ``min_get`` results were ready.

    Nothing is lost: the results that were ready stay for the next receive.

    Attributes:
        op: the operation received (``"reset"``, ``"step"``,
            ``"step_and_maybe_reset"``).
        timeout: the deadline, in seconds.
        ready: how many results were ready (``None`` for a per-env receive).
        min_get: how many were asked for (``None`` for a per-env receive).
        env: the env of a per-env receive (``None`` for a batch receive).
    """

    def __init__(
        self,
        message: str,
        *,
        op: str,
        timeout: float,
        ready: int | None = None,
        min_get: int | None = None,
        env: int | None = None,
    ) -> None:
        super().__init__(message)
        self.op = op
        self.timeout = timeout
        self.ready = ready
        self.min_get = min_get
        self.env = env


class Busy(PoolError, RuntimeError):
    """A send to envs whose previous result has not been received, or a
    synchronous call while envs are in flight.

    Attributes:
        envs: the busy envs.
    """

    def __init__(self, message: str, *, envs: list[int]) -> None:
        super().__init__(message)
        self.envs = envs


class EnvFailed(PoolError):
    """An env's ``reset`` or ``step`` failed; the other envs go on and this
    env is idle again.

    Attributes:
        env: the env's index.
        name: the env's name.
        worker: the worker process that ran it (``None`` with threads).
        during: ``"reset"`` or ``"step"``.
        cause: the env's own message.
    """

    def __init__(
        self,
        message: str,
        *,
        env: int,
        name: str,
        worker: int | None,
        during: str,
        cause: str,
    ) -> None:
        super().__init__(message)
        self.env = env
        self.name = name
        self.worker = worker
        self.during = during
        self.cause = cause


class WorkerDied(PoolError):
    """A worker process died: its envs' results are lost and they cannot be
    used again; the other workers' envs go on.

    Attributes:
        worker: the worker's index.
        envs: its envs.
        reason: how it died (exit status or signal).
    """

    def __init__(self, message: str, *, worker: int, envs: list[int], reason: str) -> None:
        super().__init__(message)
        self.worker = worker
        self.envs = envs
        self.reason = reason


class ActorDied(WorkerDied):
    """A Ray actor of :class:`rlpool.ray.AsyncEnvPool` died (killed, its node
    lost, or silent past the pool's liveness timeout): its envs cannot be
    used again; the other actors' envs go on.

    Attributes:
        worker: the actor's index (as ``actor``).
        actor: the actor's index.
        envs: its envs (global indices).
        lost: those of its envs whose results were in flight and are lost.
        reason: what the pool saw (Ray's error, or the silence).
    """

    def __init__(
        self, message: str, *, actor: int, envs: list[int], lost: list[int], reason: str
    ) -> None:
        super().__init__(message, worker=actor, envs=envs, reason=reason)
        self.actor = actor
        self.lost = lost


class ShutDown(PoolError):
    """A call on a pool that was shut down."""


class StartError(PoolError):
    """The pool could not start: an env that could not be built, specs that
    do not stack, a worker that could not start, a bad CPU affinity."""


class InvalidArgument(PoolError, ValueError):
    """An argument the pool cannot take: ``min_get``/``max_get``/``timeout``
    out of range, an env index out of range or not in flight, a tensordict
    whose keys, shapes or batch size do not fit the envs."""


class InvalidType(PoolError, TypeError):
    """An argument of the wrong type: a value that is not an array, an array
    of the wrong dtype, an env maker the pool cannot build."""
