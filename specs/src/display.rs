//! `Display` for specs: one line per leaf (`bounded(shape=[1], dtype=f32,
//! low=-2, high=2)`), TorchRL-like nested blocks for composites.

use std::fmt::{self, Write as _};

use tensordict::{DType, Element, Tensor};

use crate::elements::{all_equal, element_strings};
use crate::{Composite, StackedSpec, TensorSpec};

/// How many bound elements are shown before `...`.
const SHOWN_BOUNDS: usize = 6;

/// Floats at least this large in magnitude are shown with an exponent
/// (`1e20`, not twenty-one digits).
const EXPONENT_ABOVE: f64 = 1e16;

/// Floats this small in magnitude (but not zero) are shown with an
/// exponent.
const EXPONENT_BELOW: f64 = 1e-5;

/// A bound element as a reader wants it: a wide type's limit by name
/// (`f32::MAX` rather than 340282350000000000000000000000000000000, the
/// "unbounded" a Gymnasium box declares), infinities as `inf` / `-inf`,
/// very large or small floats with an exponent, anything else as `Display`
/// writes it.
trait BoundText: Element + fmt::Display {
    /// The element as shown in a bound.
    fn bound_text(self) -> String;
}

macro_rules! float_bound_text {
    ($($ty:ident),*) => {$(
        impl BoundText for $ty {
            fn bound_text(self) -> String {
                let magnitude = f64::from(self.abs());
                if self == $ty::MAX {
                    concat!(stringify!($ty), "::MAX").to_owned()
                } else if self == $ty::MIN {
                    concat!(stringify!($ty), "::MIN").to_owned()
                } else if self.is_finite()
                    && (magnitude >= EXPONENT_ABOVE
                        || (magnitude != 0.0 && magnitude < EXPONENT_BELOW))
                {
                    format!("{self:e}")
                } else {
                    // `inf`, `-inf`, `NaN`, or the shortest exact decimal.
                    self.to_string()
                }
            }
        }
    )*};
}

float_bound_text!(f32, f64);

macro_rules! int_bound_text {
    ($($ty:ident),*) => {$(
        impl BoundText for $ty {
            fn bound_text(self) -> String {
                if self == $ty::MAX {
                    concat!(stringify!($ty), "::MAX").to_owned()
                } else if self == $ty::MIN {
                    concat!(stringify!($ty), "::MIN").to_owned()
                } else {
                    self.to_string()
                }
            }
        }
    )*};
}

// Only the wide integers: `255` reads better than `u8::MAX` for a pixel.
int_bound_text!(i32, i64);

/// The elements of a bound tensor as shown, at most `max` of them; the
/// second value is true if some were left out.
fn bound_strings(bound: &Tensor, max: usize) -> (Vec<String>, bool) {
    fn texts<T: BoundText>(bound: &Tensor, max: usize) -> (Vec<String>, bool) {
        // The dtype was matched by the caller: `as_slice` is `Ok`.
        let values = bound.as_slice::<T>().unwrap_or_default();
        let shown = values.iter().take(max).map(|v| v.bound_text()).collect();
        (shown, values.len() > max)
    }
    match bound.dtype() {
        DType::F32 => texts::<f32>(bound, max),
        DType::F64 => texts::<f64>(bound, max),
        DType::I32 => texts::<i32>(bound, max),
        DType::I64 => texts::<i64>(bound, max),
        _ => element_strings(bound, max),
    }
}

/// A bound tensor: one number if every element is equal, else a list (cut
/// after [`SHOWN_BOUNDS`] elements).
fn write_bound(out: &mut String, bound: &Tensor) {
    let (values, more) = bound_strings(bound, SHOWN_BOUNDS);
    if let Some(first) = values
        .first()
        .filter(|_| values.len() == 1 || all_equal(bound))
    {
        out.push_str(first);
        return;
    }
    out.push('[');
    out.push_str(&values.join(", "));
    if more {
        let _ = write!(out, ", ... ({} in all)", bound.numel());
    }
    out.push(']');
}

fn write_spec(out: &mut String, spec: &TensorSpec, indent: usize) {
    match spec {
        TensorSpec::Unbounded(s) => {
            let _ = write!(out, "unbounded(shape={:?}, dtype={})", s.shape(), s.dtype());
        }
        TensorSpec::Bounded(s) => {
            let _ = write!(
                out,
                "bounded(shape={:?}, dtype={}, low=",
                s.shape(),
                s.dtype()
            );
            write_bound(out, s.low());
            out.push_str(", high=");
            write_bound(out, s.high());
            out.push(')');
        }
        TensorSpec::Categorical(s) => {
            let _ = write!(
                out,
                "categorical(shape={:?}, dtype={}, n={})",
                s.shape(),
                s.dtype(),
                s.n()
            );
        }
        TensorSpec::OneHot(s) => {
            let _ = write!(
                out,
                "one_hot(shape={:?}, dtype={}, n={})",
                s.shape(),
                s.dtype(),
                s.n()
            );
        }
        TensorSpec::Binary(s) => {
            let _ = write!(out, "binary(shape={:?}, dtype={})", s.shape(), s.dtype());
        }
        TensorSpec::MultiCategorical(s) => {
            let _ = write!(
                out,
                "multi_categorical(shape={:?}, dtype={}, nvec={:?})",
                s.shape(),
                s.dtype(),
                s.nvec()
            );
        }
        TensorSpec::NonTensor(s) => {
            let _ = write!(out, "non_tensor(shape={:?})", s.shape());
        }
        TensorSpec::Composite(c) => write_composite(out, c, indent),
        TensorSpec::Stacked(s) => write_stacked(out, s, indent),
    }
}

