//! `WorkQueue`: the env tasks that worker threads pull, in chunks.
//!
//! A send hands each worker one [`Chunk`]: the op, the sent tensordict and
//! the jobs of that worker's envs (its home envs, a block in order, so
//! that an env is stepped by the same thread step after step and its
//! buffers stay in that core's cache). The chunk is queued once; its jobs
//! are claimed one at a time through one atomic word (the front by its
//! worker, the back by a worker whose own queue is empty, or by a helping
//! receiver, which takes the front of a resting worker's), so that a job
//! nobody started stays takeable by anyone while the chunk's worker is
//! inside a long step, and no job costs a lock or a reference count of its
//! own.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use smallvec::SmallVec;
use tensordict::TensorDict;

use crate::Op;
use pool_core::{lock, Signal};

/// One env's task, borrowed from its chunk: what to run and where its
/// input is (the worker copies it into the env's input buffer, so that a
/// send copies nothing).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Job<'a> {
    /// The env.
    pub(crate) env: usize,
    /// What to run.
    pub(crate) op: Op,
    /// The sent tensordict (checked by the send) and the env's row of it
    /// (`None`: all of it), when the env takes an input.
    pub(crate) input: Option<(&'a TensorDict, Option<usize>)>,
}

/// The jobs of one send for one worker's envs, claimed one at a time.
#[derive(Debug)]
pub(crate) struct Chunk {
    op: Op,
    /// The sent tensordict, shared by every chunk of the send.
    src: Option<Arc<TensorDict>>,
    /// The jobs.
    jobs: Jobs,
    /// The jobs not claimed yet, `front..back`: the front in the low 32
    /// bits, the back in the high 32. Claims move either end inward with
    /// one compare-and-swap; the chunk is spent once they meet.
    span: AtomicU64,
}

/// A job of a [`Chunk`].
#[derive(Clone, Copy, Debug)]
struct ChunkJob {
    /// The env.
    env: u32,
    /// Its row of the chunk's tensordict; [`NO_ROW`]: all of it.
    row: u32,
    /// Whether it takes an input.
    takes_input: bool,
}

/// A chunk's jobs.
#[derive(Debug)]
enum Jobs {
    /// Envs `first..` (one per job), env `first + i` from row
    /// `first_row + i` of the chunk's tensordict, all taking an input or
    /// none: a send to every env, or to a run of consecutive envs from
    /// consecutive rows, needs no per-env entry.
    Block {
        first: u32,
        first_row: u32,
        takes_input: bool,
    },
    /// Any jobs (kept small: a chunk of a send to many envs is one
    /// allocation of a few hundred bytes).
    List(Box<[ChunkJob]>),
}

/// A [`ChunkJob`]'s row when the env takes the whole tensordict.
const NO_ROW: u32 = u32::MAX;

/// Packs `front..back` into a span word.
fn span(front: u32, back: u32) -> u64 {
    u64::from(back) << 32 | u64::from(front)
}

/// Unpacks a span word into `(front, back)`.
fn unspan(word: u64) -> (u32, u32) {
    // Truncation intended: the two halves of the word.
    (word as u32, (word >> 32) as u32)
}

impl Chunk {
    /// A chunk of `jobs` (env, row, takes an input) of `op`, with the sent
    /// tensordict `src`.
    ///
    /// # Panics
    /// If there are `u32::MAX` jobs or more, or an env or row is that
    /// large (a pool's envs and rows are far fewer).
    pub(crate) fn new(
        op: Op,
        src: Option<Arc<TensorDict>>,
        jobs: impl IntoIterator<Item = (usize, Option<usize>, bool)>,
    ) -> Chunk {
        // Checked once for all: the largest env or row (`NO_ROW` is no row).
        let mut largest = 0;
        let jobs: Box<[ChunkJob]> = jobs
            .into_iter()
            .map(|(env, row, takes_input)| {
                largest = largest.max(env.max(row.unwrap_or(0)));
                // Truncation: checked below.
                ChunkJob {
                    env: env as u32,
                    row: row.map_or(NO_ROW, |row| row as u32),
                    takes_input,
                }
            })
            .collect();
        assert!(
            largest < NO_ROW as usize,
            "fewer than 2^32 - 1 envs and rows"
        );
        let len = u32::try_from(jobs.len()).expect("fewer than 2^32 jobs in a chunk");
        Chunk {
            op,
            src,
            jobs: Jobs::List(jobs),
            span: AtomicU64::new(span(0, len)),
        }
    }

