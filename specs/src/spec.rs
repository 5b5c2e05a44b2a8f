//! `TensorSpec`, the spec of one entry, with its leaf kinds (`Unbounded`,
//! `Bounded`, `Categorical`, `OneHot`, `Binary`, `MultiCategorical`,
//! `NonTensorSpec`), their constructors and accessors.

use tensordict::{DType, Element, Shape, Tensor};

use crate::elements::{
    int_range, non_tensor_bytes, numel, slice, tensor_bytes, with_scalar, Scalar,
};
use crate::{Composite, SpecError, StackedSpec, MAX_VALUE_BYTES};

/// The spec of one entry of an env's input or output: its shape, dtype and
/// domain, as TorchRL's `torchrl.data.tensor_specs`.
///
/// Leaves describe tensors (or non-tensor values); [`Composite`] describes a
/// tensordict; [`StackedSpec`] keeps the parts of a heterogeneous (lazy)
/// stack. Build leaves with the constructors ([`TensorSpec::bounded`], ...),
/// which check the spec is valid, so every spec that exists can be sampled.
///
/// ```
/// use specs::TensorSpec;
/// use tensordict::DType;
/// # fn main() -> Result<(), specs::SpecError> {
/// let action = TensorSpec::bounded(&[1], DType::F32, -2.0, 2.0)?;
/// assert_eq!(action.to_string(), "bounded(shape=[1], dtype=f32, low=-2, high=2)");
/// assert_eq!(action.shape().as_slice(), &[1]);
/// assert!(TensorSpec::categorical(&[], DType::I64, 0).is_err()); // n == 0
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum TensorSpec {
    /// Any value of the shape and dtype.
    Unbounded(Unbounded),
    /// Values between per-element bounds (inclusive).
    Bounded(Bounded),
    /// Integers in `0..n`.
    Categorical(Categorical),
    /// One-hot rows: along the last dim (of size `n`), exactly one element
    /// is 1.
    OneHot(OneHot),
    /// Zeros and ones.
    Binary(Binary),
    /// Integers where `value[..., i]` is in `0..nvec[i]`.
    MultiCategorical(MultiCategorical),
    /// Non-tensor values ([`tensordict::NonTensor`]) of the shape.
    NonTensor(NonTensorSpec),
    /// A tensordict: a spec per key and a batch shape.
    Composite(Composite),
    /// A heterogeneous (lazy) stack: one spec per env, kept as they are.
    Stacked(StackedSpec),
}

/// The spec of any tensor of a shape and dtype (TorchRL's `Unbounded`).
#[derive(Clone, Debug, PartialEq)]
pub struct Unbounded {
    pub(crate) shape: Shape,
    pub(crate) dtype: DType,
}

impl Unbounded {
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
}

/// The spec of a float or integer tensor whose elements lie between
/// per-element bounds, inclusive (TorchRL's `Bounded`).
///
/// The bounds are tensors of the spec's shape and dtype; `low <= high`
/// everywhere, no bound is NaN (float bounds may be infinite).
#[derive(Clone, Debug, PartialEq)]
pub struct Bounded {
    pub(crate) low: Tensor,
    pub(crate) high: Tensor,
}

impl Bounded {
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        self.low.shape()
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.low.dtype()
    }

    /// The lower bounds, one per element.
    pub fn low(&self) -> &Tensor {
        &self.low
    }

    /// The upper bounds, one per element.
    pub fn high(&self) -> &Tensor {
        &self.high
    }
}

/// The spec of an integer (or bool, for `n <= 2`) tensor whose elements are
/// in `0..n` (TorchRL's `Categorical`).
#[derive(Clone, Debug, PartialEq)]
pub struct Categorical {
    pub(crate) shape: Shape,
    pub(crate) dtype: DType,
    pub(crate) n: i64,
}

impl Categorical {
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The number of categories: values are in `0..n`.
    pub fn n(&self) -> i64 {
        self.n
    }
}

