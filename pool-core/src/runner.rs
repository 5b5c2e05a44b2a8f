//! `Runner`: an env's reusable buffers (input, step result, next root) and
//! the one call of the env that a pool's worker makes per command ([`Op`]),
//! shared by every backend so that they step envs the same way; with
//! [`RunError`] and [`panic_message`] for what a run can end in.

use envs::{Env, EnvError};
use tensordict::{Entry, Lookup, TensorDict};

use crate::Op;

/// An env's buffers, built once from its specs and reused by every call:
/// what a worker (thread or process) keeps beside each env.
///
/// ```
/// use envs::{CountingEnv, Env};
/// use pool_core::{Op, Runner};
/// use tensordict::Tensor;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut env = CountingEnv::new(0, 1);
/// let mut runner = Runner::new(&env);
/// runner.run(&mut env, Op::Reset, false)?;
/// runner.input.set("action", Tensor::from_vec(&[1], vec![1i64])?)?;
/// runner.run(&mut env, Op::StepAndMaybeReset, true)?;
/// assert_eq!(runner.next.tensor("observation")?.to_vec::<i32>()?, vec![1]);
/// runner.run(&mut env, Op::StepAndMaybeReset, true)?;
/// // Done past max_steps (a count of 2): the next root is a fresh reset.
/// assert_eq!(runner.next.tensor("done")?.to_vec::<bool>()?, vec![true]);
/// assert_eq!(runner.root.tensor("observation")?.to_vec::<i32>()?, vec![0]);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Runner {
    /// The env's inputs: action and state entries (zeros until written).
    pub input: TensorDict,
    /// The step's outputs (`"next"` entries).
    pub next: TensorDict,
    /// The reset output, or the root of the next step (the step's entries
    /// without the reward, reset where done).
    pub root: TensorDict,
    /// What the last call was doing (`"reset"` or `"step"`): after a panic
    /// caught around [`Runner::run`], the phase it panicked in.
    pub during: &'static str,
    /// When set, a step-and-maybe-reset that resets nothing leaves `root`
    /// as it was and marks it stale ([`Runner::root_is_next`]): the root of
    /// the next step is then `next` without its reward, which a caller that
    /// copies `next` anyway can take from there (the copy into `root` was a
    /// third of a pool worker's cost per step). [`Runner::sync_root`]
    /// brings `root` up to date. Default off: `root` is always current.
    pub defer_root: bool,
    /// Whether `root` is stale and the root is `next`'s entries (see
    /// [`Runner::defer_root`]).
    root_is_next: bool,
    /// Where `"done"` sits in `next` (looked at after every step).
    done: Lookup,
}

/// An env's error in [`Runner::run`], with the phase it came from.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{during}: {source}")]
pub struct RunError {
    /// `"reset"` or `"step"`.
    pub during: &'static str,
    /// The env's error.
    pub source: Box<EnvError>,
}

impl Runner {
    /// Buffers shaped by `env`'s specs: the input holds the action and state
    /// entries, `next` the step template, `root` the step template without
    /// the reward.
    pub fn new(env: &dyn Env) -> Runner {
        let next = env.step_template();
        // The root shares the step buffer's keys, so that copying one into
        // the other compares keys by address.
        let root = next.exclude(env.specs().reward_keys());
        Runner {
            input: Runner::input_template(env),
            next,
            root,
            during: "reset",
            defer_root: false,
            root_is_next: false,
            done: Lookup::new("done"),
        }
    }

    /// Zeros for an env's inputs: its action and state entries.
    pub fn input_template(env: &dyn Env) -> TensorDict {
        let specs = env.specs();
        let mut td = specs.full_action_spec().zero();
        for (key, entry) in specs.full_state_spec().zero().items(true, true) {
            td.set(&key, entry.clone()).expect("same batch size");
        }
        td
    }

    /// Runs `op` on `env` with these buffers. A reset reads the input (its
    /// state entries) only when `with_input`; a step always does. The
    /// result lands in `root` (reset), `next` (step), or both
    /// (step-and-maybe-reset: a batched env resets the rows its done flags
    /// name, through a `"_reset"` mask, as [`Env::step_and_maybe_reset`]).
    #[inline]
    pub fn run(&mut self, env: &mut dyn Env, op: Op, with_input: bool) -> Result<(), RunError> {
        let reset = |e| RunError {
            during: "reset",
            source: Box::new(e),
        };
        let step = |e| RunError {
            during: "step",
            source: Box::new(e),
        };
        // A deferred root is brought up to date before anything else
        // touches `next` or `root` (a step or reset after a deferred
        // step-and-maybe-reset: rare).
        if op != Op::StepAndMaybeReset {
            let during = if op == Op::Reset { reset } else { step };
            self.sync_root().map_err(|e| during(EnvError::from(e)))?;
        }
        match op {
            Op::Reset => {
                self.during = "reset";
                let input = with_input.then_some(&self.input);
                env.reset_into(input, &mut self.root).map_err(reset)
            }
            Op::Step => {
                self.during = "step";
                env.step_into(&self.input, &mut self.next).map_err(step)
            }
            Op::StepAndMaybeReset => {
                self.during = "step";
                // A step that fails after a deferred one leaves `root` one
                // step older than `next` was (nothing reads the root of a
                // failed step: its result is the error).
                self.root_is_next = false;
                env.step_into(&self.input, &mut self.next).map_err(step)?;
                let done = match self.next.get_by(&mut self.done) {
                    Some(Entry::Tensor(t))
                        if t.as_slice::<bool>().is_ok_and(|d| d.iter().any(|&x| x)) =>
                    {
                        Some(t.clone())
                    }
                    _ => None,
                };
                if done.is_none() && self.defer_root {
                    self.root_is_next = true;
                    return Ok(());
                }
                self.root
                    .fill_from(&self.next)
                    .map_err(|e| step(EnvError::from(e)))?;
                let Some(done) = done else {
                    return Ok(());
                };
                self.during = "reset";
                // A batched env resets the rows its "_reset" mask names; its
                // buffer starts as the current root, so the other rows keep
                // their values.
                let input = if env.batch_size().is_empty() {
                    None
                } else {
                    let mut input = self.root.clone();
                    input
                        .set("_reset", done)
                        .map_err(|e| reset(EnvError::from(e)))?;
                    Some(input)
                };
                env.reset_into(input.as_ref(), &mut self.root)
                    .map_err(reset)
            }
        }
    }

