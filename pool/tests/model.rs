//! A model-based property test of the pool's bookkeeping. Proptest draws
//! random sequences of calls against a pool of four CountingEnvs: async
//! sends of every operation to random targets (all envs, one env, lists
//! with duplicates and indices out of range, `"env_index"` entries), batch
//! receives with random `min_get` / `max_get` / timeouts (polls, a few
//! milliseconds, generous deadlines, none), per-env receives, and the
//! synchronous calls. A model of each env (idle, or in flight for an
//! operation from a batch or a per-env send, with the counter values its
//! result must carry) says after every call what the pool must have done:
//! which calls fail and with which `PoolError` (exact envs and numbers),
//! which results come back (once each, sorted, with their env index, the
//! action sent and the counter), and which envs are still in flight
//! (`pool.in_flight()` equals the model's set).
//!
//! Where the outcome depends on timing (how many results a poll or a short
//! timeout finds), the model accepts any outcome the rules allow: a batch of
//! `min_get` up to `max_get` of the envs in flight, or a timeout with fewer
//! than `min_get` ready that takes nothing.
//!
//! Runs on the threading backend (one or two worker threads) and on the
//! process backend with each exchange: one pool per case, every stack mode.
//! `PROPTEST_CASES` overrides the number of cases of each backend.

mod common;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use pool::envs::Kwargs;
use pool::tensordict::{NonTensor, StackedTensorDict, Tensor, TensorDict};
use pool::{AsyncEnvPool, Backend, ExchangeMode, PoolError, ProcOptions, Recv, StackMode, Target};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use common::{action, actions, env_index, flag_at, int_at, long_at, row_env, rows};

/// The entry point of every worker of this binary; in the parent it only
/// registers the test envs.
#[test]
fn rlpool_worker() {
    common::test_envs::register();
    pool::init();
}

/// Envs in the pool.
const N: usize = 4;

/// Each env's start value: far apart, so that a counter names its env.
const STARTS: [i32; N] = [0, 1000, 2000, 3000];

/// Each env's `max_steps`: envs 1 and 3 are done after a few increments
/// (so that step-and-maybe-reset resets them), envs 0 and 2 never.
const MAX_STEPS: [i32; N] = [1 << 30, 1004, 1 << 30, 3006];

/// Env indices drawn for targets and per-env receives: `0..N` mostly, and
/// a few out of range.
const INDEX_END: usize = N + 2;

/// A deadline that results which are coming always meet.
const GENEROUS: Duration = Duration::from_secs(20);

/// How long one case may run before it is declared deadlocked: longer
/// than a process pool's start deadline (60 s), so that a start that
/// fails on an overloaded machine reports its own error.
const CASE_DEADLINE: Duration = Duration::from_secs(90);

/// How often each outcome was seen, by name.
type Tally = BTreeMap<String, usize>;

/// The variant of an error, for the tally.
fn variant(err: &PoolError) -> String {
    let text = format!("{err:?}");
    let end = text.find([' ', '{', '(']).unwrap_or(text.len());
    text[..end].to_owned()
}

/// The three operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Reset,
    Step,
    StepAndMaybeReset,
}

impl Kind {
    /// The name the pool's errors use.
    fn name(self) -> &'static str {
        match self {
            Kind::Reset => "reset",
            Kind::Step => "step",
            Kind::StepAndMaybeReset => "step_and_maybe_reset",
        }
    }
}

/// The target of a send, as drawn.
#[derive(Clone, Debug)]
enum Aim {
    All,
    /// One env; with `leading`, its tensordict has batch size `[1]`, else `[]`.
    Env {
        env: usize,
        leading: bool,
    },
    /// A list of envs; with `extra_row`, the tensordict has one row too many.
    Envs {
        envs: Vec<usize>,
        extra_row: bool,
    },
    /// A list in the tensordict's `"env_index"`: an `i64` tensor or a stack
    /// of integers.
    EnvIndex {
        envs: Vec<usize>,
        tensor: bool,
    },
}

