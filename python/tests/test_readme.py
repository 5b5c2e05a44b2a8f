"""The README's Python code runs as written: every ```python block of the
repository's README.md is executed, each in a fresh namespace, so that the
quick start never goes stale."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def _python_blocks() -> list[tuple[int, str]]:
    """The README's ```python blocks, each with the line its code starts on."""
    text = README.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, match.start(1)) + 1, match.group(1)) for match in _FENCE.finditer(text)
    ]


_BLOCKS = _python_blocks()


def test_readme_has_python_code() -> None:
    assert _BLOCKS, f"{README} has no ```python block: where did the quick start go?"


@pytest.mark.parametrize(
    ("line", "code"), _BLOCKS, ids=[f"README.md:{line}" for line, _ in _BLOCKS]
)
def test_readme_block_runs(line: int, code: str) -> None:
    # Compiled with blank lines in front, so that a traceback names the
    # README's own line numbers.
    compiled = compile("\n" * (line - 1) + code, str(README), "exec")
    exec(compiled, {"__name__": "__readme__"})