    /// Whether `root` is stale: the last step-and-maybe-reset reset nothing
    /// and [`Runner::defer_root`] is set, so the root of the next step is
    /// `next`'s entries (all of `root`'s keys are there).
    #[inline]
    pub fn root_is_next(&self) -> bool {
        self.root_is_next
    }

    /// Brings `root` up to date after a deferred step-and-maybe-reset (see
    /// [`Runner::defer_root`]): copies `next`'s entries into it. Does
    /// nothing if it is current.
    ///
    /// # Errors
    ///
    /// If `next` lacks a key of `root` or holds it with another dtype or
    /// shape (an env that changed its buffers' layout).
    #[inline]
    pub fn sync_root(&mut self) -> Result<(), tensordict::TensorDictError> {
        if self.root_is_next {
            self.root.fill_from(&self.next)?;
            self.root_is_next = false;
        }
        Ok(())
    }
}

/// The message of a caught panic (`std::panic::catch_unwind`'s payload):
/// its string, or a note that it had none.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use tensordict::Tensor;

    use super::*;
    use envs::CountingEnv;

    fn observation(td: &TensorDict) -> Vec<i32> {
        td.tensor("observation").unwrap().to_vec::<i32>().unwrap()
    }

    /// A CountingEnv of `max_steps` and its runner (deferring the root or
    /// not), reset, with the action 1 in its input.
    fn reset_runner(max_steps: i32, defer_root: bool) -> (CountingEnv, Runner) {
        let mut env = CountingEnv::new(0, max_steps);
        let mut runner = Runner::new(&env);
        runner.defer_root = defer_root;
        runner.run(&mut env, Op::Reset, false).unwrap();
        runner
            .input
            .set("action", Tensor::from_vec(&[1], vec![1i64]).unwrap())
            .unwrap();
        (env, runner)
    }

    /// With `defer_root`, a step-and-maybe-reset that resets nothing leaves
    /// `root` stale and says so; `sync_root` (or the next reset or step)
    /// brings it up to date; a step that ends the episode resets as ever.
    #[test]
    fn a_deferred_root_is_next_until_synced() {
        let (mut env, mut runner) = reset_runner(1, true);
        assert!(!runner.root_is_next());

        runner.run(&mut env, Op::StepAndMaybeReset, true).unwrap();
        assert!(runner.root_is_next());
        assert_eq!(observation(&runner.next), vec![1]);
        assert_eq!(observation(&runner.root), vec![0], "stale until synced");
        runner.sync_root().unwrap();
        assert!(!runner.root_is_next());
        assert_eq!(observation(&runner.root), vec![1]);

        // Done (past max_steps, a count of 2): the root is the reset, current.
        runner.run(&mut env, Op::StepAndMaybeReset, true).unwrap();
        assert!(!runner.root_is_next());
        assert_eq!(observation(&runner.root), vec![0]);

        // A plain step after a deferred one syncs the root first.
        runner.run(&mut env, Op::StepAndMaybeReset, true).unwrap();
        assert!(runner.root_is_next());
        runner.run(&mut env, Op::Step, true).unwrap();
        assert!(!runner.root_is_next());
        assert_eq!(observation(&runner.root), vec![1]);
        assert_eq!(observation(&runner.next), vec![2]);
    }

    /// A deferred root that no longer fits `next` (an env that changed its
    /// buffer's layout) is an error of the call that syncs it, named by
    /// that call's phase; the root stays marked stale.
    #[test]
    fn a_deferred_root_that_does_not_fit_is_an_error() {
        let (mut env, mut runner) = reset_runner(5, true);
        runner.run(&mut env, Op::StepAndMaybeReset, true).unwrap();
        runner
            .next
            .set("observation", Tensor::full(&[2], 0i32))
            .unwrap();
        assert!(runner.sync_root().is_err());
        assert!(runner.root_is_next());
        let err = runner.run(&mut env, Op::Reset, false).unwrap_err();
        assert_eq!(err.during, "reset");
        let err = runner.run(&mut env, Op::Step, true).unwrap_err();
        assert_eq!(err.during, "step");
    }

    /// Without `defer_root` (the default), the root is always current.
    #[test]
    fn the_root_is_current_by_default() {
        let (mut env, mut runner) = reset_runner(5, false);
        runner.run(&mut env, Op::StepAndMaybeReset, true).unwrap();
        assert!(!runner.root_is_next());
        assert_eq!(observation(&runner.root), vec![1]);
    }
}