/// How long a receive may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    /// Timeout zero.
    Poll,
    /// A timeout of this many milliseconds.
    Short(u64),
    /// [`GENEROUS`].
    Generous,
    /// No timeout (only drawn where the model says results are coming; the
    /// case's watchdog bounds it anyway).
    Forever,
}

impl Wait {
    fn timeout(self) -> Option<Duration> {
        match self {
            Wait::Poll => Some(Duration::ZERO),
            Wait::Short(ms) => Some(Duration::from_millis(ms)),
            Wait::Generous => Some(GENEROUS),
            Wait::Forever => None,
        }
    }

    /// The wait's name, for the tally.
    fn name(self) -> &'static str {
        match self {
            Wait::Poll => "poll",
            Wait::Short(_) => "short",
            Wait::Generous => "generous",
            Wait::Forever => "forever",
        }
    }

    /// Whether the results in flight may be missed (a timeout error).
    fn may_time_out(self) -> bool {
        matches!(self, Wait::Poll | Wait::Short(_))
    }
}

/// One call of the pool, as drawn.
#[derive(Clone, Debug)]
enum Call {
    /// An async send; `values` are the actions by row; a reset sends a
    /// tensordict only `with_td` (or for `Target::EnvIndex`).
    Send {
        kind: Kind,
        aim: Aim,
        values: Vec<i64>,
        with_td: bool,
    },
    /// A batch receive; `kind` `None` is the operation of the first env in
    /// flight from a batch send (step if none), so that receives often
    /// match what was sent.
    Recv {
        kind: Option<Kind>,
        min_get: Count,
        max_get: Option<Count>,
        wait: Wait,
    },
    /// A per-env receive; `pick` `None` is the `nth` env in flight (modulo
    /// their number) with its operation.
    RecvEnv {
        pick: Option<(Kind, usize)>,
        nth: usize,
        wait: Wait,
    },
    /// A synchronous call with these actions.
    Sync { kind: Kind, values: Vec<i64> },
}

/// A `min_get` or `max_get` as drawn.
#[derive(Clone, Copy, Debug)]
enum Count {
    /// This number.
    Fixed(usize),
    /// The number of envs in flight for the operation from batch sends,
    /// less this (at least 1), so that receives often fit what is in
    /// flight.
    Below(usize),
}

impl Count {
    fn resolve(self, in_flight: usize) -> usize {
        match self {
            Count::Fixed(n) => n,
            Count::Below(d) => in_flight.saturating_sub(d).max(1),
        }
    }
}

/// What an env's result must carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Expect {
    /// The action sent (step operations): the root row of the result.
    action: Option<i64>,
    /// The counter and done flag under `"next"` (step operations).
    next: Option<(i32, bool)>,
    /// The counter of the root (reset operations).
    root: Option<i32>,
}

/// Where an env is, for the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    Idle,
    InFlight {
        kind: Kind,
        per_env: bool,
        expect: Expect,
    },
}

/// The model of the pool: each env's slot and counter.
#[derive(Debug)]
struct Model {
    count: [i32; N],
    slots: [Slot; N],
}

impl Model {
    fn new() -> Model {
        Model {
            count: STARTS,
            slots: [Slot::Idle; N],
        }
    }

    /// Runs `kind` on env `env`'s counter (as the env will once it gets the
    /// command) and returns what its result must carry.
    fn advance(&mut self, env: usize, kind: Kind, action: i64) -> Expect {
        let count = &mut self.count[env];
        match kind {
            Kind::Reset => {
                *count = STARTS[env];
                Expect {
                    action: None,
                    next: None,
                    root: Some(*count),
                }
            }
            Kind::Step | Kind::StepAndMaybeReset => {
                *count += i32::try_from(action).expect("small actions");
                let next = (*count, *count > MAX_STEPS[env]);
                if kind == Kind::StepAndMaybeReset && next.1 {
                    *count = STARTS[env];
                }
                Expect {
                    action: Some(action),
                    next: Some(next),
                    root: (kind == Kind::StepAndMaybeReset).then_some(*count),
                }
            }
        }
    }

    fn in_flight(&self) -> Vec<usize> {
        (0..N).filter(|&e| self.slots[e] != Slot::Idle).collect()
    }

