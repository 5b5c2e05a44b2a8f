//! `rlpool._native`: the extension module behind the `rlpool` Python
//! package. Thin glue: it converts at the edge (numpy arrays in and out,
//! errors to exceptions) and calls the `pool` facade, which holds every
//! rule. The public API is the Python package (`python/rlpool`), which
//! re-exports what is here with docstrings and type hints.

use pyo3::prelude::*;

mod kwargs;
mod specs;

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(specs::env_specs, m)?)?;
    Ok(())
}
