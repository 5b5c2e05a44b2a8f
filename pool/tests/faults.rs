//! The fault matrix (issue 6): each fault on the threading backend (where
//! it can happen there) and on the process backend with each exchange
//! (queue, shm). For every cell the test checks that
//!
//! 1. the caller gets a typed error naming the env (or the worker and its
//!    envs) soon after the fault: the latency is measured and printed, and
//!    held to a bound generous enough for a loaded 2-core machine (for a
//!    hang: a timeout at the caller's deadline that loses nothing; for a
//!    slow step: no error, only the result later);
//! 2. no result of the other envs is lost or duplicated: every env is a
//!    counter, and every result is checked against a model of its count;
//! 3. `shutdown` returns within its deadline, every worker process is
//!    reaped (no `/proc/<pid>`), nothing appears under `/dev/shm`, and once
//!    the pool is dropped no memfd of it is open or mapped in this process.
//!
//! The pools have 4 envs: env 0 carries the fault; with processes, envs 0
//! and 1 share worker 0 and envs 2 and 3 share worker 1. The slow-env and
//! hung-env rows have 16 envs on 2 threads or 2 workers of 8 (one runner
//! each on a 2-core machine): the other envs' results must arrive while the
//! slow or hung one is still inside its step. The tests run one
//! at a time (a lock): the memfd check looks at the whole process, and the
//! latencies are not measured against each other. The figures:
//! `cargo test -p pool --test faults -- --nocapture --test-threads 1`
//! (lines starting `fault matrix:`); the README's Reliability section has
//! them.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pool::envs::Kwargs;
use pool::{
    AsyncEnvPool, Backend, EnvFailure, ExchangeMode, PoolError, ProcError, ProcOptions, Recv,
    StackMode, Target, ThreadError,
};

use common::test_envs::{self, fault_message, held_kwargs, Fault, Release, FAULTY};
use common::{actions, dev_shm, env_index, gone, watchdog};

/// The entry point of every worker of this binary; in the parent it only
/// registers the test envs.
#[test]
fn rlpool_worker() {
    test_envs::register();
    pool::init();
}

/// Held by each test: one pool at a time in this process.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `body` under the watchdog, alone among this file's tests.
fn serial(body: impl FnOnce() + Send + 'static) {
    let _alone = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    test_envs::register();
    watchdog(body);
}

/// The bound on the latency of an error after its fault (the issue asks for
/// 100 ms; the typical figures are a few ms, see the README: the bound is
/// for a loaded machine, where a 2-core machine at a load of 20 measured
/// up to 0.2 s).
const LATENCY_BOUND: Duration = Duration::from_secs(3);

/// How late past its deadline a timeout may come back (same reasoning).
const OVERSHOOT_BOUND: Duration = Duration::from_secs(2);

/// The process pools' shutdown deadline in these tests.
const SHUTDOWN_DEADLINE: Duration = Duration::from_millis(500);

/// What shutdown may take beyond its deadline (killing and reaping).
const SHUTDOWN_SLACK: Duration = Duration::from_secs(3);

/// The deadline of every receive that is not expected to time out.
const PATIENCE: Duration = Duration::from_secs(20);

/// The step (from 1) or reset (from 1, the first being the pool's first
/// reset) at which env 0 fails.
const FAULT_AT: i64 = 3;

/// The envs of each pool.
const ENVS: usize = 4;

/// The envs of worker 0 (processes).
const WORKER_0: [usize; 2] = [0, 1];

/// A backend configuration of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Config {
    Threads,
    Queue,
    Shm,
}

use Config::{Queue, Shm, Threads};

impl Config {
    /// The backend for a pool of `envs` envs: 2 threads, or 2 workers.
    fn backend_for(self, envs: usize) -> Backend {
        let procs = |exchange| {
            Backend::Multiprocessing(
                ProcOptions::for_test("rlpool_worker")
                    .exchange(exchange)
                    .envs_per_worker(envs.div_ceil(2))
                    .shutdown_timeout(SHUTDOWN_DEADLINE),
            )
        };
        match self {
            Threads => common::threads(2),
            Queue => procs(ExchangeMode::Queue),
            Shm => procs(ExchangeMode::Shm),
        }
    }

