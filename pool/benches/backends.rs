//! The pool's backends side by side in one run: worker threads, worker
//! processes with the queue exchange, worker processes with shared-memory
//! slots (free to run anywhere, and pinned one per CPU), against a
//! single-threaded loop over the same envs.
//!
//! Two workloads, each with 2, 8 and 32 envs: `cartpole` (CartPole-v1, a few
//! hundred nanoseconds per step: the pool's own cost dominates) and
//! `latency_50us` (LatencyEnv spinning 50 us per step: the envs' cost
//! dominates, parallelism pays). Every backend has 2 workers: 2 threads, or
//! 2 processes of N/2 envs each.
//!
//! - `raw`: one thread steps the N envs in turn with `step_into` on reused
//!   buffers (as in `pool.rs`): the envs' own cost, the baseline.
//! - `sync_step`: `pool.step` over all N envs.
//! - `async_half`: an asynchronous collector at steady state: every env is
//!   sent an action before timing starts; each iteration receives the first
//!   N/2 results (`min_get = max_get = N/2`, `async_step_recv`) and sends
//!   those envs new actions (`async_step_send`).
//!
//! Each iteration counts its env-steps as items, so divan prints env-steps
//! per second; the pool's overhead per env-step is the per-item time of
//! `sync_step` (or `async_half`) minus that of `raw`. Pools are built (and
//! their workers started, tens of milliseconds) before timing starts.
//!
//! Worker processes are this benchmark binary started again: `main` calls
//! `pool::init()` first, which never returns in a worker.

use std::fmt;

use divan::counter::ItemsCount;
use divan::Bencher;
use envs::Kwargs;
use pool::{Affinity, AsyncEnvPool, Backend, ExchangeMode, ProcOptions, Recv, Target};
use tensordict::{Tensor, TensorDict};

#[path = "common/raw.rs"]
mod raw;
use raw::RawLoop;

fn main() {
    pool::init();
    divan::main();
}

/// The envs a benchmark steps.
#[derive(Clone, Copy, Debug)]
enum Workload {
    /// CartPole-v1: cheap steps, episodes that end (reset when done).
    CartPole,
    /// LatencyEnv spinning 50 us per step, never done.
    Latency50us,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::CartPole => "CartPole-v1",
            Workload::Latency50us => "LatencyEnv",
        }
    }

    fn kwargs(self) -> Kwargs {
        match self {
            Workload::CartPole => Kwargs::new(),
            Workload::Latency50us => Kwargs::new().with("step_us", 50),
        }
    }
}

/// The backend a pool runs on, each with 2 workers.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// `Backend::Threading` with 2 threads.
    Threads,
    /// `Backend::Multiprocessing`, 2 workers of N/2 envs, queue exchange.
    ProcsQueue,
    /// `Backend::Multiprocessing`, 2 workers of N/2 envs, shm exchange.
    ProcsShm,
    /// As `ProcsShm`, with worker `w` pinned to the `w`-th CPU this process
    /// may use (`ProcOptions::affinity`): on 2 cores the scheduler sometimes
    /// runs both workers on one core, one after the other, for milliseconds
    /// (`perf sched`); pinned, each has its own.
    ProcsShmPinned,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Threads => "threads",
            Kind::ProcsQueue => "procs_queue",
            Kind::ProcsShm => "procs_shm",
            Kind::ProcsShmPinned => "procs_shm_pinned",
        })
    }
}

impl Kind {
    fn backend(self, n: usize) -> Backend {
        let procs = |exchange| {
            ProcOptions::default()
                .envs_per_worker(n / 2)
                .exchange(exchange)
        };
        match self {
            Kind::Threads => Backend::Threading(pool::ThreadOptions::default().threads(2)),
            Kind::ProcsQueue => Backend::Multiprocessing(procs(ExchangeMode::Queue)),
            Kind::ProcsShm => Backend::Multiprocessing(procs(ExchangeMode::Shm)),
            Kind::ProcsShmPinned => {
                let cpus = pool::available_cpus().expect("the CPUs this process may use");
                let pinned = Affinity::by_worker(move |w| [cpus[w % cpus.len()]]);
                Backend::Multiprocessing(procs(ExchangeMode::Shm).affinity(pinned))
            }
        }
    }
}

