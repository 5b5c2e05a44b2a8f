//! `Scalar`, typed element access for specs: each operation on elements is
//! written once, generic over the element type, and dispatched on a dtype
//! with [`with_scalar!`].

use std::fmt;

use tensordict::{DType, Element, NonTensor, Shape, Tensor};

use crate::SpecError;

/// An element type with exact integer conversions (`Element::to_f64` is not
/// exact for large `i64`s).
pub(crate) trait Scalar: Element + fmt::Display {
    /// The smallest value as an `i64` (`i64::MIN` for floats, unused there).
    const MIN_I64: i64;
    /// The largest value as an `i64` (1 for bool; `i64::MAX` for floats,
    /// unused there).
    const MAX_I64: i64;
    /// The value as an `i64` (exact for integers and bool).
    fn to_i64(self) -> i64;
    /// The value of an `i64` known to be in `MIN_I64..=MAX_I64`.
    fn from_i64(value: i64) -> Self;
}

macro_rules! int_scalar {
    ($($ty:ty),*) => {$(
        impl Scalar for $ty {
            const MIN_I64: i64 = <$ty>::MIN as i64;
            const MAX_I64: i64 = <$ty>::MAX as i64;
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_i64(value: i64) -> Self {
                value as $ty
            }
        }
    )*};
}

int_scalar!(u8, i8, i16, i32, i64);

macro_rules! float_scalar {
    ($($ty:ty),*) => {$(
        impl Scalar for $ty {
            const MIN_I64: i64 = i64::MIN;
            const MAX_I64: i64 = i64::MAX;
            fn to_i64(self) -> i64 {
                self as i64
            }
            fn from_i64(value: i64) -> Self {
                value as $ty
            }
        }
    )*};
}

float_scalar!(f32, f64);

impl Scalar for bool {
    const MIN_I64: i64 = 0;
    const MAX_I64: i64 = 1;
    fn to_i64(self) -> i64 {
        i64::from(self)
    }
    fn from_i64(value: i64) -> Self {
        value != 0
    }
}

/// Runs `$body` with `$T` an alias of the [`Scalar`] type of `$dtype`.
macro_rules! with_scalar {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            tensordict::DType::Bool => {
                type $T = bool;
                $body
            }
            tensordict::DType::U8 => {
                type $T = u8;
                $body
            }
            tensordict::DType::I8 => {
                type $T = i8;
                $body
            }
            tensordict::DType::I16 => {
                type $T = i16;
                $body
            }
            tensordict::DType::I32 => {
                type $T = i32;
                $body
            }
            tensordict::DType::I64 => {
                type $T = i64;
                $body
            }
            tensordict::DType::F32 => {
                type $T = f32;
                $body
            }
            tensordict::DType::F64 => {
                type $T = f64;
                $body
            }
        }
    };
}
pub(crate) use with_scalar;

/// The elements of a tensor whose dtype is `T` (matched by the caller); an
/// error for a bool tensor holding a byte other than 0 or 1 (which
/// [`Tensor::bytes_mut`] can write), so callers that check values look for
/// those first with [`invalid_bool`].
pub(crate) fn slice<T: Scalar>(tensor: &Tensor) -> Result<&[T], SpecError> {
    Ok(tensor.as_slice::<T>()?)
}

/// The first element of a bool tensor that is neither 0 nor 1, with its
/// byte; `None` for other dtypes.
pub(crate) fn invalid_bool(tensor: &Tensor) -> Option<(usize, u8)> {
    if tensor.dtype() != DType::Bool {
        return None;
    }
    tensor
        .as_bytes()
        .iter()
        .enumerate()
        .find(|(_, &b)| b > 1)
        .map(|(index, &b)| (index, b))
}

/// The range `MIN..=MAX` of an integer or bool dtype as `i64`s; `None` for
/// floats.
pub(crate) fn int_range(dtype: DType) -> Option<(i64, i64)> {
    if dtype.is_float() {
        None
    } else {
        Some(with_scalar!(dtype, T => (T::MIN_I64, T::MAX_I64)))
    }
}

/// Number of elements of a shape, `None` on overflow.
pub(crate) fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Size in bytes of a tensor of this shape and dtype, `None` if the element
/// count or the byte size overflows `usize` (as `Tensor::try_zeros`).
pub(crate) fn tensor_bytes(shape: &[usize], dtype: DType) -> Option<usize> {
    numel(shape)?.checked_mul(dtype.size())
}

