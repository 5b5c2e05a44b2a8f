//! `pool::interruptible`: a wait ends when the check asks, loses nothing,
//! and the check runs only while a call blocks.

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use pool::envs::Kwargs;
use pool::tensordict::{Tensor, TensorDict};
use pool::{interruptible, AsyncEnvPool, PoolError, Recv, Target, CHECK_EVERY};

fn slow_pool(n: usize, step_us: u64) -> AsyncEnvPool {
    let kwargs = Kwargs::new()
        .with("step_us", step_us as i64)
        .with("mode", "sleep");
    let pool = AsyncEnvPool::builder()
        .registered_n("LatencyEnv", n, kwargs)
        .build()
        .unwrap();
    pool.reset(None).unwrap();
    pool
}

fn actions(n: usize) -> TensorDict {
    let mut td = TensorDict::new(&[n]);
    td.set("action", Tensor::full(&[n, 1], 0i64)).unwrap();
    td
}

#[test]
fn a_batch_receive_ends_when_the_check_asks_and_loses_nothing() {
    let pool = slow_pool(2, 1_500_000);
    pool.async_step_send(actions(2), Target::All).unwrap();
    let calls = Rc::new(Cell::new(0));
    let counted = calls.clone();
    let start = Instant::now();
    let err = interruptible(
        move || {
            counted.set(counted.get() + 1);
            true
        },
        || pool.async_step_recv(Recv::new().min_get(2)),
    )
    .unwrap_err();
    assert_eq!(err, PoolError::Interrupted);
    assert_eq!(calls.get(), 1);
    // Within a few check periods, well before the 1.5 s steps end.
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(pool.in_flight(), vec![0, 1]);
    let batch = pool.async_step_recv(Recv::new().min_get(2)).unwrap();
    assert_eq!(batch.env_indices(), &[0, 1]);
}

#[test]
fn a_per_env_receive_and_a_sync_step_end_too() {
    let pool = slow_pool(2, 1_000_000);
    pool.async_step_send(actions(2), Target::All).unwrap();
    let err = interruptible(|| true, || pool.async_step_recv_env(1, None)).unwrap_err();
    assert_eq!(err, PoolError::Interrupted);
    assert_eq!(
        pool.async_step_recv_env(1, None).unwrap().batch_size(),
        &[] as &[usize]
    );
    assert_eq!(
        pool.async_step_recv_env(0, None).unwrap().batch_size(),
        &[] as &[usize]
    );

    // A sync step interrupted leaves its envs in flight, for a receive.
    let err = interruptible(|| true, || pool.step(actions(2))).unwrap_err();
    assert_eq!(err, PoolError::Interrupted);
    assert!(matches!(
        pool.step(actions(2)),
        Err(PoolError::InFlight { .. })
    ));
    assert_eq!(
        pool.async_step_recv(Recv::new().min_get(2)).unwrap().len(),
        2
    );
}

#[test]
fn the_check_runs_only_while_a_call_blocks() {
    let pool = slow_pool(1, 0);
    let calls = Rc::new(Cell::new(0));
    let counted = calls.clone();
    let start = std::time::Instant::now();
    interruptible(
        move || {
            counted.set(counted.get() + 1);
            false
        },
        || {
            for _ in 0..100 {
                pool.step(actions(1)).unwrap();
            }
        },
    );
    // Quick steps: at most one check per CHECK_EVERY of blocking, not one
    // per step (the bound grows with the time taken: a loaded machine
    // makes the hundred steps slow).
    let bound = start.elapsed().as_millis() / CHECK_EVERY.as_millis() + 1;
    assert!(
        calls.get() as u128 <= bound.min(99),
        "{} checks in {:?}",
        calls.get(),
        start.elapsed()
    );

    // A check that never asks lets a slow receive finish.
    let pool = slow_pool(1, 3 * CHECK_EVERY.as_micros() as u64);
    pool.async_step_send(actions(1), Target::All).unwrap();
    let calls = Rc::new(Cell::new(0));
    let counted = calls.clone();
    let batch = interruptible(
        move || {
            counted.set(counted.get() + 1);
            false
        },
        || pool.async_step_recv(Recv::new()),
    )
    .unwrap();
    assert_eq!(batch.len(), 1);
    assert!(calls.get() >= 1, "the check ran {} times", calls.get());
}

#[test]
fn checks_nest_and_are_restored() {
    let pool = slow_pool(1, 500_000);
    pool.async_step_send(actions(1), Target::All).unwrap();
    let outer = interruptible(
        || true,
        || {
            // The inner check (never stop) applies inside; the outer one
            // again after it.
            let inner = interruptible(|| false, || pool.async_step_recv(Recv::new()));
            assert_eq!(inner.unwrap().len(), 1);
            pool.async_step_send(actions(1), Target::All).unwrap();
            pool.async_step_recv(Recv::new())
        },
    );
    assert_eq!(outer.unwrap_err(), PoolError::Interrupted);
    assert_eq!(pool.async_step_recv(Recv::new()).unwrap().len(), 1);
}