    /// A chunk of the jobs of envs `envs` of `op`, env `j` from row `j` of
    /// `src`, each taking an input if `takes_input`: as [`Chunk::new`] of
    /// those jobs, with no per-env entry.
    ///
    /// # Panics
    /// If `envs` ends past `u32::MAX - 1` (a pool's envs are far fewer).
    pub(crate) fn block(
        op: Op,
        src: Option<Arc<TensorDict>>,
        envs: std::ops::Range<usize>,
        takes_input: bool,
    ) -> Chunk {
        let end = u32::try_from(envs.end)
            .ok()
            .filter(|&end| end != NO_ROW)
            .expect("fewer than 2^32 - 1 envs");
        // In range: `envs.start <= envs.end`, which fits.
        let first = envs.start.min(envs.end) as u32;
        Chunk {
            op,
            src,
            jobs: Jobs::Block {
                first,
                first_row: first,
                takes_input,
            },
            span: AtomicU64::new(span(0, end - first)),
        }
    }

    /// A chunk of `jobs` (env, row of `src`) of `op`, `takes_input(env)`
    /// saying whether the env is given its row: a block when the envs and
    /// their rows count up one by one and all or none take an input (a
    /// send to a run of consecutive envs from consecutive rows: no per-env
    /// entry), else as [`Chunk::new`].
    ///
    /// # Panics
    /// As [`Chunk::new`].
    pub(crate) fn of_jobs(
        op: Op,
        src: Option<Arc<TensorDict>>,
        jobs: &[(usize, Option<usize>)],
        takes_input: impl Fn(usize) -> bool,
    ) -> Chunk {
        if let Some(&(first, Some(first_row))) = jobs.first() {
            let first_takes = takes_input(first);
            // No branch a job (wrapping: an absurd row fails `fits` below).
            let counting_up = jobs.iter().enumerate().fold(true, |all, (j, &(env, row))| {
                all & (env == first.wrapping_add(j))
                    & (row == Some(first_row.wrapping_add(j)))
                    & (takes_input(env) == first_takes)
            });
            let fits = first_row
                .max(first)
                .checked_add(jobs.len())
                .is_some_and(|end| end < NO_ROW as usize);
            if let (true, Ok(first), Ok(first_row), true) = (
                counting_up,
                u32::try_from(first),
                u32::try_from(first_row),
                fits,
            ) {
                return Chunk {
                    op,
                    src,
                    jobs: Jobs::Block {
                        first,
                        first_row,
                        takes_input: first_takes,
                    },
                    // Fits: checked with `fits` above.
                    span: AtomicU64::new(span(0, jobs.len() as u32)),
                };
            }
        }
        Chunk::new(
            op,
            src,
            jobs.iter().map(|&(env, row)| (env, row, takes_input(env))),
        )
    }

    /// Job `index` of the chunk.
    pub(crate) fn job(&self, index: usize) -> Job<'_> {
        let (env, row, takes_input) = match &self.jobs {
            Jobs::Block {
                first,
                first_row,
                takes_input,
            } => (
                *first as usize + index,
                Some(*first_row as usize + index),
                *takes_input,
            ),
            Jobs::List(jobs) => {
                let job = jobs[index];
                let row = (job.row != NO_ROW).then_some(job.row as usize);
                (job.env as usize, row, job.takes_input)
            }
        };
        Job {
            env,
            op: self.op,
            input: match &self.src {
                Some(src) if takes_input => Some((&**src, row)),
                _ => None,
            },
        }
    }

    /// The env of job `index`.
    #[cfg(test)]
    fn env(&self, index: usize) -> usize {
        self.job(index).env
    }

    /// Claims up to `max` jobs from the front (`from_back` false) or the
    /// back; returns their indices, `None` if the chunk is spent.
    fn claim(&self, max: u32, from_back: bool) -> Option<std::ops::Range<usize>> {
        // Relaxed: the jobs are immutable from the chunk's making, which
        // the queue's lock published; the word only divides them.
        let mut word = self.span.load(Ordering::Relaxed);
        loop {
            let (front, back) = unspan(word);
            if front >= back {
                return None;
            }
            let take = (back - front).min(max.max(1));
            let (new, range) = if from_back {
                (span(front, back - take), back - take..back)
            } else {
                (span(front + take, back), front..front + take)
            };
            match self
                .span
                .compare_exchange_weak(word, new, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Some(range.start as usize..range.end as usize),
                Err(now) => word = now,
            }
        }
    }

    /// Whether every job has been claimed.
    #[cfg(test)]
    fn is_spent(&self) -> bool {
        let (front, back) = unspan(self.span.load(Ordering::Relaxed));
        front >= back
    }
}

/// A claimed job: its chunk and its index there, and where it was claimed
/// from ([`Claim::into_current`] keeps the chunk for the worker's next
/// claim).
#[derive(Debug)]
pub(crate) struct Claim {
    pub(crate) chunk: Arc<Chunk>,
    pub(crate) index: usize,
    /// `None`: from the front of the worker's own chunk; `Some(pushed)`:
    /// from the back of another queue's, the queue's push count
    /// (`WorkQueue::pushed`) read before the claim.
    stolen: Option<u64>,
}

