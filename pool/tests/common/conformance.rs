//! The pool's semantic tests, written once and generic over the backend:
//! each takes a [`Configure`] that picks the backend, and `tests/threads.rs`
//! and `tests/procs.rs` (each exchange) run every one of them. The
//! first group ports TorchRL's `TestAsyncEnvPool` behaviour (specs and
//! shapes, async reset and step with `min_get`, deadline batching, order
//! under different step delays, `step_and_maybe_reset`, heterogeneous
//! envs); the rest cover every row of docs/design.md's semantics table and every
//! bad argument.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use pool::envs::{Env, Kwargs};
use pool::specs::TensorSpec;
use pool::tensordict::{DType, NonTensor, StackedTensorDict, Tensor, TensorDict};
use pool::{AsyncEnvPool, Batch, PoolError, Recv, StackMode, Target};
use rand::SeedableRng;

use super::test_envs::{self, fault_message, faulty_kwargs, Fault, FAULTY};
use super::{
    action, actions, env_index, expect_err, flag_at, int_at, long_at, row_env, rows, shape_at,
    Configure,
};

/// Every stack mode; most tests run in each, since the pool builds dense
/// batches and lazy ones on different paths.
const MODES: [StackMode; 3] = [StackMode::Dense, StackMode::MaybeDense, StackMode::Lazy];

/// A CountingEnv that is never done in a test.
const NEVER_DONE: i64 = 1 << 30;

/// `n` CountingEnvs, env `i` starting at `starts[i]`, never done.
fn counters(with: Configure, starts: &[i64], stack: StackMode) -> AsyncEnvPool {
    let kwargs = starts
        .iter()
        .map(|&s| {
            Kwargs::new()
                .with("start_val", s)
                .with("max_steps", NEVER_DONE)
        })
        .collect();
    with(AsyncEnvPool::builder())
        .registered_each("CountingEnv", starts.len(), kwargs)
        .stack(stack)
        .build()
        .expect("build a pool of CountingEnvs")
}

/// `n` CountingEnvs starting at 0, never done.
fn counting(with: Configure, n: usize, stack: StackMode) -> AsyncEnvPool {
    counters(with, &vec![0; n], stack)
}

/// `n` LatencyEnvs that sleep `step_us[i]` microseconds per step.
fn sleepers(with: Configure, step_us: &[i64], stack: StackMode) -> AsyncEnvPool {
    let kwargs = step_us
        .iter()
        .map(|&us| Kwargs::new().with("step_us", us).with("mode", "sleep"))
        .collect();
    with(AsyncEnvPool::builder())
        .registered_each("LatencyEnv", step_us.len(), kwargs)
        .stack(stack)
        .build()
        .expect("build a pool of LatencyEnvs")
}

/// Asserts that a batch's `env_index` is strictly increasing (sorted, no
/// duplicate) and agrees with [`Batch::env_indices`], and returns it.
#[track_caller]
fn sorted_envs(batch: &Batch) -> Vec<usize> {
    let envs = env_index(batch);
    assert_eq!(
        batch.env_indices(),
        envs,
        "env_indices() names the rows' envs"
    );
    assert!(
        envs.windows(2).all(|w| w[0] < w[1]),
        "a batch is sorted by env index: {envs:?}"
    );
    assert_eq!(envs.len(), batch.len(), "one env_index per row");
    for (row, &env) in rows(batch).iter().zip(&envs) {
        assert_eq!(row_env(row), env, "each row carries its env_index");
    }
    envs
}

/// An `"env_index"` entry for `envs`, as a stack of integers.
fn env_index_entry(envs: &[usize]) -> NonTensor {
    NonTensor::Stack(envs.iter().map(|&e| NonTensor::Int(e as i64)).collect())
}

/// Checks that `err` names env `env` and carries `message` (how every
/// backend reports an env's failure).
#[track_caller]
fn assert_names_env(err: &PoolError, env: usize, message: &str) {
    let text = err.to_string();
    assert!(
        text.contains(&format!("env {env} ")) || text.contains(&format!("env {env}:")),
        "the error names env {env}: {text}"
    );
    assert!(
        text.contains(message),
        "the error carries {message:?}: {text}"
    );
}

// ---------------------------------------------------------------------------
// Ported from TorchRL's TestAsyncEnvPool.
// ---------------------------------------------------------------------------

/// The pool's batch size is `[num_envs]`, its specs are the children's
/// stacked along a new leading dim (each index giving back the child's
/// spec), its state spec carries `env_index`, and its results are in its
/// specs.
pub(crate) fn specs_and_shapes(with: Configure) {
    let n = 4;
    let child = pool::envs::make("CartPole-v1", &Kwargs::new()).expect("CartPole-v1");
    let child = child.specs();
    for stack in MODES {
        let pool = with(AsyncEnvPool::builder())
            .registered_n("CartPole-v1", n, Kwargs::new())
            .stack(stack)
            .build()
            .expect("build");
        assert_eq!(pool.num_envs(), n);
        assert_eq!(pool.batch_size(), &[n]);
        assert_eq!(pool.stack_mode(), stack);
        assert_eq!(pool.env_names(), vec!["CartPole-v1".to_string(); n]);

        let leaf = |spec: &TensorSpec, key: &str| -> Vec<usize> {
            let composite = spec
                .as_composite()
                .unwrap_or_else(|| panic!("{stack:?}: identical envs stack into a composite"));
            assert_eq!(composite.shape(), &[n], "{stack:?}: composite shape");
            composite
                .spec(key)
                .unwrap_or_else(|err| panic!("{stack:?}: {err}"))
                .shape()
                .to_vec()
        };
        assert_eq!(
            leaf(pool.full_observation_spec(), "observation"),
            vec![n, 4]
        );
        assert_eq!(leaf(pool.full_action_spec(), "action"), vec![n, 1]);
        assert_eq!(leaf(pool.full_reward_spec(), "reward"), vec![n, 1]);
        for key in ["done", "terminated", "truncated"] {
            assert_eq!(leaf(pool.full_done_spec(), key), vec![n, 1]);
        }
        let env_index = pool
            .full_state_spec()
            .as_composite()
            .expect("state composite")
            .spec("env_index")
            .expect("env_index in the state spec");
        assert_eq!(env_index.kind(), "non_tensor");
        assert_eq!(env_index.shape().to_vec(), vec![n]);
        assert_eq!(pool.specs().full_action_spec(), pool.full_action_spec());

        for i in 0..n {
            for (pooled, own) in [
                (pool.full_observation_spec(), child.full_observation_spec()),
                (pool.full_action_spec(), child.full_action_spec()),
                (pool.full_reward_spec(), child.full_reward_spec()),
                (pool.full_done_spec(), child.full_done_spec()),
            ] {
                assert_eq!(
                    pooled.index(i).expect("index the stacked spec"),
                    TensorSpec::Composite(own.clone()),
                    "{stack:?}: row {i} of the stacked spec is the child's"
                );
            }
        }

        let root = pool.reset(None).expect("reset");
        assert_eq!(root.batch_size(), vec![n]);
        assert_eq!(sorted_envs(&root), (0..n).collect::<Vec<_>>());
        let root = root.into_dense().expect("identical envs stack densely");
        let composite = |spec: &TensorSpec| spec.as_composite().expect("composite").clone();
        composite(pool.full_observation_spec())
            .check(&root)
            .expect("the reset observation is in the spec");
        composite(pool.full_done_spec())
            .check(&root)
            .expect("the reset done flags are in the spec");

        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let sampled = composite(pool.full_action_spec()).rand(&mut rng);
        assert_eq!(sampled.batch_size(), &[n]);
        let out = pool.step(sampled).expect("step with a sampled action");
        assert_eq!(out.batch_size(), vec![n]);
        let out = out.into_dense().expect("dense");
        let next = out.dict("next").expect("the result is under next");
        for spec in [
            pool.full_observation_spec(),
            pool.full_reward_spec(),
            pool.full_done_spec(),
        ] {
            composite(spec)
                .check(next)
                .expect("the step result is in the spec");
        }
    }
}

/// Async reset then async steps, receiving with `min_get` unset (default
/// 1), 1 and 2: every batch has at least `min_get` results, is sorted, and
/// each env's count goes up by exactly its actions; sends target the
/// received envs through `env_index` (as a stack and as a tensor).
pub(crate) fn async_reset_and_step_with_min_get(with: Configure) {
    assert_eq!(Recv::new().min_get, 1, "min_get defaults to 1");
    assert_eq!(Recv::default(), Recv::new());
    assert_eq!(Recv::all(3), Recv::new().min_get(3));
    let n = 4;
    let starts: Vec<i64> = (0..n as i64).map(|i| 10 * i).collect();
    for stack in MODES {
        for min_get in [None, Some(1), Some(2)] {
            let context = format!("{stack:?}, min_get {min_get:?}");
            let pool = counters(with, &starts, stack);
            // `min_get` capped by what is in flight, as a caller must.
            let recv = |in_flight: usize| match min_get {
                None => Recv::new(),
                Some(k) => Recv::new().min_get(k.min(in_flight)),
            };
            let least = |in_flight: usize| min_get.unwrap_or(1).min(in_flight);

            pool.async_reset_send(None, Target::All)
                .expect("reset send");
            let mut counts: Vec<Option<i64>> = vec![None; n];
            let mut in_flight = n;
            while in_flight > 0 {
                let batch = pool.async_reset_recv(recv(in_flight)).expect("reset recv");
                assert!(batch.len() >= least(in_flight), "{context}");
                for (row, env) in rows(&batch).iter().zip(sorted_envs(&batch)) {
                    assert_eq!(counts[env], None, "{context}: env {env} reset twice");
                    assert_eq!(i64::from(int_at(row, &["observation"])), starts[env]);
                    counts[env] = Some(starts[env]);
                }
                in_flight -= batch.len();
            }

            let mut idle: Vec<usize> = (0..n).collect();
            for _ in 0..12 {
                let mut td = actions(&vec![1; idle.len()]);
                // As a stack of integers, or (one pool in three) as a tensor;
                // one pool does not mix the two (see
                // `sends_with_different_env_index_kinds_stack_densely`).
                if min_get != Some(2) {
                    td.set("env_index", env_index_entry(&idle)).unwrap();
                } else {
                    let ids: Vec<i64> = idle.iter().map(|&e| e as i64).collect();
                    td.set("env_index", Tensor::from_vec(&[ids.len()], ids).unwrap())
                        .unwrap();
                }
                pool.async_step_send(td, Target::EnvIndex)
                    .unwrap_or_else(|err| panic!("{context}: step send: {err}"));
                in_flight += idle.len();
                let batch = pool
                    .async_step_recv(recv(in_flight))
                    .unwrap_or_else(|err| panic!("{context}: step recv: {err}"));
                assert!(batch.len() >= least(in_flight), "{context}");
                idle = sorted_envs(&batch);
                for (row, &env) in rows(&batch).iter().zip(&idle) {
                    let count = counts[env].as_mut().expect("reset first");
                    *count += 1;
                    assert_eq!(
                        i64::from(int_at(row, &["next", "observation"])),
                        *count,
                        "{context}: env {env} counts each step once"
                    );
                    assert_eq!(long_at(row, &["action"]), 1, "{context}: the sent row");
                }
                in_flight -= batch.len();
            }
            if in_flight > 0 {
                let rest = pool.async_step_recv(Recv::all(in_flight)).expect("drain");
                assert_eq!(rest.len(), in_flight);
            }
            assert!(pool.in_flight().is_empty(), "{context}");
        }
    }
}