/// The spec of a one-hot bool or integer tensor: along the last dim (of
/// size `n`) exactly one element is 1, the others 0 (TorchRL's `OneHot`).
#[derive(Clone, Debug, PartialEq)]
pub struct OneHot {
    pub(crate) shape: Shape,
    pub(crate) dtype: DType,
    pub(crate) n: i64,
}

impl OneHot {
    /// The shape (its last dim is `n`).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The number of categories (the last dim).
    pub fn n(&self) -> i64 {
        self.n
    }
}

/// The spec of a bool or integer tensor of zeros and ones (TorchRL's
/// `Binary`).
#[derive(Clone, Debug, PartialEq)]
pub struct Binary {
    pub(crate) shape: Shape,
    pub(crate) dtype: DType,
}

impl Binary {
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
}

/// The spec of an integer tensor whose last dim holds one category per
/// element of `nvec`: `value[..., i]` is in `0..nvec[i]` (TorchRL's
/// `MultiCategorical`).
#[derive(Clone, Debug, PartialEq)]
pub struct MultiCategorical {
    pub(crate) shape: Shape,
    pub(crate) dtype: DType,
    pub(crate) nvec: Vec<i64>,
}

impl MultiCategorical {
    /// The shape (its last dim is `nvec.len()`).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The number of categories of each element of the last dim.
    pub fn nvec(&self) -> &[i64] {
        &self.nvec
    }
}

/// The spec of a non-tensor value ([`tensordict::NonTensor`]) of a shape:
/// a single value for shape `[]`, nested stacks otherwise. Any value of the
/// shape is contained.
#[derive(Clone, Debug, PartialEq)]
pub struct NonTensorSpec {
    pub(crate) shape: Shape,
}

impl NonTensorSpec {
    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
}

/// The size in bytes of a tensor of the shape and dtype; an error naming
/// the shape if its element count or byte size overflows `usize`.
fn check_size(kind: &'static str, shape: &[usize], dtype: DType) -> Result<usize, SpecError> {
    tensor_bytes(shape, dtype).ok_or_else(|| {
        SpecError::invalid(
            kind,
            format!("shape {shape:?} of dtype {dtype} is too large: its size overflows usize"),
        )
    })
}

/// An error unless `dtype` holds every value of `0..n` (integer dtypes, or
/// bool for `n <= 2`).
fn check_categories(kind: &'static str, dtype: DType, n: i64) -> Result<(), SpecError> {
    let Some((_, max)) = int_range(dtype) else {
        return Err(SpecError::invalid(
            kind,
            format!("needs an integer or bool dtype, got {dtype}"),
        ));
    };
    if n < 1 {
        return Err(SpecError::invalid(
            kind,
            format!("n must be at least 1, got {n}"),
        ));
    }
    if n - 1 > max {
        return Err(SpecError::invalid(
            kind,
            format!("n = {n} does not fit dtype {dtype}, whose largest value is {max}"),
        ));
    }
    Ok(())
}

/// Checks per-element bounds of one dtype and shape: no NaN, `low <= high`.
fn check_bound_values<T: Scalar>(low: &Tensor, high: &Tensor) -> Result<(), SpecError> {
    for (index, (&lo, &hi)) in slice::<T>(low)?.iter().zip(slice::<T>(high)?).enumerate() {
        if lo.to_f64().is_nan() || hi.to_f64().is_nan() {
            return Err(SpecError::invalid(
                "bounded",
                format!("element {index}: the bounds must not be NaN (low {lo}, high {hi})"),
            ));
        }
        if lo > hi {
            return Err(SpecError::invalid(
                "bounded",
                format!("element {index}: low {lo} is greater than high {hi}"),
            ));
        }
    }
    Ok(())
}

impl TensorSpec {
    /// The spec of any tensor of this shape and dtype.
    ///
    /// # Panics
    /// If the shape's element count or size in bytes overflows `usize`
    /// (no tensor has such a shape). For shapes that come from outside, use
    /// [`TensorSpec::try_unbounded`].
    pub fn unbounded(shape: &[usize], dtype: DType) -> TensorSpec {
        TensorSpec::try_unbounded(shape, dtype).unwrap_or_else(|err| panic!("{err}"))
    }

