"""Specs: what an env takes and gives, with TorchRL's names and habits.

A spec describes one entry (its ``shape``, its numpy ``dtype`` and its
domain) or, for a :class:`Composite`, a tensordict: a spec per key, nested
composites for nested keys, and a ``shape`` that every entry's shape starts
with (the batch size). Every spec can be sampled (``rand()``, with a numpy
``Generator`` for reproducible draws), give a value of zeros (``zero()``) and
check a value (``is_in(value)``).

The pool's specs (``pool.full_action_spec``, ...) are these classes;
:func:`env_specs` gives one registered env's specs without a pool.

>>> import numpy as np
>>> from rlpool.specs import env_specs
>>> specs = env_specs("Pendulum-v1")
>>> action = specs["full_action_spec"]["action"]
>>> action
Bounded(shape=(1,), dtype=float32, low=-2.0, high=2.0)
>>> value = action.rand(np.random.default_rng(0))
>>> value.shape, value.dtype, action.is_in(value), action.is_in(value + 5)
((1,), dtype('float32'), True, False)
>>> done = specs["full_done_spec"]
>>> done.keys()
['done', 'terminated', 'truncated']
>>> done.zero()["done"]
array([False])
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Union

import numpy as np
import numpy.typing as npt

from rlpool._tensordict import LazyStackedTensorDict, NestedKey, TensorDict

__all__ = [
    "Binary",
    "Bounded",
    "Categorical",
    "Composite",
    "MultiCategorical",
    "MultiOneHot",
    "NonTensor",
    "OneHot",
    "Stacked",
    "TensorSpec",
    "env_specs",
    "from_description",
]

Array = npt.NDArray[Any]
ShapeLike = Union[int, Sequence[int]]
DTypeLike = Union["np.dtype[Any]", type, str]

_DTYPES = tuple(
    np.dtype(name)
    for name in ("bool", "uint8", "int8", "int16", "int32", "int64", "float32", "float64")
)

# The half-width of the range unbounded integer specs sample from (as the
# Rust `specs` crate).
_UNBOUNDED_INT_RANGE = 10


def _to_shape(shape: ShapeLike) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    out = []
    for dim in dims:
        if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
            raise TypeError(f"a shape is a tuple of ints, got {shape!r}")
        if dim < 0:
            raise ValueError(f"a shape has no negative dim, got {shape!r}")
        out.append(int(dim))
    return tuple(out)


def _to_dtype(dtype: DTypeLike) -> np.dtype[Any]:
    out = np.dtype(dtype)
    if out not in _DTYPES:
        names = ", ".join(d.name for d in _DTYPES)
        raise TypeError(f"a spec's dtype is one of {names}; got {out}")
    return out


def _int_range(dtype: np.dtype[Any]) -> tuple[int, int] | None:
    """``(min, max)`` of an integer or bool dtype; ``None`` for floats."""
    if dtype.kind == "b":
        return 0, 1
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return int(info.min), int(info.max)
    return None


def _rng(rng: np.random.Generator | None) -> np.random.Generator:
    return rng if rng is not None else np.random.default_rng()


def _frozen(array: Array) -> Array:
    array.flags.writeable = False
    return array


def _fmt_array(array: Array) -> str:
    """One value when every element is equal, else the elements."""
    flat = array.reshape(-1)
    if flat.size and bool(np.all(flat == flat[0])):
        return repr(flat[0].item())
    return np.array2string(array, separator=", ", threshold=8)


class TensorSpec(ABC):
    """The base class of every spec: a ``shape``, a ``dtype`` (``None`` for
    non-tensor, composite and stacked specs) and a domain.

    Specs compare equal when they are of one kind with equal shape, dtype
    and domain; they are not hashable (a composite's entries may change).
    """

    _shape: tuple[int, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of a value (a composite's batch shape)."""
        return self._shape

    @property
    def ndim(self) -> int:
        """The number of dims of :attr:`shape`."""
        return len(self._shape)

    @property
    def dtype(self) -> np.dtype[Any] | None:
        """The numpy dtype of a value; ``None`` for non-tensor, composite
        and stacked specs."""
        return None

    @abstractmethod
    def rand(self, rng: np.random.Generator | None = None) -> Any:
        """A random value in the spec, drawn from ``rng`` (a fresh
        ``np.random.default_rng()`` when ``None``)."""

    @abstractmethod
    def zero(self) -> Any:
        """A value of zeros (``False``) of the spec's shape and dtype; it is
        not in a bounded spec whose bounds exclude 0, nor in a one-hot
        spec."""

    @abstractmethod
    def is_in(self, value: Any) -> bool:
        """True if ``value`` is in the spec."""

    def _fields(self) -> list[tuple[str, Any]]:
        return [("shape", self._shape)]

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, TensorSpec)
        return all(
            np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
            for (_, a), (_, b) in zip(self._fields(), other._fields())
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{name}={_fmt_array(v) if isinstance(v, np.ndarray) else v}"
            for name, v in self._fields()
        )
        return f"{type(self).__name__}({fields})"