    /// The envs a batch receive of `kind` may take.
    fn batch(&self, kind: Kind) -> Vec<usize> {
        (0..N)
            .filter(|&e| {
                matches!(self.slots[e], Slot::InFlight { kind: k, per_env: false, .. } if k == kind)
            })
            .collect()
    }

    fn expect(&self, env: usize) -> Expect {
        match self.slots[env] {
            Slot::InFlight { expect, .. } => expect,
            Slot::Idle => panic!("env {env} is idle in the model"),
        }
    }

    /// The `(env, row)` pairs a send to `envs` addresses, or the error it
    /// must return: the first env out of range or addressed twice, in
    /// order, then the busy envs, in order.
    fn resolve(&self, envs: &[usize]) -> Result<Vec<(usize, usize)>, PoolError> {
        let mut seen = [false; N];
        for &env in envs {
            if env >= N {
                return Err(PoolError::EnvOutOfRange { env, num_envs: N });
            }
            if std::mem::replace(&mut seen[env], true) {
                return Err(PoolError::DuplicateEnv { env });
            }
        }
        self.busy(envs)?;
        Ok(envs
            .iter()
            .copied()
            .enumerate()
            .map(|(r, e)| (e, r))
            .collect())
    }

    fn busy(&self, envs: &[usize]) -> Result<(), PoolError> {
        let busy: Vec<usize> = envs
            .iter()
            .copied()
            .filter(|&e| self.slots[e] != Slot::Idle)
            .collect();
        if busy.is_empty() {
            Ok(())
        } else {
            Err(PoolError::Busy { envs: busy })
        }
    }
}

/// Checks one step result (a row of a batch or a per-env result).
#[track_caller]
fn check_step(row: &TensorDict, env: usize, expect: Expect, what: &str) {
    assert_eq!(row_env(row), env, "{what}: env_index");
    let (count, done) = expect.next.expect("a step result");
    assert_eq!(
        int_at(row, &["next", "observation"]),
        count,
        "{what}: env {env}'s counter"
    );
    assert_eq!(
        flag_at(row, &["next", "done"]),
        done,
        "{what}: env {env}'s done flag"
    );
    assert_eq!(
        long_at(row, &["action"]),
        expect.action.expect("an action"),
        "{what}: env {env}'s root row is the action sent"
    );
}

/// Checks one root (of a reset, or the next root of step-and-maybe-reset).
#[track_caller]
fn check_root(row: &TensorDict, env: usize, expect: Expect, what: &str) {
    assert_eq!(row_env(row), env, "{what}: env_index");
    assert_eq!(
        int_at(row, &["observation"]),
        expect.root.expect("a root"),
        "{what}: env {env}'s root counter"
    );
    assert!(!flag_at(row, &["done"]), "{what}: a root is never done");
}

/// An `"env_index"` entry for `envs`.
fn env_index_entry(envs: &[usize], tensor: bool) -> pool::tensordict::Entry {
    if tensor {
        let values = envs.iter().map(|&e| e as i64).collect();
        Tensor::from_vec(&[envs.len()], values)
            .expect("shape fits")
            .into()
    } else {
        NonTensor::Stack(envs.iter().map(|&e| NonTensor::Int(e as i64)).collect()).into()
    }
}

/// Where a case's pool runs.
#[derive(Clone, Copy, Debug)]
enum Setup {
    /// Worker threads.
    Threads(usize),
    /// Worker processes with this exchange, envs per worker and runner
    /// threads per worker (0: the default).
    Procs(ExchangeMode, usize, usize),
}

/// A pool and its model.
struct Case {
    pool: AsyncEnvPool,
    model: Model,
    tally: Tally,
}

