//! `InputRows`: the envs' input buffers as the rows of one batch, lent to
//! them (each env's input is a view of its row), that a send writes
//! straight from the sent tensordict: the worker that runs the env copies
//! no input, and the env reads its action from its row.
//!
//! Soundness: an env's input row is written only by a send that claimed
//! the env ([`claim`]: `Phases::claim`, from idle to queued) and has not
//! queued it yet, and read only by whoever runs the env (its view is the
//! cell's `runner.input`), which takes it from the queue after the send
//! pushed it and publishes its result before the env can be idle again:
//! no write of a row meets a use of its view, and of two sends to one env
//! only one claims it.

use std::sync::{Mutex, MutexGuard};

use pool_core::{lock, Phases};
use smallvec::SmallVec;
use tensordict::{LentRows, TensorDict, TensorDictError};

/// Proof that a send claimed the envs of its jobs ([`claim`]) and has not
/// queued them: what lets [`InputRows::write`] write their rows.
pub(super) struct Claimed<'a> {
    phases: &'a Phases,
    jobs: &'a [(usize, Option<usize>)],
}

/// Claims the envs of `jobs` for a send, from idle to queued: every one,
/// or, if one is not idle (in flight, taken by another send meanwhile, or
/// addressed twice: its second claim fails), none, and that env is the
/// error. The send's idle check.
pub(super) fn claim<'a>(
    phases: &'a Phases,
    jobs: &'a [(usize, Option<usize>)],
) -> Result<Claimed<'a>, usize> {
    for (j, &(env, _)) in jobs.iter().enumerate() {
        if !phases.claim(env) {
            for &(claimed, _) in &jobs[..j] {
                phases.unclaim(claimed);
            }
            return Err(env);
        }
    }
    Ok(Claimed { phases, jobs })
}

impl Claimed<'_> {
    /// Gives the claimed envs back (idle): a send that found a wrong input
    /// after it claimed them.
    pub(super) fn give_back(self) {
        for &(env, _) in self.jobs {
            self.phases.unclaim(env);
        }
    }
}

use super::cell::Cell;

/// The envs' input rows ([`InputRows`]'s module).
#[derive(Debug)]
pub(super) struct InputRows {
    rows: LentRows,
}

impl InputRows {
    /// Lends the inputs of `cells` as the rows of one batch when they all
    /// have one layout (`alike`: the caller compared them) and hold tensors
    /// only, at least one: each cell's input becomes its row's view (zeros,
    /// as the input templates are). `None` otherwise: the inputs are then
    /// copied into each cell's own buffer by the worker.
    pub(super) fn lend(cells: &[Mutex<Cell>], alike: bool) -> Option<InputRows> {
        if !alike {
            return None;
        }
        let mut cells: Vec<MutexGuard<'_, Cell>> = cells.iter().map(lock).collect();
        let first = &cells.first()?.runner.input;
        if first.is_empty() {
            return None;
        }
        let batch = TensorDict::zeros_stacked(first, cells.len()).ok()?;
        let (rows, views) = LentRows::lend(&batch)?;
        for (cell, view) in cells.iter_mut().zip(views) {
            cell.runner.input = view;
            cell.input_lent = true;
        }
        Some(InputRows { rows })
    }

    /// Writes the inputs of the claimed jobs (env and row of `src`, as a
    /// send's) into the envs' rows, for the envs that `takes_input` names:
    /// one copy per column for a send to every env in order (`every_env`:
    /// the jobs are env `j` from row `j` for every env). An error
    /// names the first such env (the send checked the inputs, so only a
    /// bug gives one) and gives the envs back (idle); the rows may then be
    /// partly written, which harms no one: a send writes them again before
    /// the envs run.
    pub(super) fn write(
        &self,
        claimed: Claimed<'_>,
        every_env: bool,
        src: &TensorDict,
        takes_input: impl Fn(usize) -> bool,
    ) -> Result<(), (usize, TensorDictError)> {
        let every = claimed.jobs.iter().all(|&(env, _)| takes_input(env));
        let some: SmallVec<[(usize, Option<usize>); 64]>;
        let picks = if every {
            claimed.jobs
        } else {
            some = claimed
                .jobs
                .iter()
                .copied()
                .filter(|&(env, _)| takes_input(env))
                .collect();
            &some[..]
        };
        let Some(&(first, _)) = picks.first() else {
            return Ok(());
        };
        // SAFETY: each row written is an env's that this send claimed and
        // has not queued (`claimed`): no one runs it, and its last run came
        // before the claim; a row's one view is its env's input, used only
        // by whoever runs it. No view of these rows is in use.
        let written = unsafe {
            if every && every_env {
                self.rows.write_every_row_from(src)
            } else {
                self.rows.write_rows_from(src, picks)
            }
        };
        written.map_err(|source| {
            for &(env, _) in claimed.jobs {
                claimed.phases.unclaim(env);
            }
            (first, source)
        })
    }
}
