//! `NonTensor`: values a tensordict carries that are not tensors (integers,
//! floats, bools, strings, and stacks of them, such as `env_index`).

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use crate::Shape;

/// A value that is not a tensor. A [`NonTensor::Stack`] has one element per
/// row of its leading dimension, so a stack of `n` values sits in a
/// tensordict of batch size `[n]` (as TorchRL's `NonTensorStack`).
///
/// ```
/// use tensordict::NonTensor;
/// let env_index = NonTensor::from(vec![0i64, 1, 2]);
/// assert_eq!(env_index.shape().as_slice(), &[3]);
/// assert_eq!(env_index.index(1), Some(&NonTensor::Int(1)));
/// assert_eq!(env_index.as_int_vec(), Some(vec![0, 1, 2]));
/// ```
#[derive(Debug, PartialEq)]
pub enum NonTensor {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A bool.
    Bool(bool),
    /// A string.
    Str(String),
    /// A stack of values along a leading dimension.
    Stack(Items),
}

/// The elements of a [`NonTensor::Stack`], shared: cloning a stack (a
/// batch's `env_index`, one value per env, in every batch a pool hands
/// out) counts a reference instead of copying the elements. Read as a
/// `Vec` through `Deref`; a write (`DerefMut`) copies them first if another
/// stack shares them.
///
/// ```
/// use tensordict::{Items, NonTensor};
/// let a = NonTensor::Stack(Items::from(vec![NonTensor::Int(0), NonTensor::Int(1)]));
/// let mut b = a.clone();
/// if let NonTensor::Stack(items) = &mut b {
///     items.push(NonTensor::Int(2));
/// }
/// assert_eq!(a.shape().as_slice(), &[2]);
/// assert_eq!(b.as_int_vec(), Some(vec![0, 1, 2]));
/// ```
#[derive(Clone, Default, PartialEq)]
pub struct Items(Arc<Vec<NonTensor>>);

impl Items {
    /// The elements, copied only if another stack shares them.
    pub fn into_vec(self) -> Vec<NonTensor> {
        Arc::unwrap_or_clone(self.0)
    }
}

impl Deref for Items {
    type Target = Vec<NonTensor>;
    fn deref(&self) -> &Vec<NonTensor> {
        &self.0
    }
}

impl DerefMut for Items {
    fn deref_mut(&mut self) -> &mut Vec<NonTensor> {
        Arc::make_mut(&mut self.0)
    }
}

impl fmt::Debug for Items {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<Vec<NonTensor>> for Items {
    fn from(items: Vec<NonTensor>) -> Items {
        Items(Arc::new(items))
    }
}

impl FromIterator<NonTensor> for Items {
    fn from_iter<I: IntoIterator<Item = NonTensor>>(iter: I) -> Items {
        Items(Arc::new(iter.into_iter().collect()))
    }
}

impl IntoIterator for Items {
    type Item = NonTensor;
    type IntoIter = std::vec::IntoIter<NonTensor>;
    fn into_iter(self) -> Self::IntoIter {
        self.into_vec().into_iter()
    }
}

impl<'a> IntoIterator for &'a Items {
    type Item = &'a NonTensor;
    type IntoIter = std::slice::Iter<'a, NonTensor>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl NonTensor {
    /// Whether [`NonTensor::shape`] starts with `prefix`, looking at the
    /// elements of a stack only as deep as `prefix` goes.
    pub fn shape_starts_with(&self, prefix: &[usize]) -> bool {
        match (prefix.split_first(), self) {
            (None, _) => true,
            (Some((&n, rest)), NonTensor::Stack(items)) => {
                // The shape's first dim is the length; the rest is the
                // common prefix of the elements' shapes, which starts with
                // `rest` exactly when every element's does.
                // (An empty stack's shape is its length alone.)
                items.len() == n
                    && (rest.is_empty()
                        || (!items.is_empty()
                            && items.iter().all(|item| item.shape_starts_with(rest))))
            }
            (Some(_), _) => false,
        }
    }

    /// The shape: `[]` for a single value; for a stack, its length followed
    /// by the leading dims its elements share (the longest common prefix of
    /// their shapes, so a stack of ragged lists has shape `[len]`).
    pub fn shape(&self) -> Shape {
        match self {
            NonTensor::Stack(items) => {
                let mut shape = Shape::new();
                shape.push(items.len());
                if let Some((first, rest)) = items.split_first() {
                    let mut common = first.shape();
                    for item in rest {
                        if common.is_empty() {
                            break;
                        }
                        let other = item.shape();
                        let same = common
                            .iter()
                            .zip(&other)
                            .take_while(|(a, b)| a == b)
                            .count();
                        common.truncate(same);
                    }
                    shape.extend_from_slice(&common);
                }
                shape
            }
            _ => Shape::new(),
        }
    }

    /// Element `index` of a stack; `None` for a single value or out of range.
    pub fn index(&self, index: usize) -> Option<&NonTensor> {
        match self {
            NonTensor::Stack(items) => items.get(index),
            _ => None,
        }
    }

    /// The elements of a stack; `None` for a single value.
    pub fn unbind(&self) -> Option<&[NonTensor]> {
        match self {
            NonTensor::Stack(items) => Some(items),
            _ => None,
        }
    }

