//! `Inputs`: what a send of the threading backend checks each env's input
//! against, before anything is queued.

use std::sync::Mutex;

use envs::EnvSpecs;
use pool_core::{lock, Op};
use tensordict::TensorDict;

use super::cell::{copy_input, Cell};

/// What a send checks an env's input against: its input buffer's kind
/// (envs whose buffers are alike share one) and whether a reset takes one.
pub(super) struct Inputs {
    /// Per env: the index of its kind in `templates`.
    pub(super) kind: Vec<usize>,
    /// One input buffer per kind, that a send copies inputs into to check
    /// them (its contents are whatever was last checked): kept, so that a
    /// check allocates nothing (a fresh clone shared its storage with the
    /// kind's template, and every copy into it allocated).
    pub(super) scratch: Vec<Mutex<TensorDict>>,
    /// Per env: whether a reset is given the sent state entries (the env
    /// has state entries).
    pub(super) reset_takes_input: Vec<bool>,
    /// Whether every env's input buffer is of one kind and every env's
    /// reset takes an input or none does: a send to every env, or to some
    /// each from a row, is then checked once ([`Inputs::check_every_env`],
    /// [`Inputs::check_alike_jobs`]).
    uniform: bool,
}

impl Inputs {
    /// Whether every env's input buffer is of one kind.
    pub(super) fn one_kind(&self) -> bool {
        self.scratch.len() == 1
    }

    pub(super) fn new(cells: &[Mutex<Cell>], specs: &[EnvSpecs]) -> Inputs {
        let mut templates: Vec<TensorDict> = Vec::new();
        let mut kind = Vec::with_capacity(cells.len());
        let mut reset_takes_input = Vec::with_capacity(cells.len());
        for (cell, specs) in cells.iter().zip(specs) {
            let input = &lock(cell).runner.input;
            kind.push(match templates.iter().position(|t| t == input) {
                Some(kind) => kind,
                None => {
                    templates.push(input.clone());
                    templates.len() - 1
                }
            });
            reset_takes_input.push(!input.is_empty() && !specs.full_state_spec().is_empty());
        }
        let uniform = templates.len() <= 1 && reset_takes_input.windows(2).all(|w| w[0] == w[1]);
        Inputs {
            kind,
            scratch: templates.into_iter().map(owned).map(Mutex::new).collect(),
            reset_takes_input,
            uniform,
        }
    }

    /// Checks a send of `op` to every env, env `j` from row `j` of `src`,
    /// at once when the envs are alike (one kind of input buffer, and
    /// resets that all take an input or none): true if every env's input
    /// can be filled, as [`Inputs::check`] of each would find; false when
    /// the envs must be checked one by one (they differ, or an input does
    /// not fit: the checks one by one then name the first env whose input
    /// is wrong, with its error).
    pub(super) fn check_every_env(&self, op: Op, src: Option<&TensorDict>) -> bool {
        let Some(last) = self.kind.len().checked_sub(1) else {
            return false;
        };
        self.check_rows_up_to(op, src, last)
    }

    /// [`Inputs::check_every_env`] of a send to some envs (`jobs`: env and
    /// row of `src`) each from a row: one check, of the largest row, for
    /// all when the envs are alike; false when a job reads the whole
    /// tensordict, or the check cannot say (then each job is checked).
    pub(super) fn check_alike_jobs(
        &self,
        op: Op,
        src: Option<&TensorDict>,
        jobs: &[(usize, Option<usize>)],
    ) -> bool {
        if !self.uniform || jobs.is_empty() {
            return false;
        }
        // The largest row, and whether a job reads the whole tensordict (no
        // branch a job).
        let (largest, whole) = jobs.iter().fold((0, false), |(largest, whole), &(_, row)| {
            (largest.max(row.unwrap_or(0)), whole | row.is_none())
        });
        !whole && self.check_rows_up_to(op, src, largest)
    }

    /// Whether every env's input can be filled from any row of `src` up to
    /// `last`, checked at once (see [`Inputs::check_every_env`]).
    fn check_rows_up_to(&self, op: Op, src: Option<&TensorDict>, last: usize) -> bool {
        if !self.uniform {
            return false;
        }
        if op == Op::Reset && !self.reset_takes_input[0] {
            // No env takes an input: nothing to check.
            return true;
        }
        // Every row's index is in range when the last one is; the rows
        // share one layout, and so do the envs' buffers.
        match src {
            Some(src) if src.batch_size().first().is_some_and(|&rows| last < rows) => {
                copy_input(src, Some(last), &mut lock(&self.scratch[0])).is_ok()
            }
            _ => false,
        }
    }

    /// Checks that env `env`'s input buffer can be filled from `src` (row
    /// `row`, or all of it), as the worker will: once per kind of input
    /// buffer and per way of reading (`checked` holds those seen by this
    /// send: bit `2 * kind + whole` of its words), and each row's index
    /// (`rows`: `src`'s first dim, if any).
    #[inline]
    pub(super) fn check(
        &self,
        env: usize,
        src: &TensorDict,
        row: Option<usize>,
        rows: Option<usize>,
        checked: &mut Checked,
    ) -> Result<(), tensordict::TensorDictError> {
        let kind = self.kind[env];
        let in_range = row.is_none_or(|row| rows.is_some_and(|n| row < n));
        let bit = 2 * kind + usize::from(row.is_none());
        if in_range && checked.has(bit) {
            return Ok(());
        }
        // A copy into a scratch buffer: the errors of the worker's copy.
        copy_input(src, row, &mut lock(&self.scratch[kind]))?;
        checked.set(bit);
        Ok(())
    }
}

/// `td` with every tensor in storage of its own (a clone shares it, and
/// its first write would copy it).
fn owned(mut td: TensorDict) -> TensorDict {
    for tensor in td.tensors_mut() {
        tensor.bytes_mut();
    }
    td
}

/// The (kind, way of reading) pairs a send has checked: one bit each, the
/// first 128 inline, and the last one set (the envs of a send are usually
/// all of one kind: one comparison each).
pub(super) struct Checked {
    words: smallvec::SmallVec<[u64; 2]>,
    last: usize,
}

impl Default for Checked {
    fn default() -> Checked {
        Checked {
            words: smallvec::SmallVec::new(),
            last: usize::MAX,
        }
    }
}

impl Checked {
    #[inline]
    fn has(&self, bit: usize) -> bool {
        bit == self.last
            || self
                .words
                .get(bit / 64)
                .is_some_and(|w| w & (1 << (bit % 64)) != 0)
    }

    fn set(&mut self, bit: usize) {
        if self.words.len() <= bit / 64 {
            self.words.resize(bit / 64 + 1, 0);
        }
        self.words[bit / 64] |= 1 << (bit % 64);
        self.last = bit;
    }
}

#[cfg(test)]
mod tests {
    use super::Checked;

    /// Bits past the inline words grow the set; unset bits read false.
    #[test]
    fn checked_pairs_past_the_inline_words() {
        let mut checked = Checked::default();
        assert!(!checked.has(0) && !checked.has(200));
        checked.set(1);
        checked.set(200);
        assert!(checked.has(1) && checked.has(200));
        assert!(!checked.has(0) && !checked.has(199) && !checked.has(201));
    }
}