    /// The shutdown deadline of this backend.
    fn shutdown_deadline(self) -> Duration {
        match self {
            Threads => pool_thread::SHUTDOWN_GRACE,
            Queue | Shm => SHUTDOWN_DEADLINE,
        }
    }
}

/// A pool of [`ENVS`] FaultyCounters, env 0 with `faulty` keywords, every
/// env with `common` keywords too; reset once.
fn counters(config: Config, faulty: Kwargs, common: &Kwargs) -> AsyncEnvPool {
    let with = |mut kwargs: Kwargs| {
        for (key, value) in common.iter() {
            kwargs.set(key, value.clone());
        }
        kwargs
    };
    let mut each = vec![with(faulty)];
    each.extend((1..ENVS).map(|_| with(Kwargs::new())));
    counters_each(config, each)
}

/// A pool of FaultyCounters, one per keywords of `each`; reset once.
fn counters_each(config: Config, each: Vec<Kwargs>) -> AsyncEnvPool {
    let n = each.len();
    let pool = AsyncEnvPool::builder()
        .backend(config.backend_for(n))
        .stack(StackMode::Dense)
        .registered_each(FAULTY, n, each)
        .build()
        .unwrap_or_else(|err| panic!("{config:?}: {err}"));
    let root = pool.reset(None).unwrap().into_dense().unwrap();
    let obs = root.tensor("observation").unwrap().to_vec::<i32>().unwrap();
    assert_eq!(obs, vec![0; n], "{config:?}");
    pool
}

/// What a round sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Step,
    Reset,
}

/// The outcomes of one round: each env's observation, or its error (with
/// when it came back), and when the round was sent.
#[derive(Debug)]
struct Round {
    sent: Instant,
    results: BTreeMap<usize, i32>,
    errors: Vec<(usize, PoolError, Instant)>,
}

/// Sends `op` to `envs` (step: action 1, which adds 1 to a count), then
/// receives until each of them has exactly one outcome. A receive that
/// fails names one env: the one that left the in-flight set without a
/// result. `between` runs right after the send.
fn round(pool: &AsyncEnvPool, op: Op, envs: &[usize], between: impl FnOnce()) -> Round {
    let sent = Instant::now();
    match op {
        Op::Step => {
            pool.async_step_send(actions(&vec![1; envs.len()]), Target::Envs(envs.to_vec()))
        }
        Op::Reset => pool.async_reset_send(None, Target::Envs(envs.to_vec())),
    }
    .unwrap();
    between();
    let mut pending: BTreeSet<usize> = envs.iter().copied().collect();
    let mut results = BTreeMap::new();
    let mut errors = Vec::new();
    while !pending.is_empty() {
        let before = pool.in_flight();
        // With a timeout, a receive without `max_get` waits for every env in
        // flight (a hung one too): take at most those of this round.
        let recv = Recv::new().max_get(pending.len()).timeout(PATIENCE);
        let got = match op {
            Op::Step => pool.async_step_recv(recv),
            Op::Reset => pool.async_reset_recv(recv),
        };
        match got {
            Ok(batch) => {
                let envs = env_index(&batch);
                let dense = batch.into_dense().unwrap();
                let key: &[&str] = match op {
                    Op::Step => &["next", "observation"],
                    Op::Reset => &["observation"],
                };
                let obs = dense.tensor(key).unwrap().to_vec::<i32>().unwrap();
                for (env, obs) in envs.into_iter().zip(obs) {
                    assert!(pending.remove(&env), "a second outcome of env {env}");
                    results.insert(env, obs);
                }
            }
            Err(err) => {
                let at = Instant::now();
                let after = pool.in_flight();
                let gone: Vec<usize> = before.into_iter().filter(|e| !after.contains(e)).collect();
                assert_eq!(gone.len(), 1, "an error takes one env: {err}");
                assert!(
                    pending.remove(&gone[0]),
                    "a second outcome of env {}",
                    gone[0]
                );
                errors.push((gone[0], err, at));
            }
        }
    }
    Round {
        sent,
        results,
        errors,
    }
}

