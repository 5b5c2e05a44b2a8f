//! `StackedSpec`, a heterogeneous (lazy) stack of specs: one part per env,
//! kept as it is.

use tensordict::{NestedKey, Shape};

use crate::{SpecError, TensorSpec};

/// Specs stacked lazily along a new leading dim: the parts are kept as they
/// are, so they may differ (TorchRL's `StackedSpec` / lazy stacks).
/// [`TensorSpec::lazy_stack`] makes them where specs differ; indexing gives
/// a part back.
///
/// ```
/// use specs::TensorSpec;
/// use tensordict::DType;
/// # fn main() -> Result<(), specs::SpecError> {
/// let cartpole = TensorSpec::unbounded(&[4], DType::F32);
/// let pendulum = TensorSpec::unbounded(&[3], DType::F32);
/// let stacked = TensorSpec::lazy_stack(vec![cartpole.clone(), pendulum])?;
/// let parts = stacked.as_stacked().expect("the parts differ");
/// assert_eq!(parts.len(), 2);
/// assert_eq!(parts.index(0)?, &cartpole);
/// assert_eq!(stacked.shape().as_slice(), &[2]); // [4] and [3] share no dim
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct StackedSpec {
    parts: Vec<TensorSpec>,
}

impl StackedSpec {
    /// A stack of these parts (at least one), kept as they are.
    pub fn new(parts: Vec<TensorSpec>) -> Result<StackedSpec, SpecError> {
        if parts.is_empty() {
            return Err(SpecError::EmptyStack);
        }
        Ok(StackedSpec { parts })
    }

    /// The parts, one per env.
    pub fn parts(&self) -> &[TensorSpec] {
        &self.parts
    }

    /// The parts, owned.
    pub fn into_parts(self) -> Vec<TensorSpec> {
        self.parts
    }

    /// Number of parts.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// True if there is no part (never, for a stack made by this crate).
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Part `index`; an error if it is out of range.
    pub fn index(&self, index: usize) -> Result<&TensorSpec, SpecError> {
        self.parts
            .get(index)
            .ok_or_else(|| SpecError::IndexOutOfRange {
                key: NestedKey::default(),
                index,
                len: self.parts.len(),
            })
    }

    /// `[len]` followed by the longest prefix the parts' shapes share (their
    /// shape if they all have one shape).
    pub fn shape(&self) -> Shape {
        let mut shared: Shape = self
            .parts
            .first()
            .map(TensorSpec::shape)
            .unwrap_or_default();
        for part in self.parts.iter().skip(1) {
            let shape = part.shape();
            let common = shared
                .iter()
                .zip(shape.iter())
                .take_while(|(a, b)| a == b)
                .count();
            shared.truncate(common);
        }
        crate::elements::prepend(self.parts.len(), &shared)
    }
}

#[cfg(test)]
mod tests {
    use tensordict::DType;

    use super::*;

    #[test]
    fn shape_is_the_count_and_the_shared_prefix() {
        let a = TensorSpec::unbounded(&[2, 3], DType::F32);
        let b = TensorSpec::unbounded(&[2, 4], DType::F32);
        let s = StackedSpec::new(vec![a.clone(), b]).unwrap();
        assert_eq!(s.shape().as_slice(), &[2, 2]);
        let same = StackedSpec::new(vec![a.clone(), a.clone(), a]).unwrap();
        assert_eq!(same.shape().as_slice(), &[3, 2, 3]);
        assert_eq!(same.len(), 3);
        assert!(!same.is_empty());
        assert_eq!(same.clone().into_parts().len(), 3);
    }

    #[test]
    fn empty_stacks_and_bad_indices_are_errors() {
        assert_eq!(
            StackedSpec::new(vec![]).unwrap_err().to_string(),
            "cannot stack an empty list of specs"
        );
        let s = StackedSpec::new(vec![TensorSpec::non_tensor(&[])]).unwrap();
        assert_eq!(
            s.index(1).unwrap_err().to_string(),
            "index 1 is out of range for dimension 0 of size 1 (spec at key <root>)"
        );
    }
}
