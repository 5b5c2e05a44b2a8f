//! Numpy arrays over tensors' storage, without a copy: the one module of
//! the bindings with `unsafe`.
//!
//! A tensor handed to Python is first made the only owner of its bytes
//! ([`Tensor::bytes_mut`] copies them if anything else shares them), then
//! moved into an [`Owner`] that becomes the array's base object: the bytes
//! live as long as the array (and any view of it), nothing in Rust reads or
//! writes them again, so the array can be writable (`torch.from_numpy`
//! takes it without a copy or a warning).

use std::ptr;

use numpy::npyffi::{self, npy_intp, NPY_ARRAY_WRITEABLE, PY_ARRAY_API};
use numpy::{PyArrayDescr, PyArrayDescrMethods};
use pool::tensordict::{DType, Tensor};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use smallvec::SmallVec;

/// Keeps a tensor's storage alive for the numpy arrays over it.
#[pyclass(frozen, module = "rlpool._native")]
pub(crate) struct Owner {
    _tensor: Tensor,
}

/// The numpy dtype of a tensor dtype.
pub(crate) fn descr(py: Python<'_>, dtype: DType) -> Bound<'_, PyArrayDescr> {
    match dtype {
        DType::Bool => numpy::dtype::<bool>(py),
        DType::U8 => numpy::dtype::<u8>(py),
        DType::I8 => numpy::dtype::<i8>(py),
        DType::I16 => numpy::dtype::<i16>(py),
        DType::I32 => numpy::dtype::<i32>(py),
        DType::I64 => numpy::dtype::<i64>(py),
        DType::F32 => numpy::dtype::<f32>(py),
        DType::F64 => numpy::dtype::<f64>(py),
    }
}

/// A writable numpy array over `tensor`'s elements (copied first only if
/// their storage is shared).
pub(crate) fn to_numpy(py: Python<'_>, mut tensor: Tensor) -> PyResult<Bound<'_, PyAny>> {
    let descr = descr(py, tensor.dtype());
    let mut dims: SmallVec<[npy_intp; 4]> = SmallVec::new();
    for &d in tensor.shape() {
        dims.push(npy_intp::try_from(d).map_err(|_| {
            PyValueError::new_err(format!("shape {:?} is too large for numpy", tensor.shape()))
        })?);
    }
    let ndim = std::os::raw::c_int::try_from(dims.len())
        .map_err(|_| PyValueError::new_err("too many dims for numpy"))?;
    // Unique from here on: no other tensor sees these bytes.
    let data = tensor.bytes_mut().as_mut_ptr();
    let owner = Bound::new(py, Owner { _tensor: tensor })?;
    // SAFETY: `descr` is a valid dtype (its reference is given to numpy by
    // `into_dtype_ptr`); `dims` holds `ndim` sizes; `data` points to the
    // tensor's bytes, exactly `prod(dims) * itemsize` of them, aligned
    // for the dtype (storage is 8-byte aligned and the view's offset is a
    // multiple of the dtype's size), and stays valid and unaliased by Rust
    // for as long as `owner` lives, which the array keeps as its base. Null
    // strides ask for C order.
    unsafe {
        let array = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type),
            descr.into_dtype_ptr(),
            ndim,
            dims.as_mut_ptr(),
            ptr::null_mut(),
            data.cast(),
            NPY_ARRAY_WRITEABLE,
            ptr::null_mut(),
        );
        if array.is_null() {
            return Err(PyErr::fetch(py));
        }
        let array = Bound::from_owned_ptr(py, array);
        // Steals the reference to `owner` (also on failure).
        if PY_ARRAY_API.PyArray_SetBaseObject(py, array.as_ptr().cast(), owner.into_ptr()) < 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(array)
    }
}
