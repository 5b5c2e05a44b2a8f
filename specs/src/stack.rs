//! Stacking specs across envs along a new leading dim (dense: equal specs;
//! lazy: different specs kept as parts) and its inverse, `index`.

use std::collections::BTreeMap;

use tensordict::{NestedKey, Shape, Tensor};

use crate::elements::{non_tensor_bytes, prepend, tensor_bytes};
use crate::{Bounded, Composite, SpecError, StackedSpec, TensorSpec, MAX_VALUE_BYTES};

/// A one-line description of a spec for messages: its `Display`, or its
/// kind and shape for composites and stacks.
fn brief(spec: &TensorSpec) -> String {
    match spec {
        TensorSpec::Composite(c) => format!("composite(shape={:?})", c.shape()),
        TensorSpec::Stacked(s) => format!("stacked(shape={:?})", s.shape().as_slice()),
        leaf => leaf.to_string(),
    }
}

/// The first key under `key` at which `other` (env `index`, named by the
/// caller) differs from `first` (env 0), and how.
fn first_difference(
    key: &NestedKey,
    first: &TensorSpec,
    other: &TensorSpec,
) -> Option<(NestedKey, String)> {
    match (first, other) {
        (TensorSpec::Composite(a), TensorSpec::Composite(b)) => composite_difference(key, a, b),
        _ if first == other => None,
        _ => Some((
            key.clone(),
            format!("has {} but env 0 has {}", brief(other), brief(first)),
        )),
    }
}

/// As [`first_difference`], for composites: the shape, then the keys in
/// order.
fn composite_difference(
    key: &NestedKey,
    first: &Composite,
    other: &Composite,
) -> Option<(NestedKey, String)> {
    if first.shape() != other.shape() {
        return Some((
            key.clone(),
            format!(
                "has a composite of shape {:?} but env 0 has shape {:?}",
                other.shape(),
                first.shape()
            ),
        ));
    }
    let (a, b) = (first.entries(), other.entries());
    // The first key (in order) that only one of them has.
    let only_a = a.keys().find(|k| !b.contains_key(*k));
    let only_b = b.keys().find(|k| !a.contains_key(*k));
    let missing = match (only_a, only_b) {
        (Some(ka), Some(kb)) if kb < ka => Some((kb, false)),
        (Some(ka), _) => Some((ka, true)),
        (None, Some(kb)) => Some((kb, false)),
        (None, None) => None,
    };
    // `brief` of the spec at a key one of them has (it always does).
    let brief_of =
        |map: &BTreeMap<String, TensorSpec>, k: &str| map.get(k).map(brief).unwrap_or_default();
    for (name, spec_a) in a {
        if let Some((missing_key, in_first)) = missing {
            if missing_key <= name {
                let reason = if in_first {
                    format!("lacks this key (env 0 has {})", brief_of(a, missing_key))
                } else {
                    format!(
                        "has this key ({}) but env 0 does not",
                        brief_of(b, missing_key)
                    )
                };
                return Some((key.child(missing_key), reason));
            }
        }
        if let Some(spec_b) = b.get(name) {
            if let Some(diff) = first_difference(&key.child(name), spec_a, spec_b) {
                return Some(diff);
            }
        }
    }
    missing.map(|(missing_key, _)| {
        (
            key.child(missing_key),
            format!(
                "has this key ({}) but env 0 does not",
                brief_of(b, missing_key)
            ),
        )
    })
}

/// The shape without its dim 0, checking that `index` is in it and that at
/// least `min_ndim` dims are there (one-hot and multi-categorical specs keep
/// their last dim).
fn drop_dim0(
    key: &NestedKey,
    shape: &[usize],
    index: usize,
    min_ndim: usize,
) -> Result<Shape, SpecError> {
    let Some((&len, rest)) = shape.split_first() else {
        return Err(SpecError::NotIndexable {
            key: key.clone(),
            reason: "its shape is []".into(),
        });
    };
    if shape.len() < min_ndim {
        return Err(SpecError::NotIndexable {
            key: key.clone(),
            reason: format!("dim 0 of shape {shape:?} is its last dim, which it keeps"),
        });
    }
    if index >= len {
        return Err(SpecError::IndexOutOfRange {
            key: key.clone(),
            index,
            len,
        });
    }
    Ok(rest.into())
}

