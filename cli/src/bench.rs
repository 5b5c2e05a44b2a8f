//! `rlpool bench`: pool configurations (backends, exchanges, sizes, sync and
//! async) measured against the raw single-threaded env loop, as a table or
//! one JSON line per measurement; with `--bare`, also the bare loops that
//! `cargo xtask bench --anchors` runs from Python too.

use std::num::NonZeroUsize;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use pool::envs::Kwargs;
use pool::tensordict::{Entry, TensorDict};
use pool::{AsyncEnvPool, Backend, ExchangeMode, ProcOptions, Recv, Target, ThreadOptions};
use rand::SeedableRng;

use crate::args::{BenchArgs, RunArgs};
use crate::drive::drive;
use crate::failure::{failed, usage, Failure};
use crate::output::say;
use crate::run::Plan;

/// The longest `--seconds` accepted per measurement.
const MAX_SECONDS: f64 = 60.0;

/// Random actions drawn ahead for each env of the raw loop, used in turn.
const RAW_ACTIONS: usize = 64;

/// One measured configuration.
#[derive(Debug)]
struct Measured {
    /// The configuration as shown in the table.
    config: &'static str,
    /// `threads` or `processes`; `None` for the raw loop.
    backend: Option<&'static str>,
    /// `queue` or `shm` for processes; `None` otherwise.
    exchange: Option<&'static str>,
    num_envs: usize,
    mode: &'static str,
    steps_per_second: f64,
    /// The raw loop's rate in the blocks alternating with this
    /// measurement's ([`paired`]), and the median of the blocks' ratios
    /// (this rate over the raw loop's); `None` for the raw loop itself.
    paired: Option<(f64, f64)>,
    /// Pool time per env-step minus the raw loop's, in nanoseconds: from
    /// the paired ratio and the raw loop's rate beside it.
    overhead_ns: Option<f64>,
    /// Env-steps per pool call (per receive and send for async): measured
    /// for the bare loops, `None` for the others.
    steps_per_call: Option<f64>,
    /// Nanoseconds per call of drawing the actions alone (bare loops).
    draw_ns: Option<f64>,
}

/// The bare loops of `--bare`: what a Python user of the pool writes, with
/// no episode tally and no root kept.
#[derive(Clone, Copy, Debug)]
enum Bare {
    /// `step_and_maybe_reset` of fresh random actions for all N envs.
    Sync,
    /// Receive exactly N/2 results (min_get = max_get = N/2), send fresh
    /// random actions to those envs.
    Async,
}

impl Bare {
    /// The mode as shown in the table and the JSON.
    fn mode(self) -> &'static str {
        match self {
            Bare::Sync => "sync-bare",
            Bare::Async => "async-bare",
        }
    }
}

