//! The pool on the threading backend: the conformance suite (which ports
//! TorchRL's `TestAsyncEnvPool` behaviour and covers docs/design.md's semantics
//! table) run with one worker thread and with two, then what only the
//! threading backend has: closure envs, its exact error variants, and its
//! exchange report.

#[macro_use]
mod common;

use pool::envs::{CountingEnv, Env, EnvError, Kwargs};
use pool::tensordict::{NestedKey, TensorDict, TensorDictError};
use pool::{
    Affinity, AffinityError, AsyncEnvPool, Backend, EnvFailure, EnvMaker, PoolBuilder, PoolError,
    ResolvedExchange, StackMode, Target, ThreadError,
};

use common::test_envs::{self, fault_message, faulty_kwargs, Fault, OnStep, Stateful, FAULTY};
use common::{action, int_at, watchdog};

/// One worker thread for every env: envs wait their turn.
fn one_thread(builder: PoolBuilder) -> PoolBuilder {
    builder.backend(common::threads(1))
}

/// Two worker threads.
fn two_threads(builder: PoolBuilder) -> PoolBuilder {
    builder.backend(common::threads(2))
}

// The conformance suite with one worker thread and with two.
conformance!(one_worker_thread, one_thread);
conformance!(two_worker_threads, two_threads);

/// The pool may be shared between threads (`Arc`, scoped threads).
#[test]
fn the_pool_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<AsyncEnvPool>();
    assert_send_sync::<PoolError>();
}

/// Worker threads may be pinned (DESIGN: affinity for threads too): each
/// pins itself before it steps an env, so an env sees the CPU set of the
/// thread that steps it; a bad set fails the build, naming the worker.
#[test]
fn worker_threads_are_pinned_to_their_cpus() {
    watchdog(|| {
        test_envs::register();
        let available = pool::available_cpus().unwrap();
        let pinned = |threads: usize, affinity: Affinity| {
            AsyncEnvPool::builder()
                .backend(Backend::Threading(
                    pool::ThreadOptions::default()
                        .threads(threads)
                        .affinity(affinity),
                ))
                .registered_n(test_envs::WHERE_AM_I, 4, Kwargs::new())
                .build()
        };
        // One thread on the first available CPU (CPU 0 on most machines):
        // every env reports that CPU alone, from this process.
        let first = available[0];
        let pool = pinned(1, Affinity::per_worker([[first]])).unwrap();
        for _ in 0..3 {
            let root = pool.reset(None).unwrap().into_dense().unwrap();
            let obs = root.tensor("observation").unwrap().to_vec::<i64>().unwrap();
            for env in obs.chunks(3) {
                assert_eq!(env, [1, first as i64, i64::from(std::process::id())]);
            }
        }
        // Two threads spread over the available CPUs: an env stepped by
        // either reports one CPU, one of the two.
        let spread: Vec<usize> = (0..2).map(|w| available[w % available.len()]).collect();
        let sets = spread.clone();
        let pool = pinned(2, Affinity::by_worker(move |w| [sets[w]])).unwrap();
        let root = pool.reset(None).unwrap().into_dense().unwrap();
        let obs = root.tensor("observation").unwrap().to_vec::<i64>().unwrap();
        for env in obs.chunks(3) {
            assert_eq!(env[0], 1, "{obs:?}");
            assert!(spread.contains(&(env[1] as usize)), "{obs:?}");
        }
        // A set per thread, checked before anything is built.
        let err = pinned(2, Affinity::per_worker([[first]])).unwrap_err();
        assert!(
            matches!(
                err,
                PoolError::Backend(ThreadError::Affinity(AffinityError::Count {
                    sets: 1,
                    workers: 2
                }))
            ),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "worker thread CPU affinity: 1 CPU sets for 2 workers: give one set per worker"
        );
    });
}

/// Threads have no shared-memory exchange: `Queue`, no exchange keys, no
/// exchange statistics (with or without a reset of the counters).
#[test]
fn threads_report_the_queue_exchange() {
    let pool = AsyncEnvPool::builder()
        .backend(Backend::default())
        .registered_n("CountingEnv", 3, Kwargs::new())
        .build()
        .unwrap();
    assert_eq!(
        Backend::default(),
        Backend::Threading(pool::ThreadOptions::default())
    );
    assert_eq!(pool.resolved_exchange(), ResolvedExchange::Queue);
    assert!(pool.exchange_keys().is_empty());
    pool.step(common::actions(&[1; 3])).unwrap();
    assert_eq!(pool.stats(false), None);
    assert_eq!(pool.stats(true), None);
    assert_eq!(pool.stats(false), None);
}

