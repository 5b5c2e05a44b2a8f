"""`TensorDict`: a nested mapping of numpy arrays that share a batch size.

The pool's results come as `TensorDict`s whose arrays are the caller's
own: a call's small entries share one buffer allocated for it, large
ones are handed over without a copy; the pool never touches them, so the
arrays stay valid and unchanged after later calls, and they are writable
(``torch.from_numpy`` takes them as they are).

>>> import numpy as np
>>> from rlpool import TensorDict
>>> td = TensorDict({"obs": np.zeros((4, 3)), "next": {"reward": np.ones((4, 1))}}, batch_size=(4,))
>>> td["next", "reward"].shape
(4, 1)
>>> td.keys(include_nested=True, leaves_only=True)
['obs', ('next', 'reward')]
>>> td[1:3].batch_size
(2,)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Union

import numpy as np
import numpy.typing as npt

__all__ = ["LazyStackedTensorDict", "NestedKey", "TensorDict"]

NestedKey = Union[str, tuple[str, ...]]
"""A key: a string, or a tuple of strings for a nested entry."""

Value = Union[npt.NDArray[Any], "TensorDict"]

_MISSING: Any = object()


def _path(key: NestedKey) -> tuple[str, ...]:
    if isinstance(key, str):
        return (key,)
    if isinstance(key, tuple) and key and all(isinstance(part, str) for part in key):
        return key
    raise TypeError(f"a TensorDict key is a string or a non-empty tuple of strings, not {key!r}")


class TensorDict:
    """A nested mapping of numpy arrays whose leading dims are ``batch_size``.

    Keys are strings; a tuple of strings reaches a nested entry
    (``td["next", "observation"]``). ``len(td)`` and indexing with ints,
    slices or index arrays follow the batch's first dim, as in TorchRL;
    ``keys()``, ``items()`` and ``values()`` give the entries.

    Args:
        source: a mapping of names to arrays (anything ``np.asarray``
            takes) or to nested mappings; ``None`` for an empty tensordict.
        batch_size: the leading dims every entry shares (default ``()``).

    Raises:
        ValueError: an entry whose shape does not start with
            ``batch_size`` (the message names the key).
    """

    __slots__ = ("_batch_size", "_data")

    def __init__(
        self,
        source: Mapping[str, Any] | None = None,
        batch_size: Sequence[int] | int = (),
    ) -> None:
        self._batch_size: tuple[int, ...] = (
            (int(batch_size),) if isinstance(batch_size, int) else tuple(int(d) for d in batch_size)
        )
        self._data: dict[str, Any] = {}
        if source is not None:
            items = source.items() if not isinstance(source, TensorDict) else source._data.items()
            for key, value in items:
                self[key] = value

    @classmethod
    def _wrap(cls, data: dict[str, Any], batch_size: tuple[int, ...]) -> TensorDict:
        """A tensordict over ``data`` (nested dicts of arrays), unchecked."""
        td = cls.__new__(cls)
        td._data = data
        td._batch_size = batch_size
        return td

    @property
    def batch_size(self) -> tuple[int, ...]:
        """The leading dims every entry shares."""
        return self._batch_size

    @property
    def shape(self) -> tuple[int, ...]:
        """The batch size (TorchRL's alias)."""
        return self._batch_size

    @property
    def ndim(self) -> int:
        """The number of batch dims."""
        return len(self._batch_size)

    def __len__(self) -> int:
        """The size of the first batch dim (0 for a batch size of ``()``)."""
        return self._batch_size[0] if self._batch_size else 0

    def _node(self, path: tuple[str, ...], key: NestedKey) -> dict[str, Any]:
        node = self._data
        for part in path:
            child = node.get(part)
            if not isinstance(child, dict):
                raise KeyError(f"key {key!r} not found (keys: {sorted(map(str, self.keys()))})")
            node = child
        return node

    def __getitem__(self, key: Any) -> Any:
        """An entry (``td["obs"]``, ``td["next", "obs"]``), or the rows
        selected by an int, a slice or an index array."""
        if type(key) is str:
            # The common case first: a top-level key, one dict lookup.
            value = self._data.get(key, _MISSING)
            if value is not _MISSING and type(value) is not dict:
                return value
        if isinstance(key, (str, tuple)) and not (
            isinstance(key, tuple) and any(not isinstance(k, str) for k in key)
        ):
            path = _path(key)
            node = self._node(path[:-1], key)
            if path[-1] not in node:
                raise KeyError(f"key {key!r} not found (keys: {sorted(map(str, self.keys()))})")
            value = node[path[-1]]
            if isinstance(value, dict):
                return TensorDict._wrap(value, self._batch_size)
            return value
        return self._index(key)

    def _index(self, index: Any) -> TensorDict:
        if not self._batch_size:
            raise IndexError("a TensorDict with batch size () has no rows to index")
        probe = np.empty(self._batch_size, dtype=np.bool_)[index]
        return TensorDict._wrap(_map(self._data, lambda a: a[index]), probe.shape)

    def __setitem__(self, key: NestedKey, value: Any) -> None:
        """Sets an entry; a mapping becomes a nested tensordict."""
        path = _path(key)
        node = self._data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise KeyError(f"{key!r}: {part!r} is an array, not a nested tensordict")
            node = child
        node[path[-1]] = self._checked(key, value)

    def _checked(self, key: NestedKey, value: Any) -> Any:
        if isinstance(value, TensorDict):
            value = value._data
        if isinstance(value, Mapping):
            return {k: self._checked((*_path(key), k), v) for k, v in value.items()}
        array = np.asarray(value)
        if array.shape[: len(self._batch_size)] != self._batch_size:
            raise ValueError(
                f"entry {key!r} has shape {array.shape}, which does not start with the "
                f"batch size {self._batch_size}"
            )
        return array

    def __delitem__(self, key: NestedKey) -> None:
        path = _path(key)
        del self._node(path[:-1], key)[path[-1]]

    def __contains__(self, key: object) -> bool:
        try:
            path = _path(key)  # type: ignore[arg-type]
        except TypeError:
            return False
        node: Any = self._data
        for part in path:
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    def __iter__(self) -> Iterator[TensorDict]:
        """The rows along the first batch dim (TorchRL's iteration)."""
        return iter(self.unbind(0))

    def get(self, key: NestedKey, default: Any = None) -> Any:
        """The entry under ``key``, or ``default``."""
        if key in self:
            return self[key]
        return default

    def set(self, key: NestedKey, value: Any) -> TensorDict:
        """Sets an entry and returns the tensordict."""
        self[key] = value
        return self

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list[NestedKey]:
        """The keys: top-level ones, or every nested one as a tuple with
        ``include_nested``; only arrays (no sub-tensordict) with
        ``leaves_only``."""
        keys: list[NestedKey] = []
        _walk(self._data, (), include_nested, leaves_only, keys)
        return keys

    def items(
        self, include_nested: bool = False, leaves_only: bool = False
    ) -> list[tuple[NestedKey, Value]]:
        """``(key, value)`` pairs, with the keys of :meth:`keys`."""
        return [(k, self[k]) for k in self.keys(include_nested, leaves_only)]

    def values(self, include_nested: bool = False, leaves_only: bool = False) -> list[Value]:
        """The values, in the order of :meth:`keys`."""
        return [self[k] for k in self.keys(include_nested, leaves_only)]

    def to_dict(self) -> dict[str, Any]:
        """The entries as nested plain dicts of arrays (no copy)."""
        return _map(self._data, lambda a: a)

    def numpy(self) -> dict[str, Any]:
        """The same as :meth:`to_dict` (TorchRL's name)."""
        return self.to_dict()

    def copy(self) -> TensorDict:
        """A shallow copy: new mappings, the same arrays."""
        return TensorDict._wrap(_map(self._data, lambda a: a), self._batch_size)

    def clone(self) -> TensorDict:
        """A deep copy: every array copied."""
        return TensorDict._wrap(_map(self._data, lambda a: a.copy()), self._batch_size)

    def update(self, other: Mapping[str, Any] | TensorDict) -> TensorDict:
        """Sets every entry of ``other`` (nested entries merged)."""
        items = other.items(True, True) if isinstance(other, TensorDict) else other.items()
        for key, value in items:
            self[key] = value
        return self

    def select(self, *keys: NestedKey) -> TensorDict:
        """A tensordict of only these entries (the same arrays)."""
        out = TensorDict._wrap({}, self._batch_size)
        for key in keys:
            out[key] = self[key]
        return out

    def exclude(self, *keys: NestedKey) -> TensorDict:
        """A tensordict without these entries (the same arrays)."""
        out = self.copy()
        for key in keys:
            if key in out:
                del out[key]
        return out

    def unbind(self, dim: int = 0) -> list[TensorDict]:
        """The tensordicts along batch dim ``dim`` (views, no copy)."""
        if not -len(self._batch_size) <= dim < len(self._batch_size):
            raise IndexError(f"dim {dim} is out of range for batch size {self._batch_size}")
        dim %= len(self._batch_size)
        rest = self._batch_size[:dim] + self._batch_size[dim + 1 :]
        return [
            TensorDict._wrap(_map(self._data, lambda a, i=i: np.take(a, i, axis=dim)), rest)
            for i in range(self._batch_size[dim])
        ]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorDict):
            return NotImplemented
        mine, theirs = self.keys(True, True), other.keys(True, True)
        return (
            self._batch_size == other._batch_size
            and sorted(map(str, mine)) == sorted(map(str, theirs))
            and all(np.array_equal(self[k], other[k]) for k in mine)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        lines = [f"TensorDict(batch_size={self._batch_size}, fields={{"]
        for key in self.keys(include_nested=True, leaves_only=True):
            array = self[key]
            lines.append(f"    {key!r}: array(shape={array.shape}, dtype={array.dtype}),")
        lines.append("})")
        return "\n".join(lines)


def _walk(
    node: dict[str, Any],
    prefix: tuple[str, ...],
    include_nested: bool,
    leaves_only: bool,
    out: list[NestedKey],
) -> None:
    for name, value in node.items():
        key: NestedKey = (*prefix, name) if prefix else name
        is_dict = isinstance(value, dict)
        if not (is_dict and leaves_only):
            out.append(key)
        if is_dict and include_nested:
            _walk(value, (*prefix, name), include_nested, leaves_only, out)


def _map(node: dict[str, Any], f: Any) -> dict[str, Any]:
    return {k: _map(v, f) if isinstance(v, dict) else f(v) for k, v in node.items()}


class LazyStackedTensorDict(Sequence[TensorDict]):
    """A heterogeneous batch: one :class:`TensorDict` per env, whose keys or
    shapes may differ (``stack="lazy"``, or ``"maybe_dense"`` when the envs'
    results do not stack densely).

    ``batch[i]`` is the ``i``-th env's tensordict; ``batch[key]`` is the list
    of that entry's arrays, one per env.
    """

    __slots__ = ("_parts",)

    def __init__(self, tensordicts: Sequence[TensorDict]) -> None:
        self._parts = list(tensordicts)

    @property
    def tensordicts(self) -> list[TensorDict]:
        """The per-env tensordicts."""
        return self._parts

    @property
    def batch_size(self) -> tuple[int, ...]:
        """``(len(self),)`` followed by the dims every part shares."""
        shared: tuple[int, ...] = self._parts[0].batch_size if self._parts else ()
        for part in self._parts[1:]:
            if part.batch_size != shared:
                shared = ()
        return (len(self._parts), *shared)

    def __len__(self) -> int:
        return len(self._parts)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, int):
            return self._parts[index]
        if isinstance(index, slice):
            return LazyStackedTensorDict(self._parts[index])
        return [part[index] for part in self._parts]

    def __contains__(self, key: object) -> bool:
        return any(key in part for part in self._parts)

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list[NestedKey]:
        """The keys that every part has."""
        if not self._parts:
            return []
        first = self._parts[0].keys(include_nested, leaves_only)
        return [k for k in first if all(k in part for part in self._parts[1:])]

    def __repr__(self) -> str:
        inner = ",\n".join("    " + repr(p).replace("\n", "\n    ") for p in self._parts)
        return f"LazyStackedTensorDict(batch_size={self.batch_size}, tensordicts=[\n{inner}\n])"
