//! The pool on the process backend: the conformance suite on both
//! exchanges, then what only processes have.
//!
//! Workers are this test binary started again: the test [`rlpool_worker`]
//! registers the test envs and calls `pool::init()`; the pools start
//! workers with `libtest_worker_args("rlpool_worker")`, which run exactly
//! that test (and, in a worker, `init` never returns).

#[macro_use]
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use pool::envs::{CountingEnv, Env, Kwargs};
use pool::tensordict::StackedTensorDict;
use pool::{
    Affinity, AffinityError, AsyncEnvPool, Backend, ExchangeMode, PoolBuilder, PoolError,
    ProcError, ProcOptions, Recv, ResolvedExchange, StackMode, Target,
};

use common::test_envs::{self, WHERE_AM_I};
use common::{actions, all_gone, dev_shm, env_index, expect_err, gone, int_at, watchdog};

/// The entry point of every worker of this binary; in the parent it only
/// registers the test envs.
#[test]
fn rlpool_worker() {
    common::test_envs::register();
    pool::init();
}

fn options(exchange: ExchangeMode) -> ProcOptions {
    ProcOptions::for_test("rlpool_worker").exchange(exchange)
}

fn procs(exchange: ExchangeMode) -> Backend {
    Backend::Multiprocessing(options(exchange))
}

const EXCHANGES: [ExchangeMode; 2] = [ExchangeMode::Queue, ExchangeMode::Shm];

fn queue(builder: PoolBuilder) -> PoolBuilder {
    builder.backend(procs(ExchangeMode::Queue))
}

/// Shared-memory slots wherever the envs' data allows (the heterogeneous
/// pools of the suite fall back to the queue; forcing shm on them is an
/// error, tested below).
fn shm(builder: PoolBuilder) -> PoolBuilder {
    builder.backend(procs(ExchangeMode::Auto))
}

#[test]
fn smoke() {
    for (configure, expected) in [
        (
            queue as fn(PoolBuilder) -> PoolBuilder,
            ResolvedExchange::Queue,
        ),
        (shm, ResolvedExchange::Shm),
    ] {
        let pool = configure(AsyncEnvPool::builder())
            .registered_n("CountingEnv", 4, Kwargs::new())
            .build()
            .unwrap();
        assert_eq!(pool.resolved_exchange(), expected);
        assert_eq!(pool.env_batch_sizes(), vec![Vec::<usize>::new(); 4]);
        let root = pool.reset(None).unwrap().into_dense().unwrap();
        assert_eq!(root.batch_size(), &[4]);
        let step = pool
            .step(common::actions(&[1, 2, 3, 4]))
            .unwrap()
            .into_dense()
            .unwrap();
        assert_eq!(
            step.tensor(("next", "observation"))
                .unwrap()
                .to_vec::<i32>()
                .unwrap(),
            vec![1, 2, 3, 4]
        );
        pool.shutdown();
    }
}

// The conformance suite on both exchanges.
conformance!(queue_exchange, queue);
conformance!(shm_exchange, shm);

/// Closures cannot travel to a worker: a typed error that says to register
/// the env.
#[test]
fn closure_envs_need_the_registry() {
    let err = AsyncEnvPool::builder()
        .backend(procs(ExchangeMode::Queue))
        .registered_n("CountingEnv", 1, Kwargs::new())
        .env(|| Ok(Box::new(CountingEnv::new(0, 5)) as Box<dyn Env>))
        .build()
        .unwrap_err();
    assert_eq!(err, PoolError::NeedsRegistry { env: 1 });
    assert!(err.to_string().contains("register it"), "{err}");
}