/// Lazily stacks `specs` (at least one, top-level checks done): dense where
/// they are equal, key by key for composites of one shape and one key set,
/// parts kept otherwise.
fn lazy(key: &NestedKey, specs: Vec<TensorSpec>) -> Result<TensorSpec, SpecError> {
    let n = specs.len();
    let Some(first) = specs.first() else {
        return Err(SpecError::EmptyStack);
    };
    if specs.iter().all(|s| s == first) {
        return first.expand_at(key, n);
    }
    let mergeable = match specs.first() {
        Some(TensorSpec::Composite(first)) => specs.iter().all(|s| {
            s.as_composite().is_some_and(|c| {
                c.shape() == first.shape() && c.entries().keys().eq(first.entries().keys())
            })
        }),
        _ => false,
    };
    if !mergeable {
        return Ok(TensorSpec::Stacked(StackedSpec::new(specs)?));
    }
    let mut shape = Shape::new();
    let mut maps: Vec<BTreeMap<String, TensorSpec>> = Vec::with_capacity(n);
    for spec in specs {
        if let TensorSpec::Composite(c) = spec {
            let (s, entries) = c.into_parts();
            shape = s;
            maps.push(entries);
        }
    }
    let names: Vec<String> = maps
        .first()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let mut entries = BTreeMap::new();
    for name in names {
        let parts: Vec<TensorSpec> = maps.iter_mut().filter_map(|m| m.remove(&name)).collect();
        let spec = lazy(&key.child(&name), parts)?;
        entries.insert(name, spec);
    }
    Ok(TensorSpec::Composite(Composite::from_parts(
        prepend(n, &shape),
        entries,
    )))
}

/// `[n]` before the shape of a leaf spec at `key`; an error naming the key
/// if a value of the stacked shape would have a size that overflows
/// `usize` (`dtype` `None` for a non-tensor), or for bounds (which stacking
/// copies) over [`MAX_VALUE_BYTES`].
fn stacked_shape(
    key: &NestedKey,
    n: usize,
    shape: &[usize],
    dtype: Option<tensordict::DType>,
    materialized: bool,
) -> Result<Shape, SpecError> {
    let stacked = prepend(n, shape);
    let bytes = match dtype {
        Some(dtype) => tensor_bytes(&stacked, dtype),
        None => non_tensor_bytes(&stacked),
    };
    let Some(bytes) = bytes else {
        return Err(SpecError::too_large(
            key,
            &stacked,
            format!("stacking {n} gives shape {stacked:?}, whose size overflows usize"),
        ));
    };
    if materialized && u64::try_from(bytes).map_or(true, |b| b > MAX_VALUE_BYTES) {
        return Err(SpecError::too_large(
            key,
            &stacked,
            format!(
                "stacking {n} gives bounds of shape {stacked:?} that would take {bytes} bytes \
                 each, more than MAX_VALUE_BYTES ({MAX_VALUE_BYTES})"
            ),
        ));
    }
    Ok(stacked)
}

impl TensorSpec {
    /// `n` copies of this spec (at `key`, for errors) stacked along a new
    /// leading dim; an error if the stacked shape is too large.
    pub(crate) fn expand_at(&self, key: &NestedKey, n: usize) -> Result<TensorSpec, SpecError> {
        let mut spec = self.clone();
        let dtype = self.dtype();
        let grow = |shape: &Shape| stacked_shape(key, n, shape, dtype, false);
        match &mut spec {
            TensorSpec::Unbounded(s) => s.shape = grow(&s.shape)?,
            TensorSpec::Bounded(s) => {
                stacked_shape(key, n, s.shape(), dtype, true)?;
                *s = Bounded {
                    low: Tensor::stack(&vec![s.low.clone(); n])?,
                    high: Tensor::stack(&vec![s.high.clone(); n])?,
                }
            }
            TensorSpec::Categorical(s) => s.shape = grow(&s.shape)?,
            TensorSpec::OneHot(s) => s.shape = grow(&s.shape)?,
            TensorSpec::Binary(s) => s.shape = grow(&s.shape)?,
            TensorSpec::MultiCategorical(s) => s.shape = grow(&s.shape)?,
            TensorSpec::NonTensor(s) => s.shape = grow(&s.shape)?,
            TensorSpec::Composite(c) => *c = c.expand_at(key, n)?,
            TensorSpec::Stacked(_) => {
                return Ok(TensorSpec::Stacked(StackedSpec::new(vec![
                    self.clone();
                    n
                ])?))
            }
        }
        Ok(spec)
    }

