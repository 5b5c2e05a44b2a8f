//! The batch rows of the shm exchange: with
//! [`Rows::Batch`](pool_core::Rows::Batch), every env's latest result is
//! read out of its slot straight into its row of the two batches of a
//! [`pool_core::BatchRows`] laid out as the slots' result and next areas.

use std::sync::{Mutex, MutexGuard};

use exchange::Exchange;
use pool_core::batch_rows::{CELL_STALE, NEXT_ROW, ROOT_ROW};
use pool_core::{lock, BatchRows};
use smallvec::SmallVec;
use tensordict::TensorDict;

use super::{Cell, Shared, Slot};
use crate::ProcError;

/// What a read of a slot into its rows leaves current: both rows (the
/// fields the worker did not publish keep their values, as the cell's
/// would), not the cell, which is filled from them when read one by one.
const READ_INTO_ROWS: u8 = NEXT_ROW | ROOT_ROW | CELL_STALE;

/// The rows of the `n` envs of `slots`, laid out as `exchange`'s result
/// (`"next"` batch) and next (root batch) areas, starting as the cells do;
/// `None` if a cell does not fit them.
pub(super) fn shm_rows(exchange: &Exchange, slots: &[Slot]) -> Option<Mutex<BatchRows>> {
    let n = slots.len();
    let next = exchange.zeros_rows(exchange::Area::Result, n).ok()?;
    let root = exchange.zeros_rows(exchange::Area::Next, n).ok()?;
    let cells: Vec<MutexGuard<'_, Cell>> = slots.iter().map(Slot::lock).collect();
    let nexts: Vec<&TensorDict> = cells.iter().map(|c| &c.next).collect();
    let roots: Vec<&TensorDict> = cells.iter().map(|c| &c.root).collect();
    BatchRows::new(next, root, &nexts, &roots).map(Mutex::new)
}

/// Locks the batch rows (before any cell, never after one).
pub(super) fn lock_rows(rows: &Mutex<BatchRows>) -> MutexGuard<'_, BatchRows> {
    // The rows are written only between a successful read's checks and
    // its end.
    lock(rows)
}

impl Shared {
    /// Reads the results newly published in the slots of `fresh` (envs in
    /// flight) into their rows, in one pass with the batches' columns made
    /// writable once; appends to `ready` those done (or failed) now.
    pub(super) fn read_into_rows(
        &self,
        rows: &Mutex<BatchRows>,
        shm: &Exchange,
        mut fresh: SmallVec<[usize; 64]>,
        ready: &mut Vec<usize>,
    ) {
        let mut rows = lock_rows(rows);
        let (next, root) = rows.batches_mut();
        match (
            shm.columns(exchange::Area::Result, next),
            shm.columns(exchange::Area::Next, root),
        ) {
            (Ok(mut result), Ok(mut next)) => {
                fresh.retain(|env| self.poll_into_rows(*env, shm, &mut result, &mut next));
            }
            // Cannot happen (the rows are made from the slots' schemas
            // and changed only here): the envs fail rather than have
            // results that rows and cells disagree on.
            (Err(err), _) | (_, Err(err)) => {
                for env in fresh {
                    let message = format!("env {env}: its batch rows: {err}");
                    if self.fail(env, ProcError::Shm { message }) {
                        ready.push(env);
                    }
                }
                return;
            }
        }
        // Marked before the rows are unlocked: a receiver that saw DONE or
        // FAILED takes the result (`gather`, `peek`) only after.
        for &env in &fresh {
            let flags = if self.phases.is_failed(env) {
                0
            } else {
                READ_INTO_ROWS
            };
            rows.mark(env, flags);
        }
        ready.extend(fresh);
    }

    /// Shm with batch rows: reads a result newly published in env `env`'s
    /// slot into its row of `result` and `next` (columns of the rows);
    /// whether the env is done (or failed) now.
    fn poll_into_rows(
        &self,
        env: usize,
        shm: &Exchange,
        result: &mut exchange::Columns<'_>,
        next: &mut exchange::Columns<'_>,
    ) -> bool {
        self.poll_with(env, |cell| {
            shm.read_rows(env, cell.taken, env, result, next)
        })
    }
}
