//! `ShmRows`: with [`Rows::Batch`](pool_core::Rows::Batch) and the shm exchange, every env's
//! latest result in its row of two batches of all envs, read there
//! straight out of its slot.

use std::sync::{Mutex, MutexGuard};

use pool_core::{lock, Op};
use tensordict::TensorDict;

use super::{Cell, Slot};

/// In [`ShmRows::stale`]: the env's cell lacks its latest result (which is
/// in its rows).
pub(super) const CELL_STALE: u8 = 1;

/// With [`Rows::Batch`](pool_core::Rows::Batch) and the shm exchange: every env's
/// latest result in its row of two batches of all envs, read there straight
/// out of its slot (its cell is filled from the rows only when read one by
/// one). Locked before any cell, never after one.
pub(super) struct ShmRows {
    /// `[num_envs, ..]`: the step results (the slots' result area).
    pub(super) next: TensorDict,
    /// `[num_envs, ..]`: the reset results and next roots (next area).
    pub(super) root: TensorDict,
    /// Per env: `CELL_STALE` or 0.
    pub(super) stale: Vec<u8>,
    /// The batches last gathered for a receive of some envs, reused by the
    /// next gather of as many (see `TensorDict::gather_rows_reusing`).
    gathered: [Option<TensorDict>; 2],
}
impl ShmRows {
    /// The rows of every env, starting as the cells of `slots` do (their
    /// keys not published keep these values); `None` if a cell does not
    /// fit them.
    pub(super) fn new(
        next: TensorDict,
        root: TensorDict,
        slots: &[Slot],
    ) -> Option<Mutex<ShmRows>> {
        let mut rows = ShmRows {
            next,
            root,
            stale: vec![0; slots.len()],
            gathered: [None, None],
        };
        let cells: Vec<MutexGuard<'_, Cell>> = slots.iter().map(Slot::lock).collect();
        let nexts: Vec<&TensorDict> = cells.iter().map(|c| &c.next).collect();
        let roots: Vec<&TensorDict> = cells.iter().map(|c| &c.root).collect();
        let filled = rows
            .next
            .write_rows(&nexts)
            .and(rows.root.write_rows(&roots));
        drop(cells);
        filled.is_ok().then(|| Mutex::new(rows))
    }

    /// The results of `op` of `envs` as batches (see
    /// `ProcBackend::gather`): the rows themselves for all envs in order,
    /// else their rows gathered into the batches of the last such gather.
    pub(super) fn gather(
        &mut self,
        op: Op,
        envs: &[usize],
    ) -> Option<(Option<TensorDict>, Option<TensorDict>)> {
        let ShmRows {
            next,
            root,
            gathered: [next_cache, root_cache],
            ..
        } = self;
        let next = match op {
            Op::Reset => None,
            Op::Step | Op::StepAndMaybeReset => {
                Some(next.gather_rows_reusing(envs, next_cache).ok()?)
            }
        };
        let root = match op {
            Op::Step => None,
            Op::Reset | Op::StepAndMaybeReset => {
                Some(root.gather_rows_reusing(envs, root_cache).ok()?)
            }
        };
        Some((next, root))
    }

    /// Fills env `env`'s cell from its rows if they are newer.
    pub(super) fn sync_cell(&mut self, env: usize, cell: &mut Cell) {
        if self.stale[env] & CELL_STALE == 0 {
            return;
        }
        self.stale[env] = 0;
        // Cannot fail: the rows and the cells have the slots' layouts.
        let _ = self.next.read_row(env, &mut cell.next);
        let _ = self.root.read_row(env, &mut cell.root);
    }
}
pub(super) fn lock_rows(rows: &Mutex<ShmRows>) -> MutexGuard<'_, ShmRows> {
    // The rows are written only between a successful read's checks and
    // its end.
    lock(rows)
}