/// Each env's count, as the results so far say it must be (`None`: its
/// worker is dead).
struct Model(Vec<Option<i32>>);

impl Model {
    fn new() -> Model {
        Model::of(ENVS)
    }

    /// The model of `envs` envs.
    fn of(envs: usize) -> Model {
        Model(vec![Some(0); envs])
    }

    /// Checks each result of a round against the model and advances it: a
    /// step adds 1, a reset makes 0. A lost result would have hung the
    /// round (or come back as a timeout); a duplicated or stale one fails
    /// here.
    fn check(&mut self, config: Config, op: Op, round: &Round) {
        for (&env, &obs) in &round.results {
            let before = self.0[env]
                .unwrap_or_else(|| panic!("{config:?}: a result of env {env}, whose worker died"));
            let expected = match op {
                Op::Step => before + 1,
                Op::Reset => 0,
            };
            assert_eq!(
                obs, expected,
                "{config:?}: env {env} after a {op:?}: a lost, stale or duplicated result"
            );
            self.0[env] = Some(obs);
        }
    }
}

/// The env, operation and message of an env's own failure (an error or a
/// panic in its reset or step), from either backend; `None` for any other
/// error.
fn env_failure(err: &PoolError) -> Option<(usize, String, String, bool)> {
    let PoolError::EnvFailed {
        env,
        during,
        worker,
        cause,
        ..
    } = err
    else {
        return None;
    };
    let (panicked, in_worker) = match cause {
        EnvFailure::Threads(err) => match &**err {
            ThreadError::Panicked { message, .. } => (Some(message.clone()), None),
            ThreadError::Env { .. } => (None, None),
            other => panic!("an env failure caused by {other:?}"),
        },
        EnvFailure::Procs(err) => match &**err {
            ProcError::Panicked { message, .. } => (Some(message.clone()), Some(0)),
            ProcError::Env { .. } => (None, Some(0)),
            other => panic!("an env failure caused by {other:?}"),
        },
        other => panic!("an env failure caused by {other:?}"),
    };
    assert_eq!(*worker, in_worker, "{err}");
    Some(match panicked {
        Some(message) => (*env, during.clone(), message, true),
        None => (*env, during.clone(), cause.detail(), false),
    })
}

/// Checks an error of a dead worker 0: it names the worker, its envs, and
/// `how` it ended.
fn assert_worker_0_died(config: Config, err: &PoolError, how: &str) {
    match err {
        PoolError::WorkerDied {
            worker: 0,
            envs,
            reason,
        } if envs == &WORKER_0 => {
            assert!(
                reason.contains(how),
                "{config:?}: {reason} (expected {how:?})"
            );
        }
        other => panic!("{config:?}: expected worker 0's death, got {other}"),
    }
    assert!(
        err.to_string().starts_with("worker 0 (envs [0, 1]) died: "),
        "{err}"
    );
}

/// This process's open descriptors and mappings of the pools' memfds
/// (`memfd:rlpool`, `memfd:rlpool-bells`).
fn our_memfds() -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .map(|target| target.to_string_lossy().into_owned())
                .filter(|target| target.contains("memfd:rlpool"))
                .collect()
        })
        .unwrap_or_default();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    found.extend(
        maps.lines()
            .filter(|l| l.contains("memfd:rlpool"))
            .map(str::to_owned),
    );
    found
}

/// Shuts the pool down and checks what it leaves: within its deadline,
/// every worker reaped, nothing under `/dev/shm` beyond `shm_before`, no
/// memfd once dropped. Returns how long shutdown took.
fn shut_down(pool: AsyncEnvPool, config: Config, shm_before: &[String]) -> Duration {
    let pids = pool.worker_pids();
    assert_eq!(pids.is_empty(), config == Threads);
    let start = Instant::now();
    pool.shutdown();
    let took = start.elapsed();
    let bound = config.shutdown_deadline() + SHUTDOWN_SLACK;
    assert!(took < bound, "{config:?}: shutdown took {took:?}");
    let left: Vec<u32> = pids.iter().copied().filter(|&pid| !gone(pid)).collect();
    assert!(left.is_empty(), "{config:?}: workers not reaped: {left:?}");
    drop(pool);
    assert_eq!(dev_shm(), shm_before, "{config:?}: /dev/shm");
    assert_eq!(our_memfds(), Vec::<String>::new(), "{config:?}");
    took
}

