//! Bad input, table-driven: every public entry point of `AsyncEnvPool` and
//! `PoolBuilder` called with bad arguments returns its typed error (the
//! variant, and a message naming the env, key or argument), and leaves the
//! pool usable with nothing lost: after each row, the envs in flight are
//! the ones that were before it, each of their results comes with the
//! right counter, and a synchronous step of every env counts right.
//!
//! The rows run on worker threads and on worker processes with each
//! exchange (one pool per backend for all the pool rows, so that each row
//! also checks that the ones before it left the pool sound); the builder
//! rows run on each backend they apply to.

mod common;

use std::num::NonZeroUsize;
use std::time::Duration;

use pool::envs::{CountingEnv, Env, Kwargs};
use pool::tensordict::{NonTensor, Tensor, TensorDict};
use pool::{
    Affinity, AffinityError, AsyncEnvPool, Backend, ExchangeMode, PoolBuilder, PoolError,
    ProcError, ProcOptions, Recv, StackMode, Target, ThreadError,
};

use common::{action, actions, env_index, int_at, row_env, rows, watchdog};

/// The entry point of every worker of this binary; in the parent it only
/// registers the test envs.
#[test]
fn rlpool_worker() {
    common::test_envs::register();
    pool::init();
}

/// Envs in the pools of the pool rows.
const N: usize = 4;

/// Each env's start value: far apart, so that a counter names its env.
const STARTS: [i32; N] = [0, 100, 200, 300];

/// A deadline that results which are coming always meet.
const GENEROUS: Duration = Duration::from_secs(20);

/// The backends the rows run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    Threads,
    Queue,
    Shm,
}

const ALL: &[Which] = &[Which::Threads, Which::Queue, Which::Shm];
const PROCS: &[Which] = &[Which::Queue, Which::Shm];

impl Which {
    fn options(self) -> ProcOptions {
        let exchange = match self {
            Which::Queue => ExchangeMode::Queue,
            _ => ExchangeMode::Shm,
        };
        ProcOptions::for_test("rlpool_worker")
            .envs_per_worker(2)
            .exchange(exchange)
    }

    fn backend(self) -> Backend {
        match self {
            Which::Threads => common::threads(2),
            _ => Backend::Multiprocessing(self.options()),
        }
    }

    fn builder(self) -> PoolBuilder {
        AsyncEnvPool::builder().backend(self.backend())
    }

    /// A builder of 2 workers (threads, or processes of 2 envs) pinned
    /// to `affinity`.
    fn pinned(self, affinity: Affinity) -> PoolBuilder {
        let backend = match self {
            Which::Threads => {
                Backend::Threading(pool::ThreadOptions::default().threads(2).affinity(affinity))
            }
            _ => Backend::Multiprocessing(self.options().affinity(affinity)),
        };
        AsyncEnvPool::builder().backend(backend)
    }
}

/// The affinity error a pool's build failed with, from either backend.
fn affinity_error(err: &PoolError) -> Option<&AffinityError> {
    match err {
        PoolError::Backend(ThreadError::Affinity(err))
        | PoolError::Proc(ProcError::Affinity(err)) => Some(err),
        _ => None,
    }
}

/// What a row's error must be.
enum Expected {
    /// This error exactly.
    Is(PoolError),
    /// An error this predicate accepts (variants that carry a backend's
    /// error, or data too long to spell out).
    Like(fn(&PoolError) -> bool),
}

/// Where the pool is before a pool row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Before {
    /// Nothing in flight.
    Idle,
    /// Envs 0 and 1 in flight from a batch step, env 2 from a per-env step
    /// (each with an increment of 1); env 3 idle.
    Busy,
}

impl Before {
    fn in_flight(self) -> Vec<usize> {
        match self {
            Before::Idle => vec![],
            Before::Busy => vec![0, 1, 2],
        }
    }
}

/// A call of a pool with bad arguments.
struct PoolRow {
    name: &'static str,
    before: Before,
    call: fn(&AsyncEnvPool) -> Result<(), PoolError>,
    expected: Expected,
    /// Parts of the error's message (the env, key or argument named).
    says: &'static [&'static str],
}

/// An `"env_index"` entry of integers.
fn index_entry(envs: &[i64]) -> NonTensor {
    NonTensor::Stack(envs.iter().map(|&e| NonTensor::Int(e)).collect())
}

/// A batch of `n` rows whose `"action"` is `tensor`.
fn with_action(n: usize, tensor: Tensor) -> TensorDict {
    let mut td = TensorDict::new(&[n]);
    td.set("action", tensor).expect("batch size fits");
    td
}

/// The env named by an invalid-input error of either backend.
fn input_env(err: &PoolError) -> Option<usize> {
    match err {
        PoolError::Input { env, .. } => Some(*env),
        _ => None,
    }
}

/// The env named by a build error of either backend.
fn build_env(err: &PoolError) -> Option<usize> {
    match err {
        PoolError::Backend(ThreadError::Build { env, .. })
        | PoolError::Proc(ProcError::Build { env, .. }) => Some(*env),
        _ => None,
    }
}

