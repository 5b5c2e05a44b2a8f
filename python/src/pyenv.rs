//! Python environments in a pool: [`PyEnv`], an [`Env`] over an adapter
//! object of `rlpool._pyenv` that wraps a `gymnasium.Env`, registered under
//! [`NAME`] in every process that loads the extension (the parent, and
//! each worker `python -m rlpool._worker`).
//!
//! The adapter (Python) knows the env's spaces: it describes them once as
//! flat leaves (key, kind, dtype, shape, bounds), flattens each
//! observation into a tuple of leaves and puts the action leaves back
//! together. This side builds the specs from the description once, and per
//! call takes the GIL, hands the action leaves over (a Python scalar for a
//! leaf of shape `[]`, else a fresh numpy array), calls the adapter, and
//! copies the leaves it returns into the pool's buffers.

use numpy::{PyArray1, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pool::envs::{self, standard_done_spec, Env, EnvError, EnvSpecs, Kwargs};
use pool::specs::{Composite, TensorSpec};
use pool::tensordict::{DType, NestedKey, NonTensor, Tensor, TensorDict};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyTuple};

use crate::array::{copy_elements, dtype_of, numpy_name, tensor_from_array};
use crate::gil::keep_thread_state;

/// The registry name of Python envs: the Python side passes the maker in
/// the kwargs (`payload`, `index`, `rpc`, `authkey`).
pub(crate) const NAME: &str = "rlpool.python";

/// The bytes in front of an info entry's pickle: its length (u32, little
/// endian), as `ProcOptions::length_prefixed` describes it.
const INFO_HEADER: usize = 4;

/// The key of a Python env's pickled info: a length-prefixed entry
/// (`ProcOptions::length_prefixed`), so that an empty info costs its
/// header only.
pub(crate) const INFO_KEY: &str = "info";

/// Registers [`NAME`] in this process's registry (once: the module's init
/// runs once per process).
pub(crate) fn register() {
    // Already registered only if the module was initialised twice in one
    // process (sub-interpreters), where the first registration serves.
    let _ = envs::register(NAME, |kwargs: &Kwargs| {
        keep_thread_state();
        Python::attach(|py| PyEnv::build(py, kwargs)).map(|env| Box::new(env) as Box<dyn Env>)
    });
}

/// One leaf of the action or observation: its key in the env's tensordicts
/// and, for a tensor, its dtype and shape (`None`: a non-tensor leaf, a
/// string the adapter packs and unpacks).
struct Leaf {
    key: NestedKey,
    tensor: Option<(DType, Vec<usize>)>,
}

/// A Python env, through its `rlpool._pyenv` adapter.
pub(crate) struct PyEnv {
    /// The adapter's bound `step` and `reset`, looked up once.
    step: Py<PyAny>,
    reset: Py<PyAny>,
    adapter: Py<PyAny>,
    name: String,
    specs: EnvSpecs,
    actions: Vec<Leaf>,
    observations: Vec<Leaf>,
    /// The capacity of the `"info"` entry (0: no such entry).
    info_bytes: usize,
    /// Whether the action (observation) is one tensor leaf that crosses as
    /// the value itself rather than a tuple of leaves.
    flat_action: bool,
    flat_observation: bool,
    /// Whether the reward is float32 (a TorchRL env's) rather than float64
    /// (Gymnasium's).
    reward_f32: bool,
}

/// `rlpool._pyenv`, imported once.
fn module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    MODULE
        .get_or_try_init(py, || py.import("rlpool._pyenv").map(Bound::unbind))
        .map(|m| m.bind(py))
}

/// An env's failure with the Python exception's type, message and
/// traceback.
fn failed(py: Python<'_>, name: &str, err: &PyErr) -> EnvError {
    let traceback = module(py)
        .and_then(|m| m.getattr("format_exception")?.call1((err.value(py),)))
        .and_then(|text| text.extract::<String>())
        .unwrap_or_default();
    EnvError::failed(name, format!("{err}\n{traceback}"))
}

fn text(err: impl std::fmt::Display) -> String {
    err.to_string()
}