/// Prints one cell's figures (`--nocapture` shows them).
fn report(fault: &str, config: Config, what: &str, shutdown: Duration) {
    eprintln!("fault matrix: {fault} / {config:?}: {what}; shutdown {shutdown:.1?}");
}

/// How env 0 fails, and what the caller must get.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// The env's own error, naming it, at its `call`-th `"step"` or
    /// `"reset"`.
    EnvFailure {
        fault: Fault,
        during: &'static str,
        call: i64,
    },
    /// Worker 0 dies, ending as the reason says.
    WorkerDeath { how: &'static str },
}

/// One cell of the matrix for a fault that ends in an error: five rounds
/// of steps to every env (for a reset fault, the fault's round is a
/// reset), the fault in round [`FAULT_AT`]; `between` runs right after
/// that round's send and returns when the fault was made (default: the
/// send).
fn error_cell(
    name: &str,
    config: Config,
    faulty: Kwargs,
    common: Kwargs,
    expect: Expect,
    between: impl Fn(&AsyncEnvPool) -> Option<Instant>,
) {
    let shm_before = dev_shm();
    let pool = counters(config, faulty, &common);
    let mut model = Model::new();
    let all: Vec<usize> = (0..ENVS).collect();
    let mut latency = None;
    let mut errors_seen = 0;
    for r in 1..=5 {
        // The reset fault is at the second reset call: this round's.
        let op = match expect {
            Expect::EnvFailure {
                during: "reset", ..
            } if r == FAULT_AT => Op::Reset,
            _ => Op::Step,
        };
        let mut fault_made = None;
        let round = round(&pool, op, &all, || {
            if r == FAULT_AT {
                fault_made = between(&pool);
            }
        });
        model.check(config, op, &round);
        for (env, err, at) in &round.errors {
            errors_seen += 1;
            match expect {
                Expect::EnvFailure {
                    fault,
                    during,
                    call,
                } => {
                    assert_eq!(r, FAULT_AT, "{config:?}: {err}");
                    let (e, d, message, panicked) = env_failure(err).unwrap_or_else(|| {
                        panic!("{config:?}: expected env 0's failure, got {err}")
                    });
                    assert_eq!((e, d.as_str(), *env), (0, during, 0), "{err}");
                    assert!(
                        message.contains(&fault_message(fault, call)),
                        "{config:?}: {message}"
                    );
                    assert_eq!(panicked, fault == Fault::Panic);
                    assert!(err.to_string().starts_with("env 0 (FaultyCounter"), "{err}");
                }
                Expect::WorkerDeath { how } => {
                    assert!(r >= FAULT_AT, "{config:?}: {err} before the fault");
                    assert!(WORKER_0.contains(env), "{config:?}: env {env}: {err}");
                    assert_worker_0_died(config, err, how);
                    model.0[*env] = None;
                }
            }
            if r == FAULT_AT && latency.is_none() {
                latency = Some(at.saturating_duration_since(fault_made.unwrap_or(round.sent)));
            }
        }
        if r == FAULT_AT {
            assert!(
                !round.errors.is_empty(),
                "{config:?}: no error in the fault's round"
            );
        }
    }
    // The other worker's envs (and, for an env's own failure, every env)
    // counted every step; the faulty env's failed call did not count.
    let counts: Vec<Option<i32>> = model.0.clone();
    match expect {
        Expect::EnvFailure { during: "step", .. } => {
            assert_eq!(counts, [Some(4), Some(5), Some(5), Some(5)], "{config:?}");
            assert_eq!(errors_seen, 1);
        }
        Expect::EnvFailure { .. } => {
            // Env 0's failed reset left its count at 2; the others reset
            // to 0 and stepped twice.
            assert_eq!(counts, [Some(4), Some(2), Some(2), Some(2)], "{config:?}");
            assert_eq!(errors_seen, 1);
        }
        Expect::WorkerDeath { .. } => {
            assert_eq!(counts[0], None);
            assert_eq!(counts[1], None);
            assert_eq!(&counts[2..], [Some(5), Some(5)], "{config:?}");
            // Each send to worker 0's envs after its death fails once.
            assert!((5..=6).contains(&errors_seen), "{errors_seen}");
        }
    }
    let latency = latency.expect("measured");
    assert!(latency < LATENCY_BOUND, "{config:?}: {latency:?}");
    let took = shut_down(pool, config, &shm_before);
    report(name, config, &format!("error after {latency:.1?}"), took);
}

