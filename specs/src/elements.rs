//! `Scalar`, typed element access for specs: each operation on elements is
//! written once, generic over the element type, and dispatched on a dtype
//! with [`with_scalar!`].

use std::fmt;

use tensordict::{DType, Element, Shape, Tensor};

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

/// The elements of a tensor whose dtype is `T` (checked by the caller).
pub(crate) fn slice<T: Scalar>(tensor: &Tensor) -> &[T] {
    tensor
        .as_slice::<T>()
        .expect("the caller matched the tensor's dtype")
}

/// A tensor of `shape` holding `values` (their number fills the shape).
pub(crate) fn tensor_of<T: Scalar>(shape: &[usize], values: Vec<T>) -> Tensor {
    Tensor::from_vec(shape, values).expect("one value per element")
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
        let values = slice::<T>(tensor);
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
}