    /// Stacks equal specs (one per env) along a new leading dim: the result
    /// has the same kind, with `[specs.len()]` before its shape (bounds are
    /// stacked; a composite's shape and every entry's shape get the leading
    /// dim; equal stacked specs are stacked as parts).
    ///
    /// An error if `specs` is empty, or naming the first key and env that
    /// differ from env 0 (the key is `<root>` when the specs are leaves).
    ///
    /// ```
    /// use specs::TensorSpec;
    /// use tensordict::DType;
    /// # fn main() -> Result<(), specs::SpecError> {
    /// let reward = TensorSpec::unbounded(&[1], DType::F32);
    /// let batch = TensorSpec::stack(&vec![reward.clone(); 4])?;
    /// assert_eq!(batch.shape().as_slice(), &[4, 1]);
    /// assert_eq!(batch.index(3)?, reward);
    ///
    /// let other = TensorSpec::unbounded(&[2], DType::F32);
    /// let err = TensorSpec::stack(&[reward.clone(), reward, other]).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "cannot stack specs densely: at key <root>, env 2 has unbounded(shape=[2], dtype=f32) \
    ///      but env 0 has unbounded(shape=[1], dtype=f32)"
    /// );
    /// # Ok(()) }
    /// ```
    pub fn stack(specs: &[TensorSpec]) -> Result<TensorSpec, SpecError> {
        let first = specs.first().ok_or(SpecError::EmptyStack)?;
        for (index, spec) in specs.iter().enumerate().skip(1) {
            if let Some((key, reason)) = first_difference(&NestedKey::default(), first, spec) {
                return Err(SpecError::StackMismatch { key, index, reason });
            }
        }
        first.expand_at(&NestedKey::default(), specs.len())
    }

    /// Stacks specs that may differ (one per env) along a new leading dim:
    /// densely where they are equal; for composites of one shape and one set
    /// of keys, a composite stacked key by key (recursively); anything else
    /// that differs (leaves, nested composites of other shapes or keys, a
    /// mix of kinds) kept as a [`StackedSpec`] of the parts.
    ///
    /// An error if `specs` is empty, or if they are all composites but their
    /// shapes (the envs' batch sizes) differ.
    ///
    /// ```
    /// use specs::{Composite, TensorSpec};
    /// use tensordict::DType;
    /// # fn main() -> Result<(), specs::SpecError> {
    /// let env = |n: usize| -> Result<TensorSpec, specs::SpecError> {
    ///     Ok(Composite::new(&[])
    ///         .with("observation", TensorSpec::unbounded(&[n], DType::F32))?
    ///         .with("reward", TensorSpec::unbounded(&[1], DType::F32))?
    ///         .into())
    /// };
    /// let stacked = TensorSpec::lazy_stack(vec![env(4)?, env(3)?])?;
    /// let composite = stacked.as_composite().expect("same keys");
    /// assert_eq!(composite.shape(), &[2]);
    /// assert_eq!(composite.spec("reward")?.kind(), "unbounded"); // dense
    /// assert_eq!(composite.spec("observation")?.kind(), "stacked"); // parts kept
    /// assert_eq!(stacked.index(1)?, env(3)?);
    /// # Ok(()) }
    /// ```
    pub fn lazy_stack(specs: Vec<TensorSpec>) -> Result<TensorSpec, SpecError> {
        let Some(first) = specs.first() else {
            return Err(SpecError::EmptyStack);
        };
        if let TensorSpec::Composite(first) = first {
            for (index, spec) in specs.iter().enumerate().skip(1) {
                if let TensorSpec::Composite(c) = spec {
                    if c.shape() != first.shape() {
                        return Err(SpecError::StackShape {
                            index,
                            expected: first.shape().to_vec(),
                            found: c.shape().to_vec(),
                        });
                    }
                }
            }
        }
        lazy(&NestedKey::default(), specs)
    }