class _Leaf(TensorSpec):
    """A spec of numpy arrays of one shape and dtype."""

    _dtype: np.dtype[Any]

    def __init__(self, shape: ShapeLike, dtype: DTypeLike) -> None:
        self._shape = _to_shape(shape)
        self._dtype = _to_dtype(dtype)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype of a value."""
        return self._dtype

    def _fields(self) -> list[tuple[str, Any]]:
        return [("shape", self._shape), ("dtype", self._dtype)]

    def rand(self, rng: np.random.Generator | None = None) -> Array:
        """A random array in the spec, drawn from ``rng`` (a fresh
        ``np.random.default_rng()`` when ``None``)."""
        value = self._draw(_rng(rng))
        return np.asarray(value, dtype=self._dtype).reshape(self._shape)

    @abstractmethod
    def _draw(self, rng: np.random.Generator) -> Any:
        """Values for :meth:`rand`, before the cast to the dtype and shape."""

    def zero(self) -> Array:
        """An array of zeros (``False``) of the spec's shape and dtype."""
        return np.zeros(self._shape, dtype=self._dtype)

    def is_in(self, value: Any) -> bool:
        """True if ``value`` is an array of exactly the spec's shape and
        dtype (no cast) whose elements are in the domain."""
        if isinstance(value, (TensorDict, LazyStackedTensorDict, Mapping)):
            return False
        array = np.asarray(value)
        if array.shape != self._shape or array.dtype != self._dtype:
            return False
        return self._contains(array)

    def _contains(self, array: Array) -> bool:
        return True


class Unbounded(_Leaf):
    """Any array of a shape and dtype (TorchRL's ``Unbounded``).

    ``rand()`` draws floats from a standard normal, integers uniformly in
    ``-10..=10`` (cut to the dtype's range), bools uniformly.

    Args:
        shape: the shape (default ``()``).
        dtype: the numpy dtype (default ``float32``).
    """

    def __init__(self, shape: ShapeLike = (), dtype: DTypeLike = np.float32) -> None:
        super().__init__(shape, dtype)

    def _draw(self, rng: np.random.Generator) -> Any:
        if self._dtype.kind == "f":
            return rng.standard_normal(self._shape)
        lo, hi = _int_range(self._dtype) or (0, 0)
        low, high = max(-_UNBOUNDED_INT_RANGE, lo), min(_UNBOUNDED_INT_RANGE, hi)
        return rng.integers(low, high, size=self._shape, endpoint=True)