fn dtype_named(name: &str) -> Option<DType> {
    DType::ALL.into_iter().find(|&d| numpy_name(d) == name)
}

/// The spec of one described leaf: `(group, path, kind, dtype, shape, param)`.
fn leaf_spec(
    kind: &str,
    dtype: Option<DType>,
    shape: &[usize],
    param: &Bound<'_, PyAny>,
) -> Result<TensorSpec, String> {
    let dtype = || dtype.ok_or_else(|| format!("a {kind} leaf needs a dtype the pool holds"));
    let spec = match kind {
        "unbounded" => TensorSpec::try_unbounded(shape, dtype()?).map_err(text)?,
        "categorical" => {
            let n: i64 = param.extract().map_err(text)?;
            TensorSpec::categorical(shape, dtype()?, n).map_err(text)?
        }
        "binary" => TensorSpec::binary(shape, dtype()?).map_err(text)?,
        "multi_categorical" => {
            let nvec: Vec<i64> = param.extract().map_err(text)?;
            TensorSpec::multi_categorical(shape, dtype()?, nvec).map_err(text)?
        }
        "bounded" => {
            let (low, high): (Bound<'_, PyUntypedArray>, Bound<'_, PyUntypedArray>) =
                param.extract().map_err(text)?;
            let dtype = dtype()?;
            let tensor = |a: &Bound<'_, PyUntypedArray>| {
                if dtype_of(&a.dtype()) != Some(dtype) || !a.is_c_contiguous() || a.shape() != shape
                {
                    return Err(format!("bounds of another dtype or shape than {shape:?}"));
                }
                tensor_from_array(a, dtype, shape).map_err(text)
            };
            TensorSpec::bounded_tensors(tensor(&low)?, tensor(&high)?).map_err(text)?
        }
        "object" => TensorSpec::try_non_tensor(shape).map_err(text)?,
        other => return Err(format!("unknown leaf kind {other:?}")),
    };
    Ok(spec)
}

impl PyEnv {
    /// Builds the env of `kwargs` through `rlpool._pyenv.build`, and its
    /// specs from the adapter's description.
    fn build(py: Python<'_>, kwargs: &Kwargs) -> Result<PyEnv, EnvError> {
        let fail = |err: PyErr| failed(py, NAME, &err);
        let dict = crate::kwargs::to_dict(py, kwargs).map_err(fail)?;
        let adapter = module(py)
            .and_then(|m| m.getattr("build")?.call((), Some(&dict)))
            .map_err(fail)?;
        let description = adapter
            .call_method0("describe")
            .and_then(|d| Ok(d.cast_into::<PyTuple>()?))
            .map_err(fail)?;
        // An optional sixth item names the reward's dtype (a TorchRL env's
        // adapter gives it; a Gymnasium env's reward is float64).
        let reward_dtype: String = match description.len() {
            6 => description
                .get_item(5)
                .and_then(|d| d.extract())
                .map_err(fail)?,
            _ => "float64".to_owned(),
        };
        let (name, leaves, info_bytes, flat_action, flat_observation): (
            String,
            Vec<Bound<'_, PyTuple>>,
            usize,
            bool,
            bool,
        ) = description.get_slice(0, 5).extract().map_err(fail)?;
        let bad = |what: String| EnvError::failed(name.clone(), what);
        let mut action = Composite::new(&[]);
        let mut observation = Composite::new(&[]);
        let (mut actions, mut observations) = (Vec::new(), Vec::new());
        for leaf in &leaves {
            let (group, path, kind, dtype, shape, param): (
                String,
                Vec<String>,
                String,
                String,
                Vec<usize>,
                Bound<'_, PyAny>,
            ) = leaf
                .extract()
                .map_err(|e| bad(format!("a leaf of its spaces: {e}")))?;
            let key = NestedKey::new(
                std::iter::once(group.as_str()).chain(path.iter().map(String::as_str)),
            );
            let dtype = dtype_named(&dtype);
            let spec = leaf_spec(&kind, dtype, &shape, &param)
                .map_err(|e| bad(format!("the space at {key}: {e}")))?;
            let tensor = (kind != "object").then(|| (dtype.unwrap_or(DType::U8), shape));
            let (composite, list) = match group.as_str() {
                "action" => (&mut action, &mut actions),
                _ => (&mut observation, &mut observations),
            };
            composite
                .set(&key, spec)
                .map_err(|e| bad(format!("the space at {key}: {e}")))?;
            list.push(Leaf { key, tensor });
        }
        if info_bytes > 0 {
            observation.set(
                INFO_KEY,
                TensorSpec::try_unbounded(&[INFO_HEADER + info_bytes], DType::U8)?,
            )?;
        }
        let reward_f32 = match reward_dtype.as_str() {
            "float32" => true,
            "float64" => false,
            other => {
                return Err(bad(format!(
                    "a reward of dtype {other} (float32 or float64)"
                )))
            }
        };
        let reward_type = if reward_f32 { DType::F32 } else { DType::F64 };
        let reward =
            Composite::new(&[]).with("reward", TensorSpec::unbounded(&[1], reward_type))?;
        let specs = EnvSpecs::new(
            &[],
            action,
            observation,
            reward,
            standard_done_spec(&[])?,
            Composite::new(&[]),
        )?;
        let step = adapter.getattr("step").map_err(fail)?.unbind();
        let reset = adapter.getattr("reset").map_err(fail)?.unbind();
        Ok(PyEnv {
            step,
            reset,
            adapter: adapter.unbind(),
            name,
            specs,
            actions,
            observations,
            info_bytes,
            flat_action,
            flat_observation,
            reward_f32,
        })
    }

