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
///
/// While every env is in one state (all idle, or all sent together by one
/// send to every env, env `j` from row `j`, and then taken together, as a
/// synchronous step is), that state is kept once, in [`Book::whole`], and
/// the per-env lists are stale: a synchronous step costs the book nothing
/// per env. Anything that looks at one env first writes the lists out
/// ([`Book::materialize`]).
#[derive(Debug)]
pub(super) struct Book {
    /// Per env: its state (stale while [`Book::whole`] is set: read
    /// [`Book::state`]).
    states: Vec<EnvState>,
    /// Per env not idle: where its input came from (stale while
    /// [`Book::whole`] is set).
    origins: Vec<Origin>,
    /// When every env is in one state: that state, and for envs in flight
    /// or being taken, the send they all came from (env `j` from row `j`).
    whole: Option<(EnvState, usize)>,
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
    /// When each ready env was published, for a receive of the oldest.
    pub(super) ages: Vec<u64>,
}

impl Book {
    pub(super) fn new(n: usize) -> Book {
        Book {
            states: vec![EnvState::Idle; n],
            origins: vec![Origin::default(); n],
            whole: Some((EnvState::Idle, 0)),
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
            .filter(|&e| self.state(e) != EnvState::Idle)
            .collect()
    }

    /// The number of envs.
    pub(super) fn num_envs(&self) -> usize {
        self.states.len()
    }

    /// Env `env`'s state.
    pub(super) fn state(&self, env: usize) -> EnvState {
        match self.whole {
            Some((state, _)) => state,
            None => self.states[env],
        }
    }

    /// Writes the state kept once for every env ([`Book::whole`]) out into
    /// the per-env lists, before something looks at or changes one env.
    pub(super) fn materialize(&mut self) {
        let Some((state, send)) = self.whole.take() else {
            return;
        };
        self.states.fill(state);
        if state != EnvState::Idle {
            for (env, origin) in self.origins.iter_mut().enumerate() {
                *origin = Origin {
                    send,
                    row: Some(env),
                };
            }
        }
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
        self.send_jobs(op, per_env, jobs, td, false);
    }

    /// [`Book::send`] of the jobs of a send to every env (`jobs`: env `j`
    /// from row `j`): kept once when no env is busy.
    pub(super) fn send_all(
        &mut self,
        op: Op,
        per_env: bool,
        jobs: &[Job],
        td: Option<Arc<TensorDict>>,
    ) {
        debug_assert!(jobs
            .iter()
            .enumerate()
            .all(|(j, &(env, row))| env == j && row == Some(j)));
        self.send_jobs(op, per_env, jobs, td, jobs.len() == self.states.len());
    }

    /// [`Book::send`]; with `all` (`jobs` are env `j` from row `j` for every
    /// env), kept once if no env is busy.
    fn send_jobs(
        &mut self,
        op: Op,
        per_env: bool,
        jobs: &[Job],
        td: Option<Arc<TensorDict>>,
        all: bool,
    ) {
        if jobs.is_empty() {
            return;
        }
        // (With no env busy, every env is idle, whether kept once or not.)
        let whole = all && self.busy == 0;
        if !whole {
            self.materialize();
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
        if whole {
            self.whole = Some((state, send));
        } else {
            for &(env, row) in jobs {
                debug_assert_eq!(self.states[env], EnvState::Idle);
                self.states[env] = state;
                self.origins[env] = Origin { send, row };
            }
        }
        self.busy += jobs.len();
        if !per_env {
            self.batch_in_flight[op as usize] += jobs.len();
        }
    }

    /// Marks the envs of a failed [`Book::send`] idle again.
    pub(super) fn unsend(&mut self, op: Op, per_env: bool, jobs: &[Job]) {
        self.materialize();
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
            in_order: false,
            every: false,
        };
        if let Some((
            EnvState::InFlight {
                op: sent,
                per_env: false,
            },
            send,
        )) = self.whole
        {
            if sent == op && taken.envs.len() == self.states.len() {
                // Every env, of one send, env `j` from row `j`.
                self.whole = Some((EnvState::Taking, send));
                // Env `j` from row `j`: no list of rows.
                taken.every = true;
                taken.sends.push(send);
                taken.tds.push(self.sends[send].td.clone());
                taken.in_order = true;
                self.batch_in_flight[op as usize] -= taken.envs.len();
                return taken;
            }
        }
        self.materialize();
        // The previous env's send and its index in `taken.sends`: the envs
        // of one send are usually taken together.
        let mut last = None;
        // Whether env `j` came from row `j` of the first send, every one so
        // far (no branch a row).
        let mut rows_in_order = true;
        let Taken {
            envs,
            rows,
            sends,
            tds,
            ..
        } = &mut taken;
        rows.extend(envs.iter().enumerate().map(|(j, &env)| {
            debug_assert_eq!(self.states[env], EnvState::InFlight { op, per_env: false });
            self.states[env] = EnvState::Taking;
            let Origin { send, row } = self.origins[env];
            let at = match last {
                Some((last_send, at)) if last_send == send => at,
                _ => match sends.iter().position(|&s| s == send) {
                    Some(at) => at,
                    None => {
                        sends.push(send);
                        tds.push(self.sends[send].td.clone());
                        sends.len() - 1
                    }
                },
            };
            last = Some((send, at));
            rows_in_order &= row == Some(j);
            (at, row)
        }));
        taken.in_order = taken.sends.len() == 1 && rows_in_order;
        self.batch_in_flight[op as usize] -= taken.envs.len();
        taken
    }

    /// Marks env `env` (in flight for `op`, sent with a per-env target or
    /// not) taken.
    pub(super) fn take_env(&mut self, env: usize, op: Op, per_env: bool) -> TakenEnv {
        self.materialize();
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
        if let Some((EnvState::Taking, send)) = self.whole {
            if envs.len() == self.states.len() && !per_env {
                self.whole = Some((EnvState::InFlight { op, per_env }, send));
                self.batch_in_flight[op as usize] += envs.len();
                return;
            }
        }
        self.materialize();
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
        if let Some((EnvState::Taking, send)) = self.whole {
            if envs.len() == self.states.len() {
                self.busy -= envs.len();
                self.whole = Some((EnvState::Idle, 0));
                self.release_of(send, envs.len());
                return;
            }
        }
        self.materialize();
        self.busy -= envs.len();
        // A run of envs of one send (as they usually are) is counted off it
        // at once.
        let mut run: Option<(usize, usize)> = None;
        for env in envs {
            debug_assert_eq!(self.states[env], EnvState::Taking);
            self.states[env] = EnvState::Idle;
            let send = self.origins[env].send;
            run = match run {
                Some((of, n)) if of == send => Some((of, n + 1)),
                other => {
                    if let Some((of, n)) = other {
                        self.release_of(of, n);
                    }
                    Some((send, 1))
                }
            };
        }
        if let Some((of, n)) = run {
            self.release_of(of, n);
        }
    }

    /// Counts `n` of send `send`'s envs released; drops its tensordict
    /// once none of its envs is left.
    fn release_of(&mut self, send: usize, n: usize) {
        let sent = &mut self.sends[send];
        sent.envs -= n;
        if sent.envs == 0 {
            sent.td = None;
            self.free.push(send);
        }
    }
}

/// A batch receive's envs, taken from the backend (their state `Taking`).
#[derive(Debug)]
pub(super) struct Taken {
    pub(super) envs: Vec<usize>,
    /// Per env: its send's tensordict (an index into `tds`) and its row
    /// (read with [`Taken::origin_at`]; empty when `every`).
    pub(super) rows: Vec<(usize, Option<usize>)>,
    /// The sends of the envs (indices into [`Book::sends`]), each once.
    pub(super) sends: SmallVec<[usize; 2]>,
    /// Their tensordicts, one clone per send.
    pub(super) tds: SmallVec<[Option<Arc<TensorDict>>; 2]>,
    /// Whether the envs are of one send, env `j` from row `j` of it.
    pub(super) in_order: bool,
    /// Whether they are every env of one send to all, env `j` from row `j`
    /// (`in_order` too): then `rows` is empty, the rows implied.
    pub(super) every: bool,
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
        let (at, row) = self.origin_at(j);
        (self.tds[at].as_deref(), row)
    }

