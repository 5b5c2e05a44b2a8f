"""rlpool: an asynchronous pool of reinforcement-learning environments with a Rust core."""

from rlpool._native import __version__

__all__ = ["__version__"]