fn out_of_range(env: usize) -> Expected {
    Expected::Is(PoolError::EnvOutOfRange { env, num_envs: N })
}

/// Every pool row.
fn pool_rows() -> Vec<PoolRow> {
    use Before::{Busy, Idle};
    use Expected::{Is, Like};
    vec![
        // Env indices out of range, in every target and per-env receive.
        PoolRow {
            name: "send to one env out of range",
            before: Idle,
            call: |p| p.async_step_send(action(1), Target::Env(4)),
            expected: out_of_range(4),
            says: &["env index 4 is out of range for a pool of 4 envs"],
        },
        PoolRow {
            name: "reset of env usize::MAX",
            before: Busy,
            call: |p| p.async_reset_send(None, Target::Env(usize::MAX)),
            expected: out_of_range(usize::MAX),
            says: &["out of range"],
        },
        PoolRow {
            name: "a list with an env out of range",
            before: Idle,
            call: |p| p.async_step_send(actions(&[1, 1]), Target::Envs(vec![0, 9])),
            expected: out_of_range(9),
            says: &["env index 9"],
        },
        PoolRow {
            name: "a reset list with an env out of range",
            before: Busy,
            call: |p| p.async_reset_send(None, Target::Envs(vec![3, 5])),
            expected: out_of_range(5),
            says: &["env index 5"],
        },
        PoolRow {
            name: "an env_index entry out of range",
            before: Idle,
            call: |p| {
                let mut td = actions(&[1, 1]);
                td.set("env_index", index_entry(&[1, 7]))?;
                p.async_step_and_maybe_reset_send(td, Target::EnvIndex)
            },
            expected: out_of_range(7),
            says: &["env index 7"],
        },
        PoolRow {
            name: "per-env step receive out of range",
            before: Busy,
            call: |p| p.async_step_recv_env(4, None).map(drop),
            expected: out_of_range(4),
            says: &["env index 4"],
        },
        PoolRow {
            name: "per-env reset receive out of range",
            before: Idle,
            call: |p| {
                p.async_reset_recv_env(usize::MAX, Some(Duration::ZERO))
                    .map(drop)
            },
            expected: out_of_range(usize::MAX),
            says: &["out of range"],
        },
        PoolRow {
            name: "per-env step-and-maybe-reset receive out of range",
            before: Idle,
            call: |p| p.async_step_and_maybe_reset_recv_env(8, None).map(drop),
            expected: out_of_range(8),
            says: &["env index 8"],
        },
        // Duplicates.
        PoolRow {
            name: "an env twice in a list",
            before: Idle,
            call: |p| p.async_step_send(actions(&[1, 1]), Target::Envs(vec![1, 1])),
            expected: Is(PoolError::DuplicateEnv { env: 1 }),
            says: &["env 1 is addressed twice in one send"],
        },
        PoolRow {
            name: "an env twice in a reset list, one busy",
            before: Busy,
            call: |p| p.async_reset_send(None, Target::Envs(vec![3, 0, 3])),
            expected: Is(PoolError::DuplicateEnv { env: 3 }),
            says: &["env 3 is addressed twice"],
        },
        PoolRow {
            name: "an env twice in env_index",
            before: Idle,
            call: |p| {
                let mut td = actions(&[1, 1, 1]);
                td.set("env_index", index_entry(&[2, 0, 2]))?;
                p.async_step_send(td, Target::EnvIndex)
            },
            expected: Is(PoolError::DuplicateEnv { env: 2 }),
            says: &["env 2 is addressed twice"],
        },
        // Targets and tensordicts that do not match.
        PoolRow {
            name: "a list of 2 envs with 3 rows",
            before: Idle,
            call: |p| p.async_step_send(actions(&[1, 1, 1]), Target::Envs(vec![0, 1])),
            expected: Is(PoolError::TargetLength {
                targets: 2,
                batch_size: vec![3],
            }),
            says: &["the target names 2 envs but the tensordict has batch size [3]"],
        },
        PoolRow {
            name: "all envs with 3 rows",
            before: Idle,
            call: |p| p.async_step_send(actions(&[1, 1, 1]), Target::All),
            expected: Is(PoolError::TargetLength {
                targets: 4,
                batch_size: vec![3],
            }),
            says: &["names 4 envs"],
        },
        PoolRow {
            name: "one env with 2 rows",
            before: Busy,
            call: |p| p.async_step_send(actions(&[1, 1]), Target::Env(3)),
            expected: Is(PoolError::TargetLength {
                targets: 1,
                batch_size: vec![2],
            }),
            says: &["batch size [2]"],
        },
        PoolRow {
            name: "a sync step with 2 rows",
            before: Idle,
            call: |p| p.step(actions(&[1, 1])).map(drop),
            expected: Is(PoolError::TargetLength {
                targets: 4,
                batch_size: vec![2],
            }),
            says: &["batch size [2]"],
        },
        PoolRow {
            name: "env_index target without a tensordict",
            before: Idle,
            call: |p| p.async_reset_send(None, Target::EnvIndex),
            expected: Like(|e| matches!(e, PoolError::EnvIndex { .. })),
            says: &["no tensordict to read \"env_index\" from"],
        },
        PoolRow {
            name: "env_index target without the entry",
            before: Busy,
            call: |p| p.async_step_send(actions(&[1]), Target::EnvIndex),
            expected: Like(|e| matches!(e, PoolError::EnvIndex { .. })),
            says: &["no \"env_index\" entry"],
        },
        PoolRow {
            name: "a negative env_index",
            before: Idle,
            call: |p| {
                let mut td = actions(&[1, 1]);
                td.set("env_index", Tensor::from_vec(&[2], vec![0i64, -1])?)?;
                p.async_step_send(td, Target::EnvIndex)
            },
            expected: Like(|e| matches!(e, PoolError::EnvIndex { .. })),
            says: &["env index -1 is negative"],
        },
        PoolRow {
            name: "a float env_index",
            before: Idle,
            call: |p| {
                let mut td = actions(&[1]);
                td.set("env_index", Tensor::from_vec(&[1], vec![0.0f32])?)?;
                p.async_step_send(td, Target::EnvIndex)
            },
            expected: Like(|e| matches!(e, PoolError::EnvIndex { .. })),
            says: &["not an integer tensor"],
        },
        // Receive arguments.
        PoolRow {
            name: "min_get 0",
            before: Busy,
            call: |p| p.async_step_recv(Recv::new().min_get(0)).map(drop),
            expected: Is(PoolError::MinGet { min_get: 0 }),
            says: &["min_get must be at least 1, got 0"],
        },
        PoolRow {
            name: "min_get 0 and max_get 0",
            before: Idle,
            call: |p| {
                p.async_step_and_maybe_reset_recv(Recv::new().min_get(0).max_get(0))
                    .map(drop)
            },
            expected: Is(PoolError::MinGet { min_get: 0 }),
            says: &["min_get must be at least 1"],
        },
        PoolRow {
            name: "max_get below min_get",
            before: Busy,
            call: |p| {
                p.async_step_recv(Recv::new().min_get(2).max_get(1))
                    .map(drop)
            },
            expected: Is(PoolError::MaxGet {
                min_get: 2,
                max_get: 1,
            }),
            says: &["max_get (1) must be at least min_get (2)"],
        },
        PoolRow {
            name: "max_get below min_get with nothing in flight",
            before: Idle,
            call: |p| {
                p.async_reset_recv(Recv::new().min_get(3).max_get(2).timeout(Duration::ZERO))
                    .map(drop)
            },
            expected: Is(PoolError::MaxGet {
                min_get: 3,
                max_get: 2,
            }),
            says: &["max_get (2)"],
        },
        PoolRow {
            name: "min_get above the batch sends in flight",
            before: Busy,
            call: |p| p.async_step_recv(Recv::all(3)).map(drop),
            expected: Is(PoolError::NotEnoughInFlight {
                op: "step",
                min_get: 3,
                in_flight: 2,
            }),
            says: &["cannot wait for 3 step results: only 2 envs are in flight for step"],
        },
        PoolRow {
            name: "a receive of another operation than the one in flight",
            before: Busy,
            call: |p| p.async_reset_recv(Recv::new()).map(drop),
            expected: Is(PoolError::NotEnoughInFlight {
                op: "reset",
                min_get: 1,
                in_flight: 0,
            }),
            says: &["only 0 envs are in flight for reset"],
        },
        PoolRow {
            name: "a receive with nothing in flight and no timeout",
            before: Idle,
            call: |p| p.async_step_recv(Recv::new()).map(drop),
            expected: Is(PoolError::NotEnoughInFlight {
                op: "step",
                min_get: 1,
                in_flight: 0,
            }),
            says: &["only 0 envs"],
        },
        PoolRow {
            name: "a poll with nothing in flight",
            before: Idle,
            call: |p| {
                p.async_step_and_maybe_reset_recv(Recv::new().timeout(Duration::ZERO))
                    .map(drop)
            },
            expected: Is(PoolError::NotEnoughInFlight {
                op: "step_and_maybe_reset",
                min_get: 1,
                in_flight: 0,
            }),
            says: &["step_and_maybe_reset results"],
        },
        PoolRow {
            name: "a timeout too long to represent, nothing in flight",
            before: Idle,
            call: |p| {
                p.async_step_recv(Recv::new().timeout(Duration::MAX))
                    .map(drop)
            },
            expected: Is(PoolError::NotEnoughInFlight {
                op: "step",
                min_get: 1,
                in_flight: 0,
            }),
            says: &["only 0 envs"],
        },
        PoolRow {
            name: "a batch receive of per-env sends only",
            before: Busy,
            call: |p| {
                p.async_step_recv(Recv::all(3).timeout(Duration::from_millis(1)))
                    .map(drop)
            },
            expected: Is(PoolError::NotEnoughInFlight {
                op: "step",
                min_get: 3,
                in_flight: 2,
            }),
            says: &["only 2 envs"],
        },
        // Per-env receives with nothing in flight for them.
        PoolRow {
            name: "per-env receive of an idle env",
            before: Busy,
            call: |p| p.async_step_recv_env(3, None).map(drop),
            expected: Is(PoolError::NotInFlight { op: "step", env: 3 }),
            says: &["env 3 has no step in flight"],
        },
        PoolRow {
            name: "per-env receive of another operation",
            before: Busy,
            call: |p| p.async_reset_recv_env(0, Some(GENEROUS)).map(drop),
            expected: Is(PoolError::NotInFlight {
                op: "reset",
                env: 0,
            }),
            says: &["env 0 has no reset in flight"],
        },
        PoolRow {
            name: "per-env step-and-maybe-reset receive of a step",
            before: Busy,
            call: |p| p.async_step_and_maybe_reset_recv_env(2, None).map(drop),
            expected: Is(PoolError::NotInFlight {
                op: "step_and_maybe_reset",
                env: 2,
            }),
            says: &["env 2 has no step_and_maybe_reset in flight"],
        },
        // Sends to busy envs.
        PoolRow {
            name: "a list with busy envs",
            before: Busy,
            call: |p| p.async_step_send(actions(&[1, 1, 1]), Target::Envs(vec![3, 2, 1])),
            expected: Is(PoolError::Busy { envs: vec![2, 1] }),
            says: &["envs [2, 1] are busy"],
        },
        PoolRow {
            name: "a reset of every env",
            before: Busy,
            call: |p| p.async_reset_send(None, Target::All),
            expected: Is(PoolError::Busy {
                envs: vec![0, 1, 2],
            }),
            says: &["envs [0, 1, 2] are busy: receive their results before sending to them again"],
        },
        PoolRow {
            name: "a per-env send to a busy env",
            before: Busy,
            call: |p| p.async_step_and_maybe_reset_send(action(1), Target::Env(2)),
            expected: Is(PoolError::Busy { envs: vec![2] }),
            says: &["envs [2] are busy"],
        },
        PoolRow {
            name: "a busy env and an invalid action: busy first",
            before: Busy,
            call: |p| {
                p.async_step_send(
                    with_action(2, Tensor::full(&[2, 1], 1.0f32)),
                    Target::Envs(vec![3, 0]),
                )
            },
            expected: Is(PoolError::Busy { envs: vec![0] }),
            says: &["envs [0] are busy"],
        },
        // Synchronous calls while envs are in flight.
        PoolRow {
            name: "a sync step with envs in flight",
            before: Busy,
            call: |p| p.step(actions(&[1; N])).map(drop),
            expected: Is(PoolError::InFlight {
                op: "step",
                envs: vec![0, 1, 2],
            }),
            says: &["envs [0, 1, 2] are still in flight"],
        },
        PoolRow {
            name: "a sync reset with envs in flight",
            before: Busy,
            call: |p| p.reset(None).map(drop),
            expected: Is(PoolError::InFlight {
                op: "reset",
                envs: vec![0, 1, 2],
            }),
            says: &["before a synchronous reset"],
        },
        PoolRow {
            name: "a sync step-and-maybe-reset with envs in flight",
            before: Busy,
            call: |p| p.step_and_maybe_reset(actions(&[1; N])).map(drop),
            expected: Is(PoolError::InFlight {
                op: "step_and_maybe_reset",
                envs: vec![0, 1, 2],
            }),
            says: &["synchronous step_and_maybe_reset"],
        },
        // Actions of the wrong key, shape or dtype.
        PoolRow {
            name: "no action",
            before: Idle,
            call: |p| p.async_step_send(TensorDict::new(&[N]), Target::All),
            expected: Like(|e| input_env(e) == Some(0)),
            says: &["env 0", "key \"action\" not found"],
        },
        PoolRow {
            name: "a misspelled action key",
            before: Busy,
            call: |p| {
                let mut td = TensorDict::new(&[1]);
                td.set("actions", Tensor::full(&[1, 1], 1i64))?;
                p.async_step_send(td, Target::Envs(vec![3]))
            },
            expected: Like(|e| input_env(e) == Some(3)),
            says: &["env 3", "key \"action\" not found", "actions"],
        },
        PoolRow {
            name: "an f32 action",
            before: Idle,
            call: |p| p.async_step_send(with_action(N, Tensor::full(&[N, 1], 1.0f32)), Target::All),
            expected: Like(|e| input_env(e) == Some(0)),
            says: &["env 0", "\"action\"", "dtype f32", "dtype i64"],
        },
        PoolRow {
            name: "an i32 action",
            before: Idle,
            call: |p| {
                p.async_step_and_maybe_reset_send(
                    with_action(2, Tensor::full(&[2, 1], 1i32)),
                    Target::Envs(vec![2, 3]),
                )
            },
            expected: Like(|e| input_env(e) == Some(2)),
            says: &["env 2", "\"action\"", "dtype i32", "dtype i64"],
        },
        PoolRow {
            name: "an action of shape [n, 2]",
            before: Idle,
            call: |p| p.async_step_send(with_action(N, Tensor::full(&[N, 2], 1i64)), Target::All),
            expected: Like(|e| input_env(e) == Some(0)),
            says: &["env 0", "\"action\"", "shape [2]", "shape [1]"],
        },
        PoolRow {
            name: "an action of shape [n] (no action dim)",
            before: Idle,
            call: |p| p.async_step_send(with_action(N, Tensor::full(&[N], 1i64)), Target::All),
            expected: Like(|e| input_env(e) == Some(0)),
            says: &["env 0", "\"action\"", "shape []", "shape [1]"],
        },
        PoolRow {
            name: "one env's action of shape [2]",
            before: Busy,
            call: |p| {
                let mut td = TensorDict::new(&[]);
                td.set("action", Tensor::full(&[2], 1i64))?;
                p.async_step_send(td, Target::Env(3))
            },
            expected: Like(|e| input_env(e) == Some(3)),
            says: &["env 3", "\"action\"", "shape [2]"],
        },
        PoolRow {
            name: "an action that is a tensordict",
            before: Idle,
            call: |p| {
                let mut td = TensorDict::new(&[N]);
                td.set(("action", "x"), Tensor::full(&[N, 1], 1i64))?;
                p.async_step_send(td, Target::All)
            },
            expected: Like(|e| input_env(e) == Some(0)),
            says: &["env 0", "\"action\"", "is a tensordict"],
        },
        PoolRow {
            name: "an action that is not a tensor",
            before: Idle,
            call: |p| {
                let mut td = TensorDict::new(&[2]);
                td.set("action", index_entry(&[1, 1]))?;
                p.async_step_send(td, Target::Envs(vec![1, 0]))
            },
            expected: Like(|e| input_env(e) == Some(1)),
            says: &["env 1", "\"action\"", "is a non-tensor"],
        },
        PoolRow {
            name: "a sync step with an f32 action",
            before: Idle,
            call: |p| {
                p.step(with_action(N, Tensor::full(&[N, 1], 1.0f32)))
                    .map(drop)
            },
            expected: Like(|e| input_env(e) == Some(0)),
            says: &["env 0", "\"action\"", "dtype f32"],
        },
        PoolRow {
            name: "a sync step-and-maybe-reset without an action",
            before: Idle,
            call: |p| p.step_and_maybe_reset(TensorDict::new(&[N])).map(drop),
            expected: Like(|e| input_env(e) == Some(0)),
            says: &["env 0", "key \"action\" not found"],
        },
        PoolRow {
            name: "a batch with an extra batch dim",
            before: Idle,
            call: |p| {
                let mut td = TensorDict::new(&[N, 3]);
                td.set("action", Tensor::full(&[N, 3, 1], 1i64))?;
                p.async_step_send(td, Target::All)
            },
            expected: Is(PoolError::RowBatchSize {
                env: 0,
                expected: vec![],
                found: vec![3],
            }),
            says: &["env 0 has batch size [] but its row of the tensordict has batch size [3]"],
        },
        PoolRow {
            name: "one env's tensordict with an extra batch dim",
            before: Busy,
            call: |p| {
                let mut td = TensorDict::new(&[1, 2]);
                td.set("action", Tensor::full(&[1, 2, 1], 1i64))?;
                p.async_step_send(td, Target::Env(3))
            },
            expected: Is(PoolError::RowBatchSize {
                env: 3,
                expected: vec![],
                found: vec![2],
            }),
            says: &["env 3 has batch size []", "batch size [2]"],
        },
        PoolRow {
            name: "a reset list whose tensordict has an extra batch dim",
            before: Busy,
            call: |p| p.async_reset_send(Some(TensorDict::new(&[1, 5])), Target::Envs(vec![3])),
            expected: Is(PoolError::RowBatchSize {
                env: 3,
                expected: vec![],
                found: vec![5],
            }),
            says: &["env 3", "batch size [5]"],
        },
        PoolRow {
            name: "a sync reset with 3 rows",
            before: Idle,
            call: |p| p.reset(Some(TensorDict::new(&[3]))).map(drop),
            expected: Is(PoolError::TargetLength {
                targets: 4,
                batch_size: vec![3],
            }),
            says: &["batch size [3]"],
        },
        PoolRow {
            name: "a per-env reset with 2 rows",
            before: Busy,
            call: |p| p.async_reset_send(Some(TensorDict::new(&[2])), Target::Env(3)),
            expected: Is(PoolError::TargetLength {
                targets: 1,
                batch_size: vec![2],
            }),
            says: &["batch size [2]"],
        },
    ]
}

