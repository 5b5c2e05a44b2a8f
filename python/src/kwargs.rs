//! Python keyword arguments (`create_env_kwargs`) to the registry's
//! [`Kwargs`].

use pool::envs::{KwValue, Kwargs};
use pyo3::prelude::*;

use crate::convert::type_name;
use crate::errors::invalid_type;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// Converts a dict of keyword arguments; a key that is not a string or a
/// value of a type the registry cannot carry is an `InvalidType` naming
/// the key, after `what` (whose kwargs they are).
pub(crate) fn to_kwargs(dict: Option<&Bound<'_, PyDict>>, what: &str) -> PyResult<Kwargs> {
    let mut kwargs = Kwargs::new();
    let Some(dict) = dict else {
        return Ok(kwargs);
    };
    for (key, value) in dict.iter() {
        let key: String = key.extract().map_err(|_| {
            invalid_type(
                dict.py(),
                format!("{what}: keys must be strings, got {}", type_name(&key)),
            )
        })?;
        let value = to_value(&value).map_err(|found| {
            invalid_type(
                dict.py(),
                format!(
                    "{what}: `{key}` is {found}; an env takes str, int, float, bool or a \
                     list of them"
                ),
            )
        })?;
        kwargs.set(key, value);
    }
    Ok(kwargs)
}

/// One value, or the name of its type when it has no registry form.
fn to_value(value: &Bound<'_, PyAny>) -> Result<KwValue, String> {
    // bool before int: a Python bool is an int.
    if value.is_instance_of::<PyBool>() {
        return Ok(KwValue::Bool(value.extract().unwrap_or(false)));
    }
    if value.is_instance_of::<PyInt>() {
        return value
            .extract::<i64>()
            .map(KwValue::Int)
            .map_err(|_| "an int out of the range of a 64-bit integer".to_string());
    }
    if value.is_instance_of::<PyFloat>() {
        return value
            .extract::<f64>()
            .map(KwValue::Float)
            .map_err(|_| "a float".to_string());
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(KwValue::Str(s.to_string()));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let items: Vec<Bound<'_, PyAny>> = value
            .try_iter()
            .and_then(|it| it.collect())
            .map_err(|_| "a list".to_string())?;
        return items
            .iter()
            .map(to_value)
            .collect::<Result<_, _>>()
            .map(KwValue::List);
    }
    // numpy scalars and anything else that converts losslessly.
    if let Ok(v) = value.extract::<i64>() {
        return Ok(KwValue::Int(v));
    }
    if let Ok(v) = value.extract::<f64>() {
        return Ok(KwValue::Float(v));
    }
    Err(format!("of type {}", type_name(value)))
}

/// The other way: a registry's [`Kwargs`] as a Python dict (for envs whose
/// constructor is Python, `rlpool._pyenv.build`).
pub(crate) fn to_dict<'py>(py: Python<'py>, kwargs: &Kwargs) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, value) in kwargs.iter() {
        dict.set_item(key, from_value(py, value)?)?;
    }
    Ok(dict)
}

fn from_value<'py>(py: Python<'py>, value: &KwValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        KwValue::Str(s) => s.into_pyobject(py)?.into_any(),
        KwValue::Int(v) => v.into_pyobject(py)?.into_any(),
        KwValue::Float(v) => v.into_pyobject(py)?.into_any(),
        KwValue::Bool(v) => v.into_pyobject(py)?.to_owned().into_any(),
        KwValue::List(items) => {
            let items = items
                .iter()
                .map(|item| from_value(py, item))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
    })
}