    /// [`TensorSpec::unbounded`], with an error ([`SpecError::Invalid`],
    /// naming the shape) instead of a panic for a shape whose size
    /// overflows.
    pub fn try_unbounded(shape: &[usize], dtype: DType) -> Result<TensorSpec, SpecError> {
        check_size("unbounded", shape, dtype)?;
        Ok(TensorSpec::Unbounded(Unbounded {
            shape: shape.into(),
            dtype,
        }))
    }

    /// The spec of a float or integer tensor whose every element lies in
    /// `[low, high]`.
    ///
    /// An error if the dtype is bool, a bound is NaN, `low > high`, (for
    /// integer dtypes) a bound is not a whole number in the dtype's range,
    /// or the bounds (two tensors of the shape, which this makes) would take
    /// more than [`MAX_VALUE_BYTES`] bytes each. Float bounds may be
    /// infinite; they are rounded to the dtype (`f32`). For `i64`, whose
    /// extremes `f64` does not hold exactly, `i64::MAX as f64` stands for
    /// `i64::MAX`.
    pub fn bounded(
        shape: &[usize],
        dtype: DType,
        low: f64,
        high: f64,
    ) -> Result<TensorSpec, SpecError> {
        const KIND: &str = "bounded";
        if dtype == DType::Bool {
            return Err(SpecError::invalid(
                KIND,
                "needs a float or integer dtype, got bool",
            ));
        }
        if low.is_nan() || high.is_nan() {
            return Err(SpecError::invalid(
                KIND,
                format!("the bounds must not be NaN (low {low}, high {high})"),
            ));
        }
        if low > high {
            return Err(SpecError::invalid(
                KIND,
                format!("low {low} is greater than high {high}"),
            ));
        }
        if let Some((min, max)) = int_range(dtype) {
            // For i64, `max as f64` is 2^63 (`i64::MAX as f64`), accepted
            // as `i64::MAX` (the conversion saturates).
            for (name, bound) in [("low", low), ("high", high)] {
                let whole = bound.is_finite() && bound.fract() == 0.0;
                if !whole || bound < min as f64 || bound > max as f64 {
                    return Err(SpecError::invalid(
                        KIND,
                        format!(
                            "{name} = {bound} is not a whole number in the range [{min}, {max}] of dtype {dtype}"
                        ),
                    ));
                }
            }
        }
        let bytes = check_size(KIND, shape, dtype)?;
        if u64::try_from(bytes).map_or(true, |b| b > MAX_VALUE_BYTES) {
            return Err(SpecError::invalid(
                KIND,
                format!(
                    "the bounds of shape {shape:?} and dtype {dtype} would take {bytes} bytes \
                     each, more than MAX_VALUE_BYTES ({MAX_VALUE_BYTES})"
                ),
            ));
        }
        let count = numel(shape).unwrap_or(0);
        let (low, high) = with_scalar!(dtype, T => (
            Tensor::from_vec(shape, vec![T::from_f64(low); count])?,
            Tensor::from_vec(shape, vec![T::from_f64(high); count])?,
        ));
        Ok(TensorSpec::Bounded(Bounded { low, high }))
    }

    /// The spec of a tensor with per-element bounds: `low` and `high` have
    /// the spec's shape and dtype (float or integer), no NaN, and
    /// `low <= high` everywhere (the error names the first element that is
    /// not).
    pub fn bounded_tensors(low: Tensor, high: Tensor) -> Result<TensorSpec, SpecError> {
        const KIND: &str = "bounded";
        if low.dtype() != high.dtype() {
            return Err(SpecError::invalid(
                KIND,
                format!(
                    "low has dtype {} but high has dtype {}",
                    low.dtype(),
                    high.dtype()
                ),
            ));
        }
        if low.shape() != high.shape() {
            return Err(SpecError::invalid(
                KIND,
                format!(
                    "low has shape {:?} but high has shape {:?}",
                    low.shape(),
                    high.shape()
                ),
            ));
        }
        if low.dtype() == DType::Bool {
            return Err(SpecError::invalid(
                KIND,
                "needs a float or integer dtype, got bool",
            ));
        }
        with_scalar!(low.dtype(), T => check_bound_values::<T>(&low, &high))?;
        Ok(TensorSpec::Bounded(Bounded { low, high }))
    }

