//! Soak test: two process pools of 16 counter envs (the queue exchange and
//! the shared-memory one) driven asynchronously with random `min_get`,
//! `max_get`, deadlines and per-env receives for a given time, every result
//! checked against the count its env must have reached (nothing lost,
//! nothing duplicated), while the resident memory and the open file
//! descriptors of the parent and of every worker are watched: the run fails
//! if they grow beyond a small bound between the end of the warm-up and the
//! end of the run.
//!
//! ```text
//! cargo xtask soak --minutes 20
//! cargo run --release -p pool --example soak -- --minutes 1
//! ```

use std::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pool::envs::Kwargs;
use pool::tensordict::{Tensor, TensorDict};
use pool::{AsyncEnvPool, Backend, ExchangeMode, PoolError, ProcOptions, Recv, Target};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const ENVS: usize = 16;

/// Resident memory (KiB) and open descriptors of one process.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    rss_kib: u64,
    fds: u64,
}

fn usage(pid: &str) -> Usage {
    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
    Usage { rss_kib, fds }
}

/// The parent's usage, and the workers' summed.
fn snapshot(workers: &[u32]) -> (Usage, Usage) {
    let parent = usage("self");
    let mut all = Usage::default();
    for pid in workers {
        let u = usage(&pid.to_string());
        all.rss_kib += u.rss_kib;
        all.fds += u.fds;
    }
    (parent, all)
}

fn actions(n: usize) -> Result<TensorDict, Box<dyn Error>> {
    let mut td = TensorDict::new(&[n]);
    td.set("action", Tensor::full(&[n, 1], 1i64))?;
    Ok(td)
}

/// The envs of a batch; its `env_index` column must name the same.
fn env_ids(batch: &pool::Batch) -> Result<Vec<usize>, Box<dyn Error>> {
    let column = batch.get_non_tensor("env_index")?.as_int_vec();
    let envs: Vec<i64> = batch.env_indices().iter().map(|&e| e as i64).collect();
    if column.as_ref() != Some(&envs) {
        return Err(format!(
            "env_index column {column:?} differs from the batch's envs {:?}",
            batch.env_indices()
        )
        .into());
    }
    Ok(batch.env_indices().to_vec())
}

/// Drives one pool until `stop`; returns the env-steps checked.
fn drive(pool: &AsyncEnvPool, seed: u64, stop: &AtomicBool) -> Result<u64, Box<dyn Error>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut count = [0i32; ENVS];
    let mut busy = [false; ENVS];
    let mut steps = 0u64;
    pool.reset(None)?;
    let mut check = |batch: &TensorDict, envs: &[usize], busy: &mut [bool; ENVS]| {
        let obs = batch.tensor(("next", "observation"))?.to_vec::<i32>()?;
        for (&env, &o) in envs.iter().zip(&obs) {
            count[env] += 1;
            if o != count[env] {
                return Err(format!("env {env}: observation {o}, expected {}", count[env]).into());
            }
            if !std::mem::replace(&mut busy[env], false) {
                return Err(format!("env {env}: a result it was not sent").into());
            }
            steps += 1;
        }
        Ok::<(), Box<dyn Error>>(())
    };
    while !stop.load(Ordering::Relaxed) {
        let idle: Vec<usize> = (0..ENVS).filter(|&e| !busy[e]).collect();
        if !idle.is_empty() {
            if rng.random_bool(0.2) {
                // One env on its own, received on its own.
                let env = idle[rng.random_range(0..idle.len())];
                let mut one = TensorDict::new(&[]);
                one.set("action", Tensor::full(&[1], 1i64))?;
                pool.async_step_send(one, Target::Env(env))?;
                busy[env] = true;
                let out = pool.async_step_recv_env(env, Some(Duration::from_secs(30)))?;
                let mut batch = TensorDict::new(&[1]);
                batch.set(
                    ("next", "observation"),
                    out.tensor(("next", "observation"))?.reshape(&[1, 1])?,
                )?;
                check(&batch, &[env], &mut busy)?;
                continue;
            }
            pool.async_step_send(actions(idle.len())?, Target::Envs(idle.clone()))?;
            for &e in &idle {
                busy[e] = true;
            }
        }
        let in_flight = busy.iter().filter(|&&b| b).count();
        let min_get = rng.random_range(1..=in_flight);
        let mut recv = Recv::new().min_get(min_get);
        if rng.random_bool(0.5) {
            recv = recv.max_get(rng.random_range(min_get..=in_flight));
        }
        if rng.random_bool(0.5) {
            recv = recv.timeout(Duration::from_micros(rng.random_range(0..2_000)));
        }
        match pool.async_step_recv(recv) {
            Ok(batch) => {
                let envs = env_ids(&batch)?;
                check(&batch.into_dense()?, &envs, &mut busy)?;
            }
            // A deadline before min_get: nothing taken, nothing lost.
            Err(PoolError::Timeout { .. }) => {}
            Err(err) => return Err(err.into()),
        }
    }
    let in_flight = busy.iter().filter(|&&b| b).count();
    if in_flight > 0 {
        let batch = pool.async_step_recv(Recv::all(in_flight))?;
        let envs = env_ids(&batch)?;
        check(&batch.into_dense()?, &envs, &mut busy)?;
    }
    Ok(steps)
}

