//! Building a received batch: the sent rows, the results (gathered from the
//! backend's rows or read env by env), `env_index`, stacked as asked.

use pool_core::Op;
use smallvec::SmallVec;
use tensordict::{NonTensor, StackedTensorDict, TensorDict};

use super::book::Taken;
use super::AsyncEnvPool;
use crate::{PoolError, StackMode};

/// The keys a dense batch of step results gets besides the sent rows:
/// `"next"` and `"env_index"`.
const STEP_KEYS_ADDED: usize = 2;

/// A dense batch's parts: the sent rows (for a step), the `"next"`
/// results (for a step), the next roots (for a reset or a step and reset).
type DenseParts = (Option<TensorDict>, Option<TensorDict>, Option<TensorDict>);

impl AsyncEnvPool {
    /// The root part of an env's step result: its row of the sent
    /// tensordict.
    pub(super) fn root_row(
        td: Option<&TensorDict>,
        row: Option<usize>,
    ) -> Result<TensorDict, PoolError> {
        Ok(match (td, row) {
            (Some(td), Some(row)) => td.index(row)?,
            (Some(td), None) => td.clone(),
            (None, _) => TensorDict::new(&[]),
        })
    }

    /// The root part of a dense batch of step results: the sent rows of
    /// each taken env, in order.
    pub(super) fn step_roots(&self, taken: &Taken) -> Result<TensorDict, PoolError> {
        let k = taken.envs.len();
        let in_order = taken.in_order;
        match taken.origin(0) {
            // The sync path: every row of one send, in order. The sent
            // tensordict is the root batch itself (with room for the keys
            // `dense_batch` adds).
            (Some(td), _)
                if taken.tds.len() == 1 && in_order && td.batch_size().first() == Some(&k) =>
            {
                Ok(td.clone_with_room(STEP_KEYS_ADDED))
            }
            (first, first_row) => {
                let template = Self::root_row(first, first_row)?;
                let mut batch = TensorDict::zeros_stacked(&template, k)?;
                // One send at a time, its rows column by column.
                let mut at: SmallVec<[usize; 64]> = SmallVec::new();
                let mut rows: SmallVec<[usize; 64]> = SmallVec::new();
                for (send, td) in taken.tds.iter().enumerate() {
                    // A reset's envs: no root entries.
                    let Some(td) = td.as_deref() else {
                        continue;
                    };
                    at.clear();
                    rows.clear();
                    for j in 0..k {
                        let (of, row) = taken.origin_at(j);
                        match row {
                            _ if of != send => {}
                            Some(row) => {
                                at.push(j);
                                rows.push(row);
                            }
                            None => batch.write_row(j, td)?,
                        }
                    }
                    batch.copy_rows(&at, td, &rows)?;
                }
                Ok(batch)
            }
        }
    }

    /// Builds the batch of step results (root rows and `"next"`) and, for
    /// step-and-maybe-reset, the batch of next roots.
    pub(super) fn build(
        &self,
        op: Op,
        taken: &Taken,
    ) -> Result<(StackedTensorDict, Option<StackedTensorDict>), PoolError> {
        let backend = self.backend();
        let k = taken.envs.len();
        let first = taken.envs[0];
        let wants_root = op != Op::Step;
        let wants_step = op != Op::Reset;
        if self.stack == StackMode::MaybeDense {
            // Where the backend's batch rows hold every result (envs of one
            // layout) and the sent rows stack densely, a maybe-dense stack
            // is the dense batch: built the dense way, with no per-env
            // tensordict. Otherwise env by env, below.
            if let Some(batches) = self.maybe_dense_fast(op, taken) {
                return self.dense_batch(taken, batches);
            }
        }
        if self.stack == StackMode::Dense {
            let step_batch = if wants_step {
                Some(self.step_roots(taken)?)
            } else {
                None
            };
            // The results: from the batch rows the workers filled, else read
            // in place, column by column. The envs are released only once
            // the whole batch is built, so that a batch that cannot be built
            // loses nothing.
            let (next_batch, root_batch) = match backend.gather(op, &taken.envs) {
                Some(batches) => batches,
                None => {
                    let mut next_batch = if wants_step {
                        Some(TensorDict::zeros_stacked(&self.templates[first].0, k)?)
                    } else {
                        None
                    };
                    let mut root_batch = if wants_root {
                        Some(TensorDict::zeros_stacked(&self.templates[first].1, k)?)
                    } else {
                        None
                    };
                    backend.peek_many(&taken.envs, |outputs| -> Result<(), PoolError> {
                        if let Some(next) = next_batch.as_mut() {
                            let rows: SmallVec<[&TensorDict; 64]> =
                                outputs.iter().map(|o| o.next).collect();
                            next.write_rows(&rows)?;
                        }
                        if let Some(root) = root_batch.as_mut() {
                            let rows: SmallVec<[&TensorDict; 64]> =
                                outputs.iter().map(|o| o.root).collect();
                            root.write_rows(&rows)?;
                        }
                        Ok(())
                    })??;
                    (next_batch, root_batch)
                }
            };
            return self.dense_batch(taken, (step_batch, next_batch, root_batch));
        }
        let mut steps = Vec::with_capacity(k);
        let mut roots = Vec::with_capacity(k);
        for (j, &env) in taken.envs.iter().enumerate() {
            let (td, row) = taken.origin(j);
            let (step, root) = self.env_result(op, env, td, row)?;
            steps.extend(step);
            roots.extend(root);
        }
        let stack = |parts: Vec<TensorDict>| -> Result<StackedTensorDict, PoolError> {
            Ok(match self.stack {
                StackMode::Lazy => StackedTensorDict::Lazy(TensorDict::lazy_stack(parts)?),
                _ => TensorDict::maybe_dense_stack(parts)?,
            })
        };
        Ok(match op {
            Op::Reset => (stack(roots)?, None),
            Op::Step => (stack(steps)?, None),
            Op::StepAndMaybeReset => (stack(steps)?, Some(stack(roots)?)),
        })
    }

