//! `WorkQueue`: the env tasks that worker threads pull, a chunk at a time.
//!
//! Each worker has a queue of its own for a block of envs (its home envs),
//! so that an env is stepped by the same thread step after step and its
//! buffers stay in that core's cache; a worker whose queue is empty takes
//! work from the others' (from the back), so that no worker idles while
//! another has a backlog.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tensordict::TensorDict;

use crate::Op;
use pool_core::Signal;

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

/// Env tasks waiting for a worker, one queue per worker, and the signal
/// workers sleep on.
#[derive(Debug)]
pub(crate) struct WorkQueue {
    queues: Vec<Mutex<VecDeque<Job>>>,
    envs: usize,
    pushed: Signal,
    stop: AtomicBool,
}

/// The most envs one worker takes at a time.
pub(crate) const MAX_CHUNK: usize = 64;

/// The most envs a helping receiver takes at a time: it returns to its
/// receive between chunks (to see a failure, a shutdown, or that its
/// batch is complete while others' envs, sent meanwhile, wait).
pub(crate) const HELP_CHUNK: usize = 8;

fn lock(queue: &Mutex<VecDeque<Job>>) -> MutexGuard<'_, VecDeque<Job>> {
    queue.lock().unwrap_or_else(|p| p.into_inner())
}

impl WorkQueue {
    /// Queues for `workers` workers (at least one) sharing `envs` envs.
    pub(crate) fn new(workers: usize, envs: usize) -> WorkQueue {
        WorkQueue {
            queues: (0..workers.max(1)).map(|_| Mutex::default()).collect(),
            envs: envs.max(1),
            pushed: Signal::default(),
            stop: AtomicBool::new(false),
        }
    }

    /// The worker whose queue env `env` goes to: envs in blocks, in order.
    fn home(&self, env: usize) -> usize {
        (env * self.queues.len() / self.envs).min(self.queues.len() - 1)
    }

    /// Queues jobs (each in its env's home queue) and wakes the workers.
    pub(crate) fn push_all(&self, jobs: impl IntoIterator<Item = Job>) {
        {
            // Every queue locked once, in order (a worker locks one at a time).
            let mut queues: Vec<MutexGuard<'_, VecDeque<Job>>> =
                self.queues.iter().map(lock).collect();
            for job in jobs {
                let home = self.home(job.env);
                queues[home].push_back(job);
            }
        }
        self.pushed.notify();
    }

    /// Takes a chunk of queued jobs into `out` (cleared first) without
    /// waiting: from worker `worker`'s own queue first (about half of it, so
    /// that its results are published in a few steps), else from the back
    /// of another's (half of what is left there); any queue's for `None` (a
    /// helping receiver, at most [`HELP_CHUNK`]). At least one job and at
    /// most 64. Returns `false`
    /// if every queue is empty or the queue is stopped.
    pub(crate) fn try_pull(&self, worker: Option<usize>, out: &mut Vec<Job>) -> bool {
        out.clear();
        if self.stop.load(Ordering::Acquire) {
            return false;
        }
        let n = self.queues.len();
        let own = worker.map(|w| w % n);
        if let Some(own) = own {
            let mut queue = lock(&self.queues[own]);
            let take = (queue.len() / 2).clamp(1, MAX_CHUNK).min(queue.len());
            out.extend(queue.drain(..take));
            if !out.is_empty() {
                return true;
            }
        }
        let first = own.map_or(0, |w| w + 1);
        for i in 0..n {
            let victim = (first + i) % n;
            if Some(victim) == own {
                continue;
            }
            let mut queue = lock(&self.queues[victim]);
            let len = queue.len();
            if len == 0 {
                continue;
            }
            let most = if own.is_some() { MAX_CHUNK } else { HELP_CHUNK };
            let take = (len / 2).clamp(1, most).min(len);
            out.extend(queue.drain(len - take..));
            return true;
        }
        false
    }

    /// Takes a chunk of queued jobs into `out` (cleared first), as
    /// [`WorkQueue::try_pull`] for worker `worker`. Waits while every queue
    /// is empty; returns `false` once the queue is stopped.
    pub(crate) fn pull(&self, worker: usize, out: &mut Vec<Job>) -> bool {
        out.clear();
        loop {
            let seen = self.pushed.generation();
            if self.stop.load(Ordering::Acquire) {
                return false;
            }
            if self.try_pull(Some(worker), out) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn job(env: usize) -> Job {
        Job {
            env,
            op: Op::Reset,
            input: None,
        }
    }

    fn envs(jobs: &[Job]) -> Vec<usize> {
        jobs.iter().map(|j| j.env).collect()
    }

    #[test]
    fn workers_take_their_own_envs_first_then_steal_from_the_back() {
        let queue = WorkQueue::new(2, 8);
        queue.push_all((0..8).map(job));
        let mut out = Vec::new();
        assert!(queue.try_pull(Some(1), &mut out));
        assert_eq!(envs(&out), vec![4, 5]);
        assert!(queue.try_pull(Some(1), &mut out));
        assert_eq!(envs(&out), vec![6]);
        assert!(queue.try_pull(Some(1), &mut out));
        assert_eq!(envs(&out), vec![7]);
        // Its own queue is empty: half of what worker 0 has left, from the back.
        assert!(queue.try_pull(Some(1), &mut out));
        assert_eq!(envs(&out), vec![2, 3]);
        assert!(queue.try_pull(None, &mut out));
        assert_eq!(envs(&out), vec![1]);
        assert!(queue.try_pull(Some(0), &mut out));
        assert_eq!(envs(&out), vec![0]);
        assert!(!queue.try_pull(Some(0), &mut out));
        queue.stop();
        assert!(!queue.pull(0, &mut out));
    }

    /// A helping receiver takes at most `HELP_CHUNK` envs, from the back;
    /// a worker half of its queue.
    #[test]
    fn a_helper_takes_small_chunks() {
        let queue = WorkQueue::new(1, 40);
        queue.push_all((0..40).map(job));
        let mut out = Vec::new();
        assert!(queue.try_pull(None, &mut out));
        assert_eq!(envs(&out), (32..40).collect::<Vec<_>>());
        assert!(queue.try_pull(Some(0), &mut out));
        assert_eq!(envs(&out), (0..16).collect::<Vec<_>>());
    }
}
