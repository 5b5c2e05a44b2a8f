//! `Cell`: one env of the threading backend, its buffers and its result,
//! and what a worker does with it: `prepare` (the sent input copied in,
//! unless the send wrote it in place),
//! `run_cell` (the env's call, a panic caught), `sync_root` (a deferred
//! root brought up to date).

use std::panic::{catch_unwind, AssertUnwindSafe};

use envs::Env;
use pool_core::{Op, Runner};
use tensordict::TensorDict;

use crate::queue::Job;
use crate::ThreadError;

/// One env, its buffers and its result.
pub(super) struct Cell {
    pub(super) env: Box<dyn Env>,
    pub(super) name: String,
    pub(super) op: Op,
    /// Whether a reset was given an input (its state entries).
    pub(super) reset_with_input: bool,
    /// Whether the input buffer is a view of the env's input row, which a
    /// send writes (`InputRows`): the worker copies no input.
    pub(super) input_lent: bool,
    /// The env's buffers (input, `"next"` entries, root), and what it was
    /// doing (for a panic's message).
    pub(super) runner: Runner,
    pub(super) error: Option<ThreadError>,
}

/// Copies the env's inputs from `src` (row `row`, or all of it).
pub(super) fn copy_input(
    src: &TensorDict,
    row: Option<usize>,
    input: &mut TensorDict,
) -> Result<(), tensordict::TensorDictError> {
    match row {
        Some(row) => src.read_row(row, input),
        None => input.fill_from(src),
    }
}

/// Brings env `env`'s root up to date if its last step deferred it (see
/// `Runner::defer_root`), before anyone reads the cell's root; a failure
/// to (an env that changed its buffers' layout) becomes the env's error.
/// Returns whether it failed.
pub(super) fn sync_root(env: usize, cell: &mut Cell) -> bool {
    match cell.runner.sync_root() {
        Ok(()) => false,
        Err(source) => {
            cell.error.get_or_insert_with(|| ThreadError::Env {
                env,
                name: cell.name.clone(),
                during: "step",
                source: Box::new(source.into()),
            });
            true
        }
    }
}

/// Sets the cell up for `job`: its operation, and its input copied from the
/// sent tensordict (unless the send wrote it into the env's input row). An input that cannot be copied (the send checked it, so
/// only if the env changed its input buffer's keys) is the env's error.
/// Returns whether it failed.
#[inline]
pub(super) fn prepare(job: &Job<'_>, cell: &mut Cell) -> bool {
    cell.op = job.op;
    cell.reset_with_input = false;
    let Some((src, row)) = job.input else {
        return false;
    };
    cell.reset_with_input = job.op == Op::Reset;
    if cell.input_lent {
        // The send wrote it into the input row.
        return false;
    }
    match copy_input(src, row, &mut cell.runner.input) {
        Ok(()) => false,
        Err(source) => {
            cell.error = Some(ThreadError::Input {
                env: job.env,
                name: cell.name.clone(),
                source: Box::new(source),
            });
            true
        }
    }
}

/// Runs one env's operation, catching a panic; records its error in the
/// cell. Returns whether it failed.
#[inline]
pub(super) fn run_cell(env: usize, cell: &mut Cell) -> bool {
    let Cell {
        env: inner,
        runner,
        op,
        reset_with_input,
        ..
    } = cell;
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        runner.run(&mut **inner, *op, *reset_with_input)
    }));
    let error = match outcome {
        Ok(Ok(())) => {
            // (Not assigned when already `None`: the drop of the old one is
            // a call.)
            if cell.error.is_some() {
                cell.error = None;
            }
            return false;
        }
        Ok(Err(pool_core::RunError { during, source })) => ThreadError::Env {
            env,
            name: cell.name.clone(),
            during,
            source,
        },
        Err(payload) => ThreadError::Panicked {
            env,
            name: cell.name.clone(),
            during: cell.runner.during,
            message: pool_core::panic_message(&*payload),
        },
    };
    cell.error = Some(error);
    true
}