/// `min_get 1, max_get 1, timeout 0` polls: each call returns exactly one
/// result, or a `Timeout` with none ready that takes nothing; polling until
/// every env answered gets each result exactly once.
pub(crate) fn poll_takes_at_most_one_result(with: Configure) {
    let n = 4;
    let pool = counting(with, n, StackMode::Dense);
    let poll = Recv::new().min_get(1).max_get(1).timeout(Duration::ZERO);
    for round in 1..=3 {
        pool.async_step_send(actions(&[1; 4]), Target::All)
            .expect("send");
        let mut seen = BTreeSet::new();
        while seen.len() < n {
            match pool.async_step_recv(poll) {
                Ok(batch) => {
                    assert_eq!(batch.len(), 1, "max_get 1 caps the batch");
                    let env = sorted_envs(&batch)[0];
                    assert!(seen.insert(env), "env {env} received twice");
                    assert_eq!(int_at(&rows(&batch)[0], &["next", "observation"]), round);
                }
                Err(PoolError::Timeout {
                    op,
                    timeout,
                    ready,
                    min_get,
                }) => {
                    assert_eq!(
                        (op, timeout, ready, min_get),
                        ("step", Duration::ZERO, 0, 1)
                    );
                    std::thread::yield_now();
                }
                Err(err) => panic!("unexpected error while polling: {err}"),
            }
        }
    }
    assert!(pool.in_flight().is_empty());
}

/// A poll with nothing ready is a `Timeout` (checked whenever the poll
/// returned before the envs could have finished), and loses nothing.
pub(crate) fn poll_with_nothing_ready_times_out(with: Configure) {
    const STEP_US: i64 = 250_000;
    let pool = sleepers(with, &[STEP_US, STEP_US], StackMode::Dense);
    pool.reset(None).expect("reset");
    let sent = Instant::now();
    pool.async_step_send(actions(&[0, 0]), Target::All)
        .expect("send");
    let polled = pool.async_step_recv(Recv::new().max_get(1).timeout(Duration::ZERO));
    let mut got = 0;
    if sent.elapsed() < Duration::from_micros(STEP_US as u64) {
        // No env can have finished yet.
        let err = expect_err(polled, "poll before any env finished");
        assert!(
            matches!(
                err,
                PoolError::Timeout {
                    op: "step",
                    ready: 0,
                    min_get: 1,
                    ..
                }
            ),
            "{err:?}"
        );
    } else if let Ok(batch) = polled {
        got = batch.len();
    }
    let rest = pool
        .async_step_recv(Recv::all(2 - got))
        .expect("the timed-out poll took nothing");
    assert_eq!(rest.len(), 2 - got);
}

/// `min_get 3, max_get 3, timeout 100 ms` on four envs: a batch of exactly
/// three (a `Timeout` before three are ready takes nothing and is retried),
/// and the fourth result comes with the next receive.
pub(crate) fn deadline_batch_of_three(with: Configure) {
    let n = 4;
    let pool = counting(with, n, StackMode::Dense);
    let recv = Recv::new()
        .min_get(3)
        .max_get(3)
        .timeout(Duration::from_millis(100));
    for round in 1..=3 {
        pool.async_step_send(actions(&[1; 4]), Target::All)
            .expect("send");
        let batch = loop {
            match pool.async_step_recv(recv) {
                Ok(batch) => break batch,
                Err(PoolError::Timeout { ready, min_get, .. }) => {
                    assert_eq!(min_get, 3);
                    assert!(ready < 3, "a timeout with {ready} ready of min_get 3");
                }
                Err(err) => panic!("{err}"),
            }
        };
        assert_eq!(batch.len(), 3, "min_get = max_get = 3");
        let first = sorted_envs(&batch);
        let rest = pool
            .async_step_recv(Recv::new().timeout(Duration::from_secs(30)))
            .expect("the fourth result");
        assert_eq!(rest.len(), 1);
        let last = sorted_envs(&rest);
        let all: BTreeSet<usize> = first.iter().chain(&last).copied().collect();
        assert_eq!(all, (0..n).collect(), "each env exactly once");
        for batch in [&batch, &rest] {
            for row in rows(batch) {
                assert_eq!(int_at(&row, &["next", "observation"]), round);
            }
        }
    }
}

/// With a timeout and no `max_get`, a receive waits for every env in
/// flight (or the deadline): a full batch, deterministically.
pub(crate) fn timeout_without_max_get_waits_for_every_env(with: Configure) {
    let pool = counting(with, 6, StackMode::Dense);
    for round in 1..=5 {
        pool.async_step_send(actions(&[1; 6]), Target::All).unwrap();
        let batch = pool
            .async_step_recv(Recv::new().timeout(Duration::from_secs(30)))
            .expect("every env answers long before the deadline");
        assert_eq!(sorted_envs(&batch), (0..6).collect::<Vec<_>>());
        for row in rows(&batch) {
            assert_eq!(int_at(&row, &["next", "observation"]), round);
        }
    }
}

/// At the deadline, a receive whose `min_get` is met returns what is ready
/// then: here the fast envs, not the slow one (checked whenever the call
/// returned before the slow env could have finished). The call lasts at
/// least its timeout, since more results were coming.
pub(crate) fn deadline_returns_what_is_ready(with: Configure) {
    const SLOW_US: i64 = 400_000;
    let pool = sleepers(with, &[0, 0, SLOW_US, 0], StackMode::Dense);
    pool.reset(None).unwrap();
    let timeout = Duration::from_millis(50);
    let sent = Instant::now();
    pool.async_step_send(actions(&[0; 4]), Target::All).unwrap();
    let called = Instant::now();
    let batch = loop {
        match pool.async_step_recv(Recv::new().min_get(2).timeout(timeout)) {
            Ok(batch) => break batch,
            // A loaded machine may not have stepped two envs in 50 ms.
            Err(PoolError::Timeout { .. }) => continue,
            Err(err) => panic!("{err}"),
        }
    };
    let waited = called.elapsed();
    let mut got = sorted_envs(&batch);
    if sent.elapsed() < Duration::from_micros(SLOW_US as u64) {
        assert!(!got.contains(&2), "the slow env cannot be ready: {got:?}");
        assert!(
            waited >= timeout,
            "returned after {waited:?}, before the deadline"
        );
    }
    if got.len() < 4 {
        let rest = pool.async_step_recv(Recv::all(4 - got.len())).unwrap();
        got.extend(sorted_envs(&rest));
    }
    got.sort_unstable();
    assert_eq!(got, vec![0, 1, 2, 3]);
}

/// `max_get < min_get` is rejected by every batch receive, and takes
/// nothing.
pub(crate) fn max_get_below_min_get_is_rejected(with: Configure) {
    let pool = counting(with, 4, StackMode::Dense);
    let bad = Recv::new().min_get(3).max_get(2);
    let is_max_get = |err: &PoolError| {
        matches!(
            err,
            PoolError::MaxGet {
                min_get: 3,
                max_get: 2
            }
        )
    };
    pool.async_reset_send(None, Target::All).unwrap();
    let err = expect_err(pool.async_reset_recv(bad), "reset recv");
    assert!(is_max_get(&err), "{err:?}");
    assert_eq!(err.to_string(), "max_get (2) must be at least min_get (3)");
    assert_eq!(pool.async_reset_recv(Recv::all(4)).unwrap().len(), 4);
    pool.async_step_send(actions(&[1; 4]), Target::All).unwrap();
    let err = expect_err(pool.async_step_recv(bad), "step recv");
    assert!(is_max_get(&err), "{err:?}");
    assert_eq!(pool.async_step_recv(Recv::all(4)).unwrap().len(), 4);
    pool.async_step_and_maybe_reset_send(actions(&[1; 4]), Target::All)
        .unwrap();
    let err = expect_err(pool.async_step_and_maybe_reset_recv(bad), "sam recv");
    assert!(is_max_get(&err), "{err:?}");
    let (step, root) = pool.async_step_and_maybe_reset_recv(Recv::all(4)).unwrap();
    assert_eq!((step.len(), root.len()), (4, 4));
    // max_get == min_get is fine.
    pool.async_step_send(actions(&[1; 4]), Target::All).unwrap();
    let two = pool
        .async_step_recv(Recv::new().min_get(2).max_get(2))
        .unwrap();
    assert_eq!(two.len(), 2);
    assert_eq!(pool.async_step_recv(Recv::all(2)).unwrap().len(), 2);
}

