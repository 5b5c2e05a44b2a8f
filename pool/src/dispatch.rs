//! `Dispatch`: the backend a pool drives, a private enum matched in each
//! method (crossbeam's flavors): backend internals never appear in the
//! facade's API.

use std::sync::Arc;
use std::time::Instant;

use envs::EnvSpecs;
use pool_core::{Op, Output};
use pool_proc::ProcBackend;
use pool_thread::ThreadBackend;
use tensordict::TensorDict;

use crate::PoolError;

/// The backend of a pool.
#[derive(Debug)]
pub(crate) enum Dispatch {
    Threads(ThreadBackend),
    Procs(ProcBackend),
}

/// What a receiver saw before checking results: a wait returns once
/// something happened after it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ticket {
    Threads { generation: u64, epoch: u64 },
    Procs(pool_proc::Ticket),
}

impl Dispatch {
    pub(crate) fn num_envs(&self) -> usize {
        match self {
            Dispatch::Threads(b) => b.num_envs(),
            Dispatch::Procs(b) => b.num_envs(),
        }
    }

    pub(crate) fn env_specs(&self) -> &[EnvSpecs] {
        match self {
            Dispatch::Threads(b) => b.env_specs(),
            Dispatch::Procs(b) => b.env_specs(),
        }
    }

    pub(crate) fn env_names(&self) -> &[String] {
        match self {
            Dispatch::Threads(b) => b.env_names(),
            Dispatch::Procs(b) => b.env_names(),
        }
    }

    /// Zeros shaped like env `env`'s step result and root result.
    pub(crate) fn templates(&self, env: usize) -> (TensorDict, TensorDict) {
        match self {
            Dispatch::Threads(b) => b.templates(env),
            Dispatch::Procs(b) => b.templates(env),
        }
    }

    pub(crate) fn send(
        &self,
        op: Op,
        jobs: &[(usize, Option<usize>)],
        src: Option<&Arc<TensorDict>>,
    ) -> Result<(), PoolError> {
        match self {
            Dispatch::Threads(b) => Ok(b.send_shared(op, jobs, src)?),
            Dispatch::Procs(b) => Ok(b.send(op, jobs, src.map(|src| &**src))?),
        }
    }

    pub(crate) fn listen(&self) -> Ticket {
        match self {
            Dispatch::Threads(b) => {
                // Results a worker holds while inside a long step are
                // published by whoever looks.
                b.rescue();
                Ticket::Threads {
                    generation: b.generation(),
                    epoch: b.epoch(),
                }
            }
            Dispatch::Procs(b) => Ticket::Procs(b.listen()),
        }
    }

    /// Waits until at least `needed` more results were published after
    /// `ticket` (or anything happened, for processes), a wake-up, or
    /// `deadline`. Threads and the shm exchange spin first, until a budget
    /// counted from `waiting_since` (the start of the receive) is spent,
    /// then sleep; the queue exchange sleeps at once.
    pub(crate) fn wait(
        &self,
        ticket: Ticket,
        needed: usize,
        deadline: Option<Instant>,
        waiting_since: Instant,
    ) {
        match (self, ticket) {
            (Dispatch::Threads(b), Ticket::Threads { generation, epoch }) => {
                b.wait_for(generation + needed as u64, epoch, deadline, waiting_since);
            }
            (Dispatch::Procs(b), Ticket::Procs(ticket)) => b.wait(ticket, deadline, waiting_since),
            _ => unreachable!("a ticket comes from its own backend"),
        }
    }

    /// The backend's jobs of a send to every env (env `j` from row `j`),
    /// when it has them: threads, whose send recognises its own list.
    pub(crate) fn every_env_jobs(&self) -> Option<&[(usize, Option<usize>)]> {
        match self {
            Dispatch::Threads(b) => Some(b.every_env_jobs()),
            Dispatch::Procs(_) => None,
        }
    }

    /// Whether a receiver may run queued envs itself ([`Dispatch::help`]):
    /// threads only.
    pub(crate) fn helps(&self) -> bool {
        matches!(self, Dispatch::Threads(_))
    }

    /// Runs a chunk of queued envs in the calling thread (threads only);
    /// returns how many it ran.
    pub(crate) fn help(&self) -> usize {
        match self {
            Dispatch::Threads(b) => b.help(),
            Dispatch::Procs(_) => 0,
        }
    }

    pub(crate) fn wake_receivers(&self) {
        match self {
            Dispatch::Threads(b) => b.wake_receivers(),
            Dispatch::Procs(b) => b.wake_receivers(),
        }
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        match self {
            Dispatch::Threads(b) => b.is_shut_down(),
            Dispatch::Procs(b) => b.is_shut_down(),
        }
    }