class Bounded(_Leaf):
    """Arrays whose elements lie between per-element bounds, inclusive
    (TorchRL's ``Bounded``).

    ``rand()`` draws uniformly in ``[low, high]``; where a float bound is
    infinite, a standard normal sample moved by its absolute value away from
    the finite bound (if any), clamped to the bounds.

    Args:
        low: the lower bounds: a number, or an array broadcast to ``shape``.
        high: the upper bounds, likewise.
        shape: the shape (default: the bounds' broadcast shape).
        dtype: a float or integer numpy dtype (default: the bounds' dtype
            when both are numpy arrays of one supported dtype, else
            ``float32``).

    Raises:
        TypeError: a bool or unsupported dtype.
        ValueError: a NaN bound, ``low > high`` somewhere, an integer bound
            that is not a whole number in the dtype's range.
    """

    def __init__(
        self,
        low: Any,
        high: Any,
        shape: ShapeLike | None = None,
        dtype: DTypeLike | None = None,
    ) -> None:
        if dtype is None:
            same = (
                isinstance(low, np.ndarray)
                and isinstance(high, np.ndarray)
                and low.dtype == high.dtype
                and low.dtype in _DTYPES
            )
            dtype = low.dtype if same else np.float32
        if shape is None:
            shape = np.broadcast_shapes(np.shape(low), np.shape(high))
        super().__init__(shape, dtype)
        if self._dtype.kind == "b":
            raise TypeError("a Bounded spec needs a float or integer dtype, got bool")
        self._low = _frozen(self._bound("low", low))
        self._high = _frozen(self._bound("high", high))
        ok = self._low <= self._high
        if not bool(np.all(ok)):
            index = int(np.argmin(ok.reshape(-1)))
            lo, hi = self._low.reshape(-1)[index], self._high.reshape(-1)[index]
            raise ValueError(f"Bounded: element {index}: low {lo} is greater than high {hi}")

    def _bound(self, name: str, value: Any) -> Array:
        source = np.asarray(value)
        if source.dtype.kind not in "biuf":
            raise TypeError(f"Bounded: {name} must be numbers, got dtype {source.dtype}")
        try:
            source = np.broadcast_to(source, self._shape)
        except ValueError:
            raise ValueError(
                f"Bounded: {name} of shape {source.shape} does not fit the shape {self._shape}"
            ) from None
        if self._dtype.kind == "f":
            out = source.astype(self._dtype)
            if bool(np.any(np.isnan(out))):
                raise ValueError(f"Bounded: {name} must not be NaN")
            return out
        lo, hi = _int_range(self._dtype) or (0, 0)
        if source.size == 0:
            return np.zeros(self._shape, dtype=self._dtype)
        if source.dtype.kind == "f":
            whole = np.isfinite(source) & (source == np.floor(source))
            if not bool(np.all(whole)):
                raise ValueError(
                    f"Bounded: {name} must be whole numbers for dtype {self._dtype}, "
                    f"got {_fmt_array(source)}"
                )
            # float(max) of int64 is 2**63, which stands for the largest
            # int64 (as in the Rust crate).
            if float(source.min()) < float(lo) or float(source.max()) > float(hi):
                raise ValueError(
                    f"Bounded: {name} = {_fmt_array(source)} is outside the range "
                    f"[{lo}, {hi}] of dtype {self._dtype}"
                )
            top = source >= float(hi)
            return np.where(top, hi, np.where(top, 0, source).astype(self._dtype)).astype(
                self._dtype
            )
        if int(source.min()) < lo or int(source.max()) > hi:
            raise ValueError(
                f"Bounded: {name} = {_fmt_array(source)} is outside the range "
                f"[{lo}, {hi}] of dtype {self._dtype}"
            )
        return source.astype(self._dtype)

    @property
    def low(self) -> Array:
        """The lower bounds, one per element (read-only)."""
        return self._low

    @property
    def high(self) -> Array:
        """The upper bounds, one per element (read-only)."""
        return self._high

    def _fields(self) -> list[tuple[str, Any]]:
        return [*super()._fields(), ("low", self._low), ("high", self._high)]

    def _draw(self, rng: np.random.Generator) -> Any:
        if self._dtype.kind != "f":
            return rng.integers(self._low, self._high, size=self._shape, endpoint=True)
        low = self._low.astype(np.float64)
        high = self._high.astype(np.float64)
        u = rng.random(self._shape)
        z = np.abs(rng.standard_normal(self._shape))
        with np.errstate(all="ignore"):
            span = high - low
            uniform = np.where(np.isfinite(span), low + span * u, low * (1.0 - u) + high * u)
            finite_low, finite_high = np.isfinite(low), np.isfinite(high)
            x = np.where(
                finite_low & finite_high,
                uniform,
                np.where(finite_low, low + z, np.where(finite_high, high - z, z)),
            )
            x = np.where(low == high, low, x)
        # The bounds are values of the dtype, so rounding to it after
        # clamping stays within them.
        return np.minimum(np.maximum(x, low), high)

    def _contains(self, array: Array) -> bool:
        return bool(np.all((array >= self._low) & (array <= self._high)))


class Categorical(_Leaf):
    """Integers in ``0..n`` (TorchRL's ``Categorical``).

    Args:
        n: the number of categories (at least 1).
        shape: the shape (default ``()``).
        dtype: an integer numpy dtype that holds ``n - 1``, or bool for
            ``n <= 2`` (default ``int64``).
    """

    def __init__(self, n: int, shape: ShapeLike = (), dtype: DTypeLike = np.int64) -> None:
        super().__init__(shape, dtype)
        self._n = int(n)
        _check_categories("Categorical", self._dtype, self._n)

    @property
    def n(self) -> int:
        """The number of categories: values are in ``0..n``."""
        return self._n

    def _fields(self) -> list[tuple[str, Any]]:
        return [*super()._fields(), ("n", self._n)]

    def _draw(self, rng: np.random.Generator) -> Any:
        return rng.integers(0, self._n, size=self._shape)

    def _contains(self, array: Array) -> bool:
        values = array.astype(np.int64)
        return bool(np.all((values >= 0) & (values < self._n)))


