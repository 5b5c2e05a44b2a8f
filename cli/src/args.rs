//! The command line (clap): the commands, their options and their help.

use clap::{Args, Parser, Subcommand, ValueEnum};

/// The most envs a pool of `rlpool run` or `rlpool bench` may have.
const MAX_ENVS: i64 = 4096;

/// An asynchronous pool of reinforcement-learning environments.
///
/// With no command, the main job (`rlpool run` with its defaults): 16
/// CartPole-v1 envs in worker processes with the shared-memory exchange,
/// stepped asynchronously (min_get 8) with random actions for 5 seconds,
/// with a progress display and a summary.
#[derive(Debug, Parser)]
#[command(name = "rlpool", version, propagate_version = true)]
pub(crate) struct Cli {
    /// What to do (default: `run`).
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a pool of a registered env with random actions, then print a
    /// summary (throughput, episodes, mean return, exchange, statistics).
    Run(RunArgs),
    /// Measure pool configurations (backends, exchanges, sizes, sync and
    /// async) against the raw single-threaded env loop, in one table.
    Bench(BenchArgs),
    /// List the registered envs with their specs.
    Envs,
}

/// Where the envs run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum BackendArg {
    /// Worker threads in this process.
    Threads,
    /// Worker processes (this program started again in worker mode).
    Processes,
}

impl BackendArg {
    /// The name as typed after `--backend`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            BackendArg::Threads => "threads",
            BackendArg::Processes => "processes",
        }
    }
}

/// How results travel between worker processes and this one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ExchangeArg {
    /// Shared memory when the envs' data allows it, else the queue.
    Auto,
    /// Encoded tensordicts through each worker's socket.
    Queue,
    /// Shared-memory slots.
    Shm,
}

/// The options of `rlpool run`.
#[derive(Clone, Debug, Args)]
pub(crate) struct RunArgs {
    /// A registered env (see `rlpool envs`).
    #[arg(long, default_value = "CartPole-v1")]
    pub(crate) env: String,
    /// Number of envs.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=MAX_ENVS))]
    pub(crate) num_envs: u32,
    /// Where the envs run.
    #[arg(long, value_enum, default_value_t = BackendArg::Processes)]
    pub(crate) backend: BackendArg,
    /// How results travel (processes only) [default: shm].
    #[arg(long, value_enum)]
    pub(crate) exchange: Option<ExchangeArg>,
    /// Envs per worker process (processes only) [default: the envs spread
    /// over as many workers as cores].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) envs_per_worker: Option<u32>,
    /// Worker threads (threads only) [default: as many as cores, at most
    /// one per env].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) threads: Option<u32>,
    /// Results to wait for per receive (asynchronous runs only) [default:
    /// half the envs].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) min_get: Option<u32>,
    /// Most results per receive (asynchronous runs only) [default: all that
    /// are ready].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_get: Option<u32>,
    /// Deadline of each receive, in milliseconds (asynchronous runs only; 0
    /// polls) [default: none].
    #[arg(long)]
    pub(crate) timeout_ms: Option<u64>,
    /// Stop after this many env-steps (at least 1; the last batch may
    /// overshoot) [default: no limit].
    #[arg(long, value_parser = positive_steps)]
    pub(crate) steps: Option<u64>,
    /// Stop after this many seconds [default: 5, or no limit when --steps
    /// is given].
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) seconds: Option<f64>,
    /// Seed of the envs and of the random actions.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Step every env at once (the synchronous API) instead of
    /// asynchronously.
    #[arg(long)]
    pub(crate) sync: bool,
    /// Print one machine-readable JSON line instead of the progress display
    /// and the summary. Its `exchange` is `"shm"` or `"queue"` for
    /// processes and `null` for threads, which need no exchange; its
    /// `min_get` is `null` with --sync.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--steps`: a whole number of env-steps, at least 1 (zero steps is never
/// meant).
fn positive_steps(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("a run takes at least 1 step".to_owned()),
        Ok(steps) => Ok(steps),
        Err(err) => Err(format!("expected a whole number of env-steps ({err})")),
    }
}

impl Default for RunArgs {
    fn default() -> Self {
        match Cli::parse_from(["rlpool", "run"]).command {
            Some(Command::Run(args)) => args,
            _ => unreachable!("`rlpool run` parses as the run command"),
        }
    }
}

/// The options of `rlpool bench`.
#[derive(Clone, Debug, Args)]
pub(crate) struct BenchArgs {
    /// A registered env (see `rlpool envs`).
    #[arg(long, default_value = "CartPole-v1")]
    pub(crate) env: String,
    /// Pool sizes, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "2,8,32,64",
        value_parser = clap::value_parser!(u32).range(1..=MAX_ENVS)
    )]
    pub(crate) sizes: Vec<u32>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 0.5)]
    pub(crate) seconds: f64,
    /// Print one JSON line per measurement instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also measure each pool with the bare loops of a Python user (no
    /// episode tally, no root kept): `sync-bare`, step_and_maybe_reset of
    /// fresh random actions for all N envs; `async-bare`, receive exactly
    /// N/2 results (min_get = max_get = N/2, EnvPool's batch_size = N/2)
    /// and send fresh random actions to those envs. `cargo xtask bench
    /// --anchors` compares them with the same loops driven from Python.
    #[arg(long)]
    pub(crate) bare: bool,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `rlpool` followed by `args` (split on whitespace), parsed.
    pub(crate) fn parse(args: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("rlpool").chain(args.split_whitespace()))
    }

    /// The options of `rlpool` followed by `args`, a run command.
    pub(crate) fn run_args(args: &str) -> RunArgs {
        match parse(args).unwrap().command {
            Some(Command::Run(a)) => a,
            other => panic!("{args}: {other:?}"),
        }
    }

    #[test]
    fn defaults_are_the_main_job() {
        let args = RunArgs::default();
        assert_eq!(args.env, "CartPole-v1");
        assert_eq!(args.num_envs, 16);
        assert_eq!(args.backend, BackendArg::Processes);
        assert_eq!(args.exchange, None);
        assert_eq!(args.seconds, None);
        assert_eq!(args.steps, None);
    }

    #[test]
    fn bad_values_are_refused_by_the_parser() {
        for args in [
            "run --num-envs 0",
            "run --backend gpus",
            "run --bogus",
            "run --steps 0",
            "run --steps -3",
            "run --exchange pipes",
        ] {
            assert!(parse(args).is_err(), "{args}");
        }
        assert!(parse("bench --sizes 2,0").is_err());
        assert!(parse("bench --sizes 5000").is_err());
        match parse("bench").unwrap().command {
            Some(Command::Bench(b)) => {
                assert_eq!(b.sizes, [2, 8, 32, 64]);
                assert!(!b.bare);
            }
            other => panic!("{other:?}"),
        }
        match parse("bench --bare").unwrap().command {
            Some(Command::Bench(b)) => assert!(b.bare),
            other => panic!("{other:?}"),
        }
        let err = parse("run --steps 0").unwrap_err().to_string();
        assert!(err.contains("at least 1 step"), "{err}");
        assert_eq!(run_args("run --steps 1").steps, Some(1));
        assert_eq!(BackendArg::Threads.name(), "threads");
        assert_eq!(BackendArg::Processes.name(), "processes");
    }
}