    /// One env's spec back from a stack: row `index` along dim 0 (the
    /// inverse of [`TensorSpec::stack`] and [`TensorSpec::lazy_stack`]).
    /// Bounds are indexed, a stacked spec gives part `index`, a composite
    /// indexes its shape and each entry.
    ///
    /// An error if `index` is out of range, or if the spec has no dim 0 to
    /// take (shape `[]`; the last dim of a one-hot or multi-categorical
    /// spec). The error names the key.
    pub fn index(&self, index: usize) -> Result<TensorSpec, SpecError> {
        self.index_at(&NestedKey::default(), index)
    }

    pub(crate) fn index_at(&self, key: &NestedKey, index: usize) -> Result<TensorSpec, SpecError> {
        let mut spec = self.clone();
        match &mut spec {
            TensorSpec::Unbounded(s) => s.shape = drop_dim0(key, &s.shape, index, 1)?,
            TensorSpec::Bounded(s) => {
                drop_dim0(key, s.shape(), index, 1)?;
                *s = Bounded {
                    low: s.low.index(index)?,
                    high: s.high.index(index)?,
                }
            }
            TensorSpec::Categorical(s) => s.shape = drop_dim0(key, &s.shape, index, 1)?,
            TensorSpec::OneHot(s) => s.shape = drop_dim0(key, &s.shape, index, 2)?,
            TensorSpec::Binary(s) => s.shape = drop_dim0(key, &s.shape, index, 1)?,
            TensorSpec::MultiCategorical(s) => s.shape = drop_dim0(key, &s.shape, index, 2)?,
            TensorSpec::NonTensor(s) => s.shape = drop_dim0(key, &s.shape, index, 1)?,
            TensorSpec::Composite(c) => *c = c.index_at(key, index)?,
            TensorSpec::Stacked(s) => {
                return s
                    .parts()
                    .get(index)
                    .cloned()
                    .ok_or_else(|| SpecError::IndexOutOfRange {
                        key: key.clone(),
                        index,
                        len: s.len(),
                    })
            }
        }
        Ok(spec)
    }
}

impl Composite {
    /// `n` copies of this composite (at `prefix`, for errors) stacked along
    /// a new leading dim.
    pub(crate) fn expand_at(&self, prefix: &NestedKey, n: usize) -> Result<Composite, SpecError> {
        let entries = self
            .entries()
            .iter()
            .map(|(name, spec)| Ok((name.clone(), spec.expand_at(&prefix.child(name), n)?)))
            .collect::<Result<_, SpecError>>()?;
        Ok(Composite::from_parts(prepend(n, self.shape()), entries))
    }

    /// Stacks equal composites (one per env) densely: the shape and every
    /// entry's shape get the leading dim `parts.len()`. An error if `parts`
    /// is empty, or naming the first key and env that differ from env 0,
    /// e.g. `cannot stack specs densely: at key "observation", env 2 has
    /// unbounded(shape=[3], dtype=f32) but env 0 has unbounded(shape=[4],
    /// dtype=f32)`.
    pub fn stack(parts: &[Composite]) -> Result<Composite, SpecError> {
        let first = parts.first().ok_or(SpecError::EmptyStack)?;
        for (index, part) in parts.iter().enumerate().skip(1) {
            if let Some((key, reason)) = composite_difference(&NestedKey::default(), first, part) {
                return Err(SpecError::StackMismatch { key, index, reason });
            }
        }
        first.expand_at(&NestedKey::default(), parts.len())
    }

    /// One env's composite back from a stacked one: its shape without dim 0
    /// and every entry indexed (see [`TensorSpec::index`]). The error names
    /// the key of an entry that cannot be indexed.
    pub fn index(&self, index: usize) -> Result<Composite, SpecError> {
        self.index_at(&NestedKey::default(), index)
    }

