//! The book: the facade's record of each env's state (idle, in flight for
//! an op, being taken) and of the tensordict each send's results take their
//! root from, under one lock.

use std::sync::Arc;

use pool_core::Op;
use smallvec::SmallVec;
use tensordict::TensorDict;

/// Where an env is in its send / receive cycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum EnvState {
    /// Nothing in flight: a send may address it.
    Idle,
    /// Sent; its result is not yet received. `per_env` results are taken by
    /// per-env receives only.
    InFlight { op: Op, per_env: bool },
    /// Its result is being taken by a receive.
    Taking,
}

/// The tensordict of one send, the root of its envs' step results, kept
/// while any of its envs is not yet released: one shared entry per send,
/// not a clone per env.
#[derive(Debug, Default)]
pub(super) struct SentTd {
    pub(super) td: Option<Arc<TensorDict>>,
    /// Its envs not yet released; zero: the entry is free (in
    /// [`Book::free`]).
    pub(super) envs: usize,
}

/// Where an env's input came from: its send (an index into
/// [`Book::sends`]) and its row there (`None`: the whole tensordict).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Origin {
    pub(super) send: usize,
    pub(super) row: Option<usize>,
}

/// An env a send addresses and its row of the sent tensordict (`None`:
/// the whole tensordict).
pub(super) type Job = (usize, Option<usize>);

/// The facade's bookkeeping of every env, under one lock.
#[derive(Debug)]
pub(super) struct Book {
    pub(super) states: Vec<EnvState>,
    /// Per env not idle: where its input came from.
    pub(super) origins: Vec<Origin>,
    /// The sends that have envs not yet released; free entries are reused.
    pub(super) sends: Vec<SentTd>,
    /// The free entries of `sends`.
    pub(super) free: Vec<usize>,
    /// The number of envs not idle.
    pub(super) busy: usize,
    /// Per op: the number of envs in flight for a batch receive (not sent
    /// with a per-env target).
    pub(super) batch_in_flight: [usize; 3],
    /// The buffers of the last batch receive, for the next one.
    pub(super) spare: Spare,
    pub(super) shut_down: bool,
}

/// A batch receive's lists, kept for the next receive so that a steady
/// collector allocates none.
#[derive(Debug, Default)]
pub(super) struct Spare {
    pub(super) envs: Vec<usize>,
    pub(super) rows: Vec<(usize, Option<usize>)>,
}

impl Book {
    pub(super) fn new(n: usize) -> Book {
        Book {
            states: vec![EnvState::Idle; n],
            origins: vec![Origin::default(); n],
            sends: Vec::new(),
            free: Vec::new(),
            busy: 0,
            batch_in_flight: [0; 3],
            spare: Spare::default(),
            shut_down: false,
        }
    }

    /// The envs not idle, in order.
    pub(super) fn busy_envs(&self) -> Vec<usize> {
        (0..self.states.len())
            .filter(|&e| self.states[e] != EnvState::Idle)
            .collect()
    }

    /// Marks the envs of `jobs` (idle) in flight for `op`, their inputs
    /// from `td`.
    pub(super) fn send(
        &mut self,
        op: Op,
        per_env: bool,
        jobs: &[Job],
        td: Option<Arc<TensorDict>>,
    ) {
        if jobs.is_empty() {
            return;
        }
        let entry = SentTd {
            td,
            envs: jobs.len(),
        };
        let send = match self.free.pop() {
            Some(free) => {
                self.sends[free] = entry;
                free
            }
            None => {
                self.sends.push(entry);
                self.sends.len() - 1
            }
        };
        let state = EnvState::InFlight { op, per_env };
        for &(env, row) in jobs {
            debug_assert_eq!(self.states[env], EnvState::Idle);
            self.states[env] = state;
            self.origins[env] = Origin { send, row };
        }
        self.busy += jobs.len();
        if !per_env {
            self.batch_in_flight[op as usize] += jobs.len();
        }
    }

    /// Marks the envs of a failed [`Book::send`] idle again.
    pub(super) fn unsend(&mut self, op: Op, per_env: bool, jobs: &[Job]) {
        if !per_env {
            self.batch_in_flight[op as usize] -= jobs.len();
        }
        for &(env, _) in jobs {
            self.states[env] = EnvState::Taking;
        }
        self.release(jobs.iter().map(|&(env, _)| env));
    }

    /// Marks `envs` (in flight for a batch receive of `op`) taken, and
    /// gathers their inputs' origins.
    pub(super) fn take(&mut self, op: Op, envs: Vec<usize>) -> Taken {
        let mut rows = std::mem::take(&mut self.spare.rows);
        rows.clear();
        rows.reserve(envs.len());
        let mut taken = Taken {
            rows,
            sends: SmallVec::new(),
            tds: SmallVec::new(),
            envs,
        };
        // The previous env's send and its index in `taken.sends`: the envs
        // of one send are usually taken together.
        let mut last = None;
        for &env in &taken.envs {
            debug_assert_eq!(self.states[env], EnvState::InFlight { op, per_env: false });
            self.states[env] = EnvState::Taking;
            let Origin { send, row } = self.origins[env];
            let at = match last {
                Some((last_send, at)) if last_send == send => at,
                _ => match taken.sends.iter().position(|&s| s == send) {
                    Some(at) => at,
                    None => {
                        taken.sends.push(send);
                        taken.tds.push(self.sends[send].td.clone());
                        taken.sends.len() - 1
                    }
                },
            };
            last = Some((send, at));
            taken.rows.push((at, row));
        }
        self.batch_in_flight[op as usize] -= taken.envs.len();
        taken
    }

