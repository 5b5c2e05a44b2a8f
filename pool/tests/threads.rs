//! The pool on the threading backend: the conformance suite (which ports
//! TorchRL's `TestAsyncEnvPool` behaviour and covers DESIGN.md's semantics
//! table) run with one worker thread and with two, then what only the
//! threading backend has: closure envs, its exact error variants, and its
//! exchange report.

mod common;

use pool::envs::{CountingEnv, Env, EnvError, EnvSpecs, Kwargs};
use pool::specs::{Composite, TensorSpec};
use pool::tensordict::{DType, NestedKey, TensorDict, TensorDictError};
use pool::{
    AsyncEnvPool, Backend, EnvMaker, PoolBuilder, PoolError, ResolvedExchange, StackMode, Target,
    ThreadError,
};

use common::test_envs::{self, fault_message, faulty_kwargs, Fault, FAULTY};
use common::{action, int_at, watchdog};

/// One worker thread for every env: envs wait their turn.
fn one_thread(builder: PoolBuilder) -> PoolBuilder {
    builder.backend(common::threads(1))
}

/// Two worker threads.
fn two_threads(builder: PoolBuilder) -> PoolBuilder {
    builder.backend(common::threads(2))
}

/// Expands each conformance test into a `#[test]` of module `$module`,
/// run under the watchdog with the backend `$configure`.
macro_rules! instantiate {
    ($module:ident, $configure:ident; $($(#[$attr:meta])* $name:ident),* $(,)?) => {
        mod $module {
            $(
                $(#[$attr])*
                #[test]
                fn $name() {
                    super::common::watchdog(|| super::common::conformance::$name(super::$configure));
                }
            )*
        }
    };
}

/// Runs each conformance test with one worker thread and with two.
macro_rules! conformance {
    ($($tests:tt)*) => {
        instantiate!(one_worker_thread, one_thread; $($tests)*);
        instantiate!(two_worker_threads, two_threads; $($tests)*);
    };
}

conformance! {
    specs_and_shapes,
    async_reset_and_step_with_min_get,
    poll_takes_at_most_one_result,
    poll_with_nothing_ready_times_out,
    deadline_batch_of_three,
    timeout_without_max_get_waits_for_every_env,
    deadline_returns_what_is_ready,
    max_get_below_min_get_is_rejected,
    full_batch_order_with_different_delays,
    step_and_maybe_reset_resets_done_envs,
    heterogeneous_envs_stack_lazily,
    heterogeneous_envs_are_an_error_when_dense,
    step_results_keep_the_sent_root,
    held_results_are_never_overwritten,
    collectors_drive_their_own_envs,
    concurrent_batch_receivers_take_each_result_once,
    a_batch_receive_whose_min_get_became_unreachable_fails,
    per_env_receive_takes_only_its_env,
    batch_receive_never_takes_a_per_env_send,
    out_of_order_sends_come_back_sorted,
    sends_with_different_env_index_kinds_stack_densely,
    a_batch_that_cannot_be_built_loses_nothing,
    env_panic_is_reported,
    env_error_is_reported,
    failure_in_a_sync_step_loses_nothing,
    bad_receive_arguments,
    busy_send_lists_the_busy_envs,
    out_of_range_envs_are_errors,
    duplicate_envs_are_errors,
    target_length_mismatch_is_an_error,
    env_index_target_errors,
    step_without_an_action_is_an_error,
    sync_calls_fail_while_envs_are_in_flight,
    per_env_receive_of_an_idle_env_is_an_error,
    per_env_timeout_keeps_the_result,
    batch_timeout_loses_nothing,
    build_errors,
    calls_after_shutdown_are_errors,
    drop_with_results_in_flight,
    shutdown_wakes_blocked_receivers,
}

/// The pool may be shared between threads (`Arc`, scoped threads).
#[test]
fn the_pool_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<AsyncEnvPool>();
    assert_send_sync::<PoolError>();
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
    assert_eq!(Backend::default(), Backend::Threading { threads: None });
    assert_eq!(pool.resolved_exchange(), ResolvedExchange::Queue);
    assert!(pool.exchange_keys().is_empty());
    pool.step(common::actions(&[1; 3])).unwrap();
    assert!(pool.stats(false).is_empty());
    assert!(pool.stats(true).is_empty());
    assert!(pool.stats(false).is_empty());
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
            PoolError::Backend(ThreadError::Panicked {
                env,
                name,
                during,
                message,
            }) => {
                assert_eq!((env, name.as_str(), during), (0, FAULTY, "step"));
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
            PoolError::Backend(ThreadError::Env {
                env,
                name,
                during,
                source,
            }) => {
                assert_eq!((*env, name.as_str(), *during), (1, FAULTY, "step"));
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

        match pool
            .async_step_send(TensorDict::new(&[]), Target::Env(1))
            .unwrap_err()
        {
            PoolError::Backend(ThreadError::Input { env, name, source }) => {
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

/// A CountingEnv with a state entry `"hidden"` (so its state spec differs
/// from a plain CountingEnv's).
struct Stateful {
    inner: CountingEnv,
    specs: EnvSpecs,
}

impl Stateful {
    fn new() -> Stateful {
        let inner = CountingEnv::new(0, 100);
        let own = inner.specs();
        let state = Composite::new(&[])
            .with("hidden", TensorSpec::unbounded(&[2], DType::F32))
            .unwrap();
        let specs = EnvSpecs::new(
            &[],
            own.full_action_spec().clone(),
            own.full_observation_spec().clone(),
            own.full_reward_spec().clone(),
            own.full_done_spec().clone(),
            state,
        )
        .unwrap();
        Stateful { inner, specs }
    }
}

impl Env for Stateful {
    fn specs(&self) -> &EnvSpecs {
        &self.specs
    }
    fn set_seed(&mut self, seed: u64) {
        self.inner.set_seed(seed);
    }
    fn reset_into(
        &mut self,
        input: Option<&TensorDict>,
        out: &mut TensorDict,
    ) -> Result<(), EnvError> {
        self.inner.reset_into(input, out)
    }
    fn step_into(&mut self, input: &TensorDict, next: &mut TensorDict) -> Result<(), EnvError> {
        self.inner.step_into(input, next)
    }
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
