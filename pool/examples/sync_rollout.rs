//! A synchronous rollout: a pool of 8 CartPoles stepped together with
//! random actions, `step_and_maybe_reset` keeping every episode going.
//!
//! Run: `cargo run --release -p pool --example sync_rollout`

use envs::Kwargs;
use pool::AsyncEnvPool;
use rand::SeedableRng;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = 8;
    let pool = AsyncEnvPool::builder()
        .registered_n("CartPole-v1", n, Kwargs::new())
        .build()?;
    let action_spec = pool.full_action_spec().clone();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);

    let mut root = pool.reset(None)?.into_dense()?;
    let (mut episodes, mut reward) = (0u32, 0.0f32);
    for _ in 0..1000 {
        // Random actions for every env, from the stacked action spec.
        let actions = action_spec.try_rand(&mut rng)?;
        if let tensordict::Entry::Dict(actions) = actions {
            root.update(&actions)?;
        }
        let (step, next_root) = pool.step_and_maybe_reset(root)?;
        let step = step.into_dense()?;
        reward += step
            .tensor(("next", "reward"))?
            .as_slice::<f32>()?
            .iter()
            .sum::<f32>();
        episodes += step
            .tensor(("next", "done"))?
            .as_slice::<bool>()?
            .iter()
            .filter(|&&d| d)
            .count() as u32;
        root = next_root.into_dense()?;
    }
    println!(
        "{n} envs x 1000 steps: {episodes} episodes finished, mean return {:.1}",
        reward / episodes.max(1) as f32
    );
    Ok(())
}