/// Envs built by closures and makers, next to registered ones.
#[test]
fn closure_envs_and_makers() {
    watchdog(|| {
        let pool = AsyncEnvPool::builder()
            .backend(common::threads(2))
            .env(|| Ok(Box::new(CountingEnv::new(5, 100)) as Box<dyn Env>))
            .maker(EnvMaker::registry(
                "CountingEnv",
                Kwargs::new().with("start_val", 7),
            ))
            .maker(EnvMaker::closure(|| {
                Ok(Box::new(CountingEnv::new(-2, 100)) as Box<dyn Env>)
            }))
            .build()
            .unwrap();
        assert_eq!(pool.env_names(), ["CountingEnv"; 3]);
        let root = pool.reset(None).unwrap().into_dense().unwrap();
        let obs = root.tensor("observation").unwrap().to_vec::<i32>().unwrap();
        assert_eq!(obs, vec![5, 7, -2]);
        assert!(
            format!("{:?}", EnvMaker::registry("CountingEnv", Kwargs::new()))
                .contains("CountingEnv")
        );
    });
}

/// On threads an env's failure is a `ThreadError` naming the env by index
/// and name: `Panicked` with the panic message, `Env` with the env's error,
/// `Input` with the missing key; a constructor's failure is `Build` or
/// `BuildPanicked`.
#[test]
fn env_failures_are_thread_errors() {
    watchdog(|| {
        test_envs::register();
        let pool = AsyncEnvPool::builder()
            .backend(common::threads(2))
            .registered_each(
                FAULTY,
                2,
                vec![
                    faulty_kwargs(1, Fault::Panic),
                    faulty_kwargs(1, Fault::Error),
                ],
            )
            .build()
            .unwrap();
        pool.reset(None).unwrap();

        pool.async_step_send(action(1), Target::Env(0)).unwrap();
        match pool.async_step_recv_env(0, None).unwrap_err() {
            PoolError::EnvFailed {
                env,
                name,
                worker: None,
                during,
                cause,
            } => {
                assert_eq!((env, name.as_str(), during.as_str()), (0, FAULTY, "step"));
                let EnvFailure::Threads(err) = cause else {
                    panic!("expected the threading backend's error, got {cause:?}");
                };
                let ThreadError::Panicked { message, .. } = *err else {
                    panic!("expected a panic, got {err:?}");
                };
                assert_eq!(message, fault_message(Fault::Panic, 1));
            }
            other => panic!("expected Panicked, got {other:?}"),
        }

        pool.async_step_send(common::actions(&[1]), Target::Envs(vec![1]))
            .unwrap();
        let err = pool
            .async_step_recv(pool::Recv::new())
            .expect_err("env 1 fails");
        match &err {
            PoolError::EnvFailed {
                env,
                name,
                worker: None,
                during,
                cause,
            } => {
                assert_eq!((*env, name.as_str(), during.as_str()), (1, FAULTY, "step"));
                let EnvFailure::Threads(err) = cause else {
                    panic!("expected the threading backend's error, got {cause:?}");
                };
                let ThreadError::Env { source, .. } = &**err else {
                    panic!("expected the env's error, got {err:?}");
                };
                assert_eq!(
                    **source,
                    EnvError::failed(FAULTY, fault_message(Fault::Error, 1))
                );
            }
            other => panic!("expected Env, got {other:?}"),
        }
        assert_eq!(
            err.to_string(),
            "env 1 (FaultyCounter) failed during step: FaultyCounter: deliberate error at step 1"
        );
        // The backend's own error is the source, and its own source is the
        // env's error.
        let source = std::error::Error::source(&err).expect("a source");
        assert!(source.downcast_ref::<EnvFailure>().is_some(), "{source:?}");
        let env_error = source.source().expect("the env's error");
        assert_eq!(
            env_error.to_string(),
            "FaultyCounter: deliberate error at step 1"
        );

        match pool
            .async_step_send(TensorDict::new(&[]), Target::Env(1))
            .unwrap_err()
        {
            PoolError::Input { env, name, source } => {
                assert_eq!((env, name.as_str()), (1, FAULTY));
                assert!(
                    matches!(*source, TensorDictError::KeyNotFound { ref key, .. }
                        if *key == NestedKey::from("action")),
                    "{source:?}"
                );
            }
            other => panic!("expected Input, got {other:?}"),
        }
        // Both envs work after their failure.
        let out = pool.step(common::actions(&[1, 1])).unwrap();
        let obs = out.get_tensor(("next", "observation")).unwrap();
        assert_eq!(obs.to_vec::<i32>().unwrap(), vec![1, 1]);

        let err = AsyncEnvPool::builder()
            .registered_n("CountingEnv", 1, Kwargs::new())
            .env(|| panic!("no env today"))
            .build()
            .unwrap_err();
        assert_eq!(
            err,
            PoolError::Backend(ThreadError::BuildPanicked {
                env: 1,
                message: "no env today".into()
            })
        );
        let err = AsyncEnvPool::builder()
            .env(|| Err(EnvError::failed("Mine", "nope")))
            .build()
            .unwrap_err();
        assert_eq!(
            err,
            PoolError::Backend(ThreadError::Build {
                env: 0,
                source: Box::new(EnvError::failed("Mine", "nope"))
            })
        );
        assert_eq!(err.to_string(), "env 0: could not be built: Mine: nope");
    });
}