    /// The action leaves of `input`, as the adapter's `step` takes them: a
    /// tuple, or the one leaf itself when the action is flat.
    fn action<'py>(&self, py: Python<'py>, input: &TensorDict) -> PyResult<Bound<'py, PyAny>> {
        let mut items = Vec::with_capacity(self.actions.len());
        for leaf in &self.actions {
            let item = match &leaf.tensor {
                Some((dtype, shape)) => {
                    let tensor = input.tensor(&leaf.key).map_err(to_py)?;
                    action_value(py, tensor, *dtype, shape)?
                }
                None => match input.get(&leaf.key) {
                    Some(pool::tensordict::Entry::NonTensor(NonTensor::Str(s))) => {
                        s.into_pyobject(py)?.into_any()
                    }
                    _ => py.None().into_bound(py),
                },
            };
            if self.flat_action {
                return Ok(item);
            }
            items.push(item);
        }
        Ok(PyTuple::new(py, items)?.into_any())
    }

    /// Copies the observation leaves and the info of an adapter's answer
    /// into `out`.
    fn write_observation(
        &self,
        py: Python<'_>,
        leaves: &Bound<'_, PyAny>,
        info: &Bound<'_, PyAny>,
        out: &mut TensorDict,
    ) -> PyResult<()> {
        if self.flat_observation {
            let leaf = &self.observations[0];
            if let Some((dtype, shape)) = &leaf.tensor {
                let mut tensor = out.tensor_mut(&leaf.key).map_err(to_py)?;
                write_leaf(py, &leaf.key, leaves, *dtype, shape, tensor.bytes_mut())?;
            }
            return self.write_info(info, out);
        }
        let leaves = leaves.cast::<PyTuple>()?;
        if leaves.len() != self.observations.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "the adapter gave {} observation leaves for {}",
                leaves.len(),
                self.observations.len()
            )));
        }
        for (leaf, value) in self.observations.iter().zip(leaves.iter()) {
            match &leaf.tensor {
                Some((dtype, shape)) => {
                    let mut tensor = out.tensor_mut(&leaf.key).map_err(to_py)?;
                    write_leaf(py, &leaf.key, &value, *dtype, shape, tensor.bytes_mut())?;
                }
                None => {
                    out.set(&leaf.key, NonTensor::Str(value.extract()?))
                        .map_err(to_py)?;
                }
            }
        }
        self.write_info(info, out)
    }

    /// Writes an info (pickled bytes, or `None` for `{}`) into `out`'s
    /// `"info"` entry, if there is one.
    fn write_info(&self, info: &Bound<'_, PyAny>, out: &mut TensorDict) -> PyResult<()> {
        if self.info_bytes > 0 {
            let mut tensor = out.tensor_mut(INFO_KEY).map_err(to_py)?;
            let bytes = tensor.bytes_mut();
            if info.is_none() {
                bytes[..INFO_HEADER].fill(0);
            } else {
                let data = info.cast::<PyBytes>()?.as_bytes();
                if data.len() > self.info_bytes {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "the info dict pickles to {} bytes, more than max_info_bytes={}",
                        data.len(),
                        self.info_bytes
                    )));
                }
                let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
                bytes[..INFO_HEADER].copy_from_slice(&len.to_le_bytes());
                bytes[INFO_HEADER..INFO_HEADER + data.len()].copy_from_slice(data);
            }
        }
        Ok(())
    }

    fn reset_py(&self, py: Python<'_>, out: &mut TensorDict) -> PyResult<()> {
        let answer = self.reset.call0(py)?;
        let answer = answer.bind(py).cast::<PyTuple>()?;
        self.write_observation(py, &answer.get_item(0)?, &answer.get_item(1)?, out)?;
        for key in ["done", "terminated", "truncated"] {
            out.tensor_mut(key)
                .map_err(to_py)?
                .as_mut_slice::<bool>()
                .map_err(to_py)?[0] = false;
        }
        Ok(())
    }

    fn step_py(&self, py: Python<'_>, input: &TensorDict, next: &mut TensorDict) -> PyResult<()> {
        let action = self.action(py, input)?;
        let answer = self.step.call1(py, (action,))?;
        let answer = answer.bind(py).cast::<PyTuple>()?;
        let reward: f64 = answer.get_item(1)?.extract()?;
        let terminated = answer.get_item(2)?.is_truthy()?;
        let truncated = answer.get_item(3)?.is_truthy()?;
        self.write_observation(py, &answer.get_item(0)?, &answer.get_item(4)?, next)?;
        {
            let mut tensor = next.tensor_mut("reward").map_err(to_py)?;
            if self.reward_f32 {
                tensor.as_mut_slice::<f32>().map_err(to_py)?[0] = reward as f32;
            } else {
                tensor.as_mut_slice::<f64>().map_err(to_py)?[0] = reward;
            }
        }
        for (key, value) in [
            ("done", terminated || truncated),
            ("terminated", terminated),
            ("truncated", truncated),
        ] {
            next.tensor_mut(key)
                .map_err(to_py)?
                .as_mut_slice::<bool>()
                .map_err(to_py)?[0] = value;
        }
        Ok(())
    }
}