/// Size in bytes of a non-tensor value of this shape as nested stacks: one
/// [`NonTensor`] per node, `1 + d0 + d0*d1 + ...` nodes, and for each stack
/// (every node above the last level: `1 + d0 + ...` without its last term)
/// its shared elements' allocation ([`STACK_BYTES`]); `None` on overflow
/// (also when the element count overflows, even after a zero dim, as for
/// tensors).
pub(crate) fn non_tensor_bytes(shape: &[usize]) -> Option<usize> {
    numel(shape)?;
    let mut nodes = 1usize;
    let mut stacks = 0usize;
    let mut level = 1usize;
    for &d in shape {
        stacks = stacks.checked_add(level)?;
        level = level.checked_mul(d)?;
        nodes = nodes.checked_add(level)?;
    }
    nodes
        .checked_mul(std::mem::size_of::<NonTensor>())?
        .checked_add(stacks.checked_mul(STACK_BYTES)?)
}

/// What a stack's elements add besides the elements themselves: the `Arc`
/// of [`tensordict::Items`] (two counts) around a `Vec`.
const STACK_BYTES: usize = 2 * std::mem::size_of::<usize>() + std::mem::size_of::<Vec<NonTensor>>();

/// `[n]` followed by `shape`.
pub(crate) fn prepend(n: usize, shape: &[usize]) -> Shape {
    let mut out = Shape::with_capacity(shape.len() + 1);
    out.push(n);
    out.extend_from_slice(shape);
    out
}

/// The elements of a tensor written as in messages, at most `max` of them;
/// the second value is true if some were left out.
pub(crate) fn element_strings(tensor: &Tensor, max: usize) -> (Vec<String>, bool) {
    fn strings<T: Scalar>(tensor: &Tensor, max: usize) -> (Vec<String>, bool) {
        // Bound tensors are never bool, so never invalid: `slice` is `Ok`.
        let values = slice::<T>(tensor).unwrap_or_default();
        let shown = values.iter().take(max).map(T::to_string).collect();
        (shown, values.len() > max)
    }
    with_scalar!(tensor.dtype(), T => strings::<T>(tensor, max))
}

/// True if every element of the tensor is bit-for-bit equal to the first.
pub(crate) fn all_equal(tensor: &Tensor) -> bool {
    let size = tensor.dtype().size();
    let bytes = tensor.as_bytes();
    match bytes.get(..size) {
        Some(first) => bytes.chunks_exact(size).all(|chunk| chunk == first),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_conversions_are_exact() {
        assert_eq!(i64::MAX.to_i64(), i64::MAX);
        assert_eq!(<u8 as Scalar>::from_i64(255), 255u8);
        assert_eq!(int_range(DType::U8), Some((0, 255)));
        assert_eq!(int_range(DType::Bool), Some((0, 1)));
        assert_eq!(int_range(DType::F32), None);
        assert!(<bool as Scalar>::from_i64(1));
    }

    #[test]
    fn element_strings_use_the_element_type() {
        let t = Tensor::from_vec(&[3], vec![0.1f32, -2.0, 2.5]).unwrap();
        assert_eq!(
            element_strings(&t, 2),
            (vec!["0.1".to_owned(), "-2".to_owned()], true)
        );
        assert!(!all_equal(&t));
        assert!(all_equal(&Tensor::full(&[4], 7i16)));
        assert!(all_equal(&Tensor::zeros(DType::I16, &[0])));
        assert_eq!(prepend(2, &[3]).as_slice(), &[2, 3]);
        assert_eq!(numel(&[usize::MAX, 2]), None);
    }

    #[test]
    fn sizes_overflow_to_none() {
        assert_eq!(tensor_bytes(&[2, 3], DType::F32), Some(24));
        assert_eq!(tensor_bytes(&[usize::MAX / 2, 3], DType::U8), None);
        assert_eq!(tensor_bytes(&[usize::MAX / 2 + 1], DType::I16), None);
        assert_eq!(tensor_bytes(&[usize::MAX, 2, 0], DType::U8), None);
        let node = std::mem::size_of::<NonTensor>();
        assert_eq!(non_tensor_bytes(&[]), Some(node));
        assert_eq!(
            non_tensor_bytes(&[2, 3]),
            Some((1 + 2 + 6) * node + (1 + 2) * STACK_BYTES)
        );
        assert_eq!(non_tensor_bytes(&[0, usize::MAX]), Some(node + STACK_BYTES));
        assert_eq!(non_tensor_bytes(&[usize::MAX]), None);
        assert_eq!(non_tensor_bytes(&[usize::MAX, 2]), None);
    }

    #[test]
    fn invalid_bool_bytes_are_found_not_sliced() {
        let mut t = Tensor::zeros(DType::Bool, &[3]);
        t.bytes_mut()[1] = 7;
        assert_eq!(invalid_bool(&t), Some((1, 7)));
        let err = slice::<bool>(&t).unwrap_err();
        assert!(
            err.to_string().contains("invalid bytes for dtype bool"),
            "{err}"
        );
        assert_eq!(invalid_bool(&Tensor::zeros(DType::U8, &[3])), None);
        let (shown, _) = element_strings(&t, 2);
        assert!(shown.is_empty());
    }
}
