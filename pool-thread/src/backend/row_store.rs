//! `RowStore`: the threading backend's batch rows, lent to the envs when
//! it can be (each env's buffers are views of its rows, so that a result
//! lands in its row as the env writes it, and a receive copies rows out),
//! else written from the envs' buffers (`BatchRows`).

use std::sync::MutexGuard;

use pool_core::batch_rows::{NEXT_ROW, ROOT_ROW};
use pool_core::spin::PUBLISH_RUN_ENVS;
use pool_core::{BatchRows, Op};
use smallvec::SmallVec;
use tensordict::{LeafMap, LentRows, TensorDict, ViewCheck};

use super::cell::Cell;
use super::worker::Ran;

/// Every env's latest result in its row of two `[num_envs, ..]` batches.
#[derive(Debug)]
pub(super) enum RowStore {
    /// Results copied into the rows when published (envs whose results
    /// hold a non-tensor).
    Copied(BatchRows),
    /// Rows lent to the envs: each env's `"next"` and root buffers are
    /// views of its rows.
    Lent(Lent),
}

/// Per env, the views of its rows that become its `"next"` and root
/// buffers.
pub(super) type Views = Vec<(TensorDict, TensorDict)>;

/// Lent rows ([`RowStore::Lent`]).
#[derive(Debug)]
pub(super) struct Lent {
    next: LentRows,
    root: LentRows,
    /// Where the root's tensors sit among the `"next"` ones (`None` if a
    /// root key is not a `"next"` key: roots are then never deferred).
    root_in_next: Option<LeafMap>,
    /// Per env: which of `NEXT_ROW`, `ROOT_ROW` and [`ROOT_IN_NEXT`] hold.
    /// Cleared by a send before the env runs ([`RowStore::sent`]), set
    /// when its result is published: a row whose flags are set is not
    /// being written, which is what makes a gather of it sound.
    flags: Vec<u8>,
}

/// In a lent env's flags: its root is its step's result (a deferred root,
/// `Runner::defer_root`): its root row is stale, and a gather takes the
/// root from its `"next"` row.
const ROOT_IN_NEXT: u8 = 8;

impl RowStore {
    /// The rows of envs whose buffers are `nexts` and `roots` (one layout),
    /// lent when every result entry is a tensor: then also each env's views
    /// (its new `"next"` and root buffers, starting as its buffers' values).
    /// `None` if there is no env or the buffers differ in layout.
    pub(super) fn new(
        nexts: &[&TensorDict],
        roots: &[&TensorDict],
    ) -> Option<(RowStore, Option<Views>)> {
        if roots.len() != nexts.len() {
            return None;
        }
        let stacked = |tds: &[&TensorDict]| -> Option<TensorDict> {
            let mut batch = TensorDict::zeros_stacked(tds.first()?, tds.len()).ok()?;
            batch.write_rows(tds).ok()?;
            Some(batch)
        };
        let (next, root) = (stacked(nexts)?, stacked(roots)?);
        if let (Some((next, next_views)), Some((root, root_views))) =
            (LentRows::lend(&next), LentRows::lend(&root))
        {
            let lent = Lent {
                root_in_next: root.leaves_in(&next),
                next,
                root,
                flags: vec![0; nexts.len()],
            };
            let views = next_views.into_iter().zip(root_views).collect();
            return Some((RowStore::Lent(lent), Some(views)));
        }
        Some((
            RowStore::Copied(BatchRows::new(next, root, nexts, roots)?),
            None,
        ))
    }

    /// The checks of the lent rows' views, for the envs' workers to find
    /// their results' flags as they run them ([`RowViews::flags`]);
    /// `None` for copied rows.
    pub(super) fn views(&self) -> Option<RowViews> {
        match self {
            RowStore::Copied(_) => None,
            RowStore::Lent(lent) => Some(RowViews {
                next: lent.next.view_check(),
                root: lent.root.view_check(),
                root_in_next: lent.root_in_next.is_some(),
            }),
        }
    }

    /// Publishes a run of results whose flags their workers found
    /// ([`RowViews::flags`]: every result not failed has them): lent rows
    /// only. A failed env's rows hold no result.
    pub(super) fn store_flags(&mut self, held: &[Ran]) {
        if let RowStore::Lent(lent) = self {
            for ran in held {
                lent.flags[ran.env] = if ran.failed {
                    0
                } else {
                    ran.flags.unwrap_or(0)
                };
            }
        }
    }

    /// Whether a root that is its step's entries may stay in the cell
    /// unwritten (`Runner::defer_root`): the store takes it from the
    /// step's row. True unless the rows are lent and a root key is not a
    /// `"next"` key.
    pub(super) fn defers_roots(&self) -> bool {
        match self {
            RowStore::Copied(_) => true,
            RowStore::Lent(lent) => lent.root_in_next.is_some(),
        }
    }

