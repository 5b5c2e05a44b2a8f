//! Rust errors to the exceptions of `rlpool.errors`, with the same
//! information as attributes.

use pool::tensordict::TensorDictError;
use pool::PoolError;
use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// When an error happened: building the pool turns backend and env
/// errors into `StartError`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum During {
    Start,
    Call,
}

/// Raises `class` (a name in `rlpool.errors`) with `message` and keyword
/// attributes.
pub(crate) fn raise(
    py: Python<'_>,
    class: &str,
    message: String,
    attrs: &[(&str, Bound<'_, PyAny>)],
) -> PyErr {
    let make = || -> PyResult<PyErr> {
        let class = py.import("rlpool.errors")?.getattr(class)?;
        let kwargs = PyDict::new(py);
        for (key, value) in attrs {
            kwargs.set_item(key, value)?;
        }
        let value = class.call((message,), Some(&kwargs))?;
        Ok(PyErr::from_value(value))
    };
    make().unwrap_or_else(|err| err)
}

/// The exception for a pool error.
pub(crate) fn to_py(py: Python<'_>, err: PoolError, during: During) -> PyErr {
    let message = err.to_string();
    let int = |v: usize| {
        v.into_pyobject(py)
            .map(|v| v.into_any())
            .unwrap_or_else(|e| match e {})
    };
    let list = |v: &[usize]| {
        v.into_pyobject(py)
            .map(|v| v.into_any())
            .unwrap_or_else(|_| py.None().into_bound(py))
    };
    let string = |v: &str| pyo3::types::PyString::new(py, v).into_any();
    let float = |v: f64| pyo3::types::PyFloat::new(py, v).into_any();
    match err {
        PoolError::Timeout {
            op,
            timeout,
            ready,
            min_get,
        } => raise(
            py,
            "Timeout",
            message,
            &[
                ("op", string(op)),
                ("timeout", float(timeout.as_secs_f64())),
                ("ready", int(ready)),
                ("min_get", int(min_get)),
            ],
        ),
        PoolError::EnvTimeout { op, env, timeout } => raise(
            py,
            "Timeout",
            message,
            &[
                ("op", string(op)),
                ("timeout", float(timeout.as_secs_f64())),
                ("env", int(env)),
            ],
        ),
        PoolError::Busy { envs } | PoolError::InFlight { envs, .. } => {
            raise(py, "Busy", message, &[("envs", list(&envs))])
        }
        PoolError::EnvFailed {
            env,
            name,
            worker,
            during,
            cause,
        } => raise(
            py,
            "EnvFailed",
            message,
            &[
                ("env", int(env)),
                ("name", string(&name)),
                (
                    "worker",
                    worker.map_or_else(|| py.None().into_bound(py), int),
                ),
                ("during", string(&during)),
                ("cause", string(&cause.to_string())),
            ],
        ),
        PoolError::WorkerDied {
            worker,
            envs,
            reason,
        } => raise(
            py,
            "WorkerDied",
            message,
            &[
                ("worker", int(worker)),
                ("envs", list(&envs)),
                ("reason", string(&reason)),
            ],
        ),
        PoolError::ShutDown => raise(py, "ShutDown", message, &[]),
        PoolError::Interrupted => PyKeyboardInterrupt::new_err(message),
        PoolError::Input { ref source, .. } if is_type_error(source) => {
            raise(py, "InvalidType", message, &[])
        }
        PoolError::NeedsRegistry { .. } => raise(py, "InvalidType", message, &[]),
        PoolError::NoEnvs
        | PoolError::KwargsLength { .. }
        | PoolError::MinGet { .. }
        | PoolError::MaxGet { .. }
        | PoolError::NotEnoughInFlight { .. }
        | PoolError::NotInFlight { .. }
        | PoolError::EnvOutOfRange { .. }
        | PoolError::DuplicateEnv { .. }
        | PoolError::TargetLength { .. }
        | PoolError::RowBatchSize { .. }
        | PoolError::EnvIndex { .. }
        | PoolError::MissingInput { .. }
        | PoolError::Input { .. } => raise(py, "InvalidArgument", message, &[]),
        PoolError::Specs { .. }
        | PoolError::Env(_)
        | PoolError::Backend(_)
        | PoolError::Proc(_)
            if during == During::Start =>
        {
            raise(py, "StartError", message, &[])
        }
        _ => raise(py, "PoolError", message, &[]),
    }
}

/// Whether an input error is about types (a dtype), not values.
fn is_type_error(err: &TensorDictError) -> bool {
    matches!(
        err,
        TensorDictError::DTypeMismatch { .. } | TensorDictError::WrongKind { .. }
    )
}

/// An `InvalidArgument` with `message`.
pub(crate) fn invalid_argument(py: Python<'_>, message: String) -> PyErr {
    raise(py, "InvalidArgument", message, &[])
}

/// An `InvalidType` with `message`.
pub(crate) fn invalid_type(py: Python<'_>, message: String) -> PyErr {
    raise(py, "InvalidType", message, &[])
}
