//! `rlpool run`: its arguments checked into a [`Plan`], the pool built,
//! driven until its budget, then summarised.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pool::envs::Kwargs;
use pool::{AsyncEnvPool, Backend, ExchangeMode, ProcOptions, ThreadOptions};

use crate::args::{BackendArg, ExchangeArg, RunArgs};
use crate::drive::drive;
use crate::failure::{failed, usage, Failure};
use crate::output::say;
use crate::summary::Summary;

/// The time a run takes when neither `--seconds` nor `--steps` is given.
const DEFAULT_SECONDS: f64 = 5.0;

/// The longest `--seconds` accepted: a day.
const MAX_SECONDS: f64 = 86_400.0;

/// What a run is, once its arguments are checked.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Number of envs.
    pub(crate) num_envs: usize,
    /// Results to wait for per asynchronous receive.
    pub(crate) min_get: usize,
    /// The pool's backend with its options.
    pub(crate) backend: Backend,
    /// Worker processes (none for threads).
    pub(crate) workers: Option<usize>,
    /// How long the run may take: `None` when only `--steps` bounds it.
    pub(crate) budget: Option<Duration>,
}

/// An option given with a backend it does not apply to: a usage error,
/// as the Rust API makes it a compile error.
fn not_for_backend(option: &str, applies_to: BackendArg, given: BackendArg) -> Failure {
    usage(anyhow::anyhow!(
        "{option} applies to --backend {}, not --backend {}",
        applies_to.name(),
        given.name()
    ))
}

