//! Tests of the threading backend as a whole: a receiver's help, results
//! that do not wait for a stuck env, the spare worker, a worker that
//! cannot pin itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use envs::{CountingEnv, Env};
use pool_core::lock;
use tensordict::TensorDict;

use super::start::pin_worker;
use super::worker::SpareNaps;
use super::{EnvFactory, Op, ThreadBackend};
use crate::{Rows, ThreadError, ThreadOptions};

/// A CountingEnv (env `index`) that records the threads that step it,
/// and whose steps wait while `hold` is set if it is env `held`.
fn held(
    index: usize,
    held: usize,
    hold: Arc<AtomicBool>,
    ran_on: Arc<Mutex<Vec<ThreadId>>>,
) -> Box<dyn Env> {
    test_envs::OnStep::boxed(CountingEnv::new(0, 100), move |inner, input, next| {
        lock(&ran_on).push(std::thread::current().id());
        let until = Instant::now() + Duration::from_secs(10);
        while index == held && hold.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        inner.step_into(input, next)
    })
}

/// As many workers as cores, at least two: the pools that have a spare.
fn workers_on_every_core() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .max(2)
}

/// `n` envs as [`held`], env 0 the held one.
fn held_first(
    n: usize,
    hold: &Arc<AtomicBool>,
    ran_on: &Arc<Mutex<Vec<ThreadId>>>,
) -> Vec<EnvFactory> {
    (0..n)
        .map(|index| {
            let (hold, ran_on) = (Arc::clone(hold), Arc::clone(ran_on));
            Box::new(move || Ok(held(index, 0, hold, ran_on))) as EnvFactory
        })
        .collect()
}