    /// Envs `envs` are sent: their rows no longer hold their current
    /// result, and their envs may write them from now on (lent rows; the
    /// copied rows are written only at publication, under this store's
    /// lock).
    pub(super) fn sent(&mut self, envs: impl IntoIterator<Item = usize>) {
        if let RowStore::Lent(lent) = self {
            for env in envs {
                lent.flags[env] = 0;
            }
        }
    }

    /// Publishes the results of a run (`held`: each env with whether it
    /// failed; `cells`: their cells, locked, in the same order, so that
    /// none of them runs) into their rows, setting `root_in_row[j]` when
    /// `held[j]`'s deferred root is in its rows (else its cell brings it up
    /// to date). A failed env's rows hold no result. Lent rows hold the
    /// results already, unless an env replaced a tensor of its buffers:
    /// such a result is copied into its rows, or, if it no longer fits them
    /// (an env that changed its layout), left unmarked for the receiver to
    /// read from the env and report. A deferred root stays where it is, in
    /// the `"next"` row ([`ROOT_IN_NEXT`]). Copied rows are written as
    /// `BatchRows::store_many` does.
    pub(super) fn store_run(
        &mut self,
        held: &[Ran],
        cells: &[MutexGuard<'_, Cell>],
        root_in_row: &mut [bool],
    ) {
        let lent = match self {
            RowStore::Copied(rows) => return store_copied(rows, held, cells, root_in_row),
            RowStore::Lent(lent) => lent,
        };
        for ((ran, cell), in_row_root) in held.iter().zip(cells).zip(root_in_row) {
            let env = ran.env;
            if ran.failed {
                lent.flags[env] = 0;
                continue;
            }
            let runner = &cell.runner;
            let (flags, deferred_in_row) = lent_flags(
                cell.op,
                runner.root_is_next(),
                lent.root_in_next.is_some(),
                || in_row(&lent.next, env, &runner.next),
                || in_row(&lent.root, env, &runner.root),
            );
            *in_row_root = deferred_in_row;
            lent.flags[env] = flags;
        }
    }

    /// The results of `op` of `envs` (distinct, ascending) as batches, as
    /// `BatchRows::gather`: `None` unless every row wanted is current. Lent
    /// rows are copied out (for every env in order, one copy per tensor).
    pub(super) fn gather(
        &mut self,
        op: Op,
        envs: &[usize],
    ) -> Option<(Option<TensorDict>, Option<TensorDict>)> {
        let lent = match self {
            RowStore::Copied(rows) => return rows.gather(op, envs),
            RowStore::Lent(lent) => lent,
        };
        let want = BatchRows::wanted(op);
        // Distinct and ascending: as many as there are envs is every env,
        // whose flags are checked in one pass over them (no lookups).
        let current = if envs.len() == lent.flags.len() {
            // Folded: one pass without a branch per env.
            lent.flags.iter().fold(want, |all, &f| all & f) & want == want
        } else {
            envs.iter()
                .all(|&env| lent.flags.get(env).is_some_and(|f| f & want == want))
        };
        if !current {
            return None;
        }
        // Both gathers are sound: every row gathered has its flags set, under
        // the lock the caller holds on this store: its env's result was
        // published (by the worker that ran it, under this lock, after the
        // env's step ended under its cell's lock: its writes happen before)
        // and it was not sent again since (a send clears the flags under
        // this lock before the env can run). So no view of these rows is in
        // use. (A stale root row, `ROOT_IN_NEXT`, is taken from its `"next"`
        // row instead; a gather of a run of rows may read it in its copy of
        // the run and then write the `"next"` row over it. Only whoever
        // reads the env's root brings that row up to date through its view,
        // under its cell's lock: the receiver taking these envs, not now.)
        // SAFETY: as above.
        let next = (want & NEXT_ROW != 0).then(|| unsafe { lent.next.gather(envs) });
        let root = (want & ROOT_ROW != 0).then(|| {
            // Filled in place: a `collect` into a `SmallVec` pushes one by one.
            let mut instead: SmallVec<[bool; 64]> = SmallVec::from_elem(false, envs.len());
            for (instead, &env) in instead.iter_mut().zip(envs) {
                *instead = lent.flags[env] & ROOT_IN_NEXT != 0;
            }
            match &lent.root_in_next {
                // SAFETY: as above.
                Some(map) => unsafe { lent.root.gather_or(envs, &instead, &lent.next, map) },
                // SAFETY: as above.
                None => unsafe { lent.root.gather(envs) },
            }
        });
        Some((next, root))
    }
}

/// [`RowStore::store_run`] into copied rows: the results that did not fail,
/// their columns written once (`BatchRows::store_many`).
fn store_copied(
    rows: &mut BatchRows,
    held: &[Ran],
    cells: &[MutexGuard<'_, Cell>],
    root_in_row: &mut [bool],
) {
    let mut at: SmallVec<[usize; PUBLISH_RUN_ENVS]> = SmallVec::new();
    let mut envs: SmallVec<[usize; PUBLISH_RUN_ENVS]> = SmallVec::new();
    let mut ops: SmallVec<[Op; PUBLISH_RUN_ENVS]> = SmallVec::new();
    let mut nexts: SmallVec<[&TensorDict; PUBLISH_RUN_ENVS]> = SmallVec::new();
    let mut roots: SmallVec<[&TensorDict; PUBLISH_RUN_ENVS]> = SmallVec::new();
    let mut deferred: SmallVec<[bool; PUBLISH_RUN_ENVS]> = SmallVec::new();
    for (j, (&Ran { env, failed, .. }, cell)) in held.iter().zip(cells).enumerate() {
        if failed {
            // None of its rows holds its result.
            rows.mark(env, 0);
        } else {
            at.push(j);
            envs.push(env);
            ops.push(cell.op);
            nexts.push(&cell.runner.next);
            roots.push(&cell.runner.root);
            deferred.push(cell.runner.root_is_next());
        }
    }
    let mut copied: SmallVec<[bool; PUBLISH_RUN_ENVS]> = SmallVec::new();
    copied.extend(at.iter().map(|_| false));
    rows.store_many(&envs, &ops, &nexts, &roots, &deferred, &mut copied);
    for (&j, &copied) in at.iter().zip(&copied) {
        root_in_row[j] = copied;
    }
}

/// Whether env `env`'s result `buffer` is in its row of `rows`: still the
/// row's view, or copied into it (an env that replaced a tensor). The
/// caller holds the env's cell: the env is not running.
fn in_row(rows: &LentRows, env: usize, buffer: &TensorDict) -> bool {
    if rows.is_view(env, buffer) {
        return true;
    }
    // SAFETY: the row's only view is the env's buffer (tensors of it that
    // still view the row are skipped), and the env is not running (its
    // cell is held); no gather reads the row meanwhile (its flags are
    // clear until this publication sets them, under the same lock).
    unsafe { rows.write_row(env, buffer) }.is_ok()
}

/// The lent rows' view checks apart from the store ([`RowStore::views`]):
/// what lets a worker find, right after it ran an env (its cell held),
/// where the env's result is, so that its publication needs neither the
/// cell nor a look at the buffers.
#[derive(Debug)]
pub(super) struct RowViews {
    next: ViewCheck,
    root: ViewCheck,
    /// Whether a deferred root may be taken from the `"next"` row
    /// (`Lent::root_in_next`).
    root_in_next: bool,
}

impl RowViews {
    /// The flags that [`RowStore::store_run`] would give env `env`'s
    /// result, `cell` (held, its run over and not failed), when its
    /// buffers are still its rows' views; `None` otherwise (a buffer the
    /// env replaced a tensor of, to be copied into its row, or a deferred
    /// root to bring up to date): its run is then published by
    /// `store_run`.
    #[inline]
    pub(super) fn flags(&self, env: usize, cell: &Cell) -> Option<u8> {
        let runner = &cell.runner;
        // Whether every buffer asked about is its rows' view.
        let views = std::cell::Cell::new(true);
        let is_view = |check: &ViewCheck, buffer: &TensorDict| {
            let view = check.is_view(env, buffer);
            views.set(views.get() && view);
            view
        };
        let (flags, deferred_in_row) = lent_flags(
            cell.op,
            runner.root_is_next(),
            self.root_in_next,
            || is_view(&self.next, &runner.next),
            || is_view(&self.root, &runner.root),
        );
        let root_current = deferred_in_row || !runner.root_is_next();
        (views.get() && root_current).then_some(flags)
    }
}

/// The flags of a lent env's result after `op`, one rule for
/// [`RowStore::store_run`] and [`RowViews::flags`]: `next_in_row` and
/// `root_in_row` tell whether its `"next"` and root buffers are in their
/// rows, asked only for the buffers `op` wrote (the root only when it is
/// not deferred); also whether its deferred root is in the `"next"` row
/// (`root_in_next`: the rows allow it), else its cell brings it up to date.
#[inline]
fn lent_flags(
    op: Op,
    root_is_next: bool,
    root_in_next: bool,
    next_in_row: impl FnOnce() -> bool,
    root_in_row: impl FnOnce() -> bool,
) -> (u8, bool) {
    let mut flags = 0;
    if op != Op::Reset && next_in_row() {
        flags |= NEXT_ROW;
    }
    // A deferred root is its step's result: in the `"next"` row, if that
    // holds the step.
    let deferred_in_row = op != Op::Step && root_is_next && root_in_next && flags & NEXT_ROW != 0;
    if deferred_in_row {
        flags |= ROOT_ROW | ROOT_IN_NEXT;
    } else if op != Op::Step && !root_is_next && root_in_row() {
        flags |= ROOT_ROW;
    }
    (flags, deferred_in_row)
}
