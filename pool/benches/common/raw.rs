//! The raw loop: the same envs stepped directly by one thread, no pool.
//! It is the denominator of every overhead figure, written once here and
//! included with `#[path]` by `pool.rs`, `backends.rs`, `paired.rs` and
//! the example `profile_pool.rs`, so that they all divide by the same
//! loop.

// Each includer uses one of the two ways to step.
#![allow(dead_code)]

use std::hint::black_box;

use envs::{Env, Kwargs};
use tensordict::{Tensor, TensorDict};

/// `n` envs, each with its reset root (holding the action `1`, an `i64` of
/// shape `[1]`) and a reused step buffer, stepped in turn with
/// `step_into` (the root behind `black_box`) and reset with `reset_into`
/// when done: the envs' own cost, nothing of a pool's.
pub(crate) struct RawLoop {
    envs: Vec<(Box<dyn Env>, TensorDict, TensorDict)>,
    /// The env that [`RawLoop::steps`] steps next.
    next: usize,
}

impl RawLoop {
    /// `n` envs named `name`, built with `kwargs` and reset.
    pub(crate) fn new(name: &str, kwargs: &Kwargs, n: usize) -> RawLoop {
        let envs = (0..n)
            .map(|_| {
                let mut env = envs::make(name, kwargs).expect("env");
                let mut root = env.reset(None).expect("reset");
                root.set("action", Tensor::full(&[1], 1i64)).expect("[]");
                let next = env.step_template();
                (env, root, next)
            })
            .collect();
        RawLoop { envs, next: 0 }
    }

    /// One step of every env, in order: `n` env-steps.
    pub(crate) fn round(&mut self) {
        for (env, root, next) in self.envs.iter_mut() {
            step(&mut **env, root, next);
        }
    }

    /// `items` env-steps, round robin from where the last call stopped
    /// (for a baseline of as many env-steps as a pool's operation takes).
    pub(crate) fn steps(&mut self, items: usize) {
        for _ in 0..items {
            let at = self.next;
            self.next = (at + 1) % self.envs.len();
            let (env, root, next) = &mut self.envs[at];
            step(&mut **env, root, next);
        }
    }
}

/// One env-step, and a reset when it ends the episode.
#[inline]
fn step(env: &mut dyn Env, root: &mut TensorDict, next: &mut TensorDict) {
    env.step_into(black_box(root), next).expect("step");
    let done = next
        .tensor("done")
        .expect("done")
        .as_slice::<bool>()
        .expect("bool")[0];
    if done {
        env.reset_into(None, root).expect("reset");
    }
}
