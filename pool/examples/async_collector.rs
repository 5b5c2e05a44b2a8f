//! An asynchronous collector: while the envs step, the learner runs its
//! policy (simulated by a sleep) on the results it already has, and the
//! speed-up over the synchronous loop is printed.
//!
//! The envs take 200 us per step (sleeping, like a simulator waiting on
//! I/O); the policy takes 200 us per batch. Synchronously the two add up;
//! asynchronously, half the envs step while the policy runs on the other
//! half.
//!
//! Run: `cargo run --release -p pool --example async_collector`

use std::time::{Duration, Instant};

use envs::Kwargs;
use pool::{AsyncEnvPool, Recv, Target};
use tensordict::{Tensor, TensorDict};

const ENVS: usize = 8;
const STEPS: usize = 400;
const POLICY_TIME: Duration = Duration::from_micros(200);

fn actions(n: usize) -> Result<TensorDict, tensordict::TensorDictError> {
    let mut td = TensorDict::new(&[n]);
    td.set("action", Tensor::try_full(&[n, 1], 1i64)?)?;
    Ok(td)
}

fn policy() {
    std::thread::sleep(POLICY_TIME);
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let kwargs = Kwargs::new().with("step_us", 200).with("mode", "sleep");
    let pool = AsyncEnvPool::builder()
        .registered_n("LatencyEnv", ENVS, kwargs)
        .build()?;

    // Synchronous: policy, then step every env, in turn.
    pool.reset(None)?;
    let start = Instant::now();
    for _ in 0..STEPS / ENVS {
        policy();
        pool.step(actions(ENVS)?)?;
    }
    let sync = start.elapsed();

    // Asynchronous: keep half the envs stepping while the policy runs on the
    // half that just came back.
    pool.reset(None)?;
    let half = ENVS / 2;
    let start = Instant::now();
    pool.async_step_send(actions(ENVS)?, Target::All)?;
    let mut done = 0;
    while done < STEPS {
        let batch = pool.async_step_recv(Recv::new().min_get(half).max_get(half))?;
        done += batch.len();
        policy();
        let ids = batch.env_indices().to_vec();
        pool.async_step_send(actions(ids.len())?, Target::Envs(ids))?;
    }
    // Collect what is still in flight before the pool is dropped.
    pool.async_step_recv(Recv::new().min_get(pool.in_flight().len()))?;
    let asynchronous = start.elapsed();

    println!("{STEPS} env-steps, {ENVS} envs of 200 us, a 200 us policy per batch:");
    println!("  synchronous:  {:>8.1} ms", sync.as_secs_f64() * 1e3);
    println!(
        "  asynchronous: {:>8.1} ms",
        asynchronous.as_secs_f64() * 1e3
    );
    println!(
        "  speed-up:     {:>8.2}x",
        sync.as_secs_f64() / asynchronous.as_secs_f64()
    );
    Ok(())
}
