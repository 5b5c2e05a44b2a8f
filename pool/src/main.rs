//! `rlpool`, the project's main program: a pool of registered environments
//! run with a random policy, a live progress display and a summary
//! (`rlpool` alone, or `rlpool run ...`); a benchmark of pool
//! configurations (`rlpool bench`); the registered environments with their
//! specs (`rlpool envs`).
//!
//! Bad arguments print one line and exit with status 2; a run that fails
//! exits with status 1; Ctrl-C ends a run cleanly (summary, workers
//! stopped and reaped).
#![forbid(unsafe_code)]

use std::num::NonZeroUsize;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use pool::envs::Kwargs;
use pool::tensordict::{Entry, StackedTensorDict, TensorDict};
use pool::{AsyncEnvPool, Backend, ExchangeMode, ProcOptions, Recv, Target, ThreadOptions};
use rand::SeedableRng;

/// An asynchronous pool of reinforcement-learning environments.
///
/// With no command: 16 CartPole-v1 envs in worker processes with the
/// shared-memory exchange, stepped asynchronously (min_get 8) with random
/// actions for 5 seconds, with a progress display and a summary.
#[derive(Debug, Parser)]
#[command(name = "rlpool", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a pool of a registered env with random actions, then print a
    /// summary (throughput, episodes, mean return, exchange, statistics).
    Run(RunArgs),
    /// Measure pool configurations (backends, exchanges, sizes, sync and
    /// async) against the raw single-threaded env loop, in one table.
    Bench(BenchArgs),
    /// List the registered envs with their specs.
    Envs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    /// Worker threads in this process.
    Threads,
    /// Worker processes (this program started again in worker mode).
    Processes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ExchangeArg {
    /// Shared memory when the envs' data allows it, else the queue.
    Auto,
    /// Encoded tensordicts through each worker's socket.
    Queue,
    /// Shared-memory slots.
    Shm,
}

#[derive(Clone, Debug, Args)]
struct RunArgs {
    /// A registered env (see `rlpool envs`).
    #[arg(long, default_value = "CartPole-v1")]
    env: String,
    /// Number of envs.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    num_envs: u32,
    /// Where the envs run.
    #[arg(long, value_enum, default_value_t = BackendArg::Processes)]
    backend: BackendArg,
    /// How results travel (processes only).
    #[arg(long, value_enum, default_value_t = ExchangeArg::Shm)]
    exchange: ExchangeArg,
    /// Envs per worker process (processes only; default: the envs spread
    /// over as many workers as cores).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    envs_per_worker: Option<u32>,
    /// Worker threads (threads only; default: as many as cores).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    /// Results to wait for per receive (default: half the envs).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    min_get: Option<u32>,
    /// Most results per receive (default: all that are ready).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_get: Option<u32>,
    /// Deadline of each receive, in milliseconds.
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Stop after this many env-steps.
    #[arg(long)]
    steps: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 5.0, allow_negative_numbers = true)]
    seconds: f64,
    /// Seed of the envs and of the random actions.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Step every env at once (the synchronous API) instead of
    /// asynchronously.
    #[arg(long)]
    sync: bool,
    /// Print one machine-readable JSON line instead of the summary.
    #[arg(long)]
    json: bool,
}

impl Default for RunArgs {
    fn default() -> Self {
        match Cli::parse_from(["rlpool", "run"]).command {
            Some(Command::Run(args)) => args,
            _ => unreachable!("`rlpool run` parses as the run command"),
        }
    }
}

#[derive(Clone, Debug, Args)]
struct BenchArgs {
    /// A registered env.
    #[arg(long, default_value = "CartPole-v1")]
    env: String,
    /// Pool sizes, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [2u32, 8, 32, 64])]
    sizes: Vec<u32>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 0.5)]
    seconds: f64,
    /// Print one JSON line per measurement instead of the table.
    #[arg(long)]
    json: bool,
}

/// A failure and the exit status it gets: 2 for bad arguments, 1 for a run
/// that failed.
struct Failure {
    status: u8,
    error: anyhow::Error,
}

fn usage(error: impl Into<anyhow::Error>) -> Failure {
    Failure {
        status: 2,
        error: error.into(),
    }
}