    /// The `j`-th env's send (an index into `tds`) and row.
    pub(super) fn origin_at(&self, j: usize) -> (usize, Option<usize>) {
        if self.every {
            (0, Some(j))
        } else {
            self.rows[j]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each taken env's send and row.
    fn rows_of(taken: &Taken) -> Vec<(usize, Option<usize>)> {
        (0..taken.envs.len()).map(|j| taken.origin_at(j)).collect()
    }

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
        assert_eq!(rows_of(&taken), vec![(0, Some(0)), (0, Some(1))]);
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

    /// A send to every env in row order is kept once: taken and released
    /// whole, or written out per env as soon as one env is looked at alone,
    /// with the same states, rows and counts as a send kept per env.
    #[test]
    fn a_send_to_every_env_is_kept_once_until_an_env_is_looked_at_alone() {
        let all: Vec<Job> = (0..3).map(|env| (env, Some(env))).collect();
        let mut book = Book::new(3);
        let first = td(3);
        book.send_all(Op::Step, false, &all, first.clone());
        assert!(book.whole.is_some());
        assert_eq!(book.busy_envs(), vec![0, 1, 2]);
        assert_eq!(
            book.state(1),
            EnvState::InFlight {
                op: Op::Step,
                per_env: false
            }
        );
        // Taken whole, put back, taken again, released whole.
        let taken = book.take(Op::Step, vec![0, 1, 2]);
        assert!(taken.in_order);
        assert_eq!(
            rows_of(&taken),
            vec![(0, Some(0)), (0, Some(1)), (0, Some(2))]
        );
        assert_eq!(book.batch_in_flight, [0, 0, 0]);
        drop(taken);
        book.put_back(Op::Step, &[0, 1, 2], false);
        assert_eq!(book.batch_in_flight, [0, 3, 0]);
        let taken = book.take(Op::Step, vec![0, 1, 2]);
        drop(taken);
        book.release([0, 1, 2].into_iter());
        assert_eq!(book.busy, 0);
        assert_eq!(book.whole, Some((EnvState::Idle, 0)));
        assert_eq!(
            Arc::strong_count(first.as_ref().unwrap()),
            1,
            "the send is freed"
        );

        // One env taken alone: every env's state and row written out.
        book.send_all(Op::StepAndMaybeReset, false, &all, td(3));
        let one = book.take_env(2, Op::StepAndMaybeReset, false);
        assert!(book.whole.is_none());
        assert_eq!(one.row, Some(2));
        assert_eq!(book.state(2), EnvState::Taking);
        assert_eq!(
            book.state(0),
            EnvState::InFlight {
                op: Op::StepAndMaybeReset,
                per_env: false
            }
        );
        assert_eq!(book.batch_in_flight, [0, 0, 2]);
        book.release([2].into_iter());
        let rest = book.take(Op::StepAndMaybeReset, vec![0, 1]);
        assert_eq!(rows_of(&rest), vec![(0, Some(0)), (0, Some(1))]);
        assert!(rest.in_order);
        drop((one, rest));
        book.release([0, 1].into_iter());
        assert_eq!(book.busy, 0);
        assert!(book.sends.iter().all(|s| s.td.is_none()));

        // With no env busy, the next send to every env is kept once again;
        // a send out of row order, or of every env through `send` (a
        // target other than every env), is kept per env.
        book.send_all(Op::Reset, false, &all, None);
        assert!(book.whole.is_some());
        book.unsend(Op::Reset, false, &all);
        assert_eq!(book.busy, 0);
        book.send(
            Op::Step,
            false,
            &[(0, Some(1)), (1, Some(0)), (2, Some(2))],
            td(3),
        );
        assert!(book.whole.is_none());
        let taken = book.take(Op::Step, vec![0, 1, 2]);
        assert!(!taken.in_order);
        assert_eq!(
            rows_of(&taken),
            vec![(0, Some(1)), (0, Some(0)), (0, Some(2))]
        );
        drop(taken);
        book.release([0, 1, 2].into_iter());
        book.send(Op::Step, false, &all, td(3));
        assert!(book.whole.is_none(), "kept per env");
        assert!(book.take(Op::Step, vec![0, 1, 2]).in_order);
    }
}
