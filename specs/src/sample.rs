//! Values made from specs: `rand` (a random value in the spec, from a
//! caller's seeded generator) and `zero` (plain zeros).

use rand::Rng;
use tensordict::{DType, Entry, NestedKey, NonTensor, Tensor, TensorDict};

use crate::elements::{non_tensor_bytes, numel, slice, tensor_bytes, with_scalar, Scalar};
use crate::{Composite, SpecError, StackedSpec, TensorSpec};

/// The half-width of the range unbounded integer specs sample from.
pub(crate) const UNBOUNDED_INT_RANGE: i64 = 10;

/// The most bytes a value made by [`TensorSpec::rand`] or
/// [`TensorSpec::zero`] (and their `try_` and [`Composite`] forms) may take:
/// 16 GiB (`1 << 34`), summed over every tensor of the value (a non-tensor
/// counts `size_of::<NonTensor>()` bytes per node of its nested stacks).
///
/// A larger value is refused with [`SpecError::TooLarge`] before anything
/// is allocated: an allocation that fails aborts the process, which no
/// caller can handle. [`TensorSpec::bounded`] refuses bounds larger than
/// this for the same reason, as does stacking bounded specs. Specs
/// themselves may describe larger values (e.g. for checking them).
pub const MAX_VALUE_BYTES: u64 = 1 << 34;

/// The most dims of a non-tensor value made by [`TensorSpec::rand`] or
/// [`TensorSpec::zero`]: 64. A non-tensor of shape `[d0, d1, ...]` is
/// nested stacks one level per dim, which are built, cloned and dropped
/// recursively; a deeper one is refused with [`SpecError::TooLarge`] rather
/// than risk overflowing the stack.
pub const MAX_NON_TENSOR_NDIM: usize = 64;

/// Number of elements of `shape`, or an error if it overflows (checked
/// up front by [`value_bytes`]; kept so that no path allocates unchecked).
fn count(shape: &[usize]) -> Result<usize, SpecError> {
    numel(shape).ok_or_else(|| {
        SpecError::Tensor(tensordict::TensorDictError::ShapeTooLarge {
            shape: shape.to_vec(),
        })
    })
}

/// `u64` bytes over the limit, as in messages.
fn over_limit(bytes: u64) -> String {
    format!("{bytes} bytes, more than MAX_VALUE_BYTES ({MAX_VALUE_BYTES})")
}

/// An error unless the value of `spec` at `key` fits: its tensors' sizes
/// summed, each leaf's and the total at most [`MAX_VALUE_BYTES`], every
/// non-tensor at most [`MAX_NON_TENSOR_NDIM`] dims. Returns the total.
fn value_bytes(spec: &TensorSpec, key: &NestedKey) -> Result<u64, SpecError> {
    let leaf = |bytes: Option<usize>, what: String| -> Result<u64, SpecError> {
        let shape = spec.shape();
        let bytes = bytes.ok_or_else(|| {
            SpecError::too_large(key, &shape, format!("{what} overflows usize in size"))
        })?;
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        if bytes > MAX_VALUE_BYTES {
            return Err(SpecError::too_large(
                key,
                &shape,
                format!("{what} would take {}", over_limit(bytes)),
            ));
        }
        Ok(bytes)
    };
    match spec {
        TensorSpec::NonTensor(s) => {
            if s.shape.len() > MAX_NON_TENSOR_NDIM {
                return Err(SpecError::too_large(
                    key,
                    &s.shape,
                    format!(
                        "a non-tensor value of {} dims is more than MAX_NON_TENSOR_NDIM ({MAX_NON_TENSOR_NDIM})",
                        s.shape.len()
                    ),
                ));
            }
            leaf(
                non_tensor_bytes(&s.shape),
                format!("a non-tensor value of shape {:?}", s.shape.as_slice()),
            )
        }
        TensorSpec::Composite(c) => sum_bytes(
            key,
            &spec.shape(),
            c.iter()
                .map(|(name, entry)| value_bytes(entry, &key.child(name))),
        ),
        TensorSpec::Stacked(st) => sum_bytes(
            key,
            &spec.shape(),
            st.parts().iter().map(|part| value_bytes(part, key)),
        ),
        tensor => {
            let (shape, dtype) = (tensor.shape(), tensor.dtype().unwrap_or(DType::F32));
            leaf(
                tensor_bytes(&shape, dtype),
                format!("a tensor of shape {:?} and dtype {dtype}", shape.as_slice()),
            )
        }
    }
}