/// The pool configurations measured, each with its backend for `n` envs
/// on `cores` cores.
fn configs(
    n: usize,
    cores: usize,
) -> [(&'static str, &'static str, Option<&'static str>, Backend); 3] {
    let procs = |exchange| {
        Backend::Multiprocessing(
            ProcOptions::default()
                .envs_per_worker(n.div_ceil(cores))
                .exchange(exchange),
        )
    };
    [
        (
            "threads",
            "threads",
            None,
            Backend::Threading(ThreadOptions::default()),
        ),
        (
            "processes, queue",
            "processes",
            Some("queue"),
            procs(ExchangeMode::Queue),
        ),
        (
            "processes, shm",
            "processes",
            Some("shm"),
            procs(ExchangeMode::Shm),
        ),
    ]
}

/// `rlpool bench`.
pub(crate) fn bench(args: &BenchArgs) -> Result<(), Failure> {
    if !pool::envs::registered().contains(&args.env) {
        return Err(usage(anyhow::anyhow!(
            "unknown env {:?} (registered: {})",
            args.env,
            pool::envs::registered().join(", ")
        )));
    }
    if !(args.seconds.is_finite() && args.seconds > 0.0 && args.seconds <= MAX_SECONDS) {
        return Err(usage(anyhow::anyhow!(
            "--seconds {}: expected a number of seconds in (0, {MAX_SECONDS}]",
            args.seconds
        )));
    }
    let budget = Duration::from_secs_f64(args.seconds);
    let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    if !args.json {
        say!(
            "{} on {cores} cores, {} s per measurement (async: min_get = N/2; overhead: pool time per env-step minus the raw loop's; x raw: the median ratio to the raw loop over {PAIRS} pairs of blocks, the raw loop run between the pool's)",
            args.env,
            args.seconds
        )?;
        if args.bare {
            say!("bare loops: no tally, no root kept; sync-bare: all N per call; async-bare: min_get = max_get = N/2, resent to those envs")?;
        }
        say!(
            "{:>5}  {:<20} {:<10} {:>14} {:>16} {:>9}",
            "envs",
            "config",
            "mode",
            "env-steps/s",
            "overhead/step",
            "x raw"
        )?;
    }
    for &n in &args.sizes {
        let n = n as usize;
        let mut raw = RawLoop::new(&args.env, n).map_err(failed)?;
        let (steps, elapsed) = raw.run(budget).map_err(failed)?;
        print_row(
            args,
            &Measured {
                config: "raw loop (1 thread)",
                backend: None,
                exchange: None,
                num_envs: n,
                mode: "sync",
                steps_per_second: rate(steps, elapsed),
                paired: None,
                overhead_ns: None,
                steps_per_call: None,
                draw_ns: None,
            },
        )?;
        for (config, backend_name, exchange, backend) in configs(n, cores) {
            let row = |mode, paired: Paired, steps_per_call, draw_ns| Measured {
                config,
                backend: Some(backend_name),
                exchange,
                num_envs: n,
                mode,
                steps_per_second: paired.rate,
                paired: Some((paired.raw, paired.ratio)),
                // From the paired ratio, so that the two columns agree.
                overhead_ns: Some((1.0 / paired.ratio - 1.0) / paired.raw * 1e9),
                steps_per_call,
                draw_ns,
            };
            for sync in [true, false] {
                let run_args = RunArgs {
                    env: args.env.clone(),
                    num_envs: n as u32,
                    sync,
                    json: true,
                    ..RunArgs::default()
                };
                let pool = AsyncEnvPool::builder()
                    .registered_n(&args.env, n, Kwargs::new())
                    .backend(backend.clone())
                    .build()
                    .map_err(failed)?;
                let never = AtomicBool::new(false);
                let measured = paired(&mut raw, budget, |block| {
                    let plan = Plan {
                        num_envs: n,
                        min_get: (n / 2).max(1),
                        backend: backend.clone(),
                        workers: None,
                        budget: Some(block),
                    };
                    let (tally, elapsed) = drive(&run_args, &plan, &pool, &never)?;
                    Ok((tally.steps, elapsed))
                });
                pool.shutdown();
                let mode = if sync { "sync" } else { "async" };
                print_row(args, &row(mode, measured.map_err(failed)?, None, None))?;
            }
            if !args.bare {
                continue;
            }
            for bare in [Bare::Sync, Bare::Async] {
                let pool = AsyncEnvPool::builder()
                    .registered_n(&args.env, n, Kwargs::new())
                    .backend(backend.clone())
                    .build()
                    .map_err(failed)?;
                let (mut per_call, mut draws) = (Vec::new(), Vec::new());
                let measured = paired(&mut raw, budget, |block| {
                    let figures = bare_rate(&pool, bare, block)?;
                    per_call.push(figures.steps_per_call);
                    draws.push(figures.draw_ns);
                    Ok((figures.steps, figures.elapsed))
                });
                pool.shutdown();
                let measured = measured.map_err(failed)?;
                let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
                let row = row(
                    bare.mode(),
                    measured,
                    Some(mean(&per_call)),
                    Some(mean(&draws)),
                );
                print_row(args, &row)?;
            }
        }
    }
    Ok(())
}

/// How many pairs of blocks a measurement takes ([`paired`]).
const PAIRS: u32 = 10;

/// The shortest block of a paired measurement ([`paired`]).
const MIN_BLOCK: Duration = Duration::from_millis(1);

/// A measurement's rate and the raw loop's beside it ([`paired`]).
#[derive(Debug)]
struct Paired {
    /// Env-steps per second over the measured blocks.
    rate: f64,
    /// The raw loop's over the blocks between them.
    raw: f64,
    /// The median over the pairs of the block's rate over the raw loop's.
    ratio: f64,
}

/// `block(length)` (it runs the measured loop for about `length`, and
/// returns its env-steps and the time they took) and the raw loop
/// alternately, [`PAIRS`] blocks of each, each `budget` / [`PAIRS`] long
/// (at least [`MIN_BLOCK`]), the order flipped every pair: each ratio is taken within tens of
/// milliseconds, so that the host's drift over the seconds between one
/// row and the next (single runs 1.5 to 2 times apart on a shared machine)
/// does not enter it.
fn paired(
    raw: &mut RawLoop,
    budget: Duration,
    mut block: impl FnMut(Duration) -> Result<(u64, Duration)>,
) -> Result<Paired> {
    // A block long enough for a round of every env and a few pool calls
    // (each pool block begins with a reset and ends with nothing in
    // flight: a few tens of microseconds of the block).
    let length = (budget / PAIRS).max(MIN_BLOCK);
    let (mut steps, mut time, mut raw_steps, mut raw_time) = (0, Duration::ZERO, 0, Duration::ZERO);
    let mut ratios = Vec::with_capacity(PAIRS as usize);
    for pair in 0..PAIRS {
        let (measured, alongside) = if pair % 2 == 0 {
            let measured = block(length)?;
            (measured, raw.run(length)?)
        } else {
            let alongside = raw.run(length)?;
            (block(length)?, alongside)
        };
        ratios.push(rate(measured.0, measured.1) / rate(alongside.0, alongside.1));
        (steps, time) = (steps + measured.0, time + measured.1);
        (raw_steps, raw_time) = (raw_steps + alongside.0, raw_time + alongside.1);
    }
    ratios.sort_by(f64::total_cmp);
    let mid = ratios.len() / 2;
    let ratio = if ratios.len() % 2 == 0 {
        (ratios[mid - 1] + ratios[mid]) / 2.0
    } else {
        ratios[mid]
    };
    Ok(Paired {
        rate: rate(steps, time),
        raw: rate(raw_steps, raw_time),
        ratio,
    })
}

/// Env-steps per second of `steps` in `elapsed`.
fn rate(steps: u64, elapsed: Duration) -> f64 {
    steps as f64 / elapsed.as_secs_f64().max(1e-9)
}

/// The figures of a bare loop.
#[derive(Debug)]
struct BareFigures {
    /// The env-steps measured, and the time they took.
    steps: u64,
    elapsed: Duration,
    /// Env-steps per call (per receive and send for async).
    steps_per_call: f64,
    /// Nanoseconds per call of drawing the actions alone.
    draw_ns: f64,
}

/// Draws made to time the drawing of actions alone.
const DRAWS: u32 = 2000;

/// A bare loop on `pool`, measured for `budget` after a warm-up of a tenth
/// of it (at least 3 calls), as the Python driver of `cargo xtask bench
/// --anchors` does. Actions are drawn afresh for every call from the pool's
/// action spec (all N envs, then the rows of the envs sent to); the time of
/// that draw alone is measured after the loop. Leaves nothing in flight.
fn bare_rate(pool: &AsyncEnvPool, bare: Bare, budget: Duration) -> Result<BareFigures> {
    let n = pool.num_envs();
    let half = (n / 2).max(1);
    let spec = pool.full_action_spec().clone();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let mut draw = |envs: Option<&[usize]>| -> Result<TensorDict> {
        let Entry::Dict(all) = spec.try_rand(&mut rng)? else {
            bail!("the action spec is not a composite");
        };
        Ok(match envs {
            None => all,
            Some(envs) => all.gather_rows(envs)?,
        })
    };
    pool.reset(None)?;
    if let Bare::Async = bare {
        pool.async_step_and_maybe_reset_send(draw(None)?, Target::All)?;
    }
    let recv = Recv::new().min_get(half).max_get(half);
    let call = |draw: &mut dyn FnMut(Option<&[usize]>) -> Result<TensorDict>| -> Result<usize> {
        match bare {
            Bare::Sync => {
                pool.step_and_maybe_reset(draw(None)?)?;
                Ok(n)
            }
            Bare::Async => {
                let (step, _root) = pool.async_step_and_maybe_reset_recv(recv)?;
                let envs = step.env_indices().to_vec();
                let got = envs.len();
                pool.async_step_and_maybe_reset_send(draw(Some(&envs))?, Target::Envs(envs))?;
                Ok(got)
            }
        }
    };
    let warm = Instant::now();
    let mut calls = 0;
    while calls < 3 || warm.elapsed() < budget / 10 {
        call(&mut draw)?;
        calls += 1;
    }
    let (mut steps, mut calls) = (0usize, 0usize);
    let start = Instant::now();
    let elapsed = loop {
        steps += call(&mut draw)?;
        calls += 1;
        let elapsed = start.elapsed();
        if elapsed >= budget {
            break elapsed;
        }
    };
    // Nothing left in flight: the next block begins with a reset.
    let in_flight = pool.in_flight().len();
    if in_flight > 0 {
        pool.async_step_and_maybe_reset_recv(Recv::all(in_flight))?;
    }
    let envs: Vec<usize> = (0..half).collect();
    let start = Instant::now();
    for _ in 0..DRAWS {
        match bare {
            Bare::Sync => draw(None)?,
            Bare::Async => draw(Some(&envs))?,
        };
    }
    Ok(BareFigures {
        steps: steps as u64,
        elapsed,
        steps_per_call: steps as f64 / calls as f64,
        draw_ns: start.elapsed().as_secs_f64() * 1e9 / f64::from(DRAWS),
    })
}

/// Prints one measurement as it is made: a table row, or a JSON line.
fn print_row(args: &BenchArgs, r: &Measured) -> Result<(), Failure> {
    if args.json {
        return say!(
            "{}",
            serde_json::json!({
                "env": args.env,
                "config": r.config,
                "backend": r.backend,
                "exchange": r.exchange,
                "num_envs": r.num_envs,
                "mode": r.mode,
                "steps_per_second": r.steps_per_second,
                "paired_raw_steps_per_second": r.paired.map(|(raw, _)| raw),
                "paired_ratio": r.paired.map(|(_, ratio)| ratio),
                "overhead_ns_per_env_step": r.overhead_ns,
                "steps_per_call": r.steps_per_call,
                "draw_ns_per_call": r.draw_ns,
            })
        );
    }
    let overhead = r
        .overhead_ns
        .map_or("-".to_owned(), |o| format!("{o:.0} ns"));
    let ratio = r
        .paired
        .map_or("1".to_owned(), |(_, ratio)| format!("{ratio:.2}x"));
    say!(
        "{:>5}  {:<20} {:<10} {:>14.0} {:>16} {:>9}",
        r.num_envs,
        r.config,
        r.mode,
        r.steps_per_second,
        overhead,
        ratio
    )
}

/// `n` envs stepped in turn by one thread: each env's `step_into` on
/// reused buffers (the env's own cost, as in the divan benchmark's `raw`),
/// with random actions drawn ahead ([`RAW_ACTIONS`] per env, used in
/// turn), and `reset_into` when an episode ends.
struct RawLoop {
    envs: Vec<RawEnv>,
    /// The actions' turn.
    turn: usize,
}

/// An env of the raw loop: the env, its actions, its step and reset
/// buffers.
type RawEnv = (
    Box<dyn pool::envs::Env>,
    Vec<TensorDict>,
    TensorDict,
    TensorDict,
);

impl RawLoop {
    fn new(env: &str, n: usize) -> Result<RawLoop> {
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
        Ok(RawLoop { envs, turn: 0 })
    }

    /// Rounds of every env for about `budget` (at least one): the
    /// env-steps, and the time they took.
    fn run(&mut self, budget: Duration) -> Result<(u64, Duration)> {
        let start = Instant::now();
        let mut steps = 0u64;
        // At least one round, however short the budget.
        while steps == 0 || start.elapsed() < budget {
            for (e, inputs, next, reset) in self.envs.iter_mut() {
                e.step_into(&inputs[self.turn], next)?;
                if next.tensor("done")?.as_slice::<bool>()?.contains(&true) {
                    e.reset_into(None, reset)?;
                }
                steps += 1;
            }
            self.turn = (self.turn + 1) % RAW_ACTIONS;
        }
        Ok((steps, start.elapsed()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool of `n` CountingEnvs on worker threads.
    fn counting(n: usize) -> AsyncEnvPool {
        AsyncEnvPool::builder()
            .registered_n("CountingEnv", n, Kwargs::new())
            .backend(Backend::Threading(ThreadOptions::default()))
            .build()
            .unwrap()
    }

    /// A measurement alternates with the raw loop: `PAIRS` blocks of a
    /// `PAIRS`th of the budget each, its rate over its own blocks, and the
    /// ratio the median of the pairs' (here the block's rate is fixed, so
    /// the ratio is that rate over a raw rate between the slowest and the
    /// fastest raw block's).
    #[test]
    fn a_measurement_is_paired_with_the_raw_loop_block_by_block() {
        let mut raw = RawLoop::new("CountingEnv", 4).unwrap();
        let budget = Duration::from_millis(50);
        let mut lengths = Vec::new();
        let measured = paired(&mut raw, budget, |length| {
            lengths.push(length);
            Ok((1000, Duration::from_millis(1)))
        })
        .unwrap();
        assert_eq!(lengths, vec![budget / PAIRS; PAIRS as usize]);
        // A budget too short for blocks of a millisecond: blocks of one.
        let mut lengths = Vec::new();
        paired(&mut raw, Duration::from_micros(10), |length| {
            lengths.push(length);
            Ok((1, length))
        })
        .unwrap();
        assert_eq!(lengths, vec![MIN_BLOCK; PAIRS as usize]);
        assert!((measured.rate - 1e6).abs() < 1.0, "{measured:?}");
        assert!(measured.raw > 0.0, "{measured:?}");
        let implied = measured.rate / measured.ratio;
        assert!(implied > 0.0 && implied.is_finite(), "{measured:?}");
        // An error in a block ends the measurement with it.
        let err = paired(&mut raw, budget, |_| anyhow::bail!("a block failed")).unwrap_err();
        assert_eq!(err.to_string(), "a block failed");
    }

    #[test]
    fn bare_loops_step_all_envs_or_exactly_half_per_call() {
        for (n, bare, per_call) in [
            (4, Bare::Sync, 4.0),
            (4, Bare::Async, 2.0),
            (5, Bare::Async, 2.0),
            (1, Bare::Async, 1.0),
        ] {
            let pool = counting(n);
            let figures = bare_rate(&pool, bare, Duration::from_millis(20)).unwrap();
            // Another block on the same pool (nothing left in flight).
            bare_rate(&pool, bare, Duration::from_millis(5)).unwrap();
            pool.shutdown();
            assert_eq!(figures.steps_per_call, per_call, "{n} envs, {bare:?}");
            assert!(
                figures.steps > 0 && !figures.elapsed.is_zero() && figures.draw_ns > 0.0,
                "{figures:?}"
            );
        }
        assert_eq!(Bare::Sync.mode(), "sync-bare");
        assert_eq!(Bare::Async.mode(), "async-bare");
    }
}