/// Shm is refused for heterogeneous envs (naming the key and env); auto
/// falls back to the queue and says why; shm reports its keys.
#[test]
fn exchange_choice_and_report() {
    watchdog(|| {
        let mixed = |exchange| {
            AsyncEnvPool::builder()
                .backend(procs(exchange))
                .stack(StackMode::Lazy)
                .registered_n("CartPole-v1", 1, Kwargs::new())
                .registered_n("Pendulum-v1", 1, Kwargs::new())
                .build()
        };
        let err = mixed(ExchangeMode::Shm).unwrap_err();
        assert!(
            matches!(&err, PoolError::Proc(ProcError::ShmUnavailable { reason }) if reason.contains("\"action\"") && reason.contains("env 1")),
            "{err}"
        );
        let pool = mixed(ExchangeMode::Auto).unwrap();
        assert_eq!(pool.resolved_exchange(), ResolvedExchange::Queue);
        assert!(pool.exchange_reason().unwrap().contains("env 1"));
        assert!(pool.exchange_keys().is_empty());
        assert_eq!(pool.stats(false), None);
        pool.reset(None).unwrap();

        let pool = AsyncEnvPool::builder()
            .backend(procs(ExchangeMode::Auto))
            .registered_n("CartPole-v1", 2, Kwargs::new())
            .build()
            .unwrap();
        assert_eq!(pool.resolved_exchange(), ResolvedExchange::Shm);
        assert_eq!(pool.exchange_reason(), None);
        let keys: Vec<String> = pool
            .exchange_keys()
            .iter()
            .map(|k| format!("{k:?}"))
            .collect();
        for key in ["action", "observation", "reward", "done"] {
            assert!(
                keys.iter().any(|k| k.contains(key)),
                "{key} not in {keys:?}"
            );
        }
    });
}

/// A worker whose env cannot be built (bad keyword, constructor error) is
/// an error naming the env and worker; the pool is not built and every
/// worker started is reaped.
#[test]
fn a_failed_start_names_the_env_and_reaps_the_workers() {
    watchdog(|| {
        let before = dev_shm();
        let err = AsyncEnvPool::builder()
            .backend(Backend::Multiprocessing(
                options(ExchangeMode::Shm).envs_per_worker(2),
            ))
            .registered_n("CountingEnv", 3, Kwargs::new())
            .registered_n("CountingEnv", 1, Kwargs::new().with("no_such_kwarg", 1))
            .build()
            .unwrap_err();
        match &err {
            PoolError::Proc(ProcError::Build {
                env: 3,
                worker: 1,
                name,
                panicked: false,
                message,
            }) => {
                assert_eq!(name, "CountingEnv");
                assert!(message.contains("no_such_kwarg"), "{message}");
            }
            other => panic!("expected a build error of env 3, got {other}"),
        }
        assert!(
            err.to_string().starts_with("env 3 (CountingEnv, worker 1)"),
            "{err}"
        );
        assert_eq!(dev_shm(), before);
    });
}

/// A constructor that panics in its worker, and a worker that exits
/// before its handshake: errors naming the env or the worker (with its exit
/// status), and the pool is not built.
#[test]
fn workers_that_fail_to_start() {
    watchdog(|| {
        test_envs::register();
        let err = AsyncEnvPool::builder()
            .backend(procs(ExchangeMode::Queue))
            .registered_n("CountingEnv", 1, Kwargs::new())
            .registered_n(test_envs::PANICS_WHEN_BUILT, 1, Kwargs::new())
            .build()
            .unwrap_err();
        assert!(
            matches!(&err, PoolError::Proc(ProcError::Build { env: 1, worker: 1, panicked: true, message, .. }) if message == "deliberate panic in a constructor"),
            "{err}"
        );
        assert!(
            err.to_string().contains("(its constructor panicked)"),
            "{err}"
        );

        // A program that does not exist.
        let err = AsyncEnvPool::builder()
            .backend(Backend::Multiprocessing(
                options(ExchangeMode::Queue).program("/nonexistent/rlpool-worker"),
            ))
            .registered_n("CountingEnv", 2, Kwargs::new())
            .build()
            .unwrap_err();
        assert!(
            matches!(&err, PoolError::Proc(ProcError::Spawn { worker: 0, program, .. }) if program == "/nonexistent/rlpool-worker"),
            "{err}"
        );
        assert!(err.to_string().contains("No such file"), "{err}");

        // A worker that runs no init (its arguments name no test) exits at
        // once: the handshake reports it.
        let err = AsyncEnvPool::builder()
            .backend(Backend::Multiprocessing(
                options(ExchangeMode::Queue).worker_args(["no_such_test", "--exact"]),
            ))
            .registered_n("CountingEnv", 2, Kwargs::new())
            .build()
            .unwrap_err();
        match &err {
            // Whichever worker is found gone first (at its hello or its
            // answer), with its env and exit status.
            PoolError::Proc(ProcError::Start {
                worker,
                envs,
                reason,
            }) => {
                assert_eq!(envs, &[*worker]);
                assert!(reason.contains("exit status: 0"), "{reason}");
            }
            other => panic!("expected a start error, got {other}"),
        }
    });
}