/// Waits (at most 10 s) until every one of `envs` is done.
fn wait_done(backend: &ThreadBackend, envs: &[usize]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !envs.iter().all(|&env| backend.is_done(env)) {
        assert!(Instant::now() < deadline, "the envs did not finish");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits (at most 10 s) until every one of `envs` is done, and
/// releases them.
fn collect(backend: &ThreadBackend, envs: usize) {
    let all: Vec<usize> = (0..envs).collect();
    wait_done(backend, &all);
    for env in 0..envs {
        backend.release(env);
    }
}

/// Sets the env step average to `nanos` once the workers' timing of their
/// last runs is in (it ends after the runs' results are published, so it
/// may land after a test collected them): stored until it stays.
fn set_env_nanos(backend: &ThreadBackend, nanos: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        backend.shared.env_nanos.store(nanos, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(5));
        if backend.shared.env_nanos.load(Ordering::SeqCst) == nanos {
            return;
        }
        assert!(Instant::now() < deadline, "the workers kept timing steps");
    }
}

/// Quick steps of every env (`rows` of `actions`), each collected, until
/// the spare worker rests and naps: after a send it does (unless the
/// steps' own timing, slow on a loaded machine, says otherwise first).
fn until_the_spare_naps(
    backend: &ThreadBackend,
    rows: &[(usize, Option<usize>)],
    actions: &TensorDict,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        backend.shared.env_nanos.store(1, Ordering::SeqCst);
        backend.send(Op::Step, rows, Some(actions)).unwrap();
        collect(backend, rows.len());
        let look = Instant::now() + Duration::from_millis(50);
        while Instant::now() < look {
            if backend.shared.spare_napping.load(Ordering::SeqCst) {
                set_env_nanos(backend, 1);
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(Instant::now() < deadline, "the spare did not nap");
    }
}

/// A backend of `n` CountingEnvs on one worker, every env reset and
/// collected; with the jobs of a send to every env in order.
fn counting_reset(n: usize) -> (ThreadBackend, Vec<(usize, Option<usize>)>) {
    let factories: Vec<EnvFactory> = (0..n)
        .map(|_| Box::new(|| Ok(Box::new(CountingEnv::new(0, 100)) as Box<dyn Env>)) as EnvFactory)
        .collect();
    let options = ThreadOptions::default().threads(1);
    let backend = ThreadBackend::start(factories, &options, Rows::Batch).unwrap();
    let every: Vec<(usize, Option<usize>)> = (0..n).map(|env| (env, Some(env))).collect();
    backend.send(Op::Reset, &every, None).unwrap();
    collect(&backend, n);
    (backend, every)
}

/// A waiting receiver's help (`ThreadBackend::help`): none while env
/// steps look slow (the starting estimate), none with pinned workers;
/// with quick steps, it runs queued envs in the calling thread while the
/// only worker is stuck in env 0.
#[test]
fn a_receiver_helps_only_while_envs_are_quick_and_workers_are_not_pinned() {
    let hold = Arc::new(AtomicBool::new(true));
    let ran_on = Arc::new(Mutex::new(Vec::new()));
    let start = |affinity: Option<affinity::Affinity>| {
        let factories: Vec<EnvFactory> = (0..4)
            .map(|index| {
                let (hold, ran_on) = (Arc::clone(&hold), Arc::clone(&ran_on));
                Box::new(move || Ok(held(index, 0, hold, ran_on))) as EnvFactory
            })
            .collect();
        let mut options = ThreadOptions::default().threads(1);
        if let Some(affinity) = affinity {
            options = options.affinity(affinity);
        }
        let backend = ThreadBackend::start(factories, &options, Rows::PerEnv).unwrap();
        let all: Vec<(usize, Option<usize>)> = (0..4).map(|env| (env, None)).collect();
        backend.send(Op::Reset, &all, None).unwrap();
        collect(&backend, 4);
        backend
    };
    let mut actions = TensorDict::new(&[4]);
    actions
        .set("action", tensordict::Tensor::full(&[4, 1], 1i64))
        .unwrap();
    let rows: Vec<(usize, Option<usize>)> = (0..4).map(|env| (env, Some(env))).collect();
    let me = std::thread::current().id();
    for pinned in [false, true] {
        let affinity = pinned.then(|| {
            let cpu = affinity::available_cpus().unwrap()[0];
            affinity::Affinity::per_worker([[cpu]])
        });
        let backend = start(affinity);
        hold.store(true, Ordering::SeqCst);
        lock(&ran_on).clear();
        backend.send(Op::Step, &rows, Some(&actions)).unwrap();
        // The worker is stuck in env 0; envs 1, 2 and 3 wait in the
        // queue.
        let deadline = Instant::now() + Duration::from_secs(10);
        while lock(&ran_on).is_empty() {
            assert!(Instant::now() < deadline, "the worker did not start");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(backend.help(), 0, "helped with slow-looking envs");
        backend.shared.env_nanos.store(0, Ordering::Relaxed);
        assert_eq!(backend.help() > 0, !pinned);
        let here = lock(&ran_on).iter().filter(|&&t| t == me).count();
        assert_eq!(here > 0, !pinned, "{here} env steps ran here");
        hold.store(false, Ordering::SeqCst);
        collect(&backend, 4);
    }
}

/// A result never waits for another env's step, and an env queued
/// behind a step that does not return is taken by the other worker:
/// with env `stuck` stuck in its step (first or second of worker 0's
/// envs), every other env's result is published while it is still
/// stuck (no timing involved: the held env waits until released). Also
/// with steps that look quick, so that a worker holds its results for a
/// run: the result it holds when it enters the stuck env is published by
/// the waiting receiver (`rescue`).
#[test]
fn results_do_not_wait_for_a_stuck_env() {
    for (stuck, in_runs) in [(0, false), (1, false), (0, true), (1, true)] {
        let hold = Arc::new(AtomicBool::new(false));
        let ran_on = Arc::new(Mutex::new(Vec::new()));
        let factories: Vec<EnvFactory> = (0..8)
            .map(|index| {
                let (hold, ran_on) = (Arc::clone(&hold), Arc::clone(&ran_on));
                Box::new(move || Ok(held(index, stuck, hold, ran_on))) as EnvFactory
            })
            .collect();
        let options = ThreadOptions::default().threads(2);
        let backend = ThreadBackend::start(factories, &options, Rows::Batch).unwrap();
        let all: Vec<(usize, Option<usize>)> = (0..8).map(|env| (env, None)).collect();
        backend.send(Op::Reset, &all, None).unwrap();
        collect(&backend, 8);
        let mut actions = TensorDict::new(&[8]);
        actions
            .set("action", tensordict::Tensor::full(&[8, 1], 1i64))
            .unwrap();
        let rows: Vec<(usize, Option<usize>)> = (0..8).map(|env| (env, Some(env))).collect();
        if in_runs {
            // Steps of a nanosecond: runs of the most envs.
            backend.shared.env_nanos.store(1, Ordering::SeqCst);
        }
        hold.store(true, Ordering::SeqCst);
        backend.send(Op::Step, &rows, Some(&actions)).unwrap();
        let others: Vec<usize> = (0..8).filter(|&env| env != stuck).collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !others.iter().all(|&env| backend.is_done(env)) {
            assert!(
                Instant::now() < deadline,
                "env {stuck} stuck: results waited for it"
            );
            backend.wait(backend.generation(), Some(deadline));
        }
        assert!(!backend.is_done(stuck), "env {stuck} not stuck");
        // Their rows are in the batch too.
        let (next, _) = backend.gather(Op::Step, &others).expect("in their rows");
        let counts = next.unwrap().tensor("observation").unwrap().to_vec::<i32>();
        assert_eq!(counts.unwrap(), vec![1; 7], "env {stuck} stuck");
        hold.store(false, Ordering::SeqCst);
        collect(&backend, 8);
    }
}

/// With workers on every core, the last one rests while envs are quick:
/// a send to some envs queues nothing for it. It still runs the jobs that wait behind
/// a step that does not return: on two workers, env 0 stuck first of the
/// only working worker's envs, the spare runs every other env (the
/// receiver only waits: no help).
#[test]
fn a_resting_spare_worker_runs_the_jobs_behind_a_stuck_step() {
    let workers = workers_on_every_core();
    let n = 4 * workers;
    let hold = Arc::new(AtomicBool::new(false));
    let ran_on = Arc::new(Mutex::new(Vec::new()));
    let factories = held_first(n, &hold, &ran_on);
    let options = ThreadOptions::default().threads(workers);
    let backend = ThreadBackend::start(factories, &options, Rows::Batch).unwrap();
    assert_eq!(backend.shared.spare, Some(workers - 1));
    let spare = lock(&backend.handles)[workers - 1].thread().id();
    let all: Vec<(usize, Option<usize>)> = (0..n).map(|env| (env, None)).collect();
    backend.send(Op::Reset, &all, None).unwrap();
    collect(&backend, n);
    // Steps of a nanosecond: quick.
    set_env_nanos(&backend, 1);
    assert!(backend.shared.spare_rests());
    let mut actions = TensorDict::new(&[n]);
    actions
        .set("action", tensordict::Tensor::full(&[n, 1], 1i64))
        .unwrap();
    // A send to the envs out of order (as an asynchronous one).
    let rows: Vec<(usize, Option<usize>)> = (0..n).map(|env| (env, Some(n - 1 - env))).collect();
    hold.store(true, Ordering::SeqCst);
    lock(&ran_on).clear();
    backend.send(Op::Step, &rows, Some(&actions)).unwrap();
    assert_eq!(
        backend.shared.queue.chunks_of(workers - 1, Op::Step),
        0,
        "queued for the spare"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(1..n).all(|env| backend.is_done(env)) {
        assert!(
            Instant::now() < deadline,
            "the jobs behind env 0 waited for it"
        );
        backend.wait(backend.generation(), Some(deadline));
    }
    assert!(!backend.is_done(0), "env 0 not stuck");
    if workers == 2 {
        let ran = lock(&ran_on);
        assert!(
            ran.iter().filter(|&&id| id == spare).count() >= n - 1,
            "the spare ran the envs behind the stuck one"
        );
    }
    hold.store(false, Ordering::SeqCst);
    collect(&backend, n);
}

/// A backend of `n` envs (env 0's steps held while `hold` is set) on
/// `workers` workers whose spare naps an hour at a time, every env reset,
/// and quick steps of every env (`rows` of `actions`) run until the spare
/// naps.
struct Napping {
    backend: ThreadBackend,
    hold: Arc<AtomicBool>,
    rows: Vec<(usize, Option<usize>)>,
    actions: TensorDict,
}

fn napping_spare(n: usize, workers: usize) -> Napping {
    let hold = Arc::new(AtomicBool::new(false));
    let ran_on = Arc::new(Mutex::new(Vec::new()));
    let factories = held_first(n, &hold, &ran_on);
    let options = ThreadOptions::default().threads(workers);
    let hour = Duration::from_secs(3600);
    let naps = SpareNaps {
        first: hour,
        idle: hour,
    };
    let backend = ThreadBackend::start_with(factories, &options, Rows::Batch, naps).unwrap();
    assert_eq!(backend.shared.spare, Some(workers - 1));
    let all: Vec<(usize, Option<usize>)> = (0..n).map(|env| (env, None)).collect();
    backend.send(Op::Reset, &all, None).unwrap();
    collect(&backend, n);
    let mut actions = TensorDict::new(&[n]);
    actions
        .set("action", tensordict::Tensor::full(&[n, 1], 1i64))
        .unwrap();
    let rows: Vec<(usize, Option<usize>)> = (0..n).map(|env| (env, Some(env))).collect();
    until_the_spare_naps(&backend, &rows, &actions);
    Napping {
        backend,
        hold,
        rows,
        actions,
    }
}

/// While the spare rests, a send to every env (a synchronous step) queues
/// its block too, which a helping receiver takes first, from its front
/// (with naps far longer than the test, the spare claims none of it; env 0
/// holds worker 0; on two workers nobody else takes the block).
#[test]
fn a_helper_takes_the_resting_spares_block_of_a_send_to_every_env() {
    let workers = workers_on_every_core();
    if workers != 2 {
        // More workers would steal the block from its back meanwhile.
        return;
    }
    let n = 8;
    let Napping {
        backend,
        hold,
        rows,
        actions,
    } = napping_spare(n, workers);
    hold.store(true, Ordering::SeqCst);
    backend.send(Op::Step, &rows, Some(&actions)).unwrap();
    assert_eq!(backend.shared.queue.chunks_of(1, Op::Step), 1);
    // The spare's block is envs 4..8.
    assert_eq!(backend.help(), n / 2);
    assert!((n / 2..n).all(|env| backend.is_done(env)));
    hold.store(false, Ordering::SeqCst);
    collect(&backend, n);
}

/// A napping spare worker is woken by a send that queues it jobs (envs no
/// longer quick), not left to the end of its nap: with naps far longer
/// than the test, the spare's envs are done while env 0 holds the only
/// other worker (on two workers; with more, others could take them).
#[test]
fn a_send_that_queues_jobs_for_a_napping_spare_wakes_it() {
    let workers = workers_on_every_core();
    let n = 4 * workers;
    let Napping {
        backend,
        hold,
        rows,
        actions,
    } = napping_spare(n, workers);
    // Slow steps: a send queues the spare its block of envs.
    set_env_nanos(&backend, 1_000_000);
    hold.store(true, Ordering::SeqCst);
    backend.send(Op::Step, &rows, Some(&actions)).unwrap();
    let spares: Vec<usize> = (n - n / workers..n).collect();
    wait_done(&backend, &spares);
    assert!(!backend.is_done(0), "env 0 not stuck");
    hold.store(false, Ordering::SeqCst);
    collect(&backend, n);
}

/// A worker thread that cannot pin itself reports the kernel's refusal,
/// naming the worker, and does not go on (`start` then stops the
/// others and returns that error).
#[test]
fn a_worker_that_cannot_pin_itself_reports_it_and_stops() {
    let available = affinity::available_cpus().unwrap();
    // A CPU a set can hold but this machine does not have.
    let Some(cpu) = (0..1024).rev().find(|cpu| !available.contains(cpu)) else {
        return;
    };
    let (report, reports) = std::sync::mpsc::channel();
    let went_on = std::thread::spawn(move || pin_worker(3, &[cpu], &report))
        .join()
        .unwrap();
    assert!(!went_on);
    let (worker, pinned) = reports.recv().unwrap();
    assert_eq!(worker, 3);
    let err = ThreadError::Affinity(pinned.unwrap_err());
    assert!(
        err.to_string().starts_with(&format!(
            "worker thread CPU affinity: worker 3: could not pin to [{cpu}]"
        )),
        "{err}"
    );
}

/// A send to every env of one kind is checked once, and reports what the
/// checks env by env would: a good input queues every env; too few rows
/// name the first env past them, a wrong dtype the first env, and neither
/// queues anything.
#[test]
fn a_send_to_every_env_is_checked_as_env_by_env() {
    let (backend, every) = counting_reset(3);
    let actions = |rows: usize, value: tensordict::Tensor| {
        let mut td = TensorDict::new(&[rows]);
        td.set("action", value).unwrap();
        td
    };
    let idle = |backend: &ThreadBackend| (0..3).all(|env| backend.shared.phases.is_idle(env));

    let short = actions(2, tensordict::Tensor::full(&[2, 1], 1i64));
    match backend.send(Op::Step, &every, Some(&short)) {
        Err(ThreadError::Input { env: 2, .. }) => {}
        other => panic!("expected env 2's input error, got {other:?}"),
    }
    assert!(idle(&backend), "a failed send queues nothing");
    let floats = actions(3, tensordict::Tensor::full(&[3, 1], 1.0f32));
    match backend.send(Op::Step, &every, Some(&floats)) {
        Err(ThreadError::Input { env: 0, .. }) => {}
        other => panic!("expected env 0's input error, got {other:?}"),
    }
    assert!(idle(&backend), "a failed send queues nothing");
    match backend.send(Op::Step, &every, None) {
        Err(ThreadError::Input { env: 0, .. }) => {}
        other => panic!("expected env 0's missing action, got {other:?}"),
    }
    assert!(idle(&backend), "a failed send queues nothing");

    let good = actions(3, tensordict::Tensor::full(&[3, 1], 1i64));
    backend.send(Op::Step, &every, Some(&good)).unwrap();
    // Envs sent to (queued, running or done) are busy to a send to every env.
    match backend.send(Op::Step, &every, Some(&good)) {
        Err(ThreadError::Busy { env: 0 }) => {}
        other => panic!("expected env 0 busy, got {other:?}"),
    }
    collect(&backend, 3);
    backend.send(Op::Step, &every, Some(&good)).unwrap();
    collect(&backend, 3);
}

/// A send to some envs claims them first: an env out of range, addressed
/// twice or busy, or a wrong input, fails the send and leaves every env as
/// it was (none claimed, nothing queued).
#[test]
fn a_send_to_some_envs_is_checked_and_leaves_nothing_claimed() {
    let (backend, _) = counting_reset(4);
    let mut two = TensorDict::new(&[2]);
    two.set("action", tensordict::Tensor::full(&[2, 1], 1i64))
        .unwrap();
    let idle = |backend: &ThreadBackend| (0..4).all(|env| backend.shared.phases.is_idle(env));

    match backend.send(Op::Step, &[(1, Some(0)), (4, Some(1))], Some(&two)) {
        Err(ThreadError::NoSuchEnv {
            env: 4,
            num_envs: 4,
        }) => {}
        other => panic!("expected env 4 out of range, got {other:?}"),
    }
    assert!(idle(&backend), "a failed send claims nothing");
    match backend.send(Op::Step, &[(2, Some(0)), (2, Some(1))], Some(&two)) {
        Err(ThreadError::Busy { env: 2 }) => {}
        other => panic!("expected env 2 addressed twice, got {other:?}"),
    }
    assert!(idle(&backend), "a failed send claims nothing");
    let mut floats = TensorDict::new(&[2]);
    floats
        .set("action", tensordict::Tensor::full(&[2, 1], 1.0f32))
        .unwrap();
    match backend.send(Op::Step, &[(3, Some(0)), (0, Some(1))], Some(&floats)) {
        Err(ThreadError::Input { env: 3, .. }) => {}
        other => panic!("expected env 3's input error, got {other:?}"),
    }
    assert!(idle(&backend), "a failed send claims nothing");
    // Checked at once when the envs are alike and each reads a row: a row
    // past the batch, a job that reads the whole tensordict (a batch is no
    // env's input) or no tensordict at all still name their env.
    // The jobs, the sent tensordict, the env the error names.
    type Case<'a> = (&'a [(usize, Option<usize>)], Option<&'a TensorDict>, usize);
    let cases: [Case<'_>; 3] = [
        (&[(0, Some(0)), (2, Some(2))], Some(&two), 2),
        (&[(1, Some(0)), (3, None)], Some(&two), 3),
        (&[(2, Some(0)), (0, Some(1))], None, 2),
    ];
    for (jobs, src, env) in cases {
        match backend.send(Op::Step, jobs, src) {
            Err(ThreadError::Input { env: e, .. }) if e == env => {}
            other => panic!("expected env {env}'s input error for {jobs:?}, got {other:?}"),
        }
        assert!(idle(&backend), "a failed send claims nothing");
    }

    backend
        .send(Op::Step, &[(3, Some(0)), (1, Some(1))], Some(&two))
        .unwrap();
    match backend.send(Op::Step, &[(0, Some(0)), (1, Some(1))], Some(&two)) {
        Err(ThreadError::Busy { env: 1 }) => {}
        other => panic!("expected env 1 busy, got {other:?}"),
    }
    assert!(backend.shared.phases.is_idle(0), "env 0 given back");
    wait_done(&backend, &[1, 3]);
    backend.release(1);
    backend.release(3);
    assert!(idle(&backend));
}

/// The envs' inputs are rows that a send writes in place (envs of one
/// input layout): every env in order, some envs from other rows in any
/// order, one env from a whole tensordict, each env reading its own
/// action; envs of different input layouts copy their inputs instead.
#[test]
fn sends_write_each_env_input_into_its_row() {
    let factories: Vec<EnvFactory> = (0..6)
        .map(|_| Box::new(|| Ok(Box::new(CountingEnv::new(0, 1000)) as Box<dyn Env>)) as EnvFactory)
        .collect();
    let backend = ThreadBackend::start(factories, &ThreadOptions::default(), Rows::Batch).unwrap();
    assert!(backend.input_rows.is_some(), "one layout of tensors: lent");
    let every: Vec<(usize, Option<usize>)> = (0..6).map(|env| (env, None)).collect();
    backend.send(Op::Reset, &every, None).unwrap();
    collect(&backend, 6);
    let actions = |batch: &[usize], values: Vec<i64>| {
        let mut shape = batch.to_vec();
        shape.push(1);
        let mut td = TensorDict::new(batch);
        td.set(
            "action",
            tensordict::Tensor::from_vec(&shape, values).unwrap(),
        )
        .unwrap();
        td
    };
    // Env `env`'s count, its result left in place.
    let count = |backend: &ThreadBackend, env: usize| -> i32 {
        backend
            .peek(env, |out| {
                out.next
                    .tensor("observation")
                    .unwrap()
                    .to_vec::<i32>()
                    .unwrap()[0]
            })
            .unwrap()
    };
    let in_order: Vec<(usize, Option<usize>)> = (0..6).map(|env| (env, Some(env))).collect();
    backend
        .send(Op::Step, &in_order, Some(&actions(&[6], (1..=6).collect())))
        .unwrap();
    wait_done(&backend, &[0, 1, 2, 3, 4, 5]);
    let counts: Vec<i32> = (0..6).map(|env| count(&backend, env)).collect();
    assert_eq!(counts, [1, 2, 3, 4, 5, 6]);
    collect(&backend, 6);

    // Envs 4 and 1 from rows 0 and 3; then env 2 from a tensordict of its
    // own; the others keep their counts (their last results stay).
    backend
        .send(
            Op::Step,
            &[(4, Some(0)), (1, Some(3))],
            Some(&actions(&[4], vec![10, 20, 30, 40])),
        )
        .unwrap();
    backend
        .send(Op::Step, &[(2, None)], Some(&actions(&[], vec![7])))
        .unwrap();
    wait_done(&backend, &[1, 2, 4]);
    for env in [1, 2, 4] {
        let count = count(&backend, env);
        backend.release(env);
        assert_eq!(count, [0, 42, 10, 0, 15, 0][env], "env {env}");
    }

    // Different input layouts: copied by the workers.
    let mixed: Vec<EnvFactory> = vec![
        Box::new(|| Ok(Box::new(CountingEnv::new(0, 10)) as Box<dyn Env>)),
        Box::new(|| Ok(Box::new(envs::Pendulum::new()) as Box<dyn Env>)),
    ];
    let backend = ThreadBackend::start(mixed, &ThreadOptions::default(), Rows::PerEnv).unwrap();
    assert!(backend.input_rows.is_none(), "two input layouts: not lent");
}

/// Of two threads that send to one idle env at once, one sends and the
/// other is told the env is busy (the claim), round after round.
#[test]
fn of_two_sends_to_one_env_at_once_one_wins() {
    let factories: Vec<EnvFactory> = vec![Box::new(|| {
        Ok(Box::new(CountingEnv::new(0, 1_000_000)) as Box<dyn Env>)
    })];
    let backend = ThreadBackend::start(factories, &ThreadOptions::default(), Rows::Batch).unwrap();
    backend.send(Op::Reset, &[(0, None)], None).unwrap();
    collect(&backend, 1);
    let mut td = TensorDict::new(&[1]);
    td.set("action", tensordict::Tensor::full(&[1, 1], 1i64))
        .unwrap();
    for _ in 0..200 {
        let outcomes: Vec<Result<(), ThreadError>> = std::thread::scope(|scope| {
            let sends: Vec<_> = (0..2)
                .map(|_| scope.spawn(|| backend.send(Op::Step, &[(0, Some(0))], Some(&td))))
                .collect();
            sends.into_iter().map(|send| send.join().unwrap()).collect()
        });
        let sent = outcomes.iter().filter(|outcome| outcome.is_ok()).count();
        assert_eq!(sent, 1, "{outcomes:?}");
        assert!(outcomes
            .iter()
            .any(|outcome| matches!(outcome, Err(ThreadError::Busy { env: 0 }))));
        collect(&backend, 1);
    }
}