impl Case {
    fn new(setup: Setup, stack: StackMode) -> Case {
        let backend = match setup {
            Setup::Threads(n) => common::threads(n),
            Setup::Procs(exchange, envs, threads) => Backend::Multiprocessing(
                ProcOptions::for_test("rlpool_worker")
                    .envs_per_worker(envs)
                    .threads_per_worker(threads)
                    .exchange(exchange),
            ),
        };
        let kwargs = (0..N)
            .map(|e| {
                Kwargs::new()
                    .with("start_val", i64::from(STARTS[e]))
                    .with("max_steps", i64::from(MAX_STEPS[e]))
            })
            .collect();
        let pool = AsyncEnvPool::builder()
            .backend(backend)
            .stack(stack)
            .registered_each("CountingEnv", N, kwargs)
            .build()
            .expect("build a pool of CountingEnvs");
        Case {
            pool,
            model: Model::new(),
            tally: Tally::new(),
        }
    }

    fn count(&mut self, outcome: String) {
        *self.tally.entry(outcome).or_default() += 1;
    }

    fn run(&mut self, call: &Call) {
        let what = format!("{call:?}");
        match call {
            Call::Send {
                kind,
                aim,
                values,
                with_td,
            } => self.send(*kind, aim, values, *with_td, &what),
            Call::Recv {
                kind,
                min_get,
                max_get,
                wait,
            } => {
                let kind = kind.unwrap_or_else(|| {
                    (0..N)
                        .find_map(|e| match self.model.slots[e] {
                            Slot::InFlight {
                                kind,
                                per_env: false,
                                ..
                            } => Some(kind),
                            _ => None,
                        })
                        .unwrap_or(Kind::Step)
                });
                let in_flight = self.model.batch(kind).len();
                let recv = Recv {
                    min_get: min_get.resolve(in_flight),
                    max_get: max_get.map(|m| m.resolve(in_flight)),
                    timeout: wait.timeout(),
                };
                let what = format!("{what}, as {recv:?} of {}", kind.name());
                self.recv(kind, recv, *wait, &what);
            }
            Call::RecvEnv { pick, nth, wait } => {
                let (kind, env) = pick.unwrap_or_else(|| {
                    let in_flight = self.model.in_flight();
                    if in_flight.is_empty() {
                        return (Kind::Step, 0);
                    }
                    let env = in_flight[nth % in_flight.len()];
                    match self.model.slots[env] {
                        Slot::InFlight { kind, .. } => (kind, env),
                        Slot::Idle => unreachable!(),
                    }
                });
                self.recv_env(kind, env, *wait, &what);
            }
            Call::Sync { kind, values } => self.sync(*kind, values, &what),
        }
        assert_eq!(
            self.pool.in_flight(),
            self.model.in_flight(),
            "{what}: the envs in flight"
        );
    }

    fn send(&mut self, kind: Kind, aim: &Aim, values: &[i64], with_td: bool, what: &str) {
        let td_needed = kind != Kind::Reset || with_td || matches!(aim, Aim::EnvIndex { .. });
        // A tensordict with `rows` rows of actions (none for a reset).
        let batch = |rows: usize| {
            if kind == Kind::Reset {
                TensorDict::new(&[rows])
            } else {
                actions(&values[..rows])
            }
        };
        let (td, target, expected) = match aim {
            Aim::All => (
                batch(N),
                Target::All,
                self.model.resolve(&(0..N).collect::<Vec<_>>()),
            ),
            Aim::Env { env, leading } => {
                let td = match (kind, leading) {
                    (Kind::Reset, true) => TensorDict::new(&[1]),
                    (Kind::Reset, false) => TensorDict::new(&[]),
                    (_, true) => actions(&values[..1]),
                    (_, false) => action(values[0]),
                };
                let expected = if *env >= N {
                    Err(PoolError::EnvOutOfRange {
                        env: *env,
                        num_envs: N,
                    })
                } else {
                    self.model.busy(&[*env]).map(|()| vec![(*env, 0)])
                };
                (td, Target::Env(*env), expected)
            }
            Aim::Envs { envs, extra_row } => {
                let rows = envs.len() + usize::from(*extra_row);
                let expected = if *extra_row && td_needed {
                    Err(PoolError::TargetLength {
                        targets: envs.len(),
                        batch_size: vec![rows],
                    })
                } else {
                    self.model.resolve(envs)
                };
                (batch(rows), Target::Envs(envs.clone()), expected)
            }
            Aim::EnvIndex { envs, tensor } => {
                let mut td = batch(envs.len());
                td.set("env_index", env_index_entry(envs, *tensor))
                    .expect("one index per row");
                (td, Target::EnvIndex, self.model.resolve(envs))
            }
        };
        let result = match kind {
            Kind::Reset => self
                .pool
                .async_reset_send(td_needed.then_some(td), target.clone()),
            Kind::Step => self.pool.async_step_send(td, target.clone()),
            Kind::StepAndMaybeReset => self
                .pool
                .async_step_and_maybe_reset_send(td, target.clone()),
        };
        match expected {
            Err(err) => {
                self.count(format!("send: {}", variant(&err)));
                assert_eq!(result, Err(err), "{what}");
            }
            Ok(jobs) => {
                result.unwrap_or_else(|err| panic!("{what}: the send must succeed: {err}"));
                self.count(format!("send: ok, {} envs", jobs.len()));
                let per_env = matches!(target, Target::Env(_));
                for (env, row) in jobs {
                    let expect = self.model.advance(env, kind, values[row]);
                    self.model.slots[env] = Slot::InFlight {
                        kind,
                        per_env,
                        expect,
                    };
                }
            }
        }
    }

