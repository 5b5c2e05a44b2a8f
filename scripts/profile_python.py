"""A fixed amount of pool work driven from Python, for profilers: the
Python twin of `pool/examples/profile_pool.rs`'s `sync_samr` mode, so that
instruction counts (`valgrind --tool=callgrind --separate-threads=yes`, at
two iteration counts, the difference divided by the env-steps in between)
give the Python layer's cost per env-step beside the Rust one's.

Run (with the package installed, built in release):
`python scripts/profile_python.py 64 1000` (env count, iterations); the
actions are drawn before the loop, so that numpy's draw is not counted.
"""

import sys

import numpy as np

import rlpool


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    rng = np.random.default_rng(0)
    drawn = [{"action": rng.integers(0, 2, size=(n, 1))} for _ in range(16)]
    with rlpool.AsyncEnvPool(["CartPole-v1"] * n, backend="threading") as pool:
        pool.reset()
        for i in range(iters):
            pool.step_and_maybe_reset(drawn[i % 16])


if __name__ == "__main__":
    main()
