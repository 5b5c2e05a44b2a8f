"""rlpool: an asynchronous pool of reinforcement-learning environments with a
Rust core.

A learner sends actions to some environments, keeps working, and collects
whichever results are ready: a full batch, the first ``k``, all that is ready
before a deadline, or one given environment. Environments run in worker
threads or worker processes; results come back as numpy arrays without a
copy. The calls are TorchRL's ``AsyncEnvPool``'s.

>>> import rlpool
>>> with rlpool.AsyncEnvPool(["CartPole-v1"] * 8, backend="threading") as pool:
...     td = pool.reset()
...     out = pool.step(pool.rand_action())
...     out["next", "observation"].shape
(8, 4)
"""

from rlpool._native import __version__
from rlpool._pool import AsyncEnvPool, Batch, EnvMaker, TensorDictLike
from rlpool._pyenv import PyEnvMaker, decode_info, decode_infos, decode_leaf
from rlpool._tensordict import LazyStackedTensorDict, NestedKey, TensorDict
from rlpool.errors import (
    ActorDied,
    Busy,
    EnvFailed,
    InvalidArgument,
    InvalidType,
    PoolError,
    ShutDown,
    StartError,
    Timeout,
    WorkerDied,
)

__all__ = [
    "ActorDied",
    "AsyncEnvPool",
    "Batch",
    "Busy",
    "EnvFailed",
    "EnvMaker",
    "InvalidArgument",
    "InvalidType",
    "LazyStackedTensorDict",
    "NestedKey",
    "PoolError",
    "PyEnvMaker",
    "ShutDown",
    "StartError",
    "TensorDict",
    "TensorDictLike",
    "Timeout",
    "WorkerDied",
    "__version__",
    "decode_info",
    "decode_infos",
    "decode_leaf",
]
