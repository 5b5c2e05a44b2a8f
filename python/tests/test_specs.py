"""rlpool.specs: the registered envs' specs read from Rust, and every spec
kind's shape, dtype, domain, sampling, zeros and containment."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rlpool
from rlpool import _native
from rlpool.specs import (
    Binary,
    Bounded,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    Stacked,
    TensorSpec,
    Unbounded,
    env_specs,
    from_description,
)

DRAWS = 1000
F32_MAX = float(np.finfo(np.float32).max)
FULL = (
    "full_action_spec",
    "full_observation_spec",
    "full_reward_spec",
    "full_done_spec",
    "full_state_spec",
)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


def assert_samples_in(spec: TensorSpec, rng: np.random.Generator, draws: int = DRAWS) -> list[Any]:
    values = [spec.rand(rng) for _ in range(draws)]
    for value in values:
        assert spec.is_in(value), (spec, value)
    return values


def assert_standard_tail(specs: dict[str, Composite]) -> None:
    """The reward, done and state specs every reference env shares."""
    assert specs["full_reward_spec"].keys() == ["reward"]
    assert specs["full_reward_spec"]["reward"] == Unbounded((1,), np.float32)
    done = specs["full_done_spec"]
    assert done.keys() == ["done", "terminated", "truncated"]
    for key in done:
        assert done[key] == Binary(shape=(1,), dtype=np.bool_)
    assert specs["full_state_spec"].keys() == []
    assert len(specs["full_state_spec"]) == 0


# -- the registered envs, read from Rust ---------------------------------


@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1", "CountingEnv", "LatencyEnv"])
def test_every_env_gives_five_composites_of_its_batch_size(name: str) -> None:
    raw = _native.env_specs(name)
    assert sorted(raw) == sorted(FULL)
    specs = env_specs(name)
    for key in FULL:
        assert raw[key]["kind"] == "composite"
        assert raw[key]["shape"] == ()
        assert raw[key]["dtype"] is None
        assert isinstance(specs[key], Composite)
        assert specs[key].shape == ()
        assert specs[key].dtype is None
    assert_standard_tail(specs)


def test_cartpole(rng: np.random.Generator) -> None:
    specs = env_specs("CartPole-v1")
    action = specs["full_action_spec"]["action"]
    assert isinstance(action, Categorical)
    assert (action.shape, action.dtype, action.n) == ((1,), np.dtype(np.int64), 2)
    obs = specs["full_observation_spec"]["observation"]
    assert isinstance(obs, Bounded)
    assert (obs.shape, obs.dtype) == ((4,), np.dtype(np.float32))
    # Gymnasium's: twice the thresholds (2.4 and 12 degrees), and the
    # largest finite f32 for the velocities; rounded to f32 by Rust.
    high = np.array([4.8, F32_MAX, 2 * 12 * 2 * np.pi / 360, F32_MAX], dtype=np.float32)
    np.testing.assert_array_equal(obs.high, high)
    np.testing.assert_array_equal(obs.low, -high)
    values = np.stack(assert_samples_in(obs, rng))
    assert np.all(np.abs(values) <= high)
    assert set(np.unique(np.stack(assert_samples_in(action, rng)))) == {0, 1}
    assert obs.is_in(obs.zero())


def test_pendulum(rng: np.random.Generator) -> None:
    raw = _native.env_specs("Pendulum-v1")
    action_desc = raw["full_action_spec"]["entries"]["action"]
    assert action_desc["kind"] == "bounded"
    assert action_desc["dtype"] == "float32"
    assert isinstance(action_desc["low"], np.ndarray)
    assert action_desc["low"].dtype == np.float32
    np.testing.assert_array_equal(action_desc["low"], [-2.0])
    np.testing.assert_array_equal(action_desc["high"], [2.0])

    specs = env_specs("Pendulum-v1")
    action = specs["full_action_spec"]["action"]
    assert action == Bounded(-2.0, 2.0, (1,), np.float32)
    obs = specs["full_observation_spec"]["observation"]
    assert isinstance(obs, Bounded)
    np.testing.assert_array_equal(obs.low, np.array([-1, -1, -8], dtype=np.float32))
    np.testing.assert_array_equal(obs.high, np.array([1, 1, 8], dtype=np.float32))
    actions = np.stack(assert_samples_in(action, rng))
    # Uniform in [-2, 2]: both ends are reached closely.
    assert actions.min() < -1.9
    assert actions.max() > 1.9
    assert_samples_in(obs, rng)
    assert not action.is_in(np.array([2.5], dtype=np.float32))
    assert not action.is_in(np.array([np.nan], dtype=np.float32))


def test_counting_env(rng: np.random.Generator) -> None:
    specs = env_specs("CountingEnv", {"max_steps": 3})
    action = specs["full_action_spec"]["action"]
    assert action == Binary(shape=(1,), dtype=np.int64)
    obs = specs["full_observation_spec"]["observation"]
    assert obs == Unbounded((1,), np.int32)
    assert set(np.unique(np.stack(assert_samples_in(action, rng)))) == {0, 1}
    counts = np.stack(assert_samples_in(obs, rng))
    assert counts.dtype == np.int32
    assert counts.min() >= -10
    assert counts.max() <= 10


def test_latency_env_takes_its_kwargs() -> None:
    specs = env_specs("LatencyEnv", {"obs_dim": 7, "step_us": 0})
    obs = specs["full_observation_spec"]["observation"]
    assert obs == Unbounded((7,), np.float32)
    action = specs["full_action_spec"]["action"]
    assert action == Categorical(2, (1,), np.int64)


@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1", "CountingEnv", "LatencyEnv"])
def test_composite_rand_and_zero_are_tensordicts_in_the_spec(
    name: str, rng: np.random.Generator
) -> None:
    for key, spec in env_specs(name).items():
        for _ in range(100):
            td = spec.rand(rng)
            assert isinstance(td, rlpool.TensorDict)
            assert td.batch_size == ()
            assert sorted(map(str, td.keys(True, True))) == sorted(map(str, spec.keys(True, True)))
            assert spec.is_in(td), key
            assert spec.is_in(td.to_dict()), key
        zero = spec.zero()
        for leaf_key, leaf in spec.items(include_nested=True, leaves_only=True):
            assert zero[leaf_key].shape == leaf.shape
            assert zero[leaf_key].dtype == leaf.dtype
            assert not zero[leaf_key].any()


def test_seeded_draws_repeat() -> None:
    spec = env_specs("CartPole-v1")["full_observation_spec"]
    first = spec.rand(np.random.default_rng(7))
    again = spec.rand(np.random.default_rng(7))
    other = spec.rand(np.random.default_rng(8))
    assert first == again
    assert first != other


# -- errors --------------------------------------------------------------


def test_an_unknown_env_names_itself() -> None:
    with pytest.raises(rlpool.StartError, match="Cartpole") as info:
        env_specs("Cartpole")
    # The message lists what is registered.
    assert "CartPole-v1" in str(info.value)
    with pytest.raises(rlpool.StartError, match="NoSuchEnv"):
        _native.env_specs("NoSuchEnv")


def test_bad_kwargs_name_the_env() -> None:
    with pytest.raises(rlpool.StartError, match=r"CartPole-v1.*gravity"):
        env_specs("CartPole-v1", {"gravity": 1.0})
    with pytest.raises(rlpool.StartError, match=r"Pendulum-v1.*\bg\b"):
        env_specs("Pendulum-v1", {"g": "ten"})
    with pytest.raises(rlpool.StartError, match=r"LatencyEnv.*mode"):
        env_specs("LatencyEnv", {"mode": "nap"})
    with pytest.raises(rlpool.InvalidType, match=r"CountingEnv.*max_steps") as info:
        env_specs("CountingEnv", {"max_steps": object()})
    assert isinstance(info.value, TypeError)
    with pytest.raises(rlpool.InvalidType, match="CountingEnv"):
        _native.env_specs("CountingEnv", {1: 2})


def test_descriptions_that_are_not_specs() -> None:
    with pytest.raises(ValueError, match="unknown spec kind 'tensor'"):
        from_description({"kind": "tensor", "shape": (), "dtype": "float32"})
    with pytest.raises(ValueError, match="'bounded' spec description has no 'low'"):
        from_description({"kind": "bounded", "shape": (1,), "dtype": "float32"})
    with pytest.raises(ValueError, match="a dict with a 'kind'"):
        from_description({"shape": ()})
    with pytest.raises(TypeError, match="complex64"):
        from_description({"kind": "unbounded", "shape": (), "dtype": "complex64"})


# -- every kind, built directly ---------------------------------------------


def describe(kind: str, shape: tuple[int, ...], dtype: str | None, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "shape": shape, "dtype": dtype, **fields}


def test_unbounded(rng: np.random.Generator) -> None:
    floats = from_description(describe("unbounded", (2, 3), "float64"))
    assert floats == Unbounded((2, 3), np.float64)
    values = np.stack(assert_samples_in(floats, rng))
    assert abs(values.mean()) < 0.1  # standard normal
    assert floats.is_in(np.full((2, 3), np.nan))  # any value of the shape and dtype
    assert not floats.is_in(np.zeros((2, 3), dtype=np.float32))
    assert not floats.is_in(np.zeros((3, 2)))
    small = Unbounded((5,), np.uint8)
    values = np.stack(assert_samples_in(small, rng))
    assert (values.min(), values.max()) == (0, 10)  # -10..=10 cut to u8
    flags = Unbounded((4,), "bool")
    assert set(np.unique(np.stack(assert_samples_in(flags, rng)))) == {False, True}
    assert small.zero().tolist() == [0] * 5


def test_bounded_per_element_and_integer_bounds(rng: np.random.Generator) -> None:
    low = np.array([0, -5, 7], dtype=np.int16)
    high = np.array([1, 5, 7], dtype=np.int16)
    spec = from_description(describe("bounded", (3,), "int16", low=low, high=high))
    assert isinstance(spec, Bounded)
    assert spec == Bounded(low, high)  # dtype and shape from the arrays
    values = np.stack(assert_samples_in(spec, rng))
    assert values.dtype == np.int16
    np.testing.assert_array_equal(values.min(axis=0), low)  # inclusive bounds
    np.testing.assert_array_equal(values.max(axis=0), high)
    assert not spec.is_in(np.array([0, 6, 7], dtype=np.int16))
    assert not spec.is_in(np.array([0, 0, 7], dtype=np.int64))
    assert not spec.is_in(spec.zero())  # 0 is outside [7, 7]
    with pytest.raises(ValueError, match=r"element 1: low 2 is greater than high 1"):
        Bounded([0, 2], [1, 1], dtype=np.int8)
    with pytest.raises(ValueError, match="whole numbers"):
        Bounded(-2.5, 2, (1,), np.int64)
    with pytest.raises(ValueError, match="outside the range"):
        Bounded(0, 256, (1,), np.uint8)
    with pytest.raises(ValueError, match="NaN"):
        Bounded(np.nan, 1.0, (1,))
    with pytest.raises(TypeError, match="bool"):
        Bounded(0, 1, (1,), np.bool_)
    extremes = Bounded(np.iinfo(np.int64).min, 2.0**63, (4,), np.int64)
    assert int(extremes.high[0]) == np.iinfo(np.int64).max
    assert_samples_in(extremes, rng, 100)


def test_bounded_with_infinite_bounds(rng: np.random.Generator) -> None:
    inf = np.inf
    spec = Bounded([0.0, -inf, -inf, 3.0], [inf, 0.0, inf, 3.0], dtype=np.float32)
    assert spec.shape == (4,)
    values = np.stack(assert_samples_in(spec, rng))
    assert np.all(np.isfinite(values))
    assert np.all(values[:, 0] >= 0)
    assert np.all(values[:, 1] <= 0)
    assert np.all(values[:, 3] == 3)
    wide = Bounded(-np.finfo(np.float64).max, np.finfo(np.float64).max, (8,), np.float64)
    assert np.all(np.isfinite(np.stack(assert_samples_in(wide, rng, 100))))


def test_categorical(rng: np.random.Generator) -> None:
    spec = from_description(describe("categorical", (2, 2), "uint8", n=5))
    assert spec == Categorical(5, (2, 2), np.uint8)
    values = np.stack(assert_samples_in(spec, rng))
    assert set(np.unique(values)) == {0, 1, 2, 3, 4}
    assert not spec.is_in(np.full((2, 2), 5, dtype=np.uint8))
    assert spec.is_in(spec.zero())
    flag = Categorical(1, (3,), np.bool_)
    assert not np.stack(assert_samples_in(flag, rng)).any()
    assert not flag.is_in(np.ones(3, dtype=np.bool_))
    with pytest.raises(ValueError, match="n = 300 does not fit dtype uint8"):
        Categorical(300, (), np.uint8)
    with pytest.raises(ValueError, match="at least 1"):
        Categorical(0)
    with pytest.raises(TypeError, match="float32"):
        Categorical(2, (), np.float32)


def test_one_hot(rng: np.random.Generator) -> None:
    spec = from_description(describe("one_hot", (3, 4), "bool", n=4))
    assert spec == OneHot(4, (3, 4))
    for value in assert_samples_in(spec, rng):
        assert value.dtype == np.bool_
        np.testing.assert_array_equal(value.sum(axis=-1), [1, 1, 1])
    hits = np.stack([spec.rand(rng) for _ in range(200)]).sum(axis=(0, 1))
    assert np.all(hits > 0)  # every category is drawn
    assert not spec.is_in(spec.zero())
    two = np.zeros((3, 4), dtype=np.bool_)
    two[:, 0] = two[0, 1] = True
    assert not spec.is_in(two)
    ints = OneHot(3, dtype=np.int64)
    assert ints.is_in(np.array([0, 1, 0]))
    assert not ints.is_in(np.array([0, 2, -1]))
    with pytest.raises(ValueError, match="last dim"):
        OneHot(3, (2, 4))


def test_binary(rng: np.random.Generator) -> None:
    spec = from_description(describe("binary", (6,), "int8"))
    assert spec == Binary(6, dtype=np.int8)
    values = np.stack(assert_samples_in(spec, rng))
    assert set(np.unique(values)) == {0, 1}
    assert not spec.is_in(np.full(6, 2, dtype=np.int8))
    assert spec.is_in(spec.zero())


def test_multi_categorical(rng: np.random.Generator) -> None:
    spec = from_description(describe("multi_categorical", (5, 3), "int32", nvec=(2, 3, 1)))
    assert isinstance(spec, MultiCategorical)
    assert spec == MultiCategorical([2, 3, 1], (5, 3), np.int32)
    assert spec.nvec.tolist() == [2, 3, 1]
    values = np.stack(assert_samples_in(spec, rng))
    np.testing.assert_array_equal(values.max(axis=(0, 1)), [1, 2, 0])
    bad = np.zeros((5, 3), dtype=np.int32)
    bad[4, 2] = 1
    assert not spec.is_in(bad)
    assert spec.is_in(spec.zero())
    empty = MultiCategorical([], (3, 0))
    assert empty.rand(rng).shape == (3, 0)
    with pytest.raises(ValueError, match=r"nvec\[1\] must be at least 1"):
        MultiCategorical([2, 0])


def test_non_tensor() -> None:
    spec = from_description(describe("non_tensor", (2,), None))
    assert spec == NonTensor((2,))
    assert spec.dtype is None
    assert spec.zero().tolist() == [0, 0]
    assert spec.is_in(spec.rand())
    assert spec.is_in(["a", {"any": "object"}])
    assert not spec.is_in(["a"])


def nested_description() -> dict[str, Any]:
    leaf = describe("unbounded", (4, 3), "float32")
    flag = describe("binary", (4, 1), "bool")
    return describe(
        "composite",
        (4,),
        None,
        entries={
            "observation": leaf,
            "next": describe("composite", (4,), None, entries={"done": flag, "obs": leaf}),
            "info": describe("composite", (4,), None, entries={}),
        },
    )


def test_composite_reads_as_a_nested_mapping(rng: np.random.Generator) -> None:
    spec = from_description(nested_description())
    assert isinstance(spec, Composite)
    assert spec.shape == (4,)
    assert spec.keys() == ["observation", "next", "info"]
    assert spec.keys(include_nested=True) == [
        "observation",
        "next",
        ("next", "done"),
        ("next", "obs"),
        "info",
    ]
    assert spec.keys(include_nested=True, leaves_only=True) == [
        "observation",
        ("next", "done"),
        ("next", "obs"),
    ]
    assert spec.keys(leaves_only=True) == ["observation"]
    assert spec["next", "done"] == Binary(shape=(4, 1))
    assert spec["next"]["obs"] == spec["observation"]
    assert ("next", "obs") in spec
    assert ("next", "nope") not in spec
    assert spec.get("nope") is None
    assert [k for k, _ in spec.items(True, True)] == spec.keys(True, True)
    with pytest.raises(KeyError, match=r"keys present: \['done', 'obs'\]"):
        spec["next", "reward"]
    with pytest.raises(KeyError, match="not a composite"):
        spec["observation", "x"]

    td = spec.rand(rng)
    assert isinstance(td, rlpool.TensorDict)
    assert td.batch_size == (4,)
    assert td["next", "obs"].shape == (4, 3)
    assert spec.is_in(td)
    assert spec.is_in(td.exclude("info"))  # an empty composite needs no entry
    assert not spec.is_in(td.exclude(("next", "done")))
    assert not spec.is_in(rlpool.TensorDict(td.to_dict(), batch_size=()))
    bad = td.clone()
    bad["next", "done"] = np.full((4, 1), 2, dtype=np.bool_).view(np.uint8)
    assert not spec.is_in(bad)
    zero = spec.zero()
    assert zero.batch_size == (4,)
    assert spec.is_in(zero)
    assert spec.is_in({**td.to_dict(), "extra": np.zeros(1)})  # extra keys are allowed


def test_composite_built_in_python() -> None:
    spec = Composite(
        {"next": {"reward": Unbounded((2, 1))}},
        shape=(2,),
        action=Categorical(3, (2,)),
    )
    assert spec.keys(True, True) == [("next", "reward"), "action"]
    assert isinstance(spec["next"], Composite)
    assert spec["next"].shape == (2,)
    with pytest.raises(ValueError, match=r"'obs' has shape \(3,\).*shape \(2,\)"):
        Composite({"obs": Unbounded((3,))}, shape=(2,))
    with pytest.raises(TypeError, match="not a spec"):
        Composite({"obs": 3})


def test_stacked_leaves(rng: np.random.Generator) -> None:
    low = describe(
        "bounded", (2,), "float32", low=np.zeros(2, np.float32), high=np.ones(2, np.float32)
    )
    cat = describe("unbounded", (2,), "float32")
    spec = from_description(describe("stacked", (2, 2), None, parts=[low, cat]))
    assert isinstance(spec, Stacked)
    assert spec.shape == (2, 2)
    assert len(spec) == 2
    assert spec[0] == Bounded(0.0, 1.0, (2,))
    values = assert_samples_in(spec, rng)
    assert values[0].shape == (2, 2)
    assert not spec.is_in(np.full((2, 2), 5.0, dtype=np.float32))
    ragged = Stacked([Unbounded((4,)), Unbounded((3,))])
    assert ragged.shape == (2,)
    with pytest.raises(ValueError, match=r"env 1 gives shape \(3,\)"):
        ragged.rand(rng)
    assert ragged.is_in([np.zeros(4, np.float32), np.zeros(3, np.float32)])


def test_stacked_composites_are_lazy(rng: np.random.Generator) -> None:
    cartpole = env_specs("CartPole-v1")["full_observation_spec"]
    pendulum = env_specs("Pendulum-v1")["full_observation_spec"]
    spec = Stacked([cartpole, pendulum, cartpole])
    assert spec.shape == (3,)
    assert spec.keys() == ["observation"]
    assert spec["observation"][1] == pendulum["observation"]
    batch = spec.rand(rng)
    assert isinstance(batch, rlpool.LazyStackedTensorDict)
    assert [td["observation"].shape for td in batch] == [(4,), (3,), (4,)]
    for _ in range(100):
        assert spec.is_in(spec.rand(rng))
    assert not spec.is_in(batch[:2])
    # In a composite, a stack of differing composites has no single value.
    outer = Composite({"x": spec}, shape=(3,))
    assert outer["x", "observation"][0] == cartpole["observation"]
    with pytest.raises(ValueError, match="'x' is a lazy stack"):
        outer.rand(rng)


def test_equality_and_repr() -> None:
    assert Unbounded((1,)) != Unbounded((1,), np.float64)
    assert Categorical(2, (1,)) != Categorical(3, (1,))
    assert Categorical(2, (1,)) != Binary(1, dtype=np.int64)
    assert Bounded(0.0, 1.0, (2,)) != Bounded([0.0, 0.5], 1.0)
    assert (
        repr(Bounded(-2.0, 2.0, (1,))) == "Bounded(shape=(1,), dtype=float32, low=-2.0, high=2.0)"
    )
    assert repr(Categorical(2, (1,))) == "Categorical(shape=(1,), dtype=int64, n=2)"
    assert (
        repr(MultiCategorical([2, 3])) == "MultiCategorical(shape=(2,), dtype=int64, nvec=[2, 3])"
    )
    assert (
        repr(Composite(a=NonTensor())) == "Composite(\n    a: NonTensor(shape=()),\n    shape=())"
    )
    text = repr(env_specs("Pendulum-v1")["full_observation_spec"])
    assert "low=[-1., -1., -8.]" in text
    with pytest.raises(TypeError):
        hash(Unbounded())


def test_bounds_are_read_only() -> None:
    spec = env_specs("Pendulum-v1")["full_action_spec"]["action"]
    assert isinstance(spec, Bounded)
    with pytest.raises(ValueError, match="read-only"):
        spec.low[0] = 0.0
    value = spec.rand()
    value[0] = 1.0  # values are the caller's


def test_multi_one_hot(rng: np.random.Generator) -> None:
    """One hot element per group (rlpool.torchrl's counterpart of TorchRL's
    MultiOneHot; the Rust specs have no such kind)."""
    spec = MultiOneHot([2, 3], shape=(4, 5))
    value = spec.rand(rng)
    assert value.shape == (4, 5)
    assert value.dtype == np.bool_
    assert spec.is_in(value)
    assert (value[:, :2].sum(-1) == 1).all()
    assert (value[:, 2:].sum(-1) == 1).all()
    assert not spec.is_in(spec.zero())
    assert spec == MultiOneHot([2, 3], shape=(4, 5))
    with pytest.raises(ValueError, match=r"sum\(nvec\) = 5"):
        MultiOneHot([2, 3], shape=(4,))
    with pytest.raises(ValueError, match=r"nvec\[1\]"):
        MultiOneHot([2, 0])
    with pytest.raises(TypeError, match="nvec"):
        MultiOneHot([])