/// Puts the pool in `before`'s state; `counts` follows each env's counter.
fn prepare(pool: &AsyncEnvPool, before: Before, counts: &mut [i32; N]) {
    if before == Before::Busy {
        pool.async_step_send(actions(&[1, 1]), Target::Envs(vec![0, 1]))
            .expect("send to envs 0 and 1");
        pool.async_step_send(action(1), Target::Env(2))
            .expect("send to env 2");
        for count in &mut counts[..3] {
            *count += 1;
        }
    }
}

/// Takes every result in flight (a step of each, with its counter), then
/// steps every env: each counts once more.
#[track_caller]
fn check_sound(pool: &AsyncEnvPool, counts: &mut [i32; N], what: &str) {
    for env in pool.in_flight() {
        let out = pool
            .async_step_recv_env(env, Some(GENEROUS))
            .unwrap_or_else(|err| panic!("{what}: env {env}'s result is lost: {err}"));
        assert_eq!(row_env(&out), env, "{what}");
        assert_eq!(
            int_at(&out, &["next", "observation"]),
            counts[env],
            "{what}: env {env}'s counter"
        );
    }
    assert!(pool.in_flight().is_empty(), "{what}");
    let out = pool
        .step(actions(&[1; N]))
        .unwrap_or_else(|err| panic!("{what}: the pool is not usable: {err}"));
    assert_eq!(env_index(&out), (0..N).collect::<Vec<_>>(), "{what}");
    for (env, row) in rows(&out).iter().enumerate() {
        counts[env] += 1;
        assert_eq!(
            int_at(row, &["next", "observation"]),
            counts[env],
            "{what}: env {env}'s counter after a sync step"
        );
    }
}

