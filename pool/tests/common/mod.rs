//! Helpers shared by the pool's integration tests: a watchdog for tests that
//! could deadlock, builders of action tensordicts, readers of batches, and
//! the backend-generic conformance suite (`conformance`), and the test envs
//! (`test_envs`, the workspace's `test-envs` crate).

// Each test crate uses a subset of these helpers.
#![allow(dead_code)]

/// Expands each conformance test into a `#[test]` of module `$module`,
/// run under the watchdog with the backend `$configure` (a function of the
/// test crate's root: `fn(PoolBuilder) -> PoolBuilder`). Every conformance
/// test is listed here once, so each backend runs all of them.
#[allow(unused_macros)] // Not every test crate runs the suite.
macro_rules! conformance {
    ($module:ident, $configure:ident) => {
        conformance!(@expand $module, $configure;
    specs_and_shapes,
    async_reset_and_step_with_min_get,
    poll_takes_at_most_one_result,
    poll_with_nothing_ready_times_out,
    deadline_batch_of_three,
    timeout_without_max_get_waits_for_every_env,
    deadline_returns_what_is_ready,
    max_get_below_min_get_is_rejected,
    full_batch_order_with_different_delays,
    step_and_maybe_reset_resets_done_envs,
    heterogeneous_envs_stack_lazily,
    heterogeneous_envs_are_an_error_when_dense,
    step_results_keep_the_sent_root,
    held_results_are_never_overwritten,
    collectors_drive_their_own_envs,
    concurrent_batch_receivers_take_each_result_once,
    a_batch_receive_whose_min_get_became_unreachable_fails,
    per_env_receive_takes_only_its_env,
    batch_receive_never_takes_a_per_env_send,
    out_of_order_sends_come_back_sorted,
    sends_with_different_env_index_kinds_stack_densely,
    maybe_dense_batches_of_one_layout_are_the_dense_ones,
    a_batch_that_cannot_be_built_loses_nothing,
    env_panic_is_reported,
    env_error_is_reported,
    failure_in_a_sync_step_loses_nothing,
    bad_receive_arguments,
    busy_send_lists_the_busy_envs,
    out_of_range_envs_are_errors,
    duplicate_envs_are_errors,
    target_length_mismatch_is_an_error,
    env_index_target_errors,
    step_without_an_action_is_an_error,
    sync_calls_fail_while_envs_are_in_flight,
    per_env_receive_of_an_idle_env_is_an_error,
    per_env_timeout_keeps_the_result,
    batch_timeout_loses_nothing,
    build_errors,
    calls_after_shutdown_are_errors,
    drop_with_results_in_flight,
    shutdown_wakes_blocked_receivers,
        );
    };
    (@expand $module:ident, $configure:ident; $($(#[$attr:meta])* $name:ident),* $(,)?) => {
        mod $module {
            $(
                $(#[$attr])*
                #[test]
                fn $name() {
                    super::common::watchdog(|| super::common::conformance::$name(super::$configure));
                }
            )*
        }
    };
}

pub(crate) mod conformance;
/// The test envs, shared by every crate's tests (the `test-envs` crate),
/// here as `common::test_envs` for the modules that name them so.
#[allow(clippy::single_component_path_imports)] // The path is the point.
pub(crate) use test_envs;

use std::panic::resume_unwind;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use pool::tensordict::{Entry, StackedTensorDict, Tensor, TensorDict};
use pool::{Backend, PoolBuilder, PoolError};

/// How long a watched test body may run before it is declared deadlocked.
/// Generous: a slow, loaded machine must never trip it.
pub(crate) const WATCHDOG: Duration = Duration::from_secs(60);

/// Runs `body` in its own thread and waits for it at most [`WATCHDOG`]:
/// a body that panics fails the test with its own panic, and one that does
/// not finish in time fails it with "deadlock?" (the stuck thread is left
/// behind; the test binary exits anyway).
pub(crate) fn watchdog<F>(body: F)
where
    F: FnOnce() + Send + 'static,
{
    let (done, finished) = mpsc::channel::<()>();
    let handle = std::thread::Builder::new()
        .name("watched-test-body".into())
        .spawn(move || {
            body();
            // The receiver may be gone if the watchdog already fired.
            let _ = done.send(());
        })
        .expect("spawn the watched test body");
    match finished.recv_timeout(WATCHDOG) {
        // Finished, or panicked (its sender was dropped while unwinding).
        Ok(()) | Err(RecvTimeoutError::Disconnected) => {
            if let Err(payload) = handle.join() {
                resume_unwind(payload);
            }
        }
        Err(RecvTimeoutError::Timeout) => {
            panic!("deadlock? the test body did not finish within {WATCHDOG:?}")
        }
    }
}

/// How a test configures the pool's backend: the conformance suite is
/// written once and run with each of these (today: worker threads).
pub(crate) type Configure = fn(PoolBuilder) -> PoolBuilder;

/// The threading backend with `n` worker threads.
pub(crate) fn threads(n: usize) -> Backend {
    Backend::Threading(pool::ThreadOptions::default().threads(n))
}

/// A batch of actions, one row per value: batch size `[len]`, `"action"`
/// an `i64` tensor of shape `[len, 1]`.
pub(crate) fn actions(values: &[i64]) -> TensorDict {
    let mut td = TensorDict::new(&[values.len()]);
    td.set(
        "action",
        Tensor::from_vec(&[values.len(), 1], values.to_vec()).expect("shape fits"),
    )
    .expect("batch size fits");
    td
}

/// One env's action: batch size `[]`, `"action"` an `i64` of shape `[1]`.
pub(crate) fn action(value: i64) -> TensorDict {
    let mut td = TensorDict::new(&[]);
    td.set(
        "action",
        Tensor::from_vec(&[1], vec![value]).expect("shape fits"),
    )
    .expect("batch size fits");
    td
}

/// The `"env_index"` entry of a batch, as indices.
pub(crate) fn env_index(batch: &StackedTensorDict) -> Vec<usize> {
    let value = batch
        .get_non_tensor("env_index")
        .unwrap_or_else(|err| panic!("the batch has no env_index: {err}\n{batch}"));
    value
        .as_int_vec()
        .unwrap_or_else(|| panic!("env_index is not a stack of integers: {value}"))
        .into_iter()
        .map(|i| usize::try_from(i).expect("a non-negative env index"))
        .collect()
}

/// The `"env_index"` of one env's result (or of one row of a batch).
pub(crate) fn row_env(row: &TensorDict) -> usize {
    let value = row
        .non_tensor("env_index")
        .unwrap_or_else(|err| panic!("the row has no env_index: {err}\n{row}"));
    let index = value
        .as_int()
        .unwrap_or_else(|| panic!("env_index is not an integer: {value}"));
    usize::try_from(index).expect("a non-negative env index")
}

/// The rows of a batch (dense or lazy), in order.
pub(crate) fn rows(batch: &StackedTensorDict) -> Vec<TensorDict> {
    batch.unbind().expect("a batch has a leading env dim")
}

/// The single element of the `i32` tensor at `key` (CountingEnv's
/// observation).
pub(crate) fn int_at(td: &TensorDict, key: &[&str]) -> i32 {
    let tensor = td
        .tensor(key)
        .unwrap_or_else(|err| panic!("no tensor at {key:?}: {err}\n{td}"));
    tensor.item::<i32>().expect("one i32")
}

/// The single element of the `i64` tensor at `key` (an action).
pub(crate) fn long_at(td: &TensorDict, key: &[&str]) -> i64 {
    td.tensor(key)
        .unwrap_or_else(|err| panic!("no tensor at {key:?}: {err}\n{td}"))
        .item::<i64>()
        .expect("one i64")
}

/// The single element of the bool tensor at `key` (a done flag).
pub(crate) fn flag_at(td: &TensorDict, key: &[&str]) -> bool {
    td.tensor(key)
        .unwrap_or_else(|err| panic!("no tensor at {key:?}: {err}\n{td}"))
        .item::<bool>()
        .expect("one bool")
}

/// The shape of the tensor at `key`.
pub(crate) fn shape_at(td: &TensorDict, key: &[&str]) -> Vec<usize> {
    match td.get(key) {
        Some(Entry::Tensor(t)) => t.shape().to_vec(),
        other => panic!("no tensor at {key:?}: {other:?}"),
    }
}

/// The error of `result`, or a panic that shows the value it got instead.
#[track_caller]
pub(crate) fn expect_err<T: std::fmt::Debug>(
    result: Result<T, PoolError>,
    what: &str,
) -> PoolError {
    match result {
        Ok(value) => panic!("{what}: expected an error, got {value:?}"),
        Err(err) => err,
    }
}

/// Whether process `pid` is gone (reaped: no `/proc` entry; a zombie still
/// has one).
pub(crate) fn gone(pid: u32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Waits up to `patience` for every process of `pids` to be gone.
pub(crate) fn all_gone(pids: &[u32], patience: Duration) -> bool {
    let deadline = std::time::Instant::now() + patience;
    loop {
        if pids.iter().all(|&pid| gone(pid)) {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The names under `/dev/shm` (the pool must add none: its shared memory
/// is a memfd).
pub(crate) fn dev_shm() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}