#[test]
fn panic_on_step() {
    serial(|| {
        for config in [Threads, Queue, Shm] {
            error_cell(
                "panic on step",
                config,
                test_envs::faulty_kwargs(FAULT_AT, Fault::Panic),
                Kwargs::new(),
                Expect::EnvFailure {
                    fault: Fault::Panic,
                    during: "step",
                    call: FAULT_AT,
                },
                |_| None,
            );
        }
    });
}

#[test]
fn error_on_reset() {
    serial(|| {
        for config in [Threads, Queue, Shm] {
            error_cell(
                "error on reset",
                config,
                // The pool's first reset is reset call 1.
                test_envs::faulty_kwargs(2, Fault::ErrorOnReset),
                Kwargs::new(),
                Expect::EnvFailure {
                    fault: Fault::ErrorOnReset,
                    during: "reset",
                    call: 2,
                },
                |_| None,
            );
        }
    });
}

#[test]
fn abort_on_step() {
    serial(|| {
        for config in [Queue, Shm] {
            error_cell(
                "abort on step",
                config,
                test_envs::faulty_kwargs(FAULT_AT, Fault::Abort),
                Kwargs::new(),
                Expect::WorkerDeath { how: "signal: 6" },
                |_| None,
            );
        }
    });
}

/// SIGKILL of worker 0 right after the fault round's send, while env 0
/// is in a slow step (200 ms; the others take 20 ms), so that the kill
/// comes mid-step even on a loaded machine; the latency counts from the
/// start of the `kill` command.
#[test]
fn sigkill_from_outside() {
    serial(|| {
        for config in [Queue, Shm] {
            error_cell(
                "SIGKILL",
                config,
                test_envs::faulty_kwargs(FAULT_AT, Fault::Slow),
                Kwargs::new().with("step_us", 20_000),
                Expect::WorkerDeath { how: "signal: 9" },
                |pool| {
                    let pid = pool.worker_pids()[0];
                    let at = Instant::now();
                    let killed = Command::new("kill")
                        .args(["-9", &pid.to_string()])
                        .status()
                        .unwrap();
                    assert!(killed.success());
                    Some(at)
                },
            );
        }
    });
}

/// The keyword of the worker's own socket faults (see `pool-proc`'s
/// `worker.rs`): the worker takes it out of the env's keywords.
const WORKER_FAULT: &str = "rlpool_worker_fault";

#[test]
fn worker_closes_its_socket() {
    serial(|| {
        for config in [Queue, Shm] {
            error_cell(
                "closed socket",
                config,
                Kwargs::new().with(WORKER_FAULT, format!("close_socket@{FAULT_AT}")),
                Kwargs::new(),
                Expect::WorkerDeath {
                    how: "its control socket closed",
                },
                |_| None,
            );
        }
    });
}

#[test]
fn worker_writes_garbage() {
    serial(|| {
        for config in [Queue, Shm] {
            error_cell(
                "garbage on the socket",
                config,
                Kwargs::new().with(WORKER_FAULT, format!("garbage@{FAULT_AT}")),
                Kwargs::new(),
                Expect::WorkerDeath {
                    how: "protocol error: unknown message tag 238",
                },
                |_| None,
            );
        }
    });
}