impl Claim {
    /// The claimed job.
    pub(crate) fn job(&self) -> Job<'_> {
        self.chunk.job(self.index)
    }

    /// The chunk to claim the worker's next job from, without a lock
    /// ([`WorkQueue::try_pop`]).
    pub(crate) fn into_current(self) -> Current {
        Current {
            chunk: self.chunk,
            stolen: self.stolen,
        }
    }
}

/// The chunk a worker claims its next job from without taking a queue's
/// lock: its own, from the front; or the one it last claimed a job from the
/// back of, as long as nothing has been queued since (its own queue comes
/// first then). A worker that has run out of its own envs claims the
/// others' one by one, each claim one compare-and-swap, not a lock.
#[derive(Debug)]
pub(crate) struct Current {
    chunk: Arc<Chunk>,
    stolen: Option<u64>,
}

/// Claims one job of `queue`: from its first chunk with any left, or from
/// the back of its last if `stolen` (the push count read before), dropping
/// the spent chunks on the way. A claim from the front is the worker's own.
fn claim_one(queue: &mut VecDeque<Arc<Chunk>>, stolen: Option<u64>) -> Option<Claim> {
    let mut claimed = SmallVec::new();
    take_from(queue, 1, &mut claimed, stolen.is_some());
    let Claimed { chunk, range } = claimed.pop()?;
    Some(Claim {
        chunk,
        index: range.start,
        stolen,
    })
}

/// Claims up to `max` jobs of `queue` into `out`, from the back of its last
/// chunk or from the front of its first, dropping the spent chunks on the
/// way ([`WorkQueue::take_any`], [`claim_one`]). Returns how many it
/// claimed.
fn take_from(
    queue: &mut VecDeque<Arc<Chunk>>,
    max: usize,
    out: &mut SmallVec<[Claimed; 2]>,
    from_back: bool,
) -> usize {
    let mut taken = 0;
    while taken < max {
        let end = if from_back {
            queue.back()
        } else {
            queue.front()
        };
        let Some(chunk) = end else {
            break;
        };
        let left = u32::try_from(max - taken).unwrap_or(u32::MAX);
        match chunk.claim(left, from_back) {
            Some(range) => {
                taken += range.len();
                out.push(Claimed {
                    chunk: Arc::clone(chunk),
                    range,
                });
            }
            None if from_back => {
                queue.pop_back();
            }
            None => {
                queue.pop_front();
            }
        }
    }
    taken
}

/// A queue's first chunk with unclaimed jobs, and how far its front was
/// claimed, at one moment ([`WorkQueue::fronts`]).
#[derive(Debug)]
pub(crate) struct Front {
    queue: usize,
    chunk: Weak<Chunk>,
    front: u32,
}

/// A run of jobs of one chunk claimed at once (by a helping receiver).
#[derive(Debug)]
pub(crate) struct Claimed {
    pub(crate) chunk: Arc<Chunk>,
    pub(crate) range: std::ops::Range<usize>,
}

/// Chunks of env tasks waiting for a worker, one queue per worker, and the
/// signal workers sleep on.
///
/// A worker claims its jobs one at a time ([`WorkQueue::pop`]) from the
/// front of the first chunk of its own queue: the jobs it has not started
/// stay in the chunk, where another worker (or a helping receiver) claims
/// them from the back while it is inside a long env step. A helping
/// receiver takes the last queue's from the front first while its worker
/// rests ([`WorkQueue::take_any`]). A chunk stays queued until it is
/// spent.
#[derive(Debug)]
pub(crate) struct WorkQueue {
    queues: Vec<Mutex<VecDeque<Arc<Chunk>>>>,
    /// Per env: the worker whose queue it goes to (envs in blocks, in
    /// order), looked up rather than divided out on every push.
    homes: Box<[u16]>,
    /// The same over every queue but the last, for pushes while the last
    /// worker rests (the spare: see `ThreadBackend`'s workers); `None`
    /// with one queue.
    homes_but_last: Option<Box<[u16]>>,
    pushed: Signal,
    stop: AtomicBool,
}

/// The most envs a helping receiver runs in one call: it returns to its
/// receive between calls (to see a failure, a shutdown, or that its batch
/// is complete while others' envs, sent meanwhile, wait).
pub(crate) const HELP_CHUNK: usize = 8;

impl WorkQueue {
    /// Queues for `workers` workers (at least one) sharing `envs` envs.
    pub(crate) fn new(workers: usize, envs: usize) -> WorkQueue {
        let queues = workers.clamp(1, usize::from(u16::MAX));
        // Envs in blocks, in order, over `n` queues.
        let homes = |n: usize| -> Box<[u16]> {
            (0..envs)
                .map(|env| {
                    let home = (env * n / envs.max(1)).min(n - 1);
                    u16::try_from(home).expect("fewer workers than u16::MAX")
                })
                .collect()
        };
        WorkQueue {
            queues: (0..queues).map(|_| Mutex::default()).collect(),
            homes: homes(queues),
            homes_but_last: (queues > 1).then(|| homes(queues - 1)),
            pushed: Signal::default(),
            stop: AtomicBool::new(false),
        }
    }

