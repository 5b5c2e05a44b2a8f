//! `WorkQueue`: the env tasks that worker threads pull, a chunk at a time.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::signal::Signal;

/// Env indices waiting for a worker, and the signal workers sleep on.
#[derive(Debug, Default)]
pub(crate) struct WorkQueue {
    envs: Mutex<VecDeque<usize>>,
    pushed: Signal,
    stop: AtomicBool,
}

/// The most envs one worker takes at a time.
const MAX_CHUNK: usize = 64;

impl WorkQueue {
    /// Queues envs and wakes the workers.
    pub(crate) fn push_all(&self, envs: impl IntoIterator<Item = usize>) {
        self.envs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(envs);
        self.pushed.notify();
    }

    /// Takes a chunk of queued envs into `out` (cleared first) without
    /// waiting; returns `false` if the queue is empty or stopped.
    pub(crate) fn try_pull(&self, workers: usize, out: &mut Vec<usize>) -> bool {
        out.clear();
        if self.stop.load(Ordering::Acquire) {
            return false;
        }
        let mut envs = self.envs.lock().unwrap_or_else(|p| p.into_inner());
        let len = envs.len();
        if len == 0 {
            return false;
        }
        let take = (len / (2 * workers.max(1))).clamp(1, MAX_CHUNK).min(len);
        out.extend(envs.drain(..take));
        true
    }

    /// Takes a chunk of queued envs into `out` (cleared first): about
    /// `1 / (2 * workers)` of the queue, so that each worker gets a share of
    /// a batch in a few pulls, at least one env and at most 64. Waits while
    /// the queue is empty; returns `false` once the queue is stopped.
    pub(crate) fn pull(&self, workers: usize, out: &mut Vec<usize>) -> bool {
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

    /// Stops the queue: workers return from `pull` (queued envs are left).
    pub(crate) fn stop(&self) {
        // Release: pairs with the Acquire in `pull`.
        self.stop.store(true, Ordering::Release);
        self.pushed.notify();
    }
}
