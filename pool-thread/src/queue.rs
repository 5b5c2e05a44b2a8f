//! `WorkQueue`: the env tasks that worker threads pull, a chunk at a time.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tensordict::TensorDict;

use crate::signal::Signal;
use crate::Op;

/// One env's task: what to run and where its input is (the worker copies
/// it into the env's input buffer, so that a send copies nothing).
#[derive(Debug)]
pub(crate) struct Job {
    /// The env.
    pub(crate) env: usize,
    /// What to run.
    pub(crate) op: Op,
    /// The sent tensordict (checked by the send) and the env's row of it
    /// (`None`: all of it), when the env takes an input.
    pub(crate) input: Option<(Arc<TensorDict>, Option<usize>)>,
}

/// Env tasks waiting for a worker, and the signal workers sleep on.
#[derive(Debug, Default)]
pub(crate) struct WorkQueue {
    jobs: Mutex<VecDeque<Job>>,
    pushed: Signal,
    stop: AtomicBool,
}

/// The most envs one worker takes at a time.
pub(crate) const MAX_CHUNK: usize = 64;

impl WorkQueue {
    /// Queues jobs and wakes the workers.
    pub(crate) fn push_all(&self, jobs: impl IntoIterator<Item = Job>) {
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(jobs);
        self.pushed.notify();
    }

    /// Takes a chunk of queued jobs into `out` (cleared first) without
    /// waiting; returns `false` if the queue is empty or stopped.
    pub(crate) fn try_pull(&self, workers: usize, out: &mut Vec<Job>) -> bool {
        out.clear();
        if self.stop.load(Ordering::Acquire) {
            return false;
        }
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        let len = jobs.len();
        if len == 0 {
            return false;
        }
        let take = (len / (2 * workers.max(1))).clamp(1, MAX_CHUNK).min(len);
        out.extend(jobs.drain(..take));
        true
    }

    /// Takes a chunk of queued jobs into `out` (cleared first): about
    /// `1 / (2 * workers)` of the queue, so that each worker gets a share of
    /// a batch in a few pulls, at least one job and at most 64. Waits while
    /// the queue is empty; returns `false` once the queue is stopped.
    pub(crate) fn pull(&self, workers: usize, out: &mut Vec<Job>) -> bool {
        out.clear();
        loop {
            let seen = self.pushed.generation();
            if self.stop.load(Ordering::Acquire) {
                return false;
            }
            if self.try_pull(workers, out) {
                return true;
            }
            // Sleeps until something is pushed or the queue is stopped; no
            // deadline: an idle worker has nothing else to do.
            self.pushed.wait(seen, None);
        }
    }

    /// Stops the queue: workers return from `pull` (queued jobs are left).
    pub(crate) fn stop(&self) {
        // Release: pairs with the Acquire in `pull`.
        self.stop.store(true, Ordering::Release);
        self.pushed.notify();
    }
}