/// Checks an error against a row's expectation.
#[track_caller]
fn check_error(err: &PoolError, expected: &Expected, says: &[&str], what: &str) {
    match expected {
        Expected::Is(want) => assert_eq!(err, want, "{what}"),
        Expected::Like(accepts) => assert!(accepts(err), "{what}: unexpected error {err:?}"),
    }
    let text = err.to_string();
    for part in says {
        assert!(
            text.contains(part),
            "{what}: {text:?} does not say {part:?}"
        );
    }
}

/// A pool of counters on `which`.
fn counters(which: Which) -> AsyncEnvPool {
    let kwargs = STARTS
        .iter()
        .map(|&s| {
            Kwargs::new()
                .with("start_val", i64::from(s))
                .with("max_steps", 1 << 30)
        })
        .collect();
    which
        .builder()
        .registered_each("CountingEnv", N, kwargs)
        .build()
        .unwrap_or_else(|err| panic!("{which:?}: build a pool of counters: {err}"))
}

/// Every pool row on `which`, on one pool, then the calls after shutdown.
fn pool_table(which: Which) {
    let pool = counters(which);
    let mut counts = STARTS;
    for row in pool_rows() {
        let what = format!("{which:?}: {}", row.name);
        prepare(&pool, row.before, &mut counts);
        let err = match (row.call)(&pool) {
            Ok(()) => panic!("{what}: expected an error"),
            Err(err) => err,
        };
        check_error(&err, &row.expected, row.says, &what);
        assert_eq!(
            pool.in_flight(),
            row.before.in_flight(),
            "{what}: nothing sent, nothing taken"
        );
        check_sound(&pool, &mut counts, &what);
    }
    after_shutdown(&pool, which);
}

