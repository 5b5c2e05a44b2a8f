//! The pool's overhead per env-step (the issues' targets), measured as
//! *paired* samples: a block of the baseline (one thread stepping the same
//! kind of envs in turn), then a block of the pool, alternately (the order
//! flipped every pair), so that both sides of the difference see the
//! machine in the same state.
//!
//! Why: on a shared virtual machine the speed of one thread drifts by tens
//! of percent between runs minutes apart (docs/performance.md), so a
//! difference of two medians taken seconds apart (divan runs one
//! benchmark's samples, then the next's) is mostly that drift. Here
//! each pair is taken within a few milliseconds; the figure is the median
//! over pairs of the per-pair difference, with its interquartile range.
//!
//! Only the CartPole rows are here. LatencyEnv's steps take wall-clock
//! time, whatever the CPU's speed, so its speed-ups (in `pool.rs` and
//! `backends.rs`) do not drift that way; and interleaving would change what
//! they measure: while the baseline keeps one core busy, the pool's idle
//! workers sleep, and the scheduler may wake them all on the other core.
//!
//! `cargo bench -p pool --bench paired` (about 2 s per row; `cargo xtask
//! bench` runs it with the others). Without `--bench` (`cargo test
//! --benches`) each row takes a few pairs only, a smoke test.
//!
//! Worker processes are this binary started again: `main` calls
//! `pool::init()` first.

use std::hint::black_box;
use std::time::{Duration, Instant};

use envs::Kwargs;
use pool::{AsyncEnvPool, Backend, ExchangeMode, ProcOptions, Recv, Target};
use tensordict::{Tensor, TensorDict};

#[path = "common/raw.rs"]
mod raw;
use raw::RawLoop;

fn main() {
    pool::init();
    let bench = std::env::args().any(|arg| arg == "--bench");
    let budget = if bench {
        Budget::Time(Duration::from_secs(2))
    } else {
        Budget::Pairs(8)
    };
    println!("paired samples: pool vs baseline, alternately ({budget:?} a row)");
    println!(
        "{:<58} {:>10} {:>10}   {:<34} target",
        "row", "pool", "baseline", "overhead: paired median (IQR)"
    );
    for row in ROWS {
        row.run(budget);
    }
}

/// How many pairs a row takes.
#[derive(Clone, Copy, Debug)]
enum Budget {
    /// As many as fit in this time (after a warm-up of a tenth of it).
    Time(Duration),
    /// This many (after as many warm-up pairs).
    Pairs(usize),
}

/// How long one side of a pair runs (a block of samples).
const BLOCK: Duration = Duration::from_millis(2);

/// The envs and how the pool runs them.
#[derive(Clone, Copy, Debug)]
enum Pool {
    /// The default `Backend::Threading` (as many threads as cores).
    Threads,
    /// `Backend::Multiprocessing`, 2 workers of N/2 envs, shm exchange.
    ProcsShm,
}

/// One operation, timed as one sample.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// `pool.step` over all envs (CartPoles reset by `pool.reset` every 8
    /// steps, in the time, as in `pool.rs`).
    Step,
    /// `pool.step_and_maybe_reset` over all envs.
    StepAndMaybeReset,
    /// Steady state of an asynchronous collector (`step_and_maybe_reset`):
    /// receive the first N/2, send those envs new actions.
    AsyncHalf,
}

struct Row {
    /// What the row shows and the target.
    title: &'static str,
    target: &'static str,
    env: &'static str,
    n: usize,
    pool: Pool,
    op: Op,
}

const ROWS: &[Row] = &[
    Row {
        title: "threads, CartPole x64, step",
        target: "issue 3: <= 250 ns",
        env: "CartPole-v1",
        n: 64,
        pool: Pool::Threads,
        op: Op::Step,
    },
    Row {
        title: "threads, CartPole x64, step_and_maybe_reset",
        target: "",
        env: "CartPole-v1",
        n: 64,
        pool: Pool::Threads,
        op: Op::StepAndMaybeReset,
    },
    Row {
        title: "threads, CartPole x64, async min_get=N/2 (samr)",
        target: "issue 3: <= 500 ns",
        env: "CartPole-v1",
        n: 64,
        pool: Pool::Threads,
        op: Op::AsyncHalf,
    },
    Row {
        title: "procs shm (2), CartPole x32, step",
        target: "issue 5: <= 2000 ns",
        env: "CartPole-v1",
        n: 32,
        pool: Pool::ProcsShm,
        op: Op::Step,
    },
];

fn actions(n: usize) -> TensorDict {
    let mut td = TensorDict::new(&[n]);
    td.set("action", Tensor::full(&[n, 1], 1i64))
        .expect("batch [n]");
    td
}

impl Pool {
    fn backend(self, n: usize) -> Backend {
        match self {
            Pool::Threads => Backend::default(),
            Pool::ProcsShm => Backend::Multiprocessing(
                ProcOptions::default()
                    .envs_per_worker(n / 2)
                    .exchange(ExchangeMode::Shm),
            ),
        }
    }
}

/// A pool and the operation a sample runs on it.
struct Driver {
    pool: AsyncEnvPool,
    op: Op,
    n: usize,
    env: &'static str,
    actions: TensorDict,
    half_actions: TensorDict,
    steps: u32,
}