fn failed(error: impl Into<anyhow::Error>) -> Failure {
    Failure {
        status: 1,
        error: error.into(),
    }
}

fn main() -> ExitCode {
    // A worker process of a process pool runs here and never returns.
    pool::init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => {
            // --help, --version: the text, and success.
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            // One line: clap's first ("error: ..."), without the usage block.
            let text = err.kind().to_string();
            let rendered = err.render().to_string();
            let first = rendered.lines().next().unwrap_or(&text).trim();
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("rlpool: {first} (see rlpool --help)");
            return ExitCode::from(2);
        }
    };
    let outcome = match cli.command {
        None => run(&RunArgs::default()),
        Some(Command::Run(args)) => run(&args),
        Some(Command::Bench(args)) => bench(&args),
        Some(Command::Envs) => list_envs().map_err(failed),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure { status, error }) => {
            eprintln!("rlpool: {error:#}");
            ExitCode::from(status)
        }
    }
}

/// What a run is, once its arguments are checked.
struct Plan {
    num_envs: usize,
    min_get: usize,
    backend: Backend,
    /// Worker processes (none for threads).
    workers: Option<usize>,
    budget: Duration,
}

fn plan(args: &RunArgs) -> Result<Plan, Failure> {
    let known = pool::envs::registered();
    if !known.contains(&args.env) {
        return Err(usage(anyhow::anyhow!(
            "unknown env {:?} (registered: {})",
            args.env,
            known.join(", ")
        )));
    }
    let num_envs = args.num_envs as usize;
    let min_get = args.min_get.map_or((num_envs / 2).max(1), |m| m as usize);
    if min_get > num_envs {
        return Err(usage(anyhow::anyhow!(
            "--min-get {min_get} is above --num-envs {num_envs}"
        )));
    }
    if let Some(max_get) = args.max_get {
        if (max_get as usize) < min_get {
            return Err(usage(anyhow::anyhow!(
                "--max-get {max_get} is below --min-get {min_get}"
            )));
        }
    }
    if !(args.seconds.is_finite() && args.seconds > 0.0 && args.seconds <= 86_400.0) {
        return Err(usage(anyhow::anyhow!(
            "--seconds {}: expected a number of seconds in (0, 86400]",
            args.seconds
        )));
    }
    let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    let (backend, workers) = match args.backend {
        BackendArg::Threads => {
            if args.envs_per_worker.is_some() || args.exchange != ExchangeArg::Shm {
                // The exchange's default is shm; only an explicit
                // process-only choice is refused.
                if args.envs_per_worker.is_some() {
                    return Err(usage(anyhow::anyhow!(
                        "--envs-per-worker applies to --backend processes"
                    )));
                }
            }
            (
                Backend::Threading(
                    ThreadOptions::default().threads(args.threads.map_or(0, |t| t as usize)),
                ),
                None,
            )
        }
        BackendArg::Processes => {
            if args.threads.is_some() {
                return Err(usage(anyhow::anyhow!(
                    "--threads applies to --backend threads (use --envs-per-worker)"
                )));
            }
            let per = args
                .envs_per_worker
                .map_or(num_envs.div_ceil(cores), |p| p as usize);
            let options =
                ProcOptions::default()
                    .envs_per_worker(per)
                    .exchange(match args.exchange {
                        ExchangeArg::Auto => ExchangeMode::Auto,
                        ExchangeArg::Queue => ExchangeMode::Queue,
                        ExchangeArg::Shm => ExchangeMode::Shm,
                    });
            (
                Backend::Multiprocessing(options),
                Some(num_envs.div_ceil(per)),
            )
        }
    };
    Ok(Plan {
        num_envs,
        min_get,
        backend,
        workers,
        budget: Duration::from_secs_f64(args.seconds),
    })
}

/// Episode bookkeeping across envs.
#[derive(Default)]
struct Tally {
    steps: u64,
    episodes: u64,
    returns_sum: f64,
    running: Vec<f64>,
}