/// Env 0 hangs in its third step. A receive that wants all four results
/// times out at its deadline and takes nothing: the three results ready
/// stay and come with the next receive; a receive of env 0 alone times out
/// too; the other envs go on stepping. On threads the hung env keeps one
/// of the two worker threads; on processes a spare runner serves env 1.
#[test]
fn a_step_that_hangs() {
    serial(|| {
        for config in [Queue, Threads, Shm] {
            let shm_before = dev_shm();
            let pool = counters(
                config,
                test_envs::faulty_kwargs(FAULT_AT, Fault::Hang),
                &Kwargs::new(),
            );
            let mut model = Model::new();
            let all: Vec<usize> = (0..ENVS).collect();
            for _ in 1..FAULT_AT {
                let round = round(&pool, Op::Step, &all, || {});
                assert!(round.errors.is_empty(), "{config:?}: {:?}", round.errors);
                model.check(config, Op::Step, &round);
            }
            pool.async_step_send(actions(&[1; ENVS]), Target::All)
                .unwrap();
            let mut overshoot = Duration::ZERO;
            let mut timed_out = |recv: Recv, min_get: usize| {
                let timeout = Duration::from_millis(200);
                let start = Instant::now();
                let err = pool.async_step_recv(recv.timeout(timeout)).unwrap_err();
                let late = start.elapsed().saturating_sub(timeout);
                assert!(
                    matches!(err, PoolError::Timeout { min_get: m, ready, .. } if m == min_get && ready < min_get),
                    "{config:?}: {err}"
                );
                assert!(late < OVERSHOOT_BOUND, "{config:?}: {late:?} late");
                overshoot = overshoot.max(late);
            };
            timed_out(Recv::new().min_get(ENVS), ENVS);
            // Once the other envs are done, a timeout counts them all (too
            // few for the receive, they are counted, not taken): asked again
            // until it does, within the patience.
            let since = Instant::now();
            loop {
                let err = pool
                    .async_step_recv(Recv::new().min_get(ENVS).timeout(Duration::from_millis(20)))
                    .unwrap_err();
                let PoolError::Timeout { ready, .. } = err else {
                    panic!("{config:?}: {err}");
                };
                assert!(ready < ENVS, "{config:?}: {err}");
                if ready == ENVS - 1 {
                    break;
                }
                assert!(since.elapsed() < PATIENCE, "{config:?}: {err}");
            }
            assert_eq!(
                pool.in_flight(),
                all,
                "{config:?}: the timeout took nothing"
            );
            let rest = pool
                .async_step_recv(Recv::new().min_get(3).max_get(3).timeout(PATIENCE))
                .unwrap();
            assert_eq!(env_index(&rest), [1, 2, 3], "{config:?}");
            let obs = rest
                .into_dense()
                .unwrap()
                .tensor(("next", "observation"))
                .unwrap()
                .to_vec::<i32>()
                .unwrap();
            assert_eq!(obs, [3, 3, 3], "{config:?}");
            model.0[1..].iter_mut().for_each(|c| *c = Some(3));
            timed_out(Recv::new(), 1);
            assert_eq!(pool.in_flight(), [0], "{config:?}");
            let err = pool
                .async_step_recv_env(0, Some(Duration::from_millis(50)))
                .unwrap_err();
            assert!(
                matches!(err, PoolError::EnvTimeout { env: 0, .. }),
                "{config:?}: {err}"
            );
            for _ in FAULT_AT + 1..=5 {
                let round = round(&pool, Op::Step, &[1, 2, 3], || {});
                assert!(round.errors.is_empty(), "{config:?}: {:?}", round.errors);
                model.check(config, Op::Step, &round);
            }
            assert_eq!(model.0, [Some(2), Some(5), Some(5), Some(5)], "{config:?}");
            assert_eq!(pool.in_flight(), [0], "{config:?}");
            let took = shut_down(pool, config, &shm_before);
            report(
                "hang",
                config,
                &format!("timeout {overshoot:.1?} past its deadline"),
                took,
            );
        }
    });
}

