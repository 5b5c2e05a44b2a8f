//! The one conversion layer between numpy and the Rust tensordict: nested
//! dicts of arrays in, nested dicts of arrays out (views over the pool's
//! buffers, see [`crate::array`]). Runs with the GIL, once per call.

use numpy::{
    PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use pool::tensordict::{
    DType, Entry, NonTensor, StackedTensorDict, Tensor, TensorDict, TensorDictError,
};
use pool::Batch;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::array;
use crate::errors::{invalid_argument, invalid_type};

/// `numpy.ascontiguousarray`, looked up once.
fn ascontiguousarray(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    static FUNCTION: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    FUNCTION
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("numpy")?.getattr("ascontiguousarray")?.unbind())
        })
        .map(|f| f.bind(py))
}

/// A tensordict of batch size `batch` from a (nested) mapping of arrays
/// (anything `numpy.asarray` takes). Errors name the key.
pub(crate) fn td_from_py(
    py: Python<'_>,
    mapping: &Bound<'_, PyAny>,
    batch: &[usize],
) -> PyResult<TensorDict> {
    let mut td = TensorDict::new(batch);
    fill(py, &mut td, mapping, &mut Vec::new())?;
    Ok(td)
}

fn fill(
    py: Python<'_>,
    td: &mut TensorDict,
    mapping: &Bound<'_, PyAny>,
    path: &mut Vec<String>,
) -> PyResult<()> {
    let items = mapping_items(py, mapping, path)?;
    for (key, value) in items {
        let key: String = key.extract().map_err(|_| {
            invalid_type(
                py,
                format!(
                    "{}: a key must be a str, got {}",
                    where_(path),
                    type_name(&key)
                ),
            )
        })?;
        path.push(key);
        if is_mapping(&value) {
            let mut sub = TensorDict::new(td.batch_size());
            fill(py, &mut sub, &value, path)?;
            set(py, td, path, Entry::Dict(sub))?;
        } else {
            let tensor = tensor_from_py(py, &value, path)?;
            set(py, td, path, Entry::Tensor(tensor))?;
        }
        path.pop();
    }
    Ok(())
}

fn set(py: Python<'_>, td: &mut TensorDict, path: &[String], entry: Entry) -> PyResult<()> {
    let name = path.last().map(String::as_str).unwrap_or_default();
    let result = match entry {
        Entry::Dict(sub) => td.set(name, sub),
        Entry::Tensor(tensor) => td.set(name, tensor),
        Entry::NonTensor(value) => td.set(name, value),
    };
    result
        .map(|_| ())
        .map_err(|err| invalid_argument(py, format!("{}: {err}", where_(path))))
}

fn where_(path: &[String]) -> String {
    if path.is_empty() {
        "the tensordict".to_string()
    } else if path.len() == 1 {
        format!("key {:?}", path[0])
    } else {
        format!("key {:?}", tuple_key(path))
    }
}

fn tuple_key(path: &[String]) -> String {
    let parts: Vec<String> = path.iter().map(|p| format!("{p:?}")).collect();
    format!("({})", parts.join(", "))
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |n| n.to_string())
}

/// A dict, an `rlpool.TensorDict` (through its `_data`), or another mapping.
fn is_mapping(value: &Bound<'_, PyAny>) -> bool {
    // Arrays first: the common case, and no failed attribute lookup.
    !value.is_instance_of::<PyUntypedArray>()
        && (value.is_instance_of::<PyDict>()
            || value.hasattr("_batch_size").unwrap_or(false)
            || value.hasattr("keys").unwrap_or(false))
}

fn mapping_items<'py>(
    py: Python<'py>,
    mapping: &Bound<'py, PyAny>,
    path: &[String],
) -> PyResult<Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
    let source = if mapping.hasattr("_batch_size").unwrap_or(false) {
        mapping.getattr("_data")?
    } else {
        mapping.clone()
    };
    if let Ok(dict) = source.cast::<PyDict>() {
        return Ok(dict.iter().collect());
    }
    let items = source.call_method0("items").map_err(|_| {
        invalid_type(
            py,
            format!(
                "{}: expected a mapping of arrays, got {}",
                where_(path),
                type_name(mapping)
            ),
        )
    })?;
    items
        .try_iter()?
        .map(|item| item.and_then(|pair| pair.extract()))
        .collect()
}