/// Checks the arguments of a run (the checks clap cannot make alone).
pub(crate) fn plan(args: &RunArgs) -> Result<Plan, Failure> {
    let known = pool::envs::registered();
    if !known.contains(&args.env) {
        return Err(usage(anyhow::anyhow!(
            "unknown env {:?} (registered: {})",
            args.env,
            known.join(", ")
        )));
    }
    if args.sync {
        let async_only = [
            ("--min-get", args.min_get.is_some()),
            ("--max-get", args.max_get.is_some()),
            ("--timeout-ms", args.timeout_ms.is_some()),
        ];
        if let Some((option, _)) = async_only.iter().find(|(_, given)| *given) {
            return Err(usage(anyhow::anyhow!(
                "{option} applies to asynchronous runs, not --sync (which steps every env at once)"
            )));
        }
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
    let budget = match (args.seconds, args.steps) {
        (Some(seconds), _) => {
            if !(seconds.is_finite() && seconds > 0.0 && seconds <= MAX_SECONDS) {
                return Err(usage(anyhow::anyhow!(
                    "--seconds {seconds}: expected a number of seconds in (0, {MAX_SECONDS}]"
                )));
            }
            Some(Duration::from_secs_f64(seconds))
        }
        (None, Some(_)) => None,
        (None, None) => Some(Duration::from_secs_f64(DEFAULT_SECONDS)),
    };
    let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    let (backend, workers) = match args.backend {
        BackendArg::Threads => {
            let process_only = [
                ("--exchange", args.exchange.is_some()),
                ("--envs-per-worker", args.envs_per_worker.is_some()),
            ];
            if let Some((option, _)) = process_only.iter().find(|(_, given)| *given) {
                return Err(not_for_backend(
                    option,
                    BackendArg::Processes,
                    BackendArg::Threads,
                ));
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
                return Err(not_for_backend(
                    "--threads",
                    BackendArg::Threads,
                    BackendArg::Processes,
                ));
            }
            let per = args
                .envs_per_worker
                .map_or(num_envs.div_ceil(cores), |p| p as usize);
            let exchange = match args.exchange.unwrap_or(ExchangeArg::Shm) {
                ExchangeArg::Auto => ExchangeMode::Auto,
                ExchangeArg::Queue => ExchangeMode::Queue,
                ExchangeArg::Shm => ExchangeMode::Shm,
            };
            let options = ProcOptions::default()
                .envs_per_worker(per)
                .exchange(exchange);
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
        budget,
    })
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

/// The line a run starts with: what runs, where, how, and for how long.
fn header(args: &RunArgs, plan: &Plan) -> String {
    let mode = if args.sync {
        "synchronous".to_owned()
    } else {
        format!("asynchronous, min_get {}", plan.min_get)
    };
    let backend = match plan.workers {
        Some(workers) => format!("{workers} worker processes"),
        None => "worker threads".to_owned(),
    };
    let bound = match (plan.budget, args.steps) {
        (Some(budget), None) => format!("for {:.1} s", budget.as_secs_f64()),
        (None, Some(steps)) => format!("for {steps} env-steps"),
        (Some(budget), Some(steps)) => {
            format!("for {:.1} s or {steps} env-steps", budget.as_secs_f64())
        }
        (None, None) => "until Ctrl-C".to_owned(),
    };
    format!(
        "rlpool: {} x {} on {backend}, {mode}, random actions, {bound}",
        plan.num_envs, args.env
    )
}

/// `rlpool run`: builds the pool, drives it, prints the summary.
pub(crate) fn run(args: &RunArgs) -> Result<(), Failure> {
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
    if !args.json {
        // A closed stdout ends the run here; dropping the pool stops its
        // workers.
        say!("{}", header(args, &plan))?;
    }
    let stop = interrupted();
    let outcome = drive(args, &plan, &pool, &stop);
    let summary_of_pool = (
        pool.stats(false),
        pool.resolved_exchange(),
        pool.exchange_reason().map(str::to_owned),
        pool.worker_pids(),
    );
    pool.shutdown();
    let (tally, elapsed) = outcome.map_err(failed)?;
    let (stats, exchange, exchange_reason, worker_pids) = summary_of_pool;
    let summary = Summary {
        env: &args.env,
        num_envs: plan.num_envs,
        backend: args.backend,
        // Threads share this process's memory: no exchange.
        exchange: (args.backend == BackendArg::Processes).then_some(exchange),
        exchange_reason,
        sync: args.sync,
        min_get: (!args.sync).then_some(plan.min_get),
        tally,
        elapsed,
        interrupted: stop.load(Ordering::SeqCst),
        worker_pids,
        stats,
    };
    if args.json {
        summary.print_json()
    } else {
        summary.print_text()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::tests::run_args;

    #[test]
    fn the_main_job_is_planned_from_the_defaults() {
        let plan = plan(&RunArgs::default()).unwrap();
        assert_eq!(plan.min_get, 8);
        assert_eq!(plan.num_envs, 16);
        assert_eq!(plan.budget, Some(Duration::from_secs(5)));
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        let per = 16usize.div_ceil(cores);
        assert_eq!(
            plan.backend,
            Backend::Multiprocessing(
                ProcOptions::default()
                    .envs_per_worker(per)
                    .exchange(ExchangeMode::Shm)
            )
        );
        assert_eq!(plan.workers, Some(16usize.div_ceil(per)));
    }

    #[test]
    fn steps_alone_lift_the_time_limit() {
        assert_eq!(plan(&run_args("run --steps 10")).unwrap().budget, None);
        assert_eq!(
            plan(&run_args("run --steps 10 --seconds 2"))
                .unwrap()
                .budget,
            Some(Duration::from_secs(2))
        );
        let threads = plan(&run_args("run --backend threads --threads 2")).unwrap();
        assert!(matches!(threads.backend, Backend::Threading(_)));
        assert!(header(
            &run_args("run --steps 10"),
            &plan(&run_args("run --steps 10")).unwrap()
        )
        .ends_with("for 10 env-steps"));
    }

    #[test]
    fn bad_arguments_are_usage_errors() {
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
            ("run --seconds 1e9", "--seconds 1000000000"),
            (
                "run --backend threads --envs-per-worker 2",
                "--envs-per-worker applies to --backend processes, not --backend threads",
            ),
            (
                "run --backend threads --exchange shm",
                "--exchange applies to --backend processes, not --backend threads",
            ),
            (
                "run --sync --min-get 2",
                "--min-get applies to asynchronous runs, not --sync",
            ),
            ("run --sync --max-get 2", "--max-get applies"),
            ("run --sync --timeout-ms 5", "--timeout-ms applies"),
            (
                "run --threads 2",
                "--threads applies to --backend threads, not --backend processes",
            ),
        ] {
            match plan(&run_args(text)) {
                Err(Failure::Usage(error)) => {
                    assert!(error.to_string().contains(message), "{text}: {error}")
                }
                Err(other) => panic!("{text}: {other:?}"),
                Ok(_) => panic!("{text}: accepted"),
            }
        }
    }
}