/// Every call after shutdown (with results in flight) is `ShutDown`, even
/// one whose arguments are bad as well; shutdown is idempotent.
fn after_shutdown(pool: &AsyncEnvPool, which: Which) {
    let mut counts = STARTS;
    prepare(pool, Before::Busy, &mut counts);
    pool.shutdown();
    pool.shutdown();
    type Call = fn(&AsyncEnvPool) -> Result<(), PoolError>;
    let calls: [(&str, Call); 14] = [
        ("reset", |p| p.reset(None).map(drop)),
        ("step", |p| p.step(actions(&[1; N])).map(drop)),
        ("step_and_maybe_reset", |p| {
            p.step_and_maybe_reset(actions(&[1; N])).map(drop)
        }),
        ("async_reset_send", |p| {
            p.async_reset_send(None, Target::Env(3))
        }),
        ("async_step_send", |p| {
            p.async_step_send(action(1), Target::Env(3))
        }),
        ("async_step_and_maybe_reset_send", |p| {
            p.async_step_and_maybe_reset_send(actions(&[1]), Target::Envs(vec![3]))
        }),
        ("a send to a busy env", |p| {
            p.async_step_send(action(1), Target::Env(0))
        }),
        ("async_reset_recv", |p| {
            p.async_reset_recv(Recv::new()).map(drop)
        }),
        ("async_step_recv", |p| {
            p.async_step_recv(Recv::all(2)).map(drop)
        }),
        ("async_step_and_maybe_reset_recv", |p| {
            p.async_step_and_maybe_reset_recv(Recv::new()).map(drop)
        }),
        ("async_reset_recv_env", |p| {
            p.async_reset_recv_env(3, None).map(drop)
        }),
        ("async_step_recv_env", |p| {
            p.async_step_recv_env(2, None).map(drop)
        }),
        ("async_step_and_maybe_reset_recv_env", |p| {
            p.async_step_and_maybe_reset_recv_env(1, None).map(drop)
        }),
        ("a poll", |p| {
            p.async_step_recv(Recv::new().timeout(Duration::ZERO))
                .map(drop)
        }),
    ];
    for (name, call) in calls {
        assert_eq!(
            call(pool),
            Err(PoolError::ShutDown),
            "{which:?}: {name} after shutdown"
        );
    }
}