const KINDS: [Kind; 4] = [
    Kind::Threads,
    Kind::ProcsQueue,
    Kind::ProcsShm,
    Kind::ProcsShmPinned,
];

fn actions(n: usize) -> TensorDict {
    let mut td = TensorDict::new(&[n]);
    td.set("action", Tensor::full(&[n, 1], 1i64))
        .expect("batch [n]");
    td
}

/// A pool of `n` envs of `workload` on `kind`, reset.
fn pool_of(workload: Workload, kind: Kind, n: usize) -> AsyncEnvPool {
    let pool = AsyncEnvPool::builder()
        .registered_n(workload.name(), n, workload.kwargs())
        .backend(kind.backend(n))
        .build()
        .unwrap_or_else(|err| panic!("a pool of {n} {} on {kind}: {err}", workload.name()));
    pool.reset(None).expect("reset");
    pool
}

/// The baseline: `n` envs stepped in turn by one thread, `step_into` on
/// reused buffers, reset when done ([`RawLoop`]).
fn raw(bencher: Bencher<'_, '_>, workload: Workload, n: usize) {
    let mut envs = RawLoop::new(workload.name(), &workload.kwargs(), n);
    bencher
        .counter(ItemsCount::new(n))
        .bench_local(|| envs.round());
}

/// `pool.step` over all `n` envs. CartPole's envs are reset by the caller
/// every 8 steps, within a pole's fall (~10 steps pushing right); the reset
/// is in the time, as a collector pays it (as in `pool.rs`).
fn sync_step(bencher: Bencher<'_, '_>, workload: Workload, kind: Kind, n: usize) {
    let pool = pool_of(workload, kind, n);
    let td = actions(n);
    let resets = matches!(workload, Workload::CartPole);
    let mut steps = 0u32;
    bencher.counter(ItemsCount::new(n)).bench_local(|| {
        let out = pool.step(td.clone()).expect("step");
        steps += 1;
        if resets && steps % 8 == 0 {
            pool.reset(None).expect("reset");
        }
        out
    });
}

/// An asynchronous collector at steady state: take the first `n / 2`
/// results, send those envs new actions (plain `async_step`: a CartPole
/// steps on past its pole's fall).
fn async_half(bencher: Bencher<'_, '_>, workload: Workload, kind: Kind, n: usize) {
    let pool = pool_of(workload, kind, n);
    pool.async_step_send(actions(n), Target::All).expect("send");
    let half = n / 2;
    let recv = Recv::new().min_get(half).max_get(half);
    let half_actions = actions(half);
    bencher.counter(ItemsCount::new(half)).bench_local(|| {
        let step = pool.async_step_recv(recv).expect("recv");
        let ids: Vec<usize> = step.env_indices().to_vec();
        pool.async_step_send(half_actions.clone(), Target::Envs(ids))
            .expect("send");
    });
}

/// The three benchmarks of one workload, in a module (a divan group) of
/// their own.
macro_rules! workload {
    ($module:ident, $workload:expr) => {
        mod $module {
            use super::*;

            #[divan::bench(consts = [2, 8, 32])]
            fn raw<const N: usize>(bencher: Bencher<'_, '_>) {
                super::raw(bencher, $workload, N);
            }

            #[divan::bench(consts = [2, 8, 32], args = KINDS)]
            fn sync_step<const N: usize>(bencher: Bencher<'_, '_>, kind: Kind) {
                super::sync_step(bencher, $workload, kind, N);
            }

            #[divan::bench(consts = [2, 8, 32], args = KINDS)]
            fn async_half<const N: usize>(bencher: Bencher<'_, '_>, kind: Kind) {
                super::async_half(bencher, $workload, kind, N);
            }
        }
    };
}

workload!(cartpole, Workload::CartPole);
workload!(latency_50us, Workload::Latency50us);
