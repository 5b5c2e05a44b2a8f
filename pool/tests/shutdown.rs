//! Shutdown on request and on drop joins every worker thread: none named
//! `rlpool-worker-*` remains. A single test in its own file, so that it runs
//! in its own process and no other test's pool adds worker threads while it
//! counts them.
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use pool::envs::Kwargs;
use pool::{AsyncEnvPool, Target};

/// The threads of this process whose name starts with `rlpool-worker`.
fn worker_threads() -> usize {
    let tasks = std::fs::read_dir("/proc/self/task").expect("/proc/self/task");
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .filter(|comm| comm.starts_with("rlpool-worker"))
        .count()
}

/// Waits until `n` worker threads are seen (a new thread names itself
/// only once it runs), then checks there are no more; the watchdog bounds
/// the wait.
fn until_started(n: usize) {
    let mut seen = worker_threads();
    while seen < n {
        std::thread::sleep(Duration::from_millis(1));
        seen = worker_threads();
    }
    assert_eq!(seen, n, "worker threads");
}

/// Waits until no worker thread is left (a joined thread may linger in
/// `/proc` for a moment while the kernel releases it); the watchdog bounds
/// the wait.
fn until_all_stopped() {
    while worker_threads() > 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn shutdown_and_drop_join_every_worker_thread() {
    common::watchdog(|| {
        assert_eq!(worker_threads(), 0, "no pool yet");

        // On drop, with envs still stepping and results not received.
        let sleepy = Kwargs::new().with("step_us", 20_000).with("mode", "sleep");
        let pool = AsyncEnvPool::builder()
            .backend(common::threads(3))
            .registered_n("LatencyEnv", 4, sleepy)
            .build()
            .unwrap();
        until_started(3);
        pool.reset(None).unwrap();
        pool.async_step_send(common::actions(&[0; 4]), Target::All)
            .unwrap();
        drop(pool);
        until_all_stopped();

        // On request; dropping afterwards changes nothing.
        let pool = AsyncEnvPool::builder()
            .backend(common::threads(2))
            .registered_n("CountingEnv", 4, Kwargs::new())
            .build()
            .unwrap();
        until_started(2);
        pool.async_reset_send(None, Target::All).unwrap();
        pool.shutdown();
        until_all_stopped();
        drop(pool);
        assert_eq!(worker_threads(), 0);

        // The default backend starts at most one worker per env.
        let pool = AsyncEnvPool::builder()
            .registered_n("CountingEnv", 1, Kwargs::new())
            .build()
            .unwrap();
        until_started(1);
        drop(pool);
        until_all_stopped();
    });
}
