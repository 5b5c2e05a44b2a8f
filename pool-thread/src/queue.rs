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

use smallvec::SmallVec;
use tensordict::TensorDict;

use crate::Op;
use pool_core::{lock, Signal};

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
///
/// A worker takes its jobs one at a time ([`WorkQueue::pop`]): the jobs it
/// has not started stay in its queue, where another worker (or a helping
/// receiver) can take them while it is inside a long env step. A worker
/// whose queue is empty moves half of another's (from the back) into its
/// own, so a backlog is shared in few steals and stays stealable.
#[derive(Debug)]
pub(crate) struct WorkQueue {
    queues: Vec<Mutex<VecDeque<Job>>>,
    /// Per env: the worker whose queue it goes to (envs in blocks, in
    /// order), looked up rather than divided out on every push.
    homes: Box<[u16]>,
    pushed: Signal,
    stop: AtomicBool,
}

/// The most envs one steal moves from another worker's queue.
pub(crate) const MAX_STEAL: usize = 64;

/// The most envs a helping receiver runs in one call: it returns to its
/// receive between calls (to see a failure, a shutdown, or that its batch
/// is complete while others' envs, sent meanwhile, wait).
pub(crate) const HELP_CHUNK: usize = 8;

impl WorkQueue {
    /// Queues for `workers` workers (at least one) sharing `envs` envs.
    pub(crate) fn new(workers: usize, envs: usize) -> WorkQueue {
        let queues = workers.clamp(1, usize::from(u16::MAX));
        WorkQueue {
            queues: (0..queues).map(|_| Mutex::default()).collect(),
            homes: (0..envs)
                .map(|env| {
                    let home = (env * queues / envs.max(1)).min(queues - 1);
                    u16::try_from(home).expect("fewer workers than u16::MAX")
                })
                .collect(),
            pushed: Signal::default(),
            stop: AtomicBool::new(false),
        }
    }

    /// The worker whose queue env `env` goes to: envs in blocks, in order
    /// (an env past the last, which a send never queues, to the last).
    #[inline]
    fn home(&self, env: usize) -> usize {
        self.homes
            .get(env)
            .map_or(self.queues.len() - 1, |&home| usize::from(home))
    }

    /// Queues jobs (each in its env's home queue) and wakes the workers.
    pub(crate) fn push_all(&self, jobs: impl IntoIterator<Item = Job>) {
        {
            // Every queue locked once, in order (nobody else holds two).
            let mut queues: Vec<MutexGuard<'_, VecDeque<Job>>> =
                self.queues.iter().map(lock).collect();
            for job in jobs {
                let home = self.home(job.env);
                queues[home].push_back(job);
            }
        }
        self.pushed.notify();
    }

    /// Takes the next job of worker `worker` without waiting: the front of
    /// its own queue; if that is empty, half of another's (from the back,
    /// at most [`MAX_STEAL`]) moved into its own first. `None` if every
    /// queue is empty or the queue is stopped.
    pub(crate) fn try_pop(&self, worker: usize) -> Option<Job> {
        if self.stop.load(Ordering::Acquire) {
            return None;
        }
        let n = self.queues.len();
        let own = worker % n;
        if let Some(job) = lock(&self.queues[own]).pop_front() {
            return Some(job);
        }
        for i in 1..n {
            let victim = (own + i) % n;
            let mut stolen: VecDeque<Job> = {
                let mut queue = lock(&self.queues[victim]);
                let len = queue.len();
                if len == 0 {
                    continue;
                }
                let take = len.div_ceil(2).min(MAX_STEAL);
                queue.split_off(len - take)
            };
            // The first stolen job is run now, the others wait in this
            // worker's queue, where anyone can take them. (One lock at a
            // time: the victim's is released first.)
            let first = stolen.pop_front();
            if !stolen.is_empty() {
                lock(&self.queues[own]).extend(stolen);
                // A worker that looked while these jobs were in neither
                // queue may have gone to sleep: they are takeable again.
                self.pushed.notify();
            }
            return first;
        }
        None
    }

