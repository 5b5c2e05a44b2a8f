//! `ThreadBackend::start`: build the envs in the calling thread, their
//! batch rows, and start the worker threads, each pinning itself first
//! when asked to.

use std::num::NonZeroUsize;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use pool_core::spin::{
    HELP_MAX_ENV_TIME, RECEIVER_RESCAN, RECEIVER_SPIN, RECEIVER_SPIN_NO_SPARE_CORE,
};
use pool_core::{lock, Op, Phases, Runner, Signal};
use tensordict::TensorDict;

use super::cell::Cell;
use super::input_rows::InputRows;
use super::inputs::Inputs;
use super::row_store::RowStore;
use super::worker::{worker_loop, Held, SpareNaps};
use super::{EnvFactory, Shared, ThreadBackend};
use crate::queue::WorkQueue;
use crate::{Rows, ThreadError, ThreadOptions};

impl ThreadBackend {
    /// Builds the envs (in this thread, in order) and starts the workers.
    /// An env that fails or panics while being built is an error naming it;
    /// so is a bad [`ThreadOptions::affinity`] (checked before any env is
    /// built) or one that a worker thread could not apply, naming the
    /// worker.
    pub fn start(
        factories: Vec<EnvFactory>,
        options: &ThreadOptions,
        rows: Rows,
    ) -> Result<ThreadBackend, ThreadError> {
        ThreadBackend::start_with(factories, options, rows, SpareNaps::DEFAULT)
    }

    /// [`ThreadBackend::start`] with the spare worker's naps given (tests
    /// make them long to see what wakes it).
    pub(super) fn start_with(
        factories: Vec<EnvFactory>,
        options: &ThreadOptions,
        rows: Rows,
        spare_naps: SpareNaps,
    ) -> Result<ThreadBackend, ThreadError> {
        let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        let workers = options
            .threads
            .map_or(cores.min(factories.len().max(1)), NonZeroUsize::get);
        let pins = match &options.affinity {
            Some(affinity) => Some(affinity.resolve(workers)?),
            None => None,
        };
        let mut cells = Vec::with_capacity(factories.len());
        let mut specs = Vec::with_capacity(factories.len());
        let mut names = Vec::with_capacity(factories.len());
        for (index, factory) in factories.into_iter().enumerate() {
            let env = match catch_unwind(AssertUnwindSafe(factory)) {
                Ok(Ok(env)) => env,
                Ok(Err(source)) => {
                    return Err(ThreadError::Build {
                        env: index,
                        source: Box::new(source),
                    })
                }
                Err(payload) => {
                    return Err(ThreadError::BuildPanicked {
                        env: index,
                        message: pool_core::panic_message(&*payload),
                    })
                }
            };
            specs.push(env.specs().clone());
            names.push(env.name().to_owned());
            let cell = Cell {
                name: env.name().to_owned(),
                op: Op::Reset,
                reset_with_input: false,
                input_lent: false,
                runner: Runner::new(&*env),
                error: None,
                env,
            };
            cells.push(Mutex::new(cell));
        }
        let inputs = Inputs::new(&cells, &specs);
        let input_rows = InputRows::lend(&cells, inputs.one_kind());
        let batch = if rows == Rows::Batch {
            batch_rows(&cells).map(Mutex::new)
        } else {
            None
        };
        if batch
            .as_ref()
            .is_some_and(|batch| lock(batch).defers_roots())
        {
            // A root that is its step's entries is taken from the step's
            // batch row (copied into the root row, `BatchRows::store`, or
            // read from it by a gather of lent rows), not copied into the
            // cell first.
            for cell in &cells {
                lock(cell).runner.defer_root = true;
            }
        }
        let receiver_spin = if workers >= cores {
            RECEIVER_SPIN_NO_SPARE_CORE
        } else {
            RECEIVER_SPIN
        };
        let cells_len = cells.len();
        let shared = Arc::new(Shared {
            phases: Phases::new(cells.len()),
            published: cells.iter().map(|_| AtomicU64::new(0)).collect(),
            cells,
            views: batch.as_ref().and_then(|batch| lock(batch).views()),
            batch,
            queue: WorkQueue::new(workers, cells_len),
            done: Signal::with_max_sleep(RECEIVER_RESCAN),
            workers,
            // Pinned workers keep their cores; the calling thread is not
            // one of them.
            spare: (workers >= 2 && workers >= cores && pins.is_none()).then(|| workers - 1),
            spare_naps,
            spare_napping: AtomicBool::new(false),
            spare_thread: OnceLock::new(),
            receiver_spin,
            // No helping, and no runs of results, until runs of steps
            // showed quick envs.
            env_nanos: AtomicU64::new(HELP_MAX_ENV_TIME.as_nanos() as u64),
            held: (0..workers).map(|_| Mutex::new(Held::new())).collect(),
            held_since: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            clock: Instant::now(),
        });
        // A pinned worker reports whether it could pin itself before it
        // takes any work.
        let (report, reports) = std::sync::mpsc::channel();
        let mut handles = Vec::with_capacity(workers);
        let mut failure = None;
        for worker in 0..workers {
            let for_worker = Arc::clone(&shared);
            let pin = pins
                .as_ref()
                .map(|sets| (sets[worker].clone(), report.clone()));
            let spawned = std::thread::Builder::new()
                .name(format!("rlpool-worker-{worker}"))
                .spawn(move || {
                    if let Some((cpus, report)) = pin {
                        if !pin_worker(worker, cpus.as_slice(), &report) {
                            return;
                        }
                    }
                    worker_loop(&for_worker, worker);
                });
            match spawned {
                Ok(handle) => handles.push(handle),
                Err(err) => {
                    failure = Some(ThreadError::Spawn {
                        worker,
                        message: err.to_string(),
                    });
                    break;
                }
            }
        }
        drop(report);
        if failure.is_none() {
            // Cannot block forever: every started worker sends one report
            // (`sched_setaffinity` returns at once) or drops its sender, and
            // the iteration ends once every sender is gone. The lowest
            // worker that failed is the one reported.
            failure = reports
                .iter()
                .filter_map(|(worker, pinned): (usize, Result<(), _>)| {
                    pinned.err().map(|err| (worker, err))
                })
                .min_by_key(|&(worker, _)| worker)
                .map(|(_, err)| ThreadError::Affinity(err));
        }
        if let Some(err) = failure {
            shared.queue.stop();
            for handle in handles {
                let _ = handle.join();
            }
            return Err(err);
        }
        let every_env_jobs = (0..specs.len()).map(|env| (env, Some(env))).collect();
        Ok(ThreadBackend {
            shared,
            specs,
            names,
            inputs,
            input_rows,
            handles: Mutex::new(handles),
            pinned: pins.is_some(),
            every_env_jobs,
        })
    }
}

