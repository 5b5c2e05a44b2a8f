//! `_native.Pool`: the facade's `AsyncEnvPool` for Python. Every call
//! converts its input with the GIL, releases the GIL for the pool call
//! (which runs under a Ctrl-C check, see [`pool::interruptible`]), and
//! converts the result with the GIL again.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pool::envs::Kwargs;
use pool::tensordict::DType;
use pool::{
    Affinity, AsyncEnvPool, Backend, Batch, EnvMaker, ExchangeMode, PoolError, ProcOptions, Recv,
    ResolvedExchange, StackMode, Target, ThreadOptions,
};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PySequence, PyString, PyTuple};

use crate::convert::{
    batch_to_py, batches_to_py, td_from_py, tds_to_tensordicts, type_name, unwrap_td, Input,
};
use crate::errors::{invalid_argument, invalid_type, to_py, During};
use crate::kwargs::to_kwargs;

/// An operation, as the Python layer numbers them.
fn op_of(py: Python<'_>, op: u8) -> PyResult<Op> {
    match op {
        0 => Ok(Op::Reset),
        1 => Ok(Op::Step),
        2 => Ok(Op::StepAndMaybeReset),
        _ => Err(invalid_argument(py, format!("unknown operation {op}"))),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Reset,
    Step,
    StepAndMaybeReset,
}

/// Runs `call` with the GIL released, under a check for signals every
/// `pool::CHECK_EVERY`: Ctrl-C ends the wait with `KeyboardInterrupt`
/// (nothing lost).
fn blocking<T: Send>(
    py: Python<'_>,
    type_error: Option<PyErr>,
    call: impl FnOnce() -> Result<T, PoolError> + Send,
) -> PyResult<T> {
    let (result, signal) = py.detach(|| {
        let raised: Rc<Cell<Option<PyErr>>> = Rc::new(Cell::new(None));
        let slot = raised.clone();
        let result = pool::interruptible(
            move || match Python::attach(|py| py.check_signals()) {
                Ok(()) => false,
                Err(err) => {
                    slot.set(Some(err));
                    true
                }
            },
            call,
        );
        (result, raised.take())
    });
    match result {
        Ok(value) => Ok(value),
        Err(PoolError::Interrupted) if signal.is_some() => Err(signal.expect("checked")),
        Err(err) => Err(refused(py, err, type_error)),
    }
}

/// The exception for a refused call: the input's own type error when the
/// pool refused the input (see [`crate::convert::Input`]).
fn refused(py: Python<'_>, err: PoolError, type_error: Option<PyErr>) -> PyErr {
    match (err, type_error) {
        (PoolError::Input { .. }, Some(type_error)) => type_error,
        (err, _) => to_py(py, err, During::Call),
    }
}

/// A timeout in seconds (`None`: none; infinite: none).
fn timeout_of(py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Duration>> {
    match timeout {
        None => Ok(None),
        Some(t) if t.is_nan() || t < 0.0 => Err(invalid_argument(
            py,
            format!("timeout must be a non-negative number of seconds, got {t}"),
        )),
        Some(t) if t.is_infinite() => Ok(None),
        Some(t) => Ok(Duration::try_from_secs_f64(t).ok()),
    }
}

/// The pool behind `rlpool.AsyncEnvPool`.
#[pyclass(frozen, module = "rlpool._native")]
pub(crate) struct Pool {
    pool: AsyncEnvPool,
    backend: &'static str,
    stack: &'static str,
    /// The dtypes of the entries the envs read (actions, state).
    expected: Vec<(Vec<String>, DType)>,
}

#[pymethods]
impl Pool {
    /// Builds the envs (registered names, one kwargs dict or `None` each)
    /// and starts the workers.
    #[new]
    #[pyo3(signature = (
        names, kwargs, *, backend, stack, exchange, envs_per_worker, worker_affinity,
        num_threads, start_timeout, worker_command, max_threads=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        names: Vec<String>,
        kwargs: Vec<Option<Bound<'_, PyDict>>>,
        backend: &str,
        stack: &str,
        exchange: &str,
        envs_per_worker: Bound<'_, PyAny>,
        worker_affinity: Option<Bound<'_, PyAny>>,
        num_threads: Option<Bound<'_, PyAny>>,
        start_timeout: f64,
        worker_command: Vec<String>,
        max_threads: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Pool> {
        let envs_per_worker = count(py, "envs_per_worker", &envs_per_worker)?;
        let num_threads = num_threads
            .map(|n| count(py, "num_threads", &n))
            .transpose()?;
        let max_threads = max_threads
            .map(|n| count(py, "max_threads", &n))
            .transpose()?;
        if kwargs.len() != names.len() {
            return Err(invalid_argument(
                py,
                format!(
                    "create_env_kwargs has {} dicts for {} envs",
                    kwargs.len(),
                    names.len()
                ),
            ));
        }
        let mut builder = AsyncEnvPool::builder();
        for (env, (name, kwargs)) in names.iter().zip(&kwargs).enumerate() {
            let kwargs: Kwargs =
                to_kwargs(kwargs.as_ref(), &format!("create_env_kwargs of env {env}"))?;
            builder = builder.maker(EnvMaker::registry(name.clone(), kwargs));
        }
        let stack_mode = match stack {
            "dense" => StackMode::Dense,
            "maybe_dense" => StackMode::MaybeDense,
            "lazy" | "lazy_stack" => StackMode::Lazy,
            other => {
                return Err(invalid_argument(
                    py,
                    format!("stack must be \"dense\", \"maybe_dense\" or \"lazy\", got {other:?}"),
                ))
            }
        };
        let exchange_mode = match exchange {
            "auto" => ExchangeMode::Auto,
            "queue" => ExchangeMode::Queue,
            "shm" => ExchangeMode::Shm,
            other => {
                return Err(invalid_argument(
                    py,
                    format!("exchange must be \"auto\", \"queue\" or \"shm\", got {other:?}"),
                ))
            }
        };
        let failed: Arc<Mutex<Option<PyErr>>> = Arc::new(Mutex::new(None));
        // `False`: no affinity, and the workers not spread over the CPUs.
        let unspread = worker_affinity.as_ref().is_some_and(|a| {
            a.is_instance_of::<pyo3::types::PyBool>() && !a.is_truthy().unwrap_or(true)
        });
        let affinity = worker_affinity
            .filter(|_| !unspread)
            .map(|a| affinity_of(py, a, failed.clone()))
            .transpose()?;
        if !(start_timeout.is_finite() && start_timeout > 0.0) {
            return Err(invalid_argument(
                py,
                format!("start_timeout must be a positive number of seconds, got {start_timeout}"),
            ));
        }
        let (backend, backend_name) = match backend {
            "threading" => {
                let mut options = ThreadOptions::default().threads(num_threads.unwrap_or(0));
                if let Some(affinity) = affinity {
                    options = options.affinity(affinity);
                }
                (Backend::Threading(options), "threading")
            }
            "multiprocessing" => {
                let (program, args) = worker_command
                    .split_first()
                    .ok_or_else(|| invalid_argument(py, "worker_command is empty".to_string()))?;
                let mut options = ProcOptions::default()
                    .envs_per_worker(envs_per_worker)
                    .exchange(exchange_mode)
                    .program(program)
                    .worker_args(args)
                    .start_timeout(Duration::from_secs_f64(start_timeout));
                if let Some(threads) = num_threads {
                    options = options.threads_per_worker(threads);
                }
                if let Some(most) = max_threads {
                    options = options.max_threads_per_worker(most);
                }
                if let Some(affinity) = affinity {
                    options = options.affinity(affinity);
                }
                if unspread {
                    options = options.spread_workers(false);
                }
                if names.iter().any(|name| name == crate::pyenv::NAME) {
                    // A Python env's pickled info, empty on most steps,
                    // crosses as its length and bytes only.
                    options = options.length_prefixed([crate::pyenv::INFO_KEY]);
                }
                (Backend::Multiprocessing(options), "multiprocessing")
            }
            other => {
                return Err(invalid_argument(
                    py,
                    format!("backend must be \"threading\" or \"multiprocessing\", got {other:?}"),
                ))
            }
        };
        let builder = builder.backend(backend).stack(stack_mode);
        let built = py.detach(|| builder.build());
        if let Some(err) = failed.lock().map_or(None, |mut slot| slot.take()) {
            return Err(err);
        }
        let pool = built.map_err(|err| to_py(py, err, During::Start))?;
        let stack_name = match stack_mode {
            StackMode::Dense => "dense",
            StackMode::MaybeDense => "maybe_dense",
            _ => "lazy",
        };
        let mut expected = Vec::new();
        for spec in [pool.full_action_spec(), pool.full_state_spec()] {
            if let Some(composite) = spec.as_composite() {
                for (key, leaf) in composite.leaves() {
                    if let Some(dtype) = leaf.dtype() {
                        expected.push((key.parts().to_vec(), dtype));
                    }
                }
            }
        }
        Ok(Pool {
            pool,
            backend: backend_name,
            stack: stack_name,
            expected,
        })
    }

    /// The number of envs.
    #[getter]
    fn num_envs(&self) -> usize {
        self.pool.num_envs()
    }

    /// The pool's batch size.
    #[getter]
    fn batch_size<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.pool.batch_size())
    }

    /// Each env's batch size.
    #[getter]
    fn env_batch_sizes(&self) -> Vec<Vec<usize>> {
        self.pool.env_batch_sizes()
    }

    /// Each env's name.
    #[getter]
    fn env_names(&self) -> Vec<String> {
        self.pool.env_names().to_vec()
    }

    /// `"threading"` or `"multiprocessing"`.
    #[getter]
    fn backend(&self) -> &'static str {
        self.backend
    }

    /// The stacking mode.
    #[getter]
    fn stack(&self) -> &'static str {
        self.stack
    }

    /// `"shm"` or `"queue"`.
    #[getter]
    fn resolved_exchange(&self) -> &'static str {
        match self.pool.resolved_exchange() {
            ResolvedExchange::Shm => "shm",
            _ => "queue",
        }
    }

    /// Why the queue was chosen, if it was.
    #[getter]
    fn exchange_reason(&self) -> Option<String> {
        self.pool.exchange_reason().map(str::to_string)
    }

    /// The worker processes' ids.
    #[getter]
    fn worker_pids(&self) -> Vec<u32> {
        self.pool.worker_pids()
    }

    /// Whether the pool was shut down.
    #[getter]
    fn is_shut_down(&self) -> bool {
        self.pool.is_shut_down()
    }

    /// The envs in flight.
    fn in_flight(&self) -> Vec<usize> {
        self.pool.in_flight()
    }

    /// The pool's five full specs, described.
    fn specs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        crate::specs::describe_full(
            py,
            [
                self.pool.full_action_spec(),
                self.pool.full_observation_spec(),
                self.pool.full_reward_spec(),
                self.pool.full_done_spec(),
                self.pool.full_state_spec(),
            ],
        )
    }

    /// Resets every env (`td`: a `TensorDict` or a mapping of state
    /// entries, or `None`).
    #[pyo3(signature = (td))]
    fn reset<'py>(
        &self,
        py: Python<'py>,
        td: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let td = td.map(|td| self.every_env_input(py, td)).transpose()?;
        let (td, type_error) = td.map_or((None, None), |i| (Some(i.td), i.type_error));
        let out = blocking(py, type_error, || self.pool.reset(td))?;
        batch_to_py(py, out)
    }

    /// Steps every env.
    fn step<'py>(&self, py: Python<'py>, td: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let td = self.every_env_input(py, td)?;
        let out = blocking(py, td.type_error, || self.pool.step(td.td))?;
        batch_to_py(py, out)
    }

    /// Steps every env and resets those done: `(result, next_root)`.
    fn step_and_maybe_reset<'py>(
        &self,
        py: Python<'py>,
        td: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let td = self.every_env_input(py, td)?;
        let (step, root) = blocking(py, td.type_error, || self.pool.step_and_maybe_reset(td.td))?;
        pair(py, step, root)
    }

    /// Sends `op` to the envs of `target`: an int (one env), a list, or
    /// `None` (the td's `"env_index"`, else every env).
    #[pyo3(signature = (op, td, target))]
    fn send<'py>(
        &self,
        py: Python<'py>,
        op: u8,
        td: Option<Bound<'py, PyAny>>,
        target: Option<Bound<'py, PyAny>>,
    ) -> PyResult<()> {
        let (td, batch) = match td {
            None => (None, None),
            Some(td) => {
                let (td, batch) = unwrap_td(py, td)?;
                (Some(td), batch)
            }
        };
        let op = op_of(py, op)?;
        let (target, rows) = match &target {
            None => match &td {
                Some(td) if has_env_index(td) => {
                    let rows = env_index_rows(td).unwrap_or(0);
                    (Target::EnvIndex, Some(rows))
                }
                _ => (Target::All, Some(self.pool.num_envs())),
            },
            Some(t) => {
                let scalar = t.is_instance_of::<PyInt>()
                    || (!t.is_instance_of::<PyUntypedArray>() && int_like(t))
                    || t.cast::<PyUntypedArray>().is_ok_and(|a| a.ndim() == 0);
                if scalar {
                    let env = self.env_of(py, t)?;
                    (Target::Env(env), None)
                } else if let Some(envs) = int_array(t) {
                    let envs = envs
                        .into_iter()
                        .map(|env| index_of(py, env, self.pool.num_envs()))
                        .collect::<PyResult<Vec<usize>>>()?;
                    let rows = envs.len();
                    (Target::Envs(envs), Some(rows))
                } else {
                    let items: Vec<Bound<'py, PyAny>> = t
                        .cast::<PySequence>()
                        .ok()
                        .filter(|_| !t.is_instance_of::<PyString>())
                        .and_then(|seq| seq.try_iter().ok()?.collect::<PyResult<_>>().ok())
                        .filter(|items: &Vec<Bound<'py, PyAny>>| {
                            items
                                .iter()
                                .all(|i| i.is_instance_of::<PyInt>() || int_like(i))
                        })
                        .ok_or_else(|| {
                            invalid_type(
                                py,
                                format!(
                                    "env_index must be an int or a list of ints, got {}",
                                    type_name(t)
                                ),
                            )
                        })?;
                    let envs = items
                        .iter()
                        .map(|env| self.env_of(py, env))
                        .collect::<PyResult<Vec<usize>>>()?;
                    let rows = envs.len();
                    (Target::Envs(envs), Some(rows))
                }
            }
        };
        let td = match td {
            None => None,
            Some(td) => {
                let batch = match (batch, rows, &target) {
                    (Some(batch), _, _) => batch,
                    (None, Some(rows), _) => self.rows_batch(None, rows),
                    (None, None, Target::Env(env)) => self
                        .pool
                        .env_batch_sizes()
                        .get(*env)
                        .cloned()
                        .unwrap_or_default(),
                    (None, None, _) => Vec::new(),
                };
                Some(td_from_py(py, &td, &batch, &self.expected)?)
            }
        };
        let (td, type_error) = td.map_or((None, None), |i| (Some(i.td), i.type_error));
        let result = match op {
            Op::Reset => self.pool.async_reset_send(td, target),
            Op::Step => match td {
                Some(td) => self.pool.async_step_send(td, target),
                None => Err(PoolError::MissingInput { op: "step" }),
            },
            Op::StepAndMaybeReset => match td {
                Some(td) => self.pool.async_step_and_maybe_reset_send(td, target),
                None => Err(PoolError::MissingInput {
                    op: "step_and_maybe_reset",
                }),
            },
        };
        result.map_err(|err| refused(py, err, type_error))
    }

    /// Receives a batch of `op`'s results.
    #[pyo3(signature = (op, min_get, max_get, timeout))]
    fn recv<'py>(
        &self,
        py: Python<'py>,
        op: u8,
        min_get: Bound<'py, PyAny>,
        max_get: Option<Bound<'py, PyAny>>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = op_of(py, op)?;
        let min_get = int_arg(py, "min_get", &min_get)?;
        let max_get = max_get.map(|m| int_arg(py, "max_get", &m)).transpose()?;
        let min_get = usize::try_from(min_get).map_err(|_| {
            invalid_argument(py, format!("min_get must be at least 1, got {min_get}"))
        })?;
        let mut recv = Recv::new().min_get(min_get);
        if let Some(max_get) = max_get {
            let max = usize::try_from(max_get).map_err(|_| {
                invalid_argument(
                    py,
                    format!("max_get must be at least min_get ({min_get}), got {max_get}"),
                )
            })?;
            recv = recv.max_get(max);
        }
        if let Some(timeout) = timeout_of(py, timeout)? {
            recv = recv.timeout(timeout);
        }
        match op {
            Op::Reset => {
                let out = blocking(py, None, || self.pool.async_reset_recv(recv))?;
                batch_to_py(py, out)
            }
            Op::Step => {
                let out = blocking(py, None, || self.pool.async_step_recv(recv))?;
                batch_to_py(py, out)
            }
            Op::StepAndMaybeReset => {
                let (step, root) =
                    blocking(py, None, || self.pool.async_step_and_maybe_reset_recv(recv))?;
                Ok(pair(py, step, root)?.into_any())
            }
        }
    }

    /// Receives env `env`'s result of `op`.
    #[pyo3(signature = (op, env, timeout))]
    fn recv_env<'py>(
        &self,
        py: Python<'py>,
        op: u8,
        env: Bound<'py, PyAny>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = op_of(py, op)?;
        let env = self.env_of(py, &env)?;
        let timeout = timeout_of(py, timeout)?;
        match op {
            Op::Reset => {
                let td = blocking(py, None, || self.pool.async_reset_recv_env(env, timeout))?;
                one(tds_to_tensordicts(py, vec![td])?)
            }
            Op::Step => {
                let td = blocking(py, None, || self.pool.async_step_recv_env(env, timeout))?;
                one(tds_to_tensordicts(py, vec![td])?)
            }
            Op::StepAndMaybeReset => {
                let (step, root) = blocking(py, None, || {
                    self.pool.async_step_and_maybe_reset_recv_env(env, timeout)
                })?;
                Ok(PyTuple::new(py, tds_to_tensordicts(py, vec![step, root])?)?.into_any())
            }
        }
    }

    /// The exchange's statistics (TorchRL's names), or `None`.
    fn stats<'py>(&self, py: Python<'py>, reset: bool) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(stats) = self.pool.stats(reset) else {
            return Ok(None);
        };
        let dict = PyDict::new(py);
        for (name, value) in stats.to_map() {
            match value {
                pool::StatValue::Count(v) => dict.set_item(name, v)?,
                pool::StatValue::Float(v) => dict.set_item(name, v)?,
            }
        }
        Ok(Some(dict))
    }

    /// Stops the pool (idempotent); waits for the workers with the GIL
    /// released.
    fn shutdown(&self, py: Python<'_>) {
        py.detach(|| self.pool.shutdown());
    }
}

