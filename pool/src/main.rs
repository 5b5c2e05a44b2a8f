//! `rlpool`, the project's main program: a pool of reference environments
//! run asynchronously with a random policy, a live progress line, and a
//! summary.
//!
//! Usage: `rlpool [--env NAME] [--num-envs N] [--min-get M] [--threads T]
//! [--seconds S] [--sync]`; defaults: 16 `CartPole-v1` envs, `min_get` 8,
//! as many worker threads as cores, 3 seconds.
#![forbid(unsafe_code)]

use std::io::{IsTerminal, Write};
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use pool::envs::Kwargs;
use pool::tensordict::{Entry, StackedTensorDict, TensorDict};
use pool::{AsyncEnvPool, Backend, Recv, Target};
use rand::SeedableRng;

const USAGE: &str =
    "usage: rlpool [--env NAME] [--num-envs N] [--min-get M] [--threads T] [--seconds S] [--sync]

Runs a pool of environments with random actions and prints throughput,
episodes and mean return. Defaults: 16 CartPole-v1 envs, min_get 8, as many
worker threads as cores, 3 seconds, asynchronous.";

#[derive(Debug)]
struct Options {
    env: String,
    num_envs: usize,
    min_get: usize,
    threads: Option<NonZeroUsize>,
    seconds: f64,
    sync: bool,
}