/// Env 0's third step takes ten times the others' (20 ms, the others
/// 2 ms): no error, its result comes later, every count is right.
#[test]
fn a_slow_step() {
    serial(|| {
        for config in [Threads, Queue, Shm] {
            let shm_before = dev_shm();
            let pool = counters(
                config,
                test_envs::faulty_kwargs(FAULT_AT, Fault::Slow),
                &Kwargs::new().with("step_us", 2_000),
            );
            let mut model = Model::new();
            let mut slow = Duration::ZERO;
            let mut fast = Duration::ZERO;
            for r in 1..=5 {
                let sent = Instant::now();
                pool.async_step_send(actions(&[1; ENVS]), Target::All)
                    .unwrap();
                let mut arrived = BTreeMap::new();
                let mut results = BTreeMap::new();
                while arrived.len() < ENVS {
                    // No deadline: whatever is ready, as soon as one is.
                    let batch = pool
                        .async_step_recv(Recv::new())
                        .unwrap_or_else(|err| panic!("{config:?}: {err}"));
                    let at = sent.elapsed();
                    let envs = env_index(&batch);
                    let obs = batch
                        .into_dense()
                        .unwrap()
                        .tensor(("next", "observation"))
                        .unwrap()
                        .to_vec::<i32>()
                        .unwrap();
                    for (env, obs) in envs.into_iter().zip(obs) {
                        assert!(arrived.insert(env, at).is_none(), "env {env} twice");
                        results.insert(env, obs);
                    }
                }
                let round = Round {
                    sent,
                    results,
                    errors: Vec::new(),
                };
                model.check(config, Op::Step, &round);
                if r == FAULT_AT {
                    slow = arrived[&0];
                    fast = arrived.values().copied().min().expect("four envs");
                    assert!(slow >= Duration::from_millis(20), "{config:?}: {slow:?}");
                }
            }
            assert_eq!(model.0, [Some(5); ENVS], "{config:?}");
            let took = shut_down(pool, config, &shm_before);
            report(
                "slow step",
                config,
                &format!("no error; its result after {slow:.1?} (first result {fast:.1?})"),
                took,
            );
        }
    });
}

/// The envs of the slow-env and hung-env rows.
const MANY: usize = 16;

/// Sends a step to every env of a pool of [`MANY`], one of which (`slow`)
/// does not return from it (until released, or at all), and receives the
/// others: all of them in one receive (`min_get` = 15), while the slow env
/// is still inside its step, which nothing has released yet. Returns when
/// they arrived, after the send.
fn the_others_arrive(
    pool: &AsyncEnvPool,
    config: Config,
    slow: usize,
    model: &mut Model,
) -> Duration {
    let sent = Instant::now();
    pool.async_step_send(actions(&[1; MANY]), Target::All)
        .unwrap();
    let others = pool
        .async_step_recv(
            Recv::new()
                .min_get(MANY - 1)
                .max_get(MANY - 1)
                .timeout(PATIENCE),
        )
        .unwrap_or_else(|err| panic!("{config:?}, env {slow} slow: {err}"));
    let latency = sent.elapsed();
    let envs = env_index(&others);
    let expected: Vec<usize> = (0..MANY).filter(|&env| env != slow).collect();
    assert_eq!(envs, expected, "{config:?}, env {slow} slow");
    let obs = others
        .into_dense()
        .unwrap()
        .tensor(("next", "observation"))
        .unwrap()
        .to_vec::<i32>()
        .unwrap();
    let round = Round {
        sent,
        results: envs.into_iter().zip(obs).collect(),
        errors: Vec::new(),
    };
    model.check(config, Op::Step, &round);
    assert_eq!(
        pool.in_flight(),
        [slow],
        "{config:?}: env {slow} still stepping"
    );
    assert!(latency < LATENCY_BOUND, "{config:?}: {latency:?}");
    latency
}

/// Rounds of steps to `envs`, each checked against the model.
fn plain_rounds(
    pool: &AsyncEnvPool,
    config: Config,
    envs: &[usize],
    rounds: usize,
    model: &mut Model,
) {
    for _ in 0..rounds {
        let round = round(pool, Op::Step, envs, || {});
        assert!(round.errors.is_empty(), "{config:?}: {:?}", round.errors);
        model.check(config, Op::Step, &round);
    }
}