/// `Composite(` then one `key: spec,` line per entry, then `shape=[..])`.
fn write_composite(out: &mut String, composite: &Composite, indent: usize) {
    if composite.is_empty() {
        let _ = write!(out, "Composite(shape={:?})", composite.shape());
        return;
    }
    let pad = " ".repeat(indent + 4);
    out.push_str("Composite(\n");
    for (name, spec) in composite.iter() {
        let _ = write!(out, "{pad}{name}: ");
        write_spec(out, spec, indent + 4);
        out.push_str(",\n");
    }
    let _ = write!(out, "{pad}shape={:?})", composite.shape());
}

/// One line if every part fits on one, else a block with a line per part.
fn write_stacked(out: &mut String, stacked: &StackedSpec, indent: usize) {
    let parts: Vec<String> = stacked
        .parts()
        .iter()
        .map(|part| {
            let mut s = String::new();
            write_spec(&mut s, part, indent + 4);
            s
        })
        .collect();
    let shape = stacked.shape();
    if parts.iter().all(|p| !p.contains('\n')) {
        let _ = write!(
            out,
            "stacked(shape={:?}, parts=[{}])",
            shape.as_slice(),
            parts.join(", ")
        );
        return;
    }
    let pad = " ".repeat(indent + 4);
    out.push_str("stacked(\n");
    for (i, part) in parts.iter().enumerate() {
        let _ = writeln!(out, "{pad}{i}: {part},");
    }
    let _ = write!(out, "{pad}shape={:?})", shape.as_slice());
}

/// Compact: one line per leaf, e.g. `bounded(shape=[1], dtype=f32, low=-2,
/// high=2)` or `categorical(shape=[], dtype=i64, n=2)`; a composite as a
/// nested block in TorchRL's style.
impl fmt::Display for TensorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        write_spec(&mut out, self, 0);
        f.write_str(&out)
    }
}

/// A nested block in TorchRL's style: one `key: spec` line per entry, then
/// the shape.
impl fmt::Display for Composite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        write_composite(&mut out, self, 0);
        f.write_str(&out)
    }
}