    /// The spec of integers in `0..n`: `n >= 1`, and the dtype an integer
    /// type that holds `n - 1` (or bool, for `n <= 2`, as TorchRL's done
    /// specs).
    /// An error if the shape's size overflows `usize`.
    pub fn categorical(shape: &[usize], dtype: DType, n: i64) -> Result<TensorSpec, SpecError> {
        check_categories("categorical", dtype, n)?;
        check_size("categorical", shape, dtype)?;
        Ok(TensorSpec::Categorical(Categorical {
            shape: shape.into(),
            dtype,
            n,
        }))
    }

    /// The spec of one-hot rows along the last dim, whose size is `n` (at
    /// least 1). The dtype is bool or an integer type. An error if the
    /// shape's size overflows `usize`.
    pub fn one_hot(shape: &[usize], dtype: DType) -> Result<TensorSpec, SpecError> {
        const KIND: &str = "one_hot";
        let Some(&last) = shape.last() else {
            return Err(SpecError::invalid(
                KIND,
                "needs at least one dimension (the last one is n), got shape []",
            ));
        };
        if last == 0 {
            return Err(SpecError::invalid(
                KIND,
                format!("n (the last dim) must be at least 1, got shape {shape:?}"),
            ));
        }
        let n = i64::try_from(last).unwrap_or(i64::MAX);
        // One-hot values are 0 and 1, which every non-float dtype holds.
        check_categories(KIND, dtype, 2)?;
        check_size(KIND, shape, dtype)?;
        Ok(TensorSpec::OneHot(OneHot {
            shape: shape.into(),
            dtype,
            n,
        }))
    }

    /// The spec of zeros and ones; the dtype is bool or an integer type. An
    /// error if the shape's size overflows `usize`.
    pub fn binary(shape: &[usize], dtype: DType) -> Result<TensorSpec, SpecError> {
        check_categories("binary", dtype, 2)?;
        check_size("binary", shape, dtype)?;
        Ok(TensorSpec::Binary(Binary {
            shape: shape.into(),
            dtype,
        }))
    }

    /// The spec of integers whose last dim holds one category per element
    /// of `nvec`: `value[..., i]` in `0..nvec[i]`. The last dim must be
    /// `nvec.len()`, every `nvec[i] >= 1`, the dtype must hold every
    /// `nvec[i] - 1`, and the shape's size must not overflow `usize`.
    pub fn multi_categorical(
        shape: &[usize],
        dtype: DType,
        nvec: Vec<i64>,
    ) -> Result<TensorSpec, SpecError> {
        const KIND: &str = "multi_categorical";
        let Some(&last) = shape.last() else {
            return Err(SpecError::invalid(
                KIND,
                format!(
                    "needs at least one dimension (the last one is nvec.len() = {}), got shape []",
                    nvec.len()
                ),
            ));
        };
        if last != nvec.len() {
            return Err(SpecError::invalid(
                KIND,
                format!(
                    "the last dim of shape {shape:?} is {last} but nvec {nvec:?} has {} elements",
                    nvec.len()
                ),
            ));
        }
        if let Some((i, n)) = nvec.iter().enumerate().find(|(_, &n)| n < 1) {
            return Err(SpecError::invalid(
                KIND,
                format!("nvec[{i}] must be at least 1, got {n}"),
            ));
        }
        check_categories(KIND, dtype, nvec.iter().copied().max().unwrap_or(1))?;
        check_size(KIND, shape, dtype)?;
        Ok(TensorSpec::MultiCategorical(MultiCategorical {
            shape: shape.into(),
            dtype,
            nvec,
        }))
    }