/// A tensordict error as a Python `ValueError` (inside an env call, where
/// it becomes the env's failure).
fn to_py(err: pool::tensordict::TensorDictError) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(err.to_string())
}

/// One action leaf for Python: a scalar for shape `[]`, else a fresh array.
fn action_value<'py>(
    py: Python<'py>,
    tensor: &Tensor,
    dtype: DType,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    macro_rules! convert {
        ($t:ty) => {{
            let values = tensor.as_slice::<$t>().map_err(to_py)?;
            if shape.is_empty() {
                values[0].into_pyobject(py)?.to_owned().into_any()
            } else {
                PyArray1::from_slice(py, values).reshape(shape)?.into_any()
            }
        }};
    }
    Ok(match dtype {
        DType::Bool => convert!(bool),
        DType::U8 => convert!(u8),
        DType::I8 => convert!(i8),
        DType::I16 => convert!(i16),
        DType::I32 => convert!(i32),
        DType::I64 => convert!(i64),
        DType::F32 => convert!(f32),
        DType::F64 => convert!(f64),
    })
}

/// Copies one observation leaf into its buffer: straight from an array of
/// the leaf's dtype and shape, else through `rlpool._pyenv.coerce` (a
/// scalar, a list, an array of another dtype of the same kind).
fn write_leaf(
    py: Python<'_>,
    key: &NestedKey,
    value: &Bound<'_, PyAny>,
    dtype: DType,
    shape: &[usize],
    dst: &mut [u8],
) -> PyResult<()> {
    if shape.is_empty() {
        // A scalar (a Discrete observation): an int, float or bool, or a
        // numpy scalar.
        if let Some(()) = write_scalar(value, dtype, dst) {
            return Ok(());
        }
    }
    if let Ok(array) = value.cast::<PyUntypedArray>() {
        if array.is_c_contiguous()
            && array.shape() == shape
            && dtype_of(&array.dtype()) == Some(dtype)
        {
            copy_elements(array, dst);
            return Ok(());
        }
    }
    let coerced = module(py)?.getattr("coerce")?.call1((
        value,
        numpy_name(dtype),
        shape.to_vec(),
        key.to_string(),
    ))?;
    let array = coerced.cast::<PyUntypedArray>()?;
    if !(array.is_c_contiguous()
        && array.shape() == shape
        && dtype_of(&array.dtype()) == Some(dtype))
    {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{key}: the env's value does not fit dtype {} and shape {shape:?}",
            numpy_name(dtype)
        )));
    }
    copy_elements(array, dst);
    Ok(())
}

