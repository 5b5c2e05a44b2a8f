//! `Inputs`: what a send of the threading backend checks each env's input
//! against, before anything is queued.

use std::sync::Mutex;

use envs::EnvSpecs;
use pool_core::lock;
use tensordict::TensorDict;

use super::cell::{copy_input, Cell};

/// What a send checks an env's input against: its input buffer's kind
/// (envs whose buffers are alike share one) and whether a reset takes one.
pub(super) struct Inputs {
    /// Per env: the index of its kind in `templates`.
    pub(super) kind: Vec<usize>,
    /// One zeroed input buffer per kind.
    pub(super) templates: Vec<TensorDict>,
    /// Per env: whether a reset is given the sent state entries (the env
    /// has state entries).
    pub(super) reset_takes_input: Vec<bool>,
}

impl Inputs {
    pub(super) fn new(cells: &[Mutex<Cell>], specs: &[EnvSpecs]) -> Inputs {
        let mut inputs = Inputs {
            kind: Vec::with_capacity(cells.len()),
            templates: Vec::new(),
            reset_takes_input: Vec::with_capacity(cells.len()),
        };
        for (cell, specs) in cells.iter().zip(specs) {
            let input = &lock(cell).runner.input;
            let kind = match inputs.templates.iter().position(|t| t == input) {
                Some(kind) => kind,
                None => {
                    inputs.templates.push(input.clone());
                    inputs.templates.len() - 1
                }
            };
            inputs.kind.push(kind);
            inputs
                .reset_takes_input
                .push(!input.is_empty() && !specs.full_state_spec().is_empty());
        }
        inputs
    }

    /// Checks that env `env`'s input buffer can be filled from `src` (row
    /// `row`, or all of it), as the worker will: once per kind of input
    /// buffer and per way of reading (`checked` holds those seen by this
    /// send), and each row's index.
    pub(super) fn check(
        &self,
        env: usize,
        src: &TensorDict,
        row: Option<usize>,
        checked: &mut Vec<(usize, bool)>,
    ) -> Result<(), tensordict::TensorDictError> {
        let kind = self.kind[env];
        let in_range = row.is_none_or(|row| src.batch_size().first().is_some_and(|&n| row < n));
        if in_range && checked.contains(&(kind, row.is_some())) {
            return Ok(());
        }
        // A copy into a scratch buffer: the errors of the worker's copy.
        let mut scratch = self.templates[kind].clone();
        copy_input(src, row, &mut scratch)?;
        checked.push((kind, row.is_some()));
        Ok(())
    }
}