impl Tally {
    fn add(&mut self, batch: &TensorDict, envs: &[usize]) -> Result<()> {
        let rewards = batch.tensor(("next", "reward"))?.to_f64_vec();
        let done = batch.tensor(("next", "done"))?.to_f64_vec();
        let per_env = rewards.len() / envs.len().max(1);
        for (j, &env) in envs.iter().enumerate() {
            self.running[env] += rewards[j * per_env..(j + 1) * per_env].iter().sum::<f64>();
            if done[j * per_env..(j + 1) * per_env]
                .iter()
                .any(|&d| d != 0.0)
            {
                self.episodes += 1;
                self.returns_sum += self.running[env];
                self.running[env] = 0.0;
            }
        }
        self.steps += envs.len() as u64;
        Ok(())
    }

    fn mean_return(&self) -> Option<f64> {
        (self.episodes > 0).then(|| self.returns_sum / self.episodes as f64)
    }
}

fn env_ids(batch: &StackedTensorDict) -> Result<Vec<usize>> {
    Ok(batch
        .get_non_tensor("env_index")?
        .as_int_vec()
        .context("env_index holds integers")?
        .into_iter()
        .map(|i| i as usize)
        .collect())
}

/// Random actions for `envs`, drawn from the pool's action spec.
struct Actions {
    spec: pool::specs::TensorSpec,
    rng: rand::rngs::StdRng,
}

impl Actions {
    fn for_envs(&mut self, envs: &[usize]) -> Result<TensorDict> {
        let Entry::Dict(all) = self.spec.try_rand(&mut self.rng)? else {
            bail!("the action spec is not a composite");
        };
        let mut out = TensorDict::zeros_stacked(&all.index(0)?, envs.len())?;
        for (j, &env) in envs.iter().enumerate() {
            out.copy_row(j, &all, env)?;
        }
        Ok(out)
    }
}

/// Set by Ctrl-C: the run ends at its next receive.
fn interrupted() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let for_handler = Arc::clone(&flag);
    // A second handler cannot be installed (a test calling `run` twice):
    // the first one's flag is then never set, which only loses Ctrl-C.
    let _ = ctrlc::set_handler(move || for_handler.store(true, Ordering::SeqCst));
    flag
}

fn run(args: &RunArgs) -> Result<(), Failure> {
    let plan = plan(args)?;
    let kwargs = Kwargs::new().with("seed", args.seed as i64);
    let kwargs = if pool::envs::make(&args.env, &kwargs).is_ok() {
        kwargs
    } else {
        // Not every env takes a seed.
        Kwargs::new()
    };
    let pool = AsyncEnvPool::builder()
        .registered_n(&args.env, plan.num_envs, kwargs)
        .backend(plan.backend.clone())
        .build()
        .map_err(|e| match e {
            pool::PoolError::Env(_) | pool::PoolError::Specs { .. } => usage(e),
            pool::PoolError::Proc(pool::ProcError::ShmUnavailable { .. }) => usage(e),
            other => failed(other),
        })?;
    let stop = interrupted();
    let outcome = drive(args, &plan, &pool, &stop);
    let stats = pool.stats(false).map(|s| s.to_map()).unwrap_or_default();
    let exchange = pool.resolved_exchange();
    let worker_pids = pool.worker_pids();
    let reason = pool.exchange_reason().map(str::to_owned);
    pool.shutdown();
    let (tally, elapsed) = outcome.map_err(failed)?;
    let rate = tally.steps as f64 / elapsed.as_secs_f64().max(1e-9);
    if args.json {
        let line = serde_json::json!({
            "env": args.env,
            "num_envs": plan.num_envs,
            "backend": format!("{:?}", args.backend).to_lowercase(),
            "exchange": format!("{exchange:?}").to_lowercase(),
            "mode": if args.sync { "sync" } else { "async" },
            "min_get": plan.min_get,
            "steps": tally.steps,
            "seconds": elapsed.as_secs_f64(),
            "steps_per_second": rate,
            "episodes": tally.episodes,
            "mean_return": tally.mean_return(),
            "interrupted": stop.load(Ordering::SeqCst),
            "worker_pids": worker_pids,
            "exchange_reason": reason,
            "stats": stats
                .iter()
                .map(|(&name, &value)| {
                    let value = match value {
                        pool::StatValue::Count(n) => serde_json::json!(n),
                        pool::StatValue::Float(x) => serde_json::json!(x),
                    };
                    (name.to_owned(), value)
                })
                .collect::<serde_json::Map<_, _>>(),
        });
        println!("{line}");
        return Ok(());
    }
    if stop.load(Ordering::SeqCst) {
        println!("interrupted: the summary of what ran");
    }
    println!("steps:        {}", tally.steps);
    println!("throughput:   {rate:.0} env-steps/s");
    println!("episodes:     {}", tally.episodes);
    if let Some(mean) = tally.mean_return() {
        println!("mean return:  {mean:.2}");
    }
    match &reason {
        Some(reason) => println!(
            "exchange:     {} (auto chose it: {reason})",
            format!("{exchange:?}").to_lowercase()
        ),
        None => println!("exchange:     {}", format!("{exchange:?}").to_lowercase()),
    }
    if !stats.is_empty() {
        println!("stats:");
        for (name, value) in &stats {
            println!("  {name:<28} {value:.4}");
        }
    }
    Ok(())
}