    /// Takes up to `max` jobs from the back of the first queue that has
    /// any, under one lock, into `out` (for a helping receiver, which must
    /// wait for every one of them anyway: nobody else waits on the jobs it
    /// holds). Returns how many it took.
    pub(crate) fn take_any(&self, max: usize, out: &mut SmallVec<[Job; HELP_CHUNK]>) -> usize {
        if self.stop.load(Ordering::Acquire) {
            return 0;
        }
        for queue in &self.queues {
            let mut queue = lock(queue);
            let take = queue.len().min(max);
            if take > 0 {
                let len = queue.len();
                out.extend(queue.drain(len - take..));
                return take;
            }
        }
        0
    }

    /// Takes the next job of worker `worker`, as [`WorkQueue::try_pop`].
    /// Waits while every queue is empty; `None` once the queue is stopped.
    pub(crate) fn pop(&self, worker: usize) -> Option<Job> {
        loop {
            let seen = self.pushed.generation();
            if self.stop.load(Ordering::Acquire) {
                return None;
            }
            if let Some(job) = self.try_pop(worker) {
                return Some(job);
            }
            // Sleeps until something is pushed or the queue is stopped; no
            // deadline: an idle worker has nothing else to do.
            self.pushed.wait(seen, None);
        }
    }

    /// Whether worker `worker`'s own queue is empty (its next
    /// [`WorkQueue::pop`] would steal or wait).
    #[cfg(test)]
    pub(crate) fn own_is_empty(&self, worker: usize) -> bool {
        lock(&self.queues[worker % self.queues.len()]).is_empty()
    }

    /// Stops the queue: workers return from `pop` (queued jobs are left).
    pub(crate) fn stop(&self) {
        // Release: pairs with the Acquire in `pop`.
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

    #[test]
    fn workers_take_their_own_envs_first_then_steal_half_from_the_back() {
        let queue = WorkQueue::new(2, 8);
        queue.push_all((0..8).map(job));
        let pop = |worker| queue.try_pop(worker).map(|j| j.env);
        assert_eq!(pop(1), Some(4));
        assert_eq!(pop(1), Some(5));
        assert_eq!(pop(1), Some(6));
        assert_eq!(pop(1), Some(7));
        // Its own queue is empty: half of worker 0's (2, 3) moves over, 2
        // runs now and 3 stays stealable in worker 1's queue.
        assert_eq!(pop(1), Some(2));
        assert!(!queue.own_is_empty(1));
        let mut helped = SmallVec::new();
        assert_eq!(queue.take_any(1, &mut helped), 1);
        assert_eq!(helped[0].env, 1);
        assert_eq!(pop(0), Some(0));
        // Worker 0 steals worker 1's last one.
        assert_eq!(pop(0), Some(3));
        assert_eq!(pop(0), None);
        assert_eq!(queue.take_any(HELP_CHUNK, &mut SmallVec::new()), 0);
        queue.stop();
        assert!(queue.pop(0).is_none());
    }

    /// The jobs a worker has not started stay where others can take them:
    /// a worker takes one job at a time, so while it runs one, another
    /// worker (or a helper) takes the rest of its queue.
    #[test]
    fn a_busy_workers_queue_stays_stealable() {
        let queue = WorkQueue::new(2, 16);
        queue.push_all((0..8).map(job));
        assert_eq!(queue.try_pop(0).map(|j| j.env), Some(0));
        // Worker 0 is "inside" env 0: worker 1 takes half of the rest, and
        // then the rest of that, and a helper the remainder.
        let mut taken: Vec<usize> = std::iter::from_fn(|| queue.try_pop(1).map(|j| j.env))
            .take(4)
            .collect();
        let mut helped = SmallVec::new();
        while queue.take_any(2, &mut helped) > 0 {}
        taken.extend(helped.iter().map(|j| j.env));
        taken.sort_unstable();
        assert_eq!(taken, (1..8).collect::<Vec<_>>());
    }
}