/// The pool's state spec carries `env_index` also when the envs' state
/// specs differ (lazy stacking of a plain CountingEnv next to one with a
/// state entry).
#[test]
fn env_index_is_in_the_state_spec_of_envs_with_different_state_keys() {
    let pool = AsyncEnvPool::builder()
        .backend(common::threads(1))
        .env(|| Ok(Box::new(CountingEnv::new(0, 100)) as Box<dyn Env>))
        .env(|| Ok(Box::new(Stateful::new()) as Box<dyn Env>))
        .stack(StackMode::Lazy)
        .build()
        .expect("lazy stacking allows different state specs");
    let state = pool.full_state_spec();
    // Dense state specs carry one env_index entry of shape [num_envs]; a
    // lazy stack carries one in each env's part.
    let has_env_index = match (state.as_composite(), state.as_stacked()) {
        (Some(composite), _) => composite.contains("env_index"),
        (None, Some(stacked)) => stacked
            .parts()
            .iter()
            .all(|part| part.as_composite().is_some_and(|c| c.contains("env_index"))),
        (None, None) => false,
    };
    assert!(has_env_index, "no env_index in the state spec: {state:?}");
    // The env_index of the pool's results is there regardless.
    let root = pool.reset(None).unwrap();
    assert_eq!(common::env_index(&root), vec![0, 1]);
    assert_eq!(int_at(&root.index(1).unwrap(), &["observation"]), 0);
}

/// A CountingEnv that, from its `shift_at`-th step on, writes its
/// observation with another shape (an env that breaks its own layout).
fn shapeshifter(shift_at: u32) -> Box<dyn Env> {
    let mut steps = 0;
    OnStep::boxed(CountingEnv::new(0, 100), move |inner, input, next| {
        inner.step_into(input, next)?;
        steps += 1;
        if steps >= shift_at {
            next.set("observation", pool::tensordict::Tensor::full(&[2], 0i32))?;
        }
        Ok(())
    })
}

/// An env whose step result stops fitting the pool's batch rows during a
/// step_and_maybe_reset that resets nothing (its next root is then taken
/// from its own buffers, not its batch row) fails alone: the error names
/// it, the other env's result is still there to take, and the pool goes on.
#[test]
fn an_env_that_breaks_its_layout_fails_alone_in_a_dense_step_and_maybe_reset() {
    watchdog(|| {
        let pool = AsyncEnvPool::builder()
            .backend(common::threads(2))
            .env(|| Ok(Box::new(CountingEnv::new(0, 100)) as Box<dyn Env>))
            .env(|| Ok(shapeshifter(2)))
            .build()
            .unwrap();
        pool.reset(None).unwrap();
        pool.step_and_maybe_reset(common::actions(&[1, 1])).unwrap();
        let err = pool
            .step_and_maybe_reset(common::actions(&[1, 1]))
            .unwrap_err();
        assert!(err.to_string().contains("env 1"), "{err}");
        // Env 1 was reported and released; env 0's result waits alone.
        assert_eq!(pool.in_flight(), vec![0]);
        let (step, _root) = pool
            .async_step_and_maybe_reset_recv(pool::Recv::new().min_get(1))
            .unwrap();
        assert_eq!(
            step.get_non_tensor("env_index").unwrap().as_int_vec(),
            Some(vec![0])
        );
        assert!(pool.in_flight().is_empty());
    });
}

/// A CountingEnv that writes its observation as a new tensor of the same
/// shape each step, replacing its buffer's (an env written against
/// `TensorDict::set` rather than in place).
fn replacer() -> Box<dyn Env> {
    OnStep::boxed(CountingEnv::new(0, 3), move |inner, input, next| {
        inner.step_into(input, next)?;
        let value = next.tensor("observation")?.to_vec::<i32>()?;
        next.set(
            "observation",
            pool::tensordict::Tensor::from_vec(&[value.len()], value)?,
        )?;
        Ok(())
    })
}

