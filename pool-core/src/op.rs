//! `Op`: the three calls a pool makes on an env (reset, step,
//! step-and-maybe-reset).

/// One of the three calls a pool makes on an env.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `reset`: the result is the reset root.
    Reset,
    /// `step`: the result is the step's `"next"` entries.
    Step,
    /// `step`, then `reset` where done: the result is the step's `"next"`
    /// entries and the root of the next step.
    StepAndMaybeReset,
}

impl Op {
    /// `"reset"`, `"step"` or `"step_and_maybe_reset"`.
    pub fn name(self) -> &'static str {
        match self {
            Op::Reset => "reset",
            Op::Step => "step",
            Op::StepAndMaybeReset => "step_and_maybe_reset",
        }
    }
}
