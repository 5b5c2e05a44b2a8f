//! Specs described for Python (a stand-in until the specs module lands).

use pool::specs::TensorSpec;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A spec as plain Python data.
pub(crate) fn describe<'py>(py: Python<'py>, spec: &TensorSpec) -> PyResult<Bound<'py, PyAny>> {
    let dict = PyDict::new(py);
    dict.set_item("kind", "opaque")?;
    dict.set_item("repr", format!("{spec:?}"))?;
    Ok(dict.into_any())
}