    fn recv(&mut self, kind: Kind, recv: Recv, wait: Wait, what: &str) {
        let candidates = self.model.batch(kind);
        let in_flight = candidates.len();
        let expected_err = if recv.min_get < 1 {
            Some(PoolError::MinGet {
                min_get: recv.min_get,
            })
        } else if recv.max_get.is_some_and(|m| m < recv.min_get) {
            Some(PoolError::MaxGet {
                min_get: recv.min_get,
                max_get: recv.max_get.unwrap_or_default(),
            })
        } else if recv.min_get > in_flight {
            Some(PoolError::NotEnoughInFlight {
                op: kind.name(),
                min_get: recv.min_get,
                in_flight,
            })
        } else {
            None
        };
        let result = match kind {
            Kind::Reset => self.pool.async_reset_recv(recv).map(|b| (b, None)),
            Kind::Step => self.pool.async_step_recv(recv).map(|b| (b, None)),
            Kind::StepAndMaybeReset => self
                .pool
                .async_step_and_maybe_reset_recv(recv)
                .map(|(s, r)| (s, Some(r))),
        };
        if let Some(err) = expected_err {
            self.count(format!("recv: {}", variant(&err)));
            match result {
                Err(got) => assert_eq!(got, err, "{what}"),
                Ok((batch, _)) => panic!("{what}: expected {err:?}, got {batch}"),
            }
            return;
        }
        let limit = recv.max_get.unwrap_or(in_flight).min(in_flight);
        let (batch, roots) = match result {
            Ok(pair) => pair,
            Err(PoolError::Timeout {
                op,
                timeout,
                ready,
                min_get,
            }) if wait.may_time_out() => {
                assert_eq!(
                    (op, Some(timeout), min_get),
                    (kind.name(), recv.timeout, recv.min_get),
                    "{what}: the timeout error"
                );
                assert!(ready < recv.min_get, "{what}: timed out with {ready} ready");
                self.count(format!("recv: Timeout ({})", wait.name()));
                return;
            }
            Err(err) => panic!("{what}: the receive must succeed: {err}"),
        };
        let envs = self.check_batch(&batch, kind, &candidates, what);
        let part = if envs.len() < in_flight {
            "some"
        } else {
            "all"
        };
        self.count(format!("recv: ok ({}), {part} in flight", wait.name()));
        assert!(
            (recv.min_get..=limit).contains(&envs.len()),
            "{what}: {} results, not in {}..={limit}",
            envs.len(),
            recv.min_get
        );
        if wait == Wait::Generous {
            // Every result is coming: the call returns once `max_get` (or
            // all in flight) are ready.
            assert_eq!(envs.len(), limit, "{what}: a generous deadline");
        }
        let main = rows(&batch);
        let roots = roots.map(|r| {
            assert_eq!(env_index(&r), envs, "{what}: the roots' envs");
            rows(&r)
        });
        for (j, &env) in envs.iter().enumerate() {
            let expect = self.model.expect(env);
            match kind {
                Kind::Reset => check_root(&main[j], env, expect, what),
                Kind::Step => check_step(&main[j], env, expect, what),
                Kind::StepAndMaybeReset => {
                    check_step(&main[j], env, expect, what);
                    let roots = roots.as_ref().expect("roots");
                    check_root(&roots[j], env, expect, what);
                }
            }
            self.model.slots[env] = Slot::Idle;
        }
    }