fn main() {
    // A worker process of a process pool runs here and never returns.
    pool::init();
    match parse(std::env::args().skip(1)).and_then(|options| run(&options)) {
        Ok(()) => {}
        Err(err) => {
            eprintln!("rlpool: {err:#}");
            std::process::exit(2);
        }
    }
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Options> {
    let mut options = Options {
        env: "CartPole-v1".into(),
        num_envs: 16,
        min_get: 8,
        threads: None,
        seconds: 3.0,
        sync: false,
    };
    let mut min_get_given = false;
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--env" => options.env = value("--env")?,
            "--num-envs" => options.num_envs = positive("--num-envs", &value("--num-envs")?)?,
            "--min-get" => {
                options.min_get = positive("--min-get", &value("--min-get")?)?;
                min_get_given = true;
            }
            "--threads" => {
                options.threads = NonZeroUsize::new(positive("--threads", &value("--threads")?)?)
            }
            "--seconds" => {
                let text = value("--seconds")?;
                options.seconds = text
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
                    .with_context(|| {
                        format!("--seconds {text:?}: expected a number of seconds in (0, 86400]")
                    })?;
            }
            "--sync" => options.sync = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    if !min_get_given {
        options.min_get = (options.num_envs / 2).max(1);
    }
    if options.min_get > options.num_envs {
        bail!(
            "--min-get {} is above --num-envs {}",
            options.min_get,
            options.num_envs
        );
    }
    Ok(options)
}

fn positive(name: &str, text: &str) -> Result<usize> {
    text.parse::<usize>()
        .ok()
        .filter(|&n| n > 0)
        .with_context(|| format!("{name} {text:?}: expected a positive integer"))
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

fn run(options: &Options) -> Result<()> {
    let pool = AsyncEnvPool::builder()
        .registered_n(&options.env, options.num_envs, Kwargs::new())
        .backend(Backend::Threading {
            threads: options.threads,
        })
        .build()?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let action_spec = pool.full_action_spec().clone();
    let mut random_actions = |envs: &[usize]| -> Result<TensorDict> {
        let Entry::Dict(all) = action_spec.try_rand(&mut rng)? else {
            bail!("the action spec is not a composite");
        };
        let mut out = TensorDict::zeros_stacked(&all.index(0)?, envs.len())?;
        for (j, &env) in envs.iter().enumerate() {
            out.copy_row(j, &all, env)?;
        }
        Ok(out)
    };
    let mode = if options.sync {
        "synchronous".to_string()
    } else {
        format!("asynchronous, min_get {}", options.min_get)
    };
    println!(
        "rlpool: {} x {} on {} worker threads, {mode}, random actions, {} s",
        options.num_envs,
        options.env,
        pool.env_names().len().min(options.threads.map_or_else(
            || std::thread::available_parallelism().map_or(1, NonZeroUsize::get),
            NonZeroUsize::get
        )),
        options.seconds
    );

    let all: Vec<usize> = (0..options.num_envs).collect();
    let mut tally = Tally {
        running: vec![0.0; options.num_envs],
        ..Tally::default()
    };
    let terminal = std::io::stdout().is_terminal();
    let budget = Duration::from_secs_f64(options.seconds);
    let start = Instant::now();
    let mut last_print = start;
    let mut root = pool.reset(None)?.into_dense()?;
    if options.sync {
        while start.elapsed() < budget {
            root.update(&random_actions(&all)?)?;
            let (step, next_root) = pool.step_and_maybe_reset(root)?;
            tally.add(&step.into_dense()?, &all)?;
            root = next_root.into_dense()?;
            progress(&tally, start, &mut last_print, terminal);
        }
    } else {
        pool.async_step_and_maybe_reset_send(random_actions(&all)?, Target::All)?;
        let recv = Recv::new().min_get(options.min_get);
        while start.elapsed() < budget {
            let (step, _next_root) = pool.async_step_and_maybe_reset_recv(recv)?;
            let envs = env_ids(&step)?;
            tally.add(&step.into_dense()?, &envs)?;
            pool.async_step_and_maybe_reset_send(random_actions(&envs)?, Target::Envs(envs))?;
            progress(&tally, start, &mut last_print, terminal);
        }
        let in_flight = pool.in_flight().len();
        if in_flight > 0 {
            let (step, _) = pool.async_step_and_maybe_reset_recv(Recv::new().min_get(in_flight))?;
            let envs = env_ids(&step)?;
            tally.add(&step.into_dense()?, &envs)?;
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    if terminal {
        println!();
    }
    println!("steps:        {}", tally.steps);
    println!(
        "throughput:   {:.0} env-steps/s",
        tally.steps as f64 / elapsed
    );
    println!("episodes:     {}", tally.episodes);
    if tally.episodes > 0 {
        println!(
            "mean return:  {:.2}",
            tally.returns_sum / tally.episodes as f64
        );
    }
    println!("exchange:     {:?}", pool.resolved_exchange());
    pool.shutdown();
    Ok(())
}

fn progress(tally: &Tally, start: Instant, last_print: &mut Instant, terminal: bool) {
    if !terminal || last_print.elapsed() < Duration::from_millis(250) {
        return;
    }
    *last_print = Instant::now();
    let elapsed = start.elapsed().as_secs_f64();
    let mean = if tally.episodes > 0 {
        tally.returns_sum / tally.episodes as f64
    } else {
        0.0
    };
    print!(
        "\r{:>6.1} s  {:>10} steps  {:>10.0} steps/s  {:>7} episodes  mean return {:>7.2}",
        elapsed,
        tally.steps,
        tally.steps as f64 / elapsed,
        tally.episodes,
        mean
    );
    let _ = std::io::stdout().flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> impl Iterator<Item = String> + '_ {
        text.split_whitespace().map(str::to_owned)
    }

    #[test]
    fn arguments_parse_and_bad_ones_are_errors() {
        let options = parse(args("--env Pendulum-v1 --num-envs 4 --seconds 0.5")).unwrap();
        assert_eq!(
            (options.env.as_str(), options.num_envs, options.min_get),
            ("Pendulum-v1", 4, 2)
        );
        assert!(parse(args("--num-envs 0")).is_err());
        assert!(parse(args("--num-envs 2 --min-get 3")).is_err());
        assert!(parse(args("--seconds -1")).is_err());
        assert!(parse(args("--bogus")).is_err());
        assert!(parse(args("--env")).is_err());
    }

    #[test]
    fn a_short_run_of_each_mode_works() {
        for sync in [false, true] {
            let options = Options {
                env: "CountingEnv".into(),
                num_envs: 4,
                min_get: 2,
                threads: NonZeroUsize::new(2),
                seconds: 0.05,
                sync,
            };
            run(&options).unwrap();
        }
    }
}