/// A tensor with the elements of an array (copied).
fn tensor_from_py(py: Python<'_>, value: &Bound<'_, PyAny>, path: &[String]) -> PyResult<Tensor> {
    let array = if value.is_instance_of::<PyUntypedArray>() {
        value.clone()
    } else {
        // Python numbers, lists, numpy scalars, anything array-like.
        let numpy = py.import("numpy")?;
        numpy.getattr("asarray")?.call1((value,)).map_err(|err| {
            invalid_type(
                py,
                format!(
                    "{}: {} is not an array ({err})",
                    where_(path),
                    type_name(value)
                ),
            )
        })?
    };
    let mut array = array.cast_into::<PyUntypedArray>()?;
    if !array.is_c_contiguous() {
        array = ascontiguousarray(py)?
            .call1((array,))?
            .cast_into::<PyUntypedArray>()?;
    }
    let shape = array.shape().to_vec();
    let descr = array.dtype();
    let bad = |err: TensorDictError| invalid_argument(py, format!("{}: {err}", where_(path)));
    macro_rules! read {
        ($($ty:ty),*) => {$(
            if descr.is_equiv_to(&numpy::dtype::<$ty>(py)) {
                let typed = array.cast::<PyArrayDyn<$ty>>()?.readonly();
                let slice = typed.as_slice().map_err(|err| {
                    invalid_argument(py, format!("{}: {err}", where_(path)))
                })?;
                return Tensor::from_slice(&shape, slice).map_err(bad);
            }
        )*};
    }
    read!(f32, f64, i64, i32, i16, i8, u8, bool);
    Err(invalid_type(
        py,
        format!(
            "{}: arrays of dtype {} are not supported (bool, uint8, int8, int16, int32, \
             int64, float32, float64 are)",
            where_(path),
            descr
        ),
    ))
}

/// A tensordict as nested dicts of numpy arrays (moved out: the arrays own
/// the tensors' storage).
pub(crate) fn td_to_py(py: Python<'_>, mut td: TensorDict) -> PyResult<Bound<'_, PyDict>> {
    let dict = PyDict::new(py);
    let names: Vec<String> = td.iter().map(|(name, _)| name.to_string()).collect();
    for name in names {
        let value = match td.remove(name.as_str()) {
            Some(Entry::Tensor(tensor)) => array::to_numpy(py, tensor)?,
            Some(Entry::NonTensor(value)) => non_tensor_to_py(py, &value)?,
            Some(Entry::Dict(sub)) => td_to_py(py, sub)?.into_any(),
            None => continue,
        };
        dict.set_item(name, value)?;
    }
    Ok(dict)
}

/// A non-tensor value: integers (such as `env_index`) as an `int64` array
/// of the value's shape, anything else as (nested) Python values.
fn non_tensor_to_py<'py>(py: Python<'py>, value: &NonTensor) -> PyResult<Bound<'py, PyAny>> {
    let mut ints = Vec::new();
    if collect_ints(value, &mut ints) {
        let tensor = Tensor::from_vec(&value.shape(), ints)
            .map_err(|err| invalid_argument(py, err.to_string()))?;
        return array::to_numpy(py, tensor);
    }
    Ok(match value {
        NonTensor::Int(v) => v.into_pyobject(py)?.into_any(),
        NonTensor::Float(v) => v.into_pyobject(py)?.into_any(),
        NonTensor::Bool(v) => v.into_pyobject(py)?.to_owned().into_any(),
        NonTensor::Str(v) => v.into_pyobject(py)?.into_any(),
        NonTensor::Stack(items) => {
            let items: Vec<Bound<'py, PyAny>> = items
                .iter()
                .map(|item| non_tensor_to_py(py, item))
                .collect::<PyResult<_>>()?;
            PyList::new(py, items)?.into_any()
        }
    })
}

fn collect_ints(value: &NonTensor, out: &mut Vec<i64>) -> bool {
    match value {
        NonTensor::Int(v) => {
            out.push(*v);
            true
        }
        NonTensor::Stack(items) => items.iter().all(|item| collect_ints(item, out)),
        _ => false,
    }
}

/// A received batch as `(data, batch_size)`: `data` a dict for a dense
/// batch, a list of `(dict, batch_size)` for a lazy one.
pub(crate) fn batch_to_py(py: Python<'_>, batch: Batch) -> PyResult<Bound<'_, PyTuple>> {
    match batch.into_data() {
        StackedTensorDict::Dense(td) => td_with_batch(py, td),
        StackedTensorDict::Lazy(lazy) => {
            let batch = lazy.batch_size();
            let parts: Vec<Bound<'_, PyTuple>> = lazy
                .into_parts()
                .into_iter()
                .map(|part| td_with_batch(py, part))
                .collect::<PyResult<_>>()?;
            PyTuple::new(
                py,
                [
                    PyList::new(py, parts)?.into_any(),
                    PyTuple::new(py, batch)?.into_any(),
                ],
            )
        }
    }
}

/// One tensordict as `(dict, batch_size)`.
pub(crate) fn td_with_batch(py: Python<'_>, td: TensorDict) -> PyResult<Bound<'_, PyTuple>> {
    let batch = PyTuple::new(py, td.batch_size())?;
    let data = td_to_py(py, td)?;
    PyTuple::new(py, [data.into_any(), batch.into_any()])
}

/// `DType` by numpy-style name, for messages and specs.
#[allow(dead_code)]
pub(crate) fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "bool",
        DType::U8 => "uint8",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::I32 => "int32",
        DType::I64 => "int64",
        DType::F32 => "float32",
        DType::F64 => "float64",
    }
}
