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

    /// Counts a step batch whose rows are the envs `envs`: read in place
    /// for the usual dtypes (`f32` rewards, `bool` done flags), converted
    /// otherwise.
    fn add(&mut self, batch: &TensorDict, envs: &[usize]) -> Result<()> {
        let rewards = batch.tensor(("next", "reward"))?;
        let done = batch.tensor(("next", "done"))?;
        let converted;
        let rewards: Rewards<'_> = match rewards.as_slice::<f32>() {
            Ok(r) => Rewards::F32(r),
            Err(_) => {
                converted = rewards.to_f64_vec();
                Rewards::F64(&converted)
            }
        };
        let done_converted;
        let done: &[bool] = match done.as_slice::<bool>() {
            Ok(d) => d,
            Err(_) => {
                done_converted = done
                    .to_f64_vec()
                    .iter()
                    .map(|&d| d != 0.0)
                    .collect::<Vec<_>>();
                &done_converted
            }
        };
        let k = envs.len().max(1);
        let (per_env, done_per_env) = (rewards.len() / k, done.len() / k);
        for (j, &env) in envs.iter().enumerate() {
            self.running[env] += rewards.sum(j * per_env..(j + 1) * per_env);
            if done[j * done_per_env..(j + 1) * done_per_env].contains(&true) {
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

/// A batch's rewards, as stored or converted.
enum Rewards<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
}

impl Rewards<'_> {
    fn len(&self) -> usize {
        match self {
            Rewards::F32(r) => r.len(),
            Rewards::F64(r) => r.len(),
        }
    }

    /// The sum of the rewards in `range`.
    fn sum(&self, range: std::ops::Range<usize>) -> f64 {
        match self {
            Rewards::F32(r) => r[range].iter().map(|&x| f64::from(x)).sum(),
            Rewards::F64(r) => r[range].iter().sum(),
        }
    }
}

/// Random actions for `envs`, drawn from the pool's action spec.
struct Actions {
    spec: pool::specs::TensorSpec,
    rng: rand::rngs::StdRng,
}

impl Actions {
    /// Actions for `envs` (distinct): a draw for every env, the drawn batch
    /// itself when `envs` is every env in order, else its rows of `envs`.
    fn for_envs(&mut self, envs: &[usize]) -> Result<TensorDict> {
        let Entry::Dict(all) = self.spec.try_rand(&mut self.rng)? else {
            bail!("the action spec is not a composite");
        };
        let every_env = all.batch_size().first() == Some(&envs.len())
            && envs.iter().enumerate().all(|(j, &env)| j == env);
        if every_env {
            return Ok(all);
        }
        Ok(all.gather_rows(envs)?)
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

#[cfg(test)]
mod tests {
    use pool::tensordict::Tensor;

    use super::*;

    /// A step batch of `rewards` and `done` flags, one row per env.
    fn batch(rewards: Tensor, done: Tensor) -> TensorDict {
        let n = rewards.shape()[0];
        let mut next = TensorDict::new(&[n]);
        next.set("reward", rewards).unwrap();
        next.set("done", done).unwrap();
        let mut td = TensorDict::new(&[n]);
        td.set("next", next).unwrap();
        td
    }

    /// Rewards and done flags read in place (f32, bool) or converted (f64,
    /// integer flags) count the same episodes and returns.
    #[test]
    fn the_tally_reads_rewards_and_flags_of_any_dtype() {
        let stored = batch(
            Tensor::from_vec(&[2, 1], vec![1.0f32, 2.0]).unwrap(),
            Tensor::from_vec(&[2, 1], vec![false, true]).unwrap(),
        );
        let converted = batch(
            Tensor::from_vec(&[2, 1], vec![1.0f64, 2.0]).unwrap(),
            Tensor::from_vec(&[2, 1], vec![0i64, 1]).unwrap(),
        );
        for td in [stored, converted] {
            let mut tally = Tally::new(4);
            tally.add(&td, &[1, 3]).unwrap();
            tally.add(&td, &[3, 1]).unwrap();
            assert_eq!(tally.steps, 4);
            assert_eq!(tally.episodes, 2, "env 3, then env 1");
            assert_eq!(tally.mean_return(), Some((2.0 + 3.0) / 2.0));
            assert_eq!(
                tally.running,
                vec![0.0, 0.0, 0.0, 1.0],
                "env 3 started anew"
            );
        }
    }

    /// Every env in order gets the drawn batch, others its rows.
    #[test]
    fn actions_for_some_envs_are_rows_of_a_draw_for_all() {
        let pool = AsyncEnvPool::builder()
            .registered_n("CountingEnv", 4, pool::envs::Kwargs::new())
            .build()
            .unwrap();
        let mut actions = Actions {
            spec: pool.full_action_spec().clone(),
            rng: rand::rngs::StdRng::seed_from_u64(0),
        };
        assert_eq!(actions.for_envs(&[0, 1, 2, 3]).unwrap().batch_size(), &[4]);
        let some = actions.for_envs(&[3, 1]).unwrap();
        assert_eq!(some.batch_size(), &[2]);
        assert_eq!(some.tensor("action").unwrap().shape()[0], 2);
        pool.shutdown();
    }
}