    pub(crate) fn index_at(
        &self,
        prefix: &NestedKey,
        index: usize,
    ) -> Result<Composite, SpecError> {
        let shape = drop_dim0(prefix, self.shape(), index, 1)?;
        let entries = self
            .entries()
            .iter()
            .map(|(name, spec)| Ok((name.clone(), spec.index_at(&prefix.child(name), index)?)))
            .collect::<Result<_, SpecError>>()?;
        Ok(Composite::from_parts(shape, entries))
    }
}

#[cfg(test)]
mod tests {
    use tensordict::DType;

    use super::*;

    fn env(obs: usize, high: f64) -> Composite {
        Composite::new(&[])
            .with("observation", TensorSpec::unbounded(&[obs], DType::F32))
            .unwrap()
            .with(
                "action",
                TensorSpec::bounded(&[1], DType::F32, -high, high).unwrap(),
            )
            .unwrap()
            .with(
                ("next", "done"),
                TensorSpec::categorical(&[1], DType::Bool, 2).unwrap(),
            )
            .unwrap()
    }

    #[test]
    fn dense_stacks_add_a_leading_dim_and_index_gives_it_back() {
        let spec = env(4, 2.0);
        let stacked = Composite::stack(&vec![spec.clone(); 3]).unwrap();
        assert_eq!(stacked.shape(), &[3]);
        assert_eq!(
            stacked.get("observation").unwrap().shape().as_slice(),
            &[3, 4]
        );
        assert_eq!(
            stacked.get(("next", "done")).unwrap().shape().as_slice(),
            &[3, 1]
        );
        let TensorSpec::Bounded(b) = stacked.get("action").unwrap() else {
            panic!("bounded")
        };
        assert_eq!(b.low().shape(), &[3, 1]);
        for i in 0..3 {
            assert_eq!(stacked.index(i).unwrap(), spec);
        }
        let as_spec = TensorSpec::stack(&vec![TensorSpec::Composite(spec.clone()); 2]).unwrap();
        assert_eq!(
            as_spec,
            TensorSpec::Composite(Composite::stack(&[spec.clone(), spec]).unwrap())
        );
    }