/// Affinity is checked before anything starts, with errors naming the
/// worker; a worker pinned to a CPU runs its envs there.
#[test]
fn affinity_is_checked_then_applied() {
    watchdog(|| {
        let with = |affinity: Affinity| {
            AsyncEnvPool::builder()
                .backend(Backend::Multiprocessing(
                    options(ExchangeMode::Queue).affinity(affinity),
                ))
                .registered_n(WHERE_AM_I, 2, Kwargs::new())
                .build()
        };
        test_envs::register();
        let err = with(Affinity::per_worker([[0]])).unwrap_err();
        assert!(
            matches!(
                err,
                PoolError::Proc(ProcError::Affinity(AffinityError::Count {
                    sets: 1,
                    workers: 2
                }))
            ),
            "{err}"
        );
        let err = with(Affinity::per_worker([vec![0], vec![]])).unwrap_err();
        assert_eq!(err.to_string(), "worker 1: empty CPU set");
        let available = pool::available_cpus().unwrap();
        let first = available[0];
        let pool = with(Affinity::by_worker(move |_| vec![first])).unwrap();
        let root = pool.reset(None).unwrap().into_dense().unwrap();
        let obs = root.tensor("observation").unwrap().to_vec::<i64>().unwrap();
        // Each env: one CPU, the one asked for, in its own worker process.
        assert_eq!((obs[0], obs[1]), (1, first as i64));
        assert_eq!((obs[3], obs[4]), (1, first as i64));
        let pids = pool.worker_pids();
        assert_eq!(obs[2], i64::from(pids[0]));
        assert_eq!(obs[5], i64::from(pids[1]));
    });
}

/// Without an affinity the workers are spread over this process's CPUs:
/// one group each, as long as they are no more than the CPUs; more
/// workers than CPUs, or `spread_workers(false)`, leave them every CPU.
#[test]
fn workers_are_spread_over_the_cpus_unless_told_not_to() {
    watchdog(|| {
        test_envs::register();
        let available = pool::available_cpus().unwrap();
        let cpus_of_envs = |options: ProcOptions, n: usize| {
            let pool = AsyncEnvPool::builder()
                .backend(Backend::Multiprocessing(options))
                .registered_n(WHERE_AM_I, n, Kwargs::new())
                .build()
                .unwrap();
            let root = pool.reset(None).unwrap().into_dense().unwrap();
            let obs = root.tensor("observation").unwrap().to_vec::<i64>().unwrap();
            // Per env: how many CPUs it may use, and the first of them.
            obs.chunks(3)
                .map(|o| (o[0] as usize, o[1] as usize))
                .collect::<Vec<_>>()
        };
        let two = cpus_of_envs(options(ExchangeMode::Queue), 2);
        if available.len() >= 2 {
            let half = available.len() / 2;
            assert_eq!(
                two,
                [
                    (half, available[0]),
                    (available.len() - half, available[half])
                ]
            );
        } else {
            assert_eq!(two, [(1, available[0]); 2]);
        }
        let unspread = cpus_of_envs(options(ExchangeMode::Queue).spread_workers(false), 2);
        assert_eq!(unspread, [(available.len(), available[0]); 2]);
        let crowd = available.len() + 1;
        let crowded = cpus_of_envs(options(ExchangeMode::Queue), crowd);
        assert_eq!(crowded, vec![(available.len(), available[0]); crowd]);
    });
}