/// One env among 16 is slow: its step at [`FAULT_AT`] lasts until the
/// test releases it. The other 15 results of that round arrive while it
/// is still inside that step (first in its thread's or worker's block of
/// envs, so nobody may run the others behind it; or fourth, so that the
/// results before it must not wait for it); then it is released, its
/// result comes, and every count is right.
#[test]
fn a_slow_env_among_16() {
    serial(|| {
        for config in [Threads, Queue, Shm] {
            for slow in [0, 3] {
                let shm_before = dev_shm();
                let release = Release::new();
                let each = (0..MANY)
                    .map(|env| {
                        if env == slow {
                            held_kwargs(FAULT_AT, &release)
                        } else {
                            Kwargs::new()
                        }
                    })
                    .collect();
                let pool = counters_each(config, each);
                let mut model = Model::of(MANY);
                let all: Vec<usize> = (0..MANY).collect();
                plain_rounds(&pool, config, &all, FAULT_AT as usize - 1, &mut model);
                let latency = the_others_arrive(&pool, config, slow, &mut model);
                release.release();
                let result = pool
                    .async_step_recv_env(slow, Some(PATIENCE))
                    .unwrap_or_else(|err| panic!("{config:?}: {err}"));
                let obs = result
                    .tensor(("next", "observation"))
                    .unwrap()
                    .item::<i32>()
                    .unwrap();
                assert_eq!(i64::from(obs), FAULT_AT, "{config:?}: env {slow}");
                model.0[slow] = Some(obs);
                plain_rounds(&pool, config, &all, 5 - FAULT_AT as usize, &mut model);
                assert_eq!(model.0, [Some(5); MANY], "{config:?}, env {slow} slow");
                let took = shut_down(pool, config, &shm_before);
                report(
                    &format!("slow env {slow} of 16"),
                    config,
                    &format!("the other 15 after {latency:.1?}, while it was still stepping"),
                    took,
                );
            }
        }
    });
}

/// One env among 16 hangs in its step at [`FAULT_AT`] (until shutdown):
/// the other 15 results of that round arrive, a receive of the hung env
/// with a timeout gives the typed timeout error, the others go on
/// stepping, and shutdown returns within its grace (threads leave the
/// stuck thread behind; processes kill the worker).
#[test]
fn a_hung_env_among_16() {
    serial(|| {
        for config in [Threads, Queue, Shm] {
            let shm_before = dev_shm();
            let each = (0..MANY)
                .map(|env| {
                    if env == 0 {
                        test_envs::faulty_kwargs(FAULT_AT, Fault::Hang)
                    } else {
                        Kwargs::new()
                    }
                })
                .collect();
            let pool = counters_each(config, each);
            let mut model = Model::of(MANY);
            let all: Vec<usize> = (0..MANY).collect();
            plain_rounds(&pool, config, &all, FAULT_AT as usize - 1, &mut model);
            let latency = the_others_arrive(&pool, config, 0, &mut model);
            let timeout = Duration::from_millis(50);
            let start = Instant::now();
            let err = pool.async_step_recv_env(0, Some(timeout)).unwrap_err();
            let late = start.elapsed().saturating_sub(timeout);
            assert!(
                matches!(err, PoolError::EnvTimeout { env: 0, .. }),
                "{config:?}: {err}"
            );
            assert!(late < OVERSHOOT_BOUND, "{config:?}: {late:?} late");
            plain_rounds(&pool, config, &all[1..], 2, &mut model);
            let mut expected = vec![Some(FAULT_AT as i32 + 2); MANY];
            expected[0] = Some(FAULT_AT as i32 - 1);
            assert_eq!(model.0, expected, "{config:?}");
            assert_eq!(pool.in_flight(), [0], "{config:?}");
            let took = shut_down(pool, config, &shm_before);
            report(
                "hung env 0 of 16",
                config,
                &format!("the other 15 after {latency:.1?}; its receive timed out {late:.1?} past its deadline"),
                took,
            );
        }
    });
}
