//! Every re-export of the `pool` facade is reachable and usable through it
//! (as crossbeam's `tests/subcrates.rs`): one item called through each.

use std::time::Duration;

#[test]
fn the_layers_are_reexported() {
    // tensordict
    let tensor = pool::tensordict::Tensor::full(&[2], 1i64);
    let mut td = pool::tensordict::TensorDict::new(&[2]);
    td.set("action", tensor.reshape(&[2, 1]).unwrap()).unwrap();
    assert_eq!(td.batch_size(), &[2]);
    assert_eq!(pool::tensordict::DType::I64.to_string(), "i64");
    // specs
    let spec = pool::specs::TensorSpec::unbounded(&[3], pool::tensordict::DType::F32);
    assert_eq!(spec.shape().to_vec(), vec![3]);
    let _: Option<pool::specs::SpecError> = None;
    // envs
    let kwargs = pool::envs::Kwargs::new().with("max_steps", 3);
    let env = pool::envs::make("CountingEnv", &kwargs).unwrap();
    assert_eq!(env.name(), "CountingEnv");
    assert!(pool::envs::registered().contains(&"CartPole-v1".to_string()));
    let _ = pool::envs::EnvError::failed("x", "y");
}

#[test]
fn the_pool_items_are_reexported() {
    assert_eq!(
        pool::ThreadError::NoThreads.to_string(),
        "the threading backend needs at least one worker thread"
    );
    assert_eq!(
        pool::Backend::default(),
        pool::Backend::Threading(pool::ThreadOptions::default())
    );
    assert_eq!(pool::StackMode::default(), pool::StackMode::Dense);
    assert_ne!(pool::ResolvedExchange::Queue, pool::ResolvedExchange::Shm);
    assert_eq!(
        pool::PoolError::NoEnvs.to_string(),
        "a pool needs at least one env"
    );
    let recv = pool::Recv::new().min_get(2).timeout(Duration::ZERO);
    assert_eq!(recv.min_get, 2);
    assert_eq!(pool::Target::Env(1), pool::Target::Env(1));
    let maker = pool::EnvMaker::registry("CountingEnv", pool::envs::Kwargs::new());
    let builder: pool::PoolBuilder = pool::AsyncEnvPool::builder().maker(maker);
    let pool: pool::AsyncEnvPool = builder.build().unwrap();
    let specs: &pool::PoolSpecs = pool.specs();
    assert_eq!(specs.full_action_spec(), pool.full_action_spec());
}
