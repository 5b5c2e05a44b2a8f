//! The reader thread of each worker: it reads the worker's socket
//! (results of the queue exchange, env failures) until the socket ends,
//! which is how a dead worker is found, at once; then the worker's envs in
//! flight fail with [`ProcError::WorkerDied`].

use std::sync::atomic::Ordering;
use std::time::Duration;

use pool_core::lock;
use pool_core::phase::QUEUED;

use super::{exit_reason, Shared};
use crate::wire::{FrameReader, FromWorker};
use crate::ProcError;

/// Reads a worker's socket until it ends (see the module docs).
pub(super) fn reader_loop(shared: &Shared, w: usize, mut reader: FrameReader) {
    let reason = loop {
        let bytes = match reader.read() {
            Ok(Some(bytes)) => bytes,
            Ok(None) => break "its control socket closed".to_owned(),
            Err(err) => break format!("its control socket failed: {err}"),
        };
        match FromWorker::decode(&bytes) {
            Ok(FromWorker::Result { env, next, root }) => {
                if let Err(reason) = shared.deliver(w, env as usize, &next, &root) {
                    break format!("protocol error: {reason}");
                }
            }
            Ok(FromWorker::Failed {
                env,
                during,
                message,
                panicked,
            }) => {
                let env = env as usize;
                if !shared.workers[w].envs.contains(&env) {
                    break format!("protocol error: a failure of env {env}, not one of its envs");
                }
                let name = shared.names[env].clone();
                let err = if panicked {
                    ProcError::Panicked {
                        env,
                        name,
                        worker: w,
                        during,
                        message,
                    }
                } else {
                    ProcError::Env {
                        env,
                        name,
                        worker: w,
                        during,
                        message,
                    }
                };
                if shared.fail(env, err) {
                    shared.wake();
                }
            }
            Ok(FromWorker::Fatal { message }) => break format!("it reported: {message}"),
            Ok(other) => break format!("protocol error: unexpected message {other:?}"),
            Err(reason) => break format!("protocol error: {reason}"),
        }
    };
    shared.worker_died(w, reason);
}

impl Shared {
    /// Queue: a result from worker `w` for env `env`.
    pub(super) fn deliver(
        &self,
        w: usize,
        env: usize,
        next: &[u8],
        root: &[u8],
    ) -> Result<(), String> {
        if !self.workers[w].envs.contains(&env) {
            return Err(format!("a result for env {env}, not one of its envs"));
        }
        let decode = |bytes: &[u8], what: &str| {
            tensordict::decode(bytes).map_err(|e| format!("env {env}'s {what}: {e}"))
        };
        let next = (!next.is_empty())
            .then(|| decode(next, "result"))
            .transpose()?;
        let root = (!root.is_empty())
            .then(|| decode(root, "root"))
            .transpose()?;
        let slot = &self.slots[env];
        {
            let mut cell = slot.lock();
            if self.phases.get(env) != QUEUED {
                return Err(format!(
                    "a result for env {env}, which has no command in flight"
                ));
            }
            if let Some(next) = next {
                cell.next = next;
            }
            if let Some(root) = root {
                cell.root = root;
            }
            // Relaxed: read after the Acquire of DONE.
            slot.published
                .store(self.signal.generation(), Ordering::Relaxed);
            // The result is visible to whoever sees DONE.
            self.phases.publish(env, false);
        }
        self.wake();
        Ok(())
    }

    /// Worker `w` is gone (or must be): records why, kills and reaps it if
    /// it still runs, fails its envs in flight, wakes receivers.
    pub(super) fn worker_died(&self, w: usize, reason: String) {
        let worker = &self.workers[w];
        let closing = self.closing.load(Ordering::SeqCst);
        let mut reason = reason;
        if !closing {
            let child = worker.take_child();
            if let Some(mut child) = child {
                let patience = Duration::from_millis(20);
                if let Some(status) = exit_reason(&mut child, patience) {
                    reason = format!("{reason} ({status})");
                } else {
                    let _ = child.kill();
                    // Its status all the same: a worker that was dying
                    // (a slow abort on a loaded machine) says how.
                    let status = child.wait().map_or_else(
                        |err| format!("status unknown ({err})"),
                        |status| status.to_string(),
                    );
                    reason =
                        format!("{reason}; still running after {patience:?}, killed ({status})");
                }
            }
        } else {
            reason = "the pool shut down".into();
        }
        *lock(&worker.death) = Some(reason);
        // Dead, then a scan for QUEUED envs (`Liveness`): a send either
        // sees the worker dead or has its env found here.
        worker.life.die(&self.phases, worker.envs.clone(), |env| {
            let err = self.died_error(w, String::new());
            self.fail(env, err);
        });
        self.wake();
    }
}