#[test]
fn pool_rows_on_threads() {
    watchdog(|| pool_table(Which::Threads));
}

#[test]
fn pool_rows_on_processes_with_the_queue() {
    watchdog(|| pool_table(Which::Queue));
}

#[test]
fn pool_rows_on_processes_with_shm() {
    watchdog(|| pool_table(Which::Shm));
}

/// A builder with bad arguments.
struct BuildRow {
    name: &'static str,
    /// The backends it applies to.
    on: &'static [Which],
    build: fn(Which) -> Result<AsyncEnvPool, PoolError>,
    expected: Expected,
    says: &'static [&'static str],
}

/// Every builder row.
fn build_rows() -> Vec<BuildRow> {
    use Expected::{Is, Like};
    vec![
        BuildRow {
            name: "no env",
            on: ALL,
            build: |w| w.builder().build(),
            expected: Is(PoolError::NoEnvs),
            says: &["a pool needs at least one env"],
        },
        BuildRow {
            name: "zero envs by name",
            on: ALL,
            build: |w| {
                w.builder()
                    .registered_n("CountingEnv", 0, Kwargs::new())
                    .registered_each("CountingEnv", 0, vec![])
                    .build()
            },
            expected: Is(PoolError::NoEnvs),
            says: &["at least one env"],
        },
        BuildRow {
            name: "fewer keyword sets than envs",
            on: ALL,
            build: |w| {
                w.builder()
                    .registered_each("CountingEnv", 3, vec![Kwargs::new(); 2])
                    .build()
            },
            expected: Is(PoolError::KwargsLength {
                name: "CountingEnv".into(),
                expected: 3,
                found: 2,
            }),
            says: &["CountingEnv: 2 sets of keyword arguments for 3 envs"],
        },
        BuildRow {
            name: "more keyword sets than envs, after good envs",
            on: ALL,
            build: |w| {
                w.builder()
                    .registered_n("CountingEnv", 1, Kwargs::new())
                    .registered_each("CartPole-v1", 1, vec![Kwargs::new(); 2])
                    .build()
            },
            expected: Is(PoolError::KwargsLength {
                name: "CartPole-v1".into(),
                expected: 1,
                found: 2,
            }),
            says: &["CartPole-v1: 2 sets of keyword arguments for 1 envs"],
        },
        BuildRow {
            name: "an unknown env name",
            on: ALL,
            build: |w| {
                w.builder()
                    .registered_n("CountingEnv", 1, Kwargs::new())
                    .registered_n("Nope-v0", 2, Kwargs::new())
                    .build()
            },
            expected: Like(|e| matches!(e, PoolError::Env(_))),
            says: &["unknown env \"Nope-v0\"", "CountingEnv", "CartPole-v1"],
        },
        BuildRow {
            name: "a keyword an env does not accept",
            on: ALL,
            build: |w| {
                w.builder()
                    .registered_n("CountingEnv", 1, Kwargs::new())
                    .registered_n("CountingEnv", 1, Kwargs::new().with("max_step", 3))
                    .build()
            },
            expected: Like(|e| build_env(e) == Some(1)),
            says: &["env 1", "max_step", "accepted"],
        },
        BuildRow {
            name: "a keyword of the wrong type",
            on: ALL,
            build: |w| {
                w.builder()
                    .registered_n("CountingEnv", 1, Kwargs::new().with("start_val", "ten"))
                    .build()
            },
            expected: Like(|e| build_env(e) == Some(0)),
            says: &["env 0", "\"start_val\"", "must be an int"],
        },
        BuildRow {
            name: "a keyword out of range",
            on: ALL,
            build: |w| {
                w.builder()
                    .registered_n("CountingEnv", 2, Kwargs::new())
                    .registered_n("CountingEnv", 1, Kwargs::new().with("max_steps", i64::MAX))
                    .build()
            },
            expected: Like(|e| build_env(e) == Some(2)),
            says: &["env 2", "\"max_steps\"", "does not fit in i32"],
        },
        BuildRow {
            name: "heterogeneous envs, dense",
            on: &[Which::Threads, Which::Queue],
            build: |w| {
                w.builder()
                    .stack(StackMode::Dense)
                    .registered_n("CartPole-v1", 1, Kwargs::new())
                    .registered_n("Pendulum-v1", 1, Kwargs::new())
                    .build()
            },
            expected: Like(|e| matches!(e, PoolError::Specs { .. })),
            says: &["action", "env 1", "env 0"],
        },
        BuildRow {
            name: "heterogeneous envs, shm",
            on: &[Which::Shm],
            build: |w| {
                w.builder()
                    .stack(StackMode::Lazy)
                    .registered_n("CartPole-v1", 1, Kwargs::new())
                    .registered_n("Pendulum-v1", 1, Kwargs::new())
                    .build()
            },
            expected: Like(|e| matches!(e, PoolError::Proc(ProcError::ShmUnavailable { .. }))),
            says: &["\"action\"", "env 1", "dtype f32"],
        },
        BuildRow {
            name: "a closure env",
            on: PROCS,
            build: |w| {
                w.builder()
                    .registered_n("CountingEnv", 2, Kwargs::new())
                    .env(|| Ok(Box::new(CountingEnv::new(0, 5)) as Box<dyn Env>))
                    .build()
            },
            expected: Is(PoolError::NeedsRegistry { env: 2 }),
            says: &["env 2 is a closure"],
        },
        BuildRow {
            name: "fewer CPU sets than workers",
            on: ALL,
            build: |w| {
                w.pinned(Affinity::per_worker([[0]]))
                    .registered_n("CountingEnv", 4, Kwargs::new())
                    .build()
            },
            expected: Like(|e| {
                affinity_error(e)
                    == Some(&AffinityError::Count {
                        sets: 1,
                        workers: 2,
                    })
            }),
            says: &["1 CPU sets for 2 workers"],
        },
        BuildRow {
            name: "an empty CPU set",
            on: ALL,
            build: |w| {
                w.pinned(Affinity::by_worker(
                    |w| if w == 1 { vec![] } else { vec![0] },
                ))
                .registered_n("CountingEnv", 4, Kwargs::new())
                .build()
            },
            expected: Like(|e| affinity_error(e) == Some(&AffinityError::Empty { worker: 1 })),
            says: &["worker 1: empty CPU set"],
        },
        BuildRow {
            name: "a CPU this process may not use",
            on: ALL,
            build: |w| {
                w.pinned(Affinity::per_worker([vec![0], vec![1000]]))
                    .registered_n("CountingEnv", 4, Kwargs::new())
                    .build()
            },
            expected: Like(|e| {
                matches!(
                    affinity_error(e),
                    Some(AffinityError::Unavailable {
                        worker: 1,
                        cpu: 1000,
                        ..
                    })
                )
            }),
            says: &["worker 1", "CPU 1000 is not available"],
        },
        BuildRow {
            name: "a CPU beyond any CPU set",
            on: ALL,
            build: |w| {
                w.pinned(Affinity::per_worker([vec![0], vec![100_000]]))
                    .registered_n("CountingEnv", 4, Kwargs::new())
                    .build()
            },
            expected: Like(|e| {
                affinity_error(e)
                    == Some(&AffinityError::OutOfRange {
                        worker: 1,
                        cpu: 100_000,
                    })
            }),
            says: &["worker 1", "CPU 100000 is out of range"],
        },
    ]
}

