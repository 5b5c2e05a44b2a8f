//! `BatchRows`: every env's latest result in its row of two batches of all
//! envs (EnvPool's state buffer), with per-env flags saying which rows are
//! current, shared by both backends.

use smallvec::SmallVec;
use tensordict::TensorDict;

use crate::Op;

/// In an env's flags: its row of the `"next"` batch holds its current
/// result (its step's `"next"` entries).
pub const NEXT_ROW: u8 = 1;
/// In an env's flags: its row of the root batch holds its current result
/// (its reset root, or the root of its next step).
pub const ROOT_ROW: u8 = 2;
/// In an env's flags: the env's own buffers (its cell) lack its current
/// result, which is in its rows: whoever reads the env one by one fills
/// them from the rows first ([`BatchRows::sync_cell`]).
pub const CELL_STALE: u8 = 4;

/// Every env's latest result in its row of two `[num_envs, ..]` batches:
/// a backend writes each result there (a worker thread from its env's
/// buffers, column by column: [`BatchRows::store`]; the process backend
/// straight out of the env's shared-memory slot, then [`BatchRows::mark`]),
/// so that a receive of many results copies nothing (all envs, in order:
/// the batches themselves, copied on write if the caller still holds them
/// when the next results arrive) or gathers rows of one storage per entry
/// ([`BatchRows::gather`]).
///
/// Locking is the backend's: one mutex around the whole, taken by the
/// writer of a row and by a receive's gather.
#[derive(Debug)]
pub struct BatchRows {
    /// `[num_envs, ..]`: the `"next"` results.
    next: TensorDict,
    /// `[num_envs, ..]`: the reset results and next roots.
    root: TensorDict,
    /// Per env: which of [`NEXT_ROW`], [`ROOT_ROW`], [`CELL_STALE`] hold
    /// (none after a failure, or if its result did not fit its rows).
    flags: Vec<u8>,
    /// The batches last gathered from `next` and `root` for a receive of
    /// some envs: the next gather of as many rows writes into them (in
    /// place once the caller has dropped them, so a steady collector
    /// allocates nothing; copied on write if it still holds them).
    gathered: [Option<TensorDict>; 2],
}

impl BatchRows {
    /// The rows of `nexts.len()` envs, shaped like the first env's buffers
    /// and starting as each env's buffers (`nexts[env]`, `roots[env]`);
    /// `None` if there is no env, if the two lists differ in length, or if
    /// the envs' buffers do not share one layout. No flag is set.
    pub fn stacked(nexts: &[&TensorDict], roots: &[&TensorDict]) -> Option<BatchRows> {
        let (first_next, first_root) = (nexts.first()?, roots.first()?);
        let next = TensorDict::zeros_stacked(first_next, nexts.len()).ok()?;
        let root = TensorDict::zeros_stacked(first_root, roots.len()).ok()?;
        BatchRows::new(next, root, nexts, roots)
    }

    /// The rows of `nexts.len()` envs in the batches `next` and `root`
    /// (`[num_envs, ..]`, for example laid out as a shared-memory exchange's
    /// areas), starting as each env's buffers: their keys that no result
    /// writes keep these values. `None` if a batch does not have one row
    /// per env or an env's buffers do not fit its rows. No flag is set.
    pub fn new(
        mut next: TensorDict,
        mut root: TensorDict,
        nexts: &[&TensorDict],
        roots: &[&TensorDict],
    ) -> Option<BatchRows> {
        let n = nexts.len();
        if roots.len() != n
            || next.batch_size().first() != Some(&n)
            || root.batch_size().first() != Some(&n)
        {
            return None;
        }
        next.write_rows(nexts).ok()?;
        root.write_rows(roots).ok()?;
        Some(BatchRows {
            next,
            root,
            flags: vec![0; n],
            gathered: [None, None],
        })
    }

    /// The number of envs (rows).
    pub fn num_envs(&self) -> usize {
        self.flags.len()
    }

    /// The flags of `op`'s result: what a gather of `op` needs current.
    pub fn wanted(op: Op) -> u8 {
        match op {
            Op::Reset => ROOT_ROW,
            Op::Step => NEXT_ROW,
            Op::StepAndMaybeReset => NEXT_ROW | ROOT_ROW,
        }
    }

    /// Env `env`'s flags.
    ///
    /// # Panics
    /// If `env` is not below [`BatchRows::num_envs`] (so do the other
    /// methods that take an env).
    pub fn flags(&self, env: usize) -> u8 {
        self.flags[env]
    }

