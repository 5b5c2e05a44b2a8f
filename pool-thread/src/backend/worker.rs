//! The worker loop of the threading backend: a worker takes its envs one at
//! a time, runs each, and publishes the results of quick envs in short runs
//! (`publish`: batch rows, phases, one count), which a receiver publishes
//! instead when the worker is inside a long step (`rescue`), as a helping
//! receiver publishes its own run (`publish_run`); and the moving average
//! of env step times (`StepTiming`) that decides whether receivers help
//! and how long a run is.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use pool_core::spin::{PUBLISH_RUN, PUBLISH_RUN_ENVS, RESCUE_AFTER, SPARE_NAP, SPARE_NAP_IDLE};
use pool_core::{lock, Op};
use smallvec::SmallVec;

use super::cell::{prepare, run_cell, sync_root, Cell};
use super::Shared;
use crate::queue::{Claim, Current, Front, Job};

/// A worker: claims its envs one at a time from its chunk (the others stay
/// there, where another worker or a helping receiver can claim them), runs each,
/// and publishes the results of quick envs in runs: about `PUBLISH_RUN` of
/// stepping, at most `PUBLISH_RUN_ENVS` envs, their batch rows written under
/// one lock and one count on the receivers' signal; and whenever its queue
/// runs dry. An env that steps slower is published alone. A run held while
/// its worker is inside a step that runs long is published by a receiver
/// (`rescue`), so that no result waits on another env's step for much
/// longer than `RESCUE_AFTER` plus a receiver's nap (`RECEIVER_RESCAN`).
///
/// The spare worker ([`Shared::spare`]) claims its jobs through
/// [`spare_claim`] instead.
pub(super) fn worker_loop(shared: &Shared, worker: usize) {
    let mut timing = StepTiming::new();
    // The chunk of the worker's last claim, claimed from without a lock.
    let mut current: Option<Current> = None;
    // How many results the current run publishes at once (`run_envs`).
    let mut run = 1;
    let spare = shared.spare == Some(worker);
    // The spare's: whether it claims the queued jobs of stuck workers, and
    // how long it naps next.
    let mut rest = Rest {
        draining: Vec::new(),
        nap: shared.spare_naps.first,
        before: Vec::new(),
    };
    if spare {
        // For sends to wake it from a nap.
        let _ = shared.spare_thread.set(std::thread::current());
    }
    loop {
        let claim = if spare {
            match spare_claim(shared, worker, &mut current, &mut timing, &mut rest) {
                Some(claim) => claim,
                None => return,
            }
        } else {
            match shared.queue.try_pop(worker, &mut current) {
                Some(claim) => claim,
                None => {
                    ended_run(shared, worker, &mut timing);
                    match shared.queue.pop(worker, &mut current) {
                        Some(claim) => claim,
                        None => return,
                    }
                }
            }
        };
        let job = claim.job();
        timing.start(job.op);
        let ran = run_only(shared, &job);
        timing.ran(&shared.env_nanos);
        current = Some(claim.into_current());
        let mut held = lock(&shared.held[worker]);
        if held.is_empty() {
            // Relaxed: a hint for receivers, who read `held` under its lock.
            shared.held_since[worker].store(shared.now() + 1, Ordering::Relaxed);
            // The run's length, from the average step time as it begins.
            run = run_envs(shared);
        }
        held.push(ran);
        if held.len() >= run {
            publish(shared, worker, &mut held);
        }
    }
}

/// Nothing to claim: the results a worker holds are published, and its
/// run of steps ends, before it waits.
fn ended_run(shared: &Shared, worker: usize, timing: &mut StepTiming) {
    publish(shared, worker, &mut lock(&shared.held[worker]));
    timing.end(&shared.env_nanos);
}

