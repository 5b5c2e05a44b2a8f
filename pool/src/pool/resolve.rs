//! Target resolution: the envs a send addresses and their rows of the sent
//! tensordict, checked (range, duplicates, batch sizes, `env_index`).

use std::borrow::Cow;

use smallvec::SmallVec;
use tensordict::{Entry, TensorDict};

use super::book::Job;
use super::AsyncEnvPool;
use crate::{PoolError, Target};

impl AsyncEnvPool {
    /// The envs addressed by `target`, each with its row of `td`.
    pub(super) fn resolve(
        &self,
        target: Target,
        td: Option<&TensorDict>,
    ) -> Result<Cow<'_, [Job]>, PoolError> {
        let n = self.num_envs();
        let rows = |count: usize| -> Result<(), PoolError> {
            match td {
                Some(td) if td.batch_size().first() != Some(&count) => {
                    Err(PoolError::TargetLength {
                        targets: count,
                        batch_size: td.batch_size().to_vec(),
                    })
                }
                _ => Ok(()),
            }
        };
        let envs: Vec<usize> = match target {
            Target::All => {
                rows(n)?;
                self.check_rows(td, 0..n)?;
                // The threading backend's own list: its send knows it as
                // a send to every env without a look at each job.
                let all = self.backend().every_env_jobs().unwrap_or(&self.all_jobs);
                return Ok(Cow::Borrowed(all));
            }
            Target::Envs(envs) => {
                rows(envs.len())?;
                envs
            }
            Target::Env(env) => {
                if env >= n {
                    return Err(PoolError::EnvOutOfRange { env, num_envs: n });
                }
                // One env's tensordict: its own batch size, or a leading 1.
                let own = self.env_batch(env);
                let row = match td {
                    Some(td) if td.batch_size() == own => None,
                    Some(td) if td.batch_size().first() == Some(&1) => {
                        if &td.batch_size()[1..] != own {
                            return Err(PoolError::RowBatchSize {
                                env,
                                expected: own.to_vec(),
                                found: td.batch_size()[1..].to_vec(),
                            });
                        }
                        Some(0)
                    }
                    Some(td) => {
                        return Err(PoolError::TargetLength {
                            targets: 1,
                            batch_size: td.batch_size().to_vec(),
                        })
                    }
                    None => None,
                };
                return Ok(Cow::Owned(vec![(env, row)]));
            }
            Target::EnvIndex => {
                let td = td.ok_or_else(|| PoolError::EnvIndex {
                    reason: "no tensordict to read \"env_index\" from".into(),
                })?;
                let envs = env_index_of(td)?;
                rows(envs.len())?;
                envs
            }
        };
        let mut seen: SmallVec<[bool; 256]> = smallvec::smallvec![false; n];
        for &env in &envs {
            if env >= n {
                return Err(PoolError::EnvOutOfRange { env, num_envs: n });
            }
            if std::mem::replace(&mut seen[env], true) {
                return Err(PoolError::DuplicateEnv { env });
            }
        }
        self.check_rows(td, envs.iter().copied())?;
        // Made from the slice (a trusted length: one write per job), not
        // collected out of the vector's own iterator.
        let mut jobs = Vec::with_capacity(envs.len());
        jobs.extend(envs.iter().enumerate().map(|(row, &env)| (env, Some(row))));
        Ok(Cow::Owned(jobs))
    }

    /// Each row of `td` must have its env's batch size (the backends copy
    /// rows into buffers of that size): an error naming the first of `envs`
    /// whose batch size differs.
    pub(super) fn check_rows(
        &self,
        td: Option<&TensorDict>,
        mut envs: impl Iterator<Item = usize>,
    ) -> Result<(), PoolError> {
        let Some(td) = td else {
            return Ok(());
        };
        let found = &td.batch_size()[1..];
        let wrong = if self.same_env_batch {
            // Every env's batch size is this one: all rows fit, or none.
            if found == &self.batch_size[1..] {
                None
            } else {
                envs.next()
            }
        } else {
            envs.find(|&env| found != self.env_batch(env))
        };
        match wrong {
            Some(env) => Err(PoolError::RowBatchSize {
                env,
                expected: self.env_batch(env).to_vec(),
                found: found.to_vec(),
            }),
            None => Ok(()),
        }
    }
}

/// The env indices of a tensordict's `"env_index"` entry: a stack of
/// integers, or a 1-D integer tensor.
pub(super) fn env_index_of(td: &TensorDict) -> Result<Vec<usize>, PoolError> {
    let bad = |reason: String| PoolError::EnvIndex { reason };
    let values: Vec<i64> = match td.get("env_index") {
        None => {
            return Err(bad(format!(
                "the tensordict has no \"env_index\" entry (keys: {:?})",
                td.keys(false, false)
            )))
        }
        Some(Entry::NonTensor(v)) => v
            .as_int_vec()
            .or_else(|| v.as_int().map(|i| vec![i]))
            .ok_or_else(|| bad(format!("\"env_index\" is {v}, not integers")))?,
        Some(Entry::Tensor(t)) => match t.dtype() {
            tensordict::DType::I64 => t.to_vec::<i64>()?,
            tensordict::DType::I32 => t.to_vec::<i32>()?.into_iter().map(i64::from).collect(),
            other => {
                return Err(bad(format!(
                    "\"env_index\" is a tensor of dtype {other}, not an integer tensor"
                )))
            }
        },
        Some(Entry::Dict(_)) => return Err(bad("\"env_index\" is a tensordict".into())),
    };
    values
        .into_iter()
        .map(|v| usize::try_from(v).map_err(|_| bad(format!("env index {v} is negative"))))
        .collect()
}