/// Writes a Python number into a one-element buffer of `dtype`, if it is
/// one that converts without loss of kind (an int for an integer dtype, a
/// float or int for a float dtype, a bool for bool).
fn write_scalar(value: &Bound<'_, PyAny>, dtype: DType, dst: &mut [u8]) -> Option<()> {
    use pyo3::types::{PyBool, PyFloat, PyInt};
    let is_bool = value.is_instance_of::<PyBool>();
    macro_rules! int {
        ($t:ty) => {{
            if is_bool || !value.is_instance_of::<PyInt>() {
                return None;
            }
            let v: $t = value.extract().ok()?;
            dst.copy_from_slice(&v.to_ne_bytes());
        }};
    }
    match dtype {
        DType::Bool => {
            if !is_bool {
                return None;
            }
            dst[0] = u8::from(value.is_truthy().ok()?);
        }
        DType::U8 => int!(u8),
        DType::I8 => int!(i8),
        DType::I16 => int!(i16),
        DType::I32 => int!(i32),
        DType::I64 => int!(i64),
        DType::F32 | DType::F64 => {
            if is_bool || !(value.is_instance_of::<PyFloat>() || value.is_instance_of::<PyInt>()) {
                return None;
            }
            let v: f64 = value.extract().ok()?;
            if dtype == DType::F32 {
                dst.copy_from_slice(&(v as f32).to_ne_bytes());
            } else {
                dst.copy_from_slice(&v.to_ne_bytes());
            }
        }
    }
    Some(())
}

impl Env for PyEnv {
    fn specs(&self) -> &EnvSpecs {
        &self.specs
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn set_seed(&mut self, seed: u64) {
        Python::attach(|py| {
            // The seed of the next reset; an adapter that refuses it keeps
            // its own seeding (set_seed has no error to report).
            let _ = self
                .adapter
                .call_method1(py, "set_reset_args", (seed, py.None()));
        });
    }

    fn reset_into(
        &mut self,
        _input: Option<&TensorDict>,
        out: &mut TensorDict,
    ) -> Result<(), EnvError> {
        keep_thread_state();
        Python::attach(|py| {
            self.reset_py(py, out)
                .map_err(|err| failed(py, &self.name, &err))
        })
    }

    fn step_into(&mut self, input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError> {
        keep_thread_state();
        Python::attach(|py| {
            self.step_py(py, input, next)
                .map_err(|err| failed(py, &self.name, &err))
        })
    }
}

impl Drop for PyEnv {
    fn drop(&mut self) {
        // Closes the env (Gymnasium's `close`), unless the interpreter is
        // already shutting down.
        let _ = Python::try_attach(|py| {
            let _ = self.adapter.call_method0(py, "close");
        });
    }
}