impl Pool {
    /// The input of a call that addresses every env (a synchronous call):
    /// a row per env unless the caller gave a batch size.
    fn every_env_input(&self, py: Python<'_>, td: Bound<'_, PyAny>) -> PyResult<Input> {
        let (td, batch) = unwrap_td(py, td)?;
        td_from_py(
            py,
            &td,
            &self.rows_batch(batch, self.pool.num_envs()),
            &self.expected,
        )
    }

    /// `[rows, ..env batch size]` unless the caller gave a batch size.
    fn rows_batch(&self, batch: Option<Vec<usize>>, rows: usize) -> Vec<usize> {
        batch.unwrap_or_else(|| {
            let mut batch = vec![rows];
            batch.extend_from_slice(self.pool.batch_size().get(1..).unwrap_or(&[]));
            batch
        })
    }

    /// An env index from Python (an int or an integer numpy scalar): a
    /// negative one or one too large for any pool is an error naming it;
    /// the pool checks the rest (range, duplicates) in its own order.
    fn env_of(&self, py: Python<'_>, env: &Bound<'_, PyAny>) -> PyResult<usize> {
        let num_envs = self.pool.num_envs();
        match env.extract::<i64>() {
            Ok(env) => index_of(py, env, num_envs),
            Err(_) if env.is_instance_of::<PyInt>() => Err(invalid_argument(
                py,
                format!("env index {env} is out of range for a pool of {num_envs} envs"),
            )),
            Err(_) => Err(invalid_type(
                py,
                format!("an env index is an int, got {}", type_name(env)),
            )),
        }
    }
}

