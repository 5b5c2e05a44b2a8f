//! Waiting for results: a batch receive's `min_get` / `max_get` /
//! deadline loop and a per-env receive's, each marking what it takes.

use std::time::{Duration, Instant};

use pool_core::Op;

use super::book::{EnvState, Taken, TakenEnv};
use super::AsyncEnvPool;
use crate::{interrupt, PoolError, Recv};

impl AsyncEnvPool {
    /// Waits for the results of a batch receive and marks them taken.
    pub(super) fn collect(&self, op: Op, recv: Recv) -> Result<Taken, PoolError> {
        let start = Instant::now();
        if recv.min_get < 1 {
            return Err(PoolError::MinGet {
                min_get: recv.min_get,
            });
        }
        if let Some(max_get) = recv.max_get {
            if max_get < recv.min_get {
                return Err(PoolError::MaxGet {
                    min_get: recv.min_get,
                    max_get,
                });
            }
        }
        // A timeout too long to represent is no deadline.
        let deadline = recv.timeout.and_then(|t| start.checked_add(t));
        let limit = recv.max_get.unwrap_or(usize::MAX);
        let backend = self.backend();
        let batch_state = EnvState::InFlight { op, per_env: false };
        let mut ready = Vec::new();
        // Whether the receive has helped yet (see below).
        let mut helped = false;
        loop {
            // Read before the book: a result or a wake-up after this point
            // ends the wait below.
            let ticket = backend.listen();
            let mut book = self.book();
            if book.shut_down || backend.is_shut_down() {
                return Err(PoolError::ShutDown);
            }
            if ready.capacity() == 0 {
                ready = std::mem::take(&mut book.spare.envs);
            }
            // Checked on every pass: another thread may have taken results
            // (per-env receives) since the call began.
            let in_flight = book.batch_in_flight[op as usize];
            if recv.min_get > in_flight {
                return Err(PoolError::NotEnoughInFlight {
                    op: op.name(),
                    min_get: recv.min_get,
                    in_flight,
                });
            }
            // Every env not idle is one whose result this receive must
            // have (a synchronous step, or a receive of all in flight): it
            // runs queued envs itself rather than wait for a worker, since
            // it cannot return before they are done anyway. (Envs another
            // thread sends meanwhile may be among those it runs: chunks
            // are small, of quick envs, and it looks again after as many
            // as it waits for.)
            let may_help = backend.helps()
                && deadline.is_none()
                && recv.min_get == in_flight
                && book.busy == in_flight;
            if may_help && !helped {
                // Before its first look at the envs (a load each): they
                // were most likely just sent.
                helped = true;
                drop(book);
                self.help(in_flight);
                continue;
            }
            ready.clear();
            ready.reserve(in_flight);
            // How many are done; `ready` lists them only when they are
            // enough or one failed (threads count them first).
            let (found, any_failed) = if in_flight == book.num_envs() {
                // Every env is in flight for this receive (a send to all):
                // no state to look at.
                backend.ready_in(0..in_flight, recv.min_get, &mut ready)
            } else {
                let candidates = (0..book.num_envs()).filter(|&env| book.state(env) == batch_state);
                let failed = backend.ready_among(candidates, &mut ready);
                (ready.len(), failed)
            };
            // A failed env is reported first, alone; the other results stay.
            if let Some(failed) = any_failed.then(|| backend.first_failed(&ready)).flatten() {
                book.take_env(failed, op, false);
                drop(book);
                let result = backend.peek(failed, |_| ());
                // Idle again, and other receivers (which may have counted on
                // this result) woken.
                self.release(&[failed]);
                return Err(match result {
                    Err(err) => err,
                    Ok(()) => PoolError::NotInFlight {
                        op: op.name(),
                        env: failed,
                    },
                });
            }
            let past_deadline = deadline.is_some_and(|d| Instant::now() >= d);
            let enough = found >= recv.min_get;
            let no_more_coming = found == in_flight;
            if enough && (deadline.is_none() || found >= limit || past_deadline || no_more_coming) {
                if ready.len() > limit {
                    // The oldest results first (as a completion queue gives
                    // them), then in env order.
                    let mut ages = std::mem::take(&mut book.spare.ages);
                    ages.clear();
                    backend.published_of(&ready, &mut ages);
                    keep_oldest(&mut ready, limit, &ages);
                    book.spare.ages = ages;
                }
                return Ok(book.take(op, ready));
            }
            if past_deadline {
                return Err(PoolError::Timeout {
                    op: op.name(),
                    timeout: recv.timeout.unwrap_or(Duration::ZERO),
                    ready: found,
                    min_get: recv.min_get,
                });
            }
            drop(book);
            if may_help && self.help(in_flight - found) > 0 {
                continue;
            }
            // At least this many more results must be published before the
            // batch can be complete.
            let needed = if enough { 1 } else { recv.min_get - found };
            if interrupt::requested() {
                return Err(PoolError::Interrupted);
            }
            backend.wait(ticket, needed, interrupt::wake_by(deadline), start);
        }
    }

