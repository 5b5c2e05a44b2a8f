//! A heterogeneous pool: CartPole next to Pendulum. Their observations and
//! actions differ, so the results are stacked lazily: each env's result is
//! kept as it is, and keys whose shapes agree (reward, done) still read as
//! one stacked tensor. Dense stacking is a clear error.
//!
//! Run: `cargo run --release -p pool --example heterogeneous`

use envs::Kwargs;
use pool::{AsyncEnvPool, Recv, StackMode, Target};
use tensordict::{Tensor, TensorDict};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dense = AsyncEnvPool::builder()
        .maker(pool::EnvMaker::registry("CartPole-v1", Kwargs::new()))
        .maker(pool::EnvMaker::registry("Pendulum-v1", Kwargs::new()))
        .build();
    println!(
        "dense stacking: {}",
        dense.err().map(|e| e.to_string()).unwrap_or_default()
    );

    let pool = AsyncEnvPool::builder()
        .maker(pool::EnvMaker::registry("CartPole-v1", Kwargs::new()))
        .maker(pool::EnvMaker::registry("Pendulum-v1", Kwargs::new()))
        .stack(StackMode::Lazy)
        .build()?;
    let reset = pool.reset(None)?;
    println!("\nreset:\n{reset}");

    // One action per env, each of its own kind: two sends of one row each,
    // received together by one batch receive.
    let mut push = TensorDict::new(&[1]);
    push.set("action", Tensor::from_vec(&[1, 1], vec![1i64])?)?;
    let mut torque = TensorDict::new(&[1]);
    torque.set("action", Tensor::from_vec(&[1, 1], vec![0.5f32])?)?;
    pool.async_step_send(push, Target::Envs(vec![0]))?;
    pool.async_step_send(torque, Target::Envs(vec![1]))?;
    let batch = pool.async_step_recv(Recv::new().min_get(2))?;
    assert_eq!(batch.env_indices(), &[0, 1]);
    // Lazy: one tensordict per env, each with its own keys and shapes.
    assert!(!batch.is_dense());
    println!(
        "\nrewards of both envs, stacked: {:?}",
        batch.get_tensor(("next", "reward"))?.to_vec::<f32>()?
    );
    println!(
        "CartPole's observation: {:?}",
        batch
            .index(0)?
            .tensor(("next", "observation"))?
            .to_vec::<f32>()?
    );
    println!(
        "Pendulum's observation: {:?}",
        batch
            .index(1)?
            .tensor(("next", "observation"))?
            .to_vec::<f32>()?
    );
    Ok(())
}