/// `(result, next_root)` for Python (their arrays share one owner).
fn pair<'py>(py: Python<'py>, step: Batch, root: Batch) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, batches_to_py(py, [step, root])?)
}

/// The one tensordict of a conversion.
fn one(made: Vec<Bound<'_, PyAny>>) -> PyResult<Bound<'_, PyAny>> {
    made.into_iter().next().ok_or_else(|| {
        pyo3::exceptions::PyRuntimeError::new_err("rlpool: a converted result is missing")
    })
}

/// An integer argument; one beyond 64 bits saturates (the pool's own checks
/// then name it), anything else is an `InvalidType` naming `name`.
fn int_arg(py: Python<'_>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<i64> {
    match value.extract::<i64>() {
        Ok(v) if !value.is_instance_of::<PyBool>() => Ok(v),
        Err(_) if value.is_instance_of::<PyInt>() => {
            Ok(if value.gt(0)? { i64::MAX } else { i64::MIN })
        }
        _ => Err(invalid_type(
            py,
            format!("{name} must be an int, got {}", type_name(value)),
        )),
    }
}

/// A count of envs or threads (0: the default).
fn count(py: Python<'_>, name: &str, value: &Bound<'_, PyAny>) -> PyResult<usize> {
    let v = int_arg(py, name, value)?;
    usize::try_from(v).map_err(|_| {
        invalid_argument(
            py,
            format!("{name} must be at least 0 (0: the default), got {value}"),
        )
    })
}

/// A non-negative env index (the pool checks its range).
fn index_of(py: Python<'_>, env: i64, num_envs: usize) -> PyResult<usize> {
    usize::try_from(env).map_err(|_| {
        invalid_argument(
            py,
            format!("env index {env} is out of range for a pool of {num_envs} envs"),
        )
    })
}

/// Whether a value is an integer numpy scalar.
fn int_like(value: &Bound<'_, PyAny>) -> bool {
    value.hasattr("__index__").unwrap_or(false) && !value.is_instance_of::<PyFloat>()
}

/// The values of an integer numpy array (any shape), read directly.
fn int_array(value: &Bound<'_, PyAny>) -> Option<Vec<i64>> {
    // The common case (an `env_index` array) read raw; the rest (other
    // strides or byte orders) through numpy's checked views.
    if let Some(ints) = value
        .cast::<PyUntypedArray>()
        .ok()
        .and_then(|array| crate::array::read_ints(array))
    {
        return Some(ints);
    }
    if let Ok(array) = value.cast::<PyArrayDyn<i64>>() {
        return Some(array.readonly().as_array().iter().copied().collect());
    }
    if let Ok(array) = value.cast::<PyArrayDyn<i32>>() {
        return Some(
            array
                .readonly()
                .as_array()
                .iter()
                .map(|&v| i64::from(v))
                .collect(),
        );
    }
    None
}

/// Whether an input mapping (unwrapped by `unwrap_td`) has `"env_index"`.
fn has_env_index(td: &Bound<'_, PyAny>) -> bool {
    td.contains("env_index").unwrap_or(false)
}

/// The number of rows an `"env_index"` entry names.
fn env_index_rows(td: &Bound<'_, PyAny>) -> Option<usize> {
    let index = td.get_item("env_index").ok()?;
    let numpy = td.py().import("numpy").ok()?;
    let array = numpy.getattr("asarray").ok()?.call1((index,)).ok()?;
    let shape: Vec<usize> = array.getattr("shape").ok()?.extract().ok()?;
    Some(shape.first().copied().unwrap_or(1))
}

/// A worker affinity: a list of CPU lists, or a function of the worker
/// index (called in the parent while the pool starts; its error is kept
/// in `failed` and raised after).
fn affinity_of(
    py: Python<'_>,
    affinity: Bound<'_, PyAny>,
    failed: Arc<Mutex<Option<PyErr>>>,
) -> PyResult<Affinity> {
    if affinity.is_callable() {
        let function = affinity.unbind();
        return Ok(Affinity::by_worker(move |worker| {
            Python::attach(|py| {
                let cpus = function
                    .call1(py, (worker,))
                    .and_then(|cpus| cpus.extract::<Vec<usize>>(py));
                cpus.unwrap_or_else(|err| {
                    if let Ok(mut slot) = failed.lock() {
                        slot.get_or_insert(err);
                    }
                    Vec::new()
                })
            })
        }));
    }
    let sets: Vec<Vec<usize>> = affinity.extract().map_err(|_| {
        invalid_type(
            py,
            "worker_affinity must be a list of CPU lists (one per worker), a function of the \
             worker index, or False"
                .to_string(),
        )
    })?;
    let _ = PyList::empty(py);
    Ok(Affinity::per_worker(sets))
}
