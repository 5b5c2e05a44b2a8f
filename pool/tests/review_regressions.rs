//! Regressions found by review of the threading pool: deadlines too long to
//! represent, `max_get` that starved high-index envs, and envs with a batch
//! size of their own (also: rows of the wrong batch size, found by the
//! bad-input table, `tests/bad_input.rs`).

use std::time::Duration;

use pool::envs::{CountingEnv, Env, Kwargs};
use pool::tensordict::{NonTensor, Tensor, TensorDict};
use pool::{AsyncEnvPool, Backend, PoolError, Recv, Target};
use test_envs::TwoCounters;

fn actions(n: usize) -> TensorDict {
    let mut td = TensorDict::new(&[n]);
    td.set("action", Tensor::full(&[n, 1], 1i64)).unwrap();
    td
}

fn one_thread() -> Backend {
    Backend::Threading(pool::ThreadOptions::default().threads(1))
}

#[test]
fn a_timeout_too_long_to_represent_is_no_deadline() {
    let pool = AsyncEnvPool::builder()
        .registered_n("CountingEnv", 2, Kwargs::new())
        .build()
        .unwrap();
    // Nothing in flight: the argument error, not a panic.
    let err = pool
        .async_step_recv(Recv::new().timeout(Duration::MAX))
        .unwrap_err();
    assert!(matches!(err, PoolError::NotEnoughInFlight { .. }), "{err}");
    let err = pool
        .async_step_recv_env(0, Some(Duration::MAX))
        .unwrap_err();
    assert!(matches!(err, PoolError::NotInFlight { .. }), "{err}");
    pool.reset(None).unwrap();
    pool.async_step_send(actions(2), Target::All).unwrap();
    let batch = pool
        .async_step_recv(Recv::all(2).timeout(Duration::MAX))
        .unwrap();
    assert_eq!(batch.len(), 2);
}

#[test]
fn max_get_takes_the_oldest_results_so_no_env_starves() {
    let pool = AsyncEnvPool::builder()
        .backend(one_thread())
        .registered_n("CountingEnv", 8, Kwargs::new().with("max_steps", 1_000_000))
        .build()
        .unwrap();
    pool.reset(None).unwrap();
    pool.async_step_send(actions(8), Target::All).unwrap();
    let mut received = [0u32; 8];
    for _ in 0..6 {
        // The learner's own work: every env in flight finishes meanwhile
        // (if one does not, the check below only gets easier).
        std::thread::sleep(Duration::from_millis(10));
        let batch = pool
            .async_step_recv(Recv::new().min_get(4).max_get(4))
            .unwrap();
        let ids: Vec<usize> = batch
            .get_non_tensor("env_index")
            .unwrap()
            .as_int_vec()
            .unwrap()
            .into_iter()
            .map(|i| i as usize)
            .collect();
        for &i in &ids {
            received[i] += 1;
        }
        pool.async_step_send(actions(ids.len()), Target::Envs(ids))
            .unwrap();
    }
    assert!(
        received.iter().all(|&n| n > 0),
        "some env never received: {received:?}"
    );
}

#[test]
fn envs_with_a_batch_size_pool_and_reset_only_their_done_rows() {
    let pool = AsyncEnvPool::builder()
        .env(|| Ok(Box::new(TwoCounters::new()) as Box<dyn Env>))
        .env(|| Ok(Box::new(TwoCounters::new()) as Box<dyn Env>))
        .build()
        .unwrap();
    assert_eq!(pool.batch_size(), &[2, 2]);
    let root = pool.reset(None).unwrap().into_dense().unwrap();
    assert_eq!(
        root.non_tensor("env_index").unwrap(),
        &NonTensor::from(vec![vec![0i64, 0], vec![1, 1]])
    );
    let mut td = TensorDict::new(&[2, 2]);
    td.set("action", Tensor::full(&[2, 2, 1], 1i64)).unwrap();
    let (_, root) = pool.step_and_maybe_reset(td.clone()).unwrap();
    let (step, root) = pool
        .step_and_maybe_reset(
            root.into_dense()
                .unwrap()
                .select(["observation"], true)
                .map(|mut r| {
                    r.update(&td).unwrap();
                    r
                })
                .unwrap(),
        )
        .unwrap();
    let step = step.into_dense().unwrap();
    // Row 0 of each env passed its max (1) at 2 and was reset; row 1 keeps 2.
    assert_eq!(
        step.tensor(("next", "observation"))
            .unwrap()
            .to_vec::<i32>()
            .unwrap(),
        vec![2, 2, 2, 2]
    );
    let root = root.into_dense().unwrap();
    assert_eq!(
        root.tensor("observation").unwrap().to_vec::<i32>().unwrap(),
        vec![0, 2, 0, 2]
    );
    let _ = CountingEnv::new(0, 1);
}

/// Rows whose batch size is not their env's were an invalid input reading
/// "cannot stack: tensordict 0 has batch size [] but tensordict 0 has
/// [2]"; they are now an error naming the env and both batch sizes, and
/// nothing is sent.
#[test]
fn rows_of_the_wrong_batch_size_name_the_env_and_both_sizes() {
    let pool = AsyncEnvPool::builder()
        .env(|| Ok(Box::new(TwoCounters::new()) as Box<dyn Env>))
        .env(|| Ok(Box::new(TwoCounters::new()) as Box<dyn Env>))
        .build()
        .unwrap();
    let with_action = |batch: &[usize]| {
        let mut td = TensorDict::new(batch);
        let mut shape = batch.to_vec();
        shape.push(1);
        td.set("action", Tensor::full(&shape, 1i64)).unwrap();
        td
    };
    // Rows of batch size [] and [3] for envs of batch size [2].
    let err = pool.step(with_action(&[2])).unwrap_err();
    assert_eq!(
        err,
        PoolError::RowBatchSize {
            env: 0,
            expected: vec![2],
            found: vec![]
        }
    );
    assert_eq!(
        err.to_string(),
        "env 0 has batch size [2] but its row of the tensordict has batch size []"
    );
    let err = pool
        .async_step_send(with_action(&[1, 3]), Target::Envs(vec![1]))
        .unwrap_err();
    assert_eq!(
        err,
        PoolError::RowBatchSize {
            env: 1,
            expected: vec![2],
            found: vec![3]
        }
    );
    // One env's tensordict with a leading 1 and the wrong batch size.
    let err = pool
        .async_step_send(with_action(&[1, 3]), Target::Env(1))
        .unwrap_err();
    assert_eq!(
        err,
        PoolError::RowBatchSize {
            env: 1,
            expected: vec![2],
            found: vec![3]
        }
    );
    assert!(pool.in_flight().is_empty(), "nothing was sent");
    // Its own batch size, with or without a leading 1, and rows of it.
    pool.async_step_send(with_action(&[2]), Target::Env(0))
        .unwrap();
    pool.async_step_send(with_action(&[1, 2]), Target::Env(1))
        .unwrap();
    for env in 0..2 {
        let out = pool.async_step_recv_env(env, None).unwrap();
        assert_eq!(
            out.tensor(("next", "observation"))
                .unwrap()
                .to_vec::<i32>()
                .unwrap(),
            vec![1, 1]
        );
    }
    let out = pool.step(with_action(&[2, 2])).unwrap();
    assert_eq!(out.len(), 2);
}