/// Envs with different step delays (the later envs faster): a full batch
/// is still sorted by env index, each row the right env's.
pub(crate) fn full_batch_order_with_different_delays(with: Configure) {
    let delays = [40_000, 25_000, 10_000, 0, 5_000];
    let n = delays.len();
    for stack in MODES {
        let pool = sleepers(with, &delays, stack);
        pool.reset(None).expect("reset");
        for round in 1..=2 {
            let mut td = actions(&vec![0; n]);
            let tags: Vec<f32> = (0..n).map(|i| 100.0 * i as f32 + round as f32).collect();
            td.set("tag", Tensor::from_vec(&[n], tags).unwrap())
                .unwrap();
            pool.async_step_send(td, Target::All).expect("send");
            let batch = pool.async_step_recv(Recv::all(n)).expect("recv");
            assert_eq!(sorted_envs(&batch), (0..n).collect::<Vec<_>>(), "{stack:?}");
            for (env, row) in rows(&batch).iter().enumerate() {
                let tag = row.tensor("tag").unwrap().item::<f32>().unwrap();
                assert_eq!(
                    tag,
                    100.0 * env as f32 + round as f32,
                    "{stack:?}: row {env}"
                );
                // LatencyEnv's observation holds its step count.
                let obs = row.tensor(("next", "observation")).unwrap();
                assert_eq!(obs.to_vec::<f32>().unwrap(), vec![round as f32; 4]);
            }
        }
    }
}

/// `step_and_maybe_reset` returns the step results and the next roots,
/// reset exactly where the env was done (CountingEnvs with different start
/// values reach their end at different steps), synchronously and
/// asynchronously (batch and per-env receives).
pub(crate) fn step_and_maybe_reset_resets_done_envs(with: Configure) {
    let n = 4;
    let max_steps = 3;
    let starts: Vec<i32> = (0..n as i32).collect();
    let kwargs = || {
        starts
            .iter()
            .map(|&s| {
                Kwargs::new()
                    .with("start_val", s)
                    .with("max_steps", max_steps)
            })
            .collect::<Vec<_>>()
    };
    for stack in MODES {
        let pool = with(AsyncEnvPool::builder())
            .registered_each("CountingEnv", n, kwargs())
            .stack(stack)
            .build()
            .expect("build");
        pool.reset(None).expect("reset");
        let mut counts = starts.clone();
        // The model: one step adds `inc`; done past max_steps; then reset.
        let mut advance = |env: usize, inc: i32, step: &TensorDict, root: &TensorDict| {
            let next = counts[env] + inc;
            let done = next > max_steps;
            assert_eq!(
                int_at(step, &["next", "observation"]),
                next,
                "{stack:?} env {env}"
            );
            assert_eq!(
                flag_at(step, &["next", "done"]),
                done,
                "{stack:?} env {env}"
            );
            assert_eq!(long_at(step, &["action"]), i64::from(inc));
            counts[env] = if done { starts[env] } else { next };
            assert_eq!(
                int_at(root, &["observation"]),
                counts[env],
                "{stack:?}: env {env}'s next root is reset iff it was done"
            );
            assert!(!flag_at(root, &["done"]), "a next root is never done");
            assert_eq!(row_env(root), env);
            done
        };
        let mut resets = 0;
        for _ in 0..6 {
            let (step, root) = pool
                .step_and_maybe_reset(actions(&[1; 4]))
                .expect("step_and_maybe_reset");
            let envs = sorted_envs(&step);
            assert_eq!(envs, sorted_envs(&root));
            for ((s, r), env) in rows(&step).iter().zip(rows(&root)).zip(envs) {
                resets += usize::from(advance(env, 1, s, &r));
            }
        }
        assert!(resets >= n, "{stack:?}: every env was reset at least once");

        // Async, a subset in an unsorted order, then one env on its own.
        for _ in 0..4 {
            let mut td = actions(&[1, 1]);
            td.set("env_index", env_index_entry(&[3, 1])).unwrap();
            pool.async_step_and_maybe_reset_send(td, Target::EnvIndex)
                .expect("send");
            let (step, root) = pool
                .async_step_and_maybe_reset_recv(Recv::all(2))
                .expect("recv");
            assert_eq!(sorted_envs(&step), vec![1, 3]);
            for ((s, r), env) in rows(&step).iter().zip(rows(&root)).zip([1, 3]) {
                advance(env, 1, s, &r);
            }
            pool.async_step_and_maybe_reset_send(action(1), Target::Env(0))
                .expect("send");
            let (s, r) = pool
                .async_step_and_maybe_reset_recv_env(0, None)
                .expect("recv env");
            assert_eq!(row_env(&s), 0);
            advance(0, 1, &s, &r);
        }
    }
}

/// CartPole-v1 next to Pendulum-v1 (other observation and action shapes
/// and dtypes): with lazy and maybe-dense stacking the pool builds, its
/// specs keep each env's own, and its batches keep each env's result.
pub(crate) fn heterogeneous_envs_stack_lazily(with: Configure) {
    for stack in [StackMode::Lazy, StackMode::MaybeDense] {
        let pool = with(AsyncEnvPool::builder())
            .registered_n("CartPole-v1", 1, Kwargs::new())
            .registered_n("Pendulum-v1", 1, Kwargs::new())
            .stack(stack)
            .build()
            .unwrap_or_else(|err| panic!("{stack:?}: {err}"));
        assert_eq!(pool.batch_size(), &[2]);
        let observation = pool
            .full_observation_spec()
            .as_composite()
            .expect("same keys: a composite")
            .spec("observation")
            .unwrap();
        assert_eq!(observation.kind(), "stacked", "[4] next to [3]");
        let parts = observation.as_stacked().unwrap();
        assert_eq!(parts.index(0).unwrap().shape().to_vec(), vec![4]);
        assert_eq!(parts.index(1).unwrap().shape().to_vec(), vec![3]);
        let action = pool
            .full_action_spec()
            .as_composite()
            .unwrap()
            .spec("action")
            .unwrap();
        assert_eq!(action.kind(), "stacked", "categorical next to bounded");
        assert!(pool
            .full_state_spec()
            .as_composite()
            .expect("state composite")
            .contains("env_index"));

        let root = pool.reset(None).expect("reset");
        assert!(!root.is_dense(), "{stack:?}: observations of two shapes");
        assert_eq!(sorted_envs(&root), vec![0, 1]);
        assert_eq!(shape_at(&root.index(0).unwrap(), &["observation"]), vec![4]);
        assert_eq!(shape_at(&root.index(1).unwrap(), &["observation"]), vec![3]);

        // One send per env: their actions have different dtypes.
        pool.async_step_send(actions(&[1]), Target::Envs(vec![0]))
            .expect("CartPole action");
        let mut torque = TensorDict::new(&[1]);
        torque
            .set("action", Tensor::from_vec(&[1, 1], vec![0.5f32]).unwrap())
            .unwrap();
        pool.async_step_send(torque, Target::Envs(vec![1]))
            .expect("Pendulum action");
        let batch = pool
            .async_step_recv(Recv::all(2))
            .unwrap_or_else(|err| panic!("{stack:?}: {err}"));
        assert!(!batch.is_dense());
        assert_eq!(sorted_envs(&batch), vec![0, 1]);
        let parts = rows(&batch);
        assert_eq!(shape_at(&parts[0], &["next", "observation"]), vec![4]);
        assert_eq!(shape_at(&parts[1], &["next", "observation"]), vec![3]);
        assert_eq!(parts[0].tensor("action").unwrap().dtype(), DType::I64);
        assert_eq!(parts[1].tensor("action").unwrap().dtype(), DType::F32);
        let reward = batch.get_tensor(("next", "reward")).expect("same shapes");
        assert_eq!(reward.shape(), &[2, 1]);

        // Per env, with step_and_maybe_reset.
        let mut torque = TensorDict::new(&[]);
        torque
            .set("action", Tensor::from_vec(&[1], vec![-0.5f32]).unwrap())
            .unwrap();
        pool.async_step_and_maybe_reset_send(torque, Target::Env(1))
            .unwrap();
        let (step, root) = pool.async_step_and_maybe_reset_recv_env(1, None).unwrap();
        assert_eq!(shape_at(&step, &["next", "observation"]), vec![3]);
        assert_eq!(shape_at(&root, &["observation"]), vec![3]);
    }

    // Maybe-dense stacking of identical envs stays dense.
    let pool = with(AsyncEnvPool::builder())
        .registered_n("CartPole-v1", 2, Kwargs::new())
        .stack(StackMode::MaybeDense)
        .build()
        .unwrap();
    assert!(pool.reset(None).unwrap().is_dense());
    assert!(pool.step(actions(&[0, 1])).unwrap().is_dense());
}

/// With dense stacking, envs whose specs differ are a `Specs` error naming
/// the key and the env.
pub(crate) fn heterogeneous_envs_are_an_error_when_dense(with: Configure) {
    let err = with(AsyncEnvPool::builder())
        .registered_n("CartPole-v1", 1, Kwargs::new())
        .registered_n("Pendulum-v1", 1, Kwargs::new())
        .stack(StackMode::Dense)
        .build()
        .expect_err("CartPole-v1 and Pendulum-v1 do not stack densely");
    let PoolError::Specs { which, ref source } = err else {
        panic!("expected a Specs error, got {err:?}");
    };
    assert!(
        ["action", "observation"].contains(&which),
        "the first spec that differs: {which}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&format!("\"{which}\"")),
        "names the key: {text}"
    );
    assert!(text.contains("env 1"), "names the env: {text}");
    assert!(source.to_string().contains("env 1"), "{source}");
}

