"""Specs converted both ways between TorchRL's kinds and rlpool's, kind by
kind: each TorchRL spec goes to rlpool's and back to an equal TorchRL spec,
and each rlpool spec goes to TorchRL's and back to an equal rlpool spec."""

from __future__ import annotations

import numpy as np
import pytest
import torch
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

from rlpool import specs as rl
from rlpool.errors import InvalidType
from rlpool.torchrl import from_torchrl_spec, to_torchrl_spec

CASES = {
    "unbounded": (
        Unbounded(shape=(3,), dtype=torch.float32),
        rl.Unbounded((3,), np.float32),
    ),
    "unbounded-int": (
        Unbounded(shape=(2, 2), dtype=torch.int64),
        rl.Unbounded((2, 2), np.int64),
    ),
    "bounded": (
        Bounded(low=-1.0, high=2.0, shape=(2,), dtype=torch.float32),
        rl.Bounded(-1.0, 2.0, (2,), np.float32),
    ),
    "bounded-int": (
        Bounded(low=0, high=9, shape=(1,), dtype=torch.int32),
        rl.Bounded(0, 9, (1,), np.int32),
    ),
    "categorical": (
        Categorical(4, shape=(1,), dtype=torch.int64),
        rl.Categorical(4, (1,), np.int64),
    ),
    "one-hot": (OneHot(3, shape=(3,), dtype=torch.bool), rl.OneHot(3, (3,), np.bool_)),
    "binary": (Binary(n=2, shape=(2,), dtype=torch.int8), rl.Binary(shape=(2,), dtype=np.int8)),
    "multi-categorical": (
        MultiCategorical([2, 3], shape=(2,), dtype=torch.int64),
        rl.MultiCategorical([2, 3], (2,), np.int64),
    ),
    "multi-one-hot": (
        MultiOneHot([2, 3], shape=(5,), dtype=torch.bool),
        rl.MultiOneHot([2, 3], (5,), np.bool_),
    ),
    "non-tensor": (NonTensor(shape=(2,)), rl.NonTensor((2,))),
    "composite": (
        Composite(
            observation=Unbounded(shape=(4, 3)),
            nested=Composite(flag=Binary(n=1, shape=(4, 1), dtype=torch.bool), shape=(4,)),
            shape=(4,),
        ),
        rl.Composite(
            {
                "observation": rl.Unbounded((4, 3)),
                "nested": rl.Composite({"flag": rl.Binary(shape=(4, 1))}, shape=(4,)),
            },
            shape=(4,),
        ),
    ),
}


@pytest.mark.parametrize("kind", list(CASES))
def test_torchrl_to_rlpool_and_back(kind):
    theirs, ours = CASES[kind]
    converted = from_torchrl_spec(theirs)
    assert type(converted) is type(ours)
    assert converted.shape == ours.shape
    if kind != "non-tensor":
        assert converted == ours
    back = to_torchrl_spec(converted)
    assert type(back) is type(theirs)
    if kind == "non-tensor":
        assert back.shape == theirs.shape
    else:
        assert back == theirs


@pytest.mark.parametrize("kind", list(CASES))
def test_rlpool_to_torchrl_and_back(kind):
    theirs, ours = CASES[kind]
    converted = to_torchrl_spec(ours)
    assert type(converted) is type(theirs)
    if kind != "non-tensor":
        assert converted == theirs
        assert from_torchrl_spec(converted) == ours


@pytest.mark.parametrize("kind", [k for k in CASES if k not in ("non-tensor", "composite")])
def test_values_of_one_are_in_the_other(kind):
    """A value drawn from one side's spec is in the other side's."""
    theirs, ours = CASES[kind]
    assert theirs.is_in(torch.as_tensor(ours.rand(np.random.default_rng(0))))
    assert ours.is_in(theirs.rand().numpy())


def test_stacked_specs_that_differ():
    """A lazy stack of different parts becomes rlpool's Stacked and back."""
    parts = [Unbounded(shape=(2,)), Unbounded(shape=(3,))]
    stacked = torch.stack(parts, dim=0)
    converted = from_torchrl_spec(stacked)
    assert isinstance(converted, rl.Stacked)
    assert [p.shape for p in converted.parts] == [(2,), (3,)]
    back = to_torchrl_spec(converted)
    assert back[0] == parts[0]
    assert back[1] == parts[1]


def test_unknown_kinds_are_typed_errors():
    class Strange(rl.TensorSpec):
        _shape = ()

        def rand(self, rng=None):
            return None

        def zero(self):
            return None

        def is_in(self, value):
            return False

    with pytest.raises(InvalidType, match="Strange"):
        to_torchrl_spec(Strange())
    with pytest.raises(InvalidType, match="object"):
        from_torchrl_spec(object.__new__(object))