    /// The envs of a batch: sorted, no duplicate, each row with its index,
    /// all among `candidates`.
    #[track_caller]
    fn check_batch(
        &self,
        batch: &StackedTensorDict,
        kind: Kind,
        candidates: &[usize],
        what: &str,
    ) -> Vec<usize> {
        let envs = env_index(batch);
        assert_eq!(envs.len(), batch.len(), "{what}: one env_index per row");
        assert!(
            envs.windows(2).all(|w| w[0] < w[1]),
            "{what}: sorted and distinct: {envs:?}"
        );
        assert!(
            envs.iter().all(|e| candidates.contains(e)),
            "{what}: {envs:?} must be among the {} batch sends in flight {candidates:?}",
            kind.name()
        );
        envs
    }

    fn recv_env(&mut self, kind: Kind, env: usize, wait: Wait, what: &str) {
        let expected_err = if env >= N {
            Some(PoolError::EnvOutOfRange { env, num_envs: N })
        } else {
            match self.model.slots[env] {
                Slot::InFlight { kind: k, .. } if k == kind => None,
                _ => Some(PoolError::NotInFlight {
                    op: kind.name(),
                    env,
                }),
            }
        };
        let timeout = wait.timeout();
        let result = match kind {
            Kind::Reset => self
                .pool
                .async_reset_recv_env(env, timeout)
                .map(|r| (None, Some(r))),
            Kind::Step => self
                .pool
                .async_step_recv_env(env, timeout)
                .map(|s| (Some(s), None)),
            Kind::StepAndMaybeReset => self
                .pool
                .async_step_and_maybe_reset_recv_env(env, timeout)
                .map(|(s, r)| (Some(s), Some(r))),
        };
        if let Some(err) = expected_err {
            self.count(format!("recv_env: {}", variant(&err)));
            match result {
                Err(got) => assert_eq!(got, err, "{what}"),
                Ok(got) => panic!("{what}: expected {err:?}, got {got:?}"),
            }
            return;
        }
        let (step, root) = match result {
            Ok(pair) => pair,
            Err(PoolError::EnvTimeout {
                op,
                env: e,
                timeout: t,
            }) if wait.may_time_out() => {
                assert_eq!(
                    (op, e, Some(t)),
                    (kind.name(), env, timeout),
                    "{what}: the timeout error"
                );
                self.count(format!("recv_env: EnvTimeout ({})", wait.name()));
                return;
            }
            Err(err) => panic!("{what}: the receive must succeed: {err}"),
        };
        self.count(format!("recv_env: ok ({})", wait.name()));
        let expect = self.model.expect(env);
        if let Some(step) = step {
            check_step(&step, env, expect, what);
        }
        if let Some(root) = root {
            check_root(&root, env, expect, what);
        }
        self.model.slots[env] = Slot::Idle;
    }