/// TorchRL's layout: a step result holds the sent root entries (here the
/// reset observation and the action) and the env's result under `"next"`;
/// a reset may be given a tensordict (state entries; none here).
pub(crate) fn step_results_keep_the_sent_root(with: Configure) {
    for stack in MODES {
        let pool = counters(with, &[10, 20, 30], stack);
        let root = pool
            .reset(Some(TensorDict::new(&[3])))
            .expect("reset with a tensordict");
        let mut td = root.into_dense().expect("counters stack densely");
        td.set(
            "action",
            Tensor::from_vec(&[3, 1], vec![1i64, 2, 3]).unwrap(),
        )
        .unwrap();
        let out = pool.step(td).expect("step the reset root");
        for (env, row) in rows(&out).iter().enumerate() {
            let start = 10 * (env as i32 + 1);
            assert_eq!(int_at(row, &["observation"]), start, "{stack:?}: root kept");
            assert_eq!(long_at(row, &["action"]), env as i64 + 1);
            assert_eq!(
                int_at(row, &["next", "observation"]),
                start + env as i32 + 1,
                "{stack:?}"
            );
            assert!(row.contains(("next", "reward")));
        }
        pool.async_reset_send(Some(TensorDict::new(&[])), Target::Env(1))
            .unwrap();
        let one = pool.async_reset_recv_env(1, None).unwrap();
        assert_eq!(int_at(&one, &["observation"]), 20);
        assert_eq!(row_env(&one), 1);
    }
}

/// A result the caller still holds is never changed by later steps of its
/// env (the pool reuses its buffers; copy on write protects what was
/// handed out), in every stack mode and for per-env results.
pub(crate) fn held_results_are_never_overwritten(with: Configure) {
    for stack in MODES {
        let pool = counting(with, 2, stack);
        pool.reset(None).unwrap();
        let first = pool.step(actions(&[1, 1])).unwrap();
        pool.async_step_send(action(1), Target::Env(0)).unwrap();
        let single = pool.async_step_recv_env(0, None).unwrap();
        let (step, root) = pool.step_and_maybe_reset(actions(&[1, 1])).unwrap();
        for _ in 0..3 {
            pool.step(actions(&[5, 5])).unwrap();
        }
        let next_obs = |batch: &StackedTensorDict| -> Vec<i32> {
            rows(batch)
                .iter()
                .map(|r| int_at(r, &["next", "observation"]))
                .collect()
        };
        assert_eq!(next_obs(&first), vec![1, 1], "{stack:?}");
        assert_eq!(int_at(&single, &["next", "observation"]), 2, "{stack:?}");
        assert_eq!(next_obs(&step), vec![3, 2], "{stack:?}");
        let roots: Vec<i32> = rows(&root)
            .iter()
            .map(|r| int_at(r, &["observation"]))
            .collect();
        assert_eq!(roots, vec![3, 2], "{stack:?}");
    }
}

// ---------------------------------------------------------------------------
// Concurrency: sends and receives from several threads.
// ---------------------------------------------------------------------------

/// Four collector threads each drive their own env (per-env send and
/// receive) for 10,000 steps: every result arrives once, to its own
/// collector, with the count one above the last.
pub(crate) fn collectors_drive_their_own_envs(with: Configure) {
    const STEPS: i32 = 10_000;
    let n = 4;
    let pool = counters(
        with,
        &[0, 1_000_000, 2_000_000, 3_000_000],
        StackMode::Dense,
    );
    pool.reset(None).expect("reset");
    std::thread::scope(|scope| {
        for env in 0..n {
            let pool = &pool;
            scope.spawn(move || {
                let start = 1_000_000 * env as i32;
                for step in 1..=STEPS {
                    pool.async_step_send(action(1), Target::Env(env))
                        .unwrap_or_else(|err| panic!("env {env} step {step}: {err}"));
                    let out = pool
                        .async_step_recv_env(env, None)
                        .unwrap_or_else(|err| panic!("env {env} step {step}: {err}"));
                    assert_eq!(row_env(&out), env);
                    assert_eq!(
                        int_at(&out, &["next", "observation"]),
                        start + step,
                        "env {env}: one result per step, in order"
                    );
                }
            });
        }
    });
    assert!(pool.in_flight().is_empty());
    let last = pool.step(actions(&[0; 4])).unwrap().into_dense().unwrap();
    let obs = last.tensor(("next", "observation")).unwrap();
    assert_eq!(
        obs.to_vec::<i32>().unwrap(),
        vec![
            STEPS,
            1_000_000 + STEPS,
            2_000_000 + STEPS,
            3_000_000 + STEPS
        ]
    );
}

