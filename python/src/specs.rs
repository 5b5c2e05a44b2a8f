//! Specs to plain Python data, which `rlpool.specs.from_description` turns
//! into the package's spec classes.
//!
//! A description is a dict with `"kind"` (the Rust kind name:
//! `"unbounded"`, `"bounded"`, `"categorical"`, `"one_hot"`, `"binary"`,
//! `"multi_categorical"`, `"non_tensor"`, `"composite"`, `"stacked"`),
//! `"shape"` (a tuple of ints) and `"dtype"` (a numpy dtype name, or `None`
//! for non-tensor, composite and stacked specs), plus, by kind: `"low"` and
//! `"high"` (numpy arrays of the spec's shape and dtype) for bounded specs,
//! `"n"` (an int) for categorical and one-hot specs, `"nvec"` (a tuple of
//! ints) for multi-categorical specs, `"entries"` (a dict of name to
//! description, in key order) for composites and `"parts"` (a list of
//! descriptions, one per env) for stacked specs.

use numpy::{PyArray1, PyArrayMethods};
use pool::specs::tensordict::{DType, Tensor};
use pool::specs::TensorSpec;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

/// A numpy array with a copy of the elements of `tensor`, whose dtype is
/// `T`'s (matched by the caller); its shape is the tensor's.
fn typed_array<'py, T>(py: Python<'py>, tensor: &Tensor) -> PyResult<Bound<'py, PyAny>>
where
    T: numpy::Element + pool::specs::tensordict::Element,
{
    let values = tensor
        .as_slice::<T>()
        .map_err(|err| pyo3::exceptions::PyValueError::new_err(format!("spec bounds: {err}")))?;
    let array = PyArray1::from_slice(py, values).reshape(tensor.shape().to_vec())?;
    Ok(array.into_any())
}

/// A numpy array with a copy of `tensor` (bounds are small: one element per
/// element of an entry, copied once when the specs are read).
fn array<'py>(py: Python<'py>, tensor: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    match tensor.dtype() {
        DType::Bool => typed_array::<bool>(py, tensor),
        DType::U8 => typed_array::<u8>(py, tensor),
        DType::I8 => typed_array::<i8>(py, tensor),
        DType::I16 => typed_array::<i16>(py, tensor),
        DType::I32 => typed_array::<i32>(py, tensor),
        DType::I64 => typed_array::<i64>(py, tensor),
        DType::F32 => typed_array::<f32>(py, tensor),
        DType::F64 => typed_array::<f64>(py, tensor),
    }
}

/// Describes `spec` as plain Python data (see the module docs): what
/// `rlpool.specs.from_description` reads.
pub(crate) fn describe<'py>(py: Python<'py>, spec: &TensorSpec) -> PyResult<Bound<'py, PyAny>> {
    let desc = PyDict::new(py);
    desc.set_item("kind", spec.kind())?;
    desc.set_item("shape", PyTuple::new(py, spec.shape().iter())?)?;
    desc.set_item("dtype", spec.dtype().map(crate::array::numpy_name))?;
    match spec {
        TensorSpec::Bounded(b) => {
            desc.set_item("low", array(py, b.low())?)?;
            desc.set_item("high", array(py, b.high())?)?;
        }
        TensorSpec::Categorical(c) => desc.set_item("n", c.n())?,
        TensorSpec::OneHot(o) => desc.set_item("n", o.n())?,
        TensorSpec::MultiCategorical(m) => {
            desc.set_item("nvec", PyTuple::new(py, m.nvec().iter())?)?;
        }
        TensorSpec::Composite(c) => {
            let entries = PyDict::new(py);
            for (name, entry) in c.iter() {
                entries.set_item(name, describe(py, entry)?)?;
            }
            desc.set_item("entries", entries)?;
        }
        TensorSpec::Stacked(s) => {
            let parts = s
                .parts()
                .iter()
                .map(|part| describe(py, part))
                .collect::<PyResult<Vec<_>>>()?;
            desc.set_item("parts", PyList::new(py, parts)?)?;
        }
        TensorSpec::Unbounded(_) | TensorSpec::Binary(_) | TensorSpec::NonTensor(_) => {}
    }
    Ok(desc.into_any())
}

/// The specs of the registered env `name` built with `kwargs` (a dict of
/// keyword arguments, as one env's `create_env_kwargs`): a dict
/// `{"full_action_spec": ..., "full_observation_spec": ...,
/// "full_reward_spec": ..., "full_done_spec": ..., "full_state_spec": ...}`
/// of descriptions (see the module docs), each a composite whose shape is
/// the env's batch size.
///
/// Raises `rlpool.errors.StartError` if the env cannot be built (an unknown
/// name, a keyword argument it does not accept or whose value is wrong; the
/// message names the env), `rlpool.errors.InvalidType` for a keyword value
/// of a type no env takes.
#[pyfunction]
#[pyo3(signature = (name, kwargs = None))]
pub(crate) fn env_specs<'py>(
    py: Python<'py>,
    name: &str,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyDict>> {
    let kwargs = crate::kwargs::to_kwargs(kwargs, &format!("env {name:?} kwargs"))?;
    let env = py
        .detach(|| pool::envs::make(name, &kwargs))
        .map_err(|err| {
            let message = err.to_string();
            // The registry's messages name the env; say which otherwise.
            let message = if message.contains(name) {
                message
            } else {
                format!("env {name:?} could not be built: {message}")
            };
            crate::errors::raise(py, "StartError", message, &[])
        })?;
    let specs = env.specs();
    let composite = |spec: &pool::specs::Composite| TensorSpec::Composite(spec.clone());
    describe_full(
        py,
        [
            &composite(specs.full_action_spec()),
            &composite(specs.full_observation_spec()),
            &composite(specs.full_reward_spec()),
            &composite(specs.full_done_spec()),
            &composite(specs.full_state_spec()),
        ],
    )
}

/// The five full specs (action, observation, reward, done, state), each
/// described under its TorchRL name.
pub(crate) fn describe_full<'py>(
    py: Python<'py>,
    specs: [&TensorSpec; 5],
) -> PyResult<Bound<'py, PyDict>> {
    const NAMES: [&str; 5] = [
        "full_action_spec",
        "full_observation_spec",
        "full_reward_spec",
        "full_done_spec",
        "full_state_spec",
    ];
    let out = PyDict::new(py);
    for (name, spec) in NAMES.into_iter().zip(specs) {
        out.set_item(name, describe(py, spec)?)?;
    }
    Ok(out)
}
