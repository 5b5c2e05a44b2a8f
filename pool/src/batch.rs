//! `Batch`: what a batch receive returns: the stacked results, and the env
//! each of its rows came from.

use std::fmt;
use std::ops::Deref;

use tensordict::{StackedTensorDict, TensorDict, TensorDictError};

/// The results of a batch receive (or of a synchronous call): a
/// [`StackedTensorDict`] whose rows are sorted by env index and carry
/// `"env_index"`, and those env indices as plain numbers
/// ([`Batch::env_indices`]). It dereferences to the stacked tensordict.
///
/// ```
/// use pool::{AsyncEnvPool, Recv, Target};
/// use pool::envs::Kwargs;
/// use pool::tensordict::{Tensor, TensorDict};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = AsyncEnvPool::builder().registered_n("CountingEnv", 4, Kwargs::new()).build()?;
/// pool.reset(None)?;
/// let mut actions = TensorDict::new(&[2]);
/// actions.set("action", Tensor::from_vec(&[2, 1], vec![1i64, 1])?)?;
/// pool.async_step_send(actions, Target::Envs(vec![3, 1]))?;
/// let batch = pool.async_step_recv(Recv::new().min_get(2))?;
/// assert_eq!(batch.env_indices(), &[1, 3]);
/// assert_eq!(batch.len(), 2);
/// let dense = batch.into_dense()?;
/// assert_eq!(dense.batch_size(), &[2]);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Batch {
    data: StackedTensorDict,
    envs: Vec<usize>,
}

impl Batch {
    /// A batch of `data`, whose row `i` comes from env `envs[i]`.
    pub(crate) fn new(data: StackedTensorDict, envs: Vec<usize>) -> Batch {
        debug_assert_eq!(data.len(), envs.len());
        Batch { data, envs }
    }

    /// The env of each row, in order (ascending).
    pub fn env_indices(&self) -> &[usize] {
        &self.envs
    }

    /// The stacked results.
    pub fn data(&self) -> &StackedTensorDict {
        &self.data
    }

    /// The stacked results, owned.
    pub fn into_data(self) -> StackedTensorDict {
        self.data
    }

    /// The results as one dense tensordict (see
    /// [`StackedTensorDict::into_dense`]).
    pub fn into_dense(self) -> Result<TensorDict, TensorDictError> {
        self.data.into_dense()
    }
}

impl Deref for Batch {
    type Target = StackedTensorDict;

    fn deref(&self) -> &StackedTensorDict {
        &self.data
    }
}

/// The stacked tensordict's display.
impl fmt::Display for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.data.fmt(f)
    }
}

impl From<Batch> for StackedTensorDict {
    fn from(batch: Batch) -> StackedTensorDict {
        batch.data
    }
}