/// Every builder row on `which`; afterwards a pool builds and runs there.
fn build_table(which: Which) {
    common::test_envs::register();
    for row in build_rows().into_iter().filter(|r| r.on.contains(&which)) {
        let what = format!("{which:?}: {}", row.name);
        match (row.build)(which) {
            Ok(_) => panic!("{what}: expected an error"),
            Err(err) => check_error(&err, &row.expected, row.says, &what),
        }
    }
    let pool = counters(which);
    let mut counts = STARTS;
    check_sound(
        &pool,
        &mut counts,
        &format!("{which:?}: after the builder rows"),
    );
}

#[test]
fn build_rows_on_threads() {
    watchdog(|| build_table(Which::Threads));
}

#[test]
fn build_rows_on_processes_with_the_queue() {
    watchdog(|| build_table(Which::Queue));
}

#[test]
fn build_rows_on_processes_with_shm() {
    watchdog(|| build_table(Which::Shm));
}

/// Zero threads, zero envs per worker and zero threads per worker cannot
/// be asked for: every setter takes 0 as its default. Pools built so work.
#[test]
fn zero_threads_cannot_be_asked_for() {
    watchdog(|| {
        assert_eq!(NonZeroUsize::new(0), None);
        let options = ProcOptions::for_test("rlpool_worker")
            .envs_per_worker(0)
            .threads_per_worker(0);
        for backend in [
            Backend::Threading(pool::ThreadOptions::default().threads(0)),
            Backend::Multiprocessing(options),
        ] {
            let pool = AsyncEnvPool::builder()
                .backend(backend.clone())
                .registered_n("CountingEnv", 2, Kwargs::new().with("max_steps", 100))
                .build()
                .unwrap_or_else(|err| panic!("{backend:?}: {err}"));
            let out = pool.step(actions(&[1, 1])).unwrap();
            assert_eq!(env_index(&out), [0, 1]);
            if let Backend::Multiprocessing(_) = backend {
                // Zero envs per worker counts as one: a worker per env.
                assert_eq!(pool.worker_pids().len(), 2);
            }
        }
    });
}