/// Several envs share a worker (each on its own thread there): 8 envs on
/// 2 workers step correctly, on both exchanges.
#[test]
fn eight_envs_on_two_workers() {
    watchdog(|| {
        test_envs::register();
        for exchange in EXCHANGES {
            let pool = AsyncEnvPool::builder()
                .backend(Backend::Multiprocessing(
                    options(exchange).envs_per_worker(4),
                ))
                .registered_n(WHERE_AM_I, 8, Kwargs::new())
                .build()
                .unwrap();
            let pids = pool.worker_pids();
            assert_eq!(pids.len(), 2);
            let root = pool.reset(None).unwrap().into_dense().unwrap();
            let obs = root.tensor("observation").unwrap().to_vec::<i64>().unwrap();
            let env_pids: Vec<i64> = obs.chunks(3).map(|o| o[2]).collect();
            let expected: Vec<i64> = (0..8).map(|e| i64::from(pids[e / 4])).collect();
            assert_eq!(env_pids, expected);

            let counters = AsyncEnvPool::builder()
                .backend(Backend::Multiprocessing(
                    options(exchange).envs_per_worker(4),
                ))
                .registered_each(
                    "CountingEnv",
                    8,
                    (0..8)
                        .map(|i| Kwargs::new().with("start_val", i).with("max_steps", 1000))
                        .collect(),
                )
                .build()
                .unwrap();
            counters.reset(None).unwrap();
            for step in 1..=20 {
                counters
                    .async_step_send(actions(&[1; 8]), Target::All)
                    .unwrap();
                let mut seen = 0;
                while seen < 8 {
                    let batch = counters.async_step_recv(Recv::new().min_get(1)).unwrap();
                    let batch = batch.into_dense().unwrap();
                    let obs = batch
                        .tensor(("next", "observation"))
                        .unwrap()
                        .to_vec::<i32>()
                        .unwrap();
                    for (env, value) in env_index(&StackedTensorDict::Dense(batch))
                        .into_iter()
                        .zip(obs)
                    {
                        assert_eq!(value, env as i32 + step);
                        seen += 1;
                    }
                }
            }
        }
    });
}

/// A worker killed with SIGKILL: the receive that concerns it returns an
/// error naming the worker and its envs (a receive with no deadline too),
/// the other worker's envs go on, and shutdown reaps everyone.
#[test]
fn a_killed_worker_is_an_error_never_a_hang() {
    watchdog(|| {
        for exchange in EXCHANGES {
            let before = dev_shm();
            let pool = AsyncEnvPool::builder()
                .backend(Backend::Multiprocessing(
                    options(exchange).envs_per_worker(2),
                ))
                .registered_n("CountingEnv", 4, Kwargs::new().with("max_steps", 1000))
                .build()
                .unwrap();
            pool.reset(None).unwrap();
            let pids = pool.worker_pids();
            let killed = Command::new("kill")
                .args(["-9", &pids[0].to_string()])
                .status()
                .unwrap();
            assert!(killed.success());
            pool.async_step_send(actions(&[1; 4]), Target::All).unwrap();
            let start = Instant::now();
            let mut died = Vec::new();
            let mut ok = Vec::new();
            while died.len() + ok.len() < 4 {
                // No deadline: must return anyway.
                match pool.async_step_recv(Recv::new()) {
                    Ok(batch) => ok.extend(env_index(&batch)),
                    Err(PoolError::WorkerDied {
                        worker,
                        envs,
                        reason,
                    }) => {
                        assert_eq!((worker, &envs), (0, &vec![0, 1]), "{reason}");
                        assert!(reason.contains("signal: 9"), "{reason}");
                        died.push(worker);
                    }
                    Err(other) => panic!("unexpected error: {other}"),
                }
            }
            let elapsed = start.elapsed();
            assert_eq!(died.len(), 2, "one error per env of the dead worker");
            ok.sort_unstable();
            assert_eq!(ok, [2, 3]);
            // Generous bound for a loaded machine; it is reported at once.
            assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
            // Its envs keep failing at once; the others keep working.
            pool.async_step_send(actions(&[1; 2]), Target::Envs(vec![1, 3]))
                .unwrap();
            let err = expect_err(pool.async_step_recv_env(1, None), "dead env");
            assert!(
                err.to_string().contains("worker 0 (envs [0, 1]) died"),
                "{err}"
            );
            let out = pool
                .async_step_recv_env(3, Some(Duration::from_secs(10)))
                .unwrap();
            assert_eq!(int_at(&out, &["next", "observation"]), 2);
            pool.shutdown();
            assert!(
                all_gone(&pids, Duration::from_secs(5)),
                "workers left: {pids:?}"
            );
            assert_eq!(dev_shm(), before);
        }
    });
}