    /// The parts of a maybe-dense batch built as a dense one, or `None`
    /// when it must be built env by env: the backend's batch rows do not
    /// hold every result (envs of different layouts, a result not in its
    /// rows), or the sent rows do not stack densely.
    fn maybe_dense_fast(&self, op: Op, taken: &Taken) -> Option<DenseParts> {
        let step_batch = if op == Op::Reset {
            None
        } else {
            Some(self.step_roots(taken).ok()?)
        };
        let (next_batch, root_batch) = self.backend().gather(op, &taken.envs)?;
        Some((step_batch, next_batch, root_batch))
    }

    /// The dense batch of `taken`'s results from its parts: the sent rows
    /// with `"next"` and `"env_index"`, and the next roots with
    /// `"env_index"`.
    fn dense_batch(
        &self,
        taken: &Taken,
        parts: DenseParts,
    ) -> Result<(StackedTensorDict, Option<StackedTensorDict>), PoolError> {
        let env_index = self.env_index_column(&taken.envs);
        let (step, root) = match parts {
            (Some(mut step), Some(next), root) => {
                // Room made once (none needed after `step_roots`).
                step.reserve(STEP_KEYS_ADDED);
                step.set(&self.keys.next, next)?;
                let root = match root {
                    Some(mut root) => {
                        root.set(&self.keys.env_index, env_index.clone())?;
                        Some(StackedTensorDict::Dense(root))
                    }
                    None => None,
                };
                step.set(&self.keys.env_index, env_index)?;
                (step, root)
            }
            (_, _, Some(mut root)) => {
                root.set(&self.keys.env_index, env_index)?;
                (root, None)
            }
            _ => unreachable!("every op wants a step or a root"),
        };
        Ok((StackedTensorDict::Dense(step), root))
    }

    /// One env's step result and root result, as owned tensordicts.
    pub(super) fn env_result(
        &self,
        op: Op,
        env: usize,
        td: Option<&TensorDict>,
        row: Option<usize>,
    ) -> Result<(Option<TensorDict>, Option<TensorDict>), PoolError> {
        let mut step = if op == Op::Reset {
            None
        } else {
            Some(Self::root_row(td, row)?)
        };
        let (next, root) = self
            .backend()
            .peek(env, |out| (out.next.clone(), out.root.clone()))?;
        let index = self.env_index[env].clone();
        if let Some(step) = step.as_mut() {
            step.set("next", next)?;
            step.set("env_index", index.clone())?;
        }
        let root = if op == Op::Step {
            None
        } else {
            let mut root = root;
            root.set("env_index", index)?;
            Some(root)
        };
        Ok((step, root))
    }
}

/// Env `env`'s index shaped like its batch size: the integer itself for an
/// unbatched env, else a stack of it with one element per sub-env.
pub(super) fn env_index_value(env: usize, batch: &[usize]) -> NonTensor {
    match batch.split_first() {
        None => NonTensor::Int(env as i64),
        Some((&n, rest)) => NonTensor::Stack(vec![env_index_value(env, rest); n].into()),
    }
}