    /// The spec of non-tensor values of this shape.
    ///
    /// # Panics
    /// If the shape's element count, or the size in bytes of a value of it
    /// as nested stacks, overflows `usize`. For shapes that come from
    /// outside, use [`TensorSpec::try_non_tensor`].
    pub fn non_tensor(shape: &[usize]) -> TensorSpec {
        TensorSpec::try_non_tensor(shape).unwrap_or_else(|err| panic!("{err}"))
    }

    /// [`TensorSpec::non_tensor`], with an error ([`SpecError::Invalid`],
    /// naming the shape) instead of a panic for a shape whose size
    /// overflows.
    pub fn try_non_tensor(shape: &[usize]) -> Result<TensorSpec, SpecError> {
        if non_tensor_bytes(shape).is_none() {
            return Err(SpecError::invalid(
                "non_tensor",
                format!("shape {shape:?} is too large: its size overflows usize"),
            ));
        }
        Ok(TensorSpec::NonTensor(NonTensorSpec {
            shape: shape.into(),
        }))
    }

    /// The shape. For a composite, its batch shape; for a stack of `n`
    /// parts, `[n]` followed by the longest prefix their shapes share (their
    /// shape when they all share one).
    pub fn shape(&self) -> Shape {
        match self {
            TensorSpec::Unbounded(s) => s.shape.clone(),
            TensorSpec::Bounded(s) => s.shape().into(),
            TensorSpec::Categorical(s) => s.shape.clone(),
            TensorSpec::OneHot(s) => s.shape.clone(),
            TensorSpec::Binary(s) => s.shape.clone(),
            TensorSpec::MultiCategorical(s) => s.shape.clone(),
            TensorSpec::NonTensor(s) => s.shape.clone(),
            TensorSpec::Composite(c) => c.shape().into(),
            TensorSpec::Stacked(s) => s.shape(),
        }
    }

    /// The dtype of a tensor spec; `None` for composite, non-tensor and
    /// stacked specs.
    pub fn dtype(&self) -> Option<DType> {
        match self {
            TensorSpec::Unbounded(s) => Some(s.dtype),
            TensorSpec::Bounded(s) => Some(s.dtype()),
            TensorSpec::Categorical(s) => Some(s.dtype),
            TensorSpec::OneHot(s) => Some(s.dtype),
            TensorSpec::Binary(s) => Some(s.dtype),
            TensorSpec::MultiCategorical(s) => Some(s.dtype),
            TensorSpec::NonTensor(_) | TensorSpec::Composite(_) | TensorSpec::Stacked(_) => None,
        }
    }

    /// The kind, as in messages and `Display`: `"unbounded"`, `"bounded"`,
    /// `"categorical"`, `"one_hot"`, `"binary"`, `"multi_categorical"`,
    /// `"non_tensor"`, `"composite"` or `"stacked"`.
    pub fn kind(&self) -> &'static str {
        match self {
            TensorSpec::Unbounded(_) => "unbounded",
            TensorSpec::Bounded(_) => "bounded",
            TensorSpec::Categorical(_) => "categorical",
            TensorSpec::OneHot(_) => "one_hot",
            TensorSpec::Binary(_) => "binary",
            TensorSpec::MultiCategorical(_) => "multi_categorical",
            TensorSpec::NonTensor(_) => "non_tensor",
            TensorSpec::Composite(_) => "composite",
            TensorSpec::Stacked(_) => "stacked",
        }
    }

    /// The composite, if this spec is one.
    pub fn as_composite(&self) -> Option<&Composite> {
        match self {
            TensorSpec::Composite(c) => Some(c),
            _ => None,
        }
    }

    /// The composite, writable, if this spec is one.
    pub fn as_composite_mut(&mut self) -> Option<&mut Composite> {
        match self {
            TensorSpec::Composite(c) => Some(c),
            _ => None,
        }
    }

    /// The stack, if this spec is one.
    pub fn as_stacked(&self) -> Option<&StackedSpec> {
        match self {
            TensorSpec::Stacked(s) => Some(s),
            _ => None,
        }
    }
}

