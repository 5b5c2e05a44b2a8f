//! Containment: `check` (is a value in the spec? if not, an error naming the
//! key and what is wrong) and `is_in`.

use tensordict::{Entry, NestedKey, NonTensor, Tensor, TensorDict};

use crate::elements::{slice, with_scalar, Scalar};
use crate::{Composite, Mismatch, SpecError, StackedSpec, TensorSpec};

/// The error for a value of the wrong entry kind.
fn wrong_entry(key: &NestedKey, expected: &'static str, value: &Entry) -> SpecError {
    SpecError::not_contained(
        key,
        Mismatch::Entry {
            expected,
            found: value.kind(),
        },
    )
}

/// True if `value` has exactly `shape`: a single value for `[]`, a stack of
/// `shape[0]` values of shape `shape[1..]` otherwise (an empty stack fits
/// any shape that starts with 0).
fn non_tensor_fits(value: &NonTensor, shape: &[usize]) -> bool {
    match (value, shape.split_first()) {
        (NonTensor::Stack(items), Some((&len, rest))) => {
            items.len() == len && items.iter().all(|item| non_tensor_fits(item, rest))
        }
        (NonTensor::Stack(_), None) | (_, Some(_)) => false,
        (_, None) => true,
    }
}

/// Every element within its per-element bounds (NaN never is).
fn check_bounds<T: Scalar>(
    key: &NestedKey,
    value: &Tensor,
    low: &Tensor,
    high: &Tensor,
) -> Result<(), SpecError> {
    let (lo, hi) = (slice::<T>(low), slice::<T>(high));
    for (index, &v) in slice::<T>(value).iter().enumerate() {
        if !(v >= lo[index] && v <= hi[index]) {
            return Err(SpecError::not_contained(
                key,
                Mismatch::OutOfBounds {
                    index,
                    value: v.to_string(),
                    low: lo[index].to_string(),
                    high: hi[index].to_string(),
                },
            ));
        }
    }
    Ok(())
}

/// Element `i` in `0..n_of(i)`.
fn check_categories<T: Scalar>(
    key: &NestedKey,
    value: &Tensor,
    n_of: impl Fn(usize) -> i64,
) -> Result<(), SpecError> {
    for (index, &v) in slice::<T>(value).iter().enumerate() {
        let n = n_of(index);
        if !(0..n).contains(&v.to_i64()) {
            return Err(SpecError::not_contained(
                key,
                Mismatch::OutOfBounds {
                    index,
                    value: v.to_string(),
                    low: "0".into(),
                    high: (n - 1).to_string(),
                },
            ));
        }
    }
    Ok(())
}

/// Zeros and ones, exactly one 1 per row of `n`.
fn check_one_hot<T: Scalar>(key: &NestedKey, value: &Tensor, n: usize) -> Result<(), SpecError> {
    let not_one_hot =
        |reason: String| SpecError::not_contained(key, Mismatch::NotOneHot { reason });
    let values = slice::<T>(value);
    if let Some((index, v)) = values
        .iter()
        .enumerate()
        .find(|(_, v)| !(0..=1).contains(&v.to_i64()))
    {
        return Err(not_one_hot(format!("element {index} is {v}, not 0 or 1")));
    }
    for (row, chunk) in values.chunks_exact(n.max(1)).enumerate() {
        let ones = chunk.iter().filter(|v| v.to_i64() == 1).count();
        if ones != 1 {
            return Err(not_one_hot(format!(
                "row {row} has {ones} elements set, not exactly one"
            )));
        }
    }
    Ok(())
}

/// Row `index` of a value along its dim 0, if it has one.
pub(crate) fn entry_row(value: &Entry, index: usize) -> Option<Entry> {
    match value {
        Entry::Tensor(t) => t.index(index).ok().map(Entry::Tensor),
        Entry::Dict(d) => d.index(index).ok().map(Entry::Dict),
        Entry::NonTensor(v) => v.index(index).cloned().map(Entry::NonTensor),
    }
}

/// The size of a value's dim 0, if it has one.
fn entry_len(value: &Entry) -> Option<usize> {
    match value {
        Entry::Tensor(t) => t.shape().first().copied(),
        Entry::Dict(d) => d.batch_size().first().copied(),
        Entry::NonTensor(v) => v.unbind().map(<[NonTensor]>::len),
    }
}