/// A per-env receive takes its own env's result only, also when the env
/// was sent to in a batch and several threads receive at once.
pub(crate) fn per_env_receive_takes_only_its_env(with: Configure) {
    let n = 4;
    let pool = counters(with, &[0, 100, 200, 300], StackMode::Dense);
    pool.reset(None).unwrap();
    let mut counts = [0, 100, 200, 300];
    pool.async_step_send(actions(&[1, 2, 3, 4]), Target::All)
        .unwrap();
    let two = pool.async_step_recv_env(2, None).expect("env 2");
    assert_eq!(row_env(&two), 2);
    assert_eq!(int_at(&two, &["next", "observation"]), 203);
    assert_eq!(long_at(&two, &["action"]), 3, "env 2's row of the batch");
    let err = expect_err(pool.async_step_recv_env(2, None), "env 2 again");
    assert!(
        matches!(err, PoolError::NotInFlight { op: "step", env: 2 }),
        "{err:?}"
    );
    let rest = pool.async_step_recv(Recv::all(3)).expect("the others");
    assert_eq!(sorted_envs(&rest), vec![0, 1, 3]);
    for (i, c) in counts.iter_mut().enumerate() {
        *c += i as i32 + 1;
    }

    // Many rounds: one thread per env receives its env's result.
    for _ in 0..100 {
        pool.async_step_send(actions(&[1; 4]), Target::All).unwrap();
        let got: Vec<TensorDict> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .map(|env| {
                    let pool = &pool;
                    scope.spawn(move || pool.async_step_recv_env(env, None).unwrap())
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (env, out) in got.iter().enumerate() {
            counts[env] += 1;
            assert_eq!(row_env(out), env);
            assert_eq!(int_at(out, &["next", "observation"]), counts[env]);
        }
    }
    assert!(pool.in_flight().is_empty());
}

/// A batch receive never takes the result of a per-env (`Target::Env`)
/// send, nor counts it as in flight; also while another thread drives that
/// env concurrently.
pub(crate) fn batch_receive_never_takes_a_per_env_send(with: Configure) {
    let pool = counting(with, 4, StackMode::Dense);
    pool.reset(None).unwrap();
    for round in 1..=20 {
        pool.async_step_send(action(1), Target::Env(0)).unwrap();
        pool.async_step_send(actions(&[1, 1, 1]), Target::Envs(vec![1, 2, 3]))
            .unwrap();
        let batch = pool.async_step_recv(Recv::all(3)).expect("batch");
        assert_eq!(sorted_envs(&batch), vec![1, 2, 3]);
        for probe in [Recv::new(), Recv::new().timeout(Duration::ZERO)] {
            let err = expect_err(pool.async_step_recv(probe), "only a per-env send left");
            assert!(
                matches!(
                    err,
                    PoolError::NotEnoughInFlight {
                        op: "step",
                        min_get: 1,
                        in_flight: 0
                    }
                ),
                "{err:?}"
            );
        }
        let own = pool.async_step_recv_env(0, None).expect("env 0");
        assert_eq!(int_at(&own, &["next", "observation"]), round);
    }

    // Concurrently: a thread drives env 0 per env, this one batches 1..=3.
    std::thread::scope(|scope| {
        let pool = &pool;
        scope.spawn(move || {
            for step in 1..=300 {
                pool.async_step_send(action(1), Target::Env(0)).unwrap();
                let out = pool.async_step_recv_env(0, None).unwrap();
                assert_eq!(int_at(&out, &["next", "observation"]), 20 + step);
            }
        });
        let mut counts = [20; 4];
        for _ in 0..300 {
            pool.async_step_send(actions(&[1, 1, 1]), Target::Envs(vec![1, 2, 3]))
                .unwrap();
            let mut left = 3;
            while left > 0 {
                let batch = pool.async_step_recv(Recv::new()).unwrap();
                for (row, env) in rows(&batch).iter().zip(sorted_envs(&batch)) {
                    assert_ne!(env, 0, "a batch receive took a per-env send's result");
                    counts[env] += 1;
                    assert_eq!(int_at(row, &["next", "observation"]), counts[env]);
                }
                left -= batch.len();
            }
        }
    });
}

/// Two threads receiving batches of one operation at once share the
/// results: each result is taken by exactly one of them. (They poll with a
/// short timeout: a receive without one could wait for a result the other
/// thread took.)
pub(crate) fn concurrent_batch_receivers_take_each_result_once(with: Configure) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let n = 8;
    let pool = counting(with, n, StackMode::Dense);
    for round in 1..=50 {
        pool.async_step_send(actions(&[1; 8]), Target::All).unwrap();
        let taken = AtomicUsize::new(0);
        let seen = Mutex::new(vec![0usize; n]);
        std::thread::scope(|scope| {
            for _ in 0..2 {
                let (pool, taken, seen) = (&pool, &taken, &seen);
                scope.spawn(move || {
                    while taken.load(Ordering::SeqCst) < n {
                        let recv = Recv::new().timeout(Duration::from_millis(5));
                        match pool.async_step_recv(recv) {
                            Ok(batch) => {
                                let mut seen = seen.lock().unwrap();
                                for (row, env) in rows(&batch).iter().zip(sorted_envs(&batch)) {
                                    seen[env] += 1;
                                    assert_eq!(int_at(row, &["next", "observation"]), round);
                                }
                                taken.fetch_add(batch.len(), Ordering::SeqCst);
                            }
                            Err(PoolError::Timeout { .. })
                            | Err(PoolError::NotEnoughInFlight { .. }) => std::thread::yield_now(),
                            Err(err) => panic!("{err}"),
                        }
                    }
                });
            }
        });
        assert_eq!(*seen.lock().unwrap(), vec![1; n], "round {round}");
    }
}

/// A batch receive (without a timeout) whose `min_get` can no longer be
/// met, because another thread took one of its envs' results with a
/// per-env receive while it waited, fails with `NotEnoughInFlight` rather
/// than waiting forever.
pub(crate) fn a_batch_receive_whose_min_get_became_unreachable_fails(with: Configure) {
    let pool = sleepers(with, &[0, 200_000, 200_000, 200_000], StackMode::Dense);
    pool.reset(None).unwrap();
    pool.async_step_send(actions(&[0; 4]), Target::All).unwrap();
    std::thread::scope(|scope| {
        let pool = &pool;
        let batch = scope.spawn(move || pool.async_step_recv(Recv::all(4)).map(|b| b.len()));
        // Let the batch receive start waiting, then take env 0's result.
        std::thread::sleep(Duration::from_millis(50));
        let took_env_0 = match pool.async_step_recv_env(0, None) {
            Ok(_) => true,
            // The batch receive already took all four (a very slow machine).
            Err(PoolError::NotInFlight { env: 0, .. }) => false,
            Err(err) => panic!("{err}"),
        };
        let outcome = batch.join().expect("the batch receiver does not panic");
        if took_env_0 {
            let err = expect_err(outcome, "only three results can come");
            assert!(
                matches!(
                    err,
                    PoolError::NotEnoughInFlight {
                        op: "step",
                        min_get: 4,
                        ..
                    }
                ),
                "{err:?}"
            );
            let rest = pool.async_step_recv(Recv::all(3)).expect("nothing lost");
            assert_eq!(sorted_envs(&rest), vec![1, 2, 3]);
        } else {
            assert_eq!(outcome.expect("all four"), 4);
        }
    });
}

// ---------------------------------------------------------------------------
// Ordering.
// ---------------------------------------------------------------------------

/// Envs sent out of order (`Target::Envs([3, 0, 2])`, `env_index`
/// `[2, 4, 0]`, a received batch sent back) come back sorted by env index,
/// each with its own row: CountingEnvs add the action, a different one per
/// env, so a row sent to the wrong env would show.
pub(crate) fn out_of_order_sends_come_back_sorted(with: Configure) {
    for stack in MODES {
        let pool = counting(with, 5, stack);
        pool.reset(None).unwrap();
        let mut counts = [0i64; 5];
        // Row j of the send goes to env envs[j], with action env + 1.
        let mut check = |batch: &Batch, sent: &[usize]| {
            let mut expected: Vec<usize> = sent.to_vec();
            expected.sort_unstable();
            assert_eq!(sorted_envs(batch), expected, "{stack:?}");
            for (row, env) in rows(batch).iter().zip(expected) {
                counts[env] += env as i64 + 1;
                assert_eq!(long_at(row, &["action"]), env as i64 + 1, "{stack:?}");
                assert_eq!(
                    i64::from(int_at(row, &["next", "observation"])),
                    counts[env],
                    "{stack:?}: env {env} stepped with its own row"
                );
            }
        };
        let incs = |envs: &[usize]| envs.iter().map(|&e| e as i64 + 1).collect::<Vec<_>>();

        let envs = [3, 0, 2];
        pool.async_step_send(actions(&incs(&envs)), Target::Envs(envs.to_vec()))
            .unwrap();
        let batch = pool.async_step_recv(Recv::all(3)).unwrap();
        check(&batch, &envs);

        let envs = [2, 4, 0];
        let mut td = actions(&incs(&envs));
        td.set(
            "env_index",
            Tensor::from_vec(&[3], vec![2i64, 4, 0]).unwrap(),
        )
        .unwrap();
        pool.async_step_send(td, Target::EnvIndex).unwrap();
        let batch = pool.async_step_recv(Recv::all(3)).unwrap();
        check(&batch, &envs);

        // TorchRL's loop: set the next actions in the received batch (it
        // carries env_index and "next") and send it back as it is.
        let mut back = batch.into_dense().expect("counters stack densely");
        back.set(
            "action",
            Tensor::from_vec(&[3, 1], vec![1i64, 3, 5]).unwrap(),
        )
        .unwrap();
        pool.async_step_send(back, Target::EnvIndex).unwrap();
        let batch = pool.async_step_recv(Recv::all(3)).unwrap();
        check(&batch, &[0, 2, 4]);

        // A partial batch is sorted too.
        pool.async_step_send(actions(&incs(&[4, 1, 3])), Target::Envs(vec![4, 1, 3]))
            .unwrap();
        let mut got = Vec::new();
        while got.len() < 3 {
            let batch = pool.async_step_recv(Recv::new()).unwrap();
            got.extend(sorted_envs(&batch));
        }
        got.sort_unstable();
        assert_eq!(got, vec![1, 3, 4]);
    }
}

/// Envs of one batch sent by different sends, one giving `"env_index"` as
/// a tensor and the other as a stack of integers: the batch is built (the
/// pool sets its own `env_index`).
pub(crate) fn sends_with_different_env_index_kinds_stack_densely(with: Configure) {
    for stack in MODES {
        let pool = counting(with, 2, stack);
        let mut first = actions(&[1]);
        first
            .set("env_index", Tensor::from_vec(&[1], vec![0i64]).unwrap())
            .unwrap();
        pool.async_step_send(first, Target::EnvIndex).unwrap();
        let mut second = actions(&[2]);
        second.set("env_index", env_index_entry(&[1])).unwrap();
        pool.async_step_send(second, Target::EnvIndex).unwrap();
        let batch = pool
            .async_step_recv(Recv::all(2))
            .unwrap_or_else(|err| panic!("{stack:?}: {err}"));
        assert_eq!(sorted_envs(&batch), vec![0, 1]);
        let obs: Vec<i32> = rows(&batch)
            .iter()
            .map(|r| int_at(r, &["next", "observation"]))
            .collect();
        assert_eq!(obs, vec![1, 2]);
    }
}

/// Maybe-dense stacking of envs of one layout gives the dense batches,
/// entry for entry (the pool builds them the dense way, from its batch
/// rows): sync reset, step and step-and-maybe-reset, and async batches of
/// rows from two sends; rows from sends with different keys still stack
/// lazily, each keeping its own keys.
pub(crate) fn maybe_dense_batches_of_one_layout_are_the_dense_ones(with: Configure) {
    let dense = counters(with, &[0, 10, 20], StackMode::Dense);
    let maybe = counters(with, &[0, 10, 20], StackMode::MaybeDense);
    let same = |a: Batch, b: Batch, what: &str| {
        let (a, b) = (a.into_data(), b.into_data());
        assert!(matches!(b, StackedTensorDict::Dense(_)), "{what}: {b:?}");
        assert_eq!(a, b, "{what}");
    };
    same(
        dense.reset(None).unwrap(),
        maybe.reset(None).unwrap(),
        "reset",
    );
    same(
        dense.step(actions(&[1, 2, 3])).unwrap(),
        maybe.step(actions(&[1, 2, 3])).unwrap(),
        "step",
    );
    let (d_step, d_root) = dense.step_and_maybe_reset(actions(&[3, 2, 1])).unwrap();
    let (m_step, m_root) = maybe.step_and_maybe_reset(actions(&[3, 2, 1])).unwrap();
    same(d_step, m_step, "step_and_maybe_reset's steps");
    same(d_root, m_root, "step_and_maybe_reset's roots");
    for pool in [&dense, &maybe] {
        pool.async_step_send(actions(&[5]), Target::Envs(vec![2]))
            .unwrap();
        pool.async_step_send(actions(&[4, 6]), Target::Envs(vec![1, 0]))
            .unwrap();
    }
    same(
        dense.async_step_recv(Recv::all(3)).unwrap(),
        maybe.async_step_recv(Recv::all(3)).unwrap(),
        "rows of two sends",
    );

    // Rows of sends with different keys: lazy, as env-by-env stacking
    // makes them.
    maybe
        .async_step_send(actions(&[1]), Target::Envs(vec![0]))
        .unwrap();
    let mut tagged = actions(&[2]);
    tagged
        .set("tag", Tensor::from_vec(&[1], vec![7.0f32]).unwrap())
        .unwrap();
    maybe
        .async_step_send(tagged, Target::Envs(vec![1]))
        .unwrap();
    let batch = maybe.async_step_recv(Recv::all(2)).unwrap();
    assert_eq!(sorted_envs(&batch), vec![0, 1]);
    match batch.data() {
        StackedTensorDict::Lazy(lazy) => {
            assert!(!lazy.index(0).unwrap().contains("tag"));
            assert!(lazy.index(1).unwrap().contains("tag"));
            assert_eq!(int_at(lazy.index(1).unwrap(), &["next", "observation"]), 20);
        }
        dense => panic!("rows with different keys stack lazily: {dense:?}"),
    }
}

/// A batch receive that fails while building its batch (dense stacking of
/// rows from two sends whose tensordicts have different keys) loses no
/// result: each can still be received.
pub(crate) fn a_batch_that_cannot_be_built_loses_nothing(with: Configure) {
    let pool = counting(with, 2, StackMode::Dense);
    pool.async_step_send(actions(&[1]), Target::Envs(vec![0]))
        .unwrap();
    let mut tagged = actions(&[2]);
    tagged
        .set("tag", Tensor::from_vec(&[1], vec![7.0f32]).unwrap())
        .unwrap();
    pool.async_step_send(tagged, Target::Envs(vec![1])).unwrap();
    match pool.async_step_recv(Recv::all(2)) {
        Ok(batch) => assert_eq!(sorted_envs(&batch), vec![0, 1]),
        Err(err) => {
            assert_eq!(pool.in_flight(), vec![0, 1], "after {err}: results lost");
            for (env, count) in [(0, 1), (1, 2)] {
                let out = pool
                    .async_step_recv_env(env, Some(Duration::from_secs(30)))
                    .unwrap_or_else(|e| panic!("after {err}: env {env}'s result: {e}"));
                assert_eq!(int_at(&out, &["next", "observation"]), count);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Errors of envs.
// ---------------------------------------------------------------------------

/// An env that fails (panics or returns an error) mid-run: the error names
/// the env and carries its message; the other envs' results are not lost;
/// the pool keeps working for every env, the failed one included; shutdown
/// is clean. Env 2 fails in a batch receive, env 0 in a per-env one.
fn env_failure_is_reported(with: Configure, fault: Fault) {
    test_envs::register();
    let n = 4;
    let kwargs = (0..n)
        .map(|env| match env {
            0 => faulty_kwargs(5, fault),
            2 => faulty_kwargs(3, fault),
            _ => faulty_kwargs(0, fault),
        })
        .collect();
    let pool = with(AsyncEnvPool::builder())
        .registered_each(FAULTY, n, kwargs)
        .build()
        .expect("build");
    pool.reset(None).unwrap();
    let mut counts = [0i32; 4];
    /// Counts one step for each env of `batch` and checks its observation.
    fn check_all(batch: &Batch, counts: &mut [i32; 4]) {
        for (row, env) in rows(batch).iter().zip(sorted_envs(batch)) {
            counts[env] += 1;
            assert_eq!(int_at(row, &["next", "observation"]), counts[env]);
        }
    }
    for _ in 1..=2 {
        let batch = pool.step(actions(&[1; 4])).unwrap();
        check_all(&batch, &mut counts);
    }

    // Step 3: env 2 fails; the others' results all arrive.
    pool.async_step_send(actions(&[1; 4]), Target::All).unwrap();
    let mut errors = Vec::new();
    let mut received = 0;
    while received + errors.len() < n {
        match pool.async_step_recv(Recv::new()) {
            Ok(batch) => {
                assert!(!env_index(&batch).contains(&2));
                received += batch.len();
                check_all(&batch, &mut counts);
            }
            Err(err) => errors.push(err),
        }
    }
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_names_env(&errors[0], 2, &fault_message(fault, 3));
    assert_eq!(counts, [3, 3, 2, 3]);
    assert!(pool.in_flight().is_empty(), "the failed env is idle again");

    // Step 4: all four, the failed env included, work.
    let batch = pool.step(actions(&[1; 4])).unwrap();
    check_all(&batch, &mut counts);
    assert_eq!(counts, [4, 4, 3, 4]);

    // Step 5, per env: env 0 fails; the others are untouched by it.
    for env in 0..n {
        pool.async_step_send(action(1), Target::Env(env)).unwrap();
    }
    for env in (0..n).rev() {
        match pool.async_step_recv_env(env, Some(Duration::from_secs(30))) {
            Ok(out) => {
                assert_ne!(env, 0, "env 0 was to fail");
                counts[env] += 1;
                assert_eq!(int_at(&out, &["next", "observation"]), counts[env]);
            }
            Err(err) => {
                assert_eq!(env, 0, "only env 0 fails: {err}");
                assert_names_env(&err, 0, &fault_message(fault, 5));
            }
        }
    }
    assert_eq!(counts, [4, 5, 4, 5]);

    // And on: every env steps again.
    let batch = pool.step(actions(&[1; 4])).unwrap();
    check_all(&batch, &mut counts);
    assert_eq!(counts, [5, 6, 5, 6]);
    pool.shutdown();
    let err = expect_err(pool.step(actions(&[1; 4])), "after shutdown");
    assert_eq!(err, PoolError::ShutDown);
}

/// An env that panics: see `env_failure_is_reported`.
pub(crate) fn env_panic_is_reported(with: Configure) {
    env_failure_is_reported(with, Fault::Panic);
}

/// An env that returns an error: see `env_failure_is_reported`.
pub(crate) fn env_error_is_reported(with: Configure) {
    env_failure_is_reported(with, Fault::Error);
}

/// A synchronous step during which an env fails is an error naming it;
/// the other envs' results are not lost (they stay to be received), and
/// the pool goes on.
pub(crate) fn failure_in_a_sync_step_loses_nothing(with: Configure) {
    test_envs::register();
    let kwargs = vec![
        faulty_kwargs(0, Fault::Error),
        faulty_kwargs(2, Fault::Error),
        faulty_kwargs(0, Fault::Error),
    ];
    let pool = with(AsyncEnvPool::builder())
        .registered_each(FAULTY, 3, kwargs)
        .build()
        .unwrap();
    pool.reset(None).unwrap();
    pool.step(actions(&[1; 3])).unwrap();
    let err = expect_err(pool.step(actions(&[1; 3])), "env 1 fails");
    assert_names_env(&err, 1, &fault_message(Fault::Error, 2));
    let left = pool.in_flight();
    assert_eq!(left, vec![0, 2], "the others' results are kept");
    let rest = pool.async_step_recv(Recv::all(2)).unwrap();
    assert_eq!(sorted_envs(&rest), vec![0, 2]);
    for row in rows(&rest) {
        assert_eq!(int_at(&row, &["next", "observation"]), 2);
    }
    let next = pool.step(actions(&[1; 3])).unwrap();
    let obs: Vec<i32> = rows(&next)
        .iter()
        .map(|r| int_at(r, &["next", "observation"]))
        .collect();
    assert_eq!(obs, vec![3, 2, 3]);
}

// ---------------------------------------------------------------------------
// Bad arguments.
// ---------------------------------------------------------------------------

/// `min_get` 0, `min_get` above the number in flight (for the operation),
/// and a receive with nothing in flight are errors that take nothing.
pub(crate) fn bad_receive_arguments(with: Configure) {
    let pool = counting(with, 4, StackMode::Dense);
    let zero = Recv::new().min_get(0);
    let is_min_get = |err: &PoolError| matches!(err, PoolError::MinGet { min_get: 0 });
    let err = expect_err(pool.async_step_recv(zero), "step min_get 0");
    assert!(is_min_get(&err), "{err:?}");
    assert_eq!(err.to_string(), "min_get must be at least 1, got 0");
    let err = expect_err(pool.async_reset_recv(zero), "reset min_get 0");
    assert!(is_min_get(&err), "{err:?}");
    let err = expect_err(pool.async_step_and_maybe_reset_recv(zero), "sam min_get 0");
    assert!(is_min_get(&err), "{err:?}");

    // Nothing in flight.
    for recv in [Recv::new(), Recv::new().timeout(Duration::ZERO)] {
        let err = expect_err(pool.async_step_recv(recv), "nothing in flight");
        assert_eq!(
            err,
            PoolError::NotEnoughInFlight {
                op: "step",
                min_get: 1,
                in_flight: 0
            }
        );
        let err = expect_err(pool.async_reset_recv(recv), "nothing in flight");
        assert!(
            matches!(err, PoolError::NotEnoughInFlight { op: "reset", .. }),
            "{err:?}"
        );
        let err = expect_err(pool.async_step_and_maybe_reset_recv(recv), "nothing");
        assert!(
            matches!(
                err,
                PoolError::NotEnoughInFlight {
                    op: "step_and_maybe_reset",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    // min_get above what is in flight, for the operation.
    pool.async_step_send(actions(&[1, 1]), Target::Envs(vec![0, 1]))
        .unwrap();
    let err = expect_err(pool.async_step_recv(Recv::all(3)), "3 of 2");
    assert_eq!(
        err,
        PoolError::NotEnoughInFlight {
            op: "step",
            min_get: 3,
            in_flight: 2
        }
    );
    assert_eq!(
        err.to_string(),
        "cannot wait for 3 step results: only 2 envs are in flight for step"
    );
    let err = expect_err(pool.async_reset_recv(Recv::new()), "steps are in flight");
    assert_eq!(
        err,
        PoolError::NotEnoughInFlight {
            op: "reset",
            min_get: 1,
            in_flight: 0
        }
    );
    let err = expect_err(pool.async_step_recv(zero), "min_get 0 with envs in flight");
    assert!(is_min_get(&err), "{err:?}");
    assert_eq!(pool.in_flight(), vec![0, 1]);
    let batch = pool
        .async_step_recv(Recv::all(2))
        .expect("nothing was taken");
    assert_eq!(sorted_envs(&batch), vec![0, 1]);
}

/// A send to busy envs is an error listing them; it sends nothing, not
/// even to the envs addressed that were idle.
pub(crate) fn busy_send_lists_the_busy_envs(with: Configure) {
    let pool = counting(with, 4, StackMode::Dense);
    pool.reset(None).unwrap();
    pool.async_step_send(actions(&[1, 1]), Target::Envs(vec![0, 1]))
        .unwrap();
    let busy = |result: Result<(), PoolError>| -> Vec<usize> {
        match expect_err(result, "busy send") {
            PoolError::Busy { mut envs } => {
                envs.sort_unstable();
                envs
            }
            other => panic!("expected Busy, got {other:?}"),
        }
    };
    assert_eq!(
        busy(pool.async_step_send(actions(&[1, 1, 1]), Target::Envs(vec![1, 2, 3]))),
        vec![1]
    );
    assert_eq!(
        busy(pool.async_step_send(actions(&[1; 4]), Target::Envs(vec![3, 1, 0, 2]))),
        vec![0, 1]
    );
    assert_eq!(
        busy(pool.async_step_send(actions(&[1; 4]), Target::All)),
        vec![0, 1]
    );
    assert_eq!(
        busy(pool.async_step_send(action(1), Target::Env(1))),
        vec![1]
    );
    assert_eq!(busy(pool.async_reset_send(None, Target::All)), vec![0, 1]);
    assert_eq!(
        busy(pool.async_step_and_maybe_reset_send(actions(&[1]), Target::Envs(vec![0]))),
        vec![0]
    );
    let err = pool
        .async_step_send(actions(&[1, 1]), Target::Envs(vec![1, 2]))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "envs [1] are busy: receive their results before sending to them again"
    );
    assert_eq!(pool.in_flight(), vec![0, 1], "a refused send sends nothing");
    let batch = pool.async_step_recv(Recv::all(2)).unwrap();
    for row in rows(&batch) {
        assert_eq!(int_at(&row, &["next", "observation"]), 1, "stepped once");
    }
    // Once received, the envs take sends again.
    pool.async_step_send(actions(&[1; 4]), Target::All).unwrap();
    assert_eq!(pool.async_step_recv(Recv::all(4)).unwrap().len(), 4);
}

/// Env indices out of range are errors, in every target and in per-env
/// receives.
pub(crate) fn out_of_range_envs_are_errors(with: Configure) {
    let pool = counting(with, 4, StackMode::Dense);
    let out_of_range = |result: Result<(), PoolError>, env: usize| {
        let err = expect_err(result, "out of range");
        assert_eq!(err, PoolError::EnvOutOfRange { env, num_envs: 4 });
    };
    out_of_range(pool.async_step_send(action(1), Target::Env(4)), 4);
    out_of_range(pool.async_reset_send(None, Target::Env(9)), 9);
    out_of_range(
        pool.async_step_send(actions(&[1, 1]), Target::Envs(vec![0, 7])),
        7,
    );
    out_of_range(pool.async_reset_send(None, Target::Envs(vec![4])), 4);
    let mut td = actions(&[1, 1]);
    td.set("env_index", env_index_entry(&[1, 5])).unwrap();
    out_of_range(pool.async_step_send(td, Target::EnvIndex), 5);
    let err = expect_err(pool.async_step_recv_env(4, None), "recv env 4");
    assert_eq!(
        err,
        PoolError::EnvOutOfRange {
            env: 4,
            num_envs: 4
        }
    );
    assert_eq!(
        err.to_string(),
        "env index 4 is out of range for a pool of 4 envs"
    );
    let err = expect_err(pool.async_reset_recv_env(10, None), "recv env 10");
    assert_eq!(
        err,
        PoolError::EnvOutOfRange {
            env: 10,
            num_envs: 4
        }
    );
    assert!(pool.in_flight().is_empty(), "nothing was sent");
}

/// An env addressed twice in one send is an error; nothing is sent.
pub(crate) fn duplicate_envs_are_errors(with: Configure) {
    let pool = counting(with, 4, StackMode::Dense);
    let err = expect_err(
        pool.async_step_send(actions(&[1, 1]), Target::Envs(vec![1, 1])),
        "duplicate",
    );
    assert_eq!(err, PoolError::DuplicateEnv { env: 1 });
    assert_eq!(err.to_string(), "env 1 is addressed twice in one send");
    let mut td = actions(&[1, 1, 1]);
    td.set("env_index", env_index_entry(&[2, 0, 2])).unwrap();
    let err = expect_err(pool.async_step_send(td, Target::EnvIndex), "duplicate");
    assert_eq!(err, PoolError::DuplicateEnv { env: 2 });
    let err = expect_err(
        pool.async_reset_send(None, Target::Envs(vec![3, 0, 3])),
        "duplicate",
    );
    assert_eq!(err, PoolError::DuplicateEnv { env: 3 });
    assert!(pool.in_flight().is_empty(), "nothing was sent");
}

/// A target whose number of envs is not the tensordict's first batch dim
/// is an error; nothing is sent.
pub(crate) fn target_length_mismatch_is_an_error(with: Configure) {
    let pool = counting(with, 4, StackMode::Dense);
    let err = expect_err(
        pool.async_step_send(actions(&[1, 1, 1]), Target::Envs(vec![0, 1])),
        "2 envs, 3 rows",
    );
    assert_eq!(
        err,
        PoolError::TargetLength {
            targets: 2,
            batch_size: vec![3]
        }
    );
    assert_eq!(
        err.to_string(),
        "the target names 2 envs but the tensordict has batch size [3]"
    );
    let err = expect_err(
        pool.async_step_send(actions(&[1, 1, 1]), Target::All),
        "4 envs, 3 rows",
    );
    assert_eq!(
        err,
        PoolError::TargetLength {
            targets: 4,
            batch_size: vec![3]
        }
    );
    let err = expect_err(
        pool.async_step_send(actions(&[1, 1]), Target::Env(0)),
        "one env, 2 rows",
    );
    assert_eq!(
        err,
        PoolError::TargetLength {
            targets: 1,
            batch_size: vec![2]
        }
    );
    let err = expect_err(pool.step(actions(&[1, 1])), "sync step, 2 rows");
    assert!(
        matches!(err, PoolError::TargetLength { targets: 4, .. }),
        "{err:?}"
    );
    assert!(pool.in_flight().is_empty(), "nothing was sent");
    // One env's tensordict may also have a leading dim of 1.
    pool.async_step_send(actions(&[1]), Target::Env(3)).unwrap();
    let out = pool.async_step_recv_env(3, None).unwrap();
    assert_eq!(int_at(&out, &["next", "observation"]), 1);
}

/// `Target::EnvIndex` needs an integer `"env_index"` entry of non-negative
/// indices; anything else is an error; nothing is sent.
pub(crate) fn env_index_target_errors(with: Configure) {
    let pool = counting(with, 4, StackMode::Dense);
    let reason = |result: Result<(), PoolError>| -> String {
        match expect_err(result, "EnvIndex") {
            PoolError::EnvIndex { reason } => reason,
            other => panic!("expected EnvIndex, got {other:?}"),
        }
    };
    let text = reason(pool.async_step_send(actions(&[1, 1]), Target::EnvIndex));
    assert!(text.contains("no \"env_index\" entry"), "{text}");
    let text = reason(pool.async_reset_send(None, Target::EnvIndex));
    assert!(text.contains("env_index"), "{text}");

    let mut negative = actions(&[1, 1]);
    negative
        .set("env_index", Tensor::from_vec(&[2], vec![0i64, -1]).unwrap())
        .unwrap();
    let text = reason(pool.async_step_send(negative, Target::EnvIndex));
    assert!(text.contains("-1") && text.contains("negative"), "{text}");
    let mut negative = actions(&[1]);
    negative
        .set(
            "env_index",
            NonTensor::Stack(vec![NonTensor::Int(-3)].into()),
        )
        .unwrap();
    let text = reason(pool.async_step_send(negative, Target::EnvIndex));
    assert!(text.contains("negative"), "{text}");

    let mut floats = actions(&[1, 1]);
    floats
        .set(
            "env_index",
            Tensor::from_vec(&[2], vec![0.0f32, 1.0]).unwrap(),
        )
        .unwrap();
    let text = reason(pool.async_step_send(floats, Target::EnvIndex));
    assert!(text.contains("f32") || text.contains("dtype"), "{text}");
    let mut strings = actions(&[1, 1]);
    strings
        .set(
            "env_index",
            NonTensor::Stack(vec![NonTensor::Str("a".into()), NonTensor::Str("b".into())].into()),
        )
        .unwrap();
    let text = reason(pool.async_step_send(strings, Target::EnvIndex));
    assert!(text.contains("not integers"), "{text}");
    let mut dict = actions(&[1, 1]);
    dict.set(
        ("env_index", "x"),
        Tensor::from_vec(&[2], vec![0i64, 1]).unwrap(),
    )
    .unwrap();
    let text = reason(pool.async_step_send(dict, Target::EnvIndex));
    assert!(text.contains("tensordict"), "{text}");
    assert!(pool.in_flight().is_empty(), "nothing was sent");

    // i32 indices are fine.
    let mut ok = actions(&[1, 1]);
    ok.set("env_index", Tensor::from_vec(&[2], vec![3i32, 1]).unwrap())
        .unwrap();
    pool.async_step_send(ok, Target::EnvIndex).unwrap();
    assert_eq!(
        sorted_envs(&pool.async_step_recv(Recv::all(2)).unwrap()),
        vec![1, 3]
    );
}

/// A step whose tensordict lacks the action (or holds one of the wrong
/// dtype) is an error naming the env and the key; nothing is sent.
pub(crate) fn step_without_an_action_is_an_error(with: Configure) {
    let pool = counting(with, 4, StackMode::Dense);
    pool.reset(None).unwrap();
    let check = |result: Result<(), PoolError>, env: usize| {
        let err = expect_err(result, "no action");
        assert_names_env(&err, env, "\"action\"");
        assert!(pool.in_flight().is_empty(), "nothing was sent: {err}");
    };
    check(pool.async_step_send(TensorDict::new(&[4]), Target::All), 0);
    check(
        pool.async_step_and_maybe_reset_send(TensorDict::new(&[2]), Target::Envs(vec![2, 1])),
        2,
    );
    check(
        pool.async_step_send(TensorDict::new(&[]), Target::Env(3)),
        3,
    );
    let mut wrong = TensorDict::new(&[4]);
    wrong.set("action", Tensor::full(&[4, 1], 1.0f32)).unwrap();
    check(pool.async_step_send(wrong, Target::All), 0);
    let err = expect_err(pool.step(TensorDict::new(&[4])), "sync step");
    assert_names_env(&err, 0, "\"action\"");
    let err = expect_err(pool.step_and_maybe_reset(TensorDict::new(&[4])), "sync");
    assert_names_env(&err, 0, "\"action\"");
    assert!(pool.in_flight().is_empty());
    // The pool is unharmed.
    let out = pool.step(actions(&[1; 4])).unwrap();
    for row in rows(&out) {
        assert_eq!(int_at(&row, &["next", "observation"]), 1);
    }
}

/// The synchronous calls fail while any env is in flight, naming the envs.
pub(crate) fn sync_calls_fail_while_envs_are_in_flight(with: Configure) {
    let pool = counting(with, 4, StackMode::Dense);
    pool.reset(None).unwrap();
    pool.async_step_send(actions(&[1, 1]), Target::Envs(vec![3, 1]))
        .unwrap();
    let err = expect_err(pool.step(actions(&[1; 4])), "step");
    assert_eq!(
        err,
        PoolError::InFlight {
            op: "step",
            envs: vec![1, 3]
        }
    );
    assert_eq!(
        err.to_string(),
        "envs [1, 3] are still in flight: receive their results before a synchronous step"
    );
    let err = expect_err(pool.reset(None), "reset");
    assert_eq!(
        err,
        PoolError::InFlight {
            op: "reset",
            envs: vec![1, 3]
        }
    );
    let err = expect_err(pool.step_and_maybe_reset(actions(&[1; 4])), "sam");
    assert_eq!(
        err,
        PoolError::InFlight {
            op: "step_and_maybe_reset",
            envs: vec![1, 3]
        }
    );
    // A per-env send counts too.
    assert_eq!(pool.async_step_recv(Recv::all(2)).unwrap().len(), 2);
    pool.async_reset_send(None, Target::Env(2)).unwrap();
    let err = expect_err(pool.step(actions(&[1; 4])), "step");
    assert_eq!(
        err,
        PoolError::InFlight {
            op: "step",
            envs: vec![2]
        }
    );
    pool.async_reset_recv_env(2, None).unwrap();
    assert_eq!(pool.step(actions(&[1; 4])).unwrap().len(), 4);
}

/// A per-env receive of an env with nothing in flight for that operation
/// is an error.
pub(crate) fn per_env_receive_of_an_idle_env_is_an_error(with: Configure) {
    let pool = counting(with, 4, StackMode::Dense);
    let err = expect_err(pool.async_step_recv_env(0, None), "idle");
    assert_eq!(err, PoolError::NotInFlight { op: "step", env: 0 });
    assert_eq!(err.to_string(), "env 0 has no step in flight");
    let err = expect_err(pool.async_reset_recv_env(1, None), "idle");
    assert_eq!(
        err,
        PoolError::NotInFlight {
            op: "reset",
            env: 1
        }
    );
    let err = expect_err(pool.async_step_and_maybe_reset_recv_env(2, None), "idle");
    assert_eq!(
        err,
        PoolError::NotInFlight {
            op: "step_and_maybe_reset",
            env: 2
        }
    );
    // In flight for another operation.
    pool.async_step_send(action(1), Target::Env(0)).unwrap();
    let err = expect_err(pool.async_reset_recv_env(0, None), "other op");
    assert_eq!(
        err,
        PoolError::NotInFlight {
            op: "reset",
            env: 0
        }
    );
    let err = expect_err(
        pool.async_step_and_maybe_reset_recv_env(0, Some(Duration::ZERO)),
        "other op",
    );
    assert!(
        matches!(err, PoolError::NotInFlight { env: 0, .. }),
        "{err:?}"
    );
    assert_eq!(
        int_at(
            &pool.async_step_recv_env(0, None).unwrap(),
            &["next", "observation"]
        ),
        1
    );
}

/// A per-env receive that times out is `EnvTimeout` and takes nothing: the
/// result arrives with a later receive.
pub(crate) fn per_env_timeout_keeps_the_result(with: Configure) {
    const STEP_US: i64 = 300_000;
    let pool = sleepers(with, &[STEP_US, 0], StackMode::Dense);
    pool.reset(None).unwrap();
    let timeout = Duration::from_millis(20);
    let sent = Instant::now();
    pool.async_step_send(action(0), Target::Env(0)).unwrap();
    let called = Instant::now();
    let first = pool.async_step_recv_env(0, Some(timeout));
    let waited = called.elapsed();
    let mut taken = false;
    if sent.elapsed() < Duration::from_micros(STEP_US as u64) {
        let err = expect_err(first, "env 0 cannot have finished");
        assert_eq!(
            err,
            PoolError::EnvTimeout {
                op: "step",
                env: 0,
                timeout
            }
        );
        assert!(waited >= timeout, "waited {waited:?}, at least the timeout");
        assert!(err.to_string().contains("its result stays"), "{err}");
    } else {
        taken = first.is_ok();
    }
    if !taken {
        let out = pool
            .async_step_recv_env(0, None)
            .expect("the result stayed");
        assert_eq!(row_env(&out), 0);
    }
    // A per-env poll of a finished env returns it.
    pool.async_step_send(action(0), Target::Env(1)).unwrap();
    let out = loop {
        match pool.async_step_recv_env(1, Some(Duration::ZERO)) {
            Ok(out) => break out,
            Err(PoolError::EnvTimeout { env: 1, .. }) => std::thread::yield_now(),
            Err(err) => panic!("{err}"),
        }
    };
    assert_eq!(row_env(&out), 1);
}

/// A batch receive that times out before `min_get` is a `Timeout` that
/// takes nothing: a later receive gets every result.
pub(crate) fn batch_timeout_loses_nothing(with: Configure) {
    const STEP_US: i64 = 300_000;
    let pool = sleepers(with, &[STEP_US, STEP_US, 0], StackMode::Dense);
    pool.reset(None).unwrap();
    let timeout = Duration::from_millis(20);
    let sent = Instant::now();
    pool.async_step_send(actions(&[0, 0, 0]), Target::All)
        .unwrap();
    let called = Instant::now();
    let first = pool.async_step_recv(Recv::all(3).timeout(timeout));
    let waited = called.elapsed();
    if sent.elapsed() < Duration::from_micros(STEP_US as u64) {
        let err = expect_err(first, "envs 0 and 1 cannot have finished");
        match err {
            PoolError::Timeout {
                op: "step",
                timeout: t,
                ready,
                min_get: 3,
            } => {
                assert_eq!(t, timeout);
                assert!(ready <= 1, "only env 2 can be ready: {ready}");
            }
            other => panic!("expected Timeout, got {other:?}"),
        }
        assert!(waited >= timeout, "waited {waited:?}, at least the timeout");
        let all = pool.async_step_recv(Recv::all(3)).expect("nothing lost");
        assert_eq!(sorted_envs(&all), vec![0, 1, 2]);
    } else if first.is_err() {
        let all = pool.async_step_recv(Recv::all(3)).expect("nothing lost");
        assert_eq!(all.len(), 3);
    }
    assert!(pool.in_flight().is_empty());
}

/// Pools that cannot be built: no env, per-env keyword arguments of the
/// wrong number, an unknown env name (the error lists the known names),
/// keyword arguments an env does not accept.
pub(crate) fn build_errors(with: Configure) {
    let err = with(AsyncEnvPool::builder()).build().unwrap_err();
    assert_eq!(err, PoolError::NoEnvs);
    assert_eq!(err.to_string(), "a pool needs at least one env");
    let err = with(AsyncEnvPool::builder())
        .registered_each("CountingEnv", 3, vec![Kwargs::new(); 2])
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        PoolError::KwargsLength {
            name: "CountingEnv".into(),
            expected: 3,
            found: 2
        }
    );
    assert_eq!(
        err.to_string(),
        "CountingEnv: 2 sets of keyword arguments for 3 envs"
    );
    let err = with(AsyncEnvPool::builder())
        .registered_n("Nope-v0", 2, Kwargs::new())
        .build()
        .unwrap_err();
    let text = err.to_string();
    for name in [
        "Nope-v0",
        "CartPole-v1",
        "CountingEnv",
        "LatencyEnv",
        "Pendulum-v1",
    ] {
        assert!(text.contains(name), "the error lists {name}: {text}");
    }
    let err = with(AsyncEnvPool::builder())
        .registered_n("CountingEnv", 1, Kwargs::new())
        .registered_n("CountingEnv", 1, Kwargs::new().with("max_step", 3))
        .build()
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("env 1"), "names the env: {text}");
    assert!(
        text.contains("max_step") && text.contains("accepted"),
        "{text}"
    );
}

// ---------------------------------------------------------------------------
// Shutdown.
// ---------------------------------------------------------------------------

/// After `shutdown` (with results still in flight), every call is
/// `ShutDown`; shutdown is idempotent and dropping the pool after it is
/// clean.
pub(crate) fn calls_after_shutdown_are_errors(with: Configure) {
    let pool = counting(with, 3, StackMode::Dense);
    pool.reset(None).unwrap();
    pool.async_step_send(actions(&[1, 1]), Target::Envs(vec![0, 1]))
        .unwrap();
    pool.shutdown();
    pool.shutdown();
    let shut = |err: PoolError| assert_eq!(err, PoolError::ShutDown, "{err}");
    shut(pool.reset(None).unwrap_err());
    shut(pool.step(actions(&[1; 3])).unwrap_err());
    shut(pool.step_and_maybe_reset(actions(&[1; 3])).unwrap_err());
    shut(pool.async_reset_send(None, Target::Env(2)).unwrap_err());
    shut(pool.async_step_send(action(1), Target::Env(2)).unwrap_err());
    shut(
        pool.async_step_and_maybe_reset_send(actions(&[1]), Target::Envs(vec![2]))
            .unwrap_err(),
    );
    shut(pool.async_step_recv(Recv::new()).unwrap_err());
    shut(pool.async_reset_recv(Recv::new()).unwrap_err());
    shut(
        pool.async_step_and_maybe_reset_recv(Recv::new())
            .unwrap_err(),
    );
    shut(pool.async_step_recv_env(0, None).unwrap_err());
    shut(pool.async_reset_recv_env(2, None).unwrap_err());
    shut(
        pool.async_step_and_maybe_reset_recv_env(2, None)
            .unwrap_err(),
    );
    assert_eq!(PoolError::ShutDown.to_string(), "the pool is shut down");
    drop(pool);
}

/// Dropping a pool with results in flight (envs still stepping) shuts it
/// down without waiting for anyone to receive them.
pub(crate) fn drop_with_results_in_flight(with: Configure) {
    let pool = sleepers(with, &[20_000; 4], StackMode::Dense);
    pool.reset(None).unwrap();
    pool.async_step_send(actions(&[0; 4]), Target::All).unwrap();
    drop(pool);
    let pool = counting(with, 4, StackMode::Dense);
    pool.async_reset_send(None, Target::All).unwrap();
    drop(pool);
}

/// A receive blocked (without a timeout) while another thread shuts the
/// pool down returns `ShutDown` instead of waiting forever for results that
/// will never come (a shutdown drops the envs no worker has started).
pub(crate) fn shutdown_wakes_blocked_receivers(with: Configure) {
    let pool = sleepers(with, &[50_000; 8], StackMode::Dense);
    pool.reset(None).unwrap();
    pool.async_step_send(actions(&[0; 7]), Target::Envs((0..7).collect()))
        .unwrap();
    pool.async_step_send(action(0), Target::Env(7)).unwrap();
    std::thread::scope(|scope| {
        let pool = &pool;
        // Each receiver gives back its error, if any.
        let batch = scope.spawn(move || pool.async_step_recv(Recv::all(7)).err());
        let single = scope.spawn(move || pool.async_step_recv_env(7, None).err());
        // Give the receivers time to block (not needed for correctness: a
        // receive that starts after the shutdown fails at once).
        std::thread::sleep(Duration::from_millis(10));
        pool.shutdown();
        for (name, handle) in [("batch", batch), ("per-env", single)] {
            // Results that were published before the shutdown may be
            // received; no receive may hang.
            match handle.join().expect("the receiver does not panic") {
                None | Some(PoolError::ShutDown) => {}
                Some(err) => panic!("{name} receive: {err}"),
            }
        }
    });
}
