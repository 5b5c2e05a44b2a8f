//! Containment: `check` (is a value in the spec? if not, an error naming the
//! key and what is wrong) and `is_in`.

use tensordict::{Entry, NestedKey, NonTensor, Tensor, TensorDict};

use crate::elements::{invalid_bool, slice, with_scalar, Scalar};
use crate::sample::nvec_at;
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

/// Why an element of a tensor is outside the spec's domain, before it is
/// placed (in a stack, the env and the index within the env's row are only
/// known to the caller).
enum Fault {
    /// An element outside `[low, high]`.
    Bounds {
        value: String,
        low: String,
        high: String,
    },
    /// An element of a one-hot value that is neither 0 nor 1.
    NotBinary { value: String },
    /// A one-hot row (starting at the fault's element index) with `ones`
    /// elements set.
    Ones { ones: usize },
}

/// The first element outside the domain: its row-major index and why.
type Found = Option<(usize, Fault)>;

/// Every element within its per-element bounds (NaN never is).
fn check_bounds<T: Scalar>(
    value: &Tensor,
    low: &Tensor,
    high: &Tensor,
) -> Result<Found, SpecError> {
    let bounds = slice::<T>(low)?.iter().zip(slice::<T>(high)?);
    Ok(slice::<T>(value)?
        .iter()
        .zip(bounds)
        .enumerate()
        .find(|(_, (&v, (&lo, &hi)))| !(v >= lo && v <= hi))
        .map(|(index, (v, (lo, hi)))| {
            (
                index,
                Fault::Bounds {
                    value: v.to_string(),
                    low: lo.to_string(),
                    high: hi.to_string(),
                },
            )
        }))
}

/// Element `i` in `0..n_of(i)`.
fn check_categories<T: Scalar>(
    value: &Tensor,
    n_of: impl Fn(usize) -> i64,
) -> Result<Found, SpecError> {
    Ok(slice::<T>(value)?
        .iter()
        .enumerate()
        .find(|&(index, v)| !(0..n_of(index)).contains(&v.to_i64()))
        .map(|(index, v)| {
            (
                index,
                Fault::Bounds {
                    value: v.to_string(),
                    low: "0".into(),
                    high: n_of(index).saturating_sub(1).to_string(),
                },
            )
        }))
}