    /// Each env's home: over every queue, or over all but the last while
    /// its worker rests (`but_last`, with more than one queue).
    #[inline]
    fn homes(&self, but_last: bool) -> &[u16] {
        match &self.homes_but_last {
            Some(homes) if but_last => homes,
            _ => &self.homes,
        }
    }

    /// The worker whose queue env `env` goes to (see [`WorkQueue::homes`]):
    /// envs in blocks, in order (an env past the last, which a send never
    /// queues, to the last).
    #[inline]
    fn home(&self, env: usize, but_last: bool) -> usize {
        self.homes(but_last)
            .get(env)
            .map_or(self.queues.len() - 1, |&home| usize::from(home))
    }

    /// Queues `jobs` (env, row of `src`) of `op`: each run of consecutive
    /// jobs whose envs share a home queue becomes one chunk there (one per
    /// worker for a send in env order; none in the last queue if
    /// `but_last`), `takes_input(env)` saying whether the env is given its
    /// row; then wakes the workers.
    pub(crate) fn push_jobs(
        &self,
        op: Op,
        src: Option<Arc<TensorDict>>,
        jobs: &[(usize, Option<usize>)],
        takes_input: impl Fn(usize) -> bool,
        but_last: bool,
    ) {
        let mut start = 0;
        while start < jobs.len() {
            let home = self.home(jobs[start].0, but_last);
            let end = jobs[start..]
                .iter()
                .position(|&(env, _)| self.home(env, but_last) != home)
                .map_or(jobs.len(), |len| start + len);
            let chunk = Arc::new(Chunk::of_jobs(
                op,
                src.clone(),
                &jobs[start..end],
                &takes_input,
            ));
            lock(&self.queues[home]).push_back(chunk);
            start = end;
        }
        self.pushed.notify();
    }

    /// Queues a send of `op` to every env, env `j` from row `j` of `src`:
    /// one chunk per worker's block of envs (but the last's, if
    /// `but_last`); then wakes the workers. As [`WorkQueue::push_jobs`] of
    /// those jobs, without looking up each env's home.
    pub(crate) fn push_every_env(
        &self,
        op: Op,
        src: Option<Arc<TensorDict>>,
        takes_input: impl Fn(usize) -> bool,
        but_last: bool,
    ) {
        let homes = self.homes(but_last);
        let mut start = 0;
        while start < homes.len() {
            let home = usize::from(homes[start]);
            // Homes are blocks in env order: the block ends where the next
            // home begins.
            let end = start + homes[start..].partition_point(|&h| usize::from(h) == home);
            let first = takes_input(start);
            let chunk = if (start + 1..end).all(|env| takes_input(env) == first) {
                Chunk::block(op, src.clone(), start..end, first)
            } else {
                Chunk::new(
                    op,
                    src.clone(),
                    (start..end).map(|env| (env, Some(env), takes_input(env))),
                )
            };
            lock(&self.queues[home]).push_back(Arc::new(chunk));
            start = end;
        }
        self.pushed.notify();
    }

    /// Claims the next job of worker `worker` without waiting: from
    /// `current` (see [`Current`]), else from the front of the first chunk
    /// of its own queue that has any, else from the back of another queue's
    /// last. `None` if nothing is queued or the queue is stopped.
    #[inline]
    pub(crate) fn try_pop(&self, worker: usize, current: &mut Option<Current>) -> Option<Claim> {
        if self.is_stopped() {
            return None;
        }
        if let Some(Current { chunk, stolen }) = current.take() {
            // A steal goes on while nothing new is queued: the worker's own
            // envs, when it has some again, come first.
            if stolen.is_none_or(|pushed| self.pushed.generation() == pushed) {
                if let Some(claimed) = chunk.claim(1, stolen.is_some()) {
                    return Some(Claim {
                        chunk,
                        index: claimed.start,
                        stolen,
                    });
                }
            }
        }
        self.claim_queued(worker)
    }

    /// Per queue, its first chunk with a job nobody claimed yet, and how
    /// far its front was claimed, into `out` (cleared first): what
    /// [`WorkQueue::stood_still`] compares with later. A `Weak` keeps the
    /// chunk's memory (not its jobs' data) from being reused meanwhile.
    pub(crate) fn fronts(&self, out: &mut Vec<Front>) {
        out.clear();
        for (index, queue) in self.queues.iter().enumerate() {
            let first = lock(queue).iter().find_map(|chunk| {
                // Relaxed: a hint, as any look at a span before a claim.
                let (front, back) = unspan(chunk.span.load(Ordering::Relaxed));
                (front < back).then(|| Front {
                    queue: index,
                    chunk: Arc::downgrade(chunk),
                    front,
                })
            });
            out.extend(first);
        }
    }