    /// Marks env `env` (in flight for `op`, sent with a per-env target or
    /// not) taken.
    pub(super) fn take_env(&mut self, env: usize, op: Op, per_env: bool) -> TakenEnv {
        debug_assert_eq!(self.states[env], EnvState::InFlight { op, per_env });
        self.states[env] = EnvState::Taking;
        if !per_env {
            self.batch_in_flight[op as usize] -= 1;
        }
        let Origin { send, row } = self.origins[env];
        TakenEnv {
            td: self.sends[send].td.clone(),
            row,
            per_env,
        }
    }

    /// Returns taken envs to in flight for `op`.
    pub(super) fn put_back(&mut self, op: Op, envs: &[usize], per_env: bool) {
        for &env in envs {
            debug_assert_eq!(self.states[env], EnvState::Taking);
            self.states[env] = EnvState::InFlight { op, per_env };
        }
        if !per_env {
            self.batch_in_flight[op as usize] += envs.len();
        }
    }

    /// Marks taken envs idle, and drops a send's tensordict once none of
    /// its envs is left.
    pub(super) fn release(&mut self, envs: impl ExactSizeIterator<Item = usize>) {
        self.busy -= envs.len();
        for env in envs {
            debug_assert_eq!(self.states[env], EnvState::Taking);
            self.states[env] = EnvState::Idle;
            let send = self.origins[env].send;
            let sent = &mut self.sends[send];
            sent.envs -= 1;
            if sent.envs == 0 {
                sent.td = None;
                self.free.push(send);
            }
        }
    }
}

/// A batch receive's envs, taken from the backend (their state `Taking`).
#[derive(Debug)]
pub(super) struct Taken {
    pub(super) envs: Vec<usize>,
    /// Per env: its send's tensordict (an index into `tds`) and its row.
    pub(super) rows: Vec<(usize, Option<usize>)>,
    /// The sends of the envs (indices into [`Book::sends`]), each once.
    pub(super) sends: SmallVec<[usize; 2]>,
    /// Their tensordicts, one clone per send.
    pub(super) tds: SmallVec<[Option<Arc<TensorDict>>; 2]>,
}

/// A per-env receive's env, taken (its state `Taking`).
#[derive(Debug)]
pub(super) struct TakenEnv {
    /// Its send's tensordict and its row there.
    pub(super) td: Option<Arc<TensorDict>>,
    pub(super) row: Option<usize>,
    /// Whether it was sent with a per-env target.
    pub(super) per_env: bool,
}

impl Taken {
    /// The `j`-th env's sent tensordict and row.
    pub(super) fn origin(&self, j: usize) -> (Option<&TensorDict>, Option<usize>) {
        let (at, row) = self.rows[j];
        (self.tds[at].as_deref(), row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn td(n: usize) -> Option<Arc<TensorDict>> {
        Some(Arc::new(TensorDict::new(&[n])))
    }

    #[test]
    fn the_book_counts_envs_and_frees_a_send_with_its_last_env() {
        let mut book = Book::new(4);
        let first = td(2);
        book.send(
            Op::Step,
            false,
            &[(1, Some(0)), (3, Some(1))],
            first.clone(),
        );
        book.send(Op::Step, true, &[(0, None)], td(1));
        assert_eq!(book.busy, 3);
        assert_eq!(book.batch_in_flight, [0, 2, 0]);
        assert_eq!(book.busy_envs(), vec![0, 1, 3]);

        // Two envs of one send: one tensordict, rows in order.
        let taken = book.take(Op::Step, vec![1, 3]);
        assert_eq!(taken.tds.len(), 1);
        assert_eq!(taken.rows, vec![(0, Some(0)), (0, Some(1))]);
        assert_eq!(book.batch_in_flight, [0, 0, 0]);
        book.put_back(Op::Step, &[1, 3], false);
        assert_eq!(book.batch_in_flight, [0, 2, 0]);

        let one = book.take_env(3, Op::Step, false);
        assert_eq!(one.row, Some(1));
        book.release([3].into_iter());
        // Env 1 still holds the send: its tensordict stays.
        assert_eq!(Arc::strong_count(first.as_ref().unwrap()), 4);
        drop((taken, one));
        book.take_env(1, Op::Step, false);
        book.release([1].into_iter());
        assert_eq!(Arc::strong_count(first.as_ref().unwrap()), 1);
        assert_eq!(book.busy, 1);
        assert_eq!(book.batch_in_flight, [0, 0, 0]);

        // The freed entry is reused by the next send.
        let sends = book.sends.len();
        book.send(Op::Reset, false, &[(2, Some(0))], None);
        assert_eq!(book.sends.len(), sends);
        book.unsend(Op::Reset, false, &[(2, Some(0))]);
        assert_eq!(book.busy, 1);
        assert_eq!(book.batch_in_flight, [0, 0, 0]);
    }
}