    pub(crate) fn is_done(&self, env: usize) -> bool {
        match self {
            Dispatch::Threads(b) => b.is_done(env),
            Dispatch::Procs(b) => b.is_done(env),
        }
    }

    /// Appends to `ready` those of `envs` whose result (or error) is
    /// waiting to be taken; returns whether any of them failed.
    pub(crate) fn ready_among(
        &self,
        envs: impl Iterator<Item = usize>,
        ready: &mut Vec<usize>,
    ) -> bool {
        match self {
            Dispatch::Threads(b) => b.ready_among(envs, ready),
            Dispatch::Procs(b) => b.ready_among(envs, ready),
        }
    }

    /// How many of a range of envs are done and whether any failed; those
    /// done appended to `ready` ([`Dispatch::ready_among`]) when at least
    /// `min` are or one failed (threads count first; processes always
    /// list them).
    pub(crate) fn ready_in(
        &self,
        envs: std::ops::Range<usize>,
        min: usize,
        ready: &mut Vec<usize>,
    ) -> (usize, bool) {
        match self {
            Dispatch::Threads(b) => b.ready_in(envs, min, ready),
            Dispatch::Procs(b) => {
                let start = ready.len();
                let failed = b.ready_among(envs, ready);
                (ready.len() - start, failed)
            }
        }
    }

    /// The first of `envs` (done) that failed, if any.
    pub(crate) fn first_failed(&self, envs: &[usize]) -> Option<usize> {
        match self {
            Dispatch::Threads(b) => envs.iter().copied().find(|&env| b.is_failed(env)),
            Dispatch::Procs(b) => envs.iter().copied().find(|&env| b.is_failed(env)),
        }
    }

    /// When each of `envs` (done) was published (a generation; smaller is
    /// older), appended to `out` in their order.
    pub(crate) fn published_of(&self, envs: &[usize], out: &mut Vec<u64>) {
        match self {
            Dispatch::Threads(b) => out.extend(envs.iter().map(|&env| b.published(env))),
            Dispatch::Procs(b) => out.extend(envs.iter().map(|&env| b.published(env))),
        }
    }

    /// Reads env `env`'s result (it must be done), or returns its error.
    pub(crate) fn peek<R>(
        &self,
        env: usize,
        read: impl FnOnce(Output<'_>) -> R,
    ) -> Result<R, PoolError> {
        match self {
            Dispatch::Threads(b) => Ok(b.peek(env, read)?),
            Dispatch::Procs(b) => Ok(b.peek(env, read)?),
        }
    }

    /// Reads the results of several done envs at once.
    pub(crate) fn peek_many<R>(
        &self,
        envs: &[usize],
        read: impl FnOnce(&[Output<'_>]) -> R,
    ) -> Result<R, PoolError> {
        match self {
            Dispatch::Threads(b) => Ok(b.peek_many(envs, read)?),
            Dispatch::Procs(b) => Ok(b.peek_many(envs, read)?),
        }
    }

    /// Marks each of `envs` idle in the backend (their results dropped),
    /// the backend matched once. Each was taken: done or failed.
    pub(crate) fn release_all(&self, envs: &[usize]) {
        match self {
            Dispatch::Threads(b) => b.release_taken(envs),
            Dispatch::Procs(b) => envs.iter().for_each(|&env| b.release(env)),
        }
    }

    /// The results of `op` of `envs` as ready-made batches (the `"next"`
    /// batch and the root batch), when the backend keeps them (threads with
    /// batch rows); `None` otherwise: read them with `peek_many`.
    pub(crate) fn gather(
        &self,
        op: Op,
        envs: &[usize],
    ) -> Option<(Option<TensorDict>, Option<TensorDict>)> {
        match self {
            Dispatch::Threads(b) => b.gather(op, envs),
            Dispatch::Procs(b) => b.gather(op, envs),
        }
    }

    /// Counts a batch taken by a receive in the exchange's statistics.
    pub(crate) fn record_batch(&self, envs: &[usize], max_get: Option<usize>, op: Op) {
        match self {
            Dispatch::Threads(_) => {}
            Dispatch::Procs(b) => b.record_batch(envs, max_get, op),
        }
    }

    pub(crate) fn shutdown(&self) {
        match self {
            Dispatch::Threads(b) => b.shutdown(),
            Dispatch::Procs(b) => b.shutdown(),
        }
    }
}