    /// The queues that stood still since `before` (from
    /// [`WorkQueue::fronts`]), into `out` (cleared first): each one's first
    /// chunk then still has a job nobody claimed and its front did not
    /// move, so its worker claimed nothing of its own meanwhile (it is
    /// stuck inside a step, or held off its core, or it rests; claims from
    /// the back by others do not count). A live worker elsewhere, and
    /// chunks queued since, do not hide one.
    pub(crate) fn stood_still(&self, before: &[Front], out: &mut Vec<usize>) {
        out.clear();
        out.extend(before.iter().filter_map(|was| {
            let chunk = was.chunk.upgrade()?;
            // Relaxed: as in `fronts`.
            let (front, back) = unspan(chunk.span.load(Ordering::Relaxed));
            (front == was.front && front < back).then_some(was.queue)
        }));
    }

    /// Claims a job of queue `queue` for worker `worker` (the spare,
    /// standing in for that queue's worker): from the front of the first
    /// chunk with any if the queue is its own, else from the back of the
    /// last. `None` if the queue has none left or is stopped.
    pub(crate) fn claim_in(&self, queue: usize, worker: usize) -> Option<Claim> {
        if self.is_stopped() {
            return None;
        }
        let n = self.queues.len();
        let stolen = (queue % n != worker % n).then(|| self.pushed.generation());
        claim_one(&mut lock(&self.queues[queue % n]), stolen)
    }

    /// How many pushes there have been (a count that moves with every
    /// send).
    pub(crate) fn pushes(&self) -> u64 {
        self.pushed.generation()
    }

    /// Whether the queue is stopped.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// [`WorkQueue::try_pop`] past the current chunk: the first chunk of
    /// the worker's own queue with a job left, else the back of another's.
    fn claim_queued(&self, worker: usize) -> Option<Claim> {
        // Read before the queues are: a push after it ends the steal.
        let pushed = self.pushed.generation();
        let n = self.queues.len();
        let own = worker % n;
        // Its own queue from the front, then the others' from the back.
        (0..n).find_map(|i| {
            let stolen = (i > 0).then_some(pushed);
            claim_one(&mut lock(&self.queues[(own + i) % n]), stolen)
        })
    }

    /// Claims up to `max` jobs from the back of the first queue that has
    /// any, under its lock, into `out` (for a helping receiver, which must
    /// wait for every one of them anyway: nobody else waits on the jobs it
    /// holds); with `last_first` (while the last worker rests, what a send
    /// to every env queued for it is the helper's), from the front of the
    /// last queue first. Returns how many it claimed.
    pub(crate) fn take_any(
        &self,
        max: usize,
        out: &mut SmallVec<[Claimed; 2]>,
        last_first: bool,
    ) -> usize {
        if self.is_stopped() {
            return 0;
        }
        let last = self.queues.len() - 1;
        if last_first && last > 0 {
            let taken = take_from(&mut lock(&self.queues[last]), max, out, false);
            if taken > 0 {
                return taken;
            }
        }
        for queue in &self.queues {
            let taken = take_from(&mut lock(queue), max, out, true);
            if taken > 0 {
                return taken;
            }
        }
        0
    }

    /// Claims the next job of worker `worker`, as [`WorkQueue::try_pop`].
    /// Waits while every queue is empty; `None` once the queue is stopped.
    pub(crate) fn pop(&self, worker: usize, current: &mut Option<Current>) -> Option<Claim> {
        loop {
            let seen = self.pushed.generation();
            if self.is_stopped() {
                return None;
            }
            if let Some(claim) = self.try_pop(worker, current) {
                return Some(claim);
            }
            // Sleeps until something is pushed or the queue is stopped; no
            // deadline: an idle worker has nothing else to do.
            self.pushed.wait(seen, None);
        }
    }

    /// How many chunks of `op` worker `worker`'s own queue holds (spent
    /// ones included until a claim drops them).
    #[cfg(test)]
    pub(crate) fn chunks_of(&self, worker: usize, op: Op) -> usize {
        lock(&self.queues[worker % self.queues.len()])
            .iter()
            .filter(|chunk| chunk.op == op)
            .count()
    }

    /// Whether worker `worker`'s own queue has no job left to claim (its
    /// next [`WorkQueue::pop`] would steal or wait).
    #[cfg(test)]
    pub(crate) fn own_is_empty(&self, worker: usize) -> bool {
        lock(&self.queues[worker % self.queues.len()])
            .iter()
            .all(|chunk| chunk.is_spent())
    }

