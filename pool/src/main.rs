//! `rlpool`, the project's main program.
//!
//! Until the pool exists, it rolls out each reference environment for a few
//! seconds with random actions and prints the steps per second, twice: on
//! the hot path a pool uses (`step_into` on reused buffers), and through the
//! provided API (`step_and_maybe_reset`, which allocates fresh tensordicts).
//!
//! Usage: `rlpool [--seconds S]` (default 1 second per env and path).

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use pool::envs::{self, Env, Kwargs};
use rand::rngs::SmallRng;
use rand::SeedableRng;

fn main() {
    if let Err(err) = run() {
        eprintln!("rlpool: {err:#}");
        std::process::exit(2);
    }
}

fn parse_seconds() -> Result<f64> {
    let mut args = std::env::args().skip(1);
    let mut seconds = 1.0;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => {
                let value = args.next().context("--seconds needs a value")?;
                seconds = value
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0 && *s <= 3600.0)
                    .with_context(|| {
                        format!("--seconds {value:?}: expected a number of seconds in (0, 3600]")
                    })?;
            }
            "-h" | "--help" => {
                println!("usage: rlpool [--seconds S]\n\nRolls out each reference env for S seconds (default 1) per path and prints steps per second.");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    Ok(seconds)
}

/// Steps per second and episodes finished on the hot path: `step_into` on
/// buffers built once, the action written in place.
fn hot_path(env: &mut dyn Env, budget: Duration, rng: &mut SmallRng) -> Result<(u64, u64, f64)> {
    let mut root = env.reset(None)?;
    let mut next = env.step_template();
    let action_spec = env.specs().full_action_spec().clone();
    let start = Instant::now();
    let (mut steps, mut episodes) = (0u64, 0u64);
    while start.elapsed() < budget {
        for _ in 0..256 {
            root.update(&action_spec.rand(rng))?;
            env.step_into(&root, &mut next)?;
            steps += 1;
            if next.tensor("done")?.as_slice::<bool>()?.iter().any(|&d| d) {
                episodes += 1;
                env.reset_into(None, &mut root)?;
            }
        }
    }
    Ok((steps, episodes, start.elapsed().as_secs_f64()))
}

/// Steps per second and episodes finished through `step_and_maybe_reset`.
fn provided_api(
    env: &mut dyn Env,
    budget: Duration,
    rng: &mut SmallRng,
) -> Result<(u64, u64, f64)> {
    let mut root = env.reset(None)?;
    let start = Instant::now();
    let (mut steps, mut episodes) = (0u64, 0u64);
    while start.elapsed() < budget {
        for _ in 0..256 {
            root.update(&env.rand_action(rng))?;
            let (td, next_root) = env.step_and_maybe_reset(root)?;
            steps += 1;
            if td
                .tensor(("next", "done"))?
                .as_slice::<bool>()?
                .iter()
                .any(|&d| d)
            {
                episodes += 1;
            }
            root = next_root;
        }
    }
    Ok((steps, episodes, start.elapsed().as_secs_f64()))
}

fn run() -> Result<()> {
    let seconds = parse_seconds()?;
    let budget = Duration::from_secs_f64(seconds);
    println!("rlpool: rolling out the reference envs with random actions, {seconds} s per env and path\n");
    println!(
        "{:<14} {:>16} {:>10} {:>16} {:>10}",
        "env", "step_into/s", "episodes", "step_and_reset/s", "episodes"
    );
    let mut rng = SmallRng::seed_from_u64(0);
    for name in ["CartPole-v1", "Pendulum-v1", "CountingEnv", "LatencyEnv"] {
        let mut env = envs::make(name, &Kwargs::new())?;
        env.set_seed(0);
        let (hot_steps, hot_episodes, hot_secs) = hot_path(&mut *env, budget, &mut rng)?;
        let (api_steps, api_episodes, api_secs) = provided_api(&mut *env, budget, &mut rng)?;
        println!(
            "{name:<14} {:>16.0} {hot_episodes:>10} {:>16.0} {api_episodes:>10}",
            hot_steps as f64 / hot_secs,
            api_steps as f64 / api_secs,
        );
    }
    println!("\n(one thread; the asynchronous pool that runs many envs at once is on its way)");
    Ok(())
}