    /// The integer, if this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            NonTensor::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// The integers of a stack of integers (as `env_index`).
    pub fn as_int_vec(&self) -> Option<Vec<i64>> {
        match self {
            NonTensor::Stack(items) => {
                // One allocation (collecting into an `Option<Vec>` knows no
                // length, so its vector grows by doubling).
                let mut ints = Vec::with_capacity(items.len());
                for item in items {
                    ints.push(item.as_int()?);
                }
                Some(ints)
            }
            _ => None,
        }
    }

    /// The name of the variant, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            NonTensor::Int(_) => "int",
            NonTensor::Float(_) => "float",
            NonTensor::Bool(_) => "bool",
            NonTensor::Str(_) => "str",
            NonTensor::Stack(_) => "stack",
        }
    }
}

impl Clone for NonTensor {
    fn clone(&self) -> NonTensor {
        match self {
            NonTensor::Int(v) => NonTensor::Int(*v),
            NonTensor::Float(v) => NonTensor::Float(*v),
            NonTensor::Bool(v) => NonTensor::Bool(*v),
            NonTensor::Str(v) => NonTensor::Str(v.clone()),
            NonTensor::Stack(items) => NonTensor::Stack(items.clone()),
        }
    }
}

impl fmt::Display for NonTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NonTensor::Int(v) => write!(f, "{v}"),
            NonTensor::Float(v) => write!(f, "{v:?}"),
            NonTensor::Bool(v) => write!(f, "{v}"),
            NonTensor::Str(v) => write!(f, "{v:?}"),
            NonTensor::Stack(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
        }
    }
}

impl From<i64> for NonTensor {
    fn from(v: i64) -> Self {
        NonTensor::Int(v)
    }
}

impl From<f64> for NonTensor {
    fn from(v: f64) -> Self {
        NonTensor::Float(v)
    }
}

impl From<bool> for NonTensor {
    fn from(v: bool) -> Self {
        NonTensor::Bool(v)
    }
}

impl From<&str> for NonTensor {
    fn from(v: &str) -> Self {
        NonTensor::Str(v.to_owned())
    }
}

impl From<String> for NonTensor {
    fn from(v: String) -> Self {
        NonTensor::Str(v)
    }
}

impl<T: Into<NonTensor>> From<Vec<T>> for NonTensor {
    fn from(items: Vec<T>) -> Self {
        NonTensor::Stack(items.into_iter().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clone equals its original, for every kind of value and for
    /// stacks of mixed and nested values.
    #[test]
    fn a_clone_is_equal() {
        let values = [
            NonTensor::Int(-3),
            NonTensor::Float(0.5),
            NonTensor::Bool(true),
            NonTensor::from("é"),
            NonTensor::Stack(Default::default()),
            NonTensor::from(vec![0i64, 1, 2]),
            NonTensor::Stack(
                vec![
                    NonTensor::Int(1),
                    NonTensor::Float(2.0),
                    NonTensor::Bool(false),
                    NonTensor::from("s"),
                    NonTensor::from(vec![NonTensor::Int(4)]),
                ]
                .into(),
            ),
        ];
        for value in values {
            assert_eq!(value.clone(), value);
        }
    }

    /// `shape_starts_with` agrees with `shape().starts_with` on values,
    /// stacks, nested stacks and ragged stacks, for prefixes of every depth.
    #[test]
    fn shape_prefixes_agree_with_the_shape() {
        let int = NonTensor::Int(1);
        let pair = NonTensor::Stack(vec![int.clone(), int.clone()].into());
        let three = NonTensor::Stack(vec![int.clone(), int.clone(), int.clone()].into());
        let values = [
            int.clone(),
            pair.clone(),
            NonTensor::Stack(vec![pair.clone(), pair.clone()].into()),
            NonTensor::Stack(vec![pair.clone(), three.clone()].into()),
            NonTensor::Stack(vec![pair.clone(), int.clone()].into()),
            NonTensor::Stack(Default::default()),
            NonTensor::Stack(
                vec![
                    NonTensor::Stack(Default::default()),
                    NonTensor::Stack(Default::default()),
                ]
                .into(),
            ),
        ];
        let prefixes: [&[usize]; 9] = [
            &[],
            &[2],
            &[3],
            &[0],
            &[0, 1],
            &[2, 2],
            &[2, 3],
            &[2, 0],
            &[2, 2, 1],
        ];
        for value in &values {
            for prefix in prefixes {
                assert_eq!(
                    value.shape_starts_with(prefix),
                    value.shape().starts_with(prefix),
                    "{value:?} {prefix:?}"
                );
            }
        }
    }

    #[test]
    fn shapes_of_values_and_stacks() {
        assert!(NonTensor::from("a").shape().is_empty());
        let nested = NonTensor::from(vec![vec![1i64, 2], vec![3, 4], vec![5, 6]]);
        assert_eq!(nested.shape().as_slice(), &[3, 2]);
        let ragged = NonTensor::from(vec![vec![1i64], vec![3, 4]]);
        assert_eq!(ragged.shape().as_slice(), &[2]);
        let partly = NonTensor::from(vec![vec![vec![1i64], vec![2]], vec![vec![3, 4], vec![5]]]);
        assert_eq!(partly.shape().as_slice(), &[2, 2]);
        assert_eq!(nested.to_string(), "[[1, 2], [3, 4], [5, 6]]");
        assert_eq!(NonTensor::Int(3).index(0), None);
    }
}