    #[test]
    fn dense_stack_errors_name_the_key_and_the_env() {
        let parts = [env(4, 2.0), env(4, 2.0), env(3, 2.0)];
        assert_eq!(
            Composite::stack(&parts).unwrap_err().to_string(),
            r#"cannot stack specs densely: at key "observation", env 2 has unbounded(shape=[3], dtype=f32) but env 0 has unbounded(shape=[4], dtype=f32)"#
        );
        let parts = [env(4, 2.0), env(4, 1.0)];
        assert_eq!(
            Composite::stack(&parts).unwrap_err().to_string(),
            r#"cannot stack specs densely: at key "action", env 1 has bounded(shape=[1], dtype=f32, low=-1, high=1) but env 0 has bounded(shape=[1], dtype=f32, low=-2, high=2)"#
        );
        let mut fewer = env(4, 2.0);
        fewer.remove(("next", "done"));
        let err = Composite::stack(&[env(4, 2.0), fewer.clone()]).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"cannot stack specs densely: at key ("next", "done"), env 1 lacks this key (env 0 has categorical(shape=[1], dtype=bool, n=2))"#
        );
        let err = Composite::stack(&[fewer, env(4, 2.0)]).unwrap_err();
        assert!(err
            .to_string()
            .ends_with(r#"at key ("next", "done"), env 1 has this key (categorical(shape=[1], dtype=bool, n=2)) but env 0 does not"#));
        let extra = env(4, 2.0)
            .with("zzz", TensorSpec::non_tensor(&[]))
            .unwrap();
        let err = Composite::stack(&[env(4, 2.0), extra]).unwrap_err();
        assert!(
            err.to_string()
                .contains(r#"at key "zzz", env 1 has this key"#),
            "{err}"
        );
        let err = Composite::stack(&[Composite::new(&[]), Composite::new(&[2])]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot stack specs densely: at key <root>, env 1 has a composite of shape [2] but env 0 has shape []"
        );
        let err = TensorSpec::stack(&[
            TensorSpec::Composite(env(4, 2.0)),
            TensorSpec::unbounded(&[], DType::F32),
        ])
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("but env 0 has composite(shape=[])"),
            "{err}"
        );
        assert!(matches!(Composite::stack(&[]), Err(SpecError::EmptyStack)));
        assert_eq!(
            TensorSpec::stack(&[]).unwrap_err().to_string(),
            "cannot stack an empty list of specs"
        );
    }

    #[test]
    fn lazy_stacks_keep_what_differs() {
        let envs = vec![
            TensorSpec::Composite(env(4, 2.0)),
            TensorSpec::Composite(env(3, 2.0)),
            TensorSpec::Composite(env(4, 1.0)),
        ];
        let stacked = TensorSpec::lazy_stack(envs.clone()).unwrap();
        let c = stacked.as_composite().unwrap();
        assert_eq!(c.shape(), &[3]);
        assert_eq!(c.spec(("next", "done")).unwrap().kind(), "categorical");
        assert_eq!(c.spec("observation").unwrap().kind(), "stacked");
        assert_eq!(c.spec("observation").unwrap().shape().as_slice(), &[3]);
        assert_eq!(c.spec("action").unwrap().kind(), "stacked");
        assert_eq!(c.spec("action").unwrap().shape().as_slice(), &[3, 1]);
        for (i, spec) in envs.iter().enumerate() {
            assert_eq!(&stacked.index(i).unwrap(), spec);
        }
        // Equal specs stack exactly as a dense stack.
        let same = vec![TensorSpec::Composite(env(4, 2.0)); 2];
        assert_eq!(
            TensorSpec::lazy_stack(same.clone()).unwrap(),
            TensorSpec::stack(&same).unwrap()
        );
        // Other key sets: the composites are kept as parts.
        let mut fewer = env(4, 2.0);
        fewer.remove("action");
        let parts = vec![
            TensorSpec::Composite(env(4, 2.0)),
            TensorSpec::Composite(fewer),
        ];
        let stacked = TensorSpec::lazy_stack(parts.clone()).unwrap();
        assert_eq!(stacked.kind(), "stacked");
        assert_eq!(stacked.index(1).unwrap(), parts[1]);
        // Leaves of different kinds.
        let mixed = TensorSpec::lazy_stack(vec![
            TensorSpec::unbounded(&[], DType::F32),
            TensorSpec::non_tensor(&[]),
        ])
        .unwrap();
        assert_eq!(mixed.kind(), "stacked");
    }

    #[test]
    fn lazy_stacks_need_one_batch_shape() {
        let err = TensorSpec::lazy_stack(vec![
            TensorSpec::Composite(Composite::new(&[2])),
            TensorSpec::Composite(Composite::new(&[2])),
            TensorSpec::Composite(Composite::new(&[3])),
        ])
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot stack specs: env 2 has shape [3] but env 0 has shape [2]"
        );
        assert!(matches!(
            TensorSpec::lazy_stack(vec![]),
            Err(SpecError::EmptyStack)
        ));
    }

    #[test]
    fn stacking_stacks_nests_them() {
        let ragged = TensorSpec::lazy_stack(vec![
            TensorSpec::unbounded(&[4], DType::F32),
            TensorSpec::unbounded(&[3], DType::F32),
        ])
        .unwrap();
        let twice = TensorSpec::stack(&vec![ragged.clone(); 2]).unwrap();
        assert_eq!(twice.shape().as_slice(), &[2, 2]);
        assert_eq!(twice.index(1).unwrap(), ragged);
    }