/// `stacked(shape=[..], parts=[..])`, or a block when a part spans lines.
impl fmt::Display for StackedSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = String::new();
        write_stacked(&mut out, self, 0);
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests {
    use tensordict::DType;

    use super::*;

    #[test]
    fn leaves_are_one_line() {
        let cases = [
            (
                TensorSpec::unbounded(&[3], DType::F32),
                "unbounded(shape=[3], dtype=f32)",
            ),
            (
                TensorSpec::bounded(&[1], DType::F32, -2.0, 2.0).unwrap(),
                "bounded(shape=[1], dtype=f32, low=-2, high=2)",
            ),
            (
                TensorSpec::categorical(&[], DType::I64, 2).unwrap(),
                "categorical(shape=[], dtype=i64, n=2)",
            ),
            (
                TensorSpec::one_hot(&[2], DType::Bool).unwrap(),
                "one_hot(shape=[2], dtype=bool, n=2)",
            ),
            (
                TensorSpec::binary(&[3], DType::U8).unwrap(),
                "binary(shape=[3], dtype=u8)",
            ),
            (
                TensorSpec::multi_categorical(&[2], DType::I64, vec![2, 3]).unwrap(),
                "multi_categorical(shape=[2], dtype=i64, nvec=[2, 3])",
            ),
            (TensorSpec::non_tensor(&[]), "non_tensor(shape=[])"),
            (
                TensorSpec::bounded(&[0], DType::F64, 0.0, 1.0).unwrap(),
                "bounded(shape=[0], dtype=f64, low=[], high=[])",
            ),
            (
                TensorSpec::bounded(&[], DType::F64, f64::NEG_INFINITY, 0.5).unwrap(),
                "bounded(shape=[], dtype=f64, low=-inf, high=0.5)",
            ),
        ];
        for (spec, shown) in cases {
            assert_eq!(spec.to_string(), shown);
        }
    }

    #[test]
    fn per_element_bounds_are_listed() {
        let low = Tensor::from_vec(&[8], (0..8).map(|i| i as f32).collect()).unwrap();
        let high = Tensor::full(&[8], 10.0f32);
        let spec = TensorSpec::bounded_tensors(low, high).unwrap();
        assert_eq!(
            spec.to_string(),
            "bounded(shape=[8], dtype=f32, low=[0, 1, 2, 3, 4, 5, ... (8 in all)], high=10)"
        );
        let low = Tensor::from_vec(&[2], vec![-1i32, 0]).unwrap();
        let high = Tensor::from_vec(&[2], vec![1i32, 1]).unwrap();
        let spec = TensorSpec::bounded_tensors(low, high).unwrap();
        assert_eq!(
            spec.to_string(),
            "bounded(shape=[2], dtype=i32, low=[-1, 0], high=1)"
        );
    }

    #[test]
    fn limits_read_by_name_and_extremes_with_an_exponent() {
        let cases = [
            (
                TensorSpec::bounded(&[4], DType::F32, f64::from(f32::MIN), f64::from(f32::MAX))
                    .unwrap(),
                "bounded(shape=[4], dtype=f32, low=f32::MIN, high=f32::MAX)",
            ),
            (
                TensorSpec::bounded(&[], DType::F64, f64::MIN, f64::MAX).unwrap(),
                "bounded(shape=[], dtype=f64, low=f64::MIN, high=f64::MAX)",
            ),
            (
                TensorSpec::bounded(&[], DType::F32, f64::NEG_INFINITY, f64::INFINITY).unwrap(),
                "bounded(shape=[], dtype=f32, low=-inf, high=inf)",
            ),
            (
                TensorSpec::bounded(&[], DType::F64, -1e20, 1e-7).unwrap(),
                "bounded(shape=[], dtype=f64, low=-1e20, high=1e-7)",
            ),
            (
                TensorSpec::bounded(&[], DType::F64, 0.0, 1e15).unwrap(),
                "bounded(shape=[], dtype=f64, low=0, high=1000000000000000)",
            ),
            (
                TensorSpec::bounded(&[], DType::I64, i64::MIN as f64, i64::MAX as f64).unwrap(),
                "bounded(shape=[], dtype=i64, low=i64::MIN, high=i64::MAX)",
            ),
            (
                TensorSpec::bounded(&[], DType::I32, f64::from(i32::MIN), 7.0).unwrap(),
                "bounded(shape=[], dtype=i32, low=i32::MIN, high=7)",
            ),
            (
                TensorSpec::bounded(&[], DType::U8, 0.0, 255.0).unwrap(),
                "bounded(shape=[], dtype=u8, low=0, high=255)",
            ),
        ];
        for (spec, shown) in cases {
            assert_eq!(spec.to_string(), shown);
        }
        let low = Tensor::from_vec(&[3], vec![f32::MIN, -1.5, 0.0]).unwrap();
        let high = Tensor::from_vec(&[3], vec![f32::MAX, 2.5, 3e-6]).unwrap();
        let spec = TensorSpec::bounded_tensors(low, high).unwrap();
        assert_eq!(
            spec.to_string(),
            "bounded(shape=[3], dtype=f32, low=[f32::MIN, -1.5, 0], high=[f32::MAX, 2.5, 3e-6])"
        );
    }

    #[test]
    fn composites_are_nested_blocks() {
        let spec = Composite::new(&[])
            .with(
                "action",
                TensorSpec::bounded(&[1], DType::F32, -2.0, 2.0).unwrap(),
            )
            .unwrap()
            .with(
                ("next", "done"),
                TensorSpec::categorical(&[1], DType::Bool, 2).unwrap(),
            )
            .unwrap()
            .with("info", Composite::new(&[]).into())
            .unwrap();
        let expected = "Composite(
    action: bounded(shape=[1], dtype=f32, low=-2, high=2),
    info: Composite(shape=[]),
    next: Composite(
        done: categorical(shape=[1], dtype=bool, n=2),
        shape=[]),
    shape=[])";
        assert_eq!(spec.to_string(), expected);
        assert_eq!(TensorSpec::Composite(spec).to_string(), expected);
    }

    #[test]
    fn stacks_are_one_line_unless_a_part_spans_lines() {
        let stacked = TensorSpec::lazy_stack(vec![
            TensorSpec::unbounded(&[4], DType::F32),
            TensorSpec::unbounded(&[3], DType::F32),
        ])
        .unwrap();
        assert_eq!(
            stacked.to_string(),
            "stacked(shape=[2], parts=[unbounded(shape=[4], dtype=f32), unbounded(shape=[3], dtype=f32)])"
        );
        assert_eq!(
            stacked.as_stacked().unwrap().to_string(),
            stacked.to_string()
        );
        let a = Composite::new(&[])
            .with("x", TensorSpec::unbounded(&[], DType::F32))
            .unwrap();
        let b = Composite::new(&[]);
        let stacked = TensorSpec::lazy_stack(vec![a.into(), b.into()]).unwrap();
        let expected = "stacked(
    0: Composite(
        x: unbounded(shape=[], dtype=f32),
        shape=[]),
    1: Composite(shape=[]),
    shape=[2])";
        assert_eq!(stacked.to_string(), expected);
    }
}