/// Steps the pool until the budget, the step count or Ctrl-C; returns the
/// tally and the time it ran.
fn drive(
    args: &RunArgs,
    plan: &Plan,
    pool: &AsyncEnvPool,
    stop: &AtomicBool,
) -> Result<(Tally, Duration)> {
    let mut actions = Actions {
        spec: pool.full_action_spec().clone(),
        rng: rand::rngs::StdRng::seed_from_u64(args.seed),
    };
    let mode = if args.sync {
        "synchronous".to_string()
    } else {
        format!("asynchronous, min_get {}", plan.min_get)
    };
    let backend = match plan.workers {
        Some(workers) => format!("{workers} worker processes"),
        None => "worker threads".to_string(),
    };
    if !args.json {
        println!(
            "rlpool: {} x {} on {backend}, {mode}, random actions, {:.1} s",
            plan.num_envs,
            args.env,
            plan.budget.as_secs_f64()
        );
    }
    let bar = if args.json {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new_spinner()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let all: Vec<usize> = (0..plan.num_envs).collect();
    let mut tally = Tally {
        running: vec![0.0; plan.num_envs],
        ..Tally::default()
    };
    let start = Instant::now();
    let mut shown = start;
    let done = |tally: &Tally| {
        start.elapsed() >= plan.budget
            || args.steps.is_some_and(|s| tally.steps >= s)
            || stop.load(Ordering::SeqCst)
    };
    let mut show = |tally: &Tally| {
        if shown.elapsed() >= Duration::from_millis(100) {
            shown = Instant::now();
            let rate = tally.steps as f64 / start.elapsed().as_secs_f64().max(1e-9);
            let mean = tally
                .mean_return()
                .map_or("-".to_string(), |m| format!("{m:.2}"));
            bar.set_message(format!(
                "{} steps, {rate:.0} steps/s, {} episodes, mean return {mean}",
                tally.steps, tally.episodes
            ));
            bar.tick();
        }
    };
    let mut root = pool.reset(None)?.into_dense()?;
    if args.sync {
        while !done(&tally) {
            root.update(&actions.for_envs(&all)?)?;
            let (step, next_root) = pool.step_and_maybe_reset(root)?;
            tally.add(&step.into_dense()?, &all)?;
            root = next_root.into_dense()?;
            show(&tally);
        }
    } else {
        let mut recv = Recv::new().min_get(plan.min_get);
        if let Some(max_get) = args.max_get {
            recv = recv.max_get(max_get as usize);
        }
        if let Some(ms) = args.timeout_ms {
            recv = recv.timeout(Duration::from_millis(ms));
        }
        pool.async_step_and_maybe_reset_send(actions.for_envs(&all)?, Target::All)?;
        while !done(&tally) {
            let (step, _next_root) = match pool.async_step_and_maybe_reset_recv(recv) {
                Ok(got) => got,
                // A deadline before min_get: nothing lost; try again.
                Err(pool::PoolError::Timeout { .. }) => continue,
                Err(err) => return Err(err.into()),
            };
            let envs = env_ids(&step)?;
            tally.add(&step.into_dense()?, &envs)?;
            pool.async_step_and_maybe_reset_send(actions.for_envs(&envs)?, Target::Envs(envs))?;
            show(&tally);
        }
        let in_flight = pool.in_flight().len();
        if in_flight > 0 {
            let (step, _) = pool.async_step_and_maybe_reset_recv(Recv::all(in_flight))?;
            let envs = env_ids(&step)?;
            tally.add(&step.into_dense()?, &envs)?;
        }
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    Ok((tally, elapsed))
}

/// One measured configuration of `rlpool bench`.
struct Measured {
    config: String,
    num_envs: usize,
    mode: &'static str,
    steps_per_second: f64,
    /// Pool time per env-step minus the raw loop's, in nanoseconds.
    overhead_ns: Option<f64>,
}

fn bench(args: &BenchArgs) -> Result<(), Failure> {
    if !pool::envs::registered().contains(&args.env) {
        return Err(usage(anyhow::anyhow!("unknown env {:?}", args.env)));
    }
    if args.sizes.contains(&0) || args.sizes.is_empty() {
        return Err(usage(anyhow::anyhow!("--sizes: positive pool sizes")));
    }
    if !(args.seconds.is_finite() && args.seconds > 0.0 && args.seconds <= 60.0) {
        return Err(usage(anyhow::anyhow!("--seconds: a number in (0, 60]")));
    }
    let budget = Duration::from_secs_f64(args.seconds);
    let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    let mut rows = Vec::new();
    for &n in &args.sizes {
        let n = n as usize;
        let raw = raw_rate(&args.env, n, budget).map_err(failed)?;
        rows.push(Measured {
            config: "raw loop (1 thread)".into(),
            num_envs: n,
            mode: "sync",
            steps_per_second: raw,
            overhead_ns: None,
        });
        let configs: [(&str, Backend); 3] = [
            ("threads", Backend::Threading(ThreadOptions::default())),
            (
                "processes, queue",
                Backend::Multiprocessing(
                    ProcOptions::default()
                        .envs_per_worker(n.div_ceil(cores))
                        .exchange(ExchangeMode::Queue),
                ),
            ),
            (
                "processes, shm",
                Backend::Multiprocessing(
                    ProcOptions::default()
                        .envs_per_worker(n.div_ceil(cores))
                        .exchange(ExchangeMode::Shm),
                ),
            ),
        ];
        for (name, backend) in configs {
            for sync in [true, false] {
                let run_args = RunArgs {
                    env: args.env.clone(),
                    num_envs: n as u32,
                    sync,
                    json: true,
                    ..RunArgs::default()
                };
                let plan = Plan {
                    num_envs: n,
                    min_get: (n / 2).max(1),
                    backend: backend.clone(),
                    workers: None,
                    budget,
                };
                let pool = AsyncEnvPool::builder()
                    .registered_n(&args.env, n, Kwargs::new())
                    .backend(backend.clone())
                    .build()
                    .map_err(failed)?;
                let never = AtomicBool::new(false);
                let (tally, elapsed) = drive(&run_args, &plan, &pool, &never).map_err(failed)?;
                pool.shutdown();
                let rate = tally.steps as f64 / elapsed.as_secs_f64();
                rows.push(Measured {
                    config: name.into(),
                    num_envs: n,
                    mode: if sync { "sync" } else { "async" },
                    steps_per_second: rate,
                    overhead_ns: Some((1.0 / rate - 1.0 / raw) * 1e9),
                });
            }
        }
    }
    if args.json {
        for r in &rows {
            println!(
                "{}",
                serde_json::json!({
                    "env": args.env,
                    "config": r.config,
                    "num_envs": r.num_envs,
                    "mode": r.mode,
                    "steps_per_second": r.steps_per_second,
                    "overhead_ns_per_env_step": r.overhead_ns,
                })
            );
        }
        return Ok(());
    }
    println!(
        "{} on {cores} cores, {:.1} s per measurement (async: min_get = N/2; overhead: pool time per env-step minus the raw loop's)",
        args.env, args.seconds
    );
    println!(
        "{:>5}  {:<20} {:<6} {:>14} {:>16}",
        "envs", "config", "mode", "env-steps/s", "overhead/step"
    );
    for r in &rows {
        let overhead = r
            .overhead_ns
            .map_or("-".to_string(), |o| format!("{:.0} ns", o));
        println!(
            "{:>5}  {:<20} {:<6} {:>14.0} {:>16}",
            r.num_envs, r.config, r.mode, r.steps_per_second, overhead
        );
    }
    Ok(())
}

/// Random actions drawn ahead for each env of the raw loop, used in turn.
const RAW_ACTIONS: usize = 64;

/// Env-steps per second of `n` envs stepped in turn by one thread: each
/// env's `step_into` on reused buffers (the env's own cost, as in the divan
/// benchmark's `raw`), with random actions drawn ahead ([`RAW_ACTIONS`] per
/// env, used in turn), and `reset_into` when an episode ends.
fn raw_rate(env: &str, n: usize, budget: Duration) -> Result<f64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let mut envs = Vec::with_capacity(n);
    for _ in 0..n {
        let mut e = pool::envs::make(env, &Kwargs::new())?;
        let root = e.reset(None)?;
        let mut inputs = Vec::with_capacity(RAW_ACTIONS);
        for _ in 0..RAW_ACTIONS {
            let mut input = root.clone();
            input.update(&e.rand_action(&mut rng))?;
            inputs.push(input);
        }
        let next = e.step_template();
        let reset = e.reset_template();
        envs.push((e, inputs, next, reset));
    }
    let start = Instant::now();
    let mut steps = 0u64;
    let mut turn = 0;
    while start.elapsed() < budget {
        for (e, inputs, next, reset) in envs.iter_mut() {
            e.step_into(&inputs[turn], next)?;
            if next.tensor("done")?.as_slice::<bool>()?.contains(&true) {
                e.reset_into(None, reset)?;
            }
            steps += 1;
        }
        turn = (turn + 1) % RAW_ACTIONS;
    }
    Ok(steps as f64 / start.elapsed().as_secs_f64())
}

/// Prints each registered env with its specs.
fn list_envs() -> Result<()> {
    for name in pool::envs::registered() {
        match pool::envs::make(&name, &Kwargs::new()) {
            Ok(env) => {
                let specs = env.specs();
                println!("{name}");
                println!("  batch size:  {:?}", specs.batch_size());
                println!("  action:      {}", specs.full_action_spec());
                println!("  observation: {}", specs.full_observation_spec());
                println!("  reward:      {}", specs.full_reward_spec());
                println!("  done:        {}", specs.full_done_spec());
                if !specs.full_state_spec().is_empty() {
                    println!("  state:       {}", specs.full_state_spec());
                }
            }
            Err(err) => println!("{name}\n  (needs keyword arguments: {err})"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("rlpool").chain(args.split_whitespace()))
    }

    #[test]
    fn defaults_are_the_main_job() {
        let args = RunArgs::default();
        assert_eq!(args.env, "CartPole-v1");
        assert_eq!(args.num_envs, 16);
        assert_eq!(args.backend, BackendArg::Processes);
        assert_eq!(args.exchange, ExchangeArg::Shm);
        assert_eq!(args.seconds, 5.0);
        let plan = plan(&args).ok().unwrap();
        assert_eq!(plan.min_get, 8);
        assert!(matches!(plan.backend, Backend::Multiprocessing(_)));
    }

    #[test]
    fn bad_arguments_are_usage_errors() {
        assert!(parse("run --num-envs 0").is_err());
        assert!(parse("run --backend gpus").is_err());
        assert!(parse("run --bogus").is_err());
        let args = |text: &str| match parse(text).unwrap().command {
            Some(Command::Run(a)) => a,
            other => panic!("{other:?}"),
        };
        for (text, message) in [
            ("run --env Nope", "unknown env \"Nope\""),
            (
                "run --num-envs 2 --min-get 3",
                "--min-get 3 is above --num-envs 2",
            ),
            (
                "run --min-get 4 --max-get 2",
                "--max-get 2 is below --min-get 4",
            ),
            ("run --seconds -1", "--seconds -1"),
            (
                "run --backend threads --envs-per-worker 2",
                "--envs-per-worker applies",
            ),
            ("run --threads 2", "--threads applies"),
        ] {
            match plan(&args(text)) {
                Err(Failure { status: 2, error }) => {
                    assert!(error.to_string().contains(message), "{text}: {error}")
                }
                Err(Failure { status, error }) => panic!("{text}: status {status}: {error}"),
                Ok(_) => panic!("{text}: accepted"),
            }
        }
    }
}
