//! `cargo xtask test-torchrl`: `rlpool.torchrl` against TorchRL itself.
//!
//! 1. Its own virtual environment, `target/torchrl/venv`, made with
//!    `$PYTHON` (else `python3`) `-m venv` from the pinned
//!    `python/requirements-torchrl.txt` (torch, tensordict, torchrl,
//!    gymnasium, maturin, pytest: several GB from PyPI the first time, with
//!    bytecode compiled at install since every worker process imports torch),
//!    reused while that file and the interpreter stay the same.
//! 2. The package built from this tree by that environment's maturin (debug,
//!    feature `test-envs`) into `target/torchrl/wheels` and installed.
//! 3. The example of `rlpool.torchrl`'s docstring (which `test-all` skips:
//!    its environment has no torch), then pytest on `python/tests_torchrl`
//!    with the arguments given.
//!
//! Never part of `cargo xtask test-all`.

use crate::python::Venv;
use crate::step;

/// `cargo xtask test-torchrl [pytest arguments...]`.
pub(crate) fn command(pytest_args: &[String]) -> Result<(), String> {
    crate::python::suite("test-torchrl", Venv::torchrl(), pytest_args, |venv| {
        let mut example = venv.pytest();
        example.args(["-q", "--doctest-modules", "--pyargs", "rlpool.torchrl"]);
        step("pytest --doctest-modules rlpool.torchrl", example)?;

        let mut tests = venv.pytest();
        tests.arg("python/tests_torchrl").args(pytest_args);
        step("pytest python/tests_torchrl", tests)
    })
}
