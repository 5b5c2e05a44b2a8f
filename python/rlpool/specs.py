"""Specs: what the envs take and give (placeholder until the specs module lands)."""

from __future__ import annotations

from typing import Any

__all__ = ["Composite", "from_description"]


class Composite:
    """A placeholder."""

    def keys(self, include_nested: bool = False, leaves_only: bool = False) -> list[Any]:
        raise NotImplementedError

    def __getitem__(self, key: Any) -> Any:
        raise NotImplementedError

    def rand(self, rng: Any = None) -> Any:
        raise NotImplementedError


def from_description(desc: Any) -> Composite:
    raise NotImplementedError