/// Envs that replace their result's tensors rather than write them in
/// place give the results of envs that do not, in every kind of receive:
/// synchronous steps and step-and-maybe-resets (roots taken from the step
/// or reset), and receives of some envs.
#[test]
fn envs_that_replace_their_tensors_give_the_same_results() {
    watchdog(|| {
        let build = |replace: bool| {
            let mut builder = AsyncEnvPool::builder().backend(common::threads(2));
            for _ in 0..4 {
                builder = if replace {
                    builder.env(|| Ok(replacer()))
                } else {
                    builder.env(|| Ok(Box::new(CountingEnv::new(0, 3)) as Box<dyn Env>))
                };
            }
            builder.build().unwrap()
        };
        let (plain, replacing) = (build(false), build(true));
        let observations = |batch: &pool::Batch| {
            batch
                .get_tensor(("next", "observation"))
                .unwrap()
                .to_vec::<i32>()
                .unwrap()
        };
        let roots = |batch: &pool::Batch| {
            batch
                .get_tensor("observation")
                .unwrap()
                .to_vec::<i32>()
                .unwrap()
        };
        for pool in [&plain, &replacing] {
            pool.reset(None).unwrap();
        }
        for round in 0..6 {
            let a = plain.step(common::actions(&[1, 1, 1, 1])).unwrap();
            let b = replacing.step(common::actions(&[1, 1, 1, 1])).unwrap();
            assert_eq!(observations(&a), observations(&b), "step {round}");
            let (a, ar) = plain
                .step_and_maybe_reset(common::actions(&[1, 1, 1, 1]))
                .unwrap();
            let (b, br) = replacing
                .step_and_maybe_reset(common::actions(&[1, 1, 1, 1]))
                .unwrap();
            assert_eq!(
                observations(&a),
                observations(&b),
                "step_and_maybe_reset {round}"
            );
            assert_eq!(roots(&ar), roots(&br), "roots {round}");
        }
        // Some envs at a time: two sent, then received one by one batch.
        for pool in [&plain, &replacing] {
            pool.async_step_and_maybe_reset_send(
                common::actions(&[1, 1]),
                pool::Target::Envs(vec![1, 3]),
            )
            .unwrap();
        }
        let recv = pool::Recv::new().min_get(2);
        let (a, ar) = plain.async_step_and_maybe_reset_recv(recv).unwrap();
        let (b, br) = replacing.async_step_and_maybe_reset_recv(recv).unwrap();
        assert_eq!(common::env_index(&b), vec![1, 3]);
        assert_eq!(observations(&a), observations(&b));
        assert_eq!(roots(&ar), roots(&br));
    });
}

/// Where the envs of [`spy_pool`] ran, and a gate that holds env 0.
#[derive(Default)]
struct Spy {
    /// The thread of every env step, in order.
    stepped_on: std::sync::Mutex<Vec<std::thread::ThreadId>>,
    /// While set, env 0's steps wait (at most 10 s).
    hold: std::sync::atomic::AtomicBool,
}

impl Spy {
    /// The env steps run by the calling thread since the last call.
    fn steps_here(&self) -> usize {
        let me = std::thread::current().id();
        let mut stepped_on = self.stepped_on.lock().unwrap();
        let here = stepped_on.iter().filter(|&&t| t == me).count();
        stepped_on.clear();
        here
    }

