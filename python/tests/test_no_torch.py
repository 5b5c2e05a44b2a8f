"""`import rlpool` never imports torch, tensordict or torchrl: they are the
optional frameworks of `rlpool.torchrl` alone (checked in a fresh
interpreter, since this one may have imported them already)."""

from __future__ import annotations

import subprocess
import sys


def test_import_rlpool_imports_no_torch() -> None:
    code = (
        "import sys, rlpool, rlpool.specs, rlpool.gymnasium, rlpool._torchrl_env\n"
        "with rlpool.AsyncEnvPool(['CartPole-v1'] * 2) as pool:\n"
        "    pool.step(pool.rand_action())\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'tensordict', 'torchrl'))\n"
        "print(loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout
