//! The one conversion layer between numpy and the Rust tensordict: nested
//! mappings of arrays (or `rlpool.TensorDict`s) in, `rlpool.TensorDict`s
//! of arrays out, built here (no Python frame per result; the arrays'
//! elements owned as [`crate::array`] says). Runs with the GIL, once per
//! call.

use numpy::{PyUntypedArray, PyUntypedArrayMethods};
use pool::tensordict::{DType, Entry, NonTensor, StackedTensorDict, Tensor, TensorDict};
use pool::Batch;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyString, PyTuple, PyType};
use smallvec::SmallVec;
use std::cell::RefCell;

use crate::array::{self, Arrays};
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

/// The dtypes the envs take, by key (their action and state entries):
/// an input array of another dtype of the same kind (a float64 action for
/// a float32 env) is cast, one of another kind is an `InvalidType`.
pub(crate) type Expected = [(Vec<String>, DType)];

/// An input converted: the tensordict, and the `InvalidType` for an entry
/// of a type the envs do not take (an array of another kind, a mapping
/// where they take an array). That entry is kept as it came, and the error
/// is raised only if the pool refuses the input: the pool's own checks
/// (busy envs first) keep their order.
pub(crate) struct Input {
    pub(crate) td: TensorDict,
    pub(crate) type_error: Option<PyErr>,
}

/// A tensordict of batch size `batch` from a (nested) mapping of arrays
/// (anything `numpy.asarray` takes). Errors name the key.
pub(crate) fn td_from_py(
    py: Python<'_>,
    mapping: &Bound<'_, PyAny>,
    batch: &[usize],
    expected: &Expected,
) -> PyResult<Input> {
    let mut td = TensorDict::new(batch);
    let mut type_error = None;
    fill(
        py,
        &mut td,
        mapping,
        &mut Vec::new(),
        expected,
        &mut type_error,
    )?;
    Ok(Input { td, type_error })
}

fn expected_dtype(expected: &Expected, path: &[String]) -> Option<DType> {
    expected
        .iter()
        .find(|(key, _)| key.as_slice() == path)
        .map(|&(_, dtype)| dtype)
}

fn fill(
    py: Python<'_>,
    td: &mut TensorDict,
    mapping: &Bound<'_, PyAny>,
    path: &mut Vec<String>,
    expected: &Expected,
    type_error: &mut Option<PyErr>,
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
        let wanted = expected_dtype(expected, path);
        if is_mapping(&value) {
            if let Some(dtype) = wanted {
                type_error.get_or_insert_with(|| {
                    invalid_type(
                        py,
                        format!(
                            "{}: the envs take an array of {} here, not a mapping",
                            where_(path),
                            array::numpy_name(dtype)
                        ),
                    )
                });
            }
            let mut sub = TensorDict::new(td.batch_size());
            fill(py, &mut sub, &value, path, expected, type_error)?;
            set(py, td, path, Entry::Dict(sub))?;
        } else {
            let tensor = tensor_from_py(py, &value, path, wanted, type_error)?;
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

/// The name of a value's type, for messages.
pub(crate) fn type_name(value: &Bound<'_, PyAny>) -> String {
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
    if let Ok(dict) = mapping.cast::<PyDict>() {
        return Ok(dict.iter().collect());
    }
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
fn tensor_from_py(
    py: Python<'_>,
    value: &Bound<'_, PyAny>,
    path: &[String],
    wanted: Option<DType>,
    type_error: &mut Option<PyErr>,
) -> PyResult<Tensor> {
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
    let mut descr = array.dtype();
    let mut dtype = array::dtype_of(&descr);
    if let Some(wanted) = wanted {
        if dtype != Some(wanted) {
            match cast(py, &array, wanted, path) {
                Ok(cast) => {
                    array = cast;
                    descr = array.dtype();
                    dtype = array::dtype_of(&descr);
                }
                Err(err) => {
                    type_error.get_or_insert(err);
                }
            }
        }
    }
    match dtype {
        Some(dtype) => array::tensor_from_array(&array, dtype, array.shape())
            .map_err(|err| invalid_argument(py, format!("{}: {err}", where_(path)))),
        None => Err(invalid_type(
            py,
            format!(
                "{}: arrays of dtype {} are not supported (bool, uint8, int8, int16, int32, \
                 int64, float32, float64 in native byte order are)",
                where_(path),
                descr
            ),
        )),
    }
}

/// `array` cast to `dtype` if numpy calls that a cast of the same kind
/// (float64 to float32, int32 to int64); an `InvalidType` otherwise.
fn cast<'py>(
    py: Python<'py>,
    array: &Bound<'py, PyUntypedArray>,
    dtype: DType,
    path: &[String],
) -> PyResult<Bound<'py, PyUntypedArray>> {
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("casting", "same_kind")?;
    array
        .call_method("astype", (array::descr(py, dtype),), Some(&kwargs))
        .and_then(|a| Ok(a.cast_into::<PyUntypedArray>()?))
        .map_err(|_| {
            invalid_type(
                py,
                format!(
                    "{}: the envs take {}, got an array of {} (a cast of another kind)",
                    where_(path),
                    array::numpy_name(dtype),
                    array.dtype()
                ),
            )
        })
}

/// Tensordicts as `rlpool.TensorDict`s of numpy arrays, all based on one
/// owner of their elements (see [`Arrays`]: one allocation and one owner
/// per call, however many tensordicts it returns): small entries are
/// copied into one buffer, large ones keep their storage once `tds` are
/// dropped.
pub(crate) fn tds_to_tensordicts<'py>(
    py: Python<'py>,
    tds: Vec<TensorDict>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let mut arrays = Arrays::new();
    let mut plans = Vec::with_capacity(tds.len());
    for td in &tds {
        let batch = PyTuple::new(py, td.batch_size())?;
        plans.push((plan(py, td, &mut arrays)?, batch));
    }
    // The arrays' large tensors are unique once `tds` no longer hold them.
    drop(tds);
    let mut made = arrays.finish(py)?.into_iter().map(Some).collect::<Vec<_>>();
    plans
        .into_iter()
        .map(|(plan, batch)| wrap(py, build(py, plan, &mut made)?, batch))
        .collect()
}

/// What a tensordict becomes, its arrays planned in [`Arrays`].
enum Node<'py> {
    Array(usize),
    Value(Bound<'py, PyAny>),
    Dict(Vec<(Bound<'py, PyString>, Node<'py>)>),
}

fn plan<'py>(py: Python<'py>, td: &TensorDict, arrays: &mut Arrays) -> PyResult<Node<'py>> {
    let mut entries = Vec::with_capacity(td.len());
    for (name, entry) in td.iter() {
        let node = match entry {
            Entry::Tensor(tensor) => Node::Array(arrays.add(tensor)?),
            Entry::NonTensor(value) => match arrays.add_ints(value)? {
                Some(i) => Node::Array(i),
                None => Node::Value(non_tensor_to_py(py, value)?),
            },
            Entry::Dict(sub) => plan(py, sub, arrays)?,
        };
        entries.push((key_string(py, name), node));
    }
    Ok(Node::Dict(entries))
}

fn build<'py>(
    py: Python<'py>,
    node: Node<'py>,
    made: &mut [Option<Bound<'py, PyAny>>],
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    let Node::Dict(entries) = node else {
        return Ok(dict);
    };
    for (key, node) in entries {
        match node {
            Node::Array(i) => dict.set_item(key, made[i].take())?,
            Node::Value(value) => dict.set_item(key, value)?,
            sub @ Node::Dict(_) => dict.set_item(key, build(py, sub, made)?)?,
        }
    }
    Ok(dict)
}

/// The Python string of a key, made once per thread and name: result keys
/// are few and the same on every call, and a cached string keeps its hash.
fn key_string<'py>(py: Python<'py>, name: &str) -> Bound<'py, PyString> {
    thread_local! {
        static KEYS: RefCell<Vec<(Box<str>, Py<PyString>)>> = const { RefCell::new(Vec::new()) };
    }
    KEYS.with(|keys| {
        let mut keys = keys.borrow_mut();
        if let Some((_, key)) = keys.iter().find(|(n, _)| &**n == name) {
            return key.bind(py).clone();
        }
        let key = PyString::intern(py, name);
        // A bound on the cache, for programs with unusually many keys.
        if keys.len() < 256 {
            keys.push((name.into(), key.clone().unbind()));
        }
        key
    })
}

/// A non-tensor value as (nested) Python values.
fn non_tensor_to_py<'py>(py: Python<'py>, value: &NonTensor) -> PyResult<Bound<'py, PyAny>> {
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

/// The Python classes results are made of and inputs are checked against,
/// looked up once.
struct Classes {
    /// `rlpool.TensorDict`.
    tensordict: Py<PyType>,
    /// `rlpool.LazyStackedTensorDict`.
    lazy: Py<PyType>,
    /// `collections.abc.Mapping`.
    mapping: Py<PyType>,
}

fn classes(py: Python<'_>) -> PyResult<&Classes> {
    static CLASSES: PyOnceLock<Classes> = PyOnceLock::new();
    CLASSES.get_or_try_init(py, || {
        let module = py.import("rlpool._tensordict")?;
        Ok::<_, PyErr>(Classes {
            tensordict: module
                .getattr("TensorDict")?
                .cast_into::<PyType>()?
                .unbind(),
            lazy: module
                .getattr("LazyStackedTensorDict")?
                .cast_into::<PyType>()?
                .unbind(),
            mapping: py
                .import("collections.abc")?
                .getattr("Mapping")?
                .cast_into::<PyType>()?
                .unbind(),
        })
    })
}

/// An input as the conversion takes it: a dict (or other mapping) of
/// arrays, and the batch size of an `rlpool.TensorDict` (`None` for a
/// plain mapping: the call's own batch size applies). Anything else is an
/// `InvalidType`.
pub(crate) fn unwrap_td<'py>(
    py: Python<'py>,
    td: Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyAny>, Option<Vec<usize>>)> {
    if td.is_instance_of::<PyDict>() {
        return Ok((td, None));
    }
    let classes = classes(py)?;
    if td.is_instance(classes.tensordict.bind(py))? {
        let data = td.getattr(intern!(py, "_data"))?;
        let batch = td.getattr(intern!(py, "_batch_size"))?.extract()?;
        return Ok((data, Some(batch)));
    }
    if td.is_instance(classes.mapping.bind(py))? {
        return Ok((td, None));
    }
    Err(invalid_type(
        py,
        format!(
            "expected a TensorDict or a dict of arrays, got {}",
            type_name(&td)
        ),
    ))
}

/// An `rlpool.TensorDict` over `data` (nested dicts of arrays), unchecked.
fn wrap<'py>(
    py: Python<'py>,
    data: Bound<'py, PyDict>,
    batch: Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    let classes = classes(py)?;
    // What `object.__new__` does, without its call and argument checks.
    let td = array::alloc_instance(classes.tensordict.bind(py))?;
    td.setattr(intern!(py, "_data"), data)?;
    td.setattr(intern!(py, "_batch_size"), batch)?;
    Ok(td)
}

/// Received batches as Python's `Batch`es, in order: an
/// `rlpool.TensorDict` for a dense batch, an `rlpool.LazyStackedTensorDict`
/// for a lazy one; all their arrays share one owner.
pub(crate) fn batches_to_py<'py, const K: usize>(
    py: Python<'py>,
    batches: [Batch; K],
) -> PyResult<SmallVec<[Bound<'py, PyAny>; 2]>> {
    // `None`: a dense batch (one tensordict); `Some(n)`: a lazy one of `n`.
    let mut kinds: SmallVec<[Option<usize>; 2]> = SmallVec::new();
    let mut tds = Vec::with_capacity(K);
    for batch in batches {
        match batch.into_data() {
            StackedTensorDict::Dense(td) => {
                kinds.push(None);
                tds.push(td);
            }
            StackedTensorDict::Lazy(lazy) => {
                let parts = lazy.into_parts();
                kinds.push(Some(parts.len()));
                tds.extend(parts);
            }
        }
    }
    let mut made = tds_to_tensordicts(py, tds)?.into_iter();
    let mut out = SmallVec::new();
    for kind in kinds {
        match kind {
            None => out.push(made.next().ok_or_else(missing)?),
            Some(n) => {
                let parts = PyList::new(py, made.by_ref().take(n))?;
                out.push(classes(py)?.lazy.bind(py).call1((parts,))?);
            }
        }
    }
    Ok(out)
}

fn missing() -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err("rlpool: a converted batch is missing")
}

/// A received batch as Python's `Batch` (see [`batches_to_py`]).
pub(crate) fn batch_to_py(py: Python<'_>, batch: Batch) -> PyResult<Bound<'_, PyAny>> {
    batches_to_py(py, [batch])?.pop().ok_or_else(missing)
}