impl Driver {
    fn new(row: &Row) -> Driver {
        let pool = AsyncEnvPool::builder()
            .registered_n(row.env, row.n, Kwargs::new())
            .backend(row.pool.backend(row.n))
            .build()
            .unwrap_or_else(|err| panic!("{}: building the pool: {err}", row.title));
        pool.reset(None).expect("reset");
        if let Op::AsyncHalf = row.op {
            pool.async_step_and_maybe_reset_send(actions(row.n), Target::All)
                .expect("send");
        }
        Driver {
            pool,
            op: row.op,
            n: row.n,
            env: row.env,
            actions: actions(row.n),
            half_actions: actions(row.n / 2),
            steps: 0,
        }
    }

    /// Env-steps one sample takes.
    fn items(&self) -> usize {
        match self.op {
            Op::AsyncHalf => self.n / 2,
            Op::Step | Op::StepAndMaybeReset => self.n,
        }
    }

    fn sample(&mut self) {
        match self.op {
            Op::Step => {
                black_box(self.pool.step(self.actions.clone()).expect("step"));
                self.steps += 1;
                if self.env == "CartPole-v1" && self.steps % 8 == 0 {
                    self.pool.reset(None).expect("reset");
                }
            }
            Op::StepAndMaybeReset => {
                black_box(
                    self.pool
                        .step_and_maybe_reset(self.actions.clone())
                        .expect("step"),
                );
            }
            Op::AsyncHalf => {
                let half = self.n / 2;
                let recv = Recv::new().min_get(half).max_get(half);
                let (step, _root) = self
                    .pool
                    .async_step_and_maybe_reset_recv(recv)
                    .expect("recv");
                let ids = step.env_indices().to_vec();
                self.pool
                    .async_step_and_maybe_reset_send(self.half_actions.clone(), Target::Envs(ids))
                    .expect("send");
            }
        }
    }
}

impl Row {
    fn run(&self, budget: Budget) {
        let mut driver = Driver::new(self);
        let items = driver.items();
        // The baseline: the same envs stepped in turn by one thread
        // (`RawLoop`, as `raw` in `pool.rs`); a sample steps the next
        // `items` of them, round robin.
        let mut raw = RawLoop::new(self.env, &Kwargs::new(), self.n);
        // Each side of a pair runs `ops` samples in a row, about BLOCK
        // long: the pool in its steady state (its workers busy, not
        // waking up from the other side's turn), the pair still taken
        // within milliseconds.
        let mut ops = 1;
        let mut time_baseline = |ops: usize| {
            let start = Instant::now();
            for _ in 0..ops {
                raw.steps(items);
            }
            start.elapsed()
        };
        let mut time_pool = |ops: usize| {
            let start = Instant::now();
            for _ in 0..ops {
                driver.sample();
            }
            start.elapsed()
        };
        match budget {
            // Warm-up, which also sizes the blocks.
            Budget::Time(time) => {
                let warm = Instant::now();
                loop {
                    let slower = time_baseline(ops).max(time_pool(ops)) / ops as u32;
                    ops = (BLOCK.as_nanos() / slower.as_nanos().max(1)).clamp(1, 10_000) as usize;
                    if warm.elapsed() >= time / 10 {
                        break;
                    }
                }
            }
            // A smoke run: blocks of one sample.
            Budget::Pairs(n) => {
                for _ in 0..n {
                    time_baseline(ops);
                    time_pool(ops);
                }
            }
        }
        let started = Instant::now();
        let mut pairs: Vec<(Duration, Duration)> = Vec::new();
        loop {
            let enough = match budget {
                Budget::Time(time) => started.elapsed() >= time,
                Budget::Pairs(n) => pairs.len() >= n,
            };
            if enough {
                break;
            }
            // Alternate which side goes first.
            let pair = if pairs.len() % 2 == 0 {
                let b = time_baseline(ops);
                (time_pool(ops), b)
            } else {
                let p = time_pool(ops);
                (p, time_baseline(ops))
            };
            pairs.push(pair);
        }
        self.report(&pairs, items * ops);
    }

    fn report(&self, pairs: &[(Duration, Duration)], items: usize) {
        let per_item = |d: Duration| d.as_secs_f64() * 1e9 / items as f64;
        let mut pools: Vec<f64> = pairs.iter().map(|&(p, _)| per_item(p)).collect();
        let mut bases: Vec<f64> = pairs.iter().map(|&(_, b)| per_item(b)).collect();
        let mut overheads: Vec<f64> = pairs
            .iter()
            .map(|&(p, b)| per_item(p) - per_item(b))
            .collect();
        let (pool, base) = (median(&mut pools), median(&mut bases));
        let (q1, mid, q3) = quartiles(&mut overheads);
        let figure = format!("{mid:.0} ns ({q1:.0} .. {q3:.0})");
        println!(
            "{:<58} {:>10} {:>10}   {:<34} {}   [{} pairs]",
            self.title,
            format!("{pool:.0} ns"),
            format!("{base:.0} ns"),
            figure,
            self.target,
            pairs.len()
        );
    }
}

fn median(values: &mut [f64]) -> f64 {
    quartiles(values).1
}

/// The first quartile, median and third quartile (NaN for no values).
fn quartiles(values: &mut [f64]) -> (f64, f64, f64) {
    if values.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    (at(0.25), at(0.5), at(0.75))
}