impl TensorSpec {
    /// Checks that `value` is in the spec; the error names `key` (pass the
    /// entry's key, or `NestedKey::default()` for `<root>`) and what is
    /// wrong: the kind of entry, then the shape and dtype, then the first
    /// element outside the domain (bounds, `0..n`, 0/1, one-hot rows).
    ///
    /// Unbounded specs hold every value of their shape and dtype (NaN
    /// included); bounded specs never hold NaN. A composite spec wants a
    /// [`Entry::Dict`] (see [`Composite::check`]); a stacked spec wants a
    /// value whose row `i` along dim 0 is in part `i`.
    ///
    /// ```
    /// use specs::TensorSpec;
    /// use tensordict::{DType, Entry, NestedKey, Tensor};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let spec = TensorSpec::bounded(&[1], DType::F32, -2.0, 2.0)?;
    /// let value = Entry::Tensor(Tensor::from_vec(&[1], vec![3.5f32])?);
    /// let err = spec.check(&NestedKey::from("action"), &value).unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     r#"value at key "action" is out of bounds: element 0 is 3.5, outside [-2, 2]"#
    /// );
    /// # Ok(()) }
    /// ```
    pub fn check(&self, key: &NestedKey, value: &Entry) -> Result<(), SpecError> {
        let tensor = match (self, value) {
            (TensorSpec::NonTensor(s), Entry::NonTensor(v)) => {
                return if non_tensor_fits(v, &s.shape) {
                    Ok(())
                } else {
                    Err(SpecError::not_contained(
                        key,
                        Mismatch::Shape {
                            expected: s.shape.to_vec(),
                            found: v.shape().to_vec(),
                        },
                    ))
                };
            }
            (TensorSpec::NonTensor(_), _) => return Err(wrong_entry(key, "non-tensor", value)),
            (TensorSpec::Composite(c), Entry::Dict(td)) => return c.check_at(key, td),
            (TensorSpec::Composite(_), _) => return Err(wrong_entry(key, "tensordict", value)),
            (TensorSpec::Stacked(s), _) => return s.check_at(key, value),
            (_, Entry::Tensor(t)) => t,
            (_, _) => return Err(wrong_entry(key, "tensor", value)),
        };
        let (shape, dtype) = (self.shape(), self.dtype());
        if let Some(dtype) = dtype.filter(|&d| d != tensor.dtype()) {
            return Err(SpecError::not_contained(
                key,
                Mismatch::DType {
                    expected: dtype,
                    found: tensor.dtype(),
                },
            ));
        }
        if tensor.shape() != shape.as_slice() {
            return Err(SpecError::not_contained(
                key,
                Mismatch::Shape {
                    expected: shape.to_vec(),
                    found: tensor.shape().to_vec(),
                },
            ));
        }
        match self {
            TensorSpec::Bounded(s) => {
                with_scalar!(s.dtype(), T => check_bounds::<T>(key, tensor, &s.low, &s.high))
            }
            TensorSpec::Categorical(s) => {
                with_scalar!(s.dtype, T => check_categories::<T>(key, tensor, |_| s.n))
            }
            TensorSpec::Binary(s) => {
                with_scalar!(s.dtype, T => check_categories::<T>(key, tensor, |_| 2))
            }
            TensorSpec::MultiCategorical(s) => {
                let nvec = &s.nvec;
                with_scalar!(s.dtype, T => check_categories::<T>(key, tensor, |i| nvec[i % nvec.len()]))
            }
            TensorSpec::OneHot(s) => {
                let n = s.shape.last().copied().unwrap_or(1);
                with_scalar!(s.dtype, T => check_one_hot::<T>(key, tensor, n))
            }
            _ => Ok(()),
        }
    }

    /// True if `value` is in the spec (see [`TensorSpec::check`] for why
    /// not).
    pub fn is_in(&self, value: &Entry) -> bool {
        self.check(&NestedKey::default(), value).is_ok()
    }
}

impl StackedSpec {
    pub(crate) fn check_at(&self, key: &NestedKey, value: &Entry) -> Result<(), SpecError> {
        if entry_len(value) != Some(self.len()) {
            return Err(SpecError::not_contained(
                key,
                Mismatch::Shape {
                    expected: self.shape().to_vec(),
                    found: value.shape().to_vec(),
                },
            ));
        }
        for (index, part) in self.parts().iter().enumerate() {
            let row = entry_row(value, index).ok_or_else(|| {
                SpecError::not_contained(
                    key,
                    Mismatch::Shape {
                        expected: self.shape().to_vec(),
                        found: value.shape().to_vec(),
                    },
                )
            })?;
            part.check(key, &row)?;
        }
        Ok(())
    }
}

impl Composite {
    /// Checks that every leaf of the spec is in `td` and holds a contained
    /// value, and that `td`'s batch size is the composite's shape. Keys of
    /// `td` that the spec does not have are allowed. The error names the
    /// nested key.
    ///
    /// ```
    /// use specs::{Composite, TensorSpec};
    /// use tensordict::{DType, Tensor, TensorDict};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let spec = Composite::new(&[])
    ///     .with(("next", "reward"), TensorSpec::unbounded(&[1], DType::F32))?;
    /// let mut td = TensorDict::new(&[]);
    /// td.set(("next", "reward"), Tensor::zeros(DType::F32, &[2]))?;
    /// assert_eq!(
    ///     spec.check(&td).unwrap_err().to_string(),
    ///     r#"value at key ("next", "reward") has shape [2] but the spec has shape [1]"#
    /// );
    /// # Ok(()) }
    /// ```
    pub fn check(&self, td: &TensorDict) -> Result<(), SpecError> {
        self.check_at(&NestedKey::default(), td)
    }

