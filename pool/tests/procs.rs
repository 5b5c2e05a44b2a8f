//! The pool on the process backend: the conformance suite on both
//! exchanges, then what only processes have.
//!
//! Workers are this test binary started again: the test [`rlpool_worker`]
//! registers the test envs and calls `pool::init()`; the pools start
//! workers with `libtest_worker_args("rlpool_worker")`, which run exactly
//! that test (and, in a worker, `init` never returns).

#[macro_use]
mod common;

use pool::envs::Kwargs;
use pool::{AsyncEnvPool, Backend, ExchangeMode, PoolBuilder, ProcOptions, ResolvedExchange};

/// The entry point of every worker of this binary; in the parent it only
/// registers the test envs.
#[test]
fn rlpool_worker() {
    common::test_envs::register();
    pool::init();
}

fn procs(exchange: ExchangeMode) -> Backend {
    Backend::Multiprocessing(ProcOptions::for_test("rlpool_worker").exchange(exchange))
}

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