    /// Runs queued envs in the calling thread ([`Dispatch::help`]) until it
    /// has run `waiting` (the results its receive still waits for) or none
    /// is queued; returns how many it ran. It looks at the results again
    /// after as many as it waits for, not after each chunk: a look at every
    /// env costs more than a chunk of quick envs. (Bounded: envs another
    /// thread sends meanwhile count too.)
    ///
    /// [`Dispatch::help`]: crate::dispatch::Dispatch::help
    fn help(&self, waiting: usize) -> usize {
        let backend = self.backend();
        let mut ran = 0;
        loop {
            match backend.help() {
                0 => return ran,
                more => ran += more,
            }
            if ran >= waiting {
                return ran;
            }
        }
    }

    /// Waits for env `env`'s result of `op` and marks it taken.
    pub(super) fn collect_env(
        &self,
        op: Op,
        env: usize,
        timeout: Option<Duration>,
    ) -> Result<TakenEnv, PoolError> {
        let start = Instant::now();
        let deadline = timeout.and_then(|t| start.checked_add(t));
        if env >= self.num_envs() {
            return Err(PoolError::EnvOutOfRange {
                env,
                num_envs: self.num_envs(),
            });
        }
        let backend = self.backend();
        loop {
            let ticket = backend.listen();
            let mut book = self.book();
            if book.shut_down || backend.is_shut_down() {
                return Err(PoolError::ShutDown);
            }
            let per_env = match book.state(env) {
                EnvState::InFlight {
                    op: sent_op,
                    per_env,
                } if sent_op == op => per_env,
                _ => return Err(PoolError::NotInFlight { op: op.name(), env }),
            };
            if backend.is_done(env) {
                return Ok(book.take_env(env, op, per_env));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(PoolError::EnvTimeout {
                    op: op.name(),
                    env,
                    timeout: timeout.unwrap_or(Duration::ZERO),
                });
            }
            drop(book);
            // No helping here: a chunk of other envs run on this thread
            // could keep it long after its own env is done.
            if interrupt::requested() {
                return Err(PoolError::Interrupted);
            }
            backend.wait(ticket, 1, interrupt::wake_by(deadline), start);
        }
    }
}

/// Keeps the `limit` (at least one) of `ready` (envs in ascending order)
/// published first (`ages[j]`: when `ready[j]` was, a generation, smaller
/// is older), the lower env first among those published together, in
/// ascending order: what a stable sort by generation, cut to `limit` and
/// sorted by env again keeps, in two passes.
fn keep_oldest(ready: &mut Vec<usize>, limit: usize, ages: &[u64]) {
    let limit = limit.max(1);
    if ready.len() <= limit {
        return;
    }
    // The generation of the last one kept, and how many older ones there
    // are: those are all kept, then those of that generation in env order
    // until `limit`.
    let (cut, older) = cut_off(ages, limit);
    let mut ties = limit - older;
    // In place: each env kept moves down to the end of those kept so far.
    let mut kept = 0;
    for (j, &age) in ages.iter().enumerate().take(ready.len()) {
        let tie = age == cut && ties > 0;
        ties -= usize::from(tie);
        if age < cut || tie {
            ready[kept] = ready[j];
            kept += 1;
        }
    }
    ready.truncate(kept);
}

/// The `limit`-th smallest of `ages` (`limit` at most their number), and
/// how many are smaller. A run of results shares one generation, so there
/// are usually few: they are counted in a small table in one pass; with
/// many, one selection.
fn cut_off(ages: &[u64], limit: usize) -> (u64, usize) {
    const FEW: usize = 8;
    // (generation, how many), the first `len` in use.
    let mut table = [(0u64, 0usize); FEW];
    let mut len = 0;
    'ages: for &age in ages {
        for (seen, count) in &mut table[..len] {
            if *seen == age {
                *count += 1;
                continue 'ages;
            }
        }
        if len == FEW {
            let mut sorted = ages.to_vec();
            let cut = *sorted.select_nth_unstable(limit - 1).1;
            return (cut, ages.iter().filter(|&&age| age < cut).count());
        }
        table[len] = (age, 1);
        len += 1;
    }
    let table = &mut table[..len];
    table.sort_unstable();
    let mut older = 0;
    for &(age, count) in &*table {
        if older + count >= limit {
            return (age, older);
        }
        older += count;
    }
    unreachable!("limit ({limit}) at most the {} ages", ages.len())
}

#[cfg(test)]
mod tests {
    use super::keep_oldest;
    use proptest::prelude::*;

    proptest! {
        /// The oldest results are kept as a stable sort by age would keep
        /// them, in env order: of few ages (counted in the table) or many
        /// (selected).
        #[test]
        fn the_oldest_are_kept_as_a_stable_sort_keeps_them(
            ages in prop_oneof![
                proptest::collection::vec(0u64..6, 1..80),
                proptest::collection::vec(0u64..1000, 1..80),
            ],
            limit in 1usize..90,
        ) {
            let envs: Vec<usize> = (0..ages.len()).map(|env| env * 3).collect();
            let age = |env: usize| ages[env / 3];
            let mut expected = envs.clone();
            expected.sort_by_key(|&env| age(env));
            expected.truncate(limit);
            expected.sort_unstable();
            let mut kept = envs;
            keep_oldest(&mut kept, limit, &ages);
            prop_assert_eq!(kept, expected);
        }
    }
}