class OneHot(_Leaf):
    """One-hot rows: along the last dim (of size ``n``), exactly one element
    is 1 (``True``), the others 0 (TorchRL's ``OneHot``).

    Args:
        n: the number of categories (at least 1).
        shape: the shape, whose last dim is ``n`` (default ``(n,)``).
        dtype: bool or an integer numpy dtype (default ``bool``).
    """

    def __init__(self, n: int, shape: ShapeLike | None = None, dtype: DTypeLike = np.bool_) -> None:
        super().__init__((n,) if shape is None else shape, dtype)
        self._n = int(n)
        if self._n < 1:
            raise ValueError(f"OneHot: n must be at least 1, got {self._n}")
        if not self._shape or self._shape[-1] != self._n:
            raise ValueError(f"OneHot: the last dim of shape {self._shape} must be n = {self._n}")
        _check_categories("OneHot", self._dtype, 2)

    @property
    def n(self) -> int:
        """The number of categories (the last dim)."""
        return self._n

    def _fields(self) -> list[tuple[str, Any]]:
        return [*super()._fields(), ("n", self._n)]

    def _draw(self, rng: np.random.Generator) -> Any:
        out = np.zeros(self._shape, dtype=self._dtype)
        hot = rng.integers(0, self._n, size=(*self._shape[:-1], 1))
        np.put_along_axis(out, hot, 1, axis=-1)
        return out

    def _contains(self, array: Array) -> bool:
        values = array.astype(np.int64)
        binary = bool(np.all((values == 0) | (values == 1)))
        return binary and bool(np.all(values.sum(axis=-1) == 1))


class Binary(_Leaf):
    """Zeros and ones (TorchRL's ``Binary``).

    Args:
        n: the size of the last dim, for a shape of ``(n,)`` (give ``n`` or
            ``shape``).
        shape: the shape.
        dtype: bool or an integer numpy dtype (default ``bool``).
    """

    def __init__(
        self,
        n: int | None = None,
        shape: ShapeLike | None = None,
        dtype: DTypeLike = np.bool_,
    ) -> None:
        if shape is None:
            if n is None:
                raise ValueError("Binary: give n or shape")
            shape = (n,)
        super().__init__(shape, dtype)
        if n is not None and (not self._shape or self._shape[-1] != n):
            raise ValueError(f"Binary: the last dim of shape {self._shape} must be n = {n}")
        _check_categories("Binary", self._dtype, 2)

    def _draw(self, rng: np.random.Generator) -> Any:
        return rng.integers(0, 2, size=self._shape)

    def _contains(self, array: Array) -> bool:
        values = array.astype(np.int64)
        return bool(np.all((values == 0) | (values == 1)))


class MultiCategorical(_Leaf):
    """Integers whose last dim holds one category per element of ``nvec``:
    ``value[..., i]`` is in ``0..nvec[i]`` (TorchRL's ``MultiCategorical``).

    Args:
        nvec: the number of categories of each element of the last dim
            (each at least 1).
        shape: the shape, whose last dim is ``len(nvec)`` (default
            ``(len(nvec),)``).
        dtype: an integer numpy dtype that holds every ``nvec[i] - 1``
            (default ``int64``).
    """

    def __init__(
        self,
        nvec: Sequence[int] | Array,
        shape: ShapeLike | None = None,
        dtype: DTypeLike = np.int64,
    ) -> None:
        counts = np.asarray(nvec)
        if counts.ndim != 1 or (counts.size and counts.dtype.kind not in "iu"):
            raise TypeError(f"MultiCategorical: nvec is a list of ints, got {nvec!r}")
        self._nvec = _frozen(counts.astype(np.int64))
        super().__init__((len(self._nvec),) if shape is None else shape, dtype)
        if not self._shape or self._shape[-1] != len(self._nvec):
            raise ValueError(
                f"MultiCategorical: the last dim of shape {self._shape} must be "
                f"len(nvec) = {len(self._nvec)}"
            )
        for i, count in enumerate(self._nvec.tolist()):
            if count < 1:
                raise ValueError(f"MultiCategorical: nvec[{i}] must be at least 1, got {count}")
        largest = int(self._nvec.max()) if self._nvec.size else 1
        _check_categories("MultiCategorical", self._dtype, largest)

    @property
    def nvec(self) -> Array:
        """The number of categories of each element of the last dim
        (``int64``, read-only)."""
        return self._nvec

    def _fields(self) -> list[tuple[str, Any]]:
        return [*super()._fields(), ("nvec", self._nvec.tolist())]

    def _draw(self, rng: np.random.Generator) -> Any:
        if not self._nvec.size:
            return np.zeros(self._shape, dtype=self._dtype)
        return rng.integers(0, self._nvec, size=self._shape)

    def _contains(self, array: Array) -> bool:
        values = array.astype(np.int64)
        return bool(np.all((values >= 0) & (values < self._nvec)))


