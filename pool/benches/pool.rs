//! The threading pool against a single-threaded loop over the same envs.
//!
//! - `raw`: one thread steps N envs in turn with `step_into` on reused
//!   buffers: the env's own cost, the baseline.
//! - `sync_step`: `pool.step` over all N envs (CartPoles reset by a
//!   `pool.reset` every 8 steps); `sync_samr`: `pool.step_and_maybe_reset`
//!   over all N, the raw loop's own pattern (step, reset the envs that are
//!   done) with no extra batch.
//! - `async_half`: steady state of an asynchronous collector: receive the
//!   first N/2 results (`min_get = max_get = N/2`), send those envs new
//!   actions (with `step_and_maybe_reset`); `async_step_half` the same with
//!   plain `async_step`.
//!
//! Each iteration counts its env-steps as items, so divan prints env-steps
//! per second; the pool's overhead per env-step is the difference of the
//! per-item times of `sync_step` (or `async_half`) and `raw`.

use divan::counter::ItemsCount;
use divan::Bencher;
use envs::Kwargs;
use pool::{AsyncEnvPool, Recv, Target};
use tensordict::{Tensor, TensorDict};

#[path = "common/raw.rs"]
mod raw;
use raw::RawLoop;

fn main() {
    divan::main();
}

const ENVS: &[&str] = &["CartPole-v1", "CountingEnv"];

fn kwargs(name: &str) -> Kwargs {
    if name == "CountingEnv" {
        // Never done: the counter runs for the whole benchmark.
        Kwargs::new().with("max_steps", i64::from(i32::MAX))
    } else {
        Kwargs::new()
    }
}

fn actions(n: usize) -> TensorDict {
    let mut td = TensorDict::new(&[n]);
    td.set("action", Tensor::full(&[n, 1], 1i64))
        .expect("batch [n]");
    td
}

fn pool_of(name: &str, n: usize) -> AsyncEnvPool {
    let pool = AsyncEnvPool::builder()
        .registered_n(name, n, kwargs(name))
        .build()
        .expect("a pool of reference envs");
    pool.reset(None).expect("reset");
    pool
}

/// The baseline: N envs stepped in turn by one thread, `step_into` on reused
/// buffers, reset when done ([`RawLoop`]).
#[divan::bench(consts = [1, 8, 64], args = ENVS)]
fn raw<const N: usize>(bencher: Bencher<'_, '_>, name: &str) {
    let mut envs = RawLoop::new(name, &kwargs(name), N);
    bencher
        .counter(ItemsCount::new(N))
        .bench_local(|| envs.round());
}

/// `pool.step` over all N envs (a CartPole pole falls within ~10 steps of
/// pushing right; the envs are reset by the pool's caller when all are done).
#[divan::bench(consts = [1, 8, 64], args = ENVS)]
fn sync_step<const N: usize>(bencher: Bencher<'_, '_>, name: &str) {
    let pool = pool_of(name, N);
    let td = actions(N);
    let mut steps = 0u32;
    bencher.counter(ItemsCount::new(N)).bench_local(|| {
        let out = pool.step(td.clone()).expect("step");
        steps += 1;
        // Keep CartPole's episodes going: reset every 8 steps, outside the
        // pole's fall (the reset is counted in the time, as a collector pays it).
        if name == "CartPole-v1" && steps % 8 == 0 {
            pool.reset(None).expect("reset");
        }
        out
    });
}

/// `pool.step_and_maybe_reset` over all N envs: each env is reset in the
/// step that ends its episode, as the raw loop does (no extra reset batch).
#[divan::bench(consts = [1, 8, 64], args = ENVS)]
fn sync_samr<const N: usize>(bencher: Bencher<'_, '_>, name: &str) {
    let pool = pool_of(name, N);
    let td = actions(N);
    bencher
        .counter(ItemsCount::new(N))
        .bench_local(|| pool.step_and_maybe_reset(td.clone()).expect("step"));
}

/// An asynchronous collector at steady state: take the first N/2 results,
/// send those envs new actions.
#[divan::bench(consts = [8, 64], args = ENVS)]
fn async_half<const N: usize>(bencher: Bencher<'_, '_>, name: &str) {
    let pool = AsyncEnvPool::builder()
        .registered_n(name, N, kwargs(name))
        .build()
        .expect("pool");
    pool.reset(None).expect("reset");
    // step_and_maybe_reset keeps every episode going by itself.
    pool.async_step_and_maybe_reset_send(actions(N), Target::All)
        .expect("send");
    let half = N / 2;
    let recv = Recv::new().min_get(half).max_get(half);
    let half_actions = actions(half);
    bencher.counter(ItemsCount::new(half)).bench_local(|| {
        let (step, _root) = pool.async_step_and_maybe_reset_recv(recv).expect("recv");
        let ids: Vec<usize> = step.env_indices().to_vec();
        pool.async_step_and_maybe_reset_send(half_actions.clone(), Target::Envs(ids))
            .expect("send");
    });
}

/// The same collector with plain `async_step` (no reset: a CountingEnv
/// never ends; a CartPole steps on past its pole's fall).
#[divan::bench(consts = [8, 64], args = ENVS)]
fn async_step_half<const N: usize>(bencher: Bencher<'_, '_>, name: &str) {
    let pool = AsyncEnvPool::builder()
        .registered_n(name, N, kwargs(name))
        .build()
        .expect("pool");
    pool.reset(None).expect("reset");
    pool.async_step_send(actions(N), Target::All).expect("send");
    let half = N / 2;
    let recv = Recv::new().min_get(half).max_get(half);
    let half_actions = actions(half);
    bencher.counter(ItemsCount::new(half)).bench_local(|| {
        let step = pool.async_step_recv(recv).expect("recv");
        let ids: Vec<usize> = step.env_indices().to_vec();
        pool.async_step_send(half_actions.clone(), Target::Envs(ids))
            .expect("send");
    });
}

/// LatencyEnv at 50 us per step (spinning), 8 envs: the pool with 2 worker
/// threads against one thread stepping them in turn.
#[divan::bench(args = ["pool_2_threads", "single_thread"])]
fn latency_50us_8_envs(bencher: Bencher<'_, '_>, how: &str) {
    let kwargs = Kwargs::new().with("step_us", 50);
    if how == "single_thread" {
        // The raw loop (LatencyEnv is never done with these arguments).
        let mut envs = RawLoop::new("LatencyEnv", &kwargs, 8);
        bencher
            .counter(ItemsCount::new(8usize))
            .bench_local(|| envs.round());
    } else {
        let pool = AsyncEnvPool::builder()
            .registered_n("LatencyEnv", 8, kwargs)
            .backend(pool::Backend::Threading(
                pool::ThreadOptions::default().threads(2),
            ))
            .build()
            .expect("pool");
        pool.reset(None).expect("reset");
        let td = actions(8);
        bencher
            .counter(ItemsCount::new(8usize))
            .bench_local(|| pool.step(td.clone()).expect("step"));
    }
}