/// The spare worker's next job; `None` once the queue is stopped. While
/// envs are slow it works as the others. While they are quick it rests
/// ([`Shared::spare_rests`]): it claims nothing (what a send to every env
/// queues for it is a helping receiver's, what was queued before it began
/// to rest the others'), and naps ([`SPARE_NAP`], doubled after a nap
/// without a send, up to [`SPARE_NAP_IDLE`]); after a nap in which some
/// queue's front did not move (its worker stuck inside a step, or held
/// off its core; or its own, which nobody helped with), it claims the
/// jobs of each such queue (`draining`) until none is left there, and
/// rests again.
fn spare_claim(
    shared: &Shared,
    worker: usize,
    current: &mut Option<Current>,
    timing: &mut StepTiming,
    rest: &mut Rest,
) -> Option<Claim> {
    loop {
        let rests = shared.spare_rests();
        if !rests {
            rest.draining.clear();
            if let Some(claim) = shared.queue.try_pop(worker, current) {
                return Some(claim);
            }
        }
        while let Some(&queue) = rest.draining.last() {
            match shared.queue.claim_in(queue, worker) {
                Some(claim) => return Some(claim),
                None => {
                    rest.draining.pop();
                }
            }
        }
        ended_run(shared, worker, timing);
        if !rests {
            // As any worker: sleeps until something is queued. (A push
            // made once the spare rests wakes it too: it claims at most
            // that one job of another's before it rests.)
            return shared.queue.pop(worker, current);
        }
        if shared.queue.is_stopped() {
            return None;
        }
        shared.queue.fronts(&mut rest.before);
        let pushes = shared.queue.pushes();
        shared.spare_napping.store(true, Ordering::Relaxed);
        let napped = nap(shared, rest.nap);
        shared.spare_napping.store(false, Ordering::Relaxed);
        if napped {
            shared.queue.stood_still(&rest.before, &mut rest.draining);
        }
        rest.nap = if shared.queue.pushes() == pushes {
            (rest.nap * 2).min(shared.spare_naps.idle)
        } else {
            shared.spare_naps.first
        };
    }
}

/// The spare worker's nap of `length`: woken early by a shutdown, or by
/// a send once envs are slow (`Shared::wake_spare`; one made before the
/// park ends it at once); a wake-up for neither (a token left by a send
/// while it worked, or a spurious one) parks it again for the rest.
/// Returns whether it napped the whole length.
fn nap(shared: &Shared, length: Duration) -> bool {
    let until = Instant::now() + length;
    loop {
        let now = Instant::now();
        if now >= until {
            return true;
        }
        std::thread::park_timeout(until - now);
        if shared.queue.is_stopped() || !shared.spare_rests() {
            return false;
        }
    }
}

/// How long the spare worker naps while it rests: at first, and after
/// naps without a send ([`SPARE_NAP`], [`SPARE_NAP_IDLE`] but in tests).
#[derive(Clone, Copy, Debug)]
pub(super) struct SpareNaps {
    pub(super) first: Duration,
    pub(super) idle: Duration,
}

impl SpareNaps {
    pub(super) const DEFAULT: SpareNaps = SpareNaps {
        first: SPARE_NAP,
        idle: SPARE_NAP_IDLE,
    };
}

/// What the spare worker keeps between its claims ([`spare_claim`]).
struct Rest {
    /// The queues whose jobs it claims, standing in for their workers,
    /// the last first.
    draining: Vec<usize>,
    /// Its next nap.
    nap: Duration,
    /// Each queue's first chunk with unclaimed jobs as its nap began, and
    /// its front ([`WorkQueue::fronts`](crate::queue::WorkQueue::fronts)).
    before: Vec<Front>,
}

/// The results a worker has run but not published.
pub(super) type Held = SmallVec<[Ran; PUBLISH_RUN_ENVS]>;

/// An env that ran, its result not yet published.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ran {
    pub(super) env: usize,
    pub(super) failed: bool,
    /// Where its result is in the lent batch rows, found as it ran
    /// (`RowViews::flags`); `None` without lent rows, for a failed env, or
    /// for a result that its publication must look at in the cell.
    pub(super) flags: Option<u8>,
}

/// How many results a worker publishes at once: about `PUBLISH_RUN` of
/// steps at the recent average step time, at least one, at most
/// `PUBLISH_RUN_ENVS`.
fn run_envs(shared: &Shared) -> usize {
    let step = shared.env_nanos.load(Ordering::Relaxed).max(1);
    let run = u64::try_from(PUBLISH_RUN.as_nanos()).unwrap_or(u64::MAX) / step;
    usize::try_from(run).map_or(PUBLISH_RUN_ENVS, |run| run.clamp(1, PUBLISH_RUN_ENVS))
}