class MultiOneHot(_Leaf):
    """Several one-hot groups side by side along the last dim: group ``i``
    takes ``nvec[i]`` elements, exactly one of which is 1 (TorchRL's
    ``MultiOneHot``). The Rust pool's specs have no such kind: this one
    serves :mod:`rlpool.torchrl`'s conversions.

    Args:
        nvec: the size of each group (each at least 1).
        shape: the shape, whose last dim is ``sum(nvec)`` (default
            ``(sum(nvec),)``).
        dtype: bool or an integer numpy dtype (default ``bool``).

    >>> spec = MultiOneHot([2, 3])
    >>> spec.is_in(np.array([False, True, True, False, False]))
    True
    """

    def __init__(
        self,
        nvec: Sequence[int] | Array,
        shape: ShapeLike | None = None,
        dtype: DTypeLike = np.bool_,
    ) -> None:
        counts = np.asarray(nvec)
        if counts.ndim != 1 or not counts.size or counts.dtype.kind not in "iu":
            raise TypeError(f"MultiOneHot: nvec is a non-empty list of ints, got {nvec!r}")
        self._nvec = _frozen(counts.astype(np.int64))
        total = int(self._nvec.sum())
        super().__init__((total,) if shape is None else shape, dtype)
        for i, count in enumerate(self._nvec.tolist()):
            if count < 1:
                raise ValueError(f"MultiOneHot: nvec[{i}] must be at least 1, got {count}")
        if not self._shape or self._shape[-1] != total:
            raise ValueError(
                f"MultiOneHot: the last dim of shape {self._shape} must be sum(nvec) = {total}"
            )
        _check_categories("MultiOneHot", self._dtype, 2)

    @property
    def nvec(self) -> Array:
        """The size of each one-hot group (``int64``, read-only)."""
        return self._nvec

    def _fields(self) -> list[tuple[str, Any]]:
        return [*super()._fields(), ("nvec", self._nvec.tolist())]

    def _draw(self, rng: np.random.Generator) -> Any:
        parts = [OneHot(int(n), (*self._shape[:-1], int(n)), self._dtype) for n in self._nvec]
        return np.concatenate([part.rand(rng) for part in parts], axis=-1)

    def _contains(self, array: Array) -> bool:
        values = array.astype(np.int64)
        if not bool(np.all((values == 0) | (values == 1))):
            return False
        ends = np.cumsum(self._nvec)
        starts = ends - self._nvec
        return all(bool(np.all(values[..., a:b].sum(axis=-1) == 1)) for a, b in zip(starts, ends))


def _check_categories(kind: str, dtype: np.dtype[Any], n: int) -> None:
    bounds = _int_range(dtype)
    if bounds is None:
        raise TypeError(f"{kind}: needs an integer or bool dtype, got {dtype}")
    if n < 1:
        raise ValueError(f"{kind}: n must be at least 1, got {n}")
    if n - 1 > bounds[1]:
        raise ValueError(
            f"{kind}: n = {n} does not fit dtype {dtype}, whose largest value is {bounds[1]}"
        )


class NonTensor(TensorSpec):
    """Non-tensor values (any Python object) of a shape: any value of the
    shape is in the spec.

    ``rand()`` and ``zero()`` give an object array of the shape holding
    ``0`` (as the Rust crate, which makes no random non-tensor).

    Args:
        shape: the shape (default ``()``).
    """

    def __init__(self, shape: ShapeLike = ()) -> None:
        self._shape = _to_shape(shape)

    def rand(self, rng: np.random.Generator | None = None) -> Array:
        """An object array of the shape holding ``0``."""
        return self.zero()

    def zero(self) -> Array:
        """An object array of the shape holding ``0``."""
        out = np.empty(self._shape, dtype=object)
        out.fill(0)
        return out

    def is_in(self, value: Any) -> bool:
        """True if ``value`` (as an object array) has the spec's shape."""
        if isinstance(value, (TensorDict, LazyStackedTensorDict)):
            return False
        try:
            shape = np.shape(np.asarray(value, dtype=object))
        except ValueError:
            return False
        return shape == self._shape


def _path(key: Any) -> tuple[str, ...]:
    if isinstance(key, str) and key:
        return (key,)
    if isinstance(key, tuple) and key and all(isinstance(part, str) and part for part in key):
        return key
    raise KeyError(f"a spec key is a non-empty string or tuple of them, not {key!r}")


_MISSING = object()


def _lookup(value: Any, name: str) -> Any:
    if isinstance(value, (TensorDict, Mapping)):
        return value.get(name, _MISSING)
    return _MISSING