/// Shutdown (explicit or on drop) reaps every worker, on both exchanges;
/// nothing appears under /dev/shm.
#[test]
fn shutdown_and_drop_reap_every_worker() {
    watchdog(|| {
        let before = dev_shm();
        for exchange in EXCHANGES {
            let pool = AsyncEnvPool::builder()
                .backend(Backend::Multiprocessing(
                    options(exchange).envs_per_worker(2),
                ))
                .registered_n("CartPole-v1", 4, Kwargs::new())
                .build()
                .unwrap();
            pool.reset(None).unwrap();
            // Results left in flight.
            pool.async_step_send(actions(&[1; 4]), Target::All).unwrap();
            let pids = pool.worker_pids();
            assert!(pids.iter().all(|&p| !gone(p)));
            drop(pool);
            assert!(
                all_gone(&pids, Duration::from_secs(5)),
                "workers left: {pids:?}"
            );
        }
        assert_eq!(dev_shm(), before);
    });
}

/// Set (to "panic" or "abort") in a child test process: see
/// `workers_die_with_a_parent_that_panics_or_aborts`.
const DOOMED: &str = "RLPOOL_TEST_DOOMED_PARENT";

/// In a child test process: builds a pool, prints its workers' pids, then
/// panics or aborts with the pool alive. Elsewhere: nothing.
#[test]
fn doomed_parent() {
    let Ok(how) = std::env::var(DOOMED) else {
        return;
    };
    let pool = AsyncEnvPool::builder()
        .backend(procs(ExchangeMode::Shm))
        .registered_n("CountingEnv", 2, Kwargs::new())
        .build()
        .unwrap();
    pool.reset(None).unwrap();
    let pids: Vec<String> = pool.worker_pids().iter().map(u32::to_string).collect();
    println!("worker pids: {}", pids.join(" "));
    if how == "abort" {
        std::process::abort();
    }
    panic!("deliberate panic with the pool alive");
}

