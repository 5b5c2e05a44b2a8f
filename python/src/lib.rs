//! `rlpool._native`: the extension module behind the `rlpool` Python
//! package. Thin glue: it converts at the edge (numpy arrays in and out,
//! errors to exceptions) and calls the `pool` facade, which holds every
//! rule. The public API is the Python package (`python/rlpool`), which
//! re-exports what is here with docstrings and type hints.

use pyo3::prelude::*;

mod array;
mod convert;
mod errors;
mod gil;
mod kwargs;
mod pool;
mod pyenv;
mod specs;

/// Runs this process as a worker of a process pool (started by the pool
/// as `python -m rlpool._worker`) and exits with the worker; an error in
/// any other process.
#[pyfunction]
fn worker_main(py: Python<'_>) -> PyResult<()> {
    if !::pool::is_worker() {
        return Err(errors::invalid_argument(
            py,
            "rlpool._worker is started by a pool with backend=\"multiprocessing\", not by hand"
                .to_string(),
        ));
    }
    register_test_envs();
    // The worker loop never needs the GIL: release it for good.
    py.detach(::pool::init);
    Ok(())
}

/// With the `test-envs` feature (the test suite's build), the workspace's
/// test envs (`FaultyCounter`, `WhereAmI`, `PanicsWhenBuilt`) are
/// registered too, in the parent and in every worker.
fn register_test_envs() {
    #[cfg(feature = "test-envs")]
    test_envs::register();
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    register_test_envs();
    pyenv::register();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("HAS_TEST_ENVS", cfg!(feature = "test-envs"))?;
    m.add_class::<pool::Pool>()?;
    m.add_class::<array::Owner>()?;
    m.add_function(wrap_pyfunction!(worker_main, m)?)?;
    m.add_function(wrap_pyfunction!(specs::env_specs, m)?)?;
    Ok(())
}