/// The sum of the sizes of the entries (or parts) of a value; an error if
/// one does not fit or the sum is over [`MAX_VALUE_BYTES`].
fn sum_bytes(
    key: &NestedKey,
    shape: &[usize],
    sizes: impl Iterator<Item = Result<u64, SpecError>>,
) -> Result<u64, SpecError> {
    let mut total = 0u64;
    for size in sizes {
        total = total.saturating_add(size?);
    }
    if total > MAX_VALUE_BYTES {
        return Err(SpecError::too_large(
            key,
            shape,
            format!(
                "its value's entries would take {total} bytes in all, more than MAX_VALUE_BYTES \
                 ({MAX_VALUE_BYTES})"
            ),
        ));
    }
    Ok(total)
}

/// A tensor of `shape` whose elements are `f(i)` for each row-major index.
fn tensor_from<T: Scalar>(
    shape: &[usize],
    mut f: impl FnMut(usize) -> T,
) -> Result<Tensor, SpecError> {
    let values: Vec<T> = (0..count(shape)?).map(&mut f).collect();
    Ok(Tensor::from_vec(shape, values)?)
}

/// A standard normal sample (Box-Muller).
fn standard_normal<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    // 1 - u is in (0, 1], so its logarithm is finite.
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A sample in `[low, high]` (no NaN, `low <= high`, either may be
/// infinite): uniform when both are finite; otherwise a standard normal
/// sample, shifted by its absolute value away from the finite bound if there
/// is one; clamped to the bounds in every case.
fn sample_float<R: Rng + ?Sized>(rng: &mut R, low: f64, high: f64) -> f64 {
    if low == high {
        return low;
    }
    let x = match (low.is_finite(), high.is_finite()) {
        (true, true) => {
            let u = rng.random::<f64>();
            let span = high - low;
            if span.is_finite() {
                low + span * u
            } else {
                low * (1.0 - u) + high * u
            }
        }
        (true, false) => low + standard_normal(rng).abs(),
        (false, true) => high - standard_normal(rng).abs(),
        (false, false) => standard_normal(rng),
    };
    // `max` / `min` rather than `clamp`: never panics.
    x.max(low).min(high)
}

fn unbounded<T: Scalar, R: Rng + ?Sized>(
    rng: &mut R,
    shape: &[usize],
) -> Result<Tensor, SpecError> {
    if T::DTYPE.is_float() {
        tensor_from(shape, |_| T::from_f64(standard_normal(rng)))
    } else {
        let low = (-UNBOUNDED_INT_RANGE).max(T::MIN_I64);
        let high = UNBOUNDED_INT_RANGE.min(T::MAX_I64);
        tensor_from(shape, |_| T::from_i64(rng.random_range(low..=high)))
    }
}

fn bounded<T: Scalar, R: Rng + ?Sized>(
    rng: &mut R,
    low: &Tensor,
    high: &Tensor,
) -> Result<Tensor, SpecError> {
    let bounds = slice::<T>(low)?.iter().zip(slice::<T>(high)?);
    let values: Vec<T> = bounds
        .map(|(&lo, &hi)| {
            if T::DTYPE.is_float() {
                T::from_f64(sample_float(rng, lo.to_f64(), hi.to_f64()))
            } else {
                // `lo <= hi`, checked when the spec was made; `min` keeps
                // the range non-empty regardless.
                let (lo, hi) = (lo.to_i64(), hi.to_i64());
                T::from_i64(rng.random_range(lo.min(hi)..=hi))
            }
        })
        .collect();
    Ok(Tensor::from_vec(low.shape(), values)?)
}

/// Element `i` in `0..n_of(i)` (every `n_of(i) >= 1`).
fn categories<T: Scalar, R: Rng + ?Sized>(
    rng: &mut R,
    shape: &[usize],
    n_of: impl Fn(usize) -> i64,
) -> Result<Tensor, SpecError> {
    tensor_from(shape, |i| T::from_i64(rng.random_range(0..n_of(i).max(1))))
}

fn one_hot<T: Scalar, R: Rng + ?Sized>(rng: &mut R, shape: &[usize]) -> Result<Tensor, SpecError> {
    let n = shape.last().copied().unwrap_or(1).max(1);
    let mut values = vec![T::from_i64(0); count(shape)?];
    for row in values.chunks_exact_mut(n) {
        if let Some(hot) = row.get_mut(rng.random_range(0..n)) {
            *hot = T::from_i64(1);
        }
    }
    Ok(Tensor::from_vec(shape, values)?)
}

/// `nvec[i % nvec.len()]`: the number of categories of row-major element
/// `i` of a multi-categorical value (1 for an empty `nvec`, whose values
/// have no element).
pub(crate) fn nvec_at(nvec: &[i64], i: usize) -> i64 {
    i.checked_rem(nvec.len())
        .and_then(|j| nvec.get(j))
        .copied()
        .unwrap_or(1)
}

/// `NonTensor::Int(0)` for shape `[]`, nested stacks of it otherwise; built
/// from the innermost dim out, and only down to the first zero dim (a stack
/// of no element), so no level is built that the value does not hold.
fn non_tensor_zero(shape: &[usize]) -> NonTensor {
    let (dims, mut value) = match shape.iter().position(|&d| d == 0) {
        Some(zero) => (
            shape.get(..zero).unwrap_or_default(),
            NonTensor::Stack(Default::default()),
        ),
        None => (shape, NonTensor::Int(0)),
    };
    for &len in dims.iter().rev() {
        value = NonTensor::Stack(vec![value; len].into());
    }
    value
}

/// One value from the values of the parts of a stacked spec at `key`: a
/// stacked tensor, a stack of non-tensors, or a dense stack of tensordicts;
/// an error if the values are ragged.
fn stack_values(key: &NestedKey, values: Vec<Entry>) -> Result<Entry, SpecError> {
    let ragged = |reason: String| SpecError::Ragged {
        key: key.clone(),
        reason,
    };
    let Some(first) = values.first() else {
        return Err(ragged("the stack has no part".into()));
    };
    if let Some((index, other)) = values
        .iter()
        .enumerate()
        .find(|(_, v)| v.kind() != first.kind())
    {
        return Err(ragged(format!(
            "env {index} gives a {} but env 0 gives a {}",
            other.kind(),
            first.kind()
        )));
    }
    match first {
        Entry::Tensor(t0) => {
            let tensors: Vec<Tensor> = values
                .iter()
                .filter_map(|v| v.as_tensor().cloned())
                .collect();
            if let Some((index, t)) = tensors
                .iter()
                .enumerate()
                .find(|(_, t)| t.shape() != t0.shape() || t.dtype() != t0.dtype())
            {
                return Err(ragged(format!(
                    "env {index} gives shape {:?} and dtype {} but env 0 gives shape {:?} and dtype {}",
                    t.shape(),
                    t.dtype(),
                    t0.shape(),
                    t0.dtype()
                )));
            }
            Ok(Entry::Tensor(Tensor::stack(&tensors)?))
        }
        Entry::NonTensor(_) => Ok(Entry::NonTensor(NonTensor::Stack(
            values
                .into_iter()
                .filter_map(|v| v.as_non_tensor().cloned())
                .collect(),
        ))),
        Entry::Dict(_) => {
            let dicts: Vec<TensorDict> = values
                .into_iter()
                .filter_map(|v| match v {
                    Entry::Dict(d) => Some(d),
                    _ => None,
                })
                .collect();
            TensorDict::stack(&dicts)
                .map(Entry::Dict)
                .map_err(|err| ragged(err.to_string()))
        }
    }
}

impl TensorSpec {
    /// A random value in the spec, drawn from `rng` (seed it, e.g. with
    /// `StdRng::seed_from_u64`, for reproducible values).
    ///
    /// - unbounded floats: standard normal; unbounded integers: uniform in
    ///   `-10..=10` (cut to the dtype's range, so `0..=10` for `u8`);
    ///   unbounded bools: uniform.
    /// - bounded floats: uniform in `[low, high]` (`low` if they are equal);
    ///   where a bound is infinite, a standard normal sample, moved by its
    ///   absolute value away from the finite bound if there is one, clamped
    ///   to the bounds. Bounded integers: uniform in `low..=high`.
    /// - categorical: uniform in `0..n`; multi-categorical: element `i` of
    ///   the last dim uniform in `0..nvec[i]`; one-hot: one uniform index set
    ///   per row; binary: uniform 0/1.
    /// - non-tensor: `NonTensor::Int(0)`, in nested stacks of the shape (no
    ///   randomness).
    /// - composite: [`Entry::Dict`] with the composite's shape as batch size.
    /// - stacked: each part sampled, then stacked.
    ///
    /// # Panics
    /// If no single value holds the spec's values, which happens only for a
    /// [`StackedSpec`] whose parts' values differ in shape or dtype (a ragged
    /// lazy stack; sample each part with `index(i)` instead, or use
    /// [`TensorSpec::try_rand`]), or if the value would take more than
    /// [`MAX_VALUE_BYTES`] bytes (or hold a non-tensor of more than
    /// [`MAX_NON_TENSOR_NDIM`] dims).
    pub fn rand<R: Rng + ?Sized>(&self, rng: &mut R) -> Entry {
        self.try_rand(rng).unwrap_or_else(|err| panic!("{err}"))
    }

    /// [`TensorSpec::rand`], with an error instead of a panic: for a ragged
    /// stack ([`SpecError::Ragged`], naming the key), and for a value too
    /// large to make ([`SpecError::TooLarge`], naming the key and the
    /// shape), checked before anything is allocated or drawn from `rng`.
    pub fn try_rand<R: Rng + ?Sized>(&self, rng: &mut R) -> Result<Entry, SpecError> {
        let key = NestedKey::default();
        value_bytes(self, &key)?;
        self.rand_at(&key, rng)
    }

    pub(crate) fn rand_at<R: Rng + ?Sized>(
        &self,
        key: &NestedKey,
        rng: &mut R,
    ) -> Result<Entry, SpecError> {
        let tensor = match self {
            TensorSpec::Unbounded(s) => {
                with_scalar!(s.dtype, T => unbounded::<T, R>(rng, &s.shape))
            }
            TensorSpec::Bounded(s) => {
                with_scalar!(s.dtype(), T => bounded::<T, R>(rng, &s.low, &s.high))
            }
            TensorSpec::Categorical(s) => {
                with_scalar!(s.dtype, T => categories::<T, R>(rng, &s.shape, |_| s.n))
            }
            TensorSpec::OneHot(s) => with_scalar!(s.dtype, T => one_hot::<T, R>(rng, &s.shape)),
            TensorSpec::Binary(s) => {
                with_scalar!(s.dtype, T => categories::<T, R>(rng, &s.shape, |_| 2))
            }
            TensorSpec::MultiCategorical(s) => {
                let nvec = &s.nvec;
                with_scalar!(s.dtype, T => categories::<T, R>(rng, &s.shape, |i| nvec_at(nvec, i)))
            }
            TensorSpec::NonTensor(s) => return Ok(Entry::NonTensor(non_tensor_zero(&s.shape))),
            TensorSpec::Composite(c) => return c.rand_at(key, rng).map(Entry::Dict),
            TensorSpec::Stacked(s) => return s.rand_at(key, rng),
        };
        tensor.map(Entry::Tensor)
    }

    /// A value of zeros: a tensor of zeros (`false`) of the shape and dtype
    /// for every tensor spec, as TorchRL's `zero()`. These are plain zeros,
    /// so the value is not in a bounded spec whose bounds exclude 0, nor in a
    /// one-hot spec. Non-tensor: as [`TensorSpec::rand`]; composite:
    /// [`Entry::Dict`]; stacked: each part's zero, stacked.
    ///
    /// # Panics
    /// As [`TensorSpec::rand`]: for a ragged stack or a value too large to
    /// make (see [`TensorSpec::try_zero`]).
    pub fn zero(&self) -> Entry {
        self.try_zero().unwrap_or_else(|err| panic!("{err}"))
    }

    /// [`TensorSpec::zero`], with an error instead of a panic for a ragged
    /// stack or a value too large to make (as [`TensorSpec::try_rand`]).
    pub fn try_zero(&self) -> Result<Entry, SpecError> {
        let key = NestedKey::default();
        value_bytes(self, &key)?;
        self.zero_at(&key)
    }

    pub(crate) fn zero_at(&self, key: &NestedKey) -> Result<Entry, SpecError> {
        match self {
            TensorSpec::NonTensor(s) => Ok(Entry::NonTensor(non_tensor_zero(&s.shape))),
            TensorSpec::Composite(c) => c.zero_at(key).map(Entry::Dict),
            TensorSpec::Stacked(s) => s.zero_at(key),
            leaf => {
                let dtype = leaf.dtype().unwrap_or(DType::F32);
                Ok(Entry::Tensor(Tensor::try_zeros(dtype, &leaf.shape())?))
            }
        }
    }
}

impl StackedSpec {
    pub(crate) fn rand_at<R: Rng + ?Sized>(
        &self,
        key: &NestedKey,
        rng: &mut R,
    ) -> Result<Entry, SpecError> {
        let values = self
            .parts()
            .iter()
            .map(|part| part.rand_at(key, rng))
            .collect::<Result<Vec<_>, _>>()?;
        stack_values(key, values)
    }

    pub(crate) fn zero_at(&self, key: &NestedKey) -> Result<Entry, SpecError> {
        let values = self
            .parts()
            .iter()
            .map(|part| part.zero_at(key))
            .collect::<Result<Vec<_>, _>>()?;
        stack_values(key, values)
    }
}

impl Composite {
    /// A random tensordict in the spec, with the composite's shape as batch
    /// size; see [`TensorSpec::rand`] for each kind.
    ///
    /// # Panics
    /// As [`TensorSpec::rand`]: for an entry that is a ragged stack, or a
    /// value too large to make (see [`Composite::try_rand`]).
    pub fn rand<R: Rng + ?Sized>(&self, rng: &mut R) -> TensorDict {
        self.try_rand(rng).unwrap_or_else(|err| panic!("{err}"))
    }

    /// [`Composite::rand`], with an error naming the key instead of a panic
    /// for an entry that is a ragged stack, or a value too large to make (an
    /// entry, or all of them, over [`MAX_VALUE_BYTES`]; checked before
    /// anything is allocated).
    pub fn try_rand<R: Rng + ?Sized>(&self, rng: &mut R) -> Result<TensorDict, SpecError> {
        let key = NestedKey::default();
        self.value_bytes(&key)?;
        self.rand_at(&key, rng)
    }

    pub(crate) fn rand_at<R: Rng + ?Sized>(
        &self,
        prefix: &NestedKey,
        rng: &mut R,
    ) -> Result<TensorDict, SpecError> {
        let mut td = TensorDict::new(self.shape());
        for (name, spec) in self.iter() {
            td.set(name, spec.rand_at(&prefix.child(name), rng)?)?;
        }
        Ok(td)
    }

    /// A tensordict of zeros with the composite's shape as batch size; see
    /// [`TensorSpec::zero`].
    ///
    /// # Panics
    /// As [`TensorSpec::zero`] (see [`Composite::try_zero`]).
    pub fn zero(&self) -> TensorDict {
        self.try_zero().unwrap_or_else(|err| panic!("{err}"))
    }

    /// [`Composite::zero`], with an error naming the key instead of a panic
    /// (as [`Composite::try_rand`]).
    pub fn try_zero(&self) -> Result<TensorDict, SpecError> {
        let key = NestedKey::default();
        self.value_bytes(&key)?;
        self.zero_at(&key)
    }

    /// [`value_bytes`] for a composite.
    pub(crate) fn value_bytes(&self, key: &NestedKey) -> Result<u64, SpecError> {
        sum_bytes(
            key,
            self.shape(),
            self.iter()
                .map(|(name, entry)| value_bytes(entry, &key.child(name))),
        )
    }

    pub(crate) fn zero_at(&self, prefix: &NestedKey) -> Result<TensorDict, SpecError> {
        let mut td = TensorDict::new(self.shape());
        for (name, spec) in self.iter() {
            td.set(name, spec.zero_at(&prefix.child(name))?)?;
        }
        Ok(td)
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;

    fn rng() -> StdRng {
        StdRng::seed_from_u64(7)
    }

    fn tensor(entry: Entry) -> Tensor {
        entry.as_tensor().expect("a tensor").clone()
    }

    #[test]
    fn the_same_seed_gives_the_same_values() {
        let spec = TensorSpec::bounded(&[8], DType::F32, -2.0, 2.0).unwrap();
        assert_eq!(spec.rand(&mut rng()), spec.rand(&mut rng()));
        let values = tensor(spec.rand(&mut rng())).to_vec::<f32>().unwrap();
        assert!(values.iter().all(|v| (-2.0..=2.0).contains(v)));
    }

    #[test]
    fn infinite_and_degenerate_bounds_sample_inside() {
        let mut rng = rng();
        for (low, high) in [
            (f64::NEG_INFINITY, f64::INFINITY),
            (3.0, f64::INFINITY),
            (f64::NEG_INFINITY, -3.0),
            (-f64::MAX, f64::MAX),
            (f64::INFINITY, f64::INFINITY),
            (1.5, 1.5),
        ] {
            for dtype in [DType::F32, DType::F64] {
                let spec = TensorSpec::bounded(&[16], dtype, low, high).unwrap();
                let value = spec.rand(&mut rng);
                assert!(spec.is_in(&value), "{spec}: {value:?}");
            }
        }
    }

    #[test]
    fn integer_kinds_sample_their_domains() {
        let mut rng = rng();
        let spec = TensorSpec::bounded(&[64], DType::I64, i64::MIN as f64, -1.0).unwrap();
        assert!(spec.is_in(&spec.rand(&mut rng)));
        let u8s = TensorSpec::unbounded(&[64], DType::U8);
        let values = tensor(u8s.rand(&mut rng)).to_vec::<u8>().unwrap();
        assert!(values.iter().all(|&v| v <= 10));
        let i8s = tensor(TensorSpec::unbounded(&[64], DType::I8).rand(&mut rng));
        assert!(i8s
            .to_vec::<i8>()
            .unwrap()
            .iter()
            .all(|v| (-10..=10).contains(v)));
        let cat = TensorSpec::categorical(&[64], DType::I32, 3).unwrap();
        let values = tensor(cat.rand(&mut rng)).to_vec::<i32>().unwrap();
        assert!(values.iter().all(|v| (0..3).contains(v)));
        assert!(values.contains(&2));
        let oh = TensorSpec::one_hot(&[5, 4], DType::Bool).unwrap();
        let rows = tensor(oh.rand(&mut rng)).to_vec::<bool>().unwrap();
        for row in rows.chunks(4) {
            assert_eq!(row.iter().filter(|&&b| b).count(), 1);
        }
        let mc = TensorSpec::multi_categorical(&[10, 2], DType::U8, vec![1, 5]).unwrap();
        let values = tensor(mc.rand(&mut rng)).to_vec::<u8>().unwrap();
        assert!(values.chunks(2).all(|p| p[0] == 0 && p[1] < 5));
        let b = TensorSpec::binary(&[3], DType::Bool).unwrap();
        assert!(b.is_in(&b.rand(&mut rng)));
    }

    #[test]
    fn zero_is_plain_zeros() {
        let spec = TensorSpec::bounded(&[2], DType::F32, 1.0, 2.0).unwrap();
        assert_eq!(tensor(spec.zero()), Tensor::zeros(DType::F32, &[2]));
        assert!(!spec.is_in(&spec.zero()));
        let oh = TensorSpec::one_hot(&[2], DType::I64).unwrap();
        assert_eq!(tensor(oh.zero()), Tensor::zeros(DType::I64, &[2]));
        let nt = TensorSpec::non_tensor(&[2, 1]);
        assert_eq!(
            nt.zero(),
            Entry::NonTensor(NonTensor::from(vec![vec![0i64], vec![0]]))
        );
    }

    #[test]
    fn composites_sample_tensordicts_of_their_shape() {
        let spec = Composite::new(&[2])
            .with("obs", TensorSpec::unbounded(&[2, 3], DType::F32))
            .unwrap()
            .with(
                ("next", "done"),
                TensorSpec::categorical(&[2, 1], DType::Bool, 2).unwrap(),
            )
            .unwrap();
        let td = spec.rand(&mut rng());
        assert_eq!(td.batch_size(), &[2]);
        assert_eq!(td.tensor(("next", "done")).unwrap().shape(), &[2, 1]);
        spec.check(&td).unwrap();
        spec.check(&spec.zero()).unwrap();
        let entry = TensorSpec::Composite(spec.clone()).rand(&mut rng());
        assert_eq!(entry, Entry::Dict(td));
    }

    #[test]
    fn stacked_specs_sample_when_their_parts_agree_in_shape() {
        let a = TensorSpec::bounded(&[1], DType::F32, -1.0, 1.0).unwrap();
        let b = TensorSpec::bounded(&[1], DType::F32, -2.0, 2.0).unwrap();
        let stacked = TensorSpec::lazy_stack(vec![a, b]).unwrap();
        assert_eq!(stacked.kind(), "stacked");
        let value = stacked.rand(&mut rng());
        assert_eq!(value.shape().as_slice(), &[2, 1]);
        assert!(stacked.is_in(&value));
        assert!(stacked.is_in(&stacked.zero()));
    }

    #[test]
    fn ragged_stacks_cannot_make_one_value() {
        let ragged = TensorSpec::lazy_stack(vec![
            TensorSpec::unbounded(&[4], DType::F32),
            TensorSpec::unbounded(&[3], DType::F32),
        ])
        .unwrap();
        let err = ragged.try_rand(&mut rng()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot make one value for the spec at key <root>: env 1 gives shape [3] and dtype f32 \
             but env 0 gives shape [4] and dtype f32"
        );
        assert!(ragged.try_zero().is_err());
        let mixed = TensorSpec::lazy_stack(vec![
            TensorSpec::unbounded(&[], DType::F32),
            TensorSpec::non_tensor(&[]),
        ])
        .unwrap();
        assert!(mixed
            .try_rand(&mut rng())
            .unwrap_err()
            .to_string()
            .contains("env 1 gives a non-tensor but env 0 gives a tensor"));
        let in_composite = Composite::new(&[])
            .with("obs", TensorSpec::unbounded(&[4], DType::F32))
            .unwrap();
        let other = Composite::new(&[])
            .with("obs", TensorSpec::unbounded(&[3], DType::F32))
            .unwrap();
        let both = Composite::stack(&[in_composite.clone(), in_composite.clone()]).unwrap();
        assert!(both.try_rand(&mut rng()).is_ok());
        let TensorSpec::Composite(lazy) = TensorSpec::lazy_stack(vec![
            TensorSpec::Composite(in_composite),
            TensorSpec::Composite(other),
        ])
        .unwrap() else {
            panic!("a composite")
        };
        let err = lazy.try_zero().unwrap_err();
        assert!(err.to_string().contains(r#"at key "obs""#), "{err}");
    }

    #[test]
    fn values_over_the_limit_are_refused_before_allocating() {
        // 4 TiB of zeros: refused, not left to the allocator (which aborts).
        let huge = TensorSpec::unbounded(&[1 << 40], DType::F32);
        let err = huge.try_zero().unwrap_err();
        assert!(matches!(err, SpecError::TooLarge { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "spec at key <root> is too large: a tensor of shape [1099511627776] and dtype f32 \
             would take 4398046511104 bytes, more than MAX_VALUE_BYTES (17179869184)"
        );
        assert_eq!(huge.try_rand(&mut rng()).unwrap_err(), err);
        // Every tensor kind, the same way.
        for spec in [
            TensorSpec::categorical(&[1 << 40, 2], DType::I64, 2).unwrap(),
            TensorSpec::binary(&[1 << 40], DType::U8).unwrap(),
            TensorSpec::one_hot(&[1 << 40, 2], DType::Bool).unwrap(),
            TensorSpec::multi_categorical(&[1 << 40, 1], DType::I64, vec![2]).unwrap(),
        ] {
            let err = spec.try_rand(&mut rng()).unwrap_err();
            assert!(
                err.to_string().contains("more than MAX_VALUE_BYTES"),
                "{spec}: {err}"
            );
            assert!(spec.try_zero().is_err(), "{spec}");
        }
        // Exactly at the limit is allowed (checked without allocating).
        let at_limit = TensorSpec::unbounded(&[1 << 34], DType::U8);
        assert_eq!(
            value_bytes(&at_limit, &NestedKey::default()),
            Ok(MAX_VALUE_BYTES)
        );
    }

    #[test]
    fn non_tensor_values_are_capped_in_size_and_depth() {
        let wide = TensorSpec::non_tensor(&[1 << 40]);
        let err = wide.try_zero().unwrap_err();
        assert!(
            err.to_string()
                .starts_with("spec at key <root> is too large: a non-tensor value of shape [1099511627776] would take"),
            "{err}"
        );
        assert!(wide.try_rand(&mut rng()).is_err());
        let deep = TensorSpec::non_tensor(&[1; MAX_NON_TENSOR_NDIM + 1]);
        assert_eq!(
            deep.try_zero().unwrap_err().to_string(),
            "spec at key <root> is too large: a non-tensor value of 65 dims is more than \
             MAX_NON_TENSOR_NDIM (64)"
        );
        let ok = TensorSpec::non_tensor(&[1; MAX_NON_TENSOR_NDIM]);
        assert_eq!(ok.zero().shape().len(), MAX_NON_TENSOR_NDIM);
        // A zero dim before a huge one: an empty stack, nothing built below.
        let empty = TensorSpec::non_tensor(&[0, usize::MAX]);
        assert_eq!(
            empty.zero(),
            Entry::NonTensor(NonTensor::Stack(vec![].into()))
        );
        let empty = TensorSpec::non_tensor(&[2, 0, usize::MAX]);
        assert_eq!(
            empty.try_rand(&mut rng()).unwrap(),
            Entry::NonTensor(NonTensor::Stack(
                vec![
                    NonTensor::Stack(vec![].into()),
                    NonTensor::Stack(vec![].into())
                ]
                .into()
            ))
        );
        assert!(empty.is_in(&empty.zero()));
    }

    #[test]
    fn composite_and_stacked_values_are_capped_in_all() {
        // Each entry is 10 GiB, under the limit; both are 20 GiB, over it.
        let ten_gib = || TensorSpec::unbounded(&[10 << 30], DType::U8);
        let both = Composite::new(&[])
            .with("a", ten_gib())
            .unwrap()
            .with(("next", "b"), ten_gib())
            .unwrap();
        let err = both.try_zero().unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec at key <root> is too large: its value's entries would take 21474836480 bytes \
             in all, more than MAX_VALUE_BYTES (17179869184)"
        );
        assert!(both.try_rand(&mut rng()).is_err());
        assert!(TensorSpec::Composite(both).try_zero().is_err());
        // One entry over the limit: the error names its key.
        let one = Composite::new(&[])
            .with(
                ("next", "obs"),
                TensorSpec::unbounded(&[1 << 40], DType::F64),
            )
            .unwrap();
        let err = one.try_rand(&mut rng()).unwrap_err();
        assert!(
            matches!(&err, SpecError::TooLarge { key, .. } if *key == NestedKey::from(("next", "obs"))),
            "{err:?}"
        );
        assert!(err
            .to_string()
            .starts_with(r#"spec at key ("next", "obs") is too large"#));
        // A lazy stack counts every part.
        let stacked = TensorSpec::lazy_stack(vec![
            ten_gib(),
            TensorSpec::unbounded(&[10 << 30], DType::I8),
        ])
        .unwrap();
        assert!(stacked
            .try_zero()
            .unwrap_err()
            .to_string()
            .contains("21474836480 bytes in all"));
    }

    #[test]
    fn an_empty_nvec_samples_an_empty_value() {
        let spec = TensorSpec::multi_categorical(&[3, 0], DType::I64, vec![]).unwrap();
        let value = spec.rand(&mut rng());
        assert_eq!(value.shape().as_slice(), &[3, 0]);
        assert!(spec.is_in(&value));
        assert_eq!(nvec_at(&[], 5), 1);
        assert_eq!(nvec_at(&[2, 7], 5), 7);
    }

    #[test]
    #[should_panic(expected = "spec at key <root> is too large")]
    fn zero_of_a_value_over_the_limit_panics_with_the_reason() {
        let _ = TensorSpec::unbounded(&[1 << 40], DType::F32).zero();
    }

    #[test]
    #[should_panic(expected = "cannot make one value")]
    fn rand_of_a_ragged_stack_panics_with_the_reason() {
        let ragged = TensorSpec::lazy_stack(vec![
            TensorSpec::unbounded(&[4], DType::F32),
            TensorSpec::unbounded(&[3], DType::F32),
        ])
        .unwrap();
        let _ = ragged.rand(&mut rng());
    }
}