    fn hold(&self, hold: bool) {
        self.hold.store(hold, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A CountingEnv that tells its [`Spy`] which thread steps it (env
/// `index`), and takes at least `step_time` a step.
fn spy_env(index: usize, step_time: std::time::Duration, spy: std::sync::Arc<Spy>) -> Box<dyn Env> {
    OnStep::boxed(CountingEnv::new(0, 1000), move |inner, input, next| {
        spy.stepped_on
            .lock()
            .unwrap()
            .push(std::thread::current().id());
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while index == 0
            && spy.hold.load(std::sync::atomic::Ordering::SeqCst)
            && std::time::Instant::now() < until
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        if !step_time.is_zero() {
            std::thread::sleep(step_time);
        }
        inner.step_into(input, next)
    })
}

/// A pool of 8 [`spy_env`]s on `backend`, reset, then stepped 20 times (so
/// that it has seen how long they take).
fn spy_pool(
    spy: &std::sync::Arc<Spy>,
    backend: Backend,
    step_time: std::time::Duration,
) -> AsyncEnvPool {
    let mut builder = AsyncEnvPool::builder().backend(backend);
    for index in 0..8 {
        let spy = std::sync::Arc::clone(spy);
        builder = builder.env(move || Ok(spy_env(index, step_time, spy)));
    }
    let pool = builder.build().unwrap();
    pool.reset(None).unwrap();
    for _ in 0..20 {
        pool.step(common::actions(&[1; 8])).unwrap();
    }
    pool
}

/// Releases the spy's hold on env 0 after `after`, from another thread.
fn release_later(
    spy: &std::sync::Arc<Spy>,
    after: std::time::Duration,
) -> std::thread::JoinHandle<()> {
    let spy = std::sync::Arc::clone(spy);
    std::thread::spawn(move || {
        std::thread::sleep(after);
        spy.hold(false);
    })
}

/// A synchronous step whose receive may run queued envs itself (when the
/// pool has seen quick steps: in an optimized build) gives the same
/// results as one that waits: with one worker thread stuck in env 0, every
/// env's result, in order. (Who ran what depends on timing here; the
/// backend's own test forces the estimate and checks that the calling
/// thread ran envs.)
#[test]
fn a_synchronous_step_with_a_busy_worker_gives_every_result_in_order() {
    watchdog(|| {
        let spy = std::sync::Arc::new(Spy::default());
        let pool = spy_pool(&spy, common::threads(1), std::time::Duration::ZERO);
        spy.hold(true);
        let release = release_later(&spy, std::time::Duration::from_millis(100));
        let step = pool.step(common::actions(&[1; 8])).unwrap();
        release.join().unwrap();
        assert_eq!(common::env_index(&step), (0..8).collect::<Vec<_>>());
        // 20 steps in `spy_pool`, then this one: every count is 21.
        let obs = step.get_tensor(("next", "observation")).unwrap();
        assert_eq!(obs.to_vec::<i32>().unwrap(), vec![21; 8]);
    });
}

/// A receiver runs no env when it could return before all are done, when
/// envs are slow, or when the worker threads are pinned: a receive with a
/// deadline (it times out, though envs are queued), a receive of fewer
/// results than are in flight, a synchronous step of envs that take 20 us
/// each, and one of a pinned pool.
#[test]
fn receivers_that_may_not_wait_for_every_env_run_none() {
    watchdog(|| {
        let spy = std::sync::Arc::new(Spy::default());
        let pool = spy_pool(&spy, common::threads(1), std::time::Duration::ZERO);
        spy.steps_here();
        // A deadline: the worker is stuck in env 0, the others are queued.
        spy.hold(true);
        pool.async_step_send(common::actions(&[1; 8]), Target::All)
            .unwrap();
        let err = pool
            .async_step_recv(pool::Recv::all(8).timeout(std::time::Duration::from_millis(200)))
            .unwrap_err();
        assert!(matches!(err, PoolError::Timeout { .. }), "{err}");
        assert_eq!(spy.steps_here(), 0);
        spy.hold(false);
        // (A receive of all in flight may help.)
        pool.async_step_recv(pool::Recv::all(8)).unwrap();
        spy.steps_here();
        // Fewer results than in flight, no deadline.
        spy.hold(true);
        pool.async_step_send(common::actions(&[1; 8]), Target::All)
            .unwrap();
        let release = release_later(&spy, std::time::Duration::from_millis(200));
        let first = pool.async_step_recv(pool::Recv::new().min_get(1)).unwrap();
        release.join().unwrap();
        assert_eq!(spy.steps_here(), 0);
        // (A receive of all that are left may help.)
        let rest = 8 - common::env_index(&first).len();
        if rest > 0 {
            pool.async_step_recv(pool::Recv::all(rest)).unwrap();
        }
        spy.steps_here();
        // Slow envs (their 20 steps in `spy_pool` too).
        let slow = spy_pool(
            &spy,
            common::threads(1),
            std::time::Duration::from_micros(20),
        );
        slow.step(common::actions(&[1; 8])).unwrap();
        assert_eq!(spy.steps_here(), 0);
        // Pinned worker threads.
        let first_cpu = pool::available_cpus().unwrap()[0];
        let pinned = spy_pool(
            &spy,
            Backend::Threading(
                pool::ThreadOptions::default()
                    .threads(1)
                    .affinity(Affinity::per_worker([[first_cpu]])),
            ),
            std::time::Duration::ZERO,
        );
        spy.steps_here();
        spy.hold(true);
        let release = release_later(&spy, std::time::Duration::from_millis(200));
        pinned.step(common::actions(&[1; 8])).unwrap();
        release.join().unwrap();
        assert_eq!(spy.steps_here(), 0);
    });
}