/// Publishes the runs that workers have held for `RESCUE_AFTER` or longer
/// (a receiver's part: see [`worker_loop`]). A run whose lock is taken is
/// being published or added to by its worker: left to it.
pub(super) fn rescue(shared: &Shared) {
    let mut now = None;
    for worker in 0..shared.held.len() {
        // Relaxed: a hint; `held` is read under its lock.
        let since = shared.held_since[worker].load(Ordering::Relaxed);
        if since == 0 {
            continue;
        }
        let now = *now.get_or_insert_with(|| shared.now());
        if now.saturating_sub(since - 1) < nanos(RESCUE_AFTER) {
            continue;
        }
        let held = match shared.held[worker].try_lock() {
            Ok(held) => Some(held),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        };
        if let Some(mut held) = held {
            publish(shared, worker, &mut held);
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Publishes worker `worker`'s held results (under the lock of its
/// `held`): their flags marked in the lent rows, or their cells locked in
/// ascending env order and their results copied into the batch rows, under
/// one lock; then each published (its phase), then one count per result on
/// the receivers' signal ([`publish_run`]).
fn publish(shared: &Shared, worker: usize, held: &mut Held) {
    publish_run(shared, held);
    // Relaxed: a hint (see `Shared::held_since`).
    shared.held_since[worker].store(0, Ordering::Relaxed);
}

/// Publishes a run of results (cleared after): see [`publish`]; also a
/// helping receiver's run. A run whose lent rows' flags its workers found
/// ([`Ran::flags`]) is published without its cells: no one else touches an
/// env that ran until it is published.
pub(super) fn publish_run(shared: &Shared, held: &mut Held) {
    if held.is_empty() {
        return;
    }
    let found = shared.views.is_some() && held.iter().all(|ran| ran.failed || ran.flags.is_some());
    if found {
        if let Some(batch) = &shared.batch {
            lock(batch).store_flags(held);
        }
        return signal_run(shared, held);
    }
    held.sort_unstable_by_key(|ran| ran.env);
    let mut cells: SmallVec<[MutexGuard<'_, Cell>; PUBLISH_RUN_ENVS]> = held
        .iter()
        .map(|ran| lock(&shared.cells[ran.env]))
        .collect();
    let mut root_in_row: SmallVec<[bool; PUBLISH_RUN_ENVS]> = SmallVec::new();
    root_in_row.extend(held.iter().map(|_| false));
    if let Some(batch) = &shared.batch {
        lock(batch).store_run(held, &cells, &mut root_in_row);
    }
    // A deferred root that is not in its row is brought up to date in its
    // cell now, so that a failure to (an env that changed its layout) is
    // this env's failure, reported like any other.
    for ((ran, cell), &in_row) in held.iter_mut().zip(&mut cells).zip(&root_in_row) {
        if !in_row && !ran.failed && cell.runner.root_is_next() && sync_root(ran.env, cell) {
            ran.failed = true;
        }
    }
    signal_run(shared, held);
}

/// The end of [`publish_run`]: each result's generation and phase (cleared
/// after), then one count per result on the receivers' signal.
fn signal_run(shared: &Shared, held: &mut Held) {
    let generation = shared.done.generation();
    for ran in held.iter() {
        // Relaxed: read only after the Acquire of DONE below.
        shared.published[ran.env].store(generation, Ordering::Relaxed);
        // The result, written under the cell's lock (and into the batch
        // rows) by this thread or by the worker whose `held` this thread
        // locked after it, is visible to whoever sees DONE.
        shared.phases.publish(ran.env, ran.failed);
    }
    let count = held.len() as u64;
    held.clear();
    // One count per result; a sleeping receiver is woken only once the
    // count it waits for is reached (`Signal::notify_n`).
    shared.done.notify_n(count);
}

/// Runs one env (its input copied in first) under its cell's lock, for a
/// worker's run, and finds where its result is in lent batch rows.
/// Publishing is [`publish`]'s.
pub(super) fn run_only(shared: &Shared, job: &Job<'_>) -> Ran {
    let mut cell = lock(&shared.cells[job.env]);
    let failed = prepare(job, &mut cell) || run_cell(job.env, &mut cell);
    let flags = match &shared.views {
        Some(views) if !failed => views.flags(job.env, &cell),
        _ => None,
    };
    Ran {
        env: job.env,
        failed,
        flags,
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