    /// Sets env `env`'s flags to `flags` (0 after a failure: none of its
    /// rows holds its result).
    pub fn mark(&mut self, env: usize, flags: u8) {
        self.flags[env] = flags;
    }

    /// The `"next"` and root batches, to be written by a backend's own
    /// copy (the process backend's read of a slot into its rows): the
    /// writer then marks the rows it wrote ([`BatchRows::mark`]).
    pub fn batches_mut(&mut self) -> (&mut TensorDict, &mut TensorDict) {
        (&mut self.next, &mut self.root)
    }

    /// The results of `op` of `envs` (distinct, ascending) as batches: the
    /// `"next"` batch (for a step) and the root batch (for a reset or
    /// step-and-maybe-reset). For all envs in order these are the batches
    /// themselves (shared: the next results are written into a copy if
    /// the caller still holds them); otherwise their rows gathered into
    /// the batches of the last gather of as many. `None` unless every row
    /// wanted is current (the caller then reads the envs one by one, which
    /// reports what is wrong with them).
    pub fn gather(
        &mut self,
        op: Op,
        envs: &[usize],
    ) -> Option<(Option<TensorDict>, Option<TensorDict>)> {
        let want = BatchRows::wanted(op);
        if envs.iter().any(|&env| self.flags[env] & want != want) {
            return None;
        }
        debug_assert!(
            envs.windows(2).all(|w| w[0] < w[1]),
            "envs distinct, ascending"
        );
        // Distinct and ascending: as many as there are envs is every env
        // in order, the batches themselves (no look at each index).
        let every = envs.len() == self.num_envs();
        let [next_cache, root_cache] = &mut self.gathered;
        let gather = |batch: &TensorDict, cache: &mut Option<TensorDict>| {
            if every {
                Some(batch.clone())
            } else {
                batch.gather_rows_reusing(envs, cache).ok()
            }
        };
        let next = if want & NEXT_ROW != 0 {
            Some(gather(&self.next, next_cache)?)
        } else {
            None
        };
        let root = if want & ROOT_ROW != 0 {
            Some(gather(&self.root, root_cache)?)
        } else {
            None
        };
        Some((next, root))
    }

    /// Fills env `env`'s own buffers from its rows if they are stale
    /// ([`CELL_STALE`]), which it clears. Returns whether both copies
    /// succeeded (true if there was nothing to copy); buffers built from
    /// the rows' layout always fit.
    pub fn sync_cell(&mut self, env: usize, next: &mut TensorDict, root: &mut TensorDict) -> bool {
        if self.flags[env] & CELL_STALE == 0 {
            return true;
        }
        self.flags[env] &= !CELL_STALE;
        let next_read = self.next.read_row(env, next).is_ok();
        let root_read = self.root.read_row(env, root).is_ok();
        next_read && root_read
    }

    /// Copies the result of `op` of env `env` (its `"next"` buffer `next`,
    /// its root buffer `root`) into its rows and marks those that hold it.
    /// With `root_is_next` (a step-and-maybe-reset that reset nothing, its
    /// root deferred: `Runner::defer_root`), `root` is stale and the root
    /// row is copied from the `"next"` row just written instead. Returns
    /// whether it was: any other deferred root is the caller's to bring up
    /// to date. A result that does not fit its rows (an env that changed
    /// its result's keys or shapes) leaves them unmarked: the receiver
    /// then reads it from the env's buffers and reports it.
    pub fn store(
        &mut self,
        env: usize,
        op: Op,
        next: &TensorDict,
        root: &TensorDict,
        root_is_next: bool,
    ) -> bool {
        let mut flags = 0;
        if op != Op::Reset && self.next.write_rows_at(&[env], &[next]).is_ok() {
            flags |= NEXT_ROW;
        }
        let mut copied = false;
        if op != Op::Step {
            if !root_is_next {
                if self.root.write_rows_at(&[env], &[root]).is_ok() {
                    flags |= ROOT_ROW;
                }
            } else if flags & NEXT_ROW != 0
                && self.root.fill_rows_from(&[env], &self.next, &[env]).is_ok()
            {
                flags |= ROOT_ROW;
                copied = true;
            }
        }
        self.flags[env] = flags;
        copied
    }