class Composite(TensorSpec):
    """The spec of a tensordict (TorchRL's ``Composite``): a spec per key and
    a batch ``shape`` that every entry's shape starts with.

    It reads as a mapping: ``spec["observation"]``, ``spec["next",
    "reward"]`` (a tuple reaches a nested entry), ``keys()``, ``items()``,
    ``values()``, ``in``, ``len``. ``rand()`` and ``zero()`` give a
    :class:`~rlpool.TensorDict` whose batch size is ``shape``.

    Args:
        entries: a mapping of names to specs; a nested mapping becomes a
            nested composite of the same shape.
        shape: the batch shape (default ``()``).
        **specs: more entries, by name.

    Raises:
        ValueError: an entry whose shape does not start with ``shape``.
        TypeError: an entry that is not a spec.
    """

    def __init__(
        self,
        entries: Mapping[str, Any] | None = None,
        /,
        *,
        shape: ShapeLike = (),
        **specs: Any,
    ) -> None:
        self._shape = _to_shape(shape)
        self._entries: dict[str, TensorSpec] = {}
        for name, spec in [*(entries or {}).items(), *specs.items()]:
            if not isinstance(name, str) or not name:
                raise KeyError(f"Composite: a key is a non-empty string, not {name!r}")
            if isinstance(spec, Mapping):
                spec = Composite(spec, shape=self._shape)
            if not isinstance(spec, TensorSpec):
                raise TypeError(
                    f"Composite: the entry {name!r} is a {type(spec).__name__}, not a spec"
                )
            if spec.shape[: len(self._shape)] != self._shape:
                raise ValueError(
                    f"Composite: the spec at key {name!r} has shape {spec.shape}, which does "
                    f"not start with the composite's shape {self._shape}"
                )
            self._entries[name] = spec

    def _fields(self) -> list[tuple[str, Any]]:
        return [("shape", self._shape), ("entries", self._entries)]

    def __getitem__(self, key: NestedKey) -> Any:
        """The spec at ``key`` (a string, or a tuple for a nested entry): a
        :class:`TensorSpec` (typed ``Any``, as a tensordict's entries, so
        that ``spec["next"]["reward"].shape`` reads without casts)."""
        path = _path(key)
        node: TensorSpec = self
        for depth, part in enumerate(path):
            if isinstance(node, Stacked):
                return node[path[depth:]]
            if not isinstance(node, Composite):
                raise KeyError(
                    f"key {key!r}: the spec at {path[:depth]!r} is {type(node).__name__}, "
                    "not a composite"
                )
            if part not in node._entries:
                raise KeyError(f"key {key!r} not found; keys present: {list(node._entries)}")
            node = node._entries[part]
        return node

    def get(self, key: NestedKey, default: Any = None) -> Any:
        """The spec at ``key``, or ``default``."""
        try:
            return self[key]
        except KeyError:
            return default

    def __contains__(self, key: object) -> bool:
        try:
            self[key]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        """The top-level keys."""
        return iter(self._entries)

    def __len__(self) -> int:
        """The number of top-level entries (a nested composite counts
        once)."""
        return len(self._entries)

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list[NestedKey]:
        """The keys: top-level ones, or every nested one as a tuple with
        ``include_nested``; without any composite's own key with
        ``leaves_only``."""
        out: list[NestedKey] = []
        self._walk((), include_nested, leaves_only, out)
        return out

    def _walk(
        self,
        prefix: tuple[str, ...],
        include_nested: bool,
        leaves_only: bool,
        out: list[NestedKey],
    ) -> None:
        for name, spec in self._entries.items():
            key: NestedKey = (*prefix, name) if prefix else name
            nested = isinstance(spec, Composite)
            if not (nested and leaves_only):
                out.append(key)
            if nested and include_nested:
                assert isinstance(spec, Composite)
                spec._walk((*prefix, name), include_nested, leaves_only, out)

    def items(
        self, include_nested: bool = False, leaves_only: bool = False
    ) -> list[tuple[NestedKey, TensorSpec]]:
        """``(key, spec)`` pairs, with the keys of :meth:`keys`."""
        return [(key, self[key]) for key in self.keys(include_nested, leaves_only)]

    def values(self, include_nested: bool = False, leaves_only: bool = False) -> list[TensorSpec]:
        """The specs, in the order of :meth:`keys`."""
        return [self[key] for key in self.keys(include_nested, leaves_only)]

    def rand(self, rng: np.random.Generator | None = None) -> TensorDict:
        """A random :class:`~rlpool.TensorDict` in the spec, with ``shape``
        as batch size.

        Raises:
            ValueError: an entry is a lazy stack whose values do not stack
                into one array (sample ``spec[key][i]`` for each env).
        """
        generator = _rng(rng)
        return self._value(lambda spec: spec.rand(generator))

    def zero(self) -> TensorDict:
        """A :class:`~rlpool.TensorDict` of zeros, with ``shape`` as batch
        size (raises as :meth:`rand`)."""
        return self._value(lambda spec: spec.zero())

    def _value(self, make: Any) -> TensorDict:
        data: dict[str, Any] = {}
        for name, spec in self._entries.items():
            value = make(spec)
            if isinstance(value, LazyStackedTensorDict):
                raise ValueError(
                    f"the entry {name!r} is a lazy stack of composites that differ, whose "
                    "values make no single tensordict; sample each env's part instead"
                )
            data[name] = value
        return TensorDict(data, batch_size=self._shape)

    def is_in(self, value: Any) -> bool:
        """True if ``value`` (a :class:`~rlpool.TensorDict` whose batch size
        is ``shape``, or a mapping) holds a value in the spec at every key
        of the spec; keys the spec does not have are allowed."""
        if isinstance(value, TensorDict) and value.batch_size != self._shape:
            return False
        return self._holds(value)

    def _holds(self, value: Any) -> bool:
        if not isinstance(value, (TensorDict, Mapping)):
            return False
        for name, spec in self._entries.items():
            entry = _lookup(value, name)
            if entry is _MISSING:
                if isinstance(spec, Composite) and not spec.keys(True, True):
                    continue
                return False
            held = spec._holds(entry) if isinstance(spec, Composite) else spec.is_in(entry)
            if not held:
                return False
        return True

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}("]
        for name, spec in self._entries.items():
            inner = repr(spec).replace("\n", "\n    ")
            lines.append(f"    {name}: {inner},")
        lines.append(f"    shape={self._shape})")
        return "\n".join(lines)


class Stacked(TensorSpec):
    """A lazy stack of specs that differ, one part per env, along a new
    leading dim (TorchRL's stacked specs): what a pool with
    ``stack="lazy"`` (or ``"maybe_dense"``) has where its envs differ.

    ``spec[i]`` (an int) is env ``i``'s part; with a key, when every part is
    a composite, ``spec[key]`` is the stack of the parts' entries.
    ``shape`` is the number of parts followed by the dims their shapes
    share. ``rand()`` and ``zero()`` stack the parts' values: one array
    when the parts' arrays have one shape and dtype, a
    :class:`~rlpool.LazyStackedTensorDict` when the parts are composites.

    Args:
        parts: the specs, one per env (at least one).
    """

    def __init__(self, parts: Sequence[TensorSpec]) -> None:
        self._parts = list(parts)
        if not self._parts:
            raise ValueError("Stacked: cannot stack an empty list of specs")
        for i, part in enumerate(self._parts):
            if not isinstance(part, TensorSpec):
                raise TypeError(f"Stacked: part {i} is a {type(part).__name__}, not a spec")
        shared = self._parts[0].shape
        for part in self._parts[1:]:
            common = 0
            for a, b in zip(shared, part.shape):
                if a != b:
                    break
                common += 1
            shared = shared[:common]
        self._shape = (len(self._parts), *shared)

    @property
    def parts(self) -> list[TensorSpec]:
        """The parts, one per env."""
        return list(self._parts)

    def _fields(self) -> list[tuple[str, Any]]:
        return [("shape", self._shape), ("parts", self._parts)]

    def __len__(self) -> int:
        """The number of parts (envs)."""
        return len(self._parts)

    def __iter__(self) -> Iterator[TensorSpec]:
        """The parts."""
        return iter(self._parts)

    def __getitem__(self, index: int | NestedKey) -> Any:
        """Part ``index`` (an int), or the :class:`Stacked` of the parts'
        entries at a key (when every part is a composite)."""
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            return self._parts[int(index)]
        path = _path(index)
        entries: list[TensorSpec] = []
        for i, part in enumerate(self._parts):
            if not isinstance(part, (Composite, Stacked)):
                raise KeyError(f"key {index!r}: part {i} of this stack is not a composite")
            entries.append(part[path])
        return Stacked(entries)

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list[NestedKey]:
        """The keys every part has (the parts are composites), in the first
        part's order."""
        composites = [part for part in self._parts if isinstance(part, Composite)]
        if len(composites) != len(self._parts):
            return []
        first, *rest = (part.keys(include_nested, leaves_only) for part in composites)
        return [key for key in first if all(key in other for other in rest)]

    def rand(self, rng: np.random.Generator | None = None) -> Any:
        """The parts' random values, stacked (see the class).

        Raises:
            ValueError: parts whose values do not stack (arrays of different
                shapes or dtypes, or a mix of kinds).
        """
        generator = _rng(rng)
        return self._stack([part.rand(generator) for part in self._parts])

    def zero(self) -> Any:
        """The parts' zeros, stacked (raises as :meth:`rand`)."""
        return self._stack([part.zero() for part in self._parts])

    def _stack(self, values: list[Any]) -> Any:
        if all(isinstance(v, TensorDict) for v in values):
            return LazyStackedTensorDict(values)
        if all(isinstance(v, LazyStackedTensorDict) for v in values):
            return LazyStackedTensorDict([td for v in values for td in v])
        arrays = [v for v in values if isinstance(v, np.ndarray)]
        if len(arrays) != len(values):
            raise ValueError("Stacked: the parts give values of different kinds (arrays and not)")
        first = arrays[0]
        for i, array in enumerate(arrays[1:], start=1):
            if array.shape != first.shape or array.dtype != first.dtype:
                if all(isinstance(part, NonTensor) for part in self._parts):
                    out = np.empty(len(arrays), dtype=object)
                    out[:] = [*arrays]
                    return out
                raise ValueError(
                    f"Stacked: env {i} gives shape {array.shape} and dtype {array.dtype} but "
                    f"env 0 gives shape {first.shape} and dtype {first.dtype}; sample each "
                    "env's part (spec[i]) instead"
                )
        return np.stack(arrays)

    def is_in(self, value: Any) -> bool:
        """True if ``value`` has one row per part (an array or tensordict
        along its first dim, a :class:`~rlpool.LazyStackedTensorDict` or a
        list) and row ``i`` is in part ``i``."""
        if isinstance(value, Mapping):
            return False
        try:
            rows = len(value)
        except TypeError:
            return False
        if rows != len(self._parts):
            return False
        return all(part.is_in(value[i]) for i, part in enumerate(self._parts))

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}("]
        for i, part in enumerate(self._parts):
            inner = repr(part).replace("\n", "\n    ")
            lines.append(f"    {i}: {inner},")
        lines.append(f"    shape={self._shape})")
        return "\n".join(lines)


def from_description(desc: Mapping[str, Any]) -> TensorSpec:
    """The spec that ``desc`` describes: the plain data the native module
    makes from a Rust spec (a dict with ``"kind"``, ``"shape"``,
    ``"dtype"`` and the kind's own fields: ``"low"``/``"high"``, ``"n"``,
    ``"nvec"``, ``"entries"`` for a composite, ``"parts"`` for a stack).

    Raises:
        ValueError: an unknown kind, or a description that is not a valid
            spec (the message says which).
    """
    if not isinstance(desc, Mapping) or "kind" not in desc:
        raise ValueError(f"a spec description is a dict with a 'kind', got {desc!r}")
    kind = desc["kind"]
    try:
        shape = tuple(desc["shape"])
        dtype = desc["dtype"]
        if kind == "unbounded":
            return Unbounded(shape, dtype)
        if kind == "bounded":
            return Bounded(desc["low"], desc["high"], shape, dtype)
        if kind == "categorical":
            return Categorical(desc["n"], shape, dtype)
        if kind == "one_hot":
            return OneHot(desc["n"], shape, dtype)
        if kind == "binary":
            return Binary(shape=shape, dtype=dtype)
        if kind == "multi_categorical":
            return MultiCategorical(desc["nvec"], shape, dtype)
        if kind == "non_tensor":
            return NonTensor(shape)
        if kind == "composite":
            entries = {name: from_description(d) for name, d in desc["entries"].items()}
            return Composite(entries, shape=shape)
        if kind == "stacked":
            return Stacked([from_description(d) for d in desc["parts"]])
    except KeyError as err:
        raise ValueError(f"a {kind!r} spec description has no {err}") from None
    raise ValueError(f"unknown spec kind {kind!r}")


def env_specs(name: str, kwargs: Mapping[str, Any] | None = None) -> dict[str, Composite]:
    """The specs of one registered env, without a pool: a dict with
    ``"full_action_spec"``, ``"full_observation_spec"``,
    ``"full_reward_spec"``, ``"full_done_spec"`` and ``"full_state_spec"``,
    each a :class:`Composite` whose shape is the env's batch size.

    Args:
        name: a registered env name (``"CartPole-v1"``).
        kwargs: the env's keyword arguments (as one env's
            ``create_env_kwargs``).

    Raises:
        rlpool.StartError: the env cannot be built (an unknown name, a
            keyword argument it does not take or whose value is wrong); the
            message names the env.
        rlpool.InvalidType: a keyword value of a type no env takes.
    """
    from rlpool import _native

    described = _native.env_specs(name, None if kwargs is None else dict(kwargs))
    out: dict[str, Composite] = {}
    for key, desc in described.items():
        spec = from_description(desc)
        assert isinstance(spec, Composite)
        out[key] = spec
    return out