    /// Stops the queue: workers return from `pop` (queued jobs are left).
    pub(crate) fn stop(&self) {
        // Release: pairs with the Acquire in `is_stopped`.
        self.stop.store(true, Ordering::Release);
        self.pushed.notify();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resets of envs `envs` (no input), queued.
    fn push(queue: &WorkQueue, envs: std::ops::Range<usize>) {
        let jobs: Vec<(usize, Option<usize>)> = envs.map(|env| (env, None)).collect();
        queue.push_jobs(Op::Reset, None, &jobs, |_| false, false);
    }

    /// The env of the next job worker `worker` claims (its current chunk
    /// kept as a worker keeps it).
    fn pop(queue: &WorkQueue, worker: usize, current: &mut Option<Current>) -> Option<usize> {
        let claim = queue.try_pop(worker, current)?;
        let env = claim.chunk.env(claim.index);
        *current = Some(claim.into_current());
        Some(env)
    }

    fn envs(claimed: &[Claimed]) -> Vec<usize> {
        claimed
            .iter()
            .flat_map(|c| c.range.clone().map(|i| c.chunk.env(i)))
            .collect()
    }

    #[test]
    fn workers_take_their_own_envs_first_then_claim_from_the_back_of_others() {
        let queue = WorkQueue::new(2, 8);
        push(&queue, 0..8);
        let (mut w0, mut w1) = (None, None);
        for env in 4..8 {
            assert_eq!(pop(&queue, 1, &mut w1), Some(env));
        }
        // Its own chunk is spent: it claims worker 0's last job, one at a
        // time, and a helper the ones before it.
        assert_eq!(pop(&queue, 1, &mut w1), Some(3));
        assert!(queue.own_is_empty(1));
        let mut helped = SmallVec::new();
        assert_eq!(queue.take_any(1, &mut helped, false), 1);
        assert_eq!(envs(&helped), vec![2]);
        assert_eq!(pop(&queue, 0, &mut w0), Some(0));
        assert_eq!(pop(&queue, 0, &mut w0), Some(1));
        assert_eq!(pop(&queue, 0, &mut w0), None);
        assert_eq!(pop(&queue, 1, &mut w1), None);
        assert_eq!(queue.take_any(HELP_CHUNK, &mut SmallVec::new(), false), 0);
        queue.stop();
        assert!(queue.pop(0, &mut w0).is_none());
    }

    /// The jobs a worker has not started stay where others can take them:
    /// a worker claims one job at a time, so while it runs one, another
    /// worker (or a helper) claims the rest of its chunk.
    #[test]
    fn a_busy_workers_chunk_stays_claimable() {
        let queue = WorkQueue::new(2, 16);
        push(&queue, 0..8);
        let mut w0 = None;
        assert_eq!(pop(&queue, 0, &mut w0), Some(0));
        // Worker 0 is "inside" env 0: worker 1 claims four from the back,
        // and a helper the rest.
        let mut w1 = None;
        let mut taken: Vec<usize> = std::iter::from_fn(|| pop(&queue, 1, &mut w1))
            .take(4)
            .collect();
        assert_eq!(taken, vec![7, 6, 5, 4]);
        let mut helped = SmallVec::new();
        while queue.take_any(2, &mut helped, false) > 0 {}
        taken.extend(envs(&helped));
        taken.sort_unstable();
        assert_eq!(taken, (1..8).collect::<Vec<_>>());
        assert_eq!(pop(&queue, 0, &mut w0), None);
    }

    /// A worker out of its own envs goes on claiming from the back of the
    /// chunk it stole from (no lock), until something new is queued: then
    /// its own queue comes first again.
    #[test]
    fn a_steal_goes_on_until_something_is_queued() {
        let queue = WorkQueue::new(2, 8);
        push(&queue, 0..8);
        let mut w1 = None;
        let taken: Vec<usize> = std::iter::from_fn(|| pop(&queue, 1, &mut w1))
            .take(6)
            .collect();
        assert_eq!(taken, vec![4, 5, 6, 7, 3, 2]);
        assert!(matches!(
            &w1,
            Some(Current {
                stolen: Some(_),
                ..
            })
        ));
        push(&queue, 4..6);
        assert_eq!(pop(&queue, 1, &mut w1), Some(4));
        assert!(matches!(&w1, Some(Current { stolen: None, .. })));
        assert_eq!(pop(&queue, 1, &mut w1), Some(5));
        assert_eq!(pop(&queue, 1, &mut w1), Some(1));
        let mut w0 = None;
        assert_eq!(pop(&queue, 0, &mut w0), Some(0));
        assert_eq!(pop(&queue, 0, &mut w0), None);
        assert_eq!(pop(&queue, 1, &mut w1), None);
    }

    /// A helper takes what a send to every env queued for the resting
    /// last worker first, from its front (the same envs every step), and
    /// the others' from their back; the other worker steals that block from
    /// its back once its own is spent.
    #[test]
    fn a_helper_takes_the_last_queue_first_while_its_worker_rests() {
        let queue = WorkQueue::new(2, 8);
        push(&queue, 0..8);
        let mut helped = SmallVec::new();
        assert_eq!(queue.take_any(3, &mut helped, true), 3);
        assert_eq!(envs(&helped), vec![4, 5, 6]);
        let mut w0 = None;
        let taken: Vec<usize> = std::iter::from_fn(|| pop(&queue, 0, &mut w0)).collect();
        assert_eq!(taken, vec![0, 1, 2, 3, 7]);
        assert_eq!(queue.take_any(HELP_CHUNK, &mut helped, true), 0);
        push(&queue, 0..8);
        helped.clear();
        assert_eq!(queue.take_any(2, &mut helped, false), 2);
        assert_eq!(envs(&helped), vec![2, 3], "not from the back of the first");
    }

    /// What the spare worker looks at after a nap: whether a queue's
    /// first chunk with unclaimed jobs kept its front, whatever the other
    /// queues, chunks queued since, and claims from the back did.
    #[test]
    fn a_queue_whose_front_did_not_move_stood_still() {
        let queue = WorkQueue::new(3, 12);
        let mut before = Vec::new();
        queue.fronts(&mut before);
        assert!(before.is_empty());
        let mut still = Vec::new();
        queue.stood_still(&before, &mut still);
        assert!(still.is_empty(), "nothing was queued");
        push(&queue, 0..8);
        let (mut w0, mut w1) = (None, None);
        assert_eq!(pop(&queue, 0, &mut w0), Some(0));
        // Worker 0 is inside env 0, envs 1..4 wait behind it; worker 1
        // works through its own.
        queue.fronts(&mut before);
        assert_eq!(before.len(), 2);
        assert_eq!(pop(&queue, 1, &mut w1), Some(4));
        push(&queue, 4..12);
        let mut helped = SmallVec::new();
        assert_eq!(queue.take_any(1, &mut helped, false), 1);
        assert_eq!(envs(&helped), vec![3], "from the back of worker 0's");
        queue.stood_still(&before, &mut still);
        assert_eq!(still, vec![0], "worker 0's front did not move");
        assert_eq!(pop(&queue, 0, &mut w0), Some(1));
        queue.stood_still(&before, &mut still);
        assert!(still.is_empty());
        // A chunk claimed to its end and dropped stood still no more.
        queue.fronts(&mut before);
        let taken: Vec<usize> = std::iter::from_fn(|| pop(&queue, 0, &mut w0))
            .take(1)
            .collect();
        assert_eq!(taken, vec![2]);
        let rest: Vec<usize> = std::iter::from_fn(|| pop(&queue, 1, &mut w1)).collect();
        assert_eq!(rest, vec![5, 6, 7, 4, 5, 6, 7, 11, 10, 9, 8]);
        queue.stood_still(&before, &mut still);
        assert!(still.is_empty());
        // The spare standing in for worker 0 claims its jobs from the
        // back, its own from the front.
        push(&queue, 0..12);
        assert_eq!(queue.claim_in(0, 2).map(|c| c.chunk.env(c.index)), Some(3));
        assert_eq!(queue.claim_in(2, 2).map(|c| c.chunk.env(c.index)), Some(8));
    }

    /// A send out of env order makes one chunk per run of envs of one home;
    /// every job is claimed once, with its row and input.
    #[test]
    fn jobs_out_of_order_make_one_chunk_per_run_of_a_home() {
        let queue = WorkQueue::new(2, 8);
        let src = Arc::new(TensorDict::new(&[4]));
        let jobs = [(6, Some(0)), (1, Some(1)), (2, Some(2)), (7, Some(3))];
        queue.push_jobs(Op::Step, Some(src), &jobs, |env| env != 2, false);
        let mut w0 = None;
        let mut seen = Vec::new();
        while let Some(claim) = queue.try_pop(0, &mut w0) {
            let job = claim.job();
            seen.push((job.env, job.input.map(|(_, row)| row)));
            w0 = Some(claim.into_current());
        }
        assert_eq!(
            seen,
            vec![
                (1, Some(Some(1))),
                (2, None),
                (7, Some(Some(3))),
                (6, Some(Some(0)))
            ]
        );
    }

    /// A send to every env makes one chunk per worker's block, as the same
    /// jobs pushed one by one do: a block (no per-env entry) when its envs
    /// all take an input or none does, a list otherwise.
    #[test]
    fn a_send_to_every_env_is_one_chunk_per_block() {
        type Takes = fn(usize) -> bool;
        let cases: [(&str, Takes); 3] = [
            ("every env takes an input", |_| true),
            ("none does", |_| false),
            ("every other one does", |env| env % 2 == 0),
        ];
        for (case, takes_input) in cases {
            for ((workers, envs), but_last) in [(2, 8), (3, 7), (1, 3), (4, 2)]
                .into_iter()
                .flat_map(|size| [(size, false), (size, true)])
            {
                let src = Arc::new(TensorDict::new(&[envs]));
                let every = WorkQueue::new(workers, envs);
                every.push_every_env(Op::Step, Some(Arc::clone(&src)), takes_input, but_last);
                let jobs: Vec<(usize, Option<usize>)> = (0..envs).map(|e| (e, Some(e))).collect();
                let each = WorkQueue::new(workers, envs);
                each.push_jobs(Op::Step, Some(src), &jobs, takes_input, but_last);
                let chunks = |q: &WorkQueue| -> Vec<Vec<(usize, Option<Option<usize>>)>> {
                    q.queues
                        .iter()
                        .flat_map(|queue| {
                            lock(queue)
                                .iter()
                                .map(|c| {
                                    let (front, back) = unspan(c.span.load(Ordering::Relaxed));
                                    (front as usize..back as usize)
                                        .map(|i| {
                                            let job = c.job(i);
                                            (job.env, job.input.map(|(_, row)| row))
                                        })
                                        .collect()
                                })
                                .collect::<Vec<_>>()
                        })
                        .collect()
                };
                let what = format!("{case}: {workers} workers, {envs} envs, {but_last}");
                // Without the last queue (of more than one) while it rests.
                let queues = if but_last && workers > 1 {
                    workers - 1
                } else {
                    workers
                };
                assert_eq!(chunks(&every), chunks(&each), "{what}");
                assert_eq!(chunks(&every).len(), queues.min(envs), "{what}");
                if queues < workers {
                    assert!(lock(&every.queues[workers - 1]).is_empty(), "{what}");
                }
                let blocks = every
                    .queues
                    .iter()
                    .flat_map(|queue| {
                        lock(queue)
                            .iter()
                            .map(|c| matches!(c.jobs, Jobs::Block { .. }))
                            .collect::<Vec<_>>()
                    })
                    .collect::<Vec<_>>();
                // A block of one env is always uniform.
                let uniform = case != "every other one does" || envs / queues.min(envs) == 1;
                if uniform {
                    assert!(blocks.iter().all(|&b| b), "{what}: {blocks:?}");
                } else {
                    assert!(blocks.iter().any(|&b| !b), "{what}: {blocks:?}");
                }
            }
        }
    }

    /// A chunk of consecutive envs from consecutive rows, all taking an
    /// input or none, is a block; any other run of jobs a list; either
    /// gives each job its env, row and input.
    #[test]
    fn a_run_of_consecutive_envs_and_rows_is_a_block() {
        let src = Arc::new(TensorDict::new(&[8]));
        let jobs_of = |chunk: &Chunk| {
            (0..unspan(chunk.span.load(Ordering::Relaxed)).1 as usize)
                .map(|i| {
                    let job = chunk.job(i);
                    (job.env, job.input.map(|(_, row)| row))
                })
                .collect::<Vec<_>>()
        };
        // The jobs, which envs take an input, whether a block.
        type Case = (&'static [(usize, Option<usize>)], fn(usize) -> bool, bool);
        let cases: [Case; 6] = [
            (&[(3, Some(0)), (4, Some(1)), (5, Some(2))], |_| true, true),
            (&[(3, Some(5)), (4, Some(6))], |_| false, true),
            (&[(3, Some(0)), (5, Some(1))], |_| true, false),
            (&[(3, Some(0)), (4, Some(2))], |_| true, false),
            (&[(3, Some(0)), (4, Some(1))], |env| env == 3, false),
            (&[(3, None), (4, None)], |_| true, false),
        ];
        for (jobs, takes_input, block) in cases {
            let chunk = Chunk::of_jobs(Op::Step, Some(Arc::clone(&src)), jobs, takes_input);
            assert_eq!(matches!(chunk.jobs, Jobs::Block { .. }), block, "{jobs:?}");
            let expected: Vec<_> = jobs
                .iter()
                .map(|&(env, row)| (env, takes_input(env).then_some(row)))
                .collect();
            assert_eq!(jobs_of(&chunk), expected, "{jobs:?}");
        }
    }

    /// Claims from both ends meet without a job claimed twice.
    #[test]
    fn claims_from_both_ends_meet() {
        let chunk = Chunk::new(Op::Reset, None, (0..5).map(|e| (e, None, false)));
        assert_eq!(chunk.claim(1, false), Some(0..1));
        assert_eq!(chunk.claim(3, true), Some(2..5));
        assert_eq!(chunk.claim(8, false), Some(1..2));
        assert!(chunk.is_spent());
        assert_eq!(chunk.claim(1, true), None);
    }
}