    #[test]
    fn stacks_whose_size_overflows_are_errors_naming_the_key() {
        // The element count of one env fits; that of two does not.
        let big = TensorSpec::try_unbounded(&[usize::MAX / 2 + 1], DType::U8).unwrap();
        let err = TensorSpec::stack(&[big.clone(), big.clone()]).unwrap_err();
        assert!(matches!(err, SpecError::TooLarge { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "spec at key <root> is too large: stacking 2 gives shape [2, 9223372036854775808], \
             whose size overflows usize"
        );
        let env = Composite::new(&[]).with("obs", big.clone()).unwrap();
        let err = Composite::stack(&[env.clone(), env.clone()]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(r#"spec at key "obs" is too large"#),
            "{err}"
        );
        let err = TensorSpec::lazy_stack(vec![env.clone().into(), env.into()]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(r#"spec at key "obs" is too large"#),
            "{err}"
        );
        // One env's values take half the address space; two overflow it.
        let node = std::mem::size_of::<tensordict::NonTensor>();
        let nt = TensorSpec::try_non_tensor(&[usize::MAX / (2 * node) + 1]).unwrap();
        assert!(TensorSpec::stack(&[nt.clone(), nt]).is_err());
        for spec in [
            TensorSpec::categorical(&[usize::MAX / 2 + 1], DType::U8, 2).unwrap(),
            TensorSpec::binary(&[usize::MAX / 2 + 1], DType::U8).unwrap(),
            TensorSpec::one_hot(&[usize::MAX / 2 + 1], DType::U8).unwrap(),
            TensorSpec::multi_categorical(&[usize::MAX / 4 + 1, 2], DType::U8, vec![2, 2]).unwrap(),
        ] {
            assert!(
                matches!(
                    TensorSpec::stack(&[spec.clone(), spec.clone()]),
                    Err(SpecError::TooLarge { .. })
                ),
                "{spec}"
            );
        }
        // Stacked bounds are copied, so they are capped as values are.
        let err = stacked_shape(&NestedKey::from("a"), 1 << 32, &[2], Some(DType::F64), true)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"spec at key "a" is too large: stacking 4294967296 gives bounds of shape [4294967296, 2] that would take 68719476736 bytes each, more than MAX_VALUE_BYTES (17179869184)"#
        );
        assert!(stacked_shape(
            &NestedKey::from("a"),
            1 << 32,
            &[2],
            Some(DType::F64),
            false
        )
        .is_ok());
    }

    #[test]
    fn index_errors_name_the_key() {
        let scalar = TensorSpec::unbounded(&[], DType::F32);
        assert_eq!(
            scalar.index(0).unwrap_err().to_string(),
            "cannot index the spec at key <root> along dimension 0: its shape is []"
        );
        let oh = TensorSpec::one_hot(&[3], DType::Bool).unwrap();
        assert_eq!(
            oh.index(0).unwrap_err().to_string(),
            "cannot index the spec at key <root> along dimension 0: dim 0 of shape [3] is its last dim, which it keeps"
        );
        let mc = TensorSpec::multi_categorical(&[2, 2], DType::I64, vec![2, 3]).unwrap();
        assert_eq!(mc.index(1).unwrap().shape().as_slice(), &[2]);
        let batched = Composite::new(&[2])
            .with("obs", TensorSpec::unbounded(&[2, 3], DType::F32))
            .unwrap();
        assert_eq!(
            batched.index(2).unwrap_err().to_string(),
            "index 2 is out of range for dimension 0 of size 2 (spec at key <root>)"
        );
        let bad = Composite::new(&[3]).with("action", oh.clone()).unwrap();
        let err = bad.index(0).unwrap_err();
        assert!(err.to_string().contains(r#"at key "action""#), "{err}");
        assert!(Composite::new(&[]).index(0).is_err());
        let ragged = TensorSpec::lazy_stack(vec![
            TensorSpec::unbounded(&[4], DType::F32),
            TensorSpec::unbounded(&[3], DType::F32),
        ])
        .unwrap();
        assert!(matches!(
            ragged.index(2),
            Err(SpecError::IndexOutOfRange {
                index: 2,
                len: 2,
                ..
            })
        ));
        let b = TensorSpec::bounded(&[2], DType::I32, 0.0, 5.0).unwrap();
        assert_eq!(
            b.index(1).unwrap(),
            TensorSpec::bounded(&[], DType::I32, 0.0, 5.0).unwrap()
        );
        assert!(matches!(b.index(2), Err(SpecError::IndexOutOfRange { .. })));
    }
}