fn main() -> Result<(), Box<dyn Error>> {
    pool::init();
    let mut minutes = 1.0f64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--minutes" => {
                minutes = args
                    .next()
                    .and_then(|m| m.parse().ok())
                    .filter(|m: &f64| m.is_finite() && *m > 0.0)
                    .ok_or("--minutes needs a positive number")?;
            }
            other => return Err(format!("unknown argument {other:?} (--minutes N)").into()),
        }
    }
    let budget = Duration::from_secs_f64(minutes * 60.0);
    let warm_up = budget / 10;
    let pools: Vec<(ExchangeMode, AsyncEnvPool)> = [ExchangeMode::Queue, ExchangeMode::Shm]
        .into_iter()
        .map(|exchange| {
            let pool = AsyncEnvPool::builder()
                .backend(Backend::Multiprocessing(
                    ProcOptions::default().envs_per_worker(8).exchange(exchange),
                ))
                .registered_n(
                    "CountingEnv",
                    ENVS,
                    Kwargs::new().with("max_steps", i64::from(i32::MAX)),
                )
                .build()?;
            Ok((exchange, pool))
        })
        .collect::<Result<_, Box<dyn Error>>>()?;
    let workers: Vec<u32> = pools.iter().flat_map(|(_, p)| p.worker_pids()).collect();
    println!(
        "soak: {ENVS} CountingEnvs on each of the queue and shm exchanges (workers {workers:?}), {minutes} min"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let steps = std::thread::scope(|scope| -> Result<Vec<u64>, String> {
        let runs: Vec<_> = pools
            .iter()
            .enumerate()
            .map(|(i, (_, pool))| {
                let stop = Arc::clone(&stop);
                scope.spawn(move || drive(pool, i as u64, &stop).map_err(|e| e.to_string()))
            })
            .collect();
        let mut at_warm_up = None;
        let mut peak = (Usage::default(), Usage::default());
        while start.elapsed() < budget && !runs.iter().any(|r| r.is_finished()) {
            std::thread::sleep(Duration::from_secs(1).min(budget));
            let now = snapshot(&workers);
            peak.0.rss_kib = peak.0.rss_kib.max(now.0.rss_kib);
            peak.1.rss_kib = peak.1.rss_kib.max(now.1.rss_kib);
            if at_warm_up.is_none() && start.elapsed() >= warm_up {
                println!(
                    "after warm-up ({:.0} s): parent {} KiB RSS, {} fds; workers {} KiB RSS, {} fds",
                    start.elapsed().as_secs_f64(),
                    now.0.rss_kib,
                    now.0.fds,
                    now.1.rss_kib,
                    now.1.fds
                );
                at_warm_up = Some(now);
            }
        }
        stop.store(true, Ordering::Relaxed);
        let steps = runs
            .into_iter()
            .map(|r| r.join().map_err(|_| "a driver panicked".to_string())?)
            .collect::<Result<Vec<u64>, String>>()?;
        let end = snapshot(&workers);
        peak.0.rss_kib = peak.0.rss_kib.max(end.0.rss_kib);
        peak.1.rss_kib = peak.1.rss_kib.max(end.1.rss_kib);
        let begin = at_warm_up.unwrap_or(end);
        println!(
            "at the end ({:.0} s): parent {} KiB RSS (peak {}), {} fds; workers {} KiB RSS (peak {}), {} fds",
            start.elapsed().as_secs_f64(),
            end.0.rss_kib,
            peak.0.rss_kib,
            end.0.fds,
            end.1.rss_kib,
            peak.1.rss_kib,
            end.1.fds
        );
        // Bounds: descriptors do not grow at all; memory by at most 16 MiB
        // or a fifth (allocator noise), for the parent and the workers.
        let grew = |what: &str, a: u64, b: u64, slack: u64| {
            if b > a + slack {
                Err(format!("{what} grew from {a} to {b} (allowed: +{slack})"))
            } else {
                Ok(())
            }
        };
        grew("parent fds", begin.0.fds, end.0.fds, 0)?;
        grew("worker fds", begin.1.fds, end.1.fds, 0)?;
        grew(
            "parent RSS (KiB)",
            begin.0.rss_kib,
            end.0.rss_kib,
            (begin.0.rss_kib / 5).max(16 << 10),
        )?;
        grew(
            "worker RSS (KiB)",
            begin.1.rss_kib,
            end.1.rss_kib,
            (begin.1.rss_kib / 5).max(16 << 10),
        )?;
        Ok(steps)
    })?;
    for ((exchange, pool), steps) in pools.iter().zip(&steps) {
        println!(
            "{exchange:?}: {steps} env-steps checked; stats: {}",
            pool.stats(false)
                .map_or_else(|| "none".to_owned(), |s| s.to_string())
        );
    }
    println!(
        "soak: ok, {} env-steps in {:.0} s, every result checked",
        steps.iter().sum::<u64>(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
