//! `DType`, the element types a tensor can hold, and `Element`, the Rust
//! types that stand for them in typed access.

use std::fmt;

/// The element type of a [`Tensor`](crate::Tensor).
///
/// Every dtype has a fixed size and alignment no larger than 8 bytes, so a
/// storage aligned to 8 bytes is aligned for all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// `bool`, stored as one byte that is always 0 or 1.
    Bool,
    /// `u8`.
    U8,
    /// `i8`.
    I8,
    /// `i16`.
    I16,
    /// `i32`.
    I32,
    /// `i64`.
    I64,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
}

impl DType {
    /// Every dtype, in the order of their codec tags.
    pub const ALL: [DType; 8] = [
        DType::Bool,
        DType::U8,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F32,
        DType::F64,
    ];

    /// Size of one element in bytes (also its alignment).
    pub const fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::I16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// The name used in messages and in `Display`: `bool`, `u8`, ... `f64`.
    pub const fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// True for `f32` and `f64`.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }

    /// A stable one-byte tag (used by the codec and by shared layouts).
    pub const fn tag(self) -> u8 {
        match self {
            DType::Bool => 0,
            DType::U8 => 1,
            DType::I8 => 2,
            DType::I16 => 3,
            DType::I32 => 4,
            DType::I64 => 5,
            DType::F32 => 6,
            DType::F64 => 7,
        }
    }

    /// The dtype of a tag written by [`DType::tag`], if any.
    pub const fn from_tag(tag: u8) -> Option<DType> {
        if (tag as usize) < DType::ALL.len() {
            Some(DType::ALL[tag as usize])
        } else {
            None
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that stands for one [`DType`]: `bool`, `u8`, `i8`, `i16`,
/// `i32`, `i64`, `f32` or `f64`.
///
/// Sealed: the set of element types is closed, so that a tensor's bytes are
/// always valid for its dtype.
pub trait Element:
    Copy + PartialEq + PartialOrd + fmt::Debug + Default + Send + Sync + 'static + sealed::Sealed
{
    /// The dtype this type stands for.
    const DTYPE: DType;

    /// Views bytes as elements; `None` if the length, the alignment or (for
    /// `bool`) a value is invalid.
    fn cast(bytes: &[u8]) -> Option<&[Self]>;

    /// Views bytes as mutable elements; `None` as for [`Element::cast`].
    fn cast_mut(bytes: &mut [u8]) -> Option<&mut [Self]>;

    /// Views elements as bytes.
    fn bytes(values: &[Self]) -> &[u8];

    /// Converts to `f64` (`true` is 1, integers as by `as`).
    fn to_f64(self) -> f64;

    /// Converts from `f64` as by `as` (saturating for integers; nonzero is
    /// `true` for `bool`).
    fn from_f64(value: f64) -> Self;
}

macro_rules! pod_element {
    ($($ty:ty => $dtype:ident),* $(,)?) => {$(
        impl sealed::Sealed for $ty {}
        impl Element for $ty {
            const DTYPE: DType = DType::$dtype;
            fn cast(bytes: &[u8]) -> Option<&[Self]> {
                bytemuck::try_cast_slice(bytes).ok()
            }
            fn cast_mut(bytes: &mut [u8]) -> Option<&mut [Self]> {
                bytemuck::try_cast_slice_mut(bytes).ok()
            }
            fn bytes(values: &[Self]) -> &[u8] {
                bytemuck::cast_slice(values)
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(value: f64) -> Self {
                value as $ty
            }
        }
    )*};
}

pod_element!(u8 => U8, i8 => I8, i16 => I16, i32 => I32, i64 => I64, f32 => F32, f64 => F64);

impl sealed::Sealed for bool {}
impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn cast(bytes: &[u8]) -> Option<&[Self]> {
        bytemuck::checked::try_cast_slice(bytes).ok()
    }
    fn cast_mut(bytes: &mut [u8]) -> Option<&mut [Self]> {
        bytemuck::checked::try_cast_slice_mut(bytes).ok()
    }
    fn bytes(values: &[Self]) -> &[u8] {
        bytemuck::cast_slice(values)
    }
    fn to_f64(self) -> f64 {
        if self {
            1.0
        } else {
            0.0
        }
    }
    fn from_f64(value: f64) -> Self {
        value != 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip_and_sizes_are_right() {
        for dtype in DType::ALL {
            assert_eq!(DType::from_tag(dtype.tag()), Some(dtype));
        }
        assert_eq!(DType::from_tag(8), None);
        assert_eq!(DType::F64.size(), 8);
        assert_eq!(DType::Bool.size(), 1);
        assert_eq!(DType::I16.to_string(), "i16");
    }

    #[test]
    fn bool_cast_rejects_invalid_bytes() {
        assert_eq!(bool::cast(&[0, 1]), Some(&[false, true][..]));
        assert_eq!(bool::cast(&[0, 2]), None);
    }
}
