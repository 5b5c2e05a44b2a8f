//! The worker loop of the threading backend: a worker takes its envs one at
//! a time, runs each (`run_job`), copies its result into its batch rows and
//! publishes it at once; and the moving average of env step times
//! (`StepTiming`) that decides whether receivers help.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pool_core::{lock, Op};

use super::cell::{prepare, run_cell, sync_root};
use super::Shared;
use crate::queue::Job;

/// A worker: takes its envs one at a time and publishes each result as
/// soon as it is ready, so that no result waits on another env's step and
/// no queued env waits behind one (another worker can take it meanwhile).
pub(super) fn worker_loop(shared: &Shared, worker: usize) {
    let mut timing = StepTiming::new();
    loop {
        let job = match shared.queue.try_pop(worker) {
            Some(job) => job,
            None => {
                // Nothing queued: the run of steps ends before the wait.
                timing.end(&shared.env_nanos);
                match shared.queue.pop(worker) {
                    Some(job) => job,
                    None => return,
                }
            }
        };
        timing.start(job.op);
        run_job(shared, &job);
        timing.ran(&shared.env_nanos);
    }
}

/// The times of a run of env steps, folded into `Shared::env_nanos` once
/// per run (at most [`TIMED_RUN`] envs, or until nothing is queued): two
/// clock reads per run, not per env.
pub(super) struct StepTiming {
    /// When the run began.
    since: Option<Instant>,
    /// Envs run since then.
    envs: usize,
    /// Whether a reset was among them (an env's reset may take far less
    /// than its step: such a run is not counted).
    reset: bool,
}

/// The most envs of one timed run ([`StepTiming`]).
const TIMED_RUN: usize = 16;

impl StepTiming {
    pub(super) fn new() -> StepTiming {
        StepTiming {
            since: None,
            envs: 0,
            reset: false,
        }
    }

    /// An env of `op` is about to run.
    pub(super) fn start(&mut self, op: Op) {
        if self.since.is_none() {
            self.since = Some(Instant::now());
        }
        self.reset |= op == Op::Reset;
    }

    /// An env ran: ends the run after [`TIMED_RUN`] envs.
    pub(super) fn ran(&mut self, average: &AtomicU64) {
        self.envs += 1;
        if self.envs >= TIMED_RUN {
            self.end(average);
        }
    }

    /// Ends the run: folds its time per env into `average` (unless it held
    /// a reset or no env).
    pub(super) fn end(&mut self, average: &AtomicU64) {
        if let Some(since) = self.since.take() {
            if !self.reset && self.envs > 0 {
                record_env_time(average, since.elapsed(), self.envs);
            }
        }
        self.envs = 0;
        self.reset = false;
    }
}

/// Runs one env (its input copied in first), copies its result into the
/// batch rows (if any), then publishes it.
pub(super) fn run_job(shared: &Shared, job: &Job) {
    let env = job.env;
    let failed = {
        let mut cell = lock(&shared.cells[env]);
        let mut failed = prepare(job, &mut cell) || run_cell(env, &mut cell);
        // The cell stays locked until its result is in the batch rows
        // (nobody else touches a queued env's cell).
        let root_in_row = match &shared.batch {
            Some(batch) if !failed => lock(batch).store(
                env,
                cell.op,
                &cell.runner.next,
                &cell.runner.root,
                cell.runner.root_is_next(),
            ),
            // None of its rows holds its result.
            Some(batch) => {
                lock(batch).mark(env, 0);
                false
            }
            None => false,
        };
        // A deferred root that is not in its row is brought up to date in
        // its cell now, so that a failure to (an env that changed its
        // layout) is this env's failure, reported like any other.
        if !root_in_row && !failed && sync_root(env, &mut cell) {
            failed = true;
        }
        failed
    };
    // Relaxed: read only after the Acquire of DONE below.
    shared.published[env].store(shared.done.generation(), Ordering::Relaxed);
    // The result written under the cell's lock (and into the batch rows) is
    // visible to whoever sees DONE.
    shared.phases.publish(env, failed);
    // One count per result; a sleeping receiver is woken only once the
    // count it waits for is reached (`Signal::notify_n`).
    shared.done.notify();
}

/// Folds a run's time into the moving average of one env's
/// (`Shared::env_nanos`, weight 1/8 per run). Workers race on it; a lost
/// update only makes the average a little older.
fn record_env_time(average: &AtomicU64, elapsed: Duration, envs: usize) {
    let sample = u64::try_from(elapsed.as_nanos() / envs.max(1) as u128).unwrap_or(u64::MAX);
    let old = average.load(Ordering::Relaxed);
    let new = if sample >= old {
        old + (sample - old) / 8
    } else {
        old - (old - sample) / 8
    };
    average.store(new, Ordering::Relaxed);
}