/// A parent process that panics (unwinding drops the pool) or aborts (no
/// drop at all: the parent-death signal and the socket's end) leaves no
/// worker behind.
#[test]
fn workers_die_with_a_parent_that_panics_or_aborts() {
    watchdog(|| {
        for how in ["panic", "abort"] {
            let out = Command::new(std::env::current_exe().unwrap())
                .args([
                    "doomed_parent",
                    "--exact",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env(DOOMED, how)
                .output()
                .unwrap();
            assert!(!out.status.success(), "{how}: the parent was to fail");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let pids: Vec<u32> = stdout
                .lines()
                .find_map(|l| l.split_once("worker pids: ").map(|(_, pids)| pids))
                .unwrap_or_else(|| panic!("{how}: no pids in {stdout}"))
                .split_whitespace()
                .map(|p| p.parse().unwrap())
                .collect();
            assert_eq!(pids.len(), 2);
            assert!(
                all_gone(&pids, Duration::from_secs(10)),
                "{how}: workers left: {pids:?}"
            );
        }
    });
}

/// TorchRL's deadline batching with statistics on the shm exchange: a poll
/// (`max_get` 4, timeout 0) takes the one reset ready, a receive of exactly
/// three takes the rest: two batches, four items, a fill ratio of 4/7, half
/// the batches partial, and no consumer busy time (resets do not wait for
/// actions).
#[test]
fn deadline_batching_statistics() {
    watchdog(|| {
        let pool = AsyncEnvPool::builder()
            .backend(procs(ExchangeMode::Shm))
            .registered_n("CountingEnv", 4, Kwargs::new())
            .build()
            .unwrap();
        pool.reset(None).unwrap();
        pool.stats(true);
        pool.async_reset_send(None, Target::Envs(vec![1])).unwrap();
        let poll = Recv::new().min_get(1).max_get(4).timeout(Duration::ZERO);
        let first = loop {
            // A poll that finds nothing ready is no batch.
            match pool.async_reset_recv(poll) {
                Ok(batch) => break batch,
                Err(PoolError::Timeout { .. }) => std::thread::yield_now(),
                Err(other) => panic!("{other}"),
            }
        };
        assert_eq!(env_index(&first), [1]);
        pool.async_reset_send(None, Target::Envs(vec![0, 2, 3]))
            .unwrap();
        let rest = pool
            .async_reset_recv(
                Recv::new()
                    .min_get(3)
                    .max_get(3)
                    .timeout(Duration::from_secs(10)),
            )
            .unwrap();
        assert_eq!(env_index(&rest), [0, 2, 3]);
        let stats = pool.stats(true).expect("the shm exchange keeps statistics");
        assert_eq!(stats.batches, 2);
        assert_eq!(stats.items, 4);
        assert_eq!(stats.avg_batch_size, 2.0);
        assert!(
            (stats.batch_fill_ratio - 4.0 / 7.0).abs() < 1e-9,
            "{stats:?}"
        );
        assert_eq!(stats.partial_batch_fraction, 0.5);
        assert_eq!(stats.consumer_busy_fraction, 0.0);
        let map = stats.to_map();
        assert_eq!(map["batches"], pool::StatValue::Count(2));
        assert_eq!(map["items"], pool::StatValue::Count(4));
        assert_eq!(pool.stats(false).map(|s| s.batches), Some(0));
    });
}

/// Results own their storage: a lazy batch and a per-env result taken
/// over shm keep their values while their envs step on.
#[test]
fn results_taken_over_shm_keep_their_values() {
    watchdog(|| {
        let pool = AsyncEnvPool::builder()
            .backend(procs(ExchangeMode::Shm))
            .stack(StackMode::Lazy)
            .registered_n("CountingEnv", 2, Kwargs::new().with("max_steps", 1000))
            .build()
            .unwrap();
        pool.reset(None).unwrap();
        pool.async_step_send(actions(&[1, 1]), Target::All).unwrap();
        let batch = pool.async_step_recv(Recv::all(2)).unwrap();
        pool.async_step_send(actions(&[1; 1]).index(0).unwrap(), Target::Env(0))
            .unwrap();
        let held = pool.async_step_recv_env(0, None).unwrap();
        for _ in 0..2 {
            pool.step(actions(&[5, 5])).unwrap();
        }
        let dense = batch.into_dense().unwrap();
        let obs = dense
            .tensor(("next", "observation"))
            .unwrap()
            .to_vec::<i32>()
            .unwrap();
        assert_eq!(obs, vec![1, 1]);
        assert_eq!(int_at(&held, &["next", "observation"]), 2);
    });
}

/// An env stuck in a step does not stop the other envs of its worker (a
/// spare runner takes their commands), its receive times out and loses
/// nothing, and shutdown still reaps the worker within its deadline.
#[test]
fn a_stuck_env_does_not_stop_its_neighbours() {
    watchdog(|| {
        test_envs::register();
        for exchange in EXCHANGES {
            let pool = AsyncEnvPool::builder()
                .backend(Backend::Multiprocessing(
                    options(exchange)
                        .envs_per_worker(3)
                        .threads_per_worker(1)
                        .shutdown_timeout(Duration::from_millis(500)),
                ))
                .registered_n(
                    test_envs::FAULTY,
                    1,
                    test_envs::faulty_kwargs(1, test_envs::Fault::Hang),
                )
                .registered_n(test_envs::FAULTY, 2, Kwargs::new())
                .build()
                .unwrap();
            pool.reset(None).unwrap();
            pool.async_step_send(actions(&[1; 3]), Target::All).unwrap();
            let batch = pool
                .async_step_recv(
                    Recv::new()
                        .min_get(2)
                        .max_get(2)
                        .timeout(Duration::from_secs(20)),
                )
                .unwrap();
            assert_eq!(env_index(&batch), [1, 2]);
            let err = expect_err(
                pool.async_step_recv(Recv::new().timeout(Duration::from_millis(50))),
                "the stuck env",
            );
            assert!(matches!(err, PoolError::Timeout { ready: 0, .. }), "{err}");
            assert_eq!(pool.in_flight(), [0]);
            let pids = pool.worker_pids();
            let start = Instant::now();
            pool.shutdown();
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{:?}",
                start.elapsed()
            );
            assert!(all_gone(&pids, Duration::from_secs(5)));
        }
    });
}

/// With `max_threads_per_worker(1)` a worker starts no spare: while its one
/// runner is held inside env 0's step, envs 1 and 2 wait (their receive
/// times out, losing nothing), and they answer once env 0 is released.
/// What Python envs need: a spare would only fight for the GIL.
#[test]
fn no_spare_runner_past_the_cap() {
    watchdog(|| {
        test_envs::register();
        for exchange in EXCHANGES {
            let release = test_envs::Release::new();
            let pool = AsyncEnvPool::builder()
                .backend(Backend::Multiprocessing(
                    options(exchange)
                        .envs_per_worker(3)
                        .threads_per_worker(1)
                        .max_threads_per_worker(1),
                ))
                .registered_n(test_envs::FAULTY, 1, test_envs::held_kwargs(1, &release))
                .registered_n(test_envs::FAULTY, 2, Kwargs::new())
                .build()
                .unwrap();
            pool.reset(None).unwrap();
            // Env 0 first, so that the one runner is inside it.
            pool.async_step_send(actions(&[1]), Target::Envs(vec![0]))
                .unwrap();
            std::thread::sleep(Duration::from_millis(100));
            pool.async_step_send(actions(&[1, 1]), Target::Envs(vec![1, 2]))
                .unwrap();
            // Well past the watcher's stall time (1 ms): a spare would have
            // answered envs 1 and 2 by now.
            let err = expect_err(
                pool.async_step_recv(Recv::new().timeout(Duration::from_millis(300))),
                "envs 1 and 2 behind the held env",
            );
            assert!(matches!(err, PoolError::Timeout { ready: 0, .. }), "{err}");
            release.release();
            let batch = pool
                .async_step_recv(Recv::new().min_get(3).timeout(Duration::from_secs(20)))
                .unwrap();
            assert_eq!(env_index(&batch), [0, 1, 2]);
        }
    });
}

/// A worker killed in the middle of a step (a long one): the receive
/// waiting for it, with no deadline, returns the worker's death, at once
/// (its socket's end wakes the parent; nothing polls).
#[test]
fn a_worker_killed_mid_step_is_reported_at_once() {
    watchdog(|| {
        for exchange in EXCHANGES {
            let pool = AsyncEnvPool::builder()
                .backend(procs(exchange))
                .registered_n(
                    "LatencyEnv",
                    1,
                    Kwargs::new()
                        .with("step_us", 30_000_000)
                        .with("mode", "sleep"),
                )
                .build()
                .unwrap();
            pool.reset(None).unwrap();
            pool.async_step_send(actions(&[0]), Target::All).unwrap();
            let pid = pool.worker_pids()[0];
            let killer = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                let killed = Instant::now();
                Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status()
                    .unwrap();
                killed
            });
            let err = expect_err(pool.async_step_recv(Recv::new()), "killed mid-step");
            let reported = Instant::now();
            let killed = killer.join().unwrap();
            assert!(
                matches!(err, PoolError::WorkerDied { worker: 0, .. }),
                "{err}"
            );
            // Milliseconds from the start of the kill command (its own start
            // and exit included; docs/reliability.md); the bound is generous
            // for a loaded machine.
            let latency = reported.saturating_duration_since(killed);
            assert!(
                latency < Duration::from_secs(1),
                "{exchange:?}: {latency:?}"
            );
        }
    });
}