    /// True if `td` is in the spec (see [`Composite::check`]).
    pub fn is_in(&self, td: &TensorDict) -> bool {
        self.check(td).is_ok()
    }

    pub(crate) fn check_at(&self, prefix: &NestedKey, td: &TensorDict) -> Result<(), SpecError> {
        if td.batch_size() != self.shape() {
            return Err(SpecError::not_contained(
                prefix,
                Mismatch::BatchSize {
                    expected: self.shape().to_vec(),
                    found: td.batch_size().to_vec(),
                },
            ));
        }
        for (name, spec) in self.iter() {
            let key = prefix.child(name);
            match td.get(name) {
                Some(value) => spec.check(&key, value)?,
                None => {
                    let nothing_to_check =
                        spec.as_composite().is_some_and(|c| c.leaves().is_empty());
                    if !nothing_to_check {
                        return Err(SpecError::MissingKey {
                            key,
                            available: td.iter().map(|(k, _)| k.to_owned()).collect(),
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tensordict::DType;

    use super::*;

    fn key(k: &str) -> NestedKey {
        NestedKey::from(k)
    }

    fn t<T: tensordict::Element>(shape: &[usize], values: Vec<T>) -> Entry {
        Entry::Tensor(Tensor::from_vec(shape, values).unwrap())
    }

    fn message(spec: &TensorSpec, value: &Entry) -> String {
        let err = spec.check(&key("x"), value).unwrap_err();
        assert!(!spec.is_in(value));
        err.to_string()
    }

    #[test]
    fn shape_and_dtype_come_first() {
        let spec = TensorSpec::bounded(&[1], DType::F32, -2.0, 2.0).unwrap();
        let err = spec
            .check(
                &NestedKey::from(("next", "reward")),
                &t(&[2], vec![0.0f32; 2]),
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"value at key ("next", "reward") has shape [2] but the spec has shape [1]"#
        );
        assert_eq!(
            message(&spec, &t(&[1], vec![0.0f64])),
            r#"value at key "x" has dtype f64 but the spec has dtype f32"#
        );
        assert_eq!(
            message(&spec, &Entry::NonTensor(NonTensor::Int(1))),
            r#"value at key "x" is a non-tensor but the spec expects a tensor"#
        );
    }

    #[test]
    fn bounds_are_inclusive_and_exclude_nan() {
        let spec = TensorSpec::bounded(&[3], DType::F32, -2.0, 2.0).unwrap();
        assert!(spec.is_in(&t(&[3], vec![-2.0f32, 0.0, 2.0])));
        assert_eq!(
            message(&spec, &t(&[3], vec![0.0f32, 0.0, 3.5])),
            r#"value at key "x" is out of bounds: element 2 is 3.5, outside [-2, 2]"#
        );
        assert!(message(&spec, &t(&[3], vec![f32::NAN, 0.0, 0.0])).contains("element 0 is NaN"));
        let ints = TensorSpec::bounded(&[1], DType::I64, i64::MIN as f64, 0.0).unwrap();
        assert!(ints.is_in(&t(&[1], vec![i64::MIN])));
        assert!(!ints.is_in(&t(&[1], vec![1i64])));
    }

    #[test]
    fn unbounded_holds_everything_of_its_shape_and_dtype() {
        let spec = TensorSpec::unbounded(&[2], DType::F64);
        assert!(spec.is_in(&t(&[2], vec![f64::NAN, f64::INFINITY])));
        assert!(!spec.is_in(&t(&[2], vec![0.0f32, 0.0])));
    }

    #[test]
    fn categorical_binary_and_multi_categorical_domains() {
        let cat = TensorSpec::categorical(&[2], DType::I64, 3).unwrap();
        assert!(cat.is_in(&t(&[2], vec![0i64, 2])));
        assert_eq!(
            message(&cat, &t(&[2], vec![0i64, 3])),
            r#"value at key "x" is out of bounds: element 1 is 3, outside [0, 2]"#
        );
        assert!(!cat.is_in(&t(&[2], vec![-1i64, 0])));
        let done = TensorSpec::categorical(&[1], DType::Bool, 2).unwrap();
        assert!(done.is_in(&t(&[1], vec![true])));
        let bin = TensorSpec::binary(&[2], DType::U8).unwrap();
        assert!(bin.is_in(&t(&[2], vec![0u8, 1])));
        assert!(message(&bin, &t(&[2], vec![2u8, 1])).contains("element 0 is 2, outside [0, 1]"));
        let mc = TensorSpec::multi_categorical(&[2, 2], DType::I32, vec![2, 4]).unwrap();
        assert!(mc.is_in(&t(&[2, 2], vec![1i32, 3, 0, 0])));
        assert!(message(&mc, &t(&[2, 2], vec![0i32, 0, 2, 0]))
            .contains("element 2 is 2, outside [0, 1]"));
    }

    #[test]
    fn one_hot_rows_have_exactly_one_one() {
        let spec = TensorSpec::one_hot(&[2, 3], DType::I64).unwrap();
        assert!(spec.is_in(&t(&[2, 3], vec![0i64, 1, 0, 1, 0, 0])));
        assert_eq!(
            message(&spec, &t(&[2, 3], vec![0i64, 1, 0, 1, 1, 0])),
            r#"value at key "x" is not one-hot: row 1 has 2 elements set, not exactly one"#
        );
        assert!(message(&spec, &t(&[2, 3], vec![0i64, 2, 0, 1, 0, 0]))
            .contains("element 1 is 2, not 0 or 1"));
        assert!(!spec.is_in(&t(&[2, 3], vec![0i64; 6])));
    }

    #[test]
    fn non_tensors_are_checked_by_shape() {
        let spec = TensorSpec::non_tensor(&[2]);
        assert!(spec.is_in(&Entry::NonTensor(NonTensor::from(vec!["a", "b"]))));
        assert_eq!(
            message(&spec, &Entry::NonTensor(NonTensor::from("a"))),
            r#"value at key "x" has shape [] but the spec has shape [2]"#
        );
        assert!(message(&spec, &t(&[2], vec![0u8, 0])).contains("expects a non-tensor"));
        let empty = TensorSpec::non_tensor(&[0, 3]);
        assert!(empty.is_in(&empty.zero()));
        assert!(TensorSpec::non_tensor(&[]).is_in(&Entry::NonTensor(NonTensor::Float(1.0))));
    }

    #[test]
    fn composites_check_every_leaf_and_allow_extra_keys() {
        let spec = Composite::new(&[])
            .with(
                "action",
                TensorSpec::bounded(&[1], DType::F32, -2.0, 2.0).unwrap(),
            )
            .unwrap()
            .with(("next", "reward"), TensorSpec::unbounded(&[1], DType::F32))
            .unwrap();
        let mut td = TensorDict::new(&[]);
        td.set("action", Tensor::from_vec(&[1], vec![1.0f32]).unwrap())
            .unwrap();
        td.set("extra", Tensor::zeros(DType::U8, &[3])).unwrap();
        let err = spec.check(&td).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"key "next" required by the spec is missing; keys present: [action, extra]"#
        );
        td.set(("next", "done"), Tensor::zeros(DType::Bool, &[1]))
            .unwrap();
        let err = spec.check(&td).unwrap_err();
        assert!(matches!(err, SpecError::MissingKey { .. }));
        assert!(
            err.to_string().contains(r#"key ("next", "reward")"#),
            "{err}"
        );
        td.set(("next", "reward"), Tensor::zeros(DType::F32, &[1]))
            .unwrap();
        spec.check(&td).unwrap();
        assert!(spec.is_in(&td));
        let batched = TensorDict::new(&[2]);
        assert_eq!(
            spec.check(&batched).unwrap_err().to_string(),
            "value at key <root> has batch size [2] but the spec has shape []"
        );
        let as_entry = TensorSpec::Composite(spec.clone());
        assert!(as_entry.is_in(&Entry::Dict(td)));
        assert!(message(&as_entry, &t(&[1], vec![0u8])).contains("expects a tensordict"));
        // An empty nested composite requires nothing.
        let mut with_empty = spec.clone();
        with_empty.set("info", Composite::new(&[]).into()).unwrap();
        assert!(with_empty.is_in(&spec.zero()));
    }

    #[test]
    fn stacked_specs_check_each_row_against_its_part() {
        let stacked = TensorSpec::lazy_stack(vec![
            TensorSpec::categorical(&[], DType::I64, 2).unwrap(),
            TensorSpec::categorical(&[], DType::I64, 5).unwrap(),
        ])
        .unwrap();
        assert!(stacked.is_in(&t(&[2], vec![1i64, 4])));
        assert!(
            message(&stacked, &t(&[2], vec![2i64, 4])).contains("element 0 is 2, outside [0, 1]")
        );
        assert_eq!(
            message(&stacked, &t(&[3], vec![0i64; 3])),
            r#"value at key "x" has shape [3] but the spec has shape [2]"#
        );
        assert!(!stacked.is_in(&t(&[], vec![0i64])));
    }
}