impl From<Composite> for TensorSpec {
    fn from(c: Composite) -> Self {
        TensorSpec::Composite(c)
    }
}

impl From<StackedSpec> for TensorSpec {
    fn from(s: StackedSpec) -> Self {
        TensorSpec::Stacked(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invalid(result: Result<TensorSpec, SpecError>) -> String {
        let err = result.unwrap_err();
        assert!(matches!(err, SpecError::Invalid { .. }), "{err:?}");
        err.to_string()
    }

    #[test]
    fn bounded_checks_its_bounds() {
        let spec = TensorSpec::bounded(&[2], DType::F32, -2.0, 2.0).unwrap();
        let TensorSpec::Bounded(b) = &spec else {
            panic!("bounded")
        };
        assert_eq!(b.low().to_vec::<f32>().unwrap(), vec![-2.0, -2.0]);
        assert_eq!(b.high().to_vec::<f32>().unwrap(), vec![2.0, 2.0]);
        assert_eq!(spec.dtype(), Some(DType::F32));
        assert_eq!(spec.kind(), "bounded");
        assert_eq!(
            invalid(TensorSpec::bounded(&[1], DType::F32, 2.0, -2.0)),
            "invalid bounded spec: low 2 is greater than high -2"
        );
        assert!(invalid(TensorSpec::bounded(&[1], DType::F64, f64::NAN, 1.0)).contains("NaN"));
        assert_eq!(
            invalid(TensorSpec::bounded(&[1], DType::I64, -2.5, 2.0)),
            "invalid bounded spec: low = -2.5 is not a whole number in the range \
             [-9223372036854775808, 9223372036854775807] of dtype i64"
        );
        assert!(invalid(TensorSpec::bounded(&[1], DType::U8, 0.0, 256.0)).contains("high = 256"));
        assert!(invalid(TensorSpec::bounded(&[1], DType::I32, 0.0, f64::INFINITY)).contains("inf"));
        assert!(invalid(TensorSpec::bounded(&[1], DType::Bool, 0.0, 1.0)).contains("bool"));
        assert!(
            invalid(TensorSpec::bounded(&[usize::MAX, 2], DType::F32, 0.0, 1.0))
                .contains("too large")
        );
        // Infinite float bounds are fine.
        TensorSpec::bounded(&[1], DType::F32, f64::NEG_INFINITY, 0.0).unwrap();
    }

    #[test]
    fn bounded_tensors_checks_shapes_dtypes_and_order() {
        let low = Tensor::from_vec(&[2], vec![0.0f32, 1.0]).unwrap();
        let high = Tensor::from_vec(&[2], vec![1.0f32, 0.5]).unwrap();
        assert_eq!(
            invalid(TensorSpec::bounded_tensors(low.clone(), high)),
            "invalid bounded spec: element 1: low 1 is greater than high 0.5"
        );
        let high64 = Tensor::from_vec(&[2], vec![1.0f64, 2.0]).unwrap();
        assert_eq!(
            invalid(TensorSpec::bounded_tensors(low.clone(), high64)),
            "invalid bounded spec: low has dtype f32 but high has dtype f64"
        );
        let high3 = Tensor::zeros(DType::F32, &[3]);
        assert_eq!(
            invalid(TensorSpec::bounded_tensors(low.clone(), high3)),
            "invalid bounded spec: low has shape [2] but high has shape [3]"
        );
        let nan = Tensor::from_vec(&[2], vec![f32::NAN, 2.0]).unwrap();
        assert!(invalid(TensorSpec::bounded_tensors(low.clone(), nan)).contains("element 0"));
        let b = Tensor::zeros(DType::Bool, &[1]);
        assert!(invalid(TensorSpec::bounded_tensors(b.clone(), b)).contains("bool"));
        let high = Tensor::from_vec(&[2], vec![1.0f32, 1.0]).unwrap();
        let spec = TensorSpec::bounded_tensors(low, high).unwrap();
        assert_eq!(spec.shape().as_slice(), &[2]);
    }

    #[test]
    fn categorical_kinds_check_n_and_dtype() {
        assert_eq!(
            invalid(TensorSpec::categorical(&[], DType::I64, 0)),
            "invalid categorical spec: n must be at least 1, got 0"
        );
        assert_eq!(
            invalid(TensorSpec::categorical(&[], DType::F32, 2)),
            "invalid categorical spec: needs an integer or bool dtype, got f32"
        );
        assert_eq!(
            invalid(TensorSpec::categorical(&[], DType::U8, 300)),
            "invalid categorical spec: n = 300 does not fit dtype u8, whose largest value is 255"
        );
        TensorSpec::categorical(&[1], DType::Bool, 2).unwrap();
        assert!(invalid(TensorSpec::categorical(&[1], DType::Bool, 3)).contains("bool"));
        assert!(invalid(TensorSpec::binary(&[1], DType::F64)).contains("binary"));
    }

    #[test]
    fn one_hot_needs_a_last_dim() {
        assert_eq!(
            invalid(TensorSpec::one_hot(&[], DType::Bool)),
            "invalid one_hot spec: needs at least one dimension (the last one is n), got shape []"
        );
        assert!(invalid(TensorSpec::one_hot(&[2, 0], DType::Bool)).contains("at least 1"));
        assert!(invalid(TensorSpec::one_hot(&[2], DType::F32)).contains("f32"));
        let TensorSpec::OneHot(oh) = TensorSpec::one_hot(&[4, 3], DType::I64).unwrap() else {
            panic!("one-hot")
        };
        assert_eq!(oh.n(), 3);
    }

    #[test]
    fn multi_categorical_checks_nvec() {
        assert_eq!(
            invalid(TensorSpec::multi_categorical(&[3], DType::I64, vec![2, 3])),
            "invalid multi_categorical spec: the last dim of shape [3] is 3 but nvec [2, 3] has 2 elements"
        );
        assert!(
            invalid(TensorSpec::multi_categorical(&[], DType::I64, vec![]))
                .contains("at least one dimension")
        );
        assert_eq!(
            invalid(TensorSpec::multi_categorical(&[2], DType::I64, vec![2, 0])),
            "invalid multi_categorical spec: nvec[1] must be at least 1, got 0"
        );
        assert!(
            invalid(TensorSpec::multi_categorical(&[2], DType::I8, vec![2, 200]))
                .contains("n = 200")
        );
        let spec = TensorSpec::multi_categorical(&[4, 2], DType::I32, vec![2, 3]).unwrap();
        assert_eq!(spec.kind(), "multi_categorical");
        let TensorSpec::MultiCategorical(m) = spec else {
            panic!("multi-categorical")
        };
        assert_eq!(m.nvec(), &[2, 3]);
    }

    #[test]
    fn every_constructor_refuses_a_shape_whose_size_overflows() {
        let huge = [usize::MAX, 2];
        assert_eq!(
            invalid(TensorSpec::try_unbounded(&huge, DType::F32)),
            "invalid unbounded spec: shape [18446744073709551615, 2] of dtype f32 is too large: \
             its size overflows usize"
        );
        // The element count fits but the byte size does not.
        assert!(
            invalid(TensorSpec::try_unbounded(&[usize::MAX / 2 + 1], DType::I16))
                .contains("dtype i16 is too large")
        );
        assert!(
            invalid(TensorSpec::categorical(&huge, DType::I64, 2)).starts_with(
                "invalid categorical spec: shape [18446744073709551615, 2] of dtype i64 is too large"
            )
        );
        assert!(invalid(TensorSpec::binary(&huge, DType::Bool))
            .starts_with("invalid binary spec: shape [18446744073709551615, 2]"));
        assert!(invalid(TensorSpec::one_hot(&huge, DType::U8))
            .starts_with("invalid one_hot spec: shape [18446744073709551615, 2]"));
        assert!(invalid(TensorSpec::multi_categorical(
            &[usize::MAX, 1],
            DType::I64,
            vec![2]
        ))
        .starts_with("invalid multi_categorical spec: shape [18446744073709551615, 1]"));
        assert_eq!(
            invalid(TensorSpec::try_non_tensor(&[usize::MAX])),
            "invalid non_tensor spec: shape [18446744073709551615] is too large: its size \
             overflows usize"
        );
        // A zero dim after an overflowing product is still too large, as
        // for tensors (`Tensor::try_zeros` refuses it too).
        assert!(TensorSpec::try_unbounded(&[usize::MAX, 2, 0], DType::U8).is_err());
        // Large but fitting shapes are specs (only values are capped).
        TensorSpec::try_unbounded(&[1 << 40], DType::F32).unwrap();
        TensorSpec::categorical(&[1 << 40], DType::I64, 3).unwrap();
        TensorSpec::try_non_tensor(&[0, usize::MAX]).unwrap();
        assert_eq!(
            TensorSpec::try_unbounded(&[3], DType::F32).unwrap(),
            TensorSpec::unbounded(&[3], DType::F32)
        );
        assert_eq!(
            TensorSpec::try_non_tensor(&[2]).unwrap(),
            TensorSpec::non_tensor(&[2])
        );
    }

    #[test]
    #[should_panic(expected = "invalid unbounded spec: shape [18446744073709551615, 2]")]
    fn unbounded_panics_on_a_shape_whose_size_overflows() {
        let _ = TensorSpec::unbounded(&[usize::MAX, 2], DType::F32);
    }

    #[test]
    #[should_panic(expected = "invalid non_tensor spec: shape [18446744073709551615]")]
    fn non_tensor_panics_on_a_shape_whose_size_overflows() {
        let _ = TensorSpec::non_tensor(&[usize::MAX]);
    }

    #[test]
    fn bounded_refuses_bounds_over_the_value_limit() {
        // 2^40 f32 bounds would be 4 TiB each: refused before allocating.
        assert_eq!(
            invalid(TensorSpec::bounded(&[1 << 40], DType::F32, 0.0, 1.0)),
            "invalid bounded spec: the bounds of shape [1099511627776] and dtype f32 would take \
             4398046511104 bytes each, more than MAX_VALUE_BYTES (17179869184)"
        );
        // i64::MAX as f64 (2^63) stands for i64::MAX; the next f64 is out.
        let spec = TensorSpec::bounded(&[1], DType::I64, 0.0, i64::MAX as f64).unwrap();
        let TensorSpec::Bounded(b) = spec else {
            panic!("bounded")
        };
        assert_eq!(b.high().to_vec::<i64>().unwrap(), vec![i64::MAX]);
        assert!(TensorSpec::bounded(&[1], DType::I64, 0.0, 2f64.powi(63) * 1.01).is_err());
    }

    #[test]
    fn multi_categorical_names_a_bad_nvec_element_first() {
        assert_eq!(
            invalid(TensorSpec::multi_categorical(&[1], DType::I64, vec![0])),
            "invalid multi_categorical spec: nvec[0] must be at least 1, got 0"
        );
        // An empty last dim: no element, no category; fine.
        let empty = TensorSpec::multi_categorical(&[3, 0], DType::I64, vec![]).unwrap();
        assert_eq!(empty.shape().as_slice(), &[3, 0]);
    }

    #[test]
    fn accessors() {
        let spec = TensorSpec::non_tensor(&[2]);
        assert_eq!(spec.dtype(), None);
        assert_eq!(spec.kind(), "non_tensor");
        assert!(spec.as_composite().is_none());
        assert!(spec.as_stacked().is_none());
        let mut c = TensorSpec::from(Composite::new(&[3]));
        assert_eq!(c.shape().as_slice(), &[3]);
        assert!(c.as_composite_mut().is_some());
        assert_eq!(c.kind(), "composite");
    }
}
