//! Driving a pool with random actions, synchronously or asynchronously,
//! until its budget, its step count or Ctrl-C, with the episodes tallied
//! (shared by `rlpool run` and `rlpool bench`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use pool::tensordict::{Entry, TensorDict};
use pool::{AsyncEnvPool, Recv, Target};
use rand::SeedableRng;

use crate::args::RunArgs;
use crate::progress::Progress;
use crate::run::Plan;

/// Episode bookkeeping across envs.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Env-steps taken.
    pub(crate) steps: u64,
    /// Episodes ended.
    pub(crate) episodes: u64,
    /// Sum of the returns of the ended episodes.
    returns_sum: f64,
    /// Return so far of each env's current episode.
    running: Vec<f64>,
}

impl Tally {
    /// A tally of `num_envs` envs, nothing counted yet.
    fn new(num_envs: usize) -> Self {
        Self {
            running: vec![0.0; num_envs],
            ..Self::default()
        }
    }

    /// Counts a step batch whose rows are the envs `envs`.
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

    /// The mean return of the ended episodes, if any ended.
    pub(crate) fn mean_return(&self) -> Option<f64> {
        (self.episodes > 0).then(|| self.returns_sum / self.episodes as f64)
    }
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

/// Steps the pool until the budget, the step count or `stop` (Ctrl-C);
/// returns the tally and the time it ran. The progress line shows unless
/// `args.json`.
pub(crate) fn drive(
    args: &RunArgs,
    plan: &Plan,
    pool: &AsyncEnvPool,
    stop: &AtomicBool,
) -> Result<(Tally, Duration)> {
    let mut actions = Actions {
        spec: pool.full_action_spec().clone(),
        rng: rand::rngs::StdRng::seed_from_u64(args.seed),
    };
    let all: Vec<usize> = (0..plan.num_envs).collect();
    let mut tally = Tally::new(plan.num_envs);
    let start = Instant::now();
    let mut progress = Progress::new(!args.json, start);
    let done = |tally: &Tally| {
        plan.budget.is_some_and(|budget| start.elapsed() >= budget)
            || args.steps.is_some_and(|s| tally.steps >= s)
            || stop.load(Ordering::SeqCst)
    };
    let mut root = pool.reset(None)?.into_dense()?;
    if args.sync {
        while !done(&tally) {
            root.update(&actions.for_envs(&all)?)?;
            let (step, next_root) = pool.step_and_maybe_reset(root)?;
            tally.add(&step.into_dense()?, &all)?;
            root = next_root.into_dense()?;
            progress.show(&tally);
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
            let envs = step.env_indices().to_vec();
            tally.add(&step.into_dense()?, &envs)?;
            pool.async_step_and_maybe_reset_send(actions.for_envs(&envs)?, Target::Envs(envs))?;
            progress.show(&tally);
        }
        let in_flight = pool.in_flight().len();
        if in_flight > 0 {
            let (step, _) = pool.async_step_and_maybe_reset_recv(Recv::all(in_flight))?;
            let envs = step.env_indices().to_vec();
            tally.add(&step.into_dense()?, &envs)?;
        }
    }
    let elapsed = start.elapsed();
    progress.finish();
    Ok((tally, elapsed))
}