    fn sync(&mut self, kind: Kind, values: &[i64], what: &str) {
        let in_flight = self.model.in_flight();
        let td = actions(&values[..N]);
        let result = match kind {
            Kind::Reset => self.pool.reset(None).map(|b| (b, None)),
            Kind::Step => self.pool.step(td).map(|b| (b, None)),
            Kind::StepAndMaybeReset => self
                .pool
                .step_and_maybe_reset(td)
                .map(|(s, r)| (s, Some(r))),
        };
        if !in_flight.is_empty() {
            let err = PoolError::InFlight {
                op: kind.name(),
                envs: in_flight,
            };
            self.count("sync: InFlight".into());
            match result {
                Err(got) => assert_eq!(got, err, "{what}"),
                Ok((batch, _)) => panic!("{what}: expected {err:?}, got {batch}"),
            }
            return;
        }
        self.count(format!("sync: ok ({})", kind.name()));
        let (batch, roots) =
            result.unwrap_or_else(|err| panic!("{what}: the sync call must succeed: {err}"));
        let all: Vec<usize> = (0..N).collect();
        assert_eq!(env_index(&batch), all, "{what}: every env");
        let main = rows(&batch);
        let roots = roots.map(|r| {
            assert_eq!(env_index(&r), all, "{what}: every env's root");
            rows(&r)
        });
        for env in 0..N {
            let expect = self.model.advance(env, kind, values[env]);
            match kind {
                Kind::Reset => check_root(&main[env], env, expect, what),
                Kind::Step => check_step(&main[env], env, expect, what),
                Kind::StepAndMaybeReset => {
                    check_step(&main[env], env, expect, what);
                    check_root(&roots.as_ref().expect("roots")[env], env, expect, what);
                }
            }
        }
    }

    /// Takes every result still in flight (each must come, with its
    /// values), then steps every env once more: nothing was lost or
    /// counted twice.
    fn drain(&mut self) {
        for env in self.model.in_flight() {
            let Slot::InFlight { kind, .. } = self.model.slots[env] else {
                unreachable!()
            };
            self.recv_env(kind, env, Wait::Generous, "drain");
            assert_eq!(self.model.slots[env], Slot::Idle, "drain: env {env}");
        }
        self.sync(Kind::Step, &[1; N], "final step");
        assert!(self.pool.in_flight().is_empty());
    }
}

/// Runs one case in its own thread, under a watchdog: a panic or a
/// deadlock fails the case.
fn run_case(setup: Setup, stack: StackMode, calls: Vec<Call>) -> Result<Tally, TestCaseError> {
    let (done, finished) = mpsc::channel();
    // Where the case is, for the report of a deadlock.
    let progress = Arc::new(Mutex::new(String::from("building the pool")));
    let at = Arc::clone(&progress);
    let body = std::thread::Builder::new()
        .name("model-case".into())
        .spawn(move || {
            let set = |what: String| *at.lock().unwrap_or_else(|p| p.into_inner()) = what;
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                let mut case = Case::new(setup, stack);
                for (i, call) in calls.iter().enumerate() {
                    set(format!(
                        "call {i}, {call:?}, with {:?} in flight",
                        case.model.in_flight()
                    ));
                    case.run(call);
                }
                set("draining".into());
                case.drain();
                set("shutting down".into());
                case.pool.shutdown();
                case.tally
            }));
            let _ = done.send(outcome.map_err(|payload| {
                payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".into())
            }));
        })
        .expect("spawn a case");
    match finished.recv_timeout(CASE_DEADLINE) {
        Ok(outcome) => {
            let _ = body.join();
            outcome.map_err(TestCaseError::fail)
        }
        // The stuck thread is left behind.
        Err(_) => {
            let at = progress.lock().unwrap_or_else(|p| p.into_inner()).clone();
            Err(TestCaseError::fail(format!(
                "deadlock? the case did not finish within {CASE_DEADLINE:?}; stuck at {at}"
            )))
        }
    }
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Reset),
        Just(Kind::Step),
        Just(Kind::StepAndMaybeReset)
    ]
}

/// An env index: in range mostly.
fn index() -> impl Strategy<Value = usize> {
    prop_oneof![6 => 0..N, 1 => N..INDEX_END]
}

/// A list of envs: distinct and in range mostly (any order), else
/// anything (empty, duplicates, out of range).
fn env_list() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        3 => proptest::sample::subsequence((0..N).collect::<Vec<_>>(), 1..=N).prop_shuffle(),
        1 => proptest::collection::vec(0..INDEX_END, 0..=N + 1),
    ]
}

fn aim() -> impl Strategy<Value = Aim> {
    prop_oneof![
        1 => Just(Aim::All),
        2 => (index(), any::<bool>()).prop_map(|(env, leading)| Aim::Env { env, leading }),
        3 => (env_list(), proptest::bool::weighted(0.1))
            .prop_map(|(envs, extra_row)| Aim::Envs { envs, extra_row }),
        2 => (env_list(), any::<bool>()).prop_map(|(envs, tensor)| Aim::EnvIndex { envs, tensor }),
    ]
}

