//! `ThreadBackend::help`: a receiver that must wait for every env in
//! flight anyway runs queued envs itself while env steps are quick.

use smallvec::SmallVec;

use super::worker::{publish_run, run_only, Held, StepTiming};
use super::ThreadBackend;
use crate::queue::HELP_CHUNK;

impl ThreadBackend {
    /// Runs queued envs (at most 8, each published as it finishes) in the
    /// calling thread, if any is queued and env steps have been quick (a
    /// moving average under `HELP_MAX_ENV_TIME`): a receiver that would
    /// otherwise wait helps the workers. Returns
    /// how many envs it ran. Never with
    /// [`ThreadOptions::affinity`](crate::ThreadOptions::affinity):
    /// the envs then run on the worker threads' CPUs only.
    ///
    /// On as many workers as cores, a waiting receiver shares a core with
    /// a worker; waiting, it hands that core back and forth with the
    /// worker at each yield. Helping, it steps the envs in the worker's
    /// place instead, and the batch is done sooner (docs/performance.md has
    /// the `perf sched` figures). It blocks for as long as those envs take, so a
    /// receiver helps only when it has to wait for every queued env anyway.
    #[doc(hidden)]
    pub fn help(&self) -> usize {
        if self.pinned || !self.shared.envs_are_quick() {
            return 0;
        }
        let mut timing = StepTiming::new();
        // Taken under one lock: the receiver waits for every queued env
        // anyway, so nobody waits on the jobs it holds while it runs one.
        let mut jobs = SmallVec::new();
        // While the spare worker rests, its block of a send to every env
        // first: see `ThreadBackend::send`.
        let spare_first = self.shared.spare_rests();
        let ran = self
            .shared
            .queue
            .take_any(HELP_CHUNK, &mut jobs, spare_first);
        let mut done = Held::new();
        for claimed in &jobs {
            for index in claimed.range.clone() {
                let job = claimed.chunk.job(index);
                timing.start(job.op);
                let ran = run_only(&self.shared, &job);
                timing.ran(&self.shared.env_nanos);
                done.push(ran);
            }
        }
        // The run ends here (the helper returns to its receive); its
        // results are published together.
        timing.end(&self.shared.env_nanos);
        publish_run(&self.shared, &mut done);
        ran
    }
}