/// Zeros and ones, exactly one 1 per row of `n`.
fn check_one_hot<T: Scalar>(value: &Tensor, n: usize) -> Result<Found, SpecError> {
    let values = slice::<T>(value)?;
    if let Some((index, v)) = values
        .iter()
        .enumerate()
        .find(|(_, v)| !(0..=1).contains(&v.to_i64()))
    {
        let value = v.to_string();
        return Ok(Some((index, Fault::NotBinary { value })));
    }
    let n = n.max(1);
    Ok(values
        .chunks_exact(n)
        .enumerate()
        .map(|(row, chunk)| (row, chunk.iter().filter(|v| v.to_i64() == 1).count()))
        .find(|&(_, ones)| ones != 1)
        .map(|(row, ones)| (row.saturating_mul(n), Fault::Ones { ones })))
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
        self.check_in(key, value, false)
    }

    /// [`TensorSpec::check`]; with `batched` (a leaf of a composite with a
    /// batch shape, whose dim 0 is the env of a dense stack), an element
    /// outside the domain is named by its env (row along dim 0) and its
    /// index within that row.
    pub(crate) fn check_in(
        &self,
        key: &NestedKey,
        value: &Entry,
        batched: bool,
    ) -> Result<(), SpecError> {
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
        let Some((index, fault)) = self.element_fault(tensor)? else {
            return Ok(());
        };
        // The env of a dense stack: element `index` is in row
        // `index / row_len` along dim 0 (unless dim 0 is also a one-hot
        // dim, whose rows would span envs).
        let one_hot_dim0 = matches!(self, TensorSpec::OneHot(_)) && shape.len() < 2;
        let row_len = match (batched && !one_hot_dim0, shape.first()) {
            (true, Some(&rows)) => tensor.numel().checked_div(rows).filter(|&len| len > 0),
            _ => None,
        };
        let (env, index) = match row_len {
            Some(len) => (Box::from([index / len]), index % len),
            None => (Box::default(), index),
        };
        let mismatch = match fault {
            Fault::Bounds { value, low, high } => Mismatch::OutOfBounds {
                index,
                value,
                low,
                high,
            },
            Fault::NotBinary { value } => Mismatch::NotOneHot {
                reason: format!("element {index} is {value}, not 0 or 1"),
            },
            Fault::Ones { ones } => {
                let n = shape.last().copied().unwrap_or(1).max(1);
                Mismatch::NotOneHot {
                    reason: format!("row {} has {ones} elements set, not exactly one", index / n),
                }
            }
        };
        Err(SpecError::NotContained {
            key: key.clone(),
            env,
            mismatch,
        })
    }

    /// The first element of `tensor` (of the spec's shape and dtype) outside
    /// the spec's domain, if any. A bool byte other than 0 or 1 is outside
    /// every domain (even unbounded: it is not a bool).
    fn element_fault(&self, tensor: &Tensor) -> Result<Found, SpecError> {
        if let Some((index, byte)) = invalid_bool(tensor) {
            let value = format!("byte {byte}");
            let fault = match self {
                TensorSpec::OneHot(_) => Fault::NotBinary { value },
                _ => Fault::Bounds {
                    value,
                    low: "0".into(),
                    high: "1".into(),
                },
            };
            return Ok(Some((index, fault)));
        }
        match self {
            TensorSpec::Bounded(s) => {
                with_scalar!(s.dtype(), T => check_bounds::<T>(tensor, &s.low, &s.high))
            }
            TensorSpec::Categorical(s) => {
                with_scalar!(s.dtype, T => check_categories::<T>(tensor, |_| s.n))
            }
            TensorSpec::Binary(s) => {
                with_scalar!(s.dtype, T => check_categories::<T>(tensor, |_| 2))
            }
            TensorSpec::MultiCategorical(s) => {
                let nvec = &s.nvec;
                with_scalar!(s.dtype, T => check_categories::<T>(tensor, |i| nvec_at(nvec, i)))
            }
            TensorSpec::OneHot(s) => {
                let n = s.shape.last().copied().unwrap_or(1);
                with_scalar!(s.dtype, T => check_one_hot::<T>(tensor, n))
            }
            _ => Ok(None),
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
            part.check(key, &row).map_err(|err| err.in_env(index))?;
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
                // A leaf's dim 0 is this composite's batch dim 0: the env,
                // in a dense stack. Composites and stacks name their own.
                Some(value) => spec.check_in(&key, value, !self.shape().is_empty())?,
                None => {
                    let nothing_to_check =
                        spec.as_composite().is_some_and(|c| c.leaves().is_empty());
                    if !nothing_to_check {
                        return Err(SpecError::MissingKey {
                            key,
                            env: Box::default(),
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
    /// A bool tensor whose element `index` holds `byte` (possible through
    /// `Tensor::bytes_mut`).
    fn bad_bool(shape: &[usize], index: usize, byte: u8) -> Entry {
        let mut tensor = Tensor::zeros(DType::Bool, shape);
        tensor.bytes_mut()[index] = byte;
        Entry::Tensor(tensor)
    }

    #[test]
    fn a_bool_byte_other_than_0_or_1_is_not_contained() {
        let binary = TensorSpec::binary(&[1], DType::Bool).unwrap();
        let err = binary
            .check(&key("done"), &bad_bool(&[1], 0, 2))
            .unwrap_err();
        assert!(matches!(err, SpecError::NotContained { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            r#"value at key "done" is out of bounds: element 0 is byte 2, outside [0, 1]"#
        );
        let categorical = TensorSpec::categorical(&[3], DType::Bool, 2).unwrap();
        assert_eq!(
            message(&categorical, &bad_bool(&[3], 2, 255)),
            r#"value at key "x" is out of bounds: element 2 is byte 255, outside [0, 1]"#
        );
        // Not a bool at all, so not even in an unbounded bool spec.
        let unbounded = TensorSpec::unbounded(&[3], DType::Bool);
        assert!(message(&unbounded, &bad_bool(&[3], 1, 9)).contains("element 1 is byte 9"));
        let one_hot = TensorSpec::one_hot(&[2, 2], DType::Bool).unwrap();
        assert_eq!(
            message(&one_hot, &bad_bool(&[2, 2], 3, 2)),
            r#"value at key "x" is not one-hot: element 3 is byte 2, not 0 or 1"#
        );
        // In a composite and in a stack, too.
        let spec = Composite::new(&[])
            .with(("next", "done"), binary.clone())
            .unwrap();
        let mut td = TensorDict::new(&[]);
        td.set(("next", "done"), bad_bool(&[1], 0, 3)).unwrap();
        assert!(spec
            .check(&td)
            .unwrap_err()
            .to_string()
            .contains(r#"("next", "done") is out of bounds: element 0 is byte 3"#));
        let stacked = TensorSpec::lazy_stack(vec![
            binary.clone(),
            TensorSpec::unbounded(&[1], DType::Bool),
        ])
        .unwrap();
        assert!(message(&stacked, &bad_bool(&[2, 1], 1, 2)).contains("env 1: is out of bounds"));
    }

    #[test]
    fn lazy_stack_errors_name_the_env() {
        let stacked = TensorSpec::lazy_stack(vec![
            TensorSpec::categorical(&[], DType::I64, 2).unwrap(),
            TensorSpec::categorical(&[], DType::I64, 5).unwrap(),
        ])
        .unwrap();
        let err = stacked
            .check(&key("action"), &t(&[2], vec![0i64, 5]))
            .unwrap_err();
        assert!(
            matches!(&err, SpecError::NotContained { env, .. } if **env == [1]),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            r#"value at key "action", env 1: is out of bounds: element 0 is 5, outside [0, 4]"#
        );
        // A stack of composites (other keys): the nested key and the env.
        let a = Composite::new(&[])
            .with("obs", TensorSpec::unbounded(&[4], DType::F32))
            .unwrap();
        let b = Composite::new(&[])
            .with("obs", TensorSpec::unbounded(&[3], DType::F32))
            .unwrap()
            .with("extra", TensorSpec::unbounded(&[], DType::F32))
            .unwrap();
        let stacked = TensorSpec::lazy_stack(vec![a.clone().into(), b.into()]).unwrap();
        assert_eq!(stacked.kind(), "stacked");
        // Both rows hold env 0's keys: env 1 lacks "extra".
        let mut td = TensorDict::new(&[2]);
        td.set("obs", Tensor::zeros(DType::F32, &[2, 4])).unwrap();
        let err = stacked.check(&key("env"), &Entry::Dict(td)).unwrap_err();
        assert!(
            matches!(&err, SpecError::MissingKey { env, .. } if **env == [1]),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            r#"key ("env", "extra") required by the spec is missing, env 1; keys present: [obs]"#
        );
        // A merged stack (same keys): the key and the env.
        let merged = TensorSpec::lazy_stack(vec![
            a.clone().into(),
            Composite::new(&[])
                .with(
                    "obs",
                    TensorSpec::bounded(&[4], DType::F32, -1.0, 1.0).unwrap(),
                )
                .unwrap()
                .into(),
        ])
        .unwrap();
        let Some(merged) = merged.as_composite() else {
            panic!("same keys: a composite")
        };
        let mut td = TensorDict::new(&[2]);
        td.set(
            "obs",
            Tensor::from_vec(&[2, 4], vec![9.0f32, 0.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0]).unwrap(),
        )
        .unwrap();
        assert_eq!(
            merged.check(&td).unwrap_err().to_string(),
            r#"value at key "obs", env 1: is out of bounds: element 2 is 3, outside [-1, 1]"#
        );
    }

    #[test]
    fn nested_stacks_name_every_env_outermost_first() {
        let inner = TensorSpec::lazy_stack(vec![
            TensorSpec::categorical(&[], DType::I64, 2).unwrap(),
            TensorSpec::categorical(&[], DType::I64, 3).unwrap(),
        ])
        .unwrap();
        let outer = TensorSpec::stack(&vec![inner; 2]).unwrap();
        let err = outer
            .check(&key("a"), &t(&[2, 2], vec![0i64, 0, 0, 3]))
            .unwrap_err();
        assert!(
            matches!(&err, SpecError::NotContained { env, .. } if **env == [1, 1]),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            r#"value at key "a", env [1, 1]: is out of bounds: element 0 is 3, outside [0, 2]"#
        );
    }

    #[test]
    fn dense_stack_errors_name_the_env_row() {
        let env = Composite::new(&[])
            .with(
                "action",
                TensorSpec::bounded(&[3], DType::F32, -2.0, 2.0).unwrap(),
            )
            .unwrap()
            .with("one_hot", TensorSpec::one_hot(&[2, 3], DType::U8).unwrap())
            .unwrap();
        let batch = Composite::stack(&vec![env.clone(); 2]).unwrap();
        let mut td = batch.zero();
        // Element 5 of the [2, 3] action is element 2 of env 1's row.
        td.set(
            "action",
            Tensor::from_vec(&[2, 3], vec![0.0f32, 0.0, 0.0, 0.0, 0.0, 3.5]).unwrap(),
        )
        .unwrap();
        let err = batch.check(&td).unwrap_err();
        assert!(
            matches!(
                &err,
                SpecError::NotContained {
                    env,
                    mismatch: Mismatch::OutOfBounds { index: 2, .. },
                    ..
                } if **env == [1]
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            r#"value at key "action", env 1: is out of bounds: element 2 is 3.5, outside [-2, 2]"#
        );
        // The same message as checking env 1's row against its own spec,
        // and as a lazy stack that holds that spec as a part.
        let row = entry_row(td.get("action").unwrap(), 1).unwrap();
        let alone = env
            .spec("action")
            .unwrap()
            .check(&key("action"), &row)
            .unwrap_err();
        assert_eq!(err, alone.in_env(1));
        // One-hot rows: row 3 of the [2, 2, 3] value is row 1 of env 1.
        td.set("action", Tensor::zeros(DType::F32, &[2, 3]))
            .unwrap();
        let mut hot = vec![0u8; 12];
        for row in [0, 1, 2] {
            hot[row * 3] = 1;
        }
        td.set("one_hot", Tensor::from_vec(&[2, 2, 3], hot).unwrap())
            .unwrap();
        assert_eq!(
            batch.check(&td).unwrap_err().to_string(),
            r#"value at key "one_hot", env 1: is not one-hot: row 1 has 0 elements set, not exactly one"#
        );
        // Checked on its own, a leaf does not know its dim 0 is an env.
        let leaf = TensorSpec::stack(&vec![env.spec("action").unwrap().clone(); 2]).unwrap();
        assert_eq!(
            message(&leaf, &t(&[2, 3], vec![0.0f32, 0.0, 0.0, 0.0, 0.0, 3.5])),
            r#"value at key "x" is out of bounds: element 5 is 3.5, outside [-2, 2]"#
        );
    }
}