fn wait() -> impl Strategy<Value = Wait> {
    prop_oneof![
        3 => Just(Wait::Poll),
        1 => (1u64..=3).prop_map(Wait::Short),
        2 => Just(Wait::Generous),
        1 => Just(Wait::Forever),
    ]
}

/// An action: a small increment.
fn values() -> impl Strategy<Value = Vec<i64>> {
    proptest::collection::vec(0i64..4, N + 2)
}

fn count() -> impl Strategy<Value = Count> {
    prop_oneof![
        1 => Just(Count::Fixed(0)),
        4 => (1..=N + 1).prop_map(Count::Fixed),
        5 => (0..=2usize).prop_map(Count::Below),
    ]
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        6 => (kind(), aim(), values(), proptest::bool::weighted(0.3)).prop_map(
            |(kind, aim, values, with_td)| Call::Send { kind, aim, values, with_td }
        ),
        6 => (
            proptest::option::weighted(0.4, kind()),
            count(),
            proptest::option::weighted(0.5, count()),
            wait(),
        )
            .prop_map(|(kind, min_get, max_get, wait)| Call::Recv { kind, min_get, max_get, wait }),
        5 => (proptest::option::weighted(0.4, (kind(), index())), any::<usize>(), wait())
            .prop_map(|(pick, nth, wait)| Call::RecvEnv { pick, nth, wait }),
        1 => (kind(), values()).prop_map(|(kind, values)| Call::Sync { kind, values }),
    ]
}

fn stack() -> impl Strategy<Value = StackMode> {
    prop_oneof![
        2 => Just(StackMode::Dense),
        1 => Just(StackMode::MaybeDense),
        1 => Just(StackMode::Lazy)
    ]
}

/// Envs per worker process (2 or 4) and runner threads per worker (the
/// default, or 1).
fn workers() -> impl Strategy<Value = (usize, usize)> {
    (
        prop_oneof![Just(2usize), Just(4)],
        prop_oneof![Just(0usize), Just(1)],
    )
}

fn calls() -> impl Strategy<Value = Vec<Call>> {
    proptest::collection::vec(call(), 1..=48)
}

/// Runs `test` on `cases` values of `strategy` (`PROPTEST_CASES`
/// overrides), shrinking a failure for at most a minute.
fn check<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<Tally, TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 500,
        max_shrink_time: 60_000,
        ..Config::default()
    };
    let total = Mutex::new(Tally::new());
    let mut runner = TestRunner::new(config);
    let outcome = runner.run(&strategy, |value| {
        let tally = test(value)?;
        let mut total = total.lock().unwrap_or_else(|p| p.into_inner());
        for (outcome, n) in tally {
            *total.entry(outcome).or_default() += n;
        }
        Ok(())
    });
    if let Err(err) = outcome {
        panic!("{name}: {err}");
    }
    let total = total.into_inner().unwrap_or_else(|p| p.into_inner());
    let lines: Vec<String> = total.iter().map(|(k, n)| format!("  {k}: {n}")).collect();
    println!("{name}, {cases} cases, outcomes:\n{}", lines.join("\n"));
}

#[test]
fn threads_follow_the_model() {
    check(
        "threads",
        128,
        (1usize..=2, stack(), calls()),
        |(threads, stack, calls)| run_case(Setup::Threads(threads), stack, calls),
    );
}

#[test]
fn processes_with_the_queue_follow_the_model() {
    check(
        "queue",
        64,
        (workers(), stack(), calls()),
        |((envs, threads), stack, calls)| {
            run_case(
                Setup::Procs(ExchangeMode::Queue, envs, threads),
                stack,
                calls,
            )
        },
    );
}

#[test]
fn processes_with_shm_follow_the_model() {
    check(
        "shm",
        64,
        (workers(), stack(), calls()),
        |((envs, threads), stack, calls)| {
            run_case(Setup::Procs(ExchangeMode::Shm, envs, threads), stack, calls)
        },
    );
}