    /// [`BatchRows::store`] for several envs at once (`envs[j]` with
    /// `op[j]`, `next[j]`, `root[j]`, `root_is_next[j]`): each batch's
    /// columns written once for all of them, not once per env. Sets
    /// `copied[j]` as `store` returns it. Envs whose results do not fit
    /// their rows (an env that changed its layout) are stored one by one,
    /// so that only they are left unmarked.
    pub fn store_many(
        &mut self,
        envs: &[usize],
        op: &[Op],
        next: &[&TensorDict],
        root: &[&TensorDict],
        root_is_next: &[bool],
        copied: &mut [bool],
    ) {
        const RUN: usize = 16;
        let one_by_one = |rows: &mut BatchRows, copied: &mut [bool]| {
            for j in 0..envs.len() {
                copied[j] = rows.store(envs[j], op[j], next[j], root[j], root_is_next[j]);
            }
        };
        if envs.len() > RUN {
            return one_by_one(self, copied);
        }
        let mut steps: SmallVec<[usize; RUN]> = SmallVec::new();
        let mut step_rows: SmallVec<[&TensorDict; RUN]> = SmallVec::new();
        let mut own_roots: SmallVec<[usize; RUN]> = SmallVec::new();
        let mut own_root_rows: SmallVec<[&TensorDict; RUN]> = SmallVec::new();
        let mut next_roots: SmallVec<[usize; RUN]> = SmallVec::new();
        for j in 0..envs.len() {
            if op[j] != Op::Reset {
                steps.push(envs[j]);
                step_rows.push(next[j]);
            }
            if op[j] != Op::Step {
                if root_is_next[j] {
                    next_roots.push(envs[j]);
                } else {
                    own_roots.push(envs[j]);
                    own_root_rows.push(root[j]);
                }
            }
        }
        let fits = (steps.is_empty() || self.next.write_rows_at(&steps, &step_rows).is_ok())
            && (own_roots.is_empty()
                || self.root.write_rows_at(&own_roots, &own_root_rows).is_ok())
            && (next_roots.is_empty()
                || self
                    .root
                    .fill_rows_from(&next_roots, &self.next, &next_roots)
                    .is_ok());
        if !fits {
            return one_by_one(self, copied);
        }
        for j in 0..envs.len() {
            let mut flags = 0;
            if op[j] != Op::Reset {
                flags |= NEXT_ROW;
            }
            if op[j] != Op::Step {
                flags |= ROOT_ROW;
            }
            copied[j] = op[j] != Op::Step && root_is_next[j];
            self.flags[envs[j]] = flags;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensordict::Tensor;

    fn td(value: f32) -> TensorDict {
        let mut td = TensorDict::new(&[]);
        td.set("x", Tensor::full(&[2], value)).unwrap();
        td
    }

    fn column(td: &TensorDict) -> Vec<f32> {
        td.tensor("x").unwrap().to_vec::<f32>().unwrap()
    }

    /// A gather needs every wanted row current; all envs in order hand out
    /// the batch itself, some envs their rows.
    #[test]
    fn gather_needs_current_rows() {
        let (nexts, roots): (Vec<TensorDict>, Vec<TensorDict>) =
            (0..3).map(|i| (td(i as f32), td(10.0 + i as f32))).unzip();
        let nexts_ref: Vec<&TensorDict> = nexts.iter().collect();
        let roots_ref: Vec<&TensorDict> = roots.iter().collect();
        let mut rows = BatchRows::stacked(&nexts_ref, &roots_ref).unwrap();
        assert_eq!(rows.num_envs(), 3);
        assert!(
            rows.gather(Op::Step, &[0, 1, 2]).is_none(),
            "nothing marked"
        );
        for env in 0..3 {
            assert!(!rows.store(env, Op::Step, &td(5.0 + env as f32), &td(0.0), false));
            assert_eq!(rows.flags(env), NEXT_ROW);
        }
        let (next, root) = rows.gather(Op::Step, &[0, 1, 2]).unwrap();
        assert!(root.is_none());
        assert_eq!(column(&next.unwrap()), vec![5.0, 5.0, 6.0, 6.0, 7.0, 7.0]);
        assert!(
            rows.gather(Op::StepAndMaybeReset, &[1]).is_none(),
            "no root"
        );
        // A deferred root comes from the step's row.
        assert!(rows.store(1, Op::StepAndMaybeReset, &td(8.0), &td(0.0), true));
        let (next, root) = rows.gather(Op::StepAndMaybeReset, &[1]).unwrap();
        assert_eq!(column(&next.unwrap()), vec![8.0, 8.0]);
        assert_eq!(column(&root.unwrap()), vec![8.0, 8.0]);
        // A result that does not fit leaves its rows unmarked.
        let mut other = TensorDict::new(&[]);
        other.set("y", Tensor::full(&[2], 1.0f32)).unwrap();
        rows.store(2, Op::Reset, &td(0.0), &other, false);
        assert_eq!(rows.flags(2), 0);
        assert!(rows.gather(Op::Reset, &[2]).is_none());
    }

    /// Storing several envs at once marks and copies as storing them one by
    /// one does; a result that does not fit falls back to one by one and
    /// leaves only its own rows unmarked.
    #[test]
    fn store_many_is_store_for_each() {
        let (nexts, roots): (Vec<TensorDict>, Vec<TensorDict>) =
            (0..3).map(|i| (td(i as f32), td(10.0 + i as f32))).unzip();
        let nexts_ref: Vec<&TensorDict> = nexts.iter().collect();
        let roots_ref: Vec<&TensorDict> = roots.iter().collect();
        let mut rows = BatchRows::stacked(&nexts_ref, &roots_ref).unwrap();
        let (a, b, c) = (td(5.0), td(6.0), td(7.0));
        let mut copied = [true; 3];
        rows.store_many(
            &[0, 1, 2],
            &[Op::Step, Op::StepAndMaybeReset, Op::Reset],
            &[&a, &b, &td(0.0)],
            &[&td(0.0), &td(0.0), &c],
            &[false, true, false],
            &mut copied,
        );
        assert_eq!(copied, [false, true, false]);
        assert_eq!(
            [rows.flags(0), rows.flags(1), rows.flags(2)],
            [NEXT_ROW, NEXT_ROW | ROOT_ROW, ROOT_ROW]
        );
        let (next, _) = rows.gather(Op::Step, &[0, 1]).unwrap();
        assert_eq!(column(&next.unwrap()), vec![5.0, 5.0, 6.0, 6.0]);
        let (_, root) = rows.gather(Op::Reset, &[1, 2]).unwrap();
        assert_eq!(column(&root.unwrap()), vec![6.0, 6.0, 7.0, 7.0]);

        let mut other = TensorDict::new(&[]);
        other.set("y", Tensor::full(&[2], 1.0f32)).unwrap();
        let mut copied = [false; 2];
        rows.store_many(
            &[0, 2],
            &[Op::Step, Op::Step],
            &[&td(9.0), &other],
            &[&td(0.0), &td(0.0)],
            &[false, false],
            &mut copied,
        );
        assert_eq!([rows.flags(0), rows.flags(2)], [NEXT_ROW, 0]);
        let (next, _) = rows.gather(Op::Step, &[0]).unwrap();
        assert_eq!(column(&next.unwrap()), vec![9.0, 9.0]);
    }

    /// A stale cell is filled from its rows once.
    #[test]
    fn sync_cell_fills_a_stale_cell_once() {
        let (n, r) = (td(0.0), td(0.0));
        let mut rows = BatchRows::stacked(&[&n, &n], &[&r, &r]).unwrap();
        let (next, root) = rows.batches_mut();
        next.write_rows_at(&[1], &[&td(3.0)]).unwrap();
        root.write_rows_at(&[1], &[&td(4.0)]).unwrap();
        let (mut cell_next, mut cell_root) = (td(0.0), td(0.0));
        assert!(rows.sync_cell(1, &mut cell_next, &mut cell_root));
        assert_eq!(column(&cell_next), vec![0.0, 0.0], "not stale: untouched");
        rows.mark(1, NEXT_ROW | ROOT_ROW | CELL_STALE);
        assert!(rows.sync_cell(1, &mut cell_next, &mut cell_root));
        assert_eq!(column(&cell_next), vec![3.0, 3.0]);
        assert_eq!(column(&cell_root), vec![4.0, 4.0]);
        assert_eq!(rows.flags(1), NEXT_ROW | ROOT_ROW);
    }

    /// Batches without a row per env, or buffers that do not fit, make no
    /// rows.
    #[test]
    fn rows_need_one_layout() {
        let mut other = TensorDict::new(&[]);
        other.set("y", Tensor::full(&[2], 1.0f32)).unwrap();
        let x = td(0.0);
        assert!(BatchRows::stacked(&[&x, &other], &[&x, &x]).is_none());
        assert!(BatchRows::stacked(&[], &[]).is_none());
        let batch = TensorDict::zeros_stacked(&x, 3).unwrap();
        assert!(BatchRows::new(batch.clone(), batch, &[&x, &x], &[&x, &x]).is_none());
    }
}
