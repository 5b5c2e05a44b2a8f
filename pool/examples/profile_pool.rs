//! A fixed amount of pool work for profilers: the loops of
//! `pool/benches/pool.rs` (`raw`, `sync_step`, `async_half`,
//! `async_step_half`) run a given number of times, so that instruction
//! counts (`valgrind --tool=callgrind`) compare two versions of the pool
//! without the noise of wall-clock time on a shared machine.
//!
//! Run: `cargo run --release -p pool --example profile_pool -- sync 64 1000`
//! (`raw`, `sync`, `sync_samr`, `async`, `async_step`; env count;
//! iterations; env name, default `CartPole-v1`; `LatencyEnv` spins 50 us a
//! step; worker threads, default one per core, or `procs` for worker
//! processes with the shm exchange, one per core). Prints the wall-clock
//! time per env-step too.
//!
//! `split` is no pool but the bound of any: the raw loop's envs in two
//! halves, one stepped by the calling thread and one by a second thread,
//! the two meeting once per round at a spinning barrier (no queue, no
//! lock, no sleep): what two threads on this machine can do with one
//! hand-off per batch each way.

use std::time::Instant;

use envs::Kwargs;
use pool::{AsyncEnvPool, Backend, ExchangeMode, ProcOptions, Recv, Target, ThreadOptions};
use tensordict::{Tensor, TensorDict};

#[path = "../benches/common/raw.rs"]
mod raw;
use raw::RawLoop;

fn actions(n: usize) -> TensorDict {
    let mut td = TensorDict::new(&[n]);
    td.set("action", Tensor::full(&[n, 1], 1i64))
        .expect("batch [n]");
    td
}

fn kwargs(name: &str) -> Kwargs {
    if name == "CountingEnv" {
        Kwargs::new().with("max_steps", i64::from(i32::MAX))
    } else if name == "LatencyEnv" {
        Kwargs::new().with("step_us", 50)
    } else {
        Kwargs::new()
    }
}

fn pool_of(name: &str, n: usize, workers: Option<&str>) -> AsyncEnvPool {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let backend = match workers {
        Some("procs") => Backend::Multiprocessing(
            ProcOptions::default()
                .envs_per_worker(n.div_ceil(cores))
                .exchange(ExchangeMode::Shm),
        ),
        Some(threads) => Backend::Threading(
            ThreadOptions::default().threads(threads.parse().expect("worker threads or procs")),
        ),
        None => Backend::Threading(ThreadOptions::default()),
    };
    let pool = AsyncEnvPool::builder()
        .registered_n(name, n, kwargs(name))
        .backend(backend)
        .build()
        .expect("a pool of reference envs");
    pool.reset(None).expect("reset");
    pool
}

fn main() {
    // A worker process of the `procs` pools is this program re-executed.
    pool::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map_or("sync", String::as_str);
    let n: usize = args.get(1).map_or(64, |s| s.parse().expect("env count"));
    let iters: usize = args.get(2).map_or(1000, |s| s.parse().expect("iterations"));
    let name = args.get(3).map_or("CartPole-v1", String::as_str);
    let workers = args.get(4).map(String::as_str);
    let start;
    let steps;
    match mode {
        "raw" => {
            let mut envs = RawLoop::new(name, &kwargs(name), n);
            start = Instant::now();
            for _ in 0..iters {
                envs.round();
            }
            steps = iters * n;
        }
        "split" => {
            steps = iters * n;
            start = Instant::now();
            split(name, n, iters);
        }
        "sync" => {
            let pool = pool_of(name, n, workers);
            let td = actions(n);
            start = Instant::now();
            for i in 1..=iters {
                let out = pool.step(td.clone()).expect("step");
                std::hint::black_box(out);
                if name == "CartPole-v1" && i % 8 == 0 {
                    pool.reset(None).expect("reset");
                }
            }
            steps = iters * n;
        }
        "sync_samr" => {
            let pool = pool_of(name, n, workers);
            let td = actions(n);
            start = Instant::now();
            for _ in 0..iters {
                let out = pool.step_and_maybe_reset(td.clone()).expect("step");
                std::hint::black_box(out);
            }
            steps = iters * n;
        }
        "async" | "async_step" => {
            let pool = pool_of(name, n, workers);
            let half = n / 2;
            let recv = Recv::new().min_get(half).max_get(half);
            let half_actions = actions(half);
            let with_reset = mode == "async";
            if with_reset {
                pool.async_step_and_maybe_reset_send(actions(n), Target::All)
                    .expect("send");
            } else {
                pool.async_step_send(actions(n), Target::All).expect("send");
            }
            start = Instant::now();
            for _ in 0..iters {
                if with_reset {
                    let (step, _root) = pool.async_step_and_maybe_reset_recv(recv).expect("recv");
                    let ids = step.env_indices().to_vec();
                    pool.async_step_and_maybe_reset_send(half_actions.clone(), Target::Envs(ids))
                        .expect("send");
                } else {
                    let step = pool.async_step_recv(recv).expect("recv");
                    let ids = step.env_indices().to_vec();
                    pool.async_step_send(half_actions.clone(), Target::Envs(ids))
                        .expect("send");
                }
            }
            steps = iters * half;
        }
        other => {
            panic!("unknown mode {other:?}: raw, split, sync, sync_samr, async or async_step")
        }
    }
    let elapsed = start.elapsed();
    println!(
        "{mode} {name} x{n}: {iters} iterations, {:.1} ns per env-step",
        elapsed.as_nanos() as f64 / steps as f64
    );
}

/// The `split` mode: `iters` rounds of `n` envs, half on this thread and
/// half on a helper, which spins on the round counter and answers with its
/// own (both threads spin: this is the cheapest hand-off there is).
fn split(name: &str, n: usize, iters: usize) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let mut mine = RawLoop::new(name, &kwargs(name), n - n / 2);
    let mut theirs = RawLoop::new(name, &kwargs(name), n / 2);
    let (round, done) = (AtomicUsize::new(0), AtomicUsize::new(0));
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for i in 1..=iters {
                while round.load(Ordering::Acquire) < i {
                    std::hint::spin_loop();
                }
                theirs.round();
                done.store(i, Ordering::Release);
            }
        });
        for i in 1..=iters {
            round.store(i, Ordering::Release);
            mine.round();
            while done.load(Ordering::Acquire) < i {
                std::hint::spin_loop();
            }
        }
    });
}