/// The batch rows of `cells` if all their results have one layout. Lent
/// rows become the cells' buffers (views of each env's rows, with the
/// batch's keys); otherwise the cells' buffers share their keys with the
/// first cell's (so that the copies into the rows compare keys by address).
fn batch_rows(cells: &[Mutex<Cell>]) -> Option<RowStore> {
    let mut cells: Vec<MutexGuard<'_, Cell>> = cells.iter().map(lock).collect();
    let (rows, views) = {
        let nexts: Vec<&TensorDict> = cells.iter().map(|c| &c.runner.next).collect();
        let roots: Vec<&TensorDict> = cells.iter().map(|c| &c.runner.root).collect();
        RowStore::new(&nexts, &roots)?
    };
    if let Some(views) = views {
        for (cell, (next, root)) in cells.iter_mut().zip(views) {
            cell.runner.next = next;
            cell.runner.root = root;
        }
        return Some(rows);
    }
    let (first_next, first_root) = (cells[0].runner.next.clone(), cells[0].runner.root.clone());
    for cell in cells.iter_mut().skip(1) {
        // Same layout (checked above): the first cell's keys with this
        // cell's values (written into copies of the storage).
        let mut own = first_next.clone();
        own.fill_from(&cell.runner.next).ok()?;
        cell.runner.next = own;
        let mut own = first_root.clone();
        own.fill_from(&cell.runner.root).ok()?;
        cell.runner.root = own;
    }
    Some(rows)
}

/// Pins the calling worker thread to `cpus` and reports the outcome;
/// returns whether it may go on.
pub(super) fn pin_worker(
    worker: usize,
    cpus: &[usize],
    report: &std::sync::mpsc::Sender<(usize, Result<(), affinity::AffinityError>)>,
) -> bool {
    let pinned = affinity::pin_current_thread(worker, cpus);
    let ok = pinned.is_ok();
    // The receiver lives until every worker reported.
    let _ = report.send((worker, pinned));
    ok
}
